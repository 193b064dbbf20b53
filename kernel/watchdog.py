"""The watchdog: a thread of its own that notices runaway and unresponsive cells.

Per execution it knows the start, the last output, the budgets and the
interrupts sent.  It trips on the wall budget (seconds of execution) or the
quiet budget (seconds without output), and reports an interrupt that did not
stop the cell within the grace period.  It decides nothing itself: the kernel
passes callbacks that publish events, take stacks and interrupt ONCE.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from .cancel import CancellationCore, Execution

log = logging.getLogger("cancelkernel")

# How often the watchdog looks while a cell runs: budgets are checked to this precision.
TICK = 0.02

# How often a live watchdog pushes faulthandler's dump deadline forward (a dead man's switch).
ALIVE_EVERY = 0.5


@dataclass
class Watched:
    """What the watchdog knows about the running execution."""

    execution: Execution
    wall_budget: float = 0.0  # 0 = off
    quiet_budget: float = 0.0  # 0 = off
    last_output: float = field(default_factory=time.monotonic)
    tripped: str | None = None  # the budget that tripped, once
    unresponsive: bool = False
    alive_at: float = field(default_factory=time.monotonic)  # when the watchdog last pushed the dump deadline

    def seconds_to_trip(self, now: float) -> float | None:
        """Time left before a budget trips, if any budget is set."""
        left = []
        if self.wall_budget:
            left.append(self.execution.started + self.wall_budget - now)
        if self.quiet_budget:
            left.append(self.last_output + self.quiet_budget - now)
        return max(0.0, min(left)) if left else None

    def seconds_since_output(self) -> float:
        return time.monotonic() - self.last_output


class Watchdog:
    """Budgets and grace periods for the running execution, on a thread of its own."""

    def __init__(
        self,
        core: CancellationCore,
        *,
        grace: float,
        on_trip: Callable[[Watched, str], None],
        on_unresponsive: Callable[[Watched], None],
        on_alive: Callable[[float], None] | None = None,
    ):
        self.core = core
        self._on_alive = on_alive
        self.grace = grace
        self._on_trip = on_trip
        self._on_unresponsive = on_unresponsive
        self._watched: Watched | None = None
        self._scopes: list = []  # active deadline scopes (deadlines.CancelScope), outermost first
        self._scopes_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="cancelkernel-watchdog", daemon=True)
        self._thread.start()

    @property
    def watched(self) -> Watched | None:
        return self._watched

    def watch(self, execution: Execution, *, wall_budget: float = 0.0, quiet_budget: float = 0.0) -> Watched:
        watched = Watched(execution, wall_budget=wall_budget, quiet_budget=quiet_budget)
        self._watched = watched
        self._wake.set()
        return watched

    def unwatch(self, execution: Execution) -> None:
        if self._watched is not None and self._watched.execution is execution:
            self._watched = None

    def output_seen(self) -> None:
        """Any output of the running cell (stream, display, error) resets the quiet clock."""
        watched = self._watched
        if watched is not None:
            watched.last_output = time.monotonic()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()

    # -- deadlines.runtime: scopes armed by `with fail_after(...)` in a cell --

    def arm(self, scope: object) -> None:
        with self._scopes_lock:
            self._scopes.append(scope)
        self._wake.set()

    def disarm(self, scope: object) -> None:
        with self._scopes_lock:
            if scope in self._scopes:
                self._scopes.remove(scope)
        self.core.end_scope(scope)

    def _expired_scope(self, now: float) -> object | None:
        """The outermost scope whose deadline passed (it is the one that catches, as in trio)."""
        with self._scopes_lock:
            for scope in self._scopes:
                if not scope.cancel_called and scope.deadline <= now:  # type: ignore[attr-defined]
                    return scope
        return None

    def _next_wake(self, now: float) -> float | None:
        with self._scopes_lock:
            deadlines = [s.deadline for s in self._scopes if not s.cancel_called]  # type: ignore[attr-defined]
        if self._watched is not None:
            deadlines.append(now + TICK)
        return min(deadlines) - now if deadlines else None

    def _run(self) -> None:
        while not self._stopped:
            now = time.monotonic()
            wait = self._next_wake(now)
            if wait is None:
                self._wake.wait()
                self._wake.clear()
                continue
            if wait > 0 and self._wake.wait(wait):
                self._wake.clear()
            try:
                self.core.heartbeat()
                now = time.monotonic()
                scope = self._expired_scope(now)
                if scope is not None and not self.core.fire_scope(scope):
                    self._wake.wait(TICK)  # between statements: try again when user code resumes
                watched = self._watched
                if watched is not None:
                    self.check(watched, now)
            except Exception:  # noqa: BLE001 - the watchdog must outlive any bug in a callback
                log.exception("watchdog check failed")

    def check(self, watched: Watched, now: float | None = None) -> None:
        """One look at the running execution (public for tests with an injected clock)."""
        now = time.monotonic() if now is None else now
        execution = watched.execution
        if execution.ended:
            return
        if execution.escalate_at is not None and now >= execution.escalate_at:
            self.core.escalate(execution)
        if self._on_alive is not None and not execution.cancelled and now - watched.alive_at >= ALIVE_EVERY:
            left = watched.seconds_to_trip(now)
            if left is not None:
                watched.alive_at = now
                self._on_alive(left)
        if watched.tripped is None and not execution.cancelled:
            if watched.wall_budget and now - execution.started > watched.wall_budget:
                watched.tripped = "wall_budget"
            elif watched.quiet_budget and now - watched.last_output > watched.quiet_budget:
                watched.tripped = "quiet_budget"
            if watched.tripped is not None:
                self._on_trip(watched, watched.tripped)
        if (
            execution.cancelled
            and not watched.unresponsive
            and execution.cancel_time is not None
            and now - execution.cancel_time > self.grace
            and execution.window is not None
        ):
            watched.unresponsive = True
            self._on_unresponsive(watched)
