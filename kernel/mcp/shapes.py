"""Answers as an agent reads them: an execution or a kernel as JSON, a sentence saying why, and MCP content.

The JSON is the tool's structuredContent and, the same, its first text block;
image outputs follow as MCP image blocks.  isError is set for refused calls
and for every intervention (interrupted, restarted, died) and cell error.
"""

from __future__ import annotations

import json
import typing as t

from mcp.types import CallToolResult, TextContent

from .. import frames as fr
from ..agent.result import CellResult
from ..words import plural
from . import outputs as out
from .executions import Ending, ToolExecution

if t.TYPE_CHECKING:
    from .sessions import Session

FAILED = ("error", "interrupted", "restarted", "died")


def answer(data: dict[str, t.Any], *, is_error: bool = False, images: list | None = None) -> CallToolResult:
    """structuredContent, the same JSON as text, then any images."""
    text = json.dumps(data, default=str, ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text), *(images or [])], structured_content=data, is_error=is_error)


def refusal(message: str) -> CallToolResult:
    """A call refused before anything ran: isError, with what to do instead."""
    return answer({"error": message}, is_error=True)


def execution(e: ToolExecution, *, since: int = 0, limit: int, explicit: bool = False, notes: list[str] | None = None) -> CallToolResult:
    """An execution, running or ended, with its output from `since` (at most `limit` characters)."""
    ending = e.ending()
    data: dict[str, t.Any] = {"execution_id": e.id, "kernel_id": e.kernel_id, "cell_id": e.cell_id, "retry_of": e.retry_of}
    result = ending.result if ending is not None else None
    outputs = result.outputs if result is not None else e.watch.outputs
    view = out.window(out.items(outputs), since, limit, explicit=explicit,
                      again=lambda at: f"get_execution(execution_id={e.id!r}, since={at})")
    images = view.pop("images")
    data.update(view)
    if ending is None:
        data.update(_running(e))
    elif result is None:
        data.update({"status": "died", "finished": True, "state": "lost", "why": ending.failure, "elapsed": round(e.watch.elapsed(), 3)})
    else:
        data.update(result_fields(result, e, ending))
    for note in notes or []:
        if note not in data.setdefault("notes", []):
            data["notes"].append(note)
    return answer(data, is_error=data.get("status") in FAILED, images=images)


def _running(e: ToolExecution) -> dict[str, t.Any]:
    w = e.watch
    summary = w.summary()
    running = {
        "elapsed": summary["elapsed"], "seconds_since_output": summary["seconds_since_output"], "where": summary["where"],
        "kernel_state": summary["kernel_state"], "interrupts_sent": summary["interrupts_sent"] or 0, "outputs": summary["outputs"],
    }
    where = f", at {summary['where']}" if summary["where"] else ""
    asked = f"; an interrupt was asked ({e.interrupt_asked}) and the policy is stopping it" if e.interrupt_asked else ""
    why = (
        f"still running after {summary['elapsed']:.1f} s{where}, {summary['seconds_since_output']:.1f} s since its last output{asked}; "
        f"it goes on under its budgets. Call get_execution(execution_id={e.id!r}, wait=30) to follow it, "
        f"or interrupt(execution_id={e.id!r}) to stop it"
    )
    return {"status": "running", "finished": False, "elapsed": summary["elapsed"], "running": running, "why": why}


def result_fields(r: CellResult, e: ToolExecution | None = None, ending: Ending | None = None) -> dict[str, t.Any]:
    """The fields of a finished cell (for execute, get_execution, run_cell)."""
    frames = fr.from_dicts(r.stack)
    user = [f for f in frames if f.user] or frames
    data: dict[str, t.Any] = {
        "status": r.status,
        "finished": True,
        "elapsed": r.elapsed,
        "stopped_at": fr.stopped_at(frames, readable=True),
        "stack": [{"where": f.where(), "name": f.name, "line": f.line, "file": f.filename} for f in user],
        "state": r.state,
        "reason": r.reason,
        "error_name": r.error_name,
        "error_value": r.error_value,
        "execution_count": r.execution_count,
        "budgets": dict(r.budgets),
        "actions": [{k: a.get(k) for k in ("action", "via", "why", "why_text", "outcome", "latency") if a.get(k) is not None} for a in r.actions],
        "kernel": dict(r.kernel),
        "notes": list(r.notes),
    }
    if r.status in ("restarted", "died") or r.restored:
        data["restored"] = {"names": list(r.restored), "checkpoint": r.checkpoint, "skipped": list(r.restore_skipped)}
    if ending is not None and ending.runaway_again:
        data["attempts"] = [
            {"attempt": a.attempt, "status": a.status, "elapsed": a.elapsed, "why": _reason_text(a, e),
             "stopped_at": fr.stopped_at(fr.from_dicts(a.stack), readable=True)}
            for a in ending.attempts
        ]
    data["why"] = why(r, e, runaway_again=bool(ending and ending.runaway_again))
    return data


