"""Whose turn it is on one kernel: one cell, restart or checkpoint call at a time."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from .errors import BadInputError
from .watch import CellWatch


class Turn:
    """Whose turn it is on one kernel: a second caller gets a clear error, never a tangled socket."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.watch: CellWatch | None = None  # the running cell's, while one runs

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    def try_claim(self) -> bool:
        return self._lock.acquire(blocking=False)

    def claim(self, doing: str) -> None:
        if not self._lock.acquire(blocking=False):
            running = self.watch
            what = f"the cell {running.msg_id}" if running is not None and running.msg_id else "another call"
            raise BadInputError(
                f"cannot {doing}: {what} is still in progress on this kernel; wait for it, or interrupt it first"
            )

    def release(self) -> None:
        self.watch = None
        self._lock.release()

    @contextlib.contextmanager
    def exclusive(self, doing: str) -> Iterator[None]:
        self.claim(doing)
        try:
            yield
        finally:
            self.release()
