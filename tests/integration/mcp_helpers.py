"""Helpers for the MCP server tests (no tests here): `cancelkernel mcp` as a real process,
driven by the SDK's own client.

`McpServer` starts the server (stdio: the client spawns it; HTTP: a process on
a random loopback port, its client sending the bearer token the server printed),
keeps one client session open on a private event loop thread, and offers
blocking calls for the tests.  Every answer a test sees is checked against its
tool's outputSchema (`check_answer`).  `close()` ends the session (stdin
closes) or signals the process, and the tests check that no kernel process is
left.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import typing as t
import urllib.error
import urllib.request

import jsonschema
from helpers import AGENT_GRACE, descendants, parent_of
from mcp import Client, StdioServerParameters
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import CallToolResult, Request, RequestParams, Result
from pydantic import ConfigDict

PNG = (  # a 1x1 red pixel
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)


def server_env() -> dict[str, str]:
    """What the server needs from this process's environment (the SDK passes only a safe minimum)."""
    keep = ("JUPYTER_PATH", "JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR", "VIRTUAL_ENV", "PYTHONPATH", "TMPDIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    return env


def command(*extra: str) -> list[str]:
    return [sys.executable, "-m", "cancelkernel", "mcp", "--interrupt-grace", f"{AGENT_GRACE:g}", *extra]


class Answer:
    """A tool's answer: isError, structuredContent, and the content blocks."""

    def __init__(self, result: t.Any):
        self.raw = result
        self.is_error = bool(result.is_error)
        self.data: dict[str, t.Any] = dict(result.structured_content or {})
        self.content = list(result.content)

    @property
    def text(self) -> str:
        return str(self.content[0].text)

    def __getitem__(self, key: str) -> t.Any:
        return self.data[key]

    def get(self, key: str, default: t.Any = None) -> t.Any:
        return self.data.get(key, default)

    def __repr__(self) -> str:
        return f"Answer(is_error={self.is_error}, {json.dumps(self.data, default=str)[:1500]})"


def check_answer(schema: dict[str, t.Any] | None, tool: str, answer: Answer) -> None:
    """An answer's structuredContent fits its tool's outputSchema (the payload cannot say what the schema does not)."""
    assert schema is not None, f"tool {tool!r} has no outputSchema"
    assert answer.raw.structured_content is not None, f"{tool} answered without structuredContent: {answer.raw}"
    try:
        jsonschema.Draft202012Validator(schema).validate(answer.data)
    except jsonschema.ValidationError as exc:
        raise AssertionError(
            f"{tool}'s answer does not fit its outputSchema: {exc.message} at {list(exc.path)}; {answer!r}"
        ) from None
    assert json.loads(answer.text) == answer.data, f"{tool}: the first text block is not the structuredContent"


def http_transport(url: str, headers: dict[str, str] | None = None) -> t.Any:
    """The SDK's streamable HTTP client transport, sending `headers` on every request (the bearer token)."""

    @contextlib.asynccontextmanager
    async def transport() -> t.AsyncIterator[t.Any]:
        async with (
            create_mcp_http_client(headers=headers) as http,
            streamable_http_client(url, http_client=http) as streams,
        ):
            yield streams

    return transport()


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}


