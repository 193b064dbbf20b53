"""A file descriptor that a transport's poll watches beside the kernel's sockets, so another thread can end the wait.

`AgentKernel.interrupt()` is called from another thread (an MCP tool, a
Submission's owner) while the run loop waits in `poll`: without a wake-up the
interrupt would be seen only when that wait ends (up to 0.1 s later).
"""

from __future__ import annotations

import contextlib
import socket


class Waker:
    """One end to poll (`fileno`), one to poke (`wake`, thread-safe, never blocks)."""

    def __init__(self) -> None:
        self._read, self._write = socket.socketpair()
        self._read.setblocking(False)
        self._write.setblocking(False)

    def fileno(self) -> int:
        return self._read.fileno()

    def wake(self) -> None:
        with contextlib.suppress(OSError):  # full (a wake-up is already pending) or closed: either way nothing to add
            self._write.send(b"!")

    def drain(self) -> None:
        """Forget the wake-ups so far (the poll that saw them has returned)."""
        with contextlib.suppress(OSError):
            while self._read.recv(4096):
                pass

    def close(self) -> None:
        self._read.close()
        self._write.close()
