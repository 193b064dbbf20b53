"""The policy for one cell: watch it, interrupt ONCE on a trip, escalate to a restart if that fails.

    trip (wall/quiet budget, or manual; a memory budget trips in our kernel, which interrupts)
      -> one interrupt (targeted with our kernel; SIGINT if the control channel is wedged)
      -> execute_reply within interrupt_grace:  interrupted, state suspect, partial outputs + stack
      -> no reply (wedged, or the interrupt swallowed): stack, restart, restore -> restarted
    kernel process gone (exit, kill -9, segfault, OOM) or restarted by its owner -> died, restart, restore

Every wait is bounded, and the process is checked every POLL seconds, so a
dead or restarted kernel never leaves the caller waiting (nbclient waits forever for
the reply of a kernel that died, or that its owner restarted, in the middle of a cell).
"""

from __future__ import annotations

import threading
import time
import typing as t
from dataclasses import dataclass, field

from ..protocol import State
from .link import KernelLink
from .outputs import DisplayRegistry
from .result import CellResult
from .watch import CellWatch


@dataclass
class CellPlan:
    """What to run and under which rules (decided by the AgentKernel)."""

    source: str
    cell_id: str | None
    cell_key: str
    attempt: int
    wall_budget: float | None
    quiet_budget: float | None
    memory_budget: int | None = None  # bytes; enforced by our kernel only
    may_interrupt: bool = True
    kernel_metadata: dict = field(default_factory=dict)
    kernel_enforces: bool = False

    def hand_budgets_to_kernel(self, kernel_has_budgets: bool, kernel_name: str) -> list[str]:
        """Our kernel enforces the budgets itself (the client trips behind it); the notes for what nobody enforces."""
        notes = []
        if self.memory_budget and not kernel_has_budgets:
            notes.append(
                f"memory_budget={self.memory_budget} was not enforced: only cancelkernel measures a cell's memory "
                f"({kernel_name!r} does not)"
            )
        wanted = {
            "wall_budget": self.wall_budget,
            "quiet_budget": self.quiet_budget,
            "memory_budget": self.memory_budget,
        }
        if self.may_interrupt and kernel_has_budgets and any(wanted.values()):
            self.kernel_metadata = {"cancelkernel": {k: v for k, v in wanted.items() if v}}
            self.kernel_enforces = bool(self.wall_budget or self.quiet_budget)
        return notes


@dataclass
class Restored:
    """What a restore after a restart brought back."""

    state: State = "lost"
    names: list[str] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    checkpoint: str | None = None
    note: str | None = None
    # A checkpoint saved before the restart did not come back: `note` says which, where it was looked for, and why.
    missing: bool = False


class Policy:
    """Runs one cell at a time on a KernelLink and applies the policy."""

    def __init__(
        self,
        link: KernelLink,
        *,
        restore: t.Callable[[], Restored],
        interrupt_grace: float | None = None,
        accept_abandoned_threads: bool = False,
        max_output_bytes: int | None = None,
        registry: DisplayRegistry | None = None,
        clock: t.Callable[[], float] = time.monotonic,
    ):
        self.link = link
        self.restore = restore
        self.interrupt_grace = interrupt_grace
        self.accept_abandoned_threads = accept_abandoned_threads
        self.max_output_bytes = max_output_bytes
        self.registry = registry if registry is not None else DisplayRegistry()
        self.clock = clock

    def grace(self) -> float:
        if self.interrupt_grace is not None:
            return self.interrupt_grace
        if self.link.info.interrupt_grace is not None:
            return self.link.info.interrupt_grace
        return 1.0

    def run(self, plan: CellPlan, manual: threading.Event, watch: CellWatch | None = None) -> CellResult:
        from .run import CellRun

        return CellRun(self, plan, manual, watch).go()
