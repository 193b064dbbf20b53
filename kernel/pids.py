"""Processes on this host: whether one runs (for the kernel, a predecessor's
record, and the agent client), and signalling the process group of a kernel we
started without hitting a stranger that has since taken its number."""

from __future__ import annotations

import contextlib
import os
import signal
import typing as t

if t.TYPE_CHECKING:
    import subprocess


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


def group_is_ours(process: subprocess.Popen | None, pgid: int | None) -> bool:
    """Whether process group `pgid`, led by our child `process`, may still be signalled.

    Yes while the child is not reaped (its number cannot be reused), or once
    reaped if no process has taken its number (then only what the child left
    in its group can hold it). No when another process now has that number:
    pid_max can be 32768, and a busy machine wraps it in minutes.
    """
    if not pgid:
        return False
    if process is not None and process.poll() is None:
        return True
    try:
        os.kill(pgid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # it exists: another user's process
    return False


def kill_child_group(process: subprocess.Popen | None, pgid: int | None, signum: int = signal.SIGKILL) -> None:
    """`signum` to our child's process group while it is ours, else to the child alone if it still runs."""
    if group_is_ours(process, pgid) and hasattr(os, "killpg"):
        with contextlib.suppress(OSError):
            os.killpg(t.cast(int, pgid), signum)
            return
    if process is not None and process.poll() is None:
        with contextlib.suppress(OSError):
            process.send_signal(signum)


def forget_reused_group(km: t.Any) -> None:
    """Keep jupyter_client from signalling a kernel's group number once a stranger has it.

    Its LocalProvisioner signals `pgid` for as long as it holds the process,
    reaped or not: restarting or shutting down a kernel that died earlier
    would SIGKILL whatever process took the number since.
    """
    provisioner = getattr(km, "provisioner", None)
    process = getattr(provisioner, "process", None)
    pgid = getattr(provisioner, "pgid", None)
    if process is not None and pgid and not group_is_ours(process, pgid):
        provisioner.pgid = None  # type: ignore[union-attr]  # it falls back to the (reaped, so inert) process
