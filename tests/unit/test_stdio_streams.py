"""The MCP server's stdin and stdout on the event loop: lines as the SDK reads them, answers as it writes them."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from cancelkernel.mcp import stdio


@pytest.fixture(autouse=True)
def no_grace_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing here waits for answers after the end of input."""
    monkeypatch.setattr(stdio, "EOF_GRACE", 0.0)


async def read_all(chunks: list[bytes]) -> list[str]:
    """What `async for line in lines` gives for stdin written in these chunks, then closed."""
    into, wire_in = os.pipe()
    wire_out, out = os.pipe()
    try:
        async with stdio.streams(into, out) as (lines, _):
            for chunk in chunks:
                os.write(wire_in, chunk)
                await asyncio.sleep(0.01)  # each chunk arrives on its own
            os.close(wire_in)
            wire_in = -1
            return [line async for line in lines]
    finally:
        for fd in (into, out, wire_out, wire_in):
            if fd >= 0:
                os.close(fd)


def test_lines_split_across_reads_come_whole_with_their_newline() -> None:
    chunks = [b'{"a": 1}\n{"b":', b" 2}\n", b'{"c": "\xc3', b'\xa9"}\n{"d": 4}\r\n', b'{"last": 5}']
    assert asyncio.run(read_all(chunks)) == ['{"a": 1}\n', '{"b": 2}\n', '{"c": "é"}\n', '{"d": 4}\n', '{"last": 5}']


def test_bad_bytes_are_replaced_as_a_text_file_reads_them() -> None:
    assert asyncio.run(read_all([b"\xff\xfe\n"])) == ["\ufffd\ufffd\n"]


def test_many_lines_at_once_are_all_read_and_end_at_eof() -> None:
    lines = [f'{{"id": {i}}}\n'.encode() for i in range(stdio.MAX_QUEUED_LINES * 3)]
    assert asyncio.run(read_all([b"".join(lines)])) == [line.decode() for line in lines]


def test_answers_reach_the_pipe_whole_and_in_order() -> None:
    big = "x" * 300_000  # more than a pipe holds: the write waits until the reader takes it
    texts = ['{"id": 1}\n', f'{{"big": "{big}"}}\n', '{"é": 2}\n']
    expected = "".join(texts).encode()
    got = bytearray()
    into, wire_in = os.pipe()
    wire_out, out = os.pipe()

    def drain() -> None:  # the MCP client, reading as the answers come
        while len(got) < len(expected) and (chunk := os.read(wire_out, 1 << 20)):
            got.extend(chunk)

    async def write() -> None:
        async with stdio.streams(into, out) as (_, answers):
            for text in texts:
                await answers.write(text)
                await answers.flush()

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        asyncio.run(write())
        reader.join(30)
    finally:
        for fd in (into, out, wire_in):
            os.close(fd)
        reader.join(30)
        os.close(wire_out)
    assert bytes(got) == expected
