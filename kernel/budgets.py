"""Per-cell directives: `%%budget wall=30 quiet=10` and `%%timeout 5`, and metadata budgets.

Pure parsing, no Jupyter: the kernel reads the directive line before running
the cell (so the budget covers the whole execution) and an input transformer
removes it from the code IPython compiles.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*([-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|inf|nan))\s*([a-z]*)\s*$")
DIRECTIVES = ("budget", "timeout")
CHECKPOINT_WHEN = ("before",)


class BudgetError(ValueError):
    """A budget or timeout the kernel cannot use; the cell is not run."""


@dataclass
class CellDirectives:
    """What the first line of a cell (and the request metadata) asked for."""

    wall_budget: float | None = None
    quiet_budget: float | None = None
    timeout: float | None = None
    checkpoint: str | None = None
    source_line: str | None = None


def parse_duration(text: object, what: str) -> float:
    """Seconds from '30', '30s', '1.5m', '2h' or a number; 0 means off."""
    if isinstance(text, bool):
        raise BudgetError(f"{what} must be a number of seconds, not {text!r}")
    if isinstance(text, (int, float)):
        value = float(text)
    elif isinstance(text, str):
        match = _DURATION.match(text.lower())
        if not match or match.group(2) not in _UNITS:
            raise BudgetError(f"{what}={text!r} is not a duration; write e.g. {what}=30, {what}=30s, {what}=2m or {what}=1h")
        value = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise BudgetError(f"{what} must be a number of seconds, not {type(text).__name__} {text!r}")
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise BudgetError(f"{what} must be a finite number of seconds >= 0 (0 turns it off), not {text!r}")
    return value


def first_directive_line(code: str) -> str | None:
    """The `%%budget ...` / `%%timeout ...` line if the cell starts with one."""
    for line in code.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        name = stripped[2:].split(None, 1)[0] if stripped.startswith("%%") and len(stripped) > 2 else ""
        return stripped if name in DIRECTIVES else None
    return None


def parse_directive(line: str) -> CellDirectives:
    """Parse one directive line; raise BudgetError with a fix-it message when it is wrong."""
    name, _, rest = line[2:].partition(" ")
    directives = CellDirectives(source_line=line)
    if name == "timeout":
        args = rest.split()
        if len(args) != 1:
            raise BudgetError("usage: %%timeout SECONDS (e.g. %%timeout 5 or %%timeout 2m) as the first line of the cell")
        directives.timeout = parse_duration(args[0], "timeout")
        if directives.timeout == 0:
            raise BudgetError("%%timeout needs a duration > 0")
        return directives
    for item in rest.split():
        key, sep, value = item.partition("=")
        if not sep or not value:
            raise BudgetError(f"%%budget expects key=value pairs (wall=30 quiet=10 checkpoint=before), got {item!r}")
        if key == "wall":
            directives.wall_budget = parse_duration(value, "wall")
        elif key == "quiet":
            directives.quiet_budget = parse_duration(value, "quiet")
        elif key == "timeout":
            directives.timeout = parse_duration(value, "timeout") or None
        elif key == "checkpoint":
            if value not in CHECKPOINT_WHEN:
                raise BudgetError(f"checkpoint={value!r} is not known; use checkpoint=before")
            directives.checkpoint = value
        else:
            raise BudgetError(f"%%budget does not know {key!r}; use wall=, quiet=, timeout= or checkpoint=")
    return directives


def from_metadata(metadata: object) -> CellDirectives:
    """Budgets from execute_request metadata["cancelkernel"] (wall_budget, quiet_budget, timeout, checkpoint)."""
    directives = CellDirectives()
    if metadata is None:
        return directives
    if not isinstance(metadata, dict):
        raise BudgetError(f"metadata.cancelkernel must be an object, not {type(metadata).__name__}")
    for key in ("wall_budget", "quiet_budget", "timeout"):
        if metadata.get(key) is not None:
            setattr(directives, key, parse_duration(metadata[key], key))
    checkpoint = metadata.get("checkpoint")
    if checkpoint is not None:
        if checkpoint not in CHECKPOINT_WHEN:
            raise BudgetError(f"metadata.cancelkernel.checkpoint={checkpoint!r} is not known; use \"before\"")
        directives.checkpoint = checkpoint
    return directives


def merge(*layers: CellDirectives) -> CellDirectives:
    """Later layers win where they set a value (defaults < metadata < magic)."""
    out = CellDirectives()
    for layer in layers:
        for key in ("wall_budget", "quiet_budget", "timeout", "checkpoint", "source_line"):
            value = getattr(layer, key)
            if value is not None:
                setattr(out, key, value)
    return out


def strip_directive(lines: list[str]) -> list[str]:
    """IPython input transformer: drop a leading directive line (the kernel already read it)."""
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        if first_directive_line(line) is not None:
            return lines[:i] + ["\n"] + lines[i + 1 :]  # keep line numbers of the rest
        return lines
    return lines
