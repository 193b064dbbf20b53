"""The files a kernel keeps beside its connection file: one naming rule,
for the kernel and for whoever looks for them."""

from __future__ import annotations

import os

from jupyter_core.paths import jupyter_runtime_dir

STACKS = "stacks.txt"  # faulthandler's dumps of the kernel's threads (owner-only)
RUNNING = "running.json"  # the record of the running cell, kept while a cell runs


def kernel_file(connection_file: str, kind: str, directory: str | None = None) -> str:
    """The file `kind` of the kernel started on `connection_file`: the same for a kernel restarted on it."""
    stem = os.path.splitext(os.path.basename(connection_file))[0]
    return os.path.join(directory or jupyter_runtime_dir(), f"cancelkernel-{stem}-{kind}")
