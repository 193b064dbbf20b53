"""The sentences the kernel shows a person about a stopped cell (one place, so they stay consistent).

Each says only what the kernel knows to be true, once: why the cell was
interrupted, how long it ran (one number), where it is, and what to do.
"""

from __future__ import annotations

from .. import protocol
from ..frames import Frame, describe
from ..runtime.execution import Execution
from ..sizes import format_size

# Why the cell was interrupted, as the first words of its error value.
REASON_TEXT = {
    protocol.REASON_REQUEST: "interrupted by an interrupt request",
    protocol.REASON_SIGNAL: "interrupted (SIGINT)",
    protocol.REASON_WALL_BUDGET: "the cell ran past its wall budget",
    protocol.REASON_QUIET_BUDGET: "the cell printed nothing for its quiet budget",
    protocol.REASON_MEMORY_BUDGET: "the cell ran past its memory budget",
    protocol.REASON_DEADLINE: "a deadline passed",
    protocol.REASON_SHUTDOWN: "the kernel is shutting down",
}


def _reason(execution: Execution, reason: str | None = None) -> str:
    """Why the cell was (or is being) interrupted, with the budget's seconds when a budget was the reason."""
    reason = execution.cancel.reason if reason is None else reason
    if reason == protocol.REASON_MEMORY_BUDGET:
        return _memory_reason(execution)
    text = REASON_TEXT.get(reason or "", "interrupted")
    budget = execution.budgets.of(reason)
    return f"{text} of {budget:g} s" if budget else text


def _memory_reason(execution: Execution) -> str:
    record = execution.memory
    if record.kind == protocol.MEMORY_GUARD and record.limit:
        return f"the kernel's memory neared its limit of {format_size(record.limit)}"
    return f"{REASON_TEXT[protocol.REASON_MEMORY_BUDGET]} of {format_size(execution.budgets.memory)}"


def memory_clause(execution: Execution, guard_source: str) -> str:
    """What the kernel measured at a memory trip: from how much to how much, against what."""
    record = execution.memory
    if record.kind == protocol.MEMORY_GUARD:
        start = f", {format_size(record.charged_start)} when the cell began" if record.charged_start is not None else ""
        return f"{guard_source} usage {format_size(record.at_trip or 0)}{start}"
    start = format_size(record.resident_start) if record.resident_start is not None else "?"
    return f"the kernel grew from {start} to {format_size(record.at_trip or 0)} resident"


def memory_after_note(execution: Execution) -> str:
    """After a memory trip: whether the memory came back, what still holds it, and what to do."""
    record = execution.memory
    before = record.resident_start if record.kind == protocol.MEMORY_BUDGET else record.charged_start
    text = f"memory {format_size(before or 0)} when the cell began, {format_size(record.at_trip or 0)} at the trip"
    if record.after is not None and record.at_trip:
        came_back = record.at_trip - record.after
        text += f", {format_size(record.after)} now"
        text += " (it came back as the cell stopped)" if came_back > (record.at_trip - (before or 0)) / 2 else " (still held)"
    if record.released:
        names = ", ".join(h["text"] for h in record.released)
        text += f"; the locals of the stopped cell's functions were let go so it could come back (%debug cannot show them): {names}"
    if record.holders:
        names = ", ".join(h["text"] for h in record.holders)
        text += f"; the biggest names: {names}; free one with `del {record.holders[0]['name']}`, or process the data in chunks"
    return text


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


def runaway_note(execution: Execution, reason: str, frames: list[Frame], *, interrupting: bool, guard_source: str = "") -> str:
    then = "interrupting it" if interrupting else "not interrupting it (on_runaway=warn)"
    if reason == protocol.REASON_MEMORY_BUDGET:
        return f"{_reason(execution, reason)}: {memory_clause(execution, guard_source)}; at {describe(frames)}: {then}"
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
        return (
            f"{_reason(execution, overran)} while one C call held the GIL "
            f"for {seconds:.1f} s (at {where}): it ended before the kernel could interrupt it"
        )
    return f"while this cell ran, {gil_clause(seconds)} (at {where})"
