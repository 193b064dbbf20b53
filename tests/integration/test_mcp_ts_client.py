"""The official MCP TypeScript SDK client (@modelcontextprotocol/sdk 1.32, tests/mcp_ts) against `mcp --http`.

What the clients in use speak: the bearer token (no token, a wrong one, the right one) and the Host check with
it; the 2025-11-25 tasks (callToolStream, tasks/get with the kernel's view, tasks/result, tasks/cancel as the
cell's interrupt, tasks/list, the errors), for execute, run_cell and run_notebook; and without tasks, execute's
`running` and get_execution as before.  tests/mcp_ts/client.mjs makes the calls and prints what it saw; the
assertions are here, and every answer it saw is checked against its tool's outputSchema.  Needs node and npm
(`npm ci` in tests/mcp_ts, done here if .ci/run has not); without npm it fails saying so, or skips with
CANCELKERNEL_SKIP_BROWSER=1 (everything that needs a browser or node).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import typing as t
from collections.abc import Iterator

import nbformat
import pytest
from mcp_helpers import Answer, McpServer
from mcp_types import CallToolResult

pytestmark = pytest.mark.timeout(300)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIENT_DIR = os.path.join(ROOT, "mcp_ts")
SDK = os.path.join(CLIENT_DIR, "node_modules", "@modelcontextprotocol", "sdk", "package.json")


def _node() -> str:
    """node, with the SDK installed from the lock file (npm ci) if it is not yet."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        if os.environ.get("CANCELKERNEL_SKIP_BROWSER") == "1":
            pytest.skip("node or npm not found (CANCELKERNEL_SKIP_BROWSER=1)")
        pytest.fail(
            "node/npm not found: install Node.js 20 or newer with npm, or set CANCELKERNEL_SKIP_BROWSER=1",
            pytrace=False,
        )
    if not os.path.exists(SDK):
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=CLIENT_DIR, check=True, timeout=600
        )
    return node


@pytest.fixture(scope="module")
def node() -> str:
    return _node()


@pytest.fixture(scope="module")
def server(node: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    running = McpServer("--no-spare", http=True, cwd=str(tmp_path_factory.mktemp("mcp-ts-cwd")))
    try:
        running.start()
        yield running
    finally:
        running.close()


def ts_client(node: str, server: McpServer, scenario: str, **env: str) -> dict[str, t.Any]:
    """What the TypeScript client saw in one scenario."""
    assert server.url is not None
    assert server.token is not None
    done = subprocess.run(
        [node, os.path.join(CLIENT_DIR, "client.mjs"), scenario],
        env={**os.environ, "MCP_URL": server.url, "MCP_TOKEN": server.token, **env},
        capture_output=True,
        text=True,
        timeout=240,
        cwd=CLIENT_DIR,
    )
    assert done.returncode == 0, f"the TypeScript client failed:\n{done.stderr[-4000:]}"
    return t.cast(dict, json.loads(done.stdout))


def answer(server: McpServer, tool: str, wire: dict[str, t.Any]) -> Answer:
    """A tools/call result the TypeScript client got, checked against its tool's outputSchema like every answer."""
    return server.checked(tool, CallToolResult.model_validate(wire))


def test_the_token_and_the_host_check(node: str, server: McpServer) -> None:
    seen = ts_client(node, server, "auth")
    assert seen["no_token"] == {"connected": False, "code": 401, "message": seen["no_token"]["message"]}, seen
    assert seen["wrong_token"]["code"] == 401, seen
    assert not seen["wrong_token"]["connected"], seen
    assert "execute" in seen["right_token"]["tools"], seen
    assert seen["bad_host"]["code"] == 421, seen
    assert not seen["bad_host"]["connected"], seen  # the token is right, the Host not
    assert seen["bad_host_no_token"]["code"] == 401, seen  # the token is asked first


@pytest.fixture(scope="module")
def tasks_seen(node: str, server: McpServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, t.Any]:
    """What the TypeScript client saw of the 2025-11-25 tasks (one run of the scenario, for the tests below)."""
    where = tmp_path_factory.mktemp("ts-tasks")
    notebook = where / "two.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 20 + 1\nprint(x * 2)"), nbformat.v4.new_code_cell("print(x)")]
    nbformat.write(nb, str(notebook))
    flags = {name: str(where / f"{name}.flag") for name in ("stream", "manual", "plain")}
    return ts_client(node, server, "tasks", MCP_FLAGS=json.dumps({**flags, "notebook": str(notebook)}))


def test_tasks_are_negotiated_for_the_cell_tools(tasks_seen: dict[str, t.Any]) -> None:
    # The capability, and the cell tools may run as tasks (optional: clients without tasks call them as ever).
    capabilities = tasks_seen["capabilities"]
    assert capabilities == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}, capabilities
    support = tasks_seen["task_support"]
    assert {name for name, value in support.items() if value} == {"execute", "run_cell", "run_notebook"}
    assert set(support.values()) == {"optional", None}
    assert tasks_seen["is_tool_task"] == {"execute": True, "status": False}


