"""The cell and kernel tools: execute, get_execution, interrupt, status, restart, checkpoint, and the kernels.

Each tool checks its arguments, does the blocking part on a worker thread
(sessions.py), and answers with shapes.py: structuredContent matching its
outputSchema, the same JSON as text, isError for refusals and interventions.
"""

from __future__ import annotations

import typing as t

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult

from ..agent.errors import AgentError, BadInputError
from ..words import plural
from . import args, models, options, shapes
from .sessions import Sessions
from .waiting import follow, in_thread

if t.TYPE_CHECKING:
    from .executions import ToolExecution

ExecutionAnswer = t.Annotated[CallToolResult, models.ExecutionModel]
KernelsAnswer = t.Annotated[CallToolResult, models.Kernels]
KernelAnswer = t.Annotated[CallToolResult, models.KernelAction]
CheckpointAnswer = t.Annotated[CallToolResult, models.Checkpoint]


def failure(exc: BaseException) -> CallToolResult:
    """An exception as an isError answer the agent can act on."""
    if isinstance(exc, AgentError):
        return shapes.refusal(str(exc))
    return shapes.refusal(f"internal error in the cancelkernel MCP server: {type(exc).__name__}: {exc}")


def register(server: MCPServer, sessions: Sessions) -> None:
    """Add the cell and kernel tools to `server`."""
    o = sessions.options
    budgets = (
        f"Default budgets: wall {o.wall_budget:g} s, quiet {o.quiet_budget:g} s (0 = none); "
        "wall_budget / quiet_budget override them for this call (seconds, or '30s', '2m'); memory_budget ('2G') stops a cell "
        "that grows the kernel by more, and the answer names the biggest variables."
    )

    def view(e: ToolExecution, since: int = 0, limit: int = options.DEFAULT_MAX_CHARS, explicit: bool = False, note: str | None = None) -> CallToolResult:
        session = next((s for s in sessions.list() if s.id == e.kernel_id), None)
        notes = [n for n in (note, shapes.stock_note(session) if session is not None else None) if n]
        return shapes.execution(e, since=since, limit=limit, explicit=explicit, notes=notes)

    @server.tool(description=(
        "Run one cell of Python in a kernel, under budgets: a cell that runs too long (wall budget) or stays silent too long "
        "(quiet budget) is interrupted once, with the stack of where it was; one that cannot be interrupted (a C call holding "
        "the GIL) or runs away again is stopped by restarting the kernel, and its last checkpoint is restored. "
        f"{budgets} Returns status ok | error | interrupted | restarted | died | running, with outputs, why (a sentence), "
        "stopped_at and stack, state (intact | suspect | restored | lost) and what was restored. "
        f"It waits up to `wait` seconds (default {options.DEFAULT_WAIT:g}) and then answers status running with an execution_id: "
        "the cell goes on under its budgets; follow it with get_execution or stop it with interrupt. "
        "kernel_id: a kernel from start_kernel (omitted: the default kernel, started on first use). One cell at a time per kernel. "
        "retry_of: the execution_id this code fixes; the cell keeps its one interrupt used, so if the fix runs away too the kernel "
        "is restarted. cell_id: your name for the cell (the same source is the same cell otherwise). "
        "Large output is cut; the answer says which get_execution call reads the rest."
    ))
    async def execute(
        code: args.Code, ctx: Context, kernel_id: args.OptionalText = None, wall_budget: args.WallBudget = None,
        quiet_budget: args.QuietBudget = None, wait: args.Wait = None, retry_of: args.OptionalText = None,
        cell_id: args.OptionalText = None, memory_budget: args.MemoryBudget = None,
    ) -> ExecutionAnswer:
        holder: list[ToolExecution] = []

        def submit(may_block: bool) -> ToolExecution | None:
            e = sessions.execute(
                options.code_text(code), options.optional_text("kernel_id", kernel_id),
                wall_budget=options.budget("wall_budget", wall_budget), quiet_budget=options.budget("quiet_budget", quiet_budget),
                memory_budget=options.memory_budget(memory_budget), cell_id=options.optional_text("cell_id", cell_id),
                retry_of=options.optional_text("retry_of", retry_of), may_block=may_block,
            )
            if e is not None:
                holder.append(e)
            return e

        try:
            seconds = options.wait_seconds(wait, options.DEFAULT_WAIT)
            # A running kernel takes the cell at once, here; one still to start (or restarting) on a worker thread.
            e = submit(False) or t.cast("ToolExecution", await in_thread(submit, True))
        except Exception as exc:  # noqa: BLE001 - every refusal is an isError answer
            if holder:  # cancelled while the kernel started: the cell was sent, so it is interrupted, not orphaned
                holder[0].interrupt("the MCP client cancelled the execute call")
            return failure(exc)
        except BaseException:
            if holder:
                holder[0].interrupt("the MCP client cancelled the execute call")
            raise
        await follow(ctx, e, seconds, interrupt_on_cancel=True)
        short = seconds - e.watch.elapsed()
        if not e.done and short > 0:
            # The cell was sent a moment after the call began: `running` means it has run `wait` seconds itself.
            await follow(ctx, e, short, interrupt_on_cancel=True)
        return view(e)

    @server.tool(description=(
        "Follow an execution: its state (running, or finished with the same fields as execute) and its output from character "
        "offset `since` (pass the next_since of the previous answer to get only what is new). Waits up to `wait` seconds "
        f"(default {options.DEFAULT_POLL_WAIT:g}; 0 answers at once) for the cell to finish. max_chars: output characters in the "
        f"answer (default {options.DEFAULT_MAX_CHARS}). The last {options.KEEP_FINISHED} finished executions are kept."
    ))
    async def get_execution(
        execution_id: args.Text, ctx: Context, since: args.Count = None, wait: args.Wait = None, max_chars: args.Count = None,
    ) -> ExecutionAnswer:
        try:
            e = sessions.executions.get(execution_id)
            start = options.offset("since", since, 0)
            limit = options.offset("max_chars", max_chars, options.DEFAULT_MAX_CHARS, most=options.MAX_CHARS) or options.DEFAULT_MAX_CHARS
            seconds = options.wait_seconds(wait, options.DEFAULT_POLL_WAIT)
        except Exception as exc:  # noqa: BLE001
            return failure(exc)
        await follow(ctx, e, seconds, interrupt_on_cancel=False)
        return view(e, start, limit, explicit=since is not None)

    @server.tool(description=(
        "Interrupt a running execution (omitted: the only one running): one targeted interrupt, then the policy's escalation "
        "(a cell that does not stop within the interrupt grace is ended by restarting the kernel, restoring its last checkpoint). "
        "Waits up to `wait` seconds (default 30) for the cell to end and returns it like get_execution."
    ))
    async def interrupt(ctx: Context, execution_id: args.OptionalText = None, wait: args.Wait = None) -> ExecutionAnswer:
        try:
            e = sessions.executions.get(execution_id) if execution_id is not None else sessions.running_execution()
            seconds = options.wait_seconds(wait, options.DEFAULT_POLL_WAIT)
        except Exception as exc:  # noqa: BLE001
            return failure(exc)
        sent = e.interrupt("the interrupt tool was called")
        await follow(ctx, e, seconds, interrupt_on_cancel=False, watch=False)
        return view(e, note=None if sent else f"execution {e.id!r} had already finished: nothing was interrupted")

    @server.tool(description=(
        "What the kernels are doing (omitted kernel_id: every kernel): the running execution, for how long, seconds since its "
        "last output, the line it is on now (our kernel), threads given up on; alive or not."
    ))
    async def status(kernel_id: args.OptionalText = None) -> KernelsAnswer:
        try:
            chosen = [sessions.get(kernel_id)] if kernel_id is not None else sessions.list()
            kernels = []
            for s in chosen:
                kernels.append(shapes.kernel_info(s, await in_thread(s.ak.status)))
        except Exception as exc:  # noqa: BLE001
            return failure(exc)
        message = None if kernels else "no kernel is running; the first execute starts the default one"
        return shapes.answer({"kernels": kernels, "message": message})

    @server.tool(description=(
        "Restart a kernel (omitted: the default one). restore=true (the default) brings back its latest checkpoint; "
        "restore=false starts a fresh kernel under the same id (no variables, no checkpoints). Refused while a cell runs: "
        "interrupt it first."
    ))
    async def restart(kernel_id: args.OptionalText = None, restore: args.Flag = True) -> KernelAnswer:
        try:
            if not isinstance(restore, bool):
                raise BadInputError(f"restore must be true or false, not {restore!r:.40}")
            session = sessions.get(options.optional_text("kernel_id", kernel_id)) if kernel_id is not None else sessions.existing_default()
            if restore:
                back = await in_thread(sessions.restart, session)
                text = (f"kernel {session.id!r} restarted; " + (f"restored {plural(len(back.names), 'name')} from checkpoint {back.checkpoint!r}"
                        if back.state == "restored" else f"nothing restored ({back.note or 'no checkpoint'})"))
                data = {"kernel_id": session.id, "action": "restart", "state": back.state, "restored": shapes.restored(back), "message": text}
            else:
                session = await in_thread(sessions.replace, session)
                data = {"kernel_id": session.id, "action": "restart", "state": "lost", "message": f"kernel {session.id!r} replaced by a fresh one"}
            data["kernel"] = shapes.kernel_info(session)
        except Exception as exc:  # noqa: BLE001
            return failure(exc)
        return shapes.answer(data)

    @server.tool(description=(
        "The kernel's checkpoints (our kernel only): action=save (name optional: a new one), restore (name omitted: the latest), "
        "or list. A restart after a runaway restores the latest checkpoint by itself; --checkpoint before-risky saves one before "
        "every risky cell."
    ))
    async def checkpoint(action: args.Text, name: args.OptionalText = None, kernel_id: args.OptionalText = None) -> CheckpointAnswer:
        try:
            if action not in ("save", "restore", "list"):
                raise BadInputError(f"action must be save, restore or list, not {action!r:.40}")
            session = sessions.get(options.optional_text("kernel_id", kernel_id)) if kernel_id is not None else sessions.existing_default()
            label = options.optional_text("name", name)
            data: dict[str, t.Any] = {"kernel_id": session.id, "action": action}
            if action == "save":
                body = await in_thread(session.ak.save_checkpoint, label)
                data.update(name=body.get("name") or label, message=f"saved checkpoint {body.get('name') or label!r}")
            elif action == "restore":
                back = await in_thread(session.ak.restore_checkpoint, label)
                message = f"restored {plural(len(back.names), 'name')} from {back.checkpoint!r}"
                data.update(name=back.checkpoint, restored=shapes.restored(back), message=message)
            else:
                data["checkpoints"] = await in_thread(session.ak.list_checkpoints)
        except Exception as exc:  # noqa: BLE001
            return failure(exc)
        return shapes.answer(data)

    @server.tool(description="Every kernel of this server: id, kernelspec, whether it is ours, what runs on it, its last execution.")
    async def list_kernels() -> KernelsAnswer:
        return shapes.answer({"kernels": [shapes.kernel_info(s) for s in sessions.list()]})

    @server.tool(description=(
        f"Start another kernel and return its kernel_id (for execute's kernel_id). kernel_name: a kernelspec (default {o.kernel_name!r}; "
        "'python3' and others work with budgets, one interrupt and restart, but no stack of a hung cell and no checkpoints). "
        "exec_thread: main or worker (our kernel only)."
    ))
    async def start_kernel(kernel_name: args.OptionalText = None, exec_thread: args.OptionalText = None) -> KernelAnswer:
        try:
            session = await in_thread(sessions.start_kernel, kernel_name, options.optional_text("exec_thread", exec_thread))
        except Exception as exc:  # noqa: BLE001
            return failure(exc)
        return shapes.answer({"kernel_id": session.id, "action": "start", "state": "intact", "kernel": shapes.kernel_info(session),
                              "message": f"kernel {session.id!r} ({session.ak.kernel_name}) is running"})

    @server.tool(description="Shut a kernel down (a cell still running on it ends with it). Every kernel is shut down when the server exits.")
    async def shutdown_kernel(kernel_id: args.Text) -> KernelAnswer:
        try:
            session = await in_thread(sessions.shutdown, options.optional_text("kernel_id", kernel_id))
        except Exception as exc:  # noqa: BLE001
            return failure(exc)
        return shapes.answer({"kernel_id": session.id, "action": "shutdown", "message": f"kernel {session.id!r} was shut down"})
