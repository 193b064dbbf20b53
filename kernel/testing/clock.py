"""An injectable clock for tests of logic that reads time.monotonic()."""

from __future__ import annotations


class Clock:
    """Callable like time.monotonic(); tests move `now` by hand."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
