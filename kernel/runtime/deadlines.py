"""In-cell deadlines: `with fail_after(5): ...` and friends, modelled on trio.

`fail_after(seconds)` / `fail_at(deadline)` raise `DeadlineExceeded` (a
TimeoutError) in the cell's thread when the deadline passes; `move_on_after` /
`move_on_at` just leave the block.  A deadline is a `time.monotonic()` value,
a duration is seconds: the paired names say which.  A relative scope's
deadline starts at `__enter__`, as in trio.  Nested scopes behave like trio's:
the earliest deadline fires, and the outermost expired scope catches it.

They reach Python loops, sleeps, blocking calls (main mode) and cooperative
native loops, in every exec mode, where `signal.alarm` helpers cannot.

Ownership: the runtime's `DeadlineRegistry` holds every active scope; its
watchdog fires them through the cancellation core.  A scope finds the
registry through the cell it is entered in (`cell_context`, a context
variable the executor sets around the cell's code), never through a global.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .core import CancellationCore
    from .execution import Execution

__all__ = ["CancelScope", "DeadlineExceeded", "fail_after", "fail_at", "move_on_after", "move_on_at"]


class DeadlineExceeded(TimeoutError):
    """A `fail_after` / `fail_at` deadline (or a cell's %%timeout) passed; the message says which."""


class _ScopeExpired(KeyboardInterrupt):
    """Raised into the cell's thread when a scope's deadline passes (converted when the scope exits)."""

    scope: CancelScope | None = None


@dataclass
class CellContext:
    """What a scope entered in a cell needs: the cell's execution and the runtime's registry."""

    execution: Execution
    registry: DeadlineRegistry
    label_of: Callable[[str], str | None]


# The cell whose code runs in this context (set by the executor around user code).
cell_context: contextvars.ContextVar[CellContext | None] = contextvars.ContextVar("cancelkernel_cell", default=None)

_ids = itertools.count(1)


class CancelScope:
    """One block with a deadline.

    `cancel_called` says the deadline fired; `cancelled_caught` says this
    scope then actually stopped something (trio's distinction).
    """

    def __init__(
        self, *, raise_on_expiry: bool, description: str, deadline: float | None = None, seconds: float | None = None
    ):
        self.raise_on_expiry = raise_on_expiry
        self.description = description
        self._seconds = seconds
        self.deadline = math.inf if deadline is None else deadline
        self.id = next(_ids)
        self.cancel_called = False
        self.cancelled_caught = False
        self.active = False
        self.started = 0.0
        self.where = ""
        self.thread_id = 0
        self.execution: Execution | None = None
        self._registry: DeadlineRegistry | None = None
        # An async exception can only carry a class: one per scope, so a late
        # one is recognisable and can never be mistaken for another scope's.
        self.exc_class: type[_ScopeExpired] = type("DeadlineExceeded", (_ScopeExpired,), {"scope": self})

    def __enter__(self) -> CancelScope:
        context = cell_context.get()
        if context is None or context.execution.ended:
            raise RuntimeError(
                f"{self.description} works inside a running cell of the cancelkernel kernel (its watchdog fires "
                "deadlines), on the cell's own thread; run this in a 'Python 3 (cancelkernel)' kernel cell"
            )
        caller = sys._getframe(1)
        label = context.label_of(caller.f_code.co_filename)
        self.start(
            context, f"{label}, line {caller.f_lineno}" if label else f"{caller.f_code.co_filename}:{caller.f_lineno}"
        )
        return self

    def start(self, context: CellContext, where: str, *, thread_id: int | None = None) -> None:
        """Arm the scope for `context`'s cell, on the calling thread unless told (what `__enter__` does).

        A whole-cell deadline (%%timeout) is started this way by the kernel for the cell's thread.
        """
        self.started = time.monotonic()
        if self._seconds is not None:
            self.deadline = self.started + self._seconds
        self.where = where
        self.thread_id = threading.get_ident() if thread_id is None else thread_id
        self.execution = context.execution
        self._registry = context.registry
        self.active = True
        context.registry.arm(self)

    def __exit__(self, etype: type | None, value: BaseException | None, tb: object) -> bool:
        self.stop()
        if not self.cancel_called or value is None:
            return False
        if not self.owns(value):
            return False  # an outer scope's expiry or a real interrupt: let it through
        self.cancelled_caught = True
        if self.raise_on_expiry:
            raise DeadlineExceeded(self.message()) from None
        return True

    def stop(self) -> None:
        """Disarm: nothing of this deadline can fire after this returns."""
        self.active = False
        if self._registry is not None:
            self._registry.disarm(self)

    def owns(self, value: BaseException) -> bool:
        """Whether `value` is this scope's expiry (and not an outer scope's, or a real interrupt)."""
        return (
            # CancelledError: an awaiting cell's task was cancelled for us.
            isinstance(value, (self.exc_class, asyncio.CancelledError))
            or (
                isinstance(value, KeyboardInterrupt)
                and not isinstance(value, _ScopeExpired)
                and _is_flag_interrupt(value)
            )
        )

    def message(self) -> str:
        return f"{self.description} set at {self.where} expired after {self.deadline - self.started:.3f} s"

    def __repr__(self) -> str:
        state = "expired" if self.cancel_called else ("active" if self.active else "idle")
        return f"<CancelScope {self.description} {state}>"


def _is_flag_interrupt(value: BaseException) -> bool:
    # A cooperative native loop raises a plain KeyboardInterrupt("cancelled") when the flag is set.
    return type(value) is KeyboardInterrupt and str(value) == "cancelled"


def expired_scope(error: BaseException) -> CancelScope | None:
    """The scope whose expiry `error` is, if it is one (a whole-cell deadline has no `with` to convert it)."""
    return error.scope if isinstance(error, _ScopeExpired) else None


class DeadlineRegistry:
    """Every active scope of every running cell; the watchdog asks which one has expired."""

    def __init__(self, core: CancellationCore, wake: Callable[[], None]):
        self._core = core
        self._wake = wake
        self._scopes: list[CancelScope] = []  # outermost first
        self._lock = threading.Lock()

    def arm(self, scope: CancelScope) -> None:
        with self._lock:
            self._scopes.append(scope)
        self._wake()

    def disarm(self, scope: CancelScope) -> None:
        with self._lock:
            if scope in self._scopes:
                self._scopes.remove(scope)
        self._core.end_scope(scope)

    def expired(self, now: float) -> CancelScope | None:
        """The outermost scope whose deadline passed (it is the one that catches, as in trio)."""
        with self._lock:
            return next((s for s in self._scopes if not s.cancel_called and s.deadline <= now), None)

    def next_deadline(self) -> float | None:
        with self._lock:
            return min((s.deadline for s in self._scopes if not s.cancel_called), default=None)

    @contextmanager
    def cell(self, execution: Execution, label_of: Callable[[str], str | None]) -> Iterator[None]:
        """Run the block as `execution`'s code: scopes entered inside it belong to that cell."""
        token = cell_context.set(CellContext(execution, self, label_of))
        try:
            yield
        finally:
            cell_context.reset(token)


def _seconds(seconds: float, what: str) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or math.isnan(seconds):
        raise TypeError(f"{what} takes a number of seconds, not {seconds!r}")
    if seconds < 0:
        raise ValueError(f"{what} takes seconds >= 0, not {seconds!r}")
    return float(seconds)


def _deadline(deadline: float, what: str) -> float:
    if isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or math.isnan(deadline):
        raise TypeError(f"{what} takes a time.monotonic() value, not {deadline!r}")
    return float(deadline)


def fail_after(seconds: float) -> CancelScope:
    """Raise DeadlineExceeded if the block runs longer than `seconds` (counted from entering it)."""
    seconds = _seconds(seconds, "fail_after")
    return CancelScope(raise_on_expiry=True, description=f"fail_after({seconds:g})", seconds=seconds)


def fail_at(deadline: float) -> CancelScope:
    """Raise DeadlineExceeded if the block is still running at `deadline` (time.monotonic())."""
    deadline = _deadline(deadline, "fail_at")
    return CancelScope(raise_on_expiry=True, description=f"fail_at({deadline:.3f})", deadline=deadline)


def move_on_after(seconds: float) -> CancelScope:
    """Leave the block quietly if it runs longer than `seconds` (counted from entering it)."""
    seconds = _seconds(seconds, "move_on_after")
    return CancelScope(raise_on_expiry=False, description=f"move_on_after({seconds:g})", seconds=seconds)


def move_on_at(deadline: float) -> CancelScope:
    """Leave the block quietly if it is still running at `deadline` (time.monotonic())."""
    deadline = _deadline(deadline, "move_on_at")
    return CancelScope(raise_on_expiry=False, description=f"move_on_at({deadline:.3f})", deadline=deadline)