def why(r: CellResult, e: ToolExecution | None = None, *, runaway_again: bool = False) -> str:
    """What happened to the cell, and what to do next, as one or two sentences."""
    at = fr.stopped_at(fr.from_dicts(r.stack), readable=True)
    where = f" at {at}" if at else ""
    reason = _reason_text(r, e)
    fix = f"execute(code=<the fix>, retry_of={e.id!r})" if e is not None else "a fixed cell"
    if r.status == "ok":
        return f"the cell finished in {r.elapsed:.2f} s" + (f" ({r.state}: {_state_text(r)})" if r.state != "intact" else "")
    if r.status == "error":
        return f"the cell raised {r.error_name}: {r.error_value}{where}; the kernel and its variables are as the cell left them"
    if runaway_again:
        return (
            f"the cell ran away again after its one interrupt ({reason}); it was not interrupted a second time: "
            f"the kernel was restarted, {_state_text(r)}. Fix the cell or give it a larger budget"
        )
    if r.status == "interrupted":
        return (
            f"{reason}; it was interrupted once{where}. State suspect: the cell stopped part-way, so what it was changing may be "
            f"half-updated. Send the fix with {fix}: if it runs away again the kernel is restarted rather than interrupted"
        )
    if r.status == "restarted":
        outcome = next((a.get("outcome") for a in r.actions if a.get("action") == "interrupt" and a.get("outcome")), None)
        stuck = f" ({outcome})" if outcome else ""
        return f"{reason}; the interrupt could not stop it{stuck}{where}, so the kernel was restarted: {_state_text(r)}"
    return f"{reason}; a new kernel was started: {_state_text(r)}"


def _reason_text(r: CellResult, e: ToolExecution | None) -> str:
    if r.reason == "manual":  # the agent client's text names its own API; here the request came through MCP
        asked = e.interrupt_asked if e is not None and e.interrupt_asked else "interrupt"
        return f"the cell was stopped on request ({asked})"
    return r.reason_text or "the cell was stopped"


def _state_text(r: CellResult) -> str:
    if r.state == "restored":
        names = ", ".join(r.restored[:10]) + (", ..." if len(r.restored) > 10 else "")
        return f"state restored from checkpoint {r.checkpoint!r} ({plural(len(r.restored), 'name')}: {names})"
    if r.state == "lost":
        return ("state lost (no checkpoint to restore: save one with checkpoint(action='save') before risky cells, "
                "or start the server with --checkpoint before-risky)")
    if r.state == "suspect":
        return "state suspect"
    return "state intact"


# -- kernels -----------------------------------------------------------------------------


def stock_note(session: Session) -> str | None:
    """What a kernel that is not ours cannot do, said once per answer."""
    info = session.ak.info
    if info.ours:
        return None
    return (
        f"kernel {session.ak.kernel_name!r} is not cancelkernel: budgets, one interrupt and a restart work; there is no targeted "
        f"interrupt, no live line or stack of a hung cell and no checkpoints (a restart loses every variable)"
    )


def kernel_info(session: Session, status: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
    """A kernel as list_kernels and status show it (status: AgentKernel.status(), when asked for)."""
    ak = session.ak
    running, last = session.running, session.last
    data: dict[str, t.Any] = {
        "kernel_id": session.id,
        "kernel_name": ak.kernel_name,
        "default": session.default,
        "ours": bool(ak.info.ours),
        "exec_thread": ak.info.exec_thread or session.exec_thread,
        "pid": ak.pid,
        "alive": not session.closed,
        "busy": ak.busy,
        "started_at": session.started_at,
        "running_execution": running.id if running is not None else None,
        "last_execution": last.id if last is not None else None,
        "last_status": _status_of(last),
        "notes": [n for n in [stock_note(session)] if n],
    }
    if running is not None:
        running.watched()  # asked about: the kernel's view of it is wanted from now on
        data["running"] = _running(running)["running"]
    if status is not None:
        data["alive"] = bool(status.get("alive", data["alive"]))
        data["abandoned_threads"] = list(status.get("abandoned_threads") or [])
    return data


def _status_of(e: ToolExecution | None) -> str | None:
    if e is None:
        return None
    ending = e.ending()
    if ending is None:
        return "running"
    return ending.result.status if ending.result is not None else "died"


def restored(r: t.Any) -> dict[str, t.Any]:
    """An agent client `Restored` as JSON."""
    return {"names": list(r.names), "checkpoint": r.checkpoint, "skipped": list(r.skipped), "note": r.note}
