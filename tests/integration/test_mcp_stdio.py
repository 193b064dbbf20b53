"""`cancelkernel mcp` over stdio, driven by the MCP SDK's own client:
every status, the policy, bad input, no kernel left."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from mcp_helpers import PNG, McpServer

from cancelkernel.testing import process_exited, wait_until

pytestmark = pytest.mark.timeout(180)


def loop(tag: str) -> str:
    """A runaway cell; the tag makes it a cell of its own (the same source is the same cell, with one interrupt)."""
    return f"import time  # {tag}\nprint('started', flush=True)\nwhile True:\n    time.sleep(0.01)"


@pytest.fixture(scope="module")
def mcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    """One server for the module (its kernels are reused); on exit every kernel it ever had must be gone."""
    server = McpServer(cwd=str(tmp_path_factory.mktemp("mcp-cwd")))
    try:
        server.start()
        # A kernel for the exit check to find gone, whichever of the module's tests this worker runs (some start none).
        assert server.call("execute", code="'started'")["status"] == "ok"
        yield server
    finally:
        server.close()
    left = [pid for pid in server.before_exit if not process_exited(pid)]
    assert server.kernel_pids, f"kernel processes left after the server exited: {left}"
    assert left == [], f"kernel processes left after the server exited: {left}"


@pytest.fixture(autouse=True)
def nothing_left_running(mcp: McpServer) -> Iterator[None]:
    """A test that failed halfway may leave its cell running: stop it, so the next test starts on an idle kernel."""
    yield
    for kernel in mcp.call("list_kernels")["kernels"]:
        if kernel["running_execution"] is not None:
            mcp.call("interrupt", execution_id=kernel["running_execution"], wait=30)


def test_every_tool_has_an_output_schema_and_says_its_defaults(mcp: McpServer) -> None:
    tools = {tool.name: tool for tool in mcp.tools()}
    assert set(tools) == {
        "execute",
        "get_execution",
        "interrupt",
        "status",
        "restart",
        "checkpoint",
        "list_kernels",
        "start_kernel",
        "shutdown_kernel",
        "read_notebook",
        "run_cell",
        "run_notebook",
    }
    assert all(tool.output_schema and tool.output_schema["type"] == "object" for tool in tools.values())
    assert "wall 600 s, quiet 120 s" in tools["execute"].description
    assert "default 45" in tools["execute"].description
    assert tools["execute"].input_schema["properties"]["code"]["type"] == "string"
    assert set(tools["execute"].output_schema["properties"]) >= {
        "status",
        "execution_id",
        "kernel_id",
        "outputs",
        "elapsed",
        "stopped_at",
        "stack",
        "state",
        "restored",
        "why",
    }


def test_ok_and_error_cells(mcp: McpServer) -> None:
    r = mcp.call("execute", code="x = 41\nprint('x is', x)\nx + 1")
    assert not r.is_error, r
    assert r["status"] == "ok", r
    assert r["state"] == "intact", r
    assert json.loads(r.text) == r.data  # the same JSON as text, for clients without structuredContent
    assert [(o["type"], o["text"]) for o in r["outputs"]] == [("stream", "x is 41\n"), ("result", "42\n")]
    assert r["kernel_id"] == "default"
    assert r["execution_id"].startswith("e")
    assert "finished" in r["why"]
    r = mcp.call("execute", code="def f():\n    return 1 / 0\nf()")
    assert r.is_error, r
    assert r["status"] == "error", r
    assert r["error_name"] == "ZeroDivisionError", r
    assert r["state"] == "intact"
    assert "ZeroDivisionError" in r["why"]
    # No ANSI colours for an agent
    assert r["outputs"][0]["type"] == "error"
    assert "\x1b[" not in r["outputs"][0]["text"]


def test_a_runaway_is_interrupted_once_and_its_retry_escalates(mcp: McpServer) -> None:
    first = mcp.call("execute", code=loop("retried"), wall_budget=0.5)
    assert first.is_error, first
    assert (first["status"], first["reason"], first["state"]) == (
        "interrupted",
        "wall_budget",
        "suspect",
    ), first
    assert first["stopped_at"].startswith("Cell In[")
    assert "time.sleep(0.01)" in first["stack"][-1]["line"]
    assert f"retry_of={first['execution_id']!r}" in first["why"]
    fix = loop("retried").replace("0.01", "0.02")  # a "fix" that still runs away
    second = mcp.call("execute", code=fix, retry_of=first["execution_id"])
    assert second.is_error, second
    assert second["status"] == "restarted", second
    assert second["retry_of"] == first["execution_id"], second
    assert [a["status"] for a in second["attempts"]] == ["interrupted", "restarted"]
    # The earlier budget carried over
    assert "ran away again" in second["why"]
    assert second["budgets"]["wall_budget"] == 0.5
    assert mcp.call("execute", code="1 + 1")["status"] == "ok"


def test_a_memory_budget_stops_a_growing_cell_and_names_what_holds_it(mcp: McpServer) -> None:
    grow = "grown = []\nwhile True:\n    grown.append(bytearray(10 * 2**20))"
    bad = mcp.call("execute", code=grow, memory_budget="lots")
    assert bad.is_error, bad
    assert "is not a size" in bad.text, bad
    r = mcp.call("execute", code=grow, memory_budget="100M")
    assert r.is_error, r
    assert (r["status"], r["reason"]) == ("interrupted", "memory_budget"), r
    assert "memory budget of 100 MiB" in r["why"], r["why"]
    assert "del grown" in r["why"], r["why"]
    assert r["budgets"]["memory_budget"] == 100 * 2**20
    assert mcp.call("execute", code="del grown\nlen('ok')")["status"] == "ok"


def test_a_gil_holding_call_is_restarted_with_its_state_restored(mcp: McpServer) -> None:
    assert mcp.call("execute", code="kept = 'still here'")["status"] == "ok"
    saved = mcp.call("checkpoint", action="save", name="before-sum")
    assert not saved.is_error, saved
    assert saved["name"] == "before-sum", saved
    r = mcp.call("execute", code="sum(range(10**12))", wall_budget=0.5)
    assert r.is_error, r
    assert (r["status"], r["state"]) == ("restarted", "restored"), r
    assert "kept" in r["restored"]["names"]
    assert r["restored"]["checkpoint"] == "before-sum"
    assert any("sum(range(10**12))" in f["line"] for f in r["stack"])
    assert "restored" in r["why"]
    assert mcp.call("execute", code="kept")["outputs"][0]["text"] == "'still here'\n"
    listed = mcp.call("checkpoint", action="list")
    assert any(c.get("name") == "before-sum" for c in listed["checkpoints"]), listed


def test_a_dying_kernel_is_died_and_replaced(mcp: McpServer) -> None:
    r = mcp.call("execute", code="print('bye', flush=True)\nimport os\nos._exit(3)")
    assert r.is_error, r
    assert r["status"] == "died", r
    assert r["state"] in ("restored", "lost"), r
    assert "died" in r["why"]
    assert mcp.call("execute", code="2 + 2")["outputs"][0]["text"] == "4\n"


def test_a_long_cell_answers_running_then_is_polled_to_the_end(mcp: McpServer) -> None:
    code = "import time\nfor i in range(4):\n    print('tick', i, flush=True)\n    time.sleep(0.4)\n'done'"
    r = mcp.call("execute", code=code, wait=0.3)
    assert not r.is_error, r
    assert r["status"] == "running", r
    assert not r["finished"], r
    assert r["running"]["elapsed"] >= 0.3
    assert "get_execution" in r["why"]
    busy = mcp.call("execute", code="1")
    assert busy.is_error
    assert r["execution_id"] in busy["error"]
    assert "get_execution" in busy["error"]
    assert "interrupt" in busy["error"]
    seen = r["next_since"]
    end = mcp.call("get_execution", execution_id=r["execution_id"], since=seen, wait=30)
    assert not end.is_error, end
    assert end["status"] == "ok", end
    assert end["finished"], end
    assert end["outputs"]
    assert all(o["start"] >= seen for o in end["outputs"])
    assert end["outputs"][-1]["text"] == "'done'\n"
    assert "tick 3" in "".join(o["text"] for o in end["outputs"])


def test_progress_carries_what_the_kernel_sees(mcp: McpServer) -> None:
    progress: list = []
    r = mcp.call("execute", code="import time\nprint('a', flush=True)\ntime.sleep(2.6)", progress=progress)
    assert r["status"] == "ok", r
    assert len(progress) >= 2, progress
    values = [p for p, _ in progress]
    assert values == sorted(values)
    assert values[0] > 0
    last = progress[-1][1]
    assert r["execution_id"] in last, progress
    assert "since output" in last, progress
    assert "at Cell In[" in last, progress
    assert "time.sleep(2.6)" in last, progress


def test_cancelling_execute_interrupts_the_cell(mcp: McpServer) -> None:
    mcp.cancel_once_running("execute", code=loop("cancelled"))
    kernel = mcp.call("list_kernels")["kernels"]
    execution_id = next(k["last_execution"] for k in kernel if k["kernel_id"] == "default")
    r = mcp.call("get_execution", execution_id=execution_id, wait=20)
    assert (r["status"], r["reason"]) == ("interrupted", "manual"), r
    assert "cancelled" in r["why"]
    assert r["outputs"][0]["text"] == "started\n"
    assert mcp.call("execute", code="3")["status"] == "ok"  # nothing orphaned on the kernel


def test_interrupt_tool_stops_a_running_cell(mcp: McpServer) -> None:
    r = mcp.call("execute", code=loop("interrupt tool"), wait=0.5)
    assert r["status"] == "running"
    status = mcp.call("status", kernel_id="default")["kernels"][0]
    assert status["busy"], status
    assert status["running_execution"] == r["execution_id"], status
    # The line comes from the kernel's cancel_status, refreshed about once a second.
    where = wait_until(lambda: mcp.call("status")["kernels"][0]["running"]["where"], timeout=10)
    assert where
    assert where.startswith("Cell In[")
    assert "time.sleep(0.01)" in where
    live = mcp.resource("cancelkernel://kernels/default/status")
    assert live["running_execution"] == r["execution_id"]
    stopped = mcp.call("interrupt", execution_id=r["execution_id"])
    assert stopped.is_error, stopped
    assert (stopped["status"], stopped["reason"]) == ("interrupted", "manual"), stopped
    assert "interrupt tool" in stopped["why"]
    again = mcp.call("interrupt", execution_id=r["execution_id"], wait=0)
    assert any("already finished" in note for note in again["notes"]), again
    idle = mcp.call("status", kernel_id="default")["kernels"][0]  # asked the kernel: nothing runs there now
    assert (idle["execution_state"], idle["kernel_executions"]) == ("idle", []), idle
    log = mcp.resource("cancelkernel://log")
    assert any(rec.get("action") == "interrupt" and rec.get("why") == "manual" for rec in log), log[-3:]


def test_an_image_output_is_mcp_image_content(mcp: McpServer) -> None:
    code = (
        f"from IPython.display import display\ndisplay({{'image/png': {PNG!r}, 'text/plain': 'a red dot'}}, raw=True)"
    )
    r = mcp.call("execute", code=code)
    assert r["status"] == "ok", r
    (item,) = r["outputs"]
    assert item["type"] == "image"
    assert "a red dot" in item["text"]
    assert item["content_index"] == 1
    block = r.content[item["content_index"]]
    assert block.type == "image"
    assert block.mime_type == "image/png"
    assert block.data == PNG
    assert PNG not in r.text  # the picture travels once, as an image block


def test_large_output_is_cut_and_the_rest_can_be_read(mcp: McpServer) -> None:
    r = mcp.call("execute", code="print('A' * 30000 + 'B' * 30000 + 'C' * 30000)")
    cut = r["truncated"]
    assert r["status"] == "ok", r
    assert cut, r
    assert "get_execution" in cut["note"], r
    shown = "".join(o["text"] for o in r["outputs"])
    assert shown.startswith("A")
    assert shown.rstrip().endswith("C")
    assert "B" not in shown
    assert len(shown) <= 20_000
    middle = mcp.call(
        "get_execution", execution_id=r["execution_id"], since=cut["omitted_from"], max_chars=60_000, wait=0
    )
    text = "".join(o["text"] for o in middle["outputs"])
    assert "B" * 30000 in text
    assert middle["outputs"][0]["start"] == cut["omitted_from"]


@pytest.mark.parametrize(
    ("tool", "arguments", "says"),
    [
        ("execute", {"code": 5}, "code must be a string"),
        ("execute", {"code": "1", "wall_budget": -1}, "wall_budget=-1 is not a duration"),
        ("execute", {"code": "1", "quiet_budget": "soon"}, "quiet_budget='soon' is not a duration"),
        ("execute", {"code": "1", "kernel_id": "nope"}, "no kernel 'nope'"),
        ("execute", {"code": "1", "wait": 10**6}, "wait"),
        ("execute", {"code": "1", "retry_of": "e999999"}, "no execution 'e999999'"),
        ("get_execution", {"execution_id": "e999999"}, "no execution 'e999999'"),
        ("get_execution", {"execution_id": 7}, "execution_id must be"),
        ("get_execution", {"execution_id": "(one that ran)", "since": -3}, "since must be a whole number"),
        ("interrupt", {"execution_id": "e999999"}, "no execution"),
        ("status", {"kernel_id": "nope"}, "no kernel 'nope'"),
        ("checkpoint", {"action": "explode"}, "action must be save, restore or list"),
        ("shutdown_kernel", {"kernel_id": "nope"}, "no kernel 'nope'"),
        ("start_kernel", {"exec_thread": "sideways"}, "exec_thread must be one of main, worker"),
        ("read_notebook", {"path": "missing.ipynb"}, "does not exist"),
    ],
)
def test_bad_arguments_are_refused_with_a_clear_message(mcp: McpServer, tool: str, arguments: dict, says: str) -> None:
    if arguments.get("execution_id") == "(one that ran)":
        arguments = {**arguments, "execution_id": mcp.call("execute", code="1")["execution_id"]}
    r = mcp.call_raw(tool, arguments)
    assert r.is_error, r
    assert says in r["error"], r
    assert json.loads(r.text) == r.data


def test_a_stock_kernel_works_degraded_and_says_so(mcp: McpServer) -> None:
    assert not mcp.call("execute", code="1").is_error  # the default kernel runs beside it
    started = mcp.call("start_kernel", kernel_name="python3")
    assert not started.is_error, started
    assert started["kernel"]["ours"] is False, started
    kernel_id = started["kernel_id"]
    try:
        r = mcp.call("execute", code=loop("stock"), kernel_id=kernel_id, wall_budget=0.5)
        assert r.is_error, r
        assert (r["status"], r["reason"]) == ("interrupted", "wall_budget"), r
        assert any("not cancelkernel" in note and "no checkpoints" in note for note in r["notes"]), r["notes"]
        refused = mcp.call("checkpoint", action="save", kernel_id=kernel_id)
        assert refused.is_error
        assert "no checkpoint interface" in refused["error"]
        assert {k["kernel_id"] for k in mcp.call("list_kernels")["kernels"]} >= {"default", kernel_id}
    finally:
        down = mcp.call("shutdown_kernel", kernel_id=kernel_id)
    assert not down.is_error
    assert kernel_id not in {k["kernel_id"] for k in mcp.call("list_kernels")["kernels"]}
    assert wait_until(lambda: process_exited(started["kernel"]["pid"], 0.1))


def test_restart_restores_the_latest_checkpoint_or_starts_fresh(mcp: McpServer) -> None:
    mcp.call("execute", code="before_restart = 7")
    assert not mcp.call("checkpoint", action="save", name="for-restart").is_error
    back = mcp.call("restart")
    assert not back.is_error, back
    assert back["state"] == "restored", back
    assert "before_restart" in back["restored"]["names"], back
    assert mcp.call("execute", code="before_restart")["outputs"][0]["text"] == "7\n"
    fresh = mcp.call("restart", restore=False)
    assert not fresh.is_error, fresh
    assert fresh["state"] == "lost", fresh
    assert fresh["kernel"]["kernel_id"] == "default", fresh
    gone_now = mcp.call("execute", code="before_restart")
    assert gone_now["status"] == "error"
    assert gone_now["error_name"] == "NameError"


def test_notebook_tools_read_run_a_cell_and_run_the_whole(mcp: McpServer, tmp_path) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# title"),
        nbformat.v4.new_code_cell("y = 6 * 7"),
        nbformat.v4.new_code_cell("print(y)"),
    ]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, str(path))
    read = mcp.call("read_notebook", path=str(path))
    assert [c["cell_type"] for c in read["cells"]] == ["markdown", "code", "code"], read
    assert not mcp.call("run_cell", path=str(path), index=1).is_error
    ran = mcp.call("run_cell", path=str(path), index=2)
    assert not ran.is_error, ran
    assert ran["cell"]["outputs"][0]["text"] == "42\n", ran
    assert nbformat.read(str(path), as_version=4).cells[2].outputs[0]["text"] == "42\n"  # written back into the file
    bad = mcp.call("run_cell", path=str(path), index=0)
    assert bad.is_error
    assert "not a code cell" in bad["error"]
    whole = mcp.call("run_notebook", path=str(path), output_path=str(tmp_path / "out.ipynb"))
    assert not whole.is_error, whole
    assert whole["status"] == "ok", whole
    assert [c["index"] for c in whole["cells"]] == [1, 2], whole
    assert nbformat.read(str(tmp_path / "out.ipynb"), as_version=4).cells[2].outputs[0]["text"] == "42\n"
    assert not [k for k in mcp.call("list_kernels")["kernels"] if k["kernel_id"].startswith("nb")]  # its kernel is gone
