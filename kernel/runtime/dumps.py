"""Stack dumps that work while the GIL is held: faulthandler into a per-kernel file.

faulthandler's own timer thread and its SIGUSR1 handler are C code: they
write every thread's Python stack even when one C call holds the GIL.  The
file is owner-only, in the Jupyter runtime dir, and advertised in
kernel_info_reply so a local client can read it while the kernel is wedged.
ipykernel redirects faulthandler's default file to the server's stderr, so we
always pass our own file.

The timer is a dead man's switch (the watchdog pushes it forward on every
tick): it fires only when the watchdog has been starved, that is when one C
call holds the GIL.  It must never fire while Python threads run: faulthandler
reads every thread's frames without the GIL, and a frame freed under it
crashes the kernel (docs/cancellation.md, "Stack dumps while threads run").

Every dump belongs to the cells that ran while it was written: a cell keeps
the file's size at its start (`position()`) and reads only what came after
(`since()`); the file is emptied when no cell runs (`reset()`), so a dump
written while idle (SIGUSR1, say) is nobody's.  Arming and disarming happen
under one lock with a check of who still runs (`arm_while`, `disarm_if`), so
a timer armed for a cell that has just ended can never stay armed.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import IO

log = logging.getLogger("cancelkernel")


class DumpFile:
    """One kernel's dump file: armed while a cell may be wedged, read back when the kernel regains control."""

    def __init__(self, path: str):
        self.path = path
        self._file: IO[str] | None = None
        self._armed = False
        # The watchdog pushes the timer while the shell ends cells: one decision at a time.
        self._lock = threading.Lock()
        self.error: str | None = None
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            os.fchmod(fd, 0o600)
            self._file = os.fdopen(fd, "w+")
        except OSError as exc:
            self.error = f"cannot write stack dumps to {path}: {exc.strerror or exc}"
            log.warning(
                "cancelkernel: %s; stacks of wedged cells will not be available (everything else works)", self.error
            )
            return
        if hasattr(signal, "SIGUSR1"):
            try:
                # On demand from outside: `kill -USR1 <kernel pid>` appends all stacks.
                faulthandler.register(signal.SIGUSR1, file=self._file, all_threads=True, chain=False)
            except (RuntimeError, ValueError, OSError) as exc:
                log.warning("cancelkernel: cannot register SIGUSR1 stack dumps: %s", exc)

    @property
    def available(self) -> bool:
        return self._file is not None

    @property
    def armed(self) -> bool:
        return self._armed

    def arm_while(self, seconds: float, wanted: Callable[[], bool]) -> None:
        """Dump every thread's stack in `seconds` unless pushed again or disarmed first, if `wanted()` still says so."""
        if self._file is None:
            return
        with self._lock:
            if not wanted():
                self._disarm()
                return
            # One C call that cancels the timer (waiting for a dump in progress) and arms the next: a separate
            # cancel first let a cell that grabbed the GIL in between leave the dump disarmed for good.
            faulthandler.dump_traceback_later(max(seconds, 0.001), repeat=False, file=self._file, exit=False)
            self._armed = True

    def disarm_if(self, unwanted: Callable[[], bool]) -> None:
        """Disarm if `unwanted()` (checked under the lock, so no push can slip in after it)."""
        with self._lock:
            if unwanted():
                self._disarm()

    def disarm(self) -> None:
        with self._lock:
            self._disarm()

    def _disarm(self) -> None:
        if self._armed:
            faulthandler.cancel_dump_traceback_later()  # waits for a dump in progress
            self._armed = False

    def position(self) -> int:
        """Bytes dumped so far (a cell keeps this at its start)."""
        if self._file is None:
            return 0
        try:
            return os.fstat(self._file.fileno()).st_size
        except OSError:
            return 0

    def since(self, position: int) -> str:
        """What was dumped after `position` (usually nothing: one fstat)."""
        if self._file is None or self.position() <= position:
            return ""
        try:
            with open(self.path, "rb") as f:
                f.seek(position)
                return f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def read(self) -> str:
        if self._file is None:
            return ""
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def reset(self) -> None:
        """Empty the file (no cell runs: nothing in it can be anyone's)."""
        if self._file is None or self.position() == 0:
            return  # nothing written since it was last emptied (the usual case): one fstat, no truncate
        with self._lock:
            if self._armed:
                return  # a cell still wants a dump: leave the file alone
            try:
                os.ftruncate(self._file.fileno(), 0)
                os.lseek(self._file.fileno(), 0, os.SEEK_SET)
            except OSError:
                pass

    def forget_after_fork(self) -> None:
        """In a forked child: `kill -USR1` of the child must not write into the kernel's dump file
        (the timer thread did not survive the fork)."""
        self._lock = threading.Lock()
        if self._file is not None and hasattr(signal, "SIGUSR1"):
            with contextlib.suppress(RuntimeError, ValueError):
                faulthandler.unregister(signal.SIGUSR1)

    def close(self) -> None:
        self.disarm()
        if self._file is not None:
            if hasattr(signal, "SIGUSR1"):
                with contextlib.suppress(RuntimeError, ValueError):
                    faulthandler.unregister(signal.SIGUSR1)
            self._file.close()
            self._file = None
