"""The stdio transport served on the event loop: each message read and written as it comes, no worker thread per line.

The SDK's own stdio transport reads every line and writes every answer on a
worker thread (three thread hand-overs per call); here the event loop watches
the pipes itself.  The SDK still parses, dispatches and serialises every
message (`stdio_server` with our two streams).  As the SDK does, fd 0 and fd 1
are taken off the wire while the server runs (fd 0 reads /dev/null, fd 1
writes to stderr), so a kernel or a stray print never writes into the protocol;
both are put back at the end.  Anything but pipes and sockets (a terminal, a
file, Windows) is served by the SDK's transport.

Either way, when stdin ends the server first answers every request it has
read (`printf '...' | cancelkernel mcp` gets all its answers, however slow
the machine), waiting at most END_OF_INPUT_WAIT seconds for them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import stat
import sys
import typing as t
from collections.abc import AsyncIterator, Iterator

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCError, JSONRPCRequest, JSONRPCResponse

# Complete lines kept unread before reading pauses (the SDK takes one message at a time).
MAX_QUEUED_LINES = 64
# Seconds the requests still unanswered when stdin ends get before the SDK cancels them (an execute's own wait
# is bounded well below this; a client that needs the server gone sooner sends SIGTERM).
END_OF_INPUT_WAIT = 60.0


async def serve(server: MCPServer) -> None:
    """Serve `server` over this process's stdin and stdout until stdin ends."""
    lowlevel = server._lowlevel_server  # what the SDK's run_stdio_async serves
    with _claimed() as wire:
        async with contextlib.AsyncExitStack() as stack:
            if wire is None:
                read, write = await stack.enter_async_context(stdio_server())
            else:
                lines, answers = await stack.enter_async_context(streams(*wire))
                read, write = await stack.enter_async_context(
                    stdio_server(stdin=t.cast(t.Any, lines), stdout=t.cast(t.Any, answers))
                )
            unanswered = Unanswered()
            await lowlevel.run(
                t.cast(t.Any, unanswered.reading(read)),
                t.cast(t.Any, unanswered.writing(write)),
                lowlevel.create_initialization_options(),
            )


def _pipes() -> bool:
    """stdin and stdout are two pipes (or two sockets: a Node.js client's socket pairs), not one socket both ways."""
    if sys.platform == "win32":
        return False  # the event loop's pipe transports are POSIX ones
    try:
        given = os.fstat(0), os.fstat(1)
    except OSError:
        return False
    if (given[0].st_dev, given[0].st_ino) == (given[1].st_dev, given[1].st_ino):
        return False  # one socket for both: the write side would take incoming requests for a closed peer
    return all(stat.S_ISFIFO(s.st_mode) or stat.S_ISSOCK(s.st_mode) for s in given)


@contextlib.contextmanager
def _claimed() -> Iterator[tuple[int, int] | None]:
    """Copies of fd 0 and fd 1 for the wire, while fd 0 reads /dev/null and fd 1 writes to stderr (None: no pipes)."""
    if not _pipes():
        yield None
        return
    import fcntl  # POSIX: only past _pipes()

    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    blocking = os.get_blocking(wire_in), os.get_blocking(wire_out)
    null = os.open(os.devnull, os.O_RDWR)
    try:
        os.dup2(null, 0)
        try:
            os.dup2(2, 1)
        except OSError:  # no stderr: stray output goes nowhere
            os.dup2(null, 1)
        yield wire_in, wire_out
    finally:
        os.close(null)
        for fd, wire, was in ((0, wire_in, blocking[0]), (1, wire_out, blocking[1])):
            # The event loop made the pipe non-blocking: whoever uses it next expects it as it was.
            with contextlib.suppress(OSError):
                os.set_blocking(wire, was)
            with contextlib.suppress(OSError):
                os.dup2(wire, fd)
            with contextlib.suppress(OSError):
                os.close(wire)


@contextlib.asynccontextmanager
async def streams(wire_in: int, wire_out: int) -> AsyncIterator[tuple[Lines, Answers]]:
    """The two pipes on the running event loop (their own descriptors, closed at the end)."""
    loop = asyncio.get_running_loop()
    lines = Lines()
    answers = Answers()
    reading, _ = await loop.connect_read_pipe(lambda: lines, os.fdopen(os.dup(wire_in), "rb", buffering=0))
    writing, _ = await loop.connect_write_pipe(lambda: answers, os.fdopen(os.dup(wire_out), "wb", buffering=0))
    try:
        yield lines, answers
    finally:
        reading.close()
        writing.close()  # what the pipe has not taken yet is still written, then it closes
        await answers.drained(END_OF_INPUT_WAIT)


