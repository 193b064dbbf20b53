"""SIGINT to the kernel's child processes, as stock ipykernel's killpg would, but never to ourselves.

Processes that were already our children when the kernel started are spared:
they belong to whatever launched us (Enterprise Gateway's launcher forks the
listener that relays its signals to us before the kernel exists), not to a cell.

Linux only: children are found through /proc/PID/task/TID/children; elsewhere
nothing is found and nothing is signalled.
"""

from __future__ import annotations

import contextlib
import os


def child_pids(pid: int) -> list[int]:
    """Descendants of `pid` ([] where /proc has no children lists)."""
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            # os.open and os.read, not open(): an interrupt reads one file per thread, at half the cost.
            try:
                fd = os.open(f"/proc/{parent}/task/{tid}/children", os.O_RDONLY)
            except OSError:
                continue
            try:
                children = [int(c) for c in os.read(fd, 1 << 16).split()]
            except (OSError, ValueError):
                continue
            finally:
                os.close(fd)
            found.extend(children)
            frontier.extend(children)
    return found


def _identity(pid: int) -> tuple[int, str] | None:
    """(pid, start time) so a pid reused by a later process is not mistaken for the old one."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (pid, fields[19].decode()) if len(fields) > 19 else None


class ChildSignaller:
    """Signals the processes cells started; the ones present at kernel start are left alone."""

    def __init__(self) -> None:
        self._spared = {ident for pid in child_pids(os.getpid()) if (ident := _identity(pid)) is not None}

    def signal(self, signum: int) -> None:
        """Send `signum` to every descendant started since (a child that already exited is skipped)."""
        for pid in child_pids(os.getpid()):
            if self._spared and _identity(pid) in self._spared:
                continue
            with contextlib.suppress(OSError):
                os.kill(pid, signum)
