"""The MCP server's stdin and stdout on the event loop: lines as the SDK reads them, answers as it writes them."""

from __future__ import annotations

import asyncio
import os
import threading
import typing as t

import anyio
import pytest
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

from cancelkernel.mcp import stdio


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


def test_the_end_of_input_waits_for_the_answer_of_every_request_read() -> None:
    """stdin ends while tools/list runs: the SDK sees the end only once its answer went out."""

    async def main() -> list[str]:
        into_server, read_side = anyio.create_memory_object_stream[SessionMessage](4)
        write_side, from_server = anyio.create_memory_object_stream[SessionMessage](4)
        unanswered = stdio.Unanswered()
        read, write = unanswered.reading(read_side), unanswered.writing(write_side)
        await into_server.send(SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=2, method="tools/list")))
        await into_server.send(SessionMessage(JSONRPCNotification(jsonrpc="2.0", method="notifications/initialized")))
        await into_server.aclose()
        first, _ = [item.message async for item in _take(read, 2)]
        assert isinstance(first, JSONRPCRequest), first
        assert first.id == 2
        events: list[str] = []

        async def reach_the_end() -> None:
            with pytest.raises(anyio.EndOfStream):
                await read.receive()
            events.append("ended")

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(reach_the_end)
            await anyio.wait_all_tasks_blocked()  # the reader now waits at the end, or has already ended
            events.append("answered")
            await write.send(SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=2, result={})))
        for stream in (read_side, write_side, from_server):
            stream.close()
        return events

    assert anyio.run(main) == ["answered", "ended"]


def test_the_end_of_input_with_every_request_answered_comes_at_once() -> None:
    async def main() -> None:
        into_server, read_side = anyio.create_memory_object_stream[SessionMessage](4)
        write_side, from_server = anyio.create_memory_object_stream[SessionMessage](4)
        unanswered = stdio.Unanswered()
        read, write = unanswered.reading(read_side), unanswered.writing(write_side)
        await into_server.send(SessionMessage(JSONRPCRequest(jsonrpc="2.0", id="a", method="ping")))
        await into_server.aclose()
        await read.receive()
        await write.send(SessionMessage(JSONRPCResponse(jsonrpc="2.0", id="a", result={})))
        with anyio.fail_after(30), pytest.raises(anyio.EndOfStream):
            await read.receive()
        for stream in (read_side, write_side, from_server):
            stream.close()

    anyio.run(main)


async def _take(stream: t.Any, count: int) -> t.AsyncIterator[SessionMessage]:
    for _ in range(count):
        yield await stream.receive()
