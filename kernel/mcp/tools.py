"""The cell and kernel tools: execute, get_execution, interrupt, status, restart, checkpoint, and the kernels.

Each tool is a function of the server's sessions and its arguments (registry.py
binds it to one server): it checks its arguments, does the blocking part on a
worker thread (sessions.py), and answers with shapes.py: structuredContent
matching its outputSchema, the same JSON as text, isError for refusals and
interventions.  `descriptions` is what the client reads about each tool.
"""

from __future__ import annotations

import math
import typing as t

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult

from ..agent.errors import BadInputError
from ..words import plural
from . import args, models, options, shapes, tasks
from .registry import ToolFunction, add_tools
from .sessions import Session, Sessions
from .waiting import CANCELLED, follow, in_thread

if t.TYPE_CHECKING:
    from .executions import ToolExecution
    from .options import ServerOptions

ExecutionAnswer = t.Annotated[CallToolResult, models.ExecutionModel]
KernelsAnswer = t.Annotated[CallToolResult, models.Kernels]
KernelAnswer = t.Annotated[CallToolResult, models.KernelAction]
CheckpointAnswer = t.Annotated[CallToolResult, models.Checkpoint]


def descriptions(o: ServerOptions) -> dict[str, str]:
    """Each tool's description, with the server's defaults in it."""
    budgets = (
        f"Default budgets: wall {o.wall_budget:g} s, quiet {o.quiet_budget:g} s (0 = none); "
        "wall_budget / quiet_budget override them for this call (seconds, or '30s', '2m'); "
        "memory_budget ('2G') stops a cell that grows the kernel by more, "
        "and the answer names the biggest variables."
    )
    return {
        "execute": (
            "Run one cell of Python in a kernel, under budgets: a cell that runs too long (wall budget) or stays "
            "silent too long (quiet budget) is interrupted once, with the stack of where it was; "
            "one that cannot be interrupted (a C call holding the GIL) or runs away again is stopped by restarting "
            f"the kernel, and its last checkpoint is restored. {budgets} Returns status ok | error | interrupted | "
            "restarted | died | running, with outputs, why (a sentence), stopped_at and stack, "
            "state (intact | suspect | restored | lost) and what was restored. It waits up to `wait` seconds "
            f"(default {options.DEFAULT_WAIT:g}) and then answers status running with an execution_id: "
            "the cell goes on under its budgets; follow it with get_execution or stop it with interrupt. kernel_id: "
            "a kernel from start_kernel (omitted: the default kernel, started on first use). One cell at a time per "
            "kernel. retry_of: the execution_id this code fixes; the cell keeps its one interrupt used, "
            "so if the fix runs away too the kernel is restarted. cell_id: "
            "your name for the cell (the same source is the same cell otherwise). Large output is cut; "
            "the answer says which get_execution call reads the rest."
        ),
        "get_execution": (
            "Follow an execution: its state (running, or finished with the same fields as execute) and its output "
            "from character offset `since` (pass the next_since of the previous answer to get only what is new). "
            f"Waits up to `wait` seconds (default {options.DEFAULT_POLL_WAIT:g}; "
            "0 answers at once) for the cell to finish. max_chars: output characters in the answer (default "
            f"{options.DEFAULT_MAX_CHARS}). The last {options.KEEP_FINISHED} finished executions are kept."
        ),
        "interrupt": (
            "Interrupt a running execution (omitted: the only one running): one targeted interrupt, "
            "then the policy's escalation (a cell that does not stop within the interrupt grace is ended by "
            "restarting the kernel, restoring its last checkpoint). Waits up to `wait` seconds (default 30) for the "
            "cell to end and returns it like get_execution."
        ),
        "status": (
            "What the kernels are doing (omitted kernel_id: every kernel): the running execution, for how long, "
            "seconds since its last output, the line it is on now (our kernel), threads given up on; alive or not."
        ),
        "restart": (
            "Restart a kernel (omitted: the default one). restore=true (the default) brings back its latest "
            "checkpoint; restore=false starts a fresh kernel under the same id (no variables, "
            "no checkpoints). Refused while a cell runs: interrupt it first."
        ),
        "checkpoint": (
            "The kernel's checkpoints (our kernel only): action=save (name optional: a new one), "
            "restore (name omitted: the latest), or list. A restart after a runaway restores the latest checkpoint "
            "by itself; --checkpoint before-risky saves one before every risky cell."
        ),
        "list_kernels": (
            "Every kernel of this server: id, kernelspec, whether it is ours, what runs on it, its last execution."
        ),
        "start_kernel": (
            "Start another kernel and return its kernel_id (for execute's kernel_id). kernel_name: "
            f"a kernelspec (default {o.kernel_name!r}; 'python3' and others work with budgets, "
            "one interrupt and restart, but no stack of a hung cell and no checkpoints). exec_thread: "
            "main or worker (our kernel only)."
        ),
        "shutdown_kernel": (
            "Shut a kernel down (a cell still running on it ends with it). "
            "Every kernel is shut down when the server exits."
        ),
    }


