"""The sentences the kernel shows a person about a stopped cell (one place, so they stay consistent)."""

from __future__ import annotations

from .. import protocol
from ..runtime.execution import Execution

REASON_TEXT = {
    protocol.REASON_REQUEST: "by an interrupt request",
    protocol.REASON_SIGNAL: "by SIGINT",
    protocol.REASON_WALL_BUDGET: "because the cell ran past its wall budget",
    protocol.REASON_QUIET_BUDGET: "because the cell was silent past its quiet budget",
    protocol.REASON_DEADLINE: "because a deadline passed",
    protocol.REASON_SHUTDOWN: "because the kernel is shutting down",
}


def interrupt_heading(execution: Execution) -> str:
    return f"innermost frames last ({execution.elapsed():.2f} s after the cell started)"


def interrupt_message(execution: Execution, detail: str = "") -> str:
    """One sentence: why the cell was stopped and what happened to the exec thread."""
    state = execution.cancel
    text = f"cell stopped {REASON_TEXT.get(state.reason or '', 'by an interrupt')}"
    if state.time is not None:
        text += f" {state.time - execution.started:.2f} s after it started"
    if detail:
        text += f"; {detail}"
    return text
