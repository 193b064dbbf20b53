"""The remote transport: a kernel's channels over a Jupyter Server's (or gateway's) websocket.

`/api/kernels/{id}/channels` carries every channel.  We ask for the
`v1.kernel.websocket.jupyter.org` subprotocol (binary frames: the channel name
and the message parts, each packed JSON) and fall back to the legacy JSON
protocol (one JSON text frame with a `channel` key) when the server does not
pick it.  The server forwards any message type on any channel, so targeted
interrupts, status and checkpoint requests travel as they do locally.

A dropped connection comes back by itself: the transport reconnects with
the same session id, so Jupyter Server replays what it buffered for that
session meanwhile; tries are spaced by a doubling pause within one bound
(outage.py).  Messages sent meanwhile wait and go out, in order, once it is
back; a message that arrives twice (a replay) is read once.  A server that
no longer has the kernel (404) makes the transport `gone` (the lifecycle
reads it); an outage past its bound raises KernelStartError, and the next
call starts a new one.  A ping every PING_EVERY seconds measures the
link's round trip (round_trip.py), and a ping left unanswered for
DEAD_AFTER seconds counts as a drop once nothing is left to read (a
partition TCP would wait out for minutes).  Only a ping whose pong is read
while the caller polls is a sample: a pong left unread between two calls
(a client between cells) says nothing about the link's round trip.

Needs the `websocket-client` package (`pip install 'cancelkernel[remote]'`).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import select
import time
import typing as t

from jupyter_client.jsonutil import parse_date
from jupyter_client.session import Session, extract_dates

from ..errors import BadInputError, KernelStartError
from .outage import RECONNECT_WITHIN, Outage
from .round_trip import RoundTrip

V1 = "v1.kernel.websocket.jupyter.org"
# Bounded per poll: a flood never starves the caller's checks.
MAX_PER_POLL = 1000
CONNECT_TIMEOUT = 30.0
# Seconds a frame that has begun may go without a byte before the connection counts as dropped
# (a read never blocks longer).
FRAME_TIMEOUT = 10.0
# Seconds between two pings (each one a round-trip sample), and how long one may go unanswered (with nothing
# left to read) before the connection counts as dropped.
PING_EVERY = 1.0
DEAD_AFTER = 10.0
# Seconds between two polls past which the ping then unanswered is no sample (its pong may have waited unread).
POLL_GAP = 0.02
# Messages sent while the connection is down, kept to go out once it is back (more: the caller is told).
MAX_WAITING = 1000
# Message ids remembered to read a replayed message once.
KEEP_SEEN = 10_000


def _websocket() -> t.Any:
    try:
        import websocket
    except ImportError as exc:
        raise BadInputError(
            "remote kernels need the websocket-client package; install it with `pip install 'cancelkernel[remote]'`"
        ) from exc
    return websocket


class _NoKernel(KernelStartError):
    """The server answered 404: it has no such kernel (deleted, culled, or the server restarted)."""


class WebsocketTransport:
    """The channels of one kernel behind a server, as one websocket that reconnects."""

    def __init__(self, url: str, token: str | None, *, reconnect_within: float = RECONNECT_WITHIN):
        self.url = url
        self.token = token or ""
        self.session = Session(key=b"")  # the server signs what it forwards to the kernel
        self.protocol = ""
        self.reconnects = 0
        self.reconnect_within = reconnect_within
        self.gone: str | None = None  # why the server no longer has the kernel (a 404 on reconnecting)
        self.round_trip = RoundTrip()
        self._ws: t.Any = None
        self._closed = False
        self._outage: Outage | None = None
        self._waiting: collections.deque[tuple[str, dict]] = collections.deque()
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._ping_sent: float | None = None  # time.monotonic() of the ping not answered yet
        self._ping_payload = b""  # what its pong must carry (an older ping's pong is not its answer)
        self._ping_timed = False  # its pong is a round-trip sample (nobody stopped reading since it was sent)
        self._pings = 0
        self._last_ping = 0.0
        self._poll_ended = 0.0
        self._opened = False  # once open, a reconnect keeps the session and the protocol
        self.connect()

    def connect(self, timeout: float = CONNECT_TIMEOUT) -> None:
        """Open the websocket: v1, else the legacy protocol; a reconnect asks for the one the server chose before."""
        websocket = _websocket()
        header = [f"Authorization: token {self.token}"] if self.token else []
        last: Exception | None = None
        choices = ([V1], None) if not self._opened else ([V1] if self.protocol == V1 else None,)
        for protocols in choices:
            if last is not None:
                # The refused v1 try may still hold our session at a gateway (which would then close the legacy
                # connection as its stale copy): nothing was sent yet, so the legacy try takes a session of its own.
                self.session = Session(key=b"")
            url = f"{self.url}?session_id={self.session.session}"
            try:
                self._ws = websocket.create_connection(url, timeout=timeout, header=header, subprotocols=protocols)
                self._ws.settimeout(FRAME_TIMEOUT)
                self.protocol = self._ws.getsubprotocol() or ""
                self._opened = True
                break
            except websocket.WebSocketBadStatusException as exc:
                if exc.status_code in (401, 403):
                    raise BadInputError(
                        f"the server refused the token for {self.url} ({exc.status_code}); pass the server's token"
                    ) from exc
                if exc.status_code == 404:
                    raise _NoKernel(f"no kernel at {self.url} (404): it was deleted, culled, or never existed") from exc
                last = exc
            except (websocket.WebSocketException, OSError) as exc:
                last = exc  # e.g. a server that does not pick the v1 subprotocol: try the legacy one
        else:
            raise KernelStartError(f"cannot open the kernel's websocket {self.url}: {last}") from last
        with contextlib.suppress(*_dropped()):  # a connection that fails at once is found by the next poll
            self._ping(time.monotonic())
        self._poll_ended = time.monotonic()  # its pong counts if the caller polls now

    # -- Transport --

    def send(self, channel: str, msg_type: str, content: dict, *, metadata: dict | None = None) -> str:
        """Send now, or once the connection is back (in order); a kernel the server no longer has gets nothing."""
        if self._closed:
            raise KernelStartError(f"the websocket to {self.url} was closed; start the kernel again")
        msg = self.session.msg(msg_type, content, metadata=metadata or {})
        if self.gone is None:
            if len(self._waiting) >= MAX_WAITING:
                raise KernelStartError(
                    f"{MAX_WAITING} messages wait for the websocket to {self.url} to come back; "
                    "the server or the network is down"
                )
            self._waiting.append((channel, msg))
            if self._ws is not None:
                self._send_waiting()
        return str(msg["header"]["msg_id"])

    def poll(self, timeout: float, wake: int | None = None) -> list[tuple[str, dict]]:
        out: list[tuple[str, dict]] = []
        started = time.monotonic()
        deadline = started + max(timeout, 0.0)
        if started - self._poll_ended > POLL_GAP:
            self._ping_timed = False  # nobody read while its pong could arrive: its time is no sample
        try:
            self._poll(out, deadline, wake)
        finally:
            self._poll_ended = time.monotonic()
        return out

    def _poll(self, out: list[tuple[str, dict]], deadline: float, wake: int | None) -> None:
        """Read into `out` until `deadline`, a wake-up, or MAX_PER_POLL messages; reconnect when down."""
        while len(out) < MAX_PER_POLL and not self._closed:
            now = time.monotonic()
            if self._ws is None and not self._come_back(now):
                # Down: wait for the next try (or the caller's deadline, or its wake-up), never longer.
                until = deadline if self._outage is None else min(deadline, self._outage.next_try)
                if out or now >= deadline or self._pause(until - now, wake):
                    break
                continue
            self._check_ping(now)
            if self._ws is None:
                continue
            wait = 0.0 if out else max(0.0, deadline - now)
            if not self._readable(min(wait, self._ping_due(now)), wake):
                if out or time.monotonic() >= deadline or self._woken(wake):
                    break
                continue
            try:
                decoded = self._receive()
            except _dropped() as exc:
                self._lost(exc)
                continue
            if decoded is not None:
                out.append(decoded)

    def heartbeat(self) -> bool | None:
        return None  # the heartbeat channel does not cross the server

    def link_delay(self) -> float:
        """Seconds a reply may take beyond the kernel's own time: the link's round trip and its variation."""
        return self.round_trip.allowance()

    def close(self) -> None:
        self._closed = True
        self._close_socket(timeout=1.0)

    # -- the connection: lost, and back --

    def _close_socket(self, *, timeout: float = 0.0) -> None:
        """Close the websocket, waiting up to `timeout` for the server's close frame."""
        if self._ws is not None:
            with contextlib.suppress(Exception):
                self._ws.close(timeout=timeout)
            self._ws = None
        self._ping_sent = None

    def _lost(self, error: BaseException | str) -> None:
        """The connection dropped: close it; the next poll tries to open it again.

        An outage lasts until a frame arrives on a new connection: one that opens and drops at once is a failed try.
        """
        self._close_socket()
        now, text = time.monotonic(), str(error) or type(error).__name__
        if self._outage is None:
            self._outage = Outage(now, self.reconnect_within, last_error=text)
        else:
            self._outage.failed(text, now)

    def _come_back(self, now: float) -> bool:
        """One try to reconnect, when one is due; True once the connection is back (what waited is sent).

        Raises KernelStartError when the outage passes its bound (the next call starts a new one).
        """
        if self.gone is not None:
            return False
        if self._outage is None:
            self._outage = Outage(now, self.reconnect_within)
        outage = self._outage
        if outage.over(now):
            self._give_up(outage)
        if not outage.due(now):
            return False
        try:
            self.connect(timeout=outage.try_timeout(now))
        except _NoKernel:
            self.gone = (
                f"the server has no kernel at {self.url} any more (404): "
                "it was deleted or culled, or the server restarted"
            )
            self._outage = None
            self._waiting.clear()
            return False
        except BadInputError:
            raise
        except KernelStartError as exc:
            outage.failed(str(exc.__cause__ or exc), time.monotonic())
            if outage.over(time.monotonic()):
                self._give_up(outage)
            return False
        self.reconnects += 1
        return self._send_waiting()

    def _give_up(self, outage: Outage) -> t.NoReturn:
        """The outage passed its bound: nothing waiting is sent later, and the next call starts a new outage."""
        self._outage = None
        dropped = len(self._waiting)
        self._waiting.clear()
        raise KernelStartError(
            f"the kernel's websocket {self.url} dropped and could not be opened again within "
            f"{outage.within:g} s ({outage.text(time.monotonic())}): the server or the network is down. "
            f"What the kernel did meanwhile is unknown (it may still run the cell)"
            + (f"; {dropped} message(s) waiting to be sent were dropped" if dropped else "")
            + ". The next call tries to reconnect: restore the network or the server, or start a new kernel"
        )

    def _send_waiting(self) -> bool:
        """Send what waits, oldest first; False when the connection dropped meanwhile (the rest waits on)."""
        while self._waiting and self._ws is not None:
            channel, msg = self._waiting[0]
            try:
                self._send_frame(self._frame(channel, msg))
            except _dropped() as exc:
                self._lost(exc)
                return False
            self._waiting.popleft()
        return self._ws is not None

    def _pause(self, seconds: float, wake: int | None) -> bool:
        """Wait `seconds` with no connection to read; True when `wake` ended the wait."""
        if seconds <= 0:
            return False
        if wake is None:
            time.sleep(seconds)
            return False
        ready, _, _ = select.select([wake], [], [], seconds)
        return bool(ready)

    @staticmethod
    def _woken(wake: int | None) -> bool:
        if wake is None:
            return False
        ready, _, _ = select.select([wake], [], [], 0)
        return bool(ready)

    # -- pings: the round trip, and a connection that stopped answering --

    def _ping(self, now: float) -> None:
        self._pings += 1
        self._ping_payload = str(self._pings).encode()
        self._ws.ping(self._ping_payload)
        self._ping_sent = self._last_ping = now
        self._ping_timed = True

    def _ping_due(self, now: float) -> float:
        """Seconds until the next ping is due, or until the unanswered one counts as a drop."""
        if self._ping_sent is not None:
            return max(0.0, self._ping_sent + DEAD_AFTER - now)
        return max(0.0, self._last_ping + PING_EVERY - now)

    def _check_ping(self, now: float) -> None:
        """A ping when one is due; a drop when the last one went unanswered for DEAD_AFTER seconds
        and nothing is left to read (its pong may wait behind what arrived while nobody read)."""
        if self._ping_sent is not None:
            if now - self._ping_sent >= DEAD_AFTER and not self._readable(0.0) and self._ws is not None:
                self._lost(f"no answer to a ping for {now - self._ping_sent:.0f} s")
            return
        if now - self._last_ping >= PING_EVERY:
            try:
                self._ping(now)
            except _dropped() as exc:
                self._lost(exc)

    # -- frames --

    def _frame(self, channel: str, msg: dict) -> bytes | str:
        if self.protocol == V1:
            parts = [self.session.pack(msg[key]) for key in ("header", "parent_header", "metadata", "content")]
            return serialize_v1(channel, parts)
        packed: bytes = self.session.pack({**msg, "channel": channel, "buffers": []})
        return packed.decode()

    def _send_frame(self, frame: bytes | str) -> None:
        if isinstance(frame, bytes):
            self._ws.send_binary(frame)
        else:
            self._ws.send(frame)

    def _readable(self, wait: float, wake: int | None = None) -> bool:
        """Whether a frame can be read now, waiting up to `wait`
        (False at once when `wake` is readable and no frame is)."""
        sock = getattr(self._ws, "sock", None)
        if sock is None:
            self._lost("the websocket closed")
            return False
        if getattr(sock, "pending", lambda: 0)():
            return True  # TLS bytes already decrypted and waiting
        try:
            ready, _, _ = select.select([sock] if wake is None else [sock, wake], [], [], wait)
        except (OSError, ValueError) as exc:
            self._lost(exc)
            return False
        return sock in ready

    def _receive(self) -> tuple[str, dict] | None:
        """One frame: a kernel message (None for a pong, a ping, or a message read before)."""
        websocket = _websocket()
        opcode, data = self._ws.recv_data(control_frame=True)
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            self._lost("the server closed the websocket")
            return None
        self._outage = None  # a frame came: the connection is back for good
        if opcode == websocket.ABNF.OPCODE_PONG:
            if self._ping_sent is not None and data == self._ping_payload:
                if self._ping_timed:
                    self.round_trip.sample(time.monotonic() - self._ping_sent)
                self._ping_sent = None
            return None
        if opcode == websocket.ABNF.OPCODE_TEXT:
            decoded = self._decode(data.decode("utf-8") if isinstance(data, bytes) else data)
        elif opcode == websocket.ABNF.OPCODE_BINARY:
            decoded = self._decode(data)
        else:
            return None
        if decoded is None or self._seen_before(decoded[1].get("msg_id")):
            return None
        return decoded

    def _seen_before(self, msg_id: object) -> bool:
        """Whether this message was read already (a replay after a reconnect); remembers the last KEEP_SEEN."""
        if not isinstance(msg_id, str) or not msg_id:
            return False
        if msg_id in self._seen:
            return True
        self._seen[msg_id] = None
        if len(self._seen) > KEEP_SEEN:
            self._seen.popitem(last=False)
        return False

    def _decode(self, frame: bytes | str) -> tuple[str, dict] | None:
        try:
            if isinstance(frame, bytes) and self.protocol == V1:
                channel, parts = deserialize_v1(frame)
                keys = ("header", "parent_header", "metadata", "content")
                msg = {key: self.session.unpack(part) for key, part in zip(keys, parts[:4], strict=False)}
                msg["buffers"] = parts[4:]
            else:
                msg = json.loads(frame)
                channel = msg.pop("channel", "shell")
        except (ValueError, KeyError, UnicodeDecodeError, IndexError):
            return None  # not a kernel message: nothing a client can act on
        msg["header"] = _with_dates(msg.get("header") or {})
        msg["parent_header"] = _with_dates(msg.get("parent_header") or {})
        msg["msg_id"] = msg["header"].get("msg_id")
        msg["msg_type"] = msg["header"].get("msg_type")
        msg.setdefault("metadata", {})
        msg.setdefault("content", {})
        return channel, msg


