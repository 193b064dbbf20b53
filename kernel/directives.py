"""Per-cell directives: `%%budget wall=30 quiet=10 memory=2G` and `%%timeout 5`, and budgets in request metadata.

Pure parsing (durations and sizes through the one grammar each, cancelkernel.durations
and cancelkernel.sizes): the
kernel reads the directive line before running the cell, so the budget covers
the whole execution, and an input transformer blanks it out of the code
IPython compiles (line numbers stay as typed).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .durations import DurationError, parse_duration
from .sizes import SizeError, parse_size

DIRECTIVES = ("budget", "timeout")
CHECKPOINT_WHEN = ("before",)


class BudgetError(DurationError):
    """A budget, timeout or directive the kernel cannot use; the cell is not run."""


@dataclass
class CellDirectives:
    """What the first line of a cell (and the request metadata) asked for; None = not said."""

    wall_budget: float | None = None
    quiet_budget: float | None = None
    timeout: float | None = None
    checkpoint: str | None = None
    memory_budget: int | None = None  # bytes (0 = off)


def _duration(value: object, what: str, *, allow_zero: bool = True) -> float:
    try:
        return parse_duration(value, what, allow_zero=allow_zero)
    except DurationError as exc:
        raise BudgetError(str(exc)) from None


def _size(value: object, what: str) -> int:
    try:
        return parse_size(value, what)
    except SizeError as exc:
        raise BudgetError(str(exc)) from None


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
    directives = CellDirectives()
    if name == "timeout":
        args = rest.split()
        if len(args) != 1:
            raise BudgetError(
                "usage: %%timeout SECONDS (e.g. %%timeout 5 or %%timeout 2m) as the first line of the cell"
            )
        directives.timeout = _duration(args[0], "timeout", allow_zero=False)
        return directives
    for item in rest.split():
        key, sep, value = item.partition("=")
        if not sep or not value:
            raise BudgetError(
                f"%%budget expects key=value pairs (wall=30 quiet=10 memory=2G checkpoint=before), got {item!r}"
            )
        _set_budget(directives, key, value)
    return directives


def _set_budget(directives: CellDirectives, key: str, value: str) -> None:
    """One `key=value` of a %%budget line into `directives`."""
    if key == "wall":
        directives.wall_budget = _duration(value, "wall")
    elif key == "quiet":
        directives.quiet_budget = _duration(value, "quiet")
    elif key == "timeout":
        directives.timeout = _duration(value, "timeout") or None
    elif key == "memory":
        directives.memory_budget = _size(value, "memory")
    elif key == "checkpoint":
        if value not in CHECKPOINT_WHEN:
            raise BudgetError(f"checkpoint={value!r} is not known; use checkpoint=before")
        directives.checkpoint = value
    else:
        raise BudgetError(f"%%budget does not know {key!r}; use wall=, quiet=, memory=, timeout= or checkpoint=")


def from_metadata(metadata: object) -> CellDirectives:
    """Budgets from execute_request metadata["cancelkernel"] (wall_budget, quiet_budget, memory_budget,
    timeout, checkpoint)."""
    directives = CellDirectives()
    if metadata is None:
        return directives
    if not isinstance(metadata, dict):
        raise BudgetError(f"metadata.cancelkernel must be an object, not {type(metadata).__name__}")
    for key in ("wall_budget", "quiet_budget", "timeout"):
        if metadata.get(key) is not None:
            setattr(directives, key, _duration(metadata[key], key))
    directives.timeout = directives.timeout or None
    if metadata.get("memory_budget") is not None:
        directives.memory_budget = _size(metadata["memory_budget"], "memory_budget")
    checkpoint = metadata.get("checkpoint")
    if checkpoint is not None:
        if checkpoint not in CHECKPOINT_WHEN:
            raise BudgetError(f'metadata.cancelkernel.checkpoint={checkpoint!r} is not known; use "before"')
        directives.checkpoint = checkpoint
    return directives


def merge(*layers: CellDirectives) -> CellDirectives:
    """Later layers win where they set a value (defaults < metadata < magic)."""
    out = CellDirectives()
    for layer in layers:
        for f in fields(CellDirectives):
            value = getattr(layer, f.name)
            if value is not None:
                setattr(out, f.name, value)
    return out


def for_cell(code: str, metadata: object, defaults: CellDirectives) -> CellDirectives:
    """What a cell asks for: the kernel's `defaults` < its request's `metadata`
    (metadata["cancelkernel"]) < a first-line directive."""
    line = first_directive_line(code)
    return merge(defaults, from_metadata(metadata), parse_directive(line) if line else CellDirectives())


def strip_directive(lines: list[str]) -> list[str]:
    """IPython input transformer: blank a leading directive line (the kernel already read it)."""
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        if first_directive_line(line) is not None:
            return [*lines[:i], "\n", *lines[i + 1 :]]  # keep line numbers of the rest
        return lines
    return lines
