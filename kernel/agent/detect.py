"""Client-side runaway detection: wall and quiet budgets, checked on the client's clock.

It works with any kernel because it only needs what every kernel sends: the
time the request went out and the time of each iopub output.
"""

from __future__ import annotations

import math
import time
import typing as t
from dataclasses import dataclass, field

from .. import directives
from ..durations import DurationError, parse_duration
from ..sizes import SizeError, parse_size
from .errors import BadInputError

WHY_TEXT = {
    "wall_budget": "the cell ran for {elapsed:.1f} s, past its wall budget of {wall:g} s",
    "quiet_budget": "the cell printed nothing for {quiet_for:.1f} s while busy, past its quiet budget of {quiet:g} s",
    "manual": "the caller asked to interrupt the cell (AgentKernel.interrupt)",
    "died": "the kernel process died while running the cell",
}


def check_budget(name: str, value: t.Any, *, allow_auto: bool = False) -> float | str | None:
    """A budget in the one duration grammar: None or 0 (no budget), seconds, or "auto" where allowed."""
    if value is None:
        return None
    if allow_auto and value == "auto":
        return "auto"
    try:
        return parse_duration(value, name) or None
    except DurationError as exc:
        hint = '; or "auto" to derive it from measured runtimes' if allow_auto else ""
        raise BadInputError(f"{exc}{hint}") from None


def check_memory_budget(name: str, value: t.Any) -> int | None:
    """A memory budget in the one size grammar: None or 0 (no budget), bytes, or "2G", "512M"."""
    if value is None:
        return None
    try:
        return parse_size(value, name) or None
    except SizeError as exc:
        raise BadInputError(str(exc)) from None


def cell_budget(name: str, value: t.Any, default: t.Any, *, allow_auto: bool = False) -> t.Any:
    """A per-cell budget: None takes the default; 0 (or math.inf) turns it off; anything else is checked."""
    if value is None:
        return default
    if isinstance(value, float) and math.isinf(value) and value > 0:
        return None
    return check_budget(name, value, allow_auto=allow_auto)


def read_directive(code: str, wall: t.Any, quiet: t.Any, kernel_name: str) -> tuple[str, t.Any, t.Any, list[str]]:
    """A kernel without our budgets: read a first-line %%budget / %%timeout here, comment it out, and enforce it from the client.

    The cell's own directive wins over the call's (already checked) budgets, as in our kernel.
    """
    line = directives.first_directive_line(code)
    if line is None:
        return code, wall, quiet, []
    try:
        said = directives.parse_directive(line)
    except directives.BudgetError as exc:
        raise BadInputError(f"{exc} (the cell was not run)") from None
    lines = code.splitlines(keepends=True)
    at = next(i for i, text in enumerate(lines) if text.strip())
    # A comment, not a blank line: IPython drops leading blank lines, which would shift the line numbers.
    code = "".join(lines[:at]) + f"# {line}  (enforced by the client)\n" + "".join(lines[at + 1 :])
    wall = said.wall_budget if said.wall_budget is not None else said.timeout if said.timeout is not None else wall
    quiet = said.quiet_budget if said.quiet_budget is not None else quiet
    wall, quiet = (wall or None), (quiet or None)  # 0 turns a budget off, as in the kernel
    note = f"kernel {kernel_name!r} has no cell budgets: this client read {line!r}, sent the line as a comment, and enforced the budget itself"
    if said.timeout is not None:
        note += " (a %%timeout is enforced as a wall budget: the cell is interrupted, not failed with TimeoutError)"
    return code, wall, quiet, [note]


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
