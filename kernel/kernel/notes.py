"""What the kernel publishes into a running cell besides its output: the notes a person reads and the `started` event.

events.py says what each one contains; this module says when and where it goes:
into the cell it concerns, only while that cell's code runs, never after its
traceback.
"""

from __future__ import annotations

import contextlib
import threading
import typing as t
from collections.abc import Iterator

from ipykernel.jsonutil import json_clean

from ..runtime.execution import Execution
from . import events

# How long a budgeted cell waits, at most, for the IOPub thread to have sent its `started` event.
STARTED_SENT_WAIT = 0.5


class CellNotes:
    """Publishes into running cells on the kernel's iopub; `parents` maps an execution's msg_id to its request."""

    def __init__(self, kernel: t.Any, parents: dict[str, dict]):
        self._kernel = kernel  # its session, iopub socket and thread are set up before it is
        self._parents = parents
        # Held while a note is published and while a cell's traceback closes its notes: a note comes before it or never.
        # Reentrant: a budget's trip holds it around the interrupt and the note it then publishes (`held`).
        self._lock = threading.RLock()

    def publish(self, execution: Execution, event: dict, *, last: bool = False) -> None:
        """A note into the cell `execution`, while it runs; `last`:
        the cell's final note, after everything else it showed."""
        with self._lock:
            parent = self._parents.get(execution.msg_id)
            if execution.notes_closed and not last:
                return
            self._send("display_data", events.note_content(event), parent)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """While held, every cell's traceback waits (`close` blocks): a note published inside comes before it."""
        with self._lock:
            yield

    def started(self, execution: Execution) -> None:
        """The budgets of a cell as it begins, sent before its code runs:
        a page counts them down even if the GIL is then held."""
        if self._send(
            "update_display_data",
            events.started_content(events.started(execution)),
            self._parents.get(execution.msg_id),
        ):
            # The IOPub thread sends it: a cell holding the GIL from its first line would keep it unsent.
            thread = getattr(self._kernel, "iopub_thread", None)
            if thread is not None:
                sent = threading.Event()
                thread.schedule(sent.set)
                sent.wait(STARTED_SENT_WAIT)

    def close(self, execution: Execution | None) -> None:
        """The cell's traceback is about to be shown (or the cell ended): no live note may follow it."""
        if execution is not None:
            with self._lock:
                execution.notes_closed = True

    def _send(self, msg_type: str, content: dict, parent: dict | None) -> bool:
        kernel = self._kernel
        if kernel.session is None or parent is None:
            return False
        kernel.session.send(
            kernel.iopub_socket, msg_type, json_clean(content), parent=parent, ident=kernel._topic(msg_type)
        )
        return True
