"""Helpers for the agent client tests (no tests here): an AgentKernel that is always closed, no process left behind."""

from __future__ import annotations

import contextlib
import os
import time
import typing as t
from collections.abc import Iterator

from cancelkernel.agent import AgentKernel

# Longer than the default 1 s: on a loaded machine a kernel may take a while to answer an interrupt,
# and a grace too short turns an expected "interrupted" into a restart (seen with stock under a CPU hog at 0.5 s).
GRACE = 2.0


def kernel_args(name: str) -> list[str]:
    return [f"--CancelKernel.interrupt_grace={GRACE}"] if name.startswith("cancelkernel") else []


def process_gone(pid: int | None, timeout: float = 10.0) -> bool:
    if pid is None:
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        # A zombie child of this process counts as gone once reaped; reap it if it is ours.
        with contextlib.suppress(ChildProcessError, OSError):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                return True
        time.sleep(0.05)
    return False


@contextlib.contextmanager
def agent(name: str = "cancelkernel", **kwargs: t.Any) -> Iterator[AgentKernel]:
    """A started AgentKernel, closed even on failure; asserts its kernel process is gone afterwards."""
    kwargs.setdefault("extra_arguments", kernel_args(name))
    if not name.startswith("cancelkernel"):
        kwargs.setdefault("interrupt_grace", GRACE)
    ak = AgentKernel(name, **kwargs)
    pids: list[int | None] = []
    try:
        ak.start()
        yield ak
    finally:
        pids.extend([ak.pid, spare_pid(ak)])
        ak.close()
    assert all(process_gone(pid) for pid in pids), f"kernel process {pids} left behind"


def spare_pid(ak: AgentKernel, wait: float = 0.0) -> int | None:
    """The pid of the AgentKernel's warm spare kernel, if it has one (waiting up to `wait` s for it to be ready)."""
    spare = getattr(ak.link.lifecycle, "spare", None)
    deadline = time.monotonic() + wait
    while spare is not None and not spare.ready and time.monotonic() < deadline:
        time.sleep(0.05)
    km = spare.km if spare is not None else None
    return int(km.provisioner.pid) if km is not None and km.provisioner is not None else None
