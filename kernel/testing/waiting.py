"""Waiting on a kernel's state, never on the clock: a cell runs its code, sits in its blocking call, holds the GIL.

A test that sends a cell, sleeps, then interrupts passes only when the
machine is fast enough; these helpers ask the kernel instead (our
`cancel_status_request` answers on the control channel while a cell runs).

Why "innermost frame at the line of a C call" means "inside that call": the
interpreter acts on an interrupt (async exception or signal) only at its
eval-breaker checks, which sit at function entry, backward jumps and after
calls; none lies between the start of a line like `lock.acquire()` and its
call.  So once a thread's innermost frame is at such a line, an interrupt
cannot land before the call has started.
"""

from __future__ import annotations

import time
import typing as t

from .. import protocol
from ..frames import is_cell_file, parse_faulthandler
from .kernels import REPLY_TIMEOUT, control_request

# Seconds between two status requests: short, since each is one round trip on the control channel.
POLL = 0.02


def cell_status(kc: t.Any, msg_id: str) -> dict | None:
    """The cancel_status entry of the running execution `msg_id` (None: it does not run now)."""
    content = control_request(kc, protocol.CANCEL_STATUS_REQUEST)["content"]
    return next((e for e in content.get("executions") or [] if e.get("msg_id") == msg_id), None)


def wait_running(
    kc: t.Any,
    msg_id: str,
    *,
    at: str | None = None,
    innermost: str | None = None,
    timeout: float = REPLY_TIMEOUT,
) -> dict:
    """Wait until `msg_id` runs its own code; returns its cancel_status entry.

    at: the source text of the line the cell's innermost user frame must be at
    (stripped).  innermost: text the thread's innermost frame's source line must
    contain (any code: a blocking call inside the standard library, say).
    """
    deadline = time.monotonic() + timeout
    last: dict | None = None
    while time.monotonic() < deadline:
        last = cell_status(kc, msg_id)
        if last is not None and last.get("where") is not None and _matches(last, at, innermost):
            return last
        time.sleep(POLL)  # a pause between two questions, not a guess at how long the cell takes
    raise TimeoutError(f"cell {msg_id} was not seen running (at={at!r}, innermost={innermost!r}) within {timeout:g} s; last status: {last}")


def _matches(entry: dict, at: str | None, innermost: str | None) -> bool:
    if at is not None and (entry.get("line") or "").strip() != at.strip():
        return False
    if innermost is not None:
        top = entry.get("innermost") or {}
        if innermost not in (top.get("line") or ""):
            return False
    return True


def dump_file_of(kc: t.Any, timeout: float = REPLY_TIMEOUT) -> str:
    """The kernel's stack dump file (kernel_info_reply `cancelkernel.dump_file`)."""
    from .kernels import wait_reply

    info = wait_reply(kc, kc.kernel_info(), timeout=timeout)["content"]
    path = (info.get(protocol.KEY) or {}).get("dump_file")
    if not path:
        raise RuntimeError(f"the kernel advertises no dump file: {info.get(protocol.KEY)}")
    return str(path)


def wait_dumped_in_cell(dump_file: str, lineno: int, *, timeout: float = REPLY_TIMEOUT) -> None:
    """Wait until the kernel's own dump shows a thread whose innermost frame is a cell at `lineno`.

    For a call that holds the GIL (nothing can answer a status request then):
    give the cell a budget, and the kernel's dead man's switch has faulthandler
    dump the stacks once its watchdog is starved.  Reading the file is safe; a
    dump asked for from outside while threads run is not (docs/cancellation.md).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(dump_file, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            text = ""
        for thread in parse_faulthandler(text):
            if thread.locations and is_cell_file(thread.locations[-1][0]) and thread.locations[-1][1] == lineno:
                return
        time.sleep(POLL)
    raise TimeoutError(f"no dump in {dump_file} showed a cell at line {lineno} within {timeout:g} s")