# -- cells -------------------------------------------------------------------------------


async def execute(
    sessions: Sessions,
    code: args.Code,
    ctx: Context,
    kernel_id: args.OptionalText = None,
    wall_budget: args.WallBudget = None,
    quiet_budget: args.QuietBudget = None,
    wait: args.Wait = None,
    retry_of: args.OptionalText = None,
    cell_id: args.OptionalText = None,
    memory_budget: args.MemoryBudget = None,
) -> ExecutionAnswer:
    # The cell once sent: cancelled while the kernel started, it is interrupted, not orphaned
    sent: list[ToolExecution] = []
    try:
        seconds = options.wait_seconds(wait, options.DEFAULT_WAIT)
        cell = {
            "code": options.code_text(code),
            "kernel_id": options.optional_text("kernel_id", kernel_id),
            "wall_budget": options.budget("wall_budget", wall_budget),
            "quiet_budget": options.budget("quiet_budget", quiet_budget),
            "memory_budget": options.memory_budget(memory_budget),
            "cell_id": options.optional_text("cell_id", cell_id),
            "retry_of": options.optional_text("retry_of", retry_of),
        }
        e = await _send(sessions, cell, sent)
    except Exception as exc:  # noqa: BLE001 - every refusal is an isError answer
        _interrupt_sent(sent)
        return shapes.failure(exc, models.ExecutionModel)
    except BaseException:
        _interrupt_sent(sent)
        raise
    task = tasks.current()
    if task is not None:  # a task: its answer waits for the cell's end (tasks/get shows it meanwhile)
        label = f"{e.id} on kernel {e.kernel_id}"
        task.follow(
            label, lambda: e.watch, lambda: e.interrupt(tasks.CANCELLED), execution_id=e.id, kernel_id=e.kernel_id
        )
        await follow(None, e, math.inf, interrupt_on_cancel=True)
        return _view(sessions, e)
    await follow(ctx, e, seconds, interrupt_on_cancel=True)
    short = seconds - e.watch.elapsed()
    if not e.done and short > 0:
        # The cell was sent a moment after the call began: `running` means it has run `wait` seconds itself.
        await follow(ctx, e, short, interrupt_on_cancel=True)
    return _view(sessions, e)


async def _send(sessions: Sessions, cell: dict[str, t.Any], sent: list[ToolExecution]) -> ToolExecution:
    """A running kernel takes the cell at once, here; one still to start (or restarting) on a worker thread."""

    def submit(may_block: bool) -> ToolExecution | None:
        e = sessions.execute(**cell, may_block=may_block)
        if e is not None:
            sent.append(e)
        return e

    return submit(False) or t.cast("ToolExecution", await in_thread(submit, True))


def _interrupt_sent(sent: list[ToolExecution]) -> None:
    """The call ended without its answer (cancelled while the kernel started): the cell it sent gets its interrupt."""
    for e in sent:
        e.interrupt(CANCELLED)


