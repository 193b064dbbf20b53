"""The events the kernel tells about a cell, and the one-line notes a person sees for some of them.

An event is a JSON object (`event`, `execution`, `elapsed`, `time`, a
one-line `message`, and fields per kind), documented in docs/protocol.md.
The events a person needs (a budget trip, an unresponsive or abandoned
cell, a held GIL: protocol.SHOWN_EVENTS) are published as a quiet note,
`display_data` with `text/plain` and escaped `text/html` only, the event
itself in the message's `transient` (front ends never render nor save it).
An interrupt is no note: it is in the reply metadata and cancel_status.
"""

from __future__ import annotations

import html
import time

from .. import protocol
from ..frames import Frame, as_dicts
from ..runtime.execution import Execution
from . import texts

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


def runaway(execution: Execution, reason: str, frames: list[Frame], *, interrupting: bool, guard_source: str = "") -> dict:
    budget = execution.budgets.of(reason)
    note = texts.runaway_note(execution, reason, frames, interrupting=interrupting, guard_source=guard_source)
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
    event = _base(protocol.EVENT_MEMORY, execution, texts.memory_after_note(execution))
    event["memory"] = memory_record(execution)
    return event


def unresponsive(execution: Execution, why: str, frames: list[Frame], grace: float) -> dict:
    """The interrupt did not stop the cell within `grace`: `why` is protocol.UNRESPONSIVE_*."""
    kind = protocol.EVENT_ABANDONED if why == protocol.UNRESPONSIVE_ABANDONED else protocol.EVENT_UNRESPONSIVE
    event = _base(kind, execution, texts.unresponsive_note(execution, why, frames, grace))
    event.update(why=why, stack=as_dicts(frames))
    if kind == protocol.EVENT_UNRESPONSIVE:
        event["state"] = protocol.STATE_UNRESPONSIVE
    return event


def gil_held(execution: Execution, frames: list[Frame], seconds: float, path: str) -> dict:
    """faulthandler dumped the cell while one C call held the GIL for `seconds`."""
    event = _base(protocol.EVENT_STACK, execution, texts.gil_note(execution, frames, seconds))
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