def http_post(
    url: str, message: dict[str, t.Any], headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], str]:
    """One JSON-RPC message POSTed as a plain HTTP client would (headers as given, Host too): status, headers, body."""
    request = urllib.request.Request(
        url,
        data=json.dumps(message).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **(headers or {}),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read(100_000).decode()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read().decode()


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


# -- the tasks extension (2026-07-28, SEP-2663) on the client side: the SDK 2.3 has the seams, not the client --


class TaskHandle(Result):
    """A `tools/call` answered with a task (`resultType: "task"`) instead of its result."""

    model_config = ConfigDict(extra="allow")
    result_type: t.Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None


class TaskState(Result):
    """A tasks/get answer: the task, and its result (completed) or error (failed) inline."""

    model_config = ConfigDict(extra="allow")
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None
    result: dict[str, t.Any] | None = None
    error: dict[str, t.Any] | None = None


class TaskIdParams(RequestParams):
    task_id: str


class GetTask(Request[TaskIdParams, t.Literal["tasks/get"]]):
    method: t.Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"  # SEP-2663: Mcp-Name carries the task id over HTTP


class CancelTask(Request[TaskIdParams, t.Literal["tasks/cancel"]]):
    method: t.Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"


class TasksClient(ClientExtension):
    """Declares io.modelcontextprotocol/tasks and resolves a task by polling tasks/get until it ends.

    `seen` keeps every tasks/get; `on_status(state, session)` runs at each poll (a test moves on what it shows:
    creates the flag its cell waits for, or cancels).  A task that ends `completed` resolves to its result.
    """

    identifier = "io.modelcontextprotocol/tasks"

    def __init__(self, on_status: t.Callable[[TaskState, t.Any], t.Awaitable[None]] | None = None):
        self.on_status = on_status
        self.created: list[TaskHandle] = []
        self.seen: list[TaskState] = []

    def claims(self) -> list[ResultClaim[t.Any]]:
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=self._poll)]

    async def _poll(self, handle: TaskHandle, ctx: ClaimContext) -> CallToolResult:
        self.created.append(handle)
        while True:
            state = await ctx.session.send_request(GetTask(params=TaskIdParams(task_id=handle.task_id)), TaskState)
            self.seen.append(state)
            if self.on_status is not None:
                await self.on_status(state, ctx.session)
            if state.status == "completed" and state.result is not None:
                return CallToolResult.model_validate(state.result)
            if state.status in ("failed", "cancelled"):
                raise AssertionError(f"task {handle.task_id} ended {state.status}: {state}")
            await asyncio.sleep((state.poll_interval_ms or 1000) / 1000)


