"""MCP tasks with the Python SDK's client over stdio: the 2026-07-28 extension io.modelcontextprotocol/tasks (SEP-2663).

The SDK 2.3 has no tasks client: mcp_helpers.TasksClient declares the extension and resolves a task by polling
tasks/get.  A cell that outlasts the head start is answered with a task (its statusMessage and `_meta` the
kernel's view), tasks/cancel is its targeted interrupt and the task ends with the interrupted answer, a quick cell
answers as usual, and a client that does not declare the extension gets no task and cannot use tasks/*.  The
2025-11-25 tasks, which the TypeScript SDK speaks, are tested with its client (test_mcp_ts_client.py).
"""

from __future__ import annotations

import os
import typing as t
from collections.abc import Iterator

import pytest
from mcp.shared.exceptions import MCPError
from mcp_helpers import CancelTask, GetTask, McpServer, TaskIdParams, TasksClient, TaskState
from mcp_types import Result

from cancelkernel.testing import process_exited

pytestmark = pytest.mark.timeout(180)


def waiting_cell(flag: str, tag: str) -> str:
    wait = f"while not os.path.exists({flag!r}):\n    time.sleep(0.01)"
    return f"import os, time  # {tag}\nprint('waiting', flush=True)\n{wait}"


def at_a_line(state: TaskState) -> bool:
    """The kernel has been seen on a line of the cell (its statusMessage says where)."""
    return "at Cell In[" in (state.status_message or "")


def printed(state: TaskState) -> bool:
    """The cell has printed (a notebook's cell: the runner does not ask the kernel for its line)."""
    return ": running" in (state.status_message or "") and "1 output" in (state.status_message or "")


class Moves:
    """What a test does when a poll shows the cell running (on state, never on a timer)."""

    def __init__(self) -> None:
        self.flag: str | None = None
        self.cancel = False
        self.acks: list[t.Any] = []
        self.ready: t.Callable[[TaskState], bool] = at_a_line

    async def __call__(self, state: TaskState, session: t.Any) -> None:
        if state.status != "working" or not self.ready(state):
            return
        if self.flag is not None and not os.path.exists(self.flag):
            open(self.flag, "w").close()
        if self.cancel and not self.acks:
            self.acks.append(await session.send_request(CancelTask(params=TaskIdParams(task_id=state.task_id)), Result))


@pytest.fixture(scope="module")
def moves() -> Moves:
    return Moves()


@pytest.fixture(scope="module")
def tasks_client(moves: Moves) -> TasksClient:
    return TasksClient(on_status=moves)


@pytest.fixture(scope="module")
def mcp(tasks_client: TasksClient) -> Iterator[McpServer]:
    server = McpServer("--no-spare", extensions=[tasks_client])
    try:
        server.start()
        yield server
    finally:
        server.close()
    left = [pid for pid in server.before_exit if not process_exited(pid)]
    assert left == [], f"kernel processes left after the server exited: {left}"


@pytest.fixture(autouse=True)
def fresh(moves: Moves, tasks_client: TasksClient) -> None:
    moves.flag, moves.cancel, moves.acks[:], moves.ready = None, False, [], at_a_line
    tasks_client.created.clear()
    tasks_client.seen.clear()


def test_a_long_cell_is_a_task_polled_to_its_answer(
    mcp: McpServer, moves: Moves, tasks_client: TasksClient, tmp_path
) -> None:
    assert mcp.client is not None
    assert mcp.client.session.protocol_version == "2026-07-28"
    moves.flag = str(tmp_path / "go")
    r = mcp.call("execute", code=waiting_cell(moves.flag, "task") + "\nprint('done')")
    assert not r.is_error, r
    assert r["status"] == "ok", r
    assert "".join(o["text"] for o in r["outputs"]) == "waiting\ndone\n", r
    (created,) = tasks_client.created
    assert created.status == "working"
    assert created.poll_interval_ms == 1000
    assert created.model_extra["ttlMs"] is None
    running = [s for s in tasks_client.seen if s.status == "working" and at_a_line(s)]
    assert running, tasks_client.seen
    assert "since output" in (running[-1].status_message or ""), tasks_client.seen
    facts = (running[-1].meta or {})["cancelkernel/execution"]
    assert facts["execution_id"] == r["execution_id"]
    assert facts["where"].startswith("Cell In[")
    assert tasks_client.seen[-1].status == "completed"
    assert tasks_client.seen[-1].result is not None


def test_cancelling_a_task_interrupts_its_cell_and_the_task_ends_with_that_answer(
    mcp: McpServer, moves: Moves, tasks_client: TasksClient
) -> None:
    moves.cancel = True
    r = mcp.call("execute", code="import time  # cancel the task\nwhile True:\n    time.sleep(0.01)")
    assert moves.acks, "no poll showed the cell running"
    assert r.is_error, r
    assert (r["status"], r["reason"]) == ("interrupted", "manual"), r
    assert "cancelled the task" in r["why"], r
    assert r["stopped_at"].startswith("Cell In["), r
    # SEP-2663 cancel is an ack, and the task may end otherwise: here it completes with the interrupted cell's answer.
    assert tasks_client.seen[-1].status == "completed", tasks_client.seen[-1]
    assert mcp.call("execute", code="'free'")["outputs"][0]["text"] == "'free'\n"


def test_a_quick_cell_answers_as_usual(mcp: McpServer, tasks_client: TasksClient) -> None:
    r = mcp.call("execute", code="6 * 7")
    assert r["status"] == "ok", r
    assert r["outputs"][0]["text"] == "42\n", r
    assert tasks_client.created == [], r


def test_the_notebook_tools_run_as_tasks(mcp: McpServer, moves: Moves, tasks_client: TasksClient, tmp_path) -> None:
    import nbformat

    moves.flag, moves.ready = str(tmp_path / "nb-go"), printed
    path = tmp_path / "wait.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(waiting_cell(moves.flag, "notebook") + "\nprint('nb done')")]
    nbformat.write(nb, str(path))
    r = mcp.call("run_notebook", path=str(path))
    assert r["status"] == "ok", r
    assert tasks_client.created, r
    assert any("wait.ipynb" in (s.status_message or "") for s in tasks_client.seen), tasks_client.seen


def test_without_the_extension_no_task_and_no_tasks_methods(tmp_path) -> None:
    plain = McpServer("--no-spare")
    try:
        plain.start()
        flag = str(tmp_path / "plain")
        first = plain.call("execute", code=waiting_cell(flag, "plain"), wait=0.5)
        assert first["status"] == "running", first  # today's flow: running, then get_execution
        open(flag, "w").close()
        assert plain.call("get_execution", execution_id=first["execution_id"], wait=60)["status"] == "ok"
        assert plain.client is not None
        with pytest.raises(MCPError) as refused:
            plain._run(plain.client.session.send_request(GetTask(params=TaskIdParams(task_id="t1-x")), TaskState), 30)
        assert refused.value.code == -32021, refused.value.error  # the client did not declare the extension
    finally:
        plain.close()