async def get_execution(
    sessions: Sessions,
    execution_id: args.Text,
    ctx: Context,
    since: args.Count = None,
    wait: args.Wait = None,
    max_chars: args.Count = None,
) -> ExecutionAnswer:
    try:
        e = sessions.executions.get(execution_id)
        start = options.offset("since", since, 0)
        limit = (
            options.offset("max_chars", max_chars, options.DEFAULT_MAX_CHARS, most=options.MAX_CHARS)
            or options.DEFAULT_MAX_CHARS
        )
        seconds = options.wait_seconds(wait, options.DEFAULT_POLL_WAIT)
    except Exception as exc:  # noqa: BLE001 - every refusal is an isError answer
        return shapes.failure(exc, models.ExecutionModel)
    await follow(ctx, e, seconds, interrupt_on_cancel=False)
    return _view(sessions, e, start, limit, explicit=since is not None)


async def interrupt(
    sessions: Sessions, ctx: Context, execution_id: args.OptionalText = None, wait: args.Wait = None
) -> ExecutionAnswer:
    try:
        e = sessions.executions.get(execution_id) if execution_id is not None else sessions.running_execution()
        seconds = options.wait_seconds(wait, options.DEFAULT_POLL_WAIT)
    except Exception as exc:  # noqa: BLE001 - every refusal is an isError answer
        return shapes.failure(exc, models.ExecutionModel)
    sent = e.interrupt("the interrupt tool was called")
    await follow(ctx, e, seconds, interrupt_on_cancel=False, watch=False)
    return _view(
        sessions, e, note=None if sent else f"execution {e.id!r} had already finished: nothing was interrupted"
    )


def _view(
    sessions: Sessions,
    e: ToolExecution,
    since: int = 0,
    limit: int = options.DEFAULT_MAX_CHARS,
    explicit: bool = False,
    note: str | None = None,
) -> CallToolResult:
    """The execution as an answer, with what its kernel cannot do (a stock kernel) among its notes."""
    session = next((s for s in sessions.list() if s.id == e.kernel_id), None)
    notes = [n for n in (note, shapes.stock_note(session) if session is not None else None) if n]
    return shapes.execution(e, since=since, limit=limit, explicit=explicit, notes=notes)


# -- kernels -----------------------------------------------------------------------------


async def status(sessions: Sessions, kernel_id: args.OptionalText = None) -> KernelsAnswer:
    try:
        chosen = [sessions.get(kernel_id)] if kernel_id is not None else sessions.list()
        kernels = [shapes.kernel_info(s, await in_thread(s.ak.status)) for s in chosen]
    except Exception as exc:  # noqa: BLE001 - every refusal is an isError answer
        return shapes.failure(exc, models.Kernels)
    message = None if kernels else "no kernel is running; the first execute starts the default one"
    return shapes.answer(models.Kernels(kernels=kernels, message=message))


async def restart(sessions: Sessions, kernel_id: args.OptionalText = None, restore: args.Flag = True) -> KernelAnswer:
    try:
        if not isinstance(restore, bool):
            raise BadInputError(f"restore must be true or false, not {restore!r:.40}")
        session = _chosen(sessions, kernel_id)
        done = await (_restarted(sessions, session) if restore else _replaced(sessions, session))
    except Exception as exc:  # noqa: BLE001 - every refusal is an isError answer
        return shapes.failure(exc, models.KernelAction)
    return shapes.answer(done)


async def _restarted(sessions: Sessions, session: Session) -> models.KernelAction:
    """restart(restore=true): the same kernel id, its latest checkpoint brought back."""
    back = await in_thread(sessions.restart, session)
    text = f"kernel {session.id!r} restarted; " + (
        f"restored {plural(len(back.names), 'name')} from checkpoint {back.checkpoint!r}"
        if back.state == "restored"
        else f"nothing restored ({back.note or 'no checkpoint'})"
    )
    return models.KernelAction(
        kernel_id=session.id,
        action="restart",
        state=back.state,
        restored=shapes.restored(back),
        message=text,
        kernel=shapes.kernel_info(session),
    )


