"""Output streams that tell the runtime about a cell's output, and mute abandoned threads.

Every write that reaches a cell restarts that cell's quiet-budget clock (the
cell is the stream's parent message).  The owner of the callback is the
kernel, which sets `on_output` on the streams it was given; nothing here is
global.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ipykernel.iostream import OutStream
from ipykernel.zmqshell import ZMQDisplayPublisher

from ..runtime.executors import is_abandoned_thread
from .upstream import outstream_has_buffered

OutputCallback = Callable[["str | None"], None]


def _parent_msg_id(publisher: Any) -> str | None:
    header = getattr(publisher, "parent_header", None) or {}
    return header.get("msg_id") if isinstance(header, dict) else None


class CancelOutStream(OutStream):
    """ipykernel's OutStream; feeds the quiet clock, drops writes from abandoned exec threads."""

    on_output: OutputCallback | None = None

    def write(self, string: str) -> int | None:  # type: ignore[override]
        if is_abandoned_thread():
            return len(string)  # an abandoned thread must not print into any cell
        if string and self.on_output is not None:
            self.on_output(_parent_msg_id(self))
        return super().write(string)

    def flush(self) -> None:
        """Skip the round trip to the IOPub thread when nothing is waiting to be sent.

        ipykernel flushes both streams several times per reply, each a wait of
        0.1-0.35 ms for the IOPub thread even when empty: most of an interrupt's cost.
        """
        if not outstream_has_buffered(self):
            return
        super().flush()


class CancelDisplayPublisher(ZMQDisplayPublisher):
    """ipykernel's display publisher; display and clear_output count as output, abandoned threads are muted."""

    on_output: OutputCallback | None = None

    def publish(self, *args: Any, **kwargs: Any) -> None:
        if is_abandoned_thread():
            return None
        if self.on_output is not None:
            self.on_output(_parent_msg_id(self))
        super().publish(*args, **kwargs)

    def clear_output(self, *args: Any, **kwargs: Any) -> None:
        if is_abandoned_thread():
            return None
        if self.on_output is not None:
            self.on_output(_parent_msg_id(self))
        super().clear_output(*args, **kwargs)


def connect_streams(shell: Any, on_output: OutputCallback, streams: list[Any]) -> None:
    """Point our streams and the shell's display publisher at the runtime's quiet clock."""
    for stream in streams:
        if isinstance(stream, CancelOutStream):
            stream.on_output = on_output
    if isinstance(getattr(shell, "display_pub", None), CancelDisplayPublisher):
        shell.display_pub.on_output = on_output