def test_call_tool_stream_makes_polls_and_fetches_a_task(server: McpServer, tasks_seen: dict[str, t.Any]) -> None:
    stream = tasks_seen["stream"]
    assert stream[0]["type"] == "taskCreated", stream
    assert stream[0]["status"] == "working", stream
    statuses = [m["statusMessage"] for m in stream if m["type"] == "taskStatus"]
    assert any("at Cell In[" in m and "since output" in m for m in statuses), statuses  # the kernel's view
    assert stream[-2]["status"] == "completed", stream
    assert stream[-1]["type"] == "result", stream
    done = answer(server, "execute", stream[-1]["result"])
    assert not done.is_error
    assert done["status"] == "ok"
    assert "".join(o["text"] for o in done["outputs"]) == "waiting\ndone\n"


def test_a_task_by_hand_get_then_result(server: McpServer, tasks_seen: dict[str, t.Any]) -> None:
    manual = tasks_seen["manual"]
    task = manual["created"]["task"]
    assert (task["status"], task["ttl"], task["pollInterval"]) == ("working", None, 1000), task
    assert "tasks/result" in manual["created"]["_meta"]["io.modelcontextprotocol/model-immediate-response"]
    facts = manual["seen"][-1]["meta"]["cancelkernel/execution"]  # tasks/get: the execution as the kernel sees it
    assert facts["where"].startswith("Cell In[")
    assert facts["kernel_id"] == "default"
    assert facts["execution_id"]
    result = answer(server, "execute", manual["result"])  # tasks/result: blocked until the end, then the answer
    assert result["status"] == "ok", result
    assert result["execution_id"] == facts["execution_id"], result
    assert manual["result"]["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task["taskId"]}
    assert manual["after"]["status"] == "completed", manual["after"]
    assert "finished" in manual["after"]["statusMessage"], manual["after"]


def test_cancelling_a_task_interrupts_its_cell(server: McpServer, tasks_seen: dict[str, t.Any]) -> None:
    cancel = tasks_seen["cancel"]
    assert cancel["cancelled"]["status"] == "cancelled", cancel["cancelled"]  # at once
    stopped = answer(server, "execute", cancel["result"])  # tasks/result: how the cell ended, and where
    assert stopped.is_error, stopped
    assert (stopped["status"], stopped["reason"]) == ("interrupted", "manual"), stopped
    assert "cancelled the task" in stopped["why"], stopped
    assert stopped["stopped_at"].startswith("Cell In["), stopped
    assert cancel["again"]["code"] == -32602, cancel["again"]  # a terminal task cannot be cancelled again


def test_a_failing_cell_is_a_failed_task_with_its_answer(server: McpServer, tasks_seen: dict[str, t.Any]) -> None:
    failing = tasks_seen["failing"]  # the 2025-11-25 rule: an isError answer is a failed task
    assert failing["stream"][-1]["type"] == "error", failing
    assert "failed" in failing["stream"][-1]["message"], failing
    error = answer(server, "execute", failing["result"])  # tasks/result still has the answer
    assert error.is_error, error
    assert error["error_name"] == "ZeroDivisionError", error


def test_the_notebook_tools_run_as_tasks(server: McpServer, tasks_seen: dict[str, t.Any]) -> None:
    one = answer(server, "run_cell", tasks_seen["run_cell"])
    assert one["status"] == "ok", one
    assert one["cell"]["outputs"][0]["text"] == "42\n", one
    whole = answer(server, "run_notebook", tasks_seen["run_notebook"])
    assert whole["status"] == "ok", whole
    assert [c["status"] for c in whole["cells"]] == ["ok", "ok"], whole


def test_tasks_list_and_the_errors(tasks_seen: dict[str, t.Any]) -> None:
    listed = dict(tasks_seen["list"])  # this session's tasks
    assert listed[tasks_seen["manual"]["created"]["task"]["taskId"]] == "completed"
    assert "cancelled" in listed.values()
    assert "failed" in listed.values()
    assert tasks_seen["unknown"]["code"] == -32602, tasks_seen["unknown"]
    assert tasks_seen["forbidden"]["code"] == -32601, tasks_seen["forbidden"]  # status does not run as a task


def test_without_tasks_execute_answers_running_as_before(server: McpServer, tasks_seen: dict[str, t.Any]) -> None:
    first = answer(server, "execute", tasks_seen["plain"]["first"])
    assert first["status"] == "running", first
    assert not first.is_error, first
    followed = answer(server, "get_execution", tasks_seen["plain"]["followed"])
    assert followed["status"] == "ok", followed
    assert followed["execution_id"] == first["execution_id"], followed