class Lines(asyncio.Protocol):
    """stdin as the SDK reads it: `async for line in lines`, each line as UTF-8 (bad bytes replaced), newline kept."""

    def __init__(self) -> None:
        self._partial = bytearray()
        self._lines: collections.deque[bytes] = collections.deque()
        self._more = asyncio.Event()
        self._ended = False
        self._paused = False
        self._transport: asyncio.ReadTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = t.cast(asyncio.ReadTransport, transport)

    def data_received(self, data: bytes) -> None:
        self._partial += data
        if b"\n" in data:
            *complete, rest = bytes(self._partial).split(b"\n")
            self._lines.extend(line.removesuffix(b"\r") + b"\n" for line in complete)  # as a text file reads \r\n
            self._partial = bytearray(rest)
            self._more.set()
            if len(self._lines) >= MAX_QUEUED_LINES and self._transport is not None and not self._paused:
                self._paused = True
                self._transport.pause_reading()

    def eof_received(self) -> bool | None:
        self._end()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._end()

    def _end(self) -> None:
        if self._partial:
            self._lines.append(bytes(self._partial))  # the last line, without a newline
            self._partial.clear()
        self._ended = True
        self._more.set()

    def __aiter__(self) -> Lines:
        return self

    async def __anext__(self) -> str:
        while not self._lines:
            if self._ended:  # no line comes after the end
                raise StopAsyncIteration
            self._more.clear()
            await self._more.wait()
        line = self._lines.popleft()
        if self._paused and len(self._lines) < MAX_QUEUED_LINES // 2 and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        return line.decode("utf-8", errors="replace")


class Answers(asyncio.Protocol):
    """stdout as the SDK writes it: `await write(text)` returns once the pipe has room for more; flush() is a no-op."""

    def __init__(self) -> None:
        self._room = asyncio.Event()
        self._room.set()
        self._closed = asyncio.Event()
        self._lost: BaseException | None = None
        self._transport: asyncio.WriteTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = t.cast(asyncio.WriteTransport, transport)

    def pause_writing(self) -> None:
        self._room.clear()

    def resume_writing(self) -> None:
        self._room.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = exc or BrokenPipeError("the MCP client closed the server's stdout")
        self._room.set()
        self._closed.set()

    async def drained(self, timeout: float) -> None:
        """Until the closed pipe has taken every answer (or `timeout` seconds: a client that stopped reading)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closed.wait(), timeout)

    async def write(self, text: str) -> None:
        if self._lost is None and self._transport is not None:
            self._transport.write(text.encode("utf-8"))
            await self._room.wait()  # the client reads slower than we answer: wait, as a blocking write would
        if self._lost is not None or self._transport is None:
            raise BrokenPipeError("the MCP client closed the server's stdout") from self._lost

    async def flush(self) -> None:
        return None


class Unanswered:
    """The client's requests read and not yet answered: at the end of stdin the server answers them before it stops.

    The SDK's serving loop ends when its read stream ends and cancels the
    requests still running, so the end of the read stream is held back until
    every request has its answer (or END_OF_INPUT_WAIT passed).
    """

    def __init__(self) -> None:
        self._ids: set[str | int] = set()
        self._none = anyio.Event()
        self._none.set()

    def reading(self, stream: t.Any) -> _HeldEnd:
        return _HeldEnd(stream, self)

    def writing(self, stream: t.Any) -> _Answering:
        return _Answering(stream, self)

    def read(self, item: object) -> None:
        if isinstance(item, SessionMessage) and isinstance(item.message, JSONRPCRequest):
            if not self._ids:
                self._none = anyio.Event()
            self._ids.add(item.message.id)

    def answered(self, item: object) -> None:
        if isinstance(item, SessionMessage) and isinstance(item.message, JSONRPCResponse | JSONRPCError):
            self._ids.discard(item.message.id)
            if not self._ids:
                self._none.set()

    async def settled(self) -> None:
        """Until every request read has its answer, or END_OF_INPUT_WAIT seconds (then a line on stderr says so)."""
        if not self._ids:
            return
        with anyio.move_on_after(END_OF_INPUT_WAIT):
            await self._none.wait()
        if self._ids:
            print(
                f"cancelkernel mcp: stdin ended; {len(self._ids)} request(s) still unanswered after "
                f"{END_OF_INPUT_WAIT:g} s are cancelled",
                file=sys.stderr,
            )


class _HeldEnd:
    """The SDK's read stream, whose end waits for the answers of the requests it delivered."""

    def __init__(self, stream: t.Any, unanswered: Unanswered) -> None:
        self._stream = stream
        self._unanswered = unanswered

    def __getattr__(self, name: str) -> t.Any:
        return getattr(self._stream, name)  # last_context, close, clone: the SDK's stream as it is

    async def receive(self) -> t.Any:
        try:
            item = await self._stream.receive()
        except anyio.EndOfStream:
            await self._unanswered.settled()
            raise
        self._unanswered.read(item)
        return item

    def __aiter__(self) -> _HeldEnd:
        return self

    async def __anext__(self) -> t.Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> _HeldEnd:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _Answering:
    """The SDK's write stream, noting each answer that goes out."""

    def __init__(self, stream: t.Any, unanswered: Unanswered) -> None:
        self._stream = stream
        self._unanswered = unanswered

    def __getattr__(self, name: str) -> t.Any:
        return getattr(self._stream, name)

    async def send(self, item: t.Any) -> None:
        await self._stream.send(item)
        self._unanswered.answered(item)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> _Answering:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