async def _replaced(sessions: Sessions, session: Session) -> models.KernelAction:
    """restart(restore=false): a fresh kernel under the same id."""
    session = await in_thread(sessions.replace, session)
    return models.KernelAction(
        kernel_id=session.id,
        action="restart",
        state="lost",
        message=f"kernel {session.id!r} replaced by a fresh one",
        kernel=shapes.kernel_info(session),
    )


async def checkpoint(
    sessions: Sessions, action: args.Text, name: args.OptionalText = None, kernel_id: args.OptionalText = None
) -> CheckpointAnswer:
    try:
        if not isinstance(action, str) or action not in _CHECKPOINT_ACTIONS:
            raise BadInputError(f"action must be save, restore or list, not {action!r:.40}")
        session = _chosen(sessions, kernel_id)
        label = options.optional_text("name", name)
        done = models.Checkpoint(
            kernel_id=session.id, action=action, **await _CHECKPOINT_ACTIONS[action](session, label)
        )
    except Exception as exc:  # noqa: BLE001 - every refusal is an isError answer
        return shapes.failure(exc, models.Checkpoint)
    return shapes.answer(done)


async def _save(session: Session, label: str | None) -> dict[str, t.Any]:
    body = await in_thread(session.ak.save_checkpoint, label)
    return {"name": body.get("name") or label, "message": f"saved checkpoint {body.get('name') or label!r}"}


async def _restore(session: Session, label: str | None) -> dict[str, t.Any]:
    back = await in_thread(session.ak.restore_checkpoint, label)
    message = f"restored {plural(len(back.names), 'name')} from {back.checkpoint!r}"
    return {"name": back.checkpoint, "restored": shapes.restored(back), "message": message}


async def _list(session: Session, label: str | None) -> dict[str, t.Any]:
    return {"checkpoints": await in_thread(session.ak.list_checkpoints)}


_CHECKPOINT_ACTIONS: dict[str, t.Callable[[Session, str | None], t.Awaitable[dict[str, t.Any]]]] = {
    "save": _save,
    "restore": _restore,
    "list": _list,
}


def _chosen(sessions: Sessions, kernel_id: t.Any) -> Session:
    """The kernel a call names, or the default one (which must be running)."""
    return (
        sessions.get(options.optional_text("kernel_id", kernel_id))
        if kernel_id is not None
        else sessions.existing_default()
    )


async def list_kernels(sessions: Sessions) -> KernelsAnswer:
    return shapes.answer(models.Kernels(kernels=[shapes.kernel_info(s) for s in sessions.list()]))


async def start_kernel(
    sessions: Sessions, kernel_name: args.OptionalText = None, exec_thread: args.OptionalText = None
) -> KernelAnswer:
    try:
        session = await in_thread(sessions.start_kernel, kernel_name, options.optional_text("exec_thread", exec_thread))
    except Exception as exc:  # noqa: BLE001 - every refusal is an isError answer
        return shapes.failure(exc, models.KernelAction)
    return shapes.answer(
        models.KernelAction(
            kernel_id=session.id,
            action="start",
            state="intact",
            kernel=shapes.kernel_info(session),
            message=f"kernel {session.id!r} ({session.ak.kernel_name}) is running",
        )
    )


async def shutdown_kernel(sessions: Sessions, kernel_id: args.Text) -> KernelAnswer:
    try:
        session = await in_thread(sessions.shutdown, options.optional_text("kernel_id", kernel_id))
    except Exception as exc:  # noqa: BLE001 - every refusal is an isError answer
        return shapes.failure(exc, models.KernelAction)
    return shapes.answer(
        models.KernelAction(kernel_id=session.id, action="shutdown", message=f"kernel {session.id!r} was shut down")
    )


TOOLS: dict[str, ToolFunction] = {
    "execute": execute,
    "get_execution": get_execution,
    "interrupt": interrupt,
    "status": status,
    "restart": restart,
    "checkpoint": checkpoint,
    "list_kernels": list_kernels,
    "start_kernel": start_kernel,
    "shutdown_kernel": shutdown_kernel,
}


def register(server: MCPServer, sessions: Sessions) -> None:
    """Add the cell and kernel tools to `server`."""
    add_tools(server, sessions, TOOLS, descriptions(sessions.options))
