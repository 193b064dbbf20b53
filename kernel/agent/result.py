"""CellResult: what happened to one cell, as pure JSON-serialisable data."""

from __future__ import annotations

import json
import typing as t
from dataclasses import asdict, dataclass, field, fields

from ..protocol import AGENT_REASONS as REASONS
from ..protocol import STATES, STATUSES, State, Status
from ..words import plural

__all__ = ["REASONS", "STATES", "STATUSES", "CellResult"]


@dataclass
class CellResult:
    """The outcome of one `AgentKernel.run` (or `retry`).

    status: ok | error | interrupted | restarted | died
    state: intact (namespace as the cell left it) | suspect (an interrupt hit
    the cell mid-way) | restored (a new kernel, with a checkpoint brought
    back) | lost (a new kernel, empty).
    """

    status: Status
    source: str
    cell_id: str | None = None
    cell_key: str = ""
    attempt: int = 1
    outputs: list[dict] = field(default_factory=list)
    elapsed: float = 0.0
    execution_count: int | None = None
    reason: str | None = None
    reason_text: str | None = None
    stack: list[dict] | None = None
    state: State = "intact"
    restored: list[str] = field(default_factory=list)
    restore_skipped: list[dict] = field(default_factory=list)
    checkpoint: str | None = None
    # State lost although a checkpoint was saved before the restart: which one, where it was looked for, and why.
    lost_reason: str | None = None
    error_name: str | None = None
    error_value: str | None = None
    traceback: list[str] = field(default_factory=list)
    budgets: dict[str, float | None] = field(default_factory=dict)
    actions: list[dict] = field(default_factory=list)
    interrupt_latency: float | None = None
    kernel: dict[str, t.Any] = field(default_factory=dict)
    output_bytes_dropped: int = 0
    timings: dict[str, t.Any] = field(default_factory=dict)  # after a restart: seconds from the decision to each step
    # What could not be had (e.g. a remote kernel's stack dump), said, never faked
    notes: list[str] = field(default_factory=list)
    # Our kernel's events about this cell (runaway, unresponsive, ...), in order
    events: list[dict] = field(default_factory=list)
    memory: dict | None = None  # after a memory trip: the kernel's measures and the biggest names (docs/protocol.md)
    cause: str | None = None  # status "died": "oom" (an OOM kill was counted) or "unknown"

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def intervened(self) -> bool:
        """True if the client interrupted or restarted for this cell (or the kernel died under it)."""
        return bool(self.actions) or self.status in ("restarted", "died")

    @property
    def text(self) -> str:
        """All stream output and text/plain results, in order: what a person would read."""
        parts = []
        for out in self.outputs:
            if out.get("output_type") == "stream":
                parts.append(out.get("text", ""))
            elif out.get("output_type") in ("execute_result", "display_data"):
                plain = out.get("data", {}).get("text/plain")
                if plain is not None:
                    parts.append(plain if plain.endswith("\n") else plain + "\n")
        return "".join(parts)

    def output_size(self) -> int:
        """Bytes of the outputs as JSON: the 'partial output size' of the log."""
        return len(json.dumps(self.outputs, default=str).encode())

    def to_dict(self) -> dict[str, t.Any]:
        return asdict(self)

    def to_json(self, **kwargs: t.Any) -> str:
        return json.dumps(self.to_dict(), default=str, **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, t.Any]) -> CellResult:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def summary(self) -> str:
        """One line for a person: status, elapsed, why."""
        text = f"{self.status} in {self.elapsed:.2f} s"
        if self.status == "error" and self.error_name:
            text += f": {self.error_name}: {self.error_value}"
        if self.reason_text:
            text += f"; {self.reason_text}"
        if self.status in ("restarted", "died"):
            text += f"; state {self.state}"
            if self.lost_reason:
                text += f": {self.lost_reason}"
            if self.restored:
                text += f" ({plural(len(self.restored), 'name')} restored from checkpoint {self.checkpoint!r})"
        return text
