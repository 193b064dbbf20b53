"""The budgets a caller gives, read in the one duration and size grammars; BadInputError when they do not parse.

Also a first-line %%budget / %%timeout read here for kernels that do not enforce budgets themselves.
"""

from __future__ import annotations

import math
import typing as t

from .. import directives
from ..durations import DurationError, parse_duration
from ..sizes import SizeError, parse_size
from .errors import BadInputError


def parse_seconds(value: t.Any, name: str, *, hint: str = "") -> float:
    """A duration in the one grammar, in seconds; otherwise a BadInputError naming `name`, with `hint`
    (what else it may be)."""
    try:
        return parse_duration(value, name)
    except DurationError as exc:
        raise BadInputError(f"{exc}{hint}") from None


def check_budget(name: str, value: t.Any, *, allow_auto: bool = False) -> float | str | None:
    """A budget in the one duration grammar: None or 0 (no budget), seconds, or "auto" where allowed."""
    if value is None:
        return None
    if allow_auto and value == "auto":
        return "auto"
    hint = '; or "auto" to derive it from measured runtimes' if allow_auto else ""
    return parse_seconds(value, name, hint=hint) or None


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
    """A kernel without our budgets: read a first-line %%budget / %%timeout here, comment it out,
    and enforce it from the client.

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
    note = (
        f"kernel {kernel_name!r} has no cell budgets: this client read {line!r}, sent the line as a comment, "
        "and enforced the budget itself"
    )
    if said.timeout is not None:
        note += " (a %%timeout is enforced as a wall budget: the cell is interrupted, not failed with TimeoutError)"
    return code, wall, quiet, [note]
