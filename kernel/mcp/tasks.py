"""MCP tasks for execute, run_cell and run_notebook: the call answers a task at once, the cell runs on.

Two task protocols exist, and they are not wire-compatible (docs/mcp.md, "Tasks"):

- 2025-11-25, experimental in that spec (SEP-1686), what the TypeScript SDK 1.32 client
  speaks: the client asks for a task with `params.task` on `tools/call`, after the server
  said `capabilities.tasks` and the tool `execution.taskSupport`; then `tasks/get`,
  `tasks/result` (blocks until the end, then the tool's answer), `tasks/list`, `tasks/cancel`.
- 2026-07-28, the extension `io.modelcontextprotocol/tasks` (SEP-2663): a client that
  declares it on a request may get `{resultType: "task", ...}` instead of the answer; then
  `tasks/get` (the answer inline once done), `tasks/update`, `tasks/cancel` (an ack).

The MCP SDK 2.3 has no task runtime, only the seams: `LegacyTasks` is a server middleware
(it sees `initialize`, `tools/list` and `tools/call` before validation, and answers the
`tasks/*` methods the SDK does not know), `TasksExtension` an SDK Extension (the
2026-07-28 methods and a `tools/call` interceptor).  Both run the tool call in a task
group that outlives the request (`Tasks.running`, the server's lifespan); the tool follows
its cell without a time limit and tells its task what to show and how to stop it
(`current().follow(...)`).  A task is kept while it runs and among the last KEEP_FINISHED
finished ones, like the executions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import itertools
import secrets
import typing as t
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextvars import ContextVar

import anyio
import anyio.abc
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver.server import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp_types import RequestParams
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field

from .options import KEEP_FINISHED
from .waiting import progress_text

if t.TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp_types import CallToolRequestParams

    from ..agent.watch import CellWatch

LEGACY = "2025-11-25"
EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
IMMEDIATE_RESPONSE = "io.modelcontextprotocol/model-immediate-response"
FACTS = "cancelkernel/execution"  # tasks/get `_meta`: the cell as the kernel sees it
TASK_TOOLS = frozenset({"execute", "run_cell", "run_notebook"})
POLL_MS = 1000  # the kernel's view of a cell is refreshed about once a second
# 2026-07-28: the server decides; a call that ends within this head start answers as usual (no task, no polling).
HEAD_START = 1.0
CANCELLED = "the MCP client cancelled the task"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
PAGE = 100

TaskStatus = t.Literal["working", "input_required", "completed", "failed", "cancelled"]


@dataclasses.dataclass
class Followed:
    """What a task's tool runs: how to show it and how to stop it."""

    label: str  # "e5 on kernel default", "cell 3 of analysis.ipynb"
    watch: Callable[[], CellWatch | None]
    cancel: Callable[[], object]
    execution_id: str | None = None
    kernel_id: str | None = None


