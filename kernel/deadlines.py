"""In-cell deadlines: `with fail_after(5): ...` and friends, modelled on trio.

`fail_after(seconds)` / `fail_at(deadline)` raise `DeadlineExceeded` (a
TimeoutError) in the exec thread when the deadline passes; `move_on_after` /
`move_on_at` just leave the block.  A deadline is a `time.monotonic()` value,
a duration is seconds: the paired names say which.  Nested scopes behave like
trio's: the earliest deadline fires, and the scope it belongs to catches it.

They reach Python loops, sleeps, blocking calls (main mode) and cooperative
native loops, in both exec modes, where `signal.alarm` helpers cannot (worker
threads).  The kernel's watchdog fires them; see cancel.py for the delivery.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import sys
import threading
import time
from typing import Callable, Protocol

__all__ = ["DeadlineExceeded", "CancelScope", "fail_after", "fail_at", "move_on_after", "move_on_at"]


class DeadlineExceeded(TimeoutError):
    """A `fail_after` / `fail_at` deadline passed; the message says which one."""


class _Runtime(Protocol):
    """What the kernel provides: arm a scope with the watchdog, and disarm it."""

    def arm(self, scope: CancelScope) -> None: ...

    def disarm(self, scope: CancelScope) -> None: ...


# Set by the kernel at start-up; None in a plain Python process.
runtime: _Runtime | None = None

# Set by the kernel: "Cell In[3]" for a cell's file name, so messages read like tracebacks.
cell_label: Callable[[str], str | None] = lambda filename: None

_ids = itertools.count(1)


class CancelScope:
    """One `with` block with a deadline.

    `cancel_called` says the deadline fired; `cancelled_caught` says this
    scope then actually stopped something (trio's distinction).
    """

    def __init__(self, deadline: float, *, raise_on_expiry: bool, description: str):
        if not isinstance(deadline, (int, float)) or isinstance(deadline, bool) or math.isnan(deadline):
            raise TypeError(f"deadline must be a time.monotonic() value, not {deadline!r}")
        self.deadline = float(deadline)
        self.raise_on_expiry = raise_on_expiry
        self.description = description
        self.id = next(_ids)
        self.cancel_called = False
        self.cancelled_caught = False
        self.active = False
        self.started = 0.0
        self.where = ""
        self.thread_id = 0
        # An async exception can only carry a class: one per scope, so a late
        # one is recognisable and can never be mistaken for another scope's.
        self.exc_class: type[_ScopeExpired] = type("DeadlineExceeded", (_ScopeExpired,), {"scope": self})

    def __enter__(self) -> CancelScope:
        if runtime is None:
            raise RuntimeError(
                f"{self.description} needs the cancelkernel kernel (the watchdog fires deadlines); "
                "run this cell in a 'Python 3 (cancelkernel)' kernel"
            )
        caller = sys._getframe(1)
        label = cell_label(caller.f_code.co_filename)
        self.where = f"{label}, line {caller.f_lineno}" if label else f"{caller.f_code.co_filename}:{caller.f_lineno}"
        self.started = time.monotonic()
        self.thread_id = threading.get_ident()
        self.active = True
        runtime.arm(self)
        return self

    def __exit__(self, etype: type | None, value: BaseException | None, tb: object) -> bool:
        self.active = False
        assert runtime is not None
        runtime.disarm(self)
        if not self.cancel_called or value is None:
            return False
        ours = (
            isinstance(value, self.exc_class)
            or isinstance(value, asyncio.CancelledError)  # an awaiting cell's task was cancelled for us
            or (isinstance(value, KeyboardInterrupt) and not isinstance(value, _ScopeExpired) and _is_flag_interrupt(value))
        )
        if not ours:
            return False  # an outer scope's expiry or a real interrupt: let it through
        self.cancelled_caught = True
        if self.raise_on_expiry:
            raise DeadlineExceeded(self.message()) from None
        return True

    def message(self) -> str:
        return f"{self.description} set at {self.where} expired after {self.deadline - self.started:.3f} s"

    def __repr__(self) -> str:
        state = "expired" if self.cancel_called else ("active" if self.active else "idle")
        return f"<CancelScope {self.description} {state}>"


class _ScopeExpired(KeyboardInterrupt):
    """Raised into the exec thread when a scope's deadline passes (converted on exit)."""

    scope: CancelScope | None = None


def _is_flag_interrupt(value: BaseException) -> bool:
    # A cooperative native loop raises a plain KeyboardInterrupt("cancelled") when the flag is set.
    return type(value) is KeyboardInterrupt and str(value) == "cancelled"


def _seconds(seconds: float, what: str) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or math.isnan(seconds):
        raise TypeError(f"{what} takes a number of seconds, not {seconds!r}")
    if seconds < 0:
        raise ValueError(f"{what} takes seconds >= 0, not {seconds!r}")
    return float(seconds)


def fail_after(seconds: float) -> CancelScope:
    """Raise DeadlineExceeded if the block runs longer than `seconds`."""
    seconds = _seconds(seconds, "fail_after")
    return CancelScope(time.monotonic() + seconds, raise_on_expiry=True, description=f"fail_after({seconds:g})")


def fail_at(deadline: float) -> CancelScope:
    """Raise DeadlineExceeded if the block is still running at `deadline` (time.monotonic())."""
    return CancelScope(deadline, raise_on_expiry=True, description=f"fail_at({deadline:.3f})")


def move_on_after(seconds: float) -> CancelScope:
    """Leave the block quietly if it runs longer than `seconds`."""
    seconds = _seconds(seconds, "move_on_after")
    return CancelScope(time.monotonic() + seconds, raise_on_expiry=False, description=f"move_on_after({seconds:g})")


def move_on_at(deadline: float) -> CancelScope:
    """Leave the block quietly if it is still running at `deadline` (time.monotonic())."""
    return CancelScope(deadline, raise_on_expiry=False, description=f"move_on_at({deadline:.3f})")
