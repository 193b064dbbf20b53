"""The remote transport: a kernel's channels over a Jupyter Server's (or gateway's) websocket.

`/api/kernels/{id}/channels` carries every channel.  We ask for the
`v1.kernel.websocket.jupyter.org` subprotocol (binary frames: the channel name
and the message parts, each packed JSON) and fall back to the legacy JSON
protocol (one JSON text frame with a `channel` key) when the server does not
pick it.  The server forwards any message type on any channel, so targeted
interrupts, status and checkpoint requests travel as they do locally.

The connection carries our session id: when it drops, we reconnect with the
same id and the server replays what it buffered meanwhile.  Needs the
`websocket-client` package (`pip install 'cancelkernel[remote]'`).
"""

from __future__ import annotations

import contextlib
import json
import select
import time
import typing as t

from jupyter_client.session import Session, extract_dates

from ..errors import BadInputError, KernelStartError

V1 = "v1.kernel.websocket.jupyter.org"
# Bounded per poll: a flood never starves the caller's checks.
MAX_PER_POLL = 1000
CONNECT_TIMEOUT = 30.0
# Seconds a frame that has begun may go without a byte before the connection counts as dropped (a read never blocks longer).
FRAME_TIMEOUT = 10.0
# Tries to reconnect a dropped connection, and the pause between them.
RECONNECT_TRIES = 5
RECONNECT_PAUSE = 0.5


def _websocket() -> t.Any:
    try:
        import websocket
    except ImportError as exc:
        raise BadInputError(
            "remote kernels need the websocket-client package; install it with `pip install 'cancelkernel[remote]'`"
        ) from exc
    return websocket


class WebsocketTransport:
    """The channels of one kernel behind a server, as one websocket."""

    def __init__(self, url: str, token: str | None):
        self.url = url
        self.token = token or ""
        self.session = Session(key=b"")  # the server signs what it forwards to the kernel
        self.protocol = ""
        self.reconnects = 0
        self._ws: t.Any = None
        self.connect()

    def connect(self) -> None:
        websocket = _websocket()
        header = [f"Authorization: token {self.token}"] if self.token else []
        url = f"{self.url}?session_id={self.session.session}"
        last: Exception | None = None
        for protocols in ([V1], None):
            try:
                self._ws = websocket.create_connection(url, timeout=CONNECT_TIMEOUT, header=header, subprotocols=protocols)
                self._ws.settimeout(FRAME_TIMEOUT)
                self.protocol = self._ws.getsubprotocol() or ""
                return
            except websocket.WebSocketBadStatusException as exc:
                if exc.status_code in (401, 403):
                    raise BadInputError(f"the server refused the token for {self.url} ({exc.status_code}); pass the server's token") from exc
                if exc.status_code == 404:
                    raise KernelStartError(f"no kernel at {self.url} (404): it was deleted, culled, or never existed") from exc
                last = exc
            except (websocket.WebSocketException, OSError) as exc:
                last = exc  # e.g. a server that does not pick the v1 subprotocol: try the legacy one
        raise KernelStartError(f"cannot open the kernel's websocket {self.url}: {last}")

    # -- Transport --

    def send(self, channel: str, msg_type: str, content: dict, *, metadata: dict | None = None) -> str:
        msg = self.session.msg(msg_type, content, metadata=metadata or {})
        self._send(channel, msg)
        return str(msg["header"]["msg_id"])

    def _send(self, channel: str, msg: dict) -> None:
        if self.protocol == V1:
            parts = [self.session.pack(msg[key]) for key in ("header", "parent_header", "metadata", "content")]
            frame: bytes | str = serialize_v1(channel, parts)
        else:
            frame = self.session.pack({**msg, "channel": channel, "buffers": []}).decode()
        try:
            self._send_frame(frame)
        except _dropped():
            self._reconnect()
            self._send_frame(frame)

    def _send_frame(self, frame: bytes | str) -> None:
        if isinstance(frame, bytes):
            self._ws.send_binary(frame)
        else:
            self._ws.send(frame)

    def poll(self, timeout: float, wake: int | None = None) -> list[tuple[str, dict]]:
        out: list[tuple[str, dict]] = []
        deadline = time.monotonic() + max(timeout, 0.0)
        while len(out) < MAX_PER_POLL:
            wait = 0.0 if out else max(0.0, deadline - time.monotonic())
            if not self._readable(wait, wake):
                break
            try:
                frame = self._ws.recv()
            except _dropped():
                self._reconnect()  # what arrived meanwhile is replayed by the server, and read next time
                if time.monotonic() >= deadline:
                    break  # a server that keeps closing the connection must not keep the caller here
                continue
            decoded = self._decode(frame)
            if decoded is not None:
                out.append(decoded)
        return out

    def heartbeat(self) -> bool | None:
        return None  # the heartbeat channel does not cross the server

    def close(self) -> None:
        if self._ws is not None:
            with contextlib.suppress(Exception):
                self._ws.close()
            self._ws = None

    # -- frames --

    def _readable(self, wait: float, wake: int | None = None) -> bool:
        """Whether a frame can be read now, waiting up to `wait` (False at once when `wake` is readable and no frame is)."""
        sock = getattr(self._ws, "sock", None)
        if sock is None:
            self._reconnect()
            return False
        if getattr(sock, "pending", lambda: 0)():
            return True  # TLS bytes already decrypted and waiting
        try:
            ready, _, _ = select.select([sock] if wake is None else [sock, wake], [], [], wait)
        except (OSError, ValueError):
            self._reconnect()
            return False
        return sock in ready

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
        msg["header"] = extract_dates(msg.get("header") or {})
        msg["parent_header"] = extract_dates(msg.get("parent_header") or {})
        msg["msg_id"] = msg["header"].get("msg_id")
        msg["msg_type"] = msg["header"].get("msg_type")
        msg.setdefault("metadata", {})
        msg.setdefault("content", {})
        return channel, msg

    def _reconnect(self) -> None:
        """The connection dropped: open it again with the same session, so the server replays what it buffered."""
        self.close()
        last: Exception | None = None
        for _ in range(RECONNECT_TRIES):
            try:
                self.connect()
                self.reconnects += 1
                return
            except BadInputError:
                raise
            except KernelStartError as exc:
                last = exc
                if "404" in str(exc):
                    raise
                time.sleep(RECONNECT_PAUSE)
        raise KernelStartError(f"the websocket to {self.url} dropped and could not be opened again: {last}")


def _dropped() -> tuple[type[BaseException], ...]:
    """The errors of a connection that went away (the server restarted, the network dropped)."""
    websocket = _websocket()
    # A timeout: a frame stalled for FRAME_TIMEOUT after the socket said readable (a half-open connection).
    return (websocket.WebSocketConnectionClosedException, websocket.WebSocketTimeoutException, ConnectionError, BrokenPipeError, OSError)


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
