"""The running-cell record (last_cell.py), kept on a thread of its own so that writing it never delays the watchdog.

Near the memory limit the record is rewritten at every tick, and building it
reads the cell's stack and four files: a dozen hand-overs of the GIL, each up
to a switch interval against a cell that computes.  Measured in a 1 GiB
cgroup, one write on the watchdog thread took 50-130 ms while a cell grew by
1.7 GB/s: the guard's next sample came after the out-of-memory killer.  The
watchdog now only hands the running cells over; this thread writes the newest
state it was given, and skips the ones it had no time for.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .. import last_cell
from ..frames import Frame, describe
from .execution import Execution
from .memory_guard import MemoryGuard

log = logging.getLogger("cancelkernel")


class CellRecordKeeper:
    """Writes the record of the oldest running cell once it has run RECORD_AFTER, every REWRITE_EVERY
    (every tick near the memory limit), and removes it when the cell ends."""

    def __init__(self, path: str, memory: MemoryGuard, stack_of: Callable[[Execution], list[Frame]]):
        self.path: str | None = path
        self._memory = memory
        self._stack_of = stack_of
        self._written = 0.0  # monotonic time of the last write (0: no record on disk)
        self._lock = threading.Lock()  # a write and the removal at the cell's end never interleave
        self._pending: list[Execution] | None = None  # the newest running cells the watchdog handed over
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None  # started at the first tick: short cells never need it

    def on_tick(self, running: list[Execution], now: float) -> None:
        """The watchdog's tick: cheap, the work is done on the keeper's thread."""
        if self.path is None or not self._due(running, now):
            return
        self._pending = running
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="cancelkernel-cell-record", daemon=True)
            self._thread.start()
        self._wake.set()

    def _due(self, running: list[Execution], now: float) -> bool:
        oldest = min(running, key=lambda e: e.started)
        if oldest.ended or now - oldest.started < last_cell.RECORD_AFTER:
            return False
        # Near the limit a death is likely soon: every tick then, so the record says how close it came.
        every = 0.0 if self._memory.nearing_limit() else last_cell.REWRITE_EVERY
        return now - self._written >= every

    def drop(self) -> None:
        """The cell ended (or the kernel closes): no record stays behind to claim it died."""
        with self._lock:
            self._pending = None
            if self._written and self.path:
                last_cell.remove(self.path)
                self._written = 0.0

    def close(self) -> None:
        self._stopped = True
        self._wake.set()
        self.drop()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopped:
                return
            running, self._pending = self._pending, None
            if running:
                self._write(running)

    def _write(self, running: list[Execution]) -> None:
        execution = min(running, key=lambda e: e.started)
        if execution.ended:
            return
        memory, cgroup = self._memory, self._memory.view.cgroup
        now = time.monotonic()
        record = last_cell.new_record(
            msg_id=execution.msg_id,
            where=describe(self._stack_of(execution)),
            elapsed=round(now - execution.started, 3),
            charged=memory.charged_now(),
            limit=memory.limit,
            source=memory.view.source,
            cgroup=cgroup.path if cgroup is not None else None,
            cgroup_version=cgroup.version if cgroup is not None else None,
            cgroup_oom_kills=cgroup.oom_kills() if cgroup is not None else None,
            machine_oom_kills=last_cell.machine_oom_kills(),
        )
        with self._lock:
            if execution.ended or self.path is None:
                return  # it ended while the record was built: the end already removed it
            try:
                last_cell.write(self.path, record)
            except OSError as exc:
                log.warning(
                    "cancelkernel: cannot keep the running-cell record %s (%s); a death will not be named",
                    self.path,
                    exc,
                )
                self.path = None
                return
            self._written = now
