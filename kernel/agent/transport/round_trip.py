"""A link's round trip, smoothed as TCP smooths it (RFC 6298): what a reply may take beyond the kernel's own time.

A reply that crosses a server and a network comes one round trip later than
on the kernel's own host; the link waits that much longer before it takes a
silent control channel for a wedged kernel.  Samples are the websocket's
ping and pong, which the server answers itself, without the kernel.
"""

from __future__ import annotations

# Weights of a new sample in the smoothed round trip and in its variation (RFC 6298's alpha and beta).
ALPHA = 1 / 8
BETA = 1 / 4
# How many variations above the smoothed round trip a reply may come (RFC 6298's K).
K = 4


class RoundTrip:
    """The smoothed round trip and its variation, from samples in seconds."""

    def __init__(self) -> None:
        self.smoothed: float | None = None
        self.variation = 0.0
        self.samples = 0

    def sample(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.samples += 1
        if self.smoothed is None:
            self.smoothed, self.variation = seconds, seconds / 2
            return
        self.variation = (1 - BETA) * self.variation + BETA * abs(self.smoothed - seconds)
        self.smoothed = (1 - ALPHA) * self.smoothed + ALPHA * seconds

    def allowance(self) -> float:
        """Seconds a reply may come later than on a local link (0 before the first sample)."""
        if self.smoothed is None:
            return 0.0
        return self.smoothed + K * self.variation
