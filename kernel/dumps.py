"""Stack dumps that work while the GIL is held: faulthandler into a per-kernel file.

faulthandler's own watchdog thread and its SIGUSR1 handler are C code: they
write every thread's Python stack even when one C call holds the GIL.  The
file is owner-only, in the Jupyter runtime dir, and advertised in
kernel_info_reply so a local client can read it while the kernel is wedged.
ipykernel redirects faulthandler's default file to the server's stderr, so we
always pass our own file.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import re
import signal
from typing import Callable

from . import stacks

log = logging.getLogger("cancelkernel")

_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[(.*?)\])? \(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


class DumpFile:
    """One kernel's dump file: armed at interrupts, read back when the kernel regains control."""

    def __init__(self, path: str):
        self.path = path
        self._file = None
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

    def clear(self) -> None:
        if self._file is None:
            return
        os.ftruncate(self._file.fileno(), 0)
        os.lseek(self._file.fileno(), 0, os.SEEK_SET)

    def arm(self, seconds: float) -> None:
        """Dump every thread's stack in `seconds` unless disarmed first (works with the GIL held)."""
        if self._file is None:
            return
        # Cancel first: it waits for a dump in progress, which the truncation would cut.
        faulthandler.cancel_dump_traceback_later()
        self.clear()
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


def parse(text: str) -> dict[int, list[tuple[str, int, str]]]:
    """faulthandler's text -> {thread id: [(file, line, function), ...] innermost LAST}."""
    threads: dict[int, list[tuple[str, int, str]]] = {}
    current: list[tuple[str, int, str]] | None = None
    for line in text.splitlines():
        header = _THREAD.match(line)
        if header:
            current = threads.setdefault(int(header.group(1), 16), [])
            continue
        frame = _FRAME.match(line)
        if frame and current is not None:
            current.append((frame.group(1), int(frame.group(2)), frame.group(3)))
        elif not line.strip():
            current = None
    for frames in threads.values():
        frames.reverse()  # faulthandler writes the newest frame first
    return threads


def thread_frames(text: str, thread_id: int, cell_label: Callable[[str], str | None]) -> list[stacks.Frame]:
    """The dumped stack of one thread as readable frames (source lines looked up now)."""
    return stacks.from_locations(parse(text).get(thread_id, []), cell_label)
