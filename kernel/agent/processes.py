"""Processes on this host: which connection file a pid runs, and what an exit code means to a person."""

from __future__ import annotations

import os
import signal

from .. import protocol


def runs_connection_file(pid: int, connection_file: str) -> bool:
    """The process on this host was started with this connection file (so its pid means what it says)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().decode(errors="replace")
    except OSError:
        return False
    return os.path.basename(connection_file) in cmdline


def describe_exit(code: int | None) -> str:
    """' (killed by SIGKILL: ...)' from a process exit code."""
    if code is None:
        return ""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = {
            "SIGKILL": ", cause unknown",
            "SIGSEGV": ": a segmentation fault in native code",
            "SIGABRT": ": aborted by native code",
        }.get(name, "")
        return f" (killed by {name}{hint})"
    if code == protocol.EXIT_PORT_IN_USE:
        return f" (exit code {code}: another process took a port it was given; start it again)"
    return f" (exit code {code})"
