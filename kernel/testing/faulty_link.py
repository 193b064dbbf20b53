"""A fault-injecting link made by the test: a TCP proxy on loopback between a client and a server.

    with faulty_link(server_port, Faults(delay=0.05, jitter=0.01, loss=0.01)) as link:
        AgentKernel(server_url=link.url, ...)  # every byte both ways crosses the link
        link.cut(3.0)                          # every connection reset, new ones refused for 3 s
        link.retarget(other_port)              # the server "restarted" at another port, same address

What it models, per direction, at the level the application sees TCP:
`delay` one way (plus `jitter`, uniform in [-jitter, +jitter]); bytes stay
in order, so a late chunk holds the ones behind it (TCP's head-of-line
blocking, as netem's reordering looks after TCP puts it back in order).
`loss` is a fraction of packets: a chunk of n bytes is hit with the
probability that one of its ceil(n / 1448) packets is lost, and a hit chunk
(and everything behind it) waits one retransmission timeout more, at least
200 ms (Linux's minimum RTO).  `cut` resets every open connection (what was
in flight is lost, as when a middlebox drops the connections) and refuses
new ones until it heals; `stall` holds every byte without closing anything
(a partition that TCP outlives).

What it cannot model, unlike `tc netem` in a network namespace: packets
(one chunk is whatever one read returned), congestion control and its
window collapse after a loss, retransmission backoff past the first RTO,
duplicated or corrupted packets, bandwidth, and a cut that TCP itself
notices (its keepalive or retransmission timeouts): here the proxy decides.
The handshake of a new connection is not delayed either (only its bytes).
It needs no root and runs anywhere loopback does.

The proxy runs its own asyncio loop on a thread; the methods are thread-safe
and each waits for the loop to have done what it says.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import threading
import time
import typing as t
from collections.abc import Iterator
from dataclasses import dataclass, field

# Bytes a chunk carries per packet (an Ethernet MTU's TCP payload), for the loss of a chunk.
PACKET = 1448
# Linux's minimum retransmission timeout: what a lost packet costs at least.
MIN_RTO = 0.2
READ_SIZE = 65536
# Chunks queued per direction before the proxy stops reading (the sender then waits, as with a full window).
QUEUE_CHUNKS = 1024
# Seconds a call from another thread waits for the loop (it only ever schedules small steps).
CALL_TIMEOUT = 10.0


@dataclass
class Faults:
    """What the link does to every byte: one-way delay and jitter (seconds), loss (a fraction of packets)."""

    delay: float = 0.0
    jitter: float = 0.0
    loss: float = 0.0
    seed: int | None = None

    @property
    def round_trip(self) -> float:
        """The link's own round trip (no loss): what an interrupt's answer must cross once."""
        return 2 * self.delay

    def retransmit(self) -> float:
        """What one lost packet adds: one retransmission timeout (RTO >= 200 ms, and above the round trip)."""
        return max(MIN_RTO, 2 * self.round_trip)


@dataclass
class Cut:
    """One cut, as the proxy saw it."""

    started: float  # time.monotonic()
    seconds: float | None  # None: until heal()
    connections_reset: int = 0
    bytes_dropped: int = 0  # read from one side, never delivered to the other
    ended: float | None = None
    refused: int = 0  # connections refused while it lasted


@dataclass
class _Direction:
    """One direction of one connection: chunks waiting for their delivery time."""

    writer: asyncio.StreamWriter
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(QUEUE_CHUNKS))
    last_delivery: float = 0.0
    queued_bytes: int = 0


class _Connection:
    """A client's connection and the proxy's connection upstream, with their four tasks."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter):
        self.writers = (client, upstream)
        self.tasks: list[asyncio.Task] = []
        self.directions: list[_Direction] = []

    def abort(self) -> int:
        """Reset both sides now; the bytes that were still queued (dropped)."""
        dropped = sum(d.queued_bytes for d in self.directions)
        for task in self.tasks:
            task.cancel()
        for writer in self.writers:
            writer.transport.abort()
        return dropped


