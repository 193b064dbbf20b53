"""A dropped connection's way back: tries spaced by a pause that doubles, all within one bound for the outage.

The bound is what a caller may wait for a link to come back (a cell's
answer, a restart); past it the caller is told the server or the network is
down, and its next call starts a new outage with a new bound.
"""

from __future__ import annotations

from dataclasses import dataclass

# Seconds an outage may last before the caller is told the kernel is unreachable.
RECONNECT_WITHIN = 30.0
# The pause after the first failed try; it doubles after each one, up to MAX_PAUSE.
FIRST_PAUSE = 0.1
MAX_PAUSE = 2.0
# Seconds one try may take (a connection that opens but never answers, as in a partition).
TRY_TIMEOUT = 5.0


@dataclass
class Outage:
    """One outage: when it began, its bound, its tries so far, and when the next one is due."""

    started: float  # time.monotonic()
    within: float = RECONNECT_WITHIN
    tries: int = 0
    next_try: float = 0.0
    pause: float = FIRST_PAUSE
    last_error: str = ""

    def __post_init__(self) -> None:
        self.next_try = self.next_try or self.started  # the first try at once

    def due(self, now: float) -> bool:
        return now >= self.next_try

    def failed(self, error: str, now: float) -> None:
        """A try failed: the next one after the pause, which doubles (up to MAX_PAUSE)."""
        self.tries += 1
        self.last_error = error
        self.next_try = now + self.pause
        self.pause = min(self.pause * 2, MAX_PAUSE)

    def over(self, now: float) -> bool:
        """The bound has passed: no more tries in this outage."""
        return now - self.started >= self.within

    def wait(self, now: float) -> float:
        """Seconds until the next try is due."""
        return max(0.0, self.next_try - now)

    def try_timeout(self, now: float) -> float:
        """How long the next try may take: TRY_TIMEOUT, less near the bound (never under a second)."""
        return max(1.0, min(TRY_TIMEOUT, self.started + self.within - now))

    def text(self, now: float) -> str:
        """What the outage was, for an error: how long, how many tries, the last error."""
        tries = f"{self.tries} {'try' if self.tries == 1 else 'tries'}"
        return f"{now - self.started:.0f} s, {tries}" + (f"; last: {self.last_error}" if self.last_error else "")
