"""Answers as an agent reads them: an execution or a kernel, a sentence saying why, and MCP content.

Every answer is an instance of its tool's model (models.py, the outputSchema),
dumped with the fields it was given: the payload cannot say what the schema
does not.  The JSON is the tool's structuredContent and, the same, its first
text block; image outputs follow as MCP image blocks.  isError is set for
refused calls and for every intervention (interrupted, restarted, died) and
cell error.
"""

from __future__ import annotations

import json
import typing as t

from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

from .. import frames as fr
from ..agent.errors import AgentError
from ..agent.result import CellResult
from ..words import plural
from . import models
from . import outputs as out
from .executions import Ending, ToolExecution

if t.TYPE_CHECKING:
    from .sessions import Session

FAILED = ("error", "interrupted", "restarted", "died")


def answer(model: BaseModel, *, is_error: bool = False, images: list | None = None) -> CallToolResult:
    """structuredContent, the same JSON as text, then any images."""
    data = dump(model)
    text = json.dumps(data, ensure_ascii=False)
    return CallToolResult(
        content=[TextContent(type="text", text=text), *(images or [])], structured_content=data, is_error=is_error
    )


def dump(model: BaseModel) -> dict[str, t.Any]:
    """A model as JSON: the fields it was given (every other field has a default, so leaving it out fits the schema)."""
    return dict(model.model_dump(mode="json", exclude_unset=True))


def refusal(message: str, shape: type[BaseModel]) -> CallToolResult:
    """A call refused before anything ran: isError, with what to do instead (every tool's model has `error`)."""
    return answer(shape(error=message), is_error=True)


def failure(exc: BaseException, shape: type[BaseModel]) -> CallToolResult:
    """An exception as an isError answer the agent can act on."""
    if isinstance(exc, AgentError):
        return refusal(str(exc), shape)
    return refusal(f"internal error in the cancelkernel MCP server: {type(exc).__name__}: {exc}", shape)


def execution(
    e: ToolExecution, *, since: int = 0, limit: int, explicit: bool = False, notes: list[str] | None = None
) -> CallToolResult:
    """An execution, running or ended, with its output from `since` (at most `limit` characters)."""
    ending = e.ending()
    result = ending.result if ending is not None else None
    outputs = result.outputs if result is not None else e.watch.outputs
    view = out.window(
        out.items(outputs),
        since,
        limit,
        explicit=explicit,
        again=lambda at: f"get_execution(execution_id={e.id!r}, since={at})",
    )
    images = view.pop("images")
    fields: dict[str, t.Any] = {
        "execution_id": e.id,
        "kernel_id": e.kernel_id,
        "cell_id": e.cell_id,
        "retry_of": e.retry_of,
        **view,
    }
    if ending is None:
        fields.update(_running(e))
    elif result is None:
        fields.update(
            status="died", finished=True, state="lost", why=ending.failure, elapsed=round(e.watch.elapsed(), 3)
        )
    else:
        fields.update(result_fields(result, e, ending))
    for note in notes or []:
        if note not in fields.setdefault("notes", []):
            fields["notes"].append(note)
    model = models.ExecutionModel(**fields)
    return answer(model, is_error=model.status in FAILED, images=images)


def _running(e: ToolExecution) -> dict[str, t.Any]:
    """The fields of a cell still running: what the kernel says of it, and what to do next."""
    summary = e.watch.summary()
    running = models.Running(
        elapsed=summary["elapsed"],
        seconds_since_output=summary["seconds_since_output"],
        where=summary["where"],
        kernel_state=summary["kernel_state"],
        interrupts_sent=summary["interrupts_sent"] or 0,
        outputs=summary["outputs"],
    )
    where = f", at {summary['where']}" if summary["where"] else ""
    asked = f"; an interrupt was asked ({e.interrupt_asked}) and the policy is stopping it" if e.interrupt_asked else ""
    why = (
        f"still running after {summary['elapsed']:.1f} s{where}, {summary['seconds_since_output']:.1f} s since its "
        f"last output{asked}; it goes on under its budgets. Call get_execution(execution_id={e.id!r}, "
        f"wait=30) to follow it, or interrupt(execution_id={e.id!r}) to stop it"
    )
    return {"status": "running", "finished": False, "elapsed": summary["elapsed"], "running": running, "why": why}


