"""Everything stock ipykernel does keeps working, in both execution modes.

Completion, inspection, history, %magics (%time, %timeit, !cmd, %%capture),
display() and rich output, input() answered over stdin, top-level await,
comms, output attributed to the cell that printed it, thread-affine state
(sqlite3 connections, threading.local) surviving between cells, and the
kernel_info_reply advertising the extension.  One kernel per mode serves the
whole module (with a private IPYTHONDIR, so its history is its own).
"""

from __future__ import annotations

import os
import queue
import time

import pytest
from helpers import kernel_pid, value_of

from cancelkernel import protocol
from cancelkernel.testing import (
    REPLY_TIMEOUT,
    FileFlag,
    control_request,
    execute,
    interrupt,
    outputs,
    running_kernel,
    wait_idle,
    wait_reply,
    wait_running,
)

# One kernel per mode for the module's tests (the `kernel` and `kc` fixtures), with its own history.
pytestmark = pytest.mark.kernel_options(shared=True, own_ipython_dir=True)


def run(kc, code: str, **kwargs) -> tuple[dict, list[dict]]:
    """Execute code; return (execute_reply, iopub messages of the request), asserting status ok."""
    msg_id = kc.execute(code, **kwargs)
    reply = wait_reply(kc, msg_id)
    msgs = outputs(kc, msg_id)
    assert reply["content"]["status"] == "ok", reply["content"]
    return reply, msgs


def stdout_of(msgs: list[dict]) -> str:
    return "".join(m["content"]["text"] for m in msgs if m["msg_type"] == "stream" and m["content"]["name"] == "stdout")


def shell_reply(kc, msg_id: str) -> dict:
    return wait_reply(kc, msg_id)


# -- kernel_info --------------------------------------------------------------------------


def test_kernel_info_advertises_the_extension(mode, kc) -> None:
    reply = shell_reply(kc, kc.kernel_info())
    content = reply["content"]
    assert content["status"] == "ok"
    assert content["language_info"]["name"] == "python"
    assert "cancelkernel" in content["supported_features"]
    ours = content["cancelkernel"]
    assert ours["exec_thread"] == mode
    assert isinstance(ours["version"], str)
    assert ours["version"]
    if mode == "worker":
        # The debugger needs user code on the main thread: not advertised in worker mode.
        assert "debugger" not in content["supported_features"]


def test_kernel_info_says_whether_a_cell_runs(kc) -> None:
    """A client that connects to a running kernel learns from kernel_info (on control) that a cell runs, and which."""
    idle = shell_reply(kc, kc.kernel_info())["content"]
    assert idle[protocol.KERNEL_EXECUTION_STATE] == "idle"
    assert idle["cancelkernel"]["executions"] == []
    cell = kc.execute("import time  # kernel_info\nwhile True:\n    time.sleep(0.01)")
    wait_running(kc, cell)
    busy = control_request(kc, "kernel_info_request")["content"]
    assert busy["execution_state"] == "busy", busy
    (running,) = busy["cancelkernel"]["executions"]
    assert running["msg_id"] == cell
    assert running["subshell_id"] is None
    assert running["state"] == "running"
    assert running["elapsed"] > 0
    assert interrupt(kc, cell)["interrupted"]
    assert wait_reply(kc, cell)["content"]["ename"] == "KeyboardInterrupt"
    # The main shell is busy until it publishes its idle status, which follows the reply (as on stock).
    wait_idle(kc, cell)
    after = control_request(kc, "kernel_info_request")["content"]
    assert after["execution_state"] == "idle"
    assert after["cancelkernel"]["executions"] == []


# -- completion, inspection, history ----------------------------------------------------------


def test_completion(kc) -> None:
    run(kc, "completion_target_variable = 1")
    for text, expected in (
        ("completion_target_v", "completion_target_variable"),
        ("import itertoo", "itertools"),
        ("zi", "zip"),
    ):
        reply = shell_reply(kc, kc.complete(text))
        assert reply["content"]["status"] == "ok"
        assert expected in reply["content"]["matches"], (text, reply["content"]["matches"])


def test_inspection(kc) -> None:
    run(kc, "def documented():\n    'A docstring to find by inspection.'\n")
    reply = shell_reply(kc, kc.inspect("documented", cursor_pos=len("documented")))
    assert reply["content"]["status"] == "ok"
    assert reply["content"]["found"] is True
    assert "A docstring to find by inspection." in reply["content"]["data"]["text/plain"]


