"""Helpers for the MCP server tests (no tests here): `cancelkernel mcp` as a real process, driven by the SDK's own client.

`McpServer` starts the server (stdio: the client spawns it; HTTP: a process on
a random loopback port), keeps one client session open on a private event
loop thread, and offers blocking calls for the tests.  `close()` ends the
session (stdin closes) or signals the process, and the tests check that no
kernel process is left.
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

from mcp import Client, StdioServerParameters

from cancelkernel.testing import process_exited

# The grace of the agent-client tests: the restart paths stay quick, the behaviour is the same.
GRACE = "0.5"
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
    return [sys.executable, "-m", "cancelkernel", "mcp", "--interrupt-grace", GRACE, *extra]


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


class McpServer:
    """One `cancelkernel mcp` and one client session to it, usable from synchronous tests."""

    def __init__(self, *extra: str, http: bool = False, cwd: str | None = None):
        self.extra, self.http, self.cwd = list(extra), http, cwd
        self.process: subprocess.Popen | None = None
        self.url: str | None = None
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="mcp-test-client", daemon=True)
        self.client: Client | None = None
        self.kernel_pids: set[int] = set()
        self.before_exit: set[int] = set()  # the kernel processes just before close(): all must be gone after it

    # -- life cycle --

    def start(self) -> McpServer:
        self.thread.start()
        if self.http:
            self.process = subprocess.Popen(
                [*command(*self.extra), "--http", "127.0.0.1:0"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, text=True, env={**os.environ, **server_env()}, cwd=self.cwd,
            )
            self.url = _read_url(self.process)
            target: t.Any = self.url
        else:
            cmd = command(*self.extra)
            target = StdioServerParameters(command=cmd[0], args=cmd[1:], env=server_env(), cwd=self.cwd)
        self.client = Client(target, cache=None)
        self._run(self.client.__aenter__(), 60)
        return self

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
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)

    def __enter__(self) -> McpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- calls --

    def _run(self, coro: t.Any, timeout: float) -> t.Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, tool: str, timeout: float = 90, progress: list | None = None, read_timeout: float | None = None, **arguments: t.Any) -> Answer:
        assert self.client is not None

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            if progress is not None:
                progress.append((done, message))

        result = self._run(self.client.call_tool(tool, arguments, read_timeout_seconds=read_timeout, progress_callback=on_progress), timeout)
        answer = Answer(result)
        self._remember_pids(answer.data)
        return answer

    def call_raw(self, tool: str, arguments: dict[str, t.Any], timeout: float = 90) -> Answer:
        assert self.client is not None
        return Answer(self._run(self.client.call_tool(tool, arguments), timeout))

    def cancel_once_running(self, tool: str, timeout: float = 60, **arguments: t.Any) -> None:
        """Call a tool and give up on it (the client cancels the request, SDK 2.x) once its progress shows the cell running.

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


def _read_url(process: subprocess.Popen) -> str:
    """The address the HTTP server prints once it listens."""
    assert process.stderr is not None
    deadline = time.monotonic() + 60
    seen = []
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            if process.poll() is not None:
                break
            continue
        seen.append(line)
        found = re.search(r"(http://\S+/mcp)", line)
        if found:
            threading.Thread(target=_drain, args=(process.stderr,), daemon=True).start()
            return found.group(1)
    process.kill()
    raise AssertionError(f"the HTTP server did not say its address; stderr: {''.join(seen)[-2000:]}")


def _drain(stream: t.Any) -> None:
    with contextlib.suppress(Exception):
        for _ in stream:
            pass


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(") ", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def descendants(pid: int) -> set[int]:
    """Every process below `pid` now (Linux /proc): the kernels a server started, their spares included."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent = parent_of(int(entry))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def gone(pid: int, timeout: float = 15.0) -> bool:
    """True once the process no longer exists (a zombie counts as gone)."""
    return process_exited(pid, timeout)


def wait_until(predicate: t.Callable[[], t.Any], timeout: float = 20.0) -> t.Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    return None
