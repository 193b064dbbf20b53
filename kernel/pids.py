"""Whether a process runs on this host: the one reading, for the kernel
(a predecessor's record) and the agent client."""

from __future__ import annotations

import os


def process_running(pid: int) -> bool:
    """The process exists and is not a zombie (a dead child nobody reaped yet)."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        pass  # it exists; another user's
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (macOS): trust kill(0)