class TaskRun:
    """One task: a tool call running on after its task was answered, its status, and what it answered."""

    def __init__(self, task_id: str, tool: str, owner: str, *, modern: bool):
        self.id, self.tool, self.owner, self.modern = task_id, tool, owner, modern
        self.created = self.updated = _now()
        self.status: TaskStatus = "working"
        self.message: str | None = None  # set once it ended or was cancelled
        self.result: dict[str, t.Any] | None = None  # the tools/call result, as sent on the wire
        self.error: MCPError | None = None  # or the JSON-RPC error the call ended with
        self.followed: Followed | None = None
        self.cancel_asked = False
        self.done = anyio.Event()

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def follow(
        self,
        label: str,
        watch: Callable[[], CellWatch | None],
        cancel: Callable[[], object],
        *,
        execution_id: str | None = None,
        kernel_id: str | None = None,
    ) -> None:
        """The tool's cell, from now on: shown by tasks/get, stopped by tasks/cancel (at once if one came already)."""
        self.followed = Followed(label, watch, cancel, execution_id, kernel_id)
        if self.cancel_asked:
            cancel()

    def cancel(self) -> None:
        """tasks/cancel: the cell's one targeted interrupt (then the policy's escalation); 2025-11-25: `cancelled`."""
        if not self.cancel_asked:
            self.cancel_asked = True
            if self.followed is not None:
                self.followed.cancel()
        if not self.modern and not self.terminal:
            # 2025-11-25: cancelled before the answer, and for good; tasks/result still gives how the cell ended.
            self._set("cancelled", "cancelled by tasks/cancel: the cell was interrupted (tasks/result: how it ended)")

    def ended(self, result: dict[str, t.Any] | None = None, error: MCPError | None = None) -> None:
        """The tool call returned (or raised): the task's final status."""
        self.result, self.error = result, error
        if self.terminal:  # cancelled (2025-11-25): it stays so
            self.updated = _now()
        elif error is not None:
            self._set("failed", error.message)
        elif result is not None and result.get("isError") and not self.modern:
            self._set("failed", _said(result))  # 2025-11-25: an isError tool result is a failed task
        else:
            self._set("completed", _said(result or {}))
        self.done.set()

    def _set(self, status: TaskStatus, message: str | None) -> None:
        self.status, self.message, self.updated = status, message, _now()

    # -- as the client sees it --

    def status_message(self) -> str:
        if self.message is not None:
            return self.message
        followed = self.followed
        if followed is None:
            return f"{self.tool}: starting (a kernel may be starting)"
        return progress_text(followed.label, followed.watch()) + (
            "; an interrupt was asked (tasks/cancel)" if self.cancel_asked else ""
        )

    def facts(self) -> dict[str, t.Any] | None:
        """The cell as the kernel sees it now (tasks/get `_meta`), once the tool has one."""
        followed = self.followed
        if followed is None:
            return None
        watch = followed.watch()
        summary = watch.summary() if watch is not None else {}
        return {
            "execution_id": followed.execution_id,
            "kernel_id": followed.kernel_id,
            "elapsed": summary.get("elapsed"),
            "seconds_since_output": summary.get("seconds_since_output"),
            "where": summary.get("where"),
            "outputs": summary.get("outputs"),
        }

    def wire(self) -> dict[str, t.Any]:
        """The Task object of this task's protocol generation (ttl vs ttlMs: kept by count, not by time)."""
        task: dict[str, t.Any] = {
            "taskId": self.id,
            "status": self.status,
            "statusMessage": self.status_message(),
            "createdAt": self.created,
            "lastUpdatedAt": self.updated,
        }
        task.update(
            {"ttlMs": None, "pollIntervalMs": POLL_MS} if self.modern else {"ttl": None, "pollInterval": POLL_MS}
        )
        facts = self.facts()
        if facts is not None:
            task["_meta"] = {FACTS: facts}
        return task

    def detailed(self) -> dict[str, t.Any]:
        """2026-07-28 tasks/get: the Task with the answer (completed) or the JSON-RPC error (failed) inline."""
        task = self.wire()
        if self.status == "completed" and self.result is not None:
            task["result"] = self.result
        elif self.status == "failed" and self.error is not None:
            task["error"] = self.error.error.model_dump(mode="json", exclude_none=True)
        return task

    async def answer(self) -> dict[str, t.Any]:
        """2025-11-25 tasks/result: wait for the end, then exactly what the call answered (or its error)."""
        await self.done.wait()
        if self.error is not None:
            raise self.error
        result = dict(self.result or {})
        result["_meta"] = {**(result.get("_meta") or {}), RELATED_TASK: {"taskId": self.id}}
        return result


_current: ContextVar[TaskRun | None] = ContextVar("cancelkernel_mcp_task", default=None)


def current() -> TaskRun | None:
    """The task the running tool call is, or None for an ordinary call."""
    return _current.get()