class FaultyLink:
    """The proxy: listens on 127.0.0.1 (a free port), forwards to `upstream_port` through `faults`."""

    def __init__(self, upstream_port: int, faults: Faults | None = None, *, upstream_host: str = "127.0.0.1"):
        self.faults = faults or Faults()
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.cuts: list[Cut] = []
        self.connections_made = 0
        self.chunks_lost = 0  # chunks that paid a retransmission
        self._random = random.Random(self.faults.seed)
        self._connections: set[_Connection] = set()
        self._cut: Cut | None = None
        self._stalled_until = 0.0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="cancelkernel-faulty-link", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- from the test's thread --

    def start(self) -> FaultyLink:
        self._thread.start()
        self._call(self._listen())
        return self

    def close(self) -> None:
        """Reset every connection and stop listening; the loop's thread ends."""
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self._call(self._shut())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CALL_TIMEOUT)
        if not self._thread.is_alive():
            self._loop.close()

    def cut(self, seconds: float | None) -> Cut:
        """Reset every open connection (what was in flight is lost) and refuse new ones for `seconds`
        (None: until heal()).  Returns the cut, which the proxy fills in as it goes."""
        return t.cast(Cut, self._call(self._start_cut(seconds)))

    def heal(self) -> None:
        """End the cut now: new connections are forwarded again."""
        self._call(self._end_cut())

    @property
    def cut_active(self) -> bool:
        return self._cut is not None

    def stall(self, seconds: float) -> None:
        """Hold every byte, both ways, for `seconds` without closing anything (TCP outlives such a partition)."""
        self._call(self._stall(seconds))

    def retarget(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        """New connections go to another server from now on (open ones stay where they are)."""
        self.upstream = (upstream_host, upstream_port)

    def __enter__(self) -> FaultyLink:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, coro: t.Coroutine) -> t.Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(CALL_TIMEOUT)

    # -- on the loop --

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _shut(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.abort()
        self._connections.clear()
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)  # every pump ended before the loop stops

    async def _start_cut(self, seconds: float | None) -> Cut:
        cut = Cut(started=time.monotonic(), seconds=seconds)
        for connection in list(self._connections):
            cut.connections_reset += 1
            cut.bytes_dropped += connection.abort()
        self._connections.clear()
        self._cut = cut
        self.cuts.append(cut)
        if seconds is not None:
            asyncio.get_running_loop().call_later(seconds, self._heal_cut, cut)
        return cut

    async def _end_cut(self) -> None:
        if self._cut is not None:
            self._heal_cut(self._cut)

    def _heal_cut(self, cut: Cut) -> None:
        if self._cut is cut:
            cut.ended = time.monotonic()
            self._cut = None

    async def _stall(self, seconds: float) -> None:
        self._stalled_until = max(self._stalled_until, time.monotonic() + seconds)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut is not None:
            self._cut.refused += 1
            writer.transport.abort()  # a reset, as a dropped route or a middlebox answers
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()  # nothing listens there (the server is down): the client sees a reset
            return
        self.connections_made += 1
        connection = _Connection(writer, up_writer)
        self._connections.add(connection)
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            direction = _Direction(sink)
            connection.directions.append(direction)
            connection.tasks.append(asyncio.ensure_future(self._read(source, direction)))
            connection.tasks.append(asyncio.ensure_future(self._deliver(direction, connection)))

    async def _read(self, source: asyncio.StreamReader, direction: _Direction) -> None:
        """Read chunks as they come and queue each with its delivery time (in order: never before the one ahead)."""
        while True:
            try:
                chunk = await source.read(READ_SIZE)
            except OSError:
                chunk = b""
            at = self._delivery_time(len(chunk), direction.last_delivery)
            direction.last_delivery = at
            direction.queued_bytes += len(chunk)
            await direction.queue.put((at, chunk))
            if not chunk:
                return  # end of stream: delivered as such, after the bytes before it

    def _delivery_time(self, size: int, previous: float) -> float:
        faults = self.faults
        at = time.monotonic() + faults.delay
        if faults.jitter:
            at += self._random.uniform(-faults.jitter, faults.jitter)
        packets = max(1, math.ceil(size / PACKET))
        if faults.loss and self._random.random() < 1 - (1 - faults.loss) ** packets:
            self.chunks_lost += 1
            at += faults.retransmit()
        return max(at, previous)

    async def _deliver(self, direction: _Direction, connection: _Connection) -> None:
        """Write each chunk at its time (held while the link stalls); the end of one side closes the other."""
        try:
            while True:
                at, chunk = await direction.queue.get()
                while (wait := max(at, self._stalled_until) - time.monotonic()) > 0:
                    await asyncio.sleep(wait)
                if not chunk:
                    break
                direction.writer.write(chunk)
                direction.queued_bytes -= len(chunk)
                await direction.writer.drain()
        except (OSError, RuntimeError):
            pass  # the other side went away
        self._connections.discard(connection)
        for writer in connection.writers:
            with contextlib.suppress(Exception):
                writer.close()


@contextlib.contextmanager
def faulty_link(upstream_port: int, faults: Faults | None = None) -> Iterator[FaultyLink]:
    """A FaultyLink in front of `upstream_port`, closed (every connection reset) whatever happens."""
    link = FaultyLink(upstream_port, faults)
    try:
        yield link.start()
    finally:
        link.close()
