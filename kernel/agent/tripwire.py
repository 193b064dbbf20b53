"""Client-side runaway detection: wall and quiet budgets, checked on the client's clock.

It works with any kernel because it only needs what every kernel sends: the
time the request went out and the time of each iopub output.
"""

from __future__ import annotations

import time
import typing as t
from dataclasses import dataclass, field

WHY_TEXT = {
    "wall_budget": "the cell ran for {elapsed:.1f} s, past its wall budget of {wall:g} s",
    "quiet_budget": "the cell printed nothing for {quiet_for:.1f} s while busy, past its quiet budget of {quiet:g} s",
    "manual": "the caller asked to interrupt the cell (AgentKernel.interrupt)",
    "died": "the kernel process died while running the cell",
}


@dataclass
class Tripwire:
    """Knows when one execution started and last spoke, and whether a budget has tripped.

    `clock` is injectable so tests can drive it without sleeping.
    """

    wall_budget: float | None = None
    quiet_budget: float | None = None
    clock: t.Callable[[], float] = time.monotonic
    started: float = 0.0
    last_output: float = 0.0
    busy: bool = False
    tripped: str | None = None
    tripped_at: float | None = None
    slack: float = 0.0
    _outputs: int = field(default=0, repr=False)

    def start(self) -> None:
        self.started = self.last_output = self.clock()

    def output_seen(self) -> None:
        """Any iopub output of the cell (stream, display, error, clear) resets the quiet clock."""
        self.last_output = self.clock()
        self._outputs += 1

    def elapsed(self) -> float:
        return self.clock() - self.started

    def quiet_for(self) -> float:
        return self.clock() - self.last_output

    def check(self) -> str | None:
        """The budget that trips now, once; None otherwise (and after the first trip)."""
        if self.tripped is not None:
            return None
        now = self.clock()
        if self.wall_budget is not None and now - self.started > self.wall_budget + self.slack:
            self.tripped = "wall_budget"
        elif self.quiet_budget is not None and self.busy and now - self.last_output > self.quiet_budget + self.slack:
            self.tripped = "quiet_budget"
        if self.tripped is not None:
            self.tripped_at = now
        return self.tripped

    def due(self) -> str | None:
        """The budget that is over now, ignoring the slack (does not count as the trip)."""
        now = self.clock()
        if self.wall_budget is not None and now - self.started > self.wall_budget:
            return "wall_budget"
        if self.quiet_budget is not None and self.busy and now - self.last_output > self.quiet_budget:
            return "quiet_budget"
        return None

    def due_in(self) -> float | None:
        """Seconds until a budget is over, ignoring the slack."""
        now = self.clock()
        waits = []
        if self.wall_budget is not None:
            waits.append(self.started + self.wall_budget - now)
        if self.quiet_budget is not None:
            waits.append(self.last_output + self.quiet_budget - now)
        return max(0.0, min(waits)) if waits else None

    def next_check_in(self) -> float | None:
        """Seconds until a budget could trip (None: no budget can trip)."""
        if self.tripped is not None:
            return None
        now = self.clock()
        waits = []
        if self.wall_budget is not None:
            waits.append(self.started + self.wall_budget + self.slack - now)
        if self.quiet_budget is not None:
            waits.append(self.last_output + self.quiet_budget + self.slack - now)
        return max(0.0, min(waits)) if waits else None

    def why(self, reason: str) -> str:
        """The sentence a person reads in the log and the result."""
        return WHY_TEXT.get(reason, reason).format(
            elapsed=self.elapsed() if self.tripped_at is None else self.tripped_at - self.started,
            wall=self.wall_budget or 0,
            quiet=self.quiet_budget or 0,
            quiet_for=(self.tripped_at or self.clock()) - self.last_output,
        )