class Tasks:
    """Every running task and the last KEEP_FINISHED finished ones, and the task group they run in."""

    def __init__(self, keep: int = KEEP_FINISHED):
        self.keep = keep
        self._items: OrderedDict[str, TaskRun] = OrderedDict()
        self._group: anyio.abc.TaskGroup | None = None
        self._serial = itertools.count(1)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The task group the tasks run in, open as long as the server (its lifespan)."""
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                self._group = None
                group.cancel_scope.cancel()

    def start(self, tool: str, owner: str, call: Callable[[], Awaitable[HandlerResult]], *, modern: bool) -> TaskRun:
        """A new task running `call()` (the tool call, without its task) in the background."""
        if self._group is None:
            raise MCPError(INTERNAL_ERROR, "the server is not running tasks (starting or shutting down); try again")
        # Unguessable: the id is the only handle on the task (and on its cell).
        run = TaskRun(f"t{next(self._serial)}-{secrets.token_urlsafe(18)}", tool, owner, modern=modern)
        self._items[run.id] = run
        self._prune()
        self._group.start_soon(self._run, run, call)
        return run

    async def _run(self, run: TaskRun, call: Callable[[], Awaitable[HandlerResult]]) -> None:
        token = _current.set(run)
        try:
            result = await call()
        except MCPError as exc:
            run.ended(error=exc)
        except anyio.get_cancelled_exc_class():
            run.ended(error=MCPError(INTERNAL_ERROR, "the server shut down while the task ran"))
            raise
        except Exception as exc:  # noqa: BLE001 - the task says it failed, the server goes on
            run.ended(error=MCPError(INTERNAL_ERROR, f"internal error in the cancelkernel MCP server: {exc}"))
        else:
            run.ended(result=_wire(result))
        finally:
            _current.reset(token)

    def get(self, params: Mapping[str, t.Any] | None) -> TaskRun:
        task_id = (params or {}).get("taskId")
        if not isinstance(task_id, str) or not task_id:
            raise MCPError(INVALID_PARAMS, f"taskId must be the id of a task (a string), not {task_id!r:.80}")
        found = self._items.get(task_id)
        if found is None:
            raise MCPError(
                INVALID_PARAMS,
                f"no task {task_id!r}: the server keeps every running task and the last {self.keep} finished ones",
            )
        return found

    def forget(self, run: TaskRun) -> None:
        self._items.pop(run.id, None)

    def page(self, owner: str, cursor: t.Any) -> dict[str, t.Any]:
        """2025-11-25 tasks/list: the tasks this session created, PAGE at a time."""
        mine = [run for run in self._items.values() if run.owner == owner and not run.modern]
        try:
            start = int(cursor) if cursor is not None else 0
        except (TypeError, ValueError):
            start = -1
        if not 0 <= start <= len(mine):
            raise MCPError(INVALID_PARAMS, f"cursor {cursor!r:.40} is not one tasks/list gave")
        listed: dict[str, t.Any] = {"tasks": [run.wire() for run in mine[start : start + PAGE]]}
        if start + PAGE < len(mine):
            listed["nextCursor"] = str(start + PAGE)
        return listed

    def _prune(self) -> None:
        finished = [key for key, run in self._items.items() if run.done.is_set()]
        for key in finished[: max(0, len(finished) - self.keep)]:
            del self._items[key]


# -- 2025-11-25: a server middleware ------------------------------------------------------


class LegacyTasks:
    """The 2025-11-25 tasks, as a ServerMiddleware: the capability, taskSupport, task creation, and tasks/*."""

    def __init__(self, tasks: Tasks):
        self.tasks = tasks
        self._methods: dict[str, Callable[[ServerRequestContext[t.Any, t.Any]], Awaitable[dict[str, t.Any]]]] = {
            "tasks/get": self._get,
            "tasks/result": self._result,
            "tasks/list": self._list,
            "tasks/cancel": self._cancel,
        }

    async def __call__(self, ctx: ServerRequestContext[t.Any, t.Any], call_next: CallNext) -> HandlerResult:
        method = ctx.method
        if method == "initialize":
            return _with_capability(await call_next(ctx))
        if ctx.protocol_version != LEGACY:
            return await call_next(ctx)
        if method == "tools/list":
            return _with_task_support(await call_next(ctx))
        if method == "tools/call" and isinstance(ctx.params, Mapping) and ctx.params.get("task") is not None:
            return self._create(ctx, call_next)
        if method in self._methods:
            return await self._methods[method](ctx)
        return await call_next(ctx)

    def _create(self, ctx: ServerRequestContext[t.Any, t.Any], call_next: CallNext) -> dict[str, t.Any]:
        params = dict(ctx.params or {})
        tool = params.get("name")
        if tool not in TASK_TOOLS:
            raise MCPError(
                METHOD_NOT_FOUND,
                f"tool {tool!r:.60} does not run as a task (taskSupport forbidden); only "
                f"{', '.join(sorted(TASK_TOOLS))} do. Call it without `task`",
            )
        params.pop("task")
        plain = dataclasses.replace(ctx, params=params)
        run = self.tasks.start(str(tool), _owner(ctx), lambda: call_next(plain), modern=False)
        immediate = (
            f"{tool} runs as task {run.id}: tasks/get shows where the cell is, tasks/result gives its answer, "
            "tasks/cancel interrupts it"
        )
        return {"task": run.wire(), "_meta": {IMMEDIATE_RESPONSE: immediate}}

    async def _get(self, ctx: ServerRequestContext[t.Any, t.Any]) -> dict[str, t.Any]:
        return self.tasks.get(ctx.params).wire()

    async def _result(self, ctx: ServerRequestContext[t.Any, t.Any]) -> dict[str, t.Any]:
        return await self.tasks.get(ctx.params).answer()

    async def _list(self, ctx: ServerRequestContext[t.Any, t.Any]) -> dict[str, t.Any]:
        return self.tasks.page(_owner(ctx), (ctx.params or {}).get("cursor"))

    async def _cancel(self, ctx: ServerRequestContext[t.Any, t.Any]) -> dict[str, t.Any]:
        run = self.tasks.get(ctx.params)
        if run.terminal:
            raise MCPError(INVALID_PARAMS, f"task {run.id!r} has already ended ({run.status}); nothing to cancel")
        run.cancel()
        return run.wire()


def _with_capability(result: HandlerResult) -> HandlerResult:
    """initialize at 2025-11-25: tasks/list, tasks/cancel and task-augmented tools/call."""
    if isinstance(result, dict) and result.get("protocolVersion") == LEGACY:
        capabilities = result.setdefault("capabilities", {})
        capabilities["tasks"] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    return result


def _with_task_support(result: HandlerResult) -> HandlerResult:
    """tools/list at 2025-11-25: the cell tools may run as tasks ("optional": clients without tasks call as ever)."""
    if isinstance(result, dict):
        for tool in result.get("tools") or []:
            if isinstance(tool, dict) and tool.get("name") in TASK_TOOLS:
                tool["execution"] = {**(tool.get("execution") or {}), "taskSupport": "optional"}
    return result


# -- 2026-07-28: the extension io.modelcontextprotocol/tasks ---------------------------------


class TaskIdParams(RequestParams):
    task_id: str = Field(alias="taskId")


class UpdateParams(TaskIdParams):
    input_responses: dict[str, t.Any] = Field(default_factory=dict, alias="inputResponses")


class TasksExtension(Extension):
    """SEP-2663: a client that declares the extension gets a task for a cell that outlasts HEAD_START."""

    identifier = EXTENSION

    def __init__(self, tasks: Tasks):
        self.tasks = tasks

    def methods(self) -> list[MethodBinding]:
        versions = frozenset(MODERN_PROTOCOL_VERSIONS)
        return [
            MethodBinding("tasks/get", TaskIdParams, self._get, versions),
            MethodBinding("tasks/update", UpdateParams, self._update, versions),
            MethodBinding("tasks/cancel", TaskIdParams, self._cancel, versions),
        ]

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[t.Any, t.Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS or params.name not in TASK_TOOLS or not _declared(ctx):
            return await call_next(ctx)
        run = self.tasks.start(params.name, _owner(ctx), lambda: call_next(ctx), modern=True)
        with anyio.move_on_after(HEAD_START):
            await run.done.wait()
        if not run.done.is_set():
            return {"resultType": "task", **run.wire()}
        self.tasks.forget(run)  # it ended within the head start: the answer, as without tasks
        if run.error is not None:
            raise run.error
        return run.result

    async def _get(self, ctx: ServerRequestContext[t.Any, t.Any], params: TaskIdParams) -> dict[str, t.Any]:
        require_client_extension(ctx, EXTENSION)
        return self.tasks.get({"taskId": params.task_id}).detailed()

    async def _update(self, ctx: ServerRequestContext[t.Any, t.Any], params: UpdateParams) -> dict[str, t.Any]:
        require_client_extension(ctx, EXTENSION)
        self.tasks.get({"taskId": params.task_id})  # our tasks never ask for input: nothing to take
        return {}

    async def _cancel(self, ctx: ServerRequestContext[t.Any, t.Any], params: TaskIdParams) -> dict[str, t.Any]:
        require_client_extension(ctx, EXTENSION)
        self.tasks.get({"taskId": params.task_id}).cancel()
        return {}


def _declared(ctx: ServerRequestContext[t.Any, t.Any]) -> bool:
    """The request declared the tasks extension (per request, at 2026-07-28)."""
    capabilities = ctx.session.client_capabilities
    return bool(capabilities and capabilities.extensions and EXTENSION in capabilities.extensions)


# -- helpers -------------------------------------------------------------------------------


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _owner(ctx: ServerRequestContext[t.Any, t.Any]) -> str:
    """Whose task: the HTTP session (Mcp-Session-Id), or the one stdio client."""
    headers = getattr(ctx.request, "headers", None)
    session = headers.get("mcp-session-id") if headers is not None else None
    return str(session) if session else "stdio"


def _wire(result: HandlerResult) -> dict[str, t.Any]:
    """A tools/call result as it goes on the wire (the middleware gets it so; the interceptor gets the model)."""
    if isinstance(result, BaseModel):
        return dict(result.model_dump(mode="json", by_alias=True, exclude_none=True))
    return dict(result or {})


def _said(result: Mapping[str, t.Any]) -> str | None:
    """The answer's sentence (execute's `why`, the notebook tools' `message`, a refusal's `error`) for statusMessage."""
    data = result.get("structuredContent") or {}
    for key in ("why", "message", "error"):
        if isinstance(data.get(key), str):
            return str(data[key])
    return None