class McpServer:
    """One `cancelkernel mcp` and one client session to it, usable from synchronous tests.

    http: serve on `host` (port 0), the client sending the token the server printed (none with --no-mcp-token);
    env: more environment for the server process.  mode: the client's protocol negotiation ("legacy" is 2025-11-25).
    """

    def __init__(
        self,
        *extra: str,
        http: bool = False,
        cwd: str | None = None,
        host: str = "127.0.0.1",
        env: dict[str, str] | None = None,
        mode: str = "auto",
        connect: bool = True,
        extensions: list[ClientExtension] | None = None,
    ):
        self.extra, self.http, self.cwd, self.host, self.mode, self.connect = (
            list(extra),
            http,
            cwd,
            host,
            mode,
            connect,
        )
        self.env = dict(env or {})
        self.extensions = list(extensions or [])
        self.process: subprocess.Popen | None = None
        self.url: str | None = None
        self.token: str | None = None  # what the server printed, or the one given in env
        self.stderr: list[str] = []  # what the server printed at start
        self.schemas: dict[str, dict[str, t.Any] | None] = {}
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="mcp-test-client", daemon=True)
        self.client: Client | None = None
        self.kernel_pids: set[int] = set()
        self.before_exit: set[int] = set()  # the kernel processes just before close(): all must be gone after it

    # -- life cycle --

    def start(self) -> McpServer:
        self.thread.start()
        if self.http:
            address = f"[{self.host}]:0" if ":" in self.host else f"{self.host}:0"
            env = {k: v for k, v in os.environ.items() if k != "CANCELKERNEL_MCP_TOKEN"}
            self.process = subprocess.Popen(
                [*command(*self.extra), "--http", address],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                env={**env, **server_env(), **self.env},
                cwd=self.cwd,
            )
            self.url, self.stderr = _read_start(self.process)
            printed = next((m.group(1) for line in self.stderr if (m := re.search(r"Bearer ([\w-]+)$", line))), None)
            self.token = printed or self.env.get("CANCELKERNEL_MCP_TOKEN")
            if not self.connect:
                return self
            target: t.Any = http_transport(self.url, self.headers())
        else:
            cmd = command(*self.extra)
            target = StdioServerParameters(command=cmd[0], args=cmd[1:], env={**server_env(), **self.env}, cwd=self.cwd)
        self.client = Client(target, cache=None, mode=t.cast(t.Any, self.mode), extensions=self.extensions or None)
        self._run(self.client.__aenter__(), 60)
        return self

    def headers(self, token: str | None = None) -> dict[str, str]:
        """The headers an HTTP client sends: the server's token (or `token`), as a bearer token."""
        token = token or self.token
        return {"Authorization": f"Bearer {token}"} if token else {}

    @property
    def server_pid(self) -> int | None:
        """The server process (HTTP: ours; stdio: the parent of its kernels)."""
        if self.process is not None:
            return self.process.pid
        parents = {parent_of(pid) for pid in self.kernel_pids} - {None, os.getpid()}
        return parents.pop() if len(parents) == 1 else None

    def processes(self) -> set[int]:
        """The server's kernel processes now (spares included) and every kernel pid an answer named."""
        pid = self.server_pid
        return (descendants(pid) if pid is not None else set()) | self.kernel_pids

    def close(self) -> None:
        """End the session (stdio: stdin closes, the server exits); HTTP: SIGTERM the process."""
        self.before_exit = self.processes()
        try:
            if self.client is not None:
                with contextlib.suppress(Exception):
                    self._run(self.client.__aexit__(None, None, None), 30)
                self.client = None
            if self.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(15)
                finally:
                    if self.process.poll() is None:
                        self.process.kill()
                        self.process.wait(5)
                    if self.process.stderr is not None:
                        self.process.stderr.close()
        finally:
            if self.thread.is_alive():
                self.loop.call_soon_threadsafe(self.loop.stop)
                self.thread.join(5)
            if not self.thread.is_alive():
                self.loop.close()

    def __enter__(self) -> McpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- calls --

    def _run(self, coro: t.Any, timeout: float) -> t.Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(
        self,
        tool: str,
        timeout: float = 90,
        progress: list | None = None,
        read_timeout: float | None = None,
        **arguments: t.Any,
    ) -> Answer:
        assert self.client is not None

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            if progress is not None:
                progress.append((done, message))

        result = self._run(
            self.client.call_tool(tool, arguments, read_timeout_seconds=read_timeout, progress_callback=on_progress),
            timeout,
        )
        return self.checked(tool, result)

    def call_raw(self, tool: str, arguments: dict[str, t.Any], timeout: float = 90) -> Answer:
        assert self.client is not None
        return self.checked(tool, self._run(self.client.call_tool(tool, arguments), timeout))

    def checked(self, tool: str, result: t.Any) -> Answer:
        """The answer, once it is seen to fit its tool's outputSchema (and the kernel pids it names remembered)."""
        if tool not in self.schemas:
            self.schemas.update({each.name: each.output_schema for each in self.tools()})
        answer = Answer(result)
        check_answer(self.schemas.get(tool), tool, answer)
        self._remember_pids(answer.data)
        return answer

    def cancel_once_running(self, tool: str, timeout: float = 60, **arguments: t.Any) -> None:
        """Call a tool and give up on it (the client cancels the request,
        SDK 2.x) once its progress shows the cell running.

        The server's progress says where the kernel sees the cell ("at Cell In[..."): its own state, not a guess at how
        long the cell needs to start.
        """
        assert self.client is not None
        client = self.client

        async def go() -> None:
            running = asyncio.Event()

            async def on_progress(done: float, total: float | None, message: str | None) -> None:
                if message and "at Cell In[" in message:
                    running.set()

            call = asyncio.ensure_future(client.call_tool(tool, arguments, progress_callback=on_progress))
            seen = asyncio.ensure_future(running.wait())
            try:
                await asyncio.wait({call, seen}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                assert not call.done(), f"the call ended before its progress showed the cell running: {call.result()}"
                assert seen.done(), f"no progress showed the cell running within {timeout} s"
            finally:
                seen.cancel()
                call.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await call

        self._run(go(), timeout + 30)

    def resource(self, uri: str) -> t.Any:
        assert self.client is not None
        result = self._run(self.client.read_resource(uri), 30)
        return json.loads(result.contents[0].text)

    def tools(self) -> list[t.Any]:
        assert self.client is not None
        return list(self._run(self.client.list_tools(), 30).tools)

    def _remember_pids(self, data: dict[str, t.Any]) -> None:
        for found in re.findall(r'"pid": (\d+)', json.dumps(data, default=str)):
            self.kernel_pids.add(int(found))


def _read_start(process: subprocess.Popen) -> tuple[str, list[str]]:
    """The address the HTTP server prints once it listens (its last start line), and every line before it."""
    assert process.stderr is not None
    deadline = time.monotonic() + 60
    seen: list[str] = []
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            if process.poll() is not None:
                break
            continue
        seen.append(line.rstrip("\n"))
        found = re.search(r"streamable HTTP on (http://\S+/mcp)", line)
        if found:
            threading.Thread(target=_drain, args=(process.stderr,), daemon=True).start()
            return found.group(1), seen
    process.kill()
    raise AssertionError(f"the HTTP server did not say its address; stderr: {chr(10).join(seen)[-2000:]}")


def _drain(stream: t.Any) -> None:
    with contextlib.suppress(Exception):
        for _ in stream:
            pass