def _dropped() -> tuple[type[BaseException], ...]:
    """The errors of a connection that went away (the server restarted, the network dropped)."""
    websocket = _websocket()
    # A timeout: a frame stalled for FRAME_TIMEOUT after the socket said readable (a half-open connection).
    return (
        websocket.WebSocketConnectionClosedException,
        websocket.WebSocketTimeoutException,
        websocket.WebSocketProtocolException,
        ConnectionError,
        BrokenPipeError,
        OSError,
    )


def _with_dates(header: t.Any) -> t.Any:
    """jupyter_client's extract_dates for a header, the same datetimes, without trying every id as a date.

    A string can only be an ISO 8601 date if it looks like "2026-12-01T..." (the pattern parse_date checks); every
    reply to one request carries the same parent date, parsed once.
    """
    if not isinstance(header, dict):
        return extract_dates(header)
    return {
        key: (_date(value) if _may_be_date(value) else value) if isinstance(value, str) else extract_dates(value)
        for key, value in header.items()
    }


def _may_be_date(text: str) -> bool:
    return len(text) >= 19 and text[4] == "-" and text[10] == "T"


@functools.lru_cache(maxsize=64)
def _date(text: str) -> t.Any:
    return parse_date(text)  # a datetime is immutable: one object may serve every message that carries the string


def serialize_v1(channel: str, parts: list[bytes]) -> bytes:
    """One v1 frame: the number of offsets, the offsets, the channel name, the parts (all offsets little-endian u64)."""
    name = channel.encode()
    offsets = [8 * (1 + 1 + len(parts) + 1)]
    offsets.append(offsets[-1] + len(name))
    for part in parts:
        offsets.append(offsets[-1] + len(part))
    head = len(offsets).to_bytes(8, "little") + b"".join(o.to_bytes(8, "little") for o in offsets)
    return head + name + b"".join(parts)


def deserialize_v1(frame: bytes) -> tuple[str, list[bytes]]:
    count = int.from_bytes(frame[:8], "little")
    offsets = [int.from_bytes(frame[8 * (i + 1) : 8 * (i + 2)], "little") for i in range(count)]
    channel = frame[offsets[0] : offsets[1]].decode()
    return channel, [frame[offsets[i] : offsets[i + 1]] for i in range(1, count - 1)]
