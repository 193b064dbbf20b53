"""The events the kernel tells about a cell, and the sentences a person reads about it (one place,
so they stay consistent).

An event is a JSON object (`event`, `execution`, `elapsed`, `time`, a
one-line `message`, and fields per kind), documented in docs/protocol.md.
The events a person needs (a budget trip, an unresponsive or abandoned
cell, a held GIL: protocol.SHOWN_EVENTS) are published as a quiet note,
`display_data` with `text/plain` and escaped `text/html` only, the event
itself in the message's `transient` (front ends never render nor save it).
An interrupt is no note: it is in the reply metadata and cancel_status.

Each sentence says only what the kernel knows to be true, once: why the cell
was interrupted, how long it ran (one number), where it is, and what to do.
"""

from __future__ import annotations

import html
import time

from .. import protocol
from ..frames import Frame, as_dicts, describe
from ..runtime.execution import Execution
from ..sizes import format_size

# Readable in light and dark themes (no colours of its own), in JupyterLab, Notebook 7, VS Code and nbconvert.
NOTE_STYLE = "font-size: 0.9em; font-style: italic; opacity: 0.85; margin: 0.2em 0;"


def _base(kind: str, execution: Execution, message: str) -> dict:
    return {
        "event": kind,
        "execution": execution.msg_id,
        "elapsed": round(execution.elapsed(), 4),
        "time": time.time(),
        "message": message,
    }


def runaway(
    execution: Execution, reason: str, frames: list[Frame], *, interrupting: bool, guard_source: str = ""
) -> dict:
    budget = execution.budgets.for_reason(reason)
    note = runaway_note(execution, reason, frames, interrupting=interrupting, guard_source=guard_source)
    event = _base(protocol.EVENT_RUNAWAY, execution, note)
    event.update(reason=reason, budget=budget, action="interrupt" if interrupting else "warn", stack=as_dicts(frames))
    if reason == protocol.REASON_MEMORY_BUDGET:
        event["memory"] = memory_record(execution)
        if execution.memory.kind == protocol.MEMORY_GUARD:
            event["budget"] = execution.memory.limit
    return event


def memory_record(execution: Execution) -> dict:
    """The memory measured for a tripped cell (bytes): reply metadata and events share it."""
    record = execution.memory
    return {
        "kind": record.kind,
        "measure": "resident" if record.kind == protocol.MEMORY_BUDGET else "charged",
        "start": record.resident_start if record.kind == protocol.MEMORY_BUDGET else record.charged_start,
        "at_trip": record.at_trip,
        "after": record.after,
        "budget": execution.budgets.memory or None,
        "limit": record.limit,
        "holders": [{k: h[k] for k in ("name", "type", "bytes")} for h in record.holders],
        "released": [{k: h[k] for k in ("name", "type", "bytes")} for h in record.released],
    }


def memory_after(execution: Execution) -> dict:
    """After a memory trip, once the cell ended: what it had, has, and what holds it."""
    event = _base(protocol.EVENT_MEMORY, execution, memory_after_note(execution))
    event["memory"] = memory_record(execution)
    return event


def unresponsive(execution: Execution, why: str, frames: list[Frame], grace: float) -> dict:
    """The interrupt did not stop the cell within `grace`: `why` is protocol.UNRESPONSIVE_*."""
    kind = protocol.EVENT_ABANDONED if why == protocol.UNRESPONSIVE_ABANDONED else protocol.EVENT_UNRESPONSIVE
    event = _base(kind, execution, unresponsive_note(execution, why, frames, grace))
    event.update(why=why, stack=as_dicts(frames))
    if kind == protocol.EVENT_UNRESPONSIVE:
        event["state"] = protocol.STATE_UNRESPONSIVE
    return event


def gil_held(execution: Execution, frames: list[Frame], seconds: float, path: str) -> dict:
    """faulthandler dumped the cell while one C call held the GIL for `seconds`."""
    event = _base(protocol.EVENT_STACK, execution, gil_note(execution, frames, seconds))
    event.update(stack=as_dicts(frames), dump_file=path, gil_held=round(seconds, 3))
    return event


def started(execution: Execution) -> dict:
    """A cell with budgets began: what a page needs for its countdown if the kernel then cannot answer."""
    event = _base(protocol.EVENT_STARTED, execution, "")
    budgets = execution.budgets
    event.update(wall_budget=budgets.wall, quiet_budget=budgets.quiet, memory_budget=budgets.memory or None)
    return event


def started_content(event: dict) -> dict:
    """update_display_data content for `event`: it updates no display, so no front end shows or saves anything."""
    display_id = protocol.STARTED_DISPLAY_PREFIX + event["execution"]
    return {"data": {}, "metadata": {}, "transient": {"display_id": display_id, protocol.EVENT_MIME: event}}


def note_content(event: dict) -> dict:
    """display_data content of the note a person sees for `event`."""
    line = f"cancelkernel: {event['message']}"
    markup = f'<div class="{protocol.NOTE_CLASS}" style="{NOTE_STYLE}">{html.escape(line)}</div>'
    return {
        "data": {"text/plain": line, "text/html": markup},
        "metadata": {},
        "transient": {protocol.EVENT_MIME: event},
    }


# -- the sentences people read --

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
    budget = execution.budgets.for_reason(reason)
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
        text += (
            " (it came back as the cell stopped)"
            if came_back > (record.at_trip - (before or 0)) / 2
            else " (still held)"
        )
    if record.released:
        names = ", ".join(h["text"] for h in record.released)
        text += (
            "; the locals of the stopped cell's functions were let go so it could come back (%debug cannot show "
            f"them): {names}"
        )
    if record.holders:
        names = ", ".join(h["text"] for h in record.holders)
        text += (
            f"; the biggest names: {names}; free one with `del {record.holders[0]['name']}`, "
            "or process the data in chunks"
        )
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


def runaway_note(
    execution: Execution, reason: str, frames: list[Frame], *, interrupting: bool, guard_source: str = ""
) -> str:
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
        return (
            f"the cell is still blocked at {where}, in a call the interrupt cannot reach; wait for it, "
            "or restart the kernel"
        )
    if execution.cancel.reason in protocol.BUDGET_REASONS:
        return (
            f"the cell caught the interrupt for its budget and goes on, now at {where}; "
            "the kernel interrupts only once: interrupt it to stop it"
        )
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
