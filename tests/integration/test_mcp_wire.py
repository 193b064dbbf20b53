"""`cancelkernel mcp`'s stdin and stdout as clients hand them over (pipes, socket pairs, a file); input that ends."""

from __future__ import annotations

import json
import socket
import subprocess
import typing as t

import pytest
from mcp_helpers import command, server_env

pytestmark = pytest.mark.timeout(120)

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "wire-test", "version": "1"},
    },
}
REQUESTS = [
    INITIALIZE,
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
]


def lines(messages: list[dict[str, t.Any]]) -> bytes:
    return "".join(json.dumps(m) + "\n" for m in messages).encode()


def answered(output: bytes) -> dict[int, dict[str, t.Any]]:
    """The answers on stdout by request id (nothing else may be written there)."""
    answers = [json.loads(line) for line in output.decode().splitlines()]
    return {a["id"]: a for a in answers}


def check(answers: dict[int, dict[str, t.Any]]) -> None:
    assert sorted(answers) == [1, 2], answers
    assert answers[1]["result"]["serverInfo"]["name"] == "cancelkernel"
    assert "execute" in [tool["name"] for tool in answers[2]["result"]["tools"]]


def test_requests_piped_in_then_stdin_closed_are_answered() -> None:
    """`printf '...' | cancelkernel mcp`: the quick requests read just before the end of input get their answers."""
    done = subprocess.run(command(), input=lines(REQUESTS), capture_output=True, env=server_env(), timeout=90)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    check(answered(done.stdout))


def test_socket_pairs_for_stdin_and_stdout_are_served() -> None:
    """A Node.js client's child has a socket pair on each of stdin and stdout, not pipes."""
    ours_in, theirs_in = socket.socketpair()
    ours_out, theirs_out = socket.socketpair()
    with ours_in, ours_out:
        process = subprocess.Popen(command(), stdin=theirs_in.fileno(), stdout=theirs_out.fileno(), env=server_env())
        theirs_in.close()
        theirs_out.close()
        try:
            replies = ours_out.makefile("rb")
            ours_in.sendall(lines(REQUESTS[:1]))
            first = json.loads(replies.readline())  # one answer before the next request: a client that waits
            ours_in.sendall(lines(REQUESTS[1:]))
            second = json.loads(replies.readline())
            ours_in.shutdown(socket.SHUT_WR)  # end of input: the server exits
            assert process.wait(60) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(10)
    check({first["id"]: first, second["id"]: second})


def test_a_file_as_stdin_is_served_by_the_sdks_transport(tmp_path: t.Any) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(lines(REQUESTS))
    with open(requests, "rb") as stdin:
        done = subprocess.run(command(), stdin=stdin, capture_output=True, env=server_env(), timeout=90)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    check(answered(done.stdout))