def test_history(kc) -> None:
    codes = [f"history_probe_{i} = {i}" for i in range(3)]
    for code in codes:
        run(kc, code)
    reply = shell_reply(kc, kc.history(hist_access_type="tail", n=3, raw=True, output=False))
    assert reply["content"]["status"] == "ok"
    assert [entry[2] for entry in reply["content"]["history"]] == codes
    tail = reply["content"]["history"]
    reply = shell_reply(kc, kc.history(hist_access_type="search", pattern="history_probe_1*", raw=True, output=False))
    assert any(entry[2] == codes[1] for entry in reply["content"]["history"])
    # "range" over the current session (IPython numbers it 0 in range replies, as stock does).
    first_line = tail[0][1]
    reply = shell_reply(
        kc,
        kc.history(hist_access_type="range", session=0, start=first_line, stop=first_line + 3, raw=True, output=False),
    )
    assert reply["content"]["status"] == "ok"
    assert [entry[2] for entry in reply["content"]["history"]] == codes


# -- magics ------------------------------------------------------------------------------------


def test_magics(kc) -> None:
    _, msgs = run(kc, "%time timed = sum(range(1000))")
    assert "Wall time" in stdout_of(msgs)
    assert value_of(kc, "timed") == str(sum(range(1000)))
    _, msgs = run(kc, "%timeit -n1 -r1 sum(range(100))")
    assert "per loop" in stdout_of(msgs)
    _, msgs = run(kc, "!echo shell-escape-works")
    assert "shell-escape-works" in stdout_of(msgs)
    _, msgs = run(kc, "%%capture captured\nprint('captured text')\n")
    assert "captured text" not in stdout_of(msgs)
    assert value_of(kc, "captured.stdout") == repr("captured text\n")


# -- display and rich output ------------------------------------------------------------------


def test_display_and_rich_output(kc) -> None:
    _, msgs = run(
        kc,
        "from IPython.display import HTML, display\n"
        "display(HTML('<b>shown</b>'))\n"
        "handle = display({'text/plain': 'v1'}, raw=True, display_id='upd')\n"
        "handle.update({'text/plain': 'v2'}, raw=True)\n"
        "HTML('<i>result</i>')",
    )
    displays = [m for m in msgs if m["msg_type"] == "display_data"]
    assert any(m["content"]["data"].get("text/html") == "<b>shown</b>" for m in displays), displays
    assert any(
        m["content"]["data"].get("text/plain") == "v1" and m["content"]["transient"]["display_id"] == "upd"
        for m in displays
    )
    updates = [m for m in msgs if m["msg_type"] == "update_display_data"]
    assert updates
    assert updates[0]["content"]["data"]["text/plain"] == "v2"
    results = [m for m in msgs if m["msg_type"] == "execute_result"]
    assert len(results) == 1
    assert results[0]["content"]["data"]["text/html"] == "<i>result</i>"


def test_a_budgeted_cell_says_its_budgets_as_it_begins_and_shows_nothing(kc) -> None:
    _, msgs = run(kc, "%%budget wall=30 quiet=20\nprint('in')")
    kinds = [m["msg_type"] for m in msgs]
    assert kinds.count("update_display_data") == 1, kinds
    started = msgs[kinds.index("update_display_data")]["content"]
    assert kinds.index("update_display_data") < kinds.index("stream"), kinds  # before the cell's code
    assert started["data"] == {}
    assert started["transient"]["display_id"].startswith(protocol.STARTED_DISPLAY_PREFIX)
    event = started["transient"][protocol.EVENT_MIME]
    assert (event["event"], event["wall_budget"], event["quiet_budget"], event["memory_budget"]) == (
        "started",
        30,
        20,
        None,
    )
    _, plain = run(kc, "print('plain')")
    assert "update_display_data" not in [m["msg_type"] for m in plain]  # no budget: nothing more per cell


# -- input over stdin ---------------------------------------------------------------------------


def test_input_answered_over_stdin(kc) -> None:
    msg_id = kc.execute("answer = input('your name? ')", allow_stdin=True)
    request = kc.stdin_channel.get_msg(timeout=REPLY_TIMEOUT)
    assert request["msg_type"] == "input_request"
    assert request["content"]["prompt"] == "your name? "
    assert request["parent_header"]["msg_id"] == msg_id
    kc.input("cancelkernel")
    assert wait_reply(kc, msg_id)["content"]["status"] == "ok"
    assert value_of(kc, "answer") == repr("cancelkernel")


