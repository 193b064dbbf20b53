"""Output streams that tell the watchdog about output, and mute abandoned threads."""

from __future__ import annotations

from typing import Callable

from ipykernel.iostream import OutStream
from ipykernel.zmqshell import ZMQDisplayPublisher

from .executor import is_abandoned_thread

# Called with no arguments on every write that reaches a cell (set by the kernel).
output_listeners: list[Callable[[], None]] = []


def output_seen() -> None:
    for listener in output_listeners:
        listener()


class CancelOutStream(OutStream):
    """ipykernel's OutStream; drops writes from abandoned exec threads."""

    def write(self, string: str) -> int | None:  # type: ignore[override]
        if is_abandoned_thread():
            return len(string)  # an abandoned thread must not print into any cell
        if string:
            output_seen()
        return super().write(string)

    def flush(self) -> None:
        """Skip the round trip to the IOPub thread when nothing is waiting to be sent.

        ipykernel flushes both streams several times per reply, each a wait of
        0.1-0.35 ms for the IOPub thread even when empty: most of an interrupt's cost.
        """
        if not getattr(self, "_flush_pending", True) and not self._has_buffered():
            return
        super().flush()

    def _has_buffered(self) -> bool:
        lock = getattr(self, "_buffer_lock", None)
        buffers = getattr(self, "_buffers", None)
        if lock is None or buffers is None:
            return True  # another ipykernel layout: always flush
        with lock:
            return any(buffer.tell() for buffer in buffers.values())


class CancelDisplayPublisher(ZMQDisplayPublisher):
    """ipykernel's display publisher; display/clear_output count as output, abandoned threads are muted."""

    def publish(self, *args, **kwargs):  # type: ignore[override]
        if is_abandoned_thread():
            return None
        output_seen()
        return super().publish(*args, **kwargs)

    def clear_output(self, *args, **kwargs):  # type: ignore[override]
        if is_abandoned_thread():
            return None
        output_seen()
        return super().clear_output(*args, **kwargs)
