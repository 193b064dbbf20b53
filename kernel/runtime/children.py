"""SIGINT to the kernel's child processes, as stock ipykernel's killpg would, but never to ourselves.

Linux only: children are found through /proc/PID/task/TID/children; elsewhere
nothing is found and nothing is signalled.
"""

from __future__ import annotations

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
            try:
                with open(f"/proc/{parent}/task/{tid}/children", "rb") as f:
                    children = [int(c) for c in f.read().split()]
            except (OSError, ValueError):
                continue
            found.extend(children)
            frontier.extend(children)
    return found


def signal_child_processes(signum: int) -> None:
    """Send `signum` to every descendant of this process (a child that already exited is skipped)."""
    for pid in child_pids(os.getpid()):
        try:
            os.kill(pid, signum)
        except OSError:
            pass
