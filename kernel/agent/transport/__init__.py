"""Transports: how messages reach one kernel and come back.

A transport sends a message on a named channel ("shell", "control",
"stdin") and returns every message that arrived on any channel ("shell",
"iopub", "control", "stdin"), oldest first per channel.  It knows nothing of
what the messages mean (link.py) or of the kernel's process (lifecycle/).
`zmq` is the local one: the kernel's ZeroMQ sockets through jupyter_client;
`websocket` the remote one, which reconnects by itself (`outage`: its tries
and their bound; `round_trip`: the link's round trip, from its pings).
"""

from __future__ import annotations

import typing as t


class Transport(t.Protocol):
    """What the link needs of a transport."""

    def send(self, channel: str, msg_type: str, content: dict, *, metadata: dict | None = None) -> str:
        """Send a new message; return its msg_id."""
        ...

    def poll(self, timeout: float, wake: int | None = None) -> list[tuple[str, dict]]:
        """Messages that arrived within `timeout` seconds, as (channel, message);
        the wait also ends when `wake` (a fd) is readable."""
        ...

    def heartbeat(self) -> bool | None:
        """Whether the kernel's heartbeat answers (None: this transport cannot tell)."""
        ...

    def link_delay(self) -> float:
        """Seconds a reply may take beyond the kernel's own time: the link's round trip (0 on the kernel's host)."""
        ...

    def close(self) -> None: ...