def result_fields(r: CellResult, e: ToolExecution | None = None, ending: Ending | None = None) -> dict[str, t.Any]:
    """The ExecutionModel fields of a finished cell (for execute, get_execution, run_cell)."""
    frames = fr.from_dicts(r.stack)
    user = [f for f in frames if f.user] or frames
    data: dict[str, t.Any] = {
        "status": r.status,
        "finished": True,
        "elapsed": r.elapsed,
        "stopped_at": fr.stopped_at(frames, readable=True),
        "stack": [models.Frame(where=f.where(), name=f.name, line=f.line, file=f.filename) for f in user],
        "state": r.state,
        "reason": r.reason,
        "error_name": r.error_name,
        "error_value": r.error_value,
        "execution_count": r.execution_count,
        "budgets": dict(r.budgets),
        "actions": [
            {k: a.get(k) for k in ("action", "via", "why", "why_text", "outcome", "latency") if a.get(k) is not None}
            for a in r.actions
        ],
        "kernel": dict(r.kernel),
        "notes": list(r.notes),
    }
    if r.status in ("restarted", "died") or r.restored:
        data["restored"] = models.Restored(
            names=list(r.restored), checkpoint=r.checkpoint, skipped=list(r.restore_skipped), note=r.lost_reason
        )
    if ending is not None and ending.runaway_again:
        data["attempts"] = [
            models.Attempt(
                attempt=a.attempt,
                status=a.status,
                elapsed=a.elapsed,
                why=_reason_text(a, e),
                stopped_at=fr.stopped_at(fr.from_dicts(a.stack), readable=True),
            )
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
        return f"the cell finished in {r.elapsed:.2f} s" + (
            f" ({r.state}: {_state_text(r)})" if r.state != "intact" else ""
        )
    if r.status == "error":
        return (
            f"the cell raised {r.error_name}: {r.error_value}{where}; the kernel and its variables are as the cell "
            "left them"
        )
    if runaway_again:
        return (
            f"the cell ran away again after its one interrupt ({reason}); it was not interrupted a second time: "
            f"the kernel was restarted, {_state_text(r)}. Fix the cell or give it a larger budget"
        )
    if r.status == "interrupted":
        return (
            f"{reason}; it was interrupted once{where}. State suspect: the cell stopped part-way, "
            f"so what it was changing may be half-updated. Send the fix with {fix}: "
            "if it runs away again the kernel is restarted rather than interrupted"
        )
    if r.status == "restarted":
        outcome = next(
            (a.get("outcome") for a in r.actions if a.get("action") == "interrupt" and a.get("outcome")), None
        )
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
    if r.state == "lost" and r.lost_reason:
        return f"state lost: {r.lost_reason}"
    if r.state == "lost":
        return (
            "state lost (no checkpoint to restore: save one with checkpoint(action='save') before risky cells, "
            "or start the server with --checkpoint before-risky)"
        )
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
        f"kernel {session.ak.kernel_name!r} is not cancelkernel: budgets, one interrupt and a restart work; "
        "there is no targeted interrupt, no live line or stack of a hung cell and no checkpoints (a restart loses "
        "every variable)"
    )


def kernel_info(session: Session, status: dict[str, t.Any] | None = None) -> models.KernelInfo:
    """A kernel as list_kernels and status show it (status: AgentKernel.status(), when asked for)."""
    ak = session.ak
    running, last = session.running, session.last
    alive = not session.closed
    seen: dict[str, t.Any] = {}  # what only some answers have
    if running is not None:
        running.watched()  # asked about: the kernel's view of it is wanted from now on
        seen["running"] = _running(running)["running"]
    if status is not None:
        alive = bool(status.get("alive", alive))
        seen["abandoned_threads"] = list(status.get("abandoned_threads") or [])
        if "execution_state" in status:  # the kernel was asked (no cell of ours ran): what it says runs there
            seen["execution_state"] = status["execution_state"]
            seen["kernel_executions"] = [_kernel_execution(e) for e in status.get("executions") or []]
    return models.KernelInfo(
        kernel_id=session.id,
        kernel_name=ak.kernel_name,
        default=session.default,
        ours=bool(ak.info.ours),
        exec_thread=ak.info.exec_thread or session.exec_thread,
        pid=ak.pid,
        alive=alive,
        busy=ak.busy,
        started_at=session.started_at,
        running_execution=running.id if running is not None else None,
        last_execution=last.id if last is not None else None,
        last_status=_status_of(last),
        notes=[n for n in [stock_note(session)] if n],
        **seen,
    )


def _kernel_execution(said: dict[str, t.Any]) -> models.KernelExecution:
    """One cell as the kernel's kernel_info_reply names it."""
    return models.KernelExecution(
        msg_id=str(said.get("msg_id")),
        subshell_id=said.get("subshell_id"),
        elapsed=float(said.get("elapsed") or 0.0),
        state=str(said.get("state") or "running"),
    )


def _status_of(e: ToolExecution | None) -> models.Status | None:
    if e is None:
        return None
    ending = e.ending()
    if ending is None:
        return "running"
    return ending.result.status if ending.result is not None else "died"


def restored(r: t.Any) -> models.Restored:
    """An agent client `Restored` as the answers show it."""
    return models.Restored(names=list(r.names), checkpoint=r.checkpoint, skipped=list(r.skipped), note=r.note)


def cell_summary(index: int, result: CellResult) -> models.CellSummary:
    """One line per cell of a notebook run: how it ended, and why."""
    return models.CellSummary(
        index=index,
        status=result.status,
        elapsed=result.elapsed,
        state=result.state,
        why=why(result),
        stopped_at=fr.stopped_at(fr.from_dicts(result.stack), readable=True),
    )