def test_input_works_after_an_interrupted_input(kc) -> None:
    msg_id = kc.execute("first_answer = input('first? ')", allow_stdin=True, stop_on_error=False)
    assert kc.stdin_channel.get_msg(timeout=REPLY_TIMEOUT)["msg_type"] == "input_request"
    wait_running(kc, msg_id, at="first_answer = input('first? ')")
    assert interrupt(kc, msg_id)["interrupted"] is True
    reply = wait_reply(kc, msg_id)
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    msg_id = kc.execute("second_answer = input('second? ')", allow_stdin=True)
    request = kc.stdin_channel.get_msg(timeout=REPLY_TIMEOUT)
    assert request["content"]["prompt"] == "second? "
    kc.input("two")
    assert wait_reply(kc, msg_id)["content"]["status"] == "ok"
    assert value_of(kc, "second_answer") == repr("two")


# -- top-level await ----------------------------------------------------------------------------


def test_top_level_await(kc) -> None:
    _, msgs = run(kc, "import asyncio\nawaited = await asyncio.sleep(0.01, result=41)\nawaited + 1")
    results = [m for m in msgs if m["msg_type"] == "execute_result"]
    assert results
    assert results[0]["content"]["data"]["text/plain"] == "42"
    _, msgs = run(
        kc,
        "async def twice(x):\n    await asyncio.sleep(0)\n    return 2 * x\nawait asyncio.gather(twice(1), twice(2))",
    )
    assert [m["content"]["data"]["text/plain"] for m in msgs if m["msg_type"] == "execute_result"] == ["[2, 4]"]


def test_asyncio_task_started_by_a_cell_keeps_running_between_cells(kc) -> None:
    """As stock: a task a cell starts on the kernel's loop lives on while the kernel is idle.

    (Live dashboards, servers, tickers in notebooks rely on it.)
    """
    ticked = FileFlag("ticked")  # set by the task itself once it has ticked 6 times after the cell ended
    run(
        kc,
        "import asyncio\n"
        "ticks = []\n"
        "async def ticker():\n"
        "    while True:\n"
        "        ticks.append(1)\n"
        "        if len(ticks) == globals().get('ticks_wanted'):\n"
        f"            {ticked.set_code}\n"
        "        await asyncio.sleep(0.02)\n"
        "async def start():\n"
        "    return asyncio.ensure_future(ticker())\n"
        "ticker_task = await start()\n"
        "await asyncio.sleep(0.05)\n"
        "ticks_at_end_of_cell = len(ticks)\n"
        "ticks_wanted = ticks_at_end_of_cell + 6",
    )
    ticked.wait()  # idle: no cell runs, the task ticks on
    run(kc, "ticks_later = len(ticks)\nticker_task.cancel()")
    at_end, later = int(value_of(kc, "ticks_at_end_of_cell")), int(value_of(kc, "ticks_later"))
    assert later > at_end + 5, f"the task did not run while the kernel was idle: {at_end} ticks, then {later}"


@pytest.mark.kernel_options
def test_asyncio_task_created_in_a_plain_statement(kernel) -> None:
    """As stock: a plain statement of a cell may create a task on the kernel's loop.

    A fresh kernel (the marker's defaults): the first await cell on an exec thread is the case that matters.
    """
    _km, kc = kernel
    reply = execute(
        kc,
        "import asyncio\n"
        "async def plain_job():\n"
        "    await asyncio.sleep(0)\n"
        "    return 'job done'\n"
        "plain_task = asyncio.ensure_future(plain_job())\n"
        "await asyncio.sleep(0.05)\n"
        "plain_result = plain_task.result()",
    )
    assert reply["content"]["status"] == "ok", (reply["content"].get("ename"), reply["content"].get("evalue"))
    assert value_of(kc, "plain_result") == repr("job done")
    # And in a plain (no await) cell, as stock, where the kernel's loop is running.
    reply = execute(kc, "sync_task = asyncio.ensure_future(plain_job())")
    assert reply["content"]["status"] == "ok", (reply["content"].get("ename"), reply["content"].get("evalue"))


# -- comms ----------------------------------------------------------------------------------------


