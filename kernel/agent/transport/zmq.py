"""The local transport: the kernel's ZeroMQ channels, through jupyter_client's blocking client."""

from __future__ import annotations

import contextlib
import typing as t

import zmq
from jupyter_client.blocking.client import BlockingKernelClient

# Bounded per poll: a flood on one channel never starves the caller's checks.
MAX_PER_POLL = 1000


class ZmqTransport:
    """Channels of one kernel client (shell, iopub, control, stdin, heartbeat)."""

    def __init__(self, client: BlockingKernelClient):
        self.client = client
        self._channels = {
            "shell": client.shell_channel,
            "iopub": client.iopub_channel,
            "control": client.control_channel,
            "stdin": client.stdin_channel,
        }

    def send(self, channel: str, msg_type: str, content: dict, *, metadata: dict | None = None) -> str:
        msg = self.client.session.msg(msg_type, content, metadata=metadata or {})
        self._channels[channel].send(msg)
        return str(msg["header"]["msg_id"])

    def poll(self, timeout: float, wake: int | None = None) -> list[tuple[str, dict]]:
        poller = zmq.Poller()
        for ch in self._channels.values():
            poller.register(ch.socket, zmq.POLLIN)
        if wake is not None:
            poller.register(wake, zmq.POLLIN)
        ready = dict(poller.poll(int(max(timeout, 0) * 1000)))
        out: list[tuple[str, dict]] = []
        for name, ch in self._channels.items():
            if ch.socket in ready:
                for _ in range(MAX_PER_POLL):
                    if not ch.socket.poll(0):
                        break
                    out.append((name, t.cast(dict, ch._recv())))
        return out

    def heartbeat(self) -> bool | None:
        return bool(self.client.hb_channel.is_beating())

    def link_delay(self) -> float:
        return 0.0  # the kernel's own sockets, on this host

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.stop_channels()
