"""The one size grammar, beside the duration grammar: memory budgets and limits everywhere.

A size is a number of bytes (an int or a float, never a bool), or a string: a
decimal number (`512`, `1.5`, `.5`, `1e9`) with an optional unit.  Units are
case-insensitive:

- `K`, `M`, `G`, `T` and `KiB`, `MiB`, `GiB`, `TiB` (also `Ki`, `Mi`, `Gi`,
  `Ti`) are powers of 1024, as JupyterHub's `mem_limit`, Docker's `-m` and
  Kubernetes' `Gi` mean them: `2G` is 2 GiB;
- `KB`, `MB`, `GB`, `TB` are powers of 1000, as disks and Kubernetes' `G` mean them;
- `B` (or none) is bytes.

A size is finite, at least 0 and at most MAX_BYTES; whether 0 is allowed is
the caller's choice (for budgets it means "off").  What is refused is refused
with one message, naming what was asked and what to write instead.
"""

from __future__ import annotations

import math

from .durations import number_with_unit

# No machine this kernel runs on has an exbibyte of memory; anything larger is a typo.
MAX_BYTES = 2**60

UNITS: dict[str, float] = {
    "": 1, "b": 1,
    "k": 2**10, "ki": 2**10, "kib": 2**10, "kb": 10**3,
    "m": 2**20, "mi": 2**20, "mib": 2**20, "mb": 10**6,
    "g": 2**30, "gi": 2**30, "gib": 2**30, "gb": 10**9,
    "t": 2**40, "ti": 2**40, "tib": 2**40, "tb": 10**12,
}  # fmt: skip


class SizeError(ValueError):
    """A value that is not a usable size; the message says what to write instead."""


def parse_size(value: object, what: str, *, allow_zero: bool = True) -> int:
    """Bytes from `value` (see the module docstring); SizeError naming `what` otherwise."""
    size = _bytes(value)
    if size is None or not (0 <= size <= MAX_BYTES) or (size == 0 and not allow_zero):
        raise SizeError(refusal(value, what, allow_zero=allow_zero))
    return size


def refusal(value: object, what: str, *, allow_zero: bool = True) -> str:
    """The one message for a refused size."""
    lower = "0 (off)" if allow_zero else "more than 0"
    return (
        f"{what}={value!r} is not a size: write bytes as a number (1073741824, 1e9) or with a unit "
        f"(512M, 2G, 1.5GiB = powers of 1024; 500MB, 2GB = powers of 1000), from {lower} up to 1 EiB"
    )


def _bytes(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return round(value) if math.isfinite(value) else None
    if isinstance(value, str):
        number = number_with_unit(value, UNITS)
        return None if number is None else round(number)
    return None


def format_size(size: float) -> str:
    """'1.5 GiB', '512 MiB', '12 B': how our messages print a size (powers of 1024, 3 digits)."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(size) >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size:g} B"