def test_comms(kc) -> None:
    _, msgs = run(
        kc,
        "from comm import create_comm\n"
        "test_comm = create_comm(target_name='cancelkernel-test', data={'hello': 1})\n"
        "test_comm.on_msg(lambda msg: test_comm.send({'echo': msg['content']['data']}))\n",
    )
    opens = [m for m in msgs if m["msg_type"] == "comm_open"]
    assert len(opens) == 1, msgs
    comm_id = opens[0]["content"]["comm_id"]
    assert opens[0]["content"]["target_name"] == "cancelkernel-test"
    assert opens[0]["content"]["data"] == {"hello": 1}

    info = shell_reply(kc, kc.comm_info(target_name="cancelkernel-test"))
    assert info["content"]["status"] == "ok"
    assert comm_id in info["content"]["comms"], info["content"]

    # A message from the frontend reaches the kernel's handler, whose answer comes back on iopub.
    msg = kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {"ping": 7}})
    kc.shell_channel.send(msg)
    deadline = time.monotonic() + REPLY_TIMEOUT
    echoed = None
    while time.monotonic() < deadline and echoed is None:
        try:
            got = kc.iopub_channel.get_msg(timeout=1)
        except queue.Empty:
            continue
        if got["msg_type"] == "comm_msg" and got["content"]["comm_id"] == comm_id:
            echoed = got
    assert echoed is not None, "the kernel's comm handler never answered"
    assert echoed["content"]["data"] == {"echo": {"ping": 7}}
    assert echoed["parent_header"]["msg_id"] == msg["header"]["msg_id"]


# -- output attribution ------------------------------------------------------------------------------


def test_output_is_attributed_to_the_cell_that_printed_it(kc) -> None:
    """Two cells back to back (the second queued while the first runs): each output has its cell as parent."""
    first = kc.execute(
        "import sys, time\nprint('first-a')\ntime.sleep(0.3)\nprint('first-b')\nprint('first-err', file=sys.stderr)"
    )
    second = kc.execute("print('second-a')\nfrom IPython.display import display\ndisplay('second-display')")
    for msg_id in (first, second):
        assert wait_reply(kc, msg_id)["content"]["status"] == "ok"
    texts: dict[str, str] = {}
    deadline = time.monotonic() + REPLY_TIMEOUT
    idle = set()
    while idle != {first, second} and time.monotonic() < deadline:
        try:
            msg = kc.iopub_channel.get_msg(timeout=1)
        except queue.Empty:
            continue
        parent = msg["parent_header"].get("msg_id")
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle" and parent in (first, second):
            idle.add(parent)
        elif msg["msg_type"] == "stream":
            for line in msg["content"]["text"].splitlines():
                texts[line] = parent
        elif msg["msg_type"] == "display_data":
            texts[msg["content"]["data"]["text/plain"]] = parent
    assert texts.get("first-a") == first, texts
    assert texts.get("first-b") == first, texts
    assert texts.get("first-err") == first, texts
    assert texts.get("second-a") == second, texts
    assert texts.get("'second-display'") == second, texts


# -- thread-affine state ---------------------------------------------------------------------------------


def test_thread_affine_state_survives_between_cells(kc) -> None:
    """sqlite3 connections (same-thread check) and threading.local live on: one persistent exec thread."""
    run(
        kc,
        "import sqlite3, threading\n"
        "con = sqlite3.connect(':memory:')\n"
        "con.execute('create table t (x)')\n"
        "tl = threading.local()\n"
        "tl.value = 41\n"
        "exec_thread = threading.get_ident()",
    )
    run(
        kc,
        "con.execute('insert into t values (1)')\nrows = con.execute('select count(*) from t').fetchone()[0]\n"
        "local_value = tl.value + 1",
    )
    assert value_of(kc, "rows") == "1"
    assert value_of(kc, "local_value") == "42"
    # An interrupted (Python-level) cell does not cost the exec thread either.
    msg_id = kc.execute("while True: pass", stop_on_error=False)
    wait_running(kc, msg_id, at="while True: pass")
    assert interrupt(kc, msg_id)["interrupted"] is True
    assert wait_reply(kc, msg_id)["content"]["ename"] == "KeyboardInterrupt"
    run(
        kc,
        "con.execute('insert into t values (2)')\nrows = con.execute('select count(*) from t').fetchone()[0]\n"
        "same_thread = threading.get_ident() == exec_thread\nlocal_value = tl.value",
    )
    assert value_of(kc, "rows") == "2"
    assert value_of(kc, "same_thread") == "True"
    assert value_of(kc, "local_value") == "41"


def _oom_score_adj(pid: int) -> int:
    with open(f"/proc/{pid}/oom_score_adj") as f:
        return int(f.read())


@pytest.mark.parametrize(("option", "expected"), [(None, 500), ("0", None), ("900", 900)])
def test_the_kernel_offers_itself_first_to_the_oom_killer(option: str | None, expected: int | None) -> None:
    """Raised at start (never lowered), so memory running out takes the kernel, not whoever started it."""
    inherited = _oom_score_adj(os.getpid())
    args = [] if option is None else [f"--CancelKernel.oom_score_adj={option}"]
    with running_kernel("main", extra_arguments=args) as (km, _kc):
        pid = kernel_pid(km)
        assert _oom_score_adj(pid) == (inherited if expected is None else max(expected, inherited))
