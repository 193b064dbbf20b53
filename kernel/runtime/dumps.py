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
crashes the kernel (docs/cancellation.md, "Stack dumps").
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
from typing import IO

log = logging.getLogger("cancelkernel")


class DumpFile:
    """One kernel's dump file: armed while a cell may be wedged, read back when the kernel regains control."""

    def __init__(self, path: str):
        self.path = path
        self._file: IO[str] | None = None
        self._armed = False
        self.error: str | None = None
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            os.fchmod(fd, 0o600)
            self._file = os.fdopen(fd, "w+")
        except OSError as exc:
            self.error = f"cannot write stack dumps to {path}: {exc.strerror or exc}"
            log.warning("cancelkernel: %s; stacks of wedged cells will not be available (everything else works)", self.error)
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

    def arm(self, seconds: float) -> None:
        """Dump every thread's stack in `seconds` unless pushed again or disarmed first."""
        if self._file is None:
            return
        # Cancel first: it waits for a dump in progress, which must not be cut short.
        faulthandler.cancel_dump_traceback_later()
        faulthandler.dump_traceback_later(max(seconds, 0.001), repeat=False, file=self._file, exit=False)
        self._armed = True

    def disarm(self) -> None:
        if self._armed:
            faulthandler.cancel_dump_traceback_later()
            self._armed = False

    def take(self) -> str:
        """What was dumped since the last take (usually nothing: one fstat), then empty the file."""
        if self._file is None:
            return ""
        try:
            if os.fstat(self._file.fileno()).st_size == 0:
                return ""
        except OSError:
            return ""
        text = self.read()
        self.clear()
        return text

    def read(self) -> str:
        if self._file is None:
            return ""
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def clear(self) -> None:
        if self._file is None:
            return
        os.ftruncate(self._file.fileno(), 0)
        os.lseek(self._file.fileno(), 0, os.SEEK_SET)

    def close(self) -> None:
        self.disarm()
        if self._file is not None:
            if hasattr(signal, "SIGUSR1"):
                try:
                    faulthandler.unregister(signal.SIGUSR1)
                except (RuntimeError, ValueError):
                    pass
            self._file.close()
            self._file = None
