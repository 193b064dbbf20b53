"""The one duration grammar: budgets, timeouts and grace periods everywhere.

`%%budget`, `%%timeout`, execute_request metadata, every command-line flag and
the agent client all read durations with `parse_duration`, so the same text
means the same thing everywhere, and what is refused is refused with one
message.

A duration is a number of seconds (an int or a float, never a bool), or a
string: a decimal number (`30`, `1.5`, `.5`, `1e2`) with an optional unit
(`ms`, `s`, `sec`, `m`, `min`, `h`), e.g. `30s`, `2m`, `1.5h`.  It is finite,
at least 0 and at most MAX_SECONDS.  Whether 0 is allowed is the caller's
choice: for budgets it means "off".
"""

from __future__ import annotations

import math
import re

# The longest duration anything can be armed with (the stack-dump timer
# overflows past about 292 years); a year is longer than any cell should run.
MAX_SECONDS = 365 * 24 * 3600.0

UNITS = {"": 1.0, "ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_TEXT = re.compile(r"^\s*((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


class DurationError(ValueError):
    """A value that is not a usable duration; the message says what to write instead."""


def parse_duration(value: object, what: str, *, allow_zero: bool = True) -> float:
    """Seconds from `value` (see the module docstring); DurationError naming `what` otherwise."""
    seconds = _seconds(value)
    if seconds is None or not (0 <= seconds <= MAX_SECONDS) or (seconds == 0 and not allow_zero):
        raise DurationError(refusal(value, what, allow_zero=allow_zero))
    return seconds


def refusal(value: object, what: str, *, allow_zero: bool = True) -> str:
    """The one message for a refused duration."""
    lower = "0 (off)" if allow_zero else "more than 0"
    return (
        f"{what}={value!r} is not a duration: write seconds as a number (30, 1.5, 1e2) or with a unit "
        f"(500ms, 30s, 2m, 1h), from {lower} up to {MAX_SECONDS / 86400:g} days"
    )


def number_with_unit(text: str, units: dict[str, float]) -> float | None:
    """`text` as a decimal number times its optional, case-insensitive unit from `units`; None if it is not one.

    The number-and-unit reading both grammars share (durations here, sizes in sizes.py).
    """
    match = _TEXT.match(text)
    if match is None:
        return None
    unit = match.group(2).lower()
    if unit not in units:
        return None
    number = float(match.group(1)) * units[unit]
    return number if math.isfinite(number) else None


def _seconds(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value) if not isinstance(value, int) or abs(value) < 10**300 else math.inf
        return number if math.isfinite(number) else None
    if isinstance(value, str):
        return number_with_unit(value, UNITS)
    return None
