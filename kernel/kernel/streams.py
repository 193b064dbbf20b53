"""Output streams that tell the runtime about a cell's output, and mute abandoned threads.

A write costs what it costs on stock (and one look at whether any exec thread
was ever abandoned): nothing is timed or called per write for the quiet clock.
The watchdog reads each stream on its tick instead (`CellsThatWrote`): whose
buffered output grew, or was sent, since it last looked (ipykernel buffers the
output per cell until it sends it, `upstream.written_per_cell`).  A display
(far dearer than any bookkeeping) marks its cell through the kernel's
`on_output` callback.  Nothing here is global.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ipykernel.iostream import OutStream
from ipykernel.zmqshell import ZMQDisplayPublisher

from ..runtime.executors import ABANDONED_SO_FAR, is_abandoned_thread
from .upstream import outstream_has_buffered, outstream_lock, written_per_cell

OutputCallback = Callable[["str | None"], None]

_outstream_write = OutStream.write


def _parent_msg_id(publisher: Any) -> str | None:
    header = getattr(publisher, "parent_header", None) or {}
    return header.get("msg_id") if isinstance(header, dict) else None


class CancelOutStream(OutStream):
    """ipykernel's OutStream; drops writes from abandoned exec threads, and says whose output it sent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Before OutStream's own: it may start a thread that writes (and flushes) at once.
        self._buffers_number = 0  # which `_buffers` dict is current: one more at each rotation
        self._rotated_out: dict[str | None, tuple[int, int]] = {}  # cell -> (number, characters) of its last sent dict
        super().__init__(*args, **kwargs)

    def write(self, string: str) -> int | None:  # type: ignore[override]
        if ABANDONED_SO_FAR and is_abandoned_thread():
            return len(string)  # an abandoned thread must not print into any cell
        return _outstream_write(self, string)

    def flush(self) -> None:
        """Skip the round trip to the IOPub thread when nothing is waiting to be sent.

        ipykernel flushes both streams several times per reply, each a wait of
        0.1-0.35 ms for the IOPub thread even when empty: most of an interrupt's cost.
        """
        if not outstream_has_buffered(self):
            return
        super().flush()

    def _rotate_buffers(self) -> Any:
        """Stock's, and a note of whose output the rotated-out dict held (for the watchdog's next look)."""
        with outstream_lock(self):
            rotated = super()._rotate_buffers()
            for cell, chars in written_per_cell(rotated).items():
                self._rotated_out[cell] = (self._buffers_number, chars)
            self._buffers_number += 1
        return rotated

    def take_writes(self) -> tuple[int, dict[str | None, int], dict[str | None, tuple[int, int]]]:
        """(number of the current buffers, characters in them per cell, notes of the dicts sent since the last take)."""
        with outstream_lock(self):
            rotated, self._rotated_out = self._rotated_out, {}
            return self._buffers_number, written_per_cell(self._buffers), rotated


class CellsThatWrote:
    """Which cells wrote to one stream since the last call: the runtime asks on each watchdog tick.

    A cell wrote if its characters in the current buffers grew since the last
    look, or if a dict sent since then held more of its output than that look saw.
    """

    def __init__(self, stream: CancelOutStream):
        self.stream = stream
        self._number, self._chars, _ = stream.take_writes()

    def __call__(self) -> set[str | None]:
        number, chars, rotated = self.stream.take_writes()
        same = number == self._number
        wrote = {cell for cell, count in chars.items() if count > (self._chars.get(cell, 0) if same else 0)}
        for cell, (sent_number, count) in rotated.items():
            # Sent since the last look: a later dict than the one it saw, or more than it saw of that one.
            if sent_number > self._number or count > self._chars.get(cell, 0):
                wrote.add(cell)
        self._number, self._chars = number, chars
        return wrote


class CancelDisplayPublisher(ZMQDisplayPublisher):
    """ipykernel's display publisher; display and clear_output count as output, abandoned threads are muted."""

    on_output: OutputCallback | None = None

    def publish(self, *args: Any, **kwargs: Any) -> None:
        if ABANDONED_SO_FAR and is_abandoned_thread():
            return None
        if self.on_output is not None:
            self.on_output(_parent_msg_id(self))
        super().publish(*args, **kwargs)

    def clear_output(self, *args: Any, **kwargs: Any) -> None:
        if ABANDONED_SO_FAR and is_abandoned_thread():
            return None
        if self.on_output is not None:
            self.on_output(_parent_msg_id(self))
        super().clear_output(*args, **kwargs)


def connect_streams(shell: Any, on_output: OutputCallback, streams: list[Any]) -> None:
    """Have the shell's runtime read our streams on its watchdog's tick; point the display publisher at `on_output`."""
    runtime = getattr(shell, "runtime", None)
    if runtime is not None:
        for stream in streams:
            if isinstance(stream, CancelOutStream):
                runtime.read_output_on_tick(CellsThatWrote(stream))
    if isinstance(getattr(shell, "display_pub", None), CancelDisplayPublisher):
        shell.display_pub.on_output = on_output
