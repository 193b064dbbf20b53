"""The sentences the kernel shows a person about a stopped cell (one place, so they stay consistent).

Each says only what the kernel knows to be true, once: why the cell was
interrupted, how long it ran (one number), where it is, and what to do.
"""

from __future__ import annotations

from .. import protocol
from ..frames import Frame, describe
from ..runtime.execution import Execution

# Why the cell was interrupted, as the first words of its error value.
REASON_TEXT = {
    protocol.REASON_REQUEST: "interrupted by an interrupt request",
    protocol.REASON_SIGNAL: "interrupted (SIGINT)",
    protocol.REASON_WALL_BUDGET: "the cell ran past its wall budget",
    protocol.REASON_QUIET_BUDGET: "the cell printed nothing for its quiet budget",
    protocol.REASON_DEADLINE: "a deadline passed",
    protocol.REASON_SHUTDOWN: "the kernel is shutting down",
}


def _reason(execution: Execution, reason: str | None = None) -> str:
    """Why the cell was (or is being) interrupted, with the budget's seconds when a budget was the reason."""
    reason = execution.cancel.reason if reason is None else reason
    text = REASON_TEXT.get(reason or "", "interrupted")
    budget = execution.budgets.of(reason)
    return f"{text} of {budget:g} s" if budget else text


def gil_clause(seconds: float) -> str:
    return f"one C call held the GIL for {seconds:.1f} s, so the kernel could act only when it returned"


def interrupt_message(execution: Execution, gil_held: float = 0.0) -> str:
    """The error value of an interrupted cell: why, after how long (once), and what held it up."""
    if execution.watch.unresponsive_why == protocol.UNRESPONSIVE_ABANDONED:
        return f"{_reason(execution)}; its blocked thread was abandoned after {execution.elapsed():.2f} s"
    text = f"{_reason(execution)}; stopped after {execution.elapsed():.2f} s"
    if gil_held:
        text += f": {gil_clause(gil_held)}"
    return text


def runaway_note(execution: Execution, reason: str, frames: list[Frame], *, interrupting: bool) -> str:
    then = "interrupting it" if interrupting else "not interrupting it (on_runaway=warn)"
    return f"{_reason(execution, reason)}, at {describe(frames)}: {then}"


def unresponsive_note(execution: Execution, why: str, frames: list[Frame], grace: float) -> str:
    """A cell still running `grace` seconds after its interrupt: what it does now, and what the person can do."""
    where = describe(frames)
    if why == protocol.UNRESPONSIVE_ABANDONED:
        return (
            f"the cell's thread stayed blocked at {where} for {grace:g} s after the interrupt: "
            "it was abandoned, a new thread runs your next cells, your variables are kept"
        )
    if why == protocol.UNRESPONSIVE_BLOCKED:
        return f"the cell is still blocked at {where}, in a call the interrupt cannot reach; wait for it, or restart the kernel"
    if execution.cancel.reason in protocol.BUDGET_REASONS:
        return f"the cell caught the interrupt for its budget and goes on, now at {where}; the kernel interrupts only once: interrupt it to stop it"
    return f"the cell caught the interrupt and goes on, now at {where}; interrupt again to stop it"


def gil_note(execution: Execution, frames: list[Frame], seconds: float) -> str:
    """A cell whose report did not say it already: the kernel was kept from acting."""
    where = describe(frames)
    overran = execution.watch.tripped or execution.overran()
    if overran and not execution.cancelled:
        what = "wall budget" if overran == protocol.REASON_WALL_BUDGET else "quiet budget"
        return (
            f"the cell ran past its {what} of {execution.budgets.of(overran):g} s while one C call held the GIL "
            f"for {seconds:.1f} s (at {where}): it ended before the kernel could interrupt it"
        )
    return f"while this cell ran, {gil_clause(seconds)} (at {where})"
