"""The watchdog through real kernels: budgets, events, stacks, status, dumps, deadlines."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from helpers import GRACE, GRACE_ARGS, WARN_ARGS

from cancelkernel import protocol
from cancelkernel.testing import (
    cancel_status,
    control_request,
    interrupt,
    run_cell,
    running_kernel,
    wait_dumped_in_cell,
    wait_reply,
    wait_running,
    wait_state,
)

pytestmark = pytest.mark.kernel_options(*GRACE_ARGS)


run = run_cell


def events(found: list[dict]) -> list[dict]:
    """The machine events of the notes in `found` (they ride in `transient`, never in the rendered data)."""
    notes = [m["content"] for m in found if m["msg_type"] == "display_data"]
    assert not [n for n in notes if protocol.EVENT_MIME in n["data"]], (
        "an event in a note's data would be rendered and saved"
    )
    return [n["transient"][protocol.EVENT_MIME] for n in notes if protocol.EVENT_MIME in n.get("transient", {})]


def test_quiet_budget_trips_a_silent_loop(kc):
    reply, found = run(kc, "%%budget quiet=0.5\nx = 0\nwhile True:\n    x += 1")
    meta = reply["metadata"][protocol.KEY]
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    assert meta["interrupted"]
    assert meta["reason"] == "quiet_budget"
    assert meta["tripped"] == "quiet_budget"
    assert meta["interrupts_sent"] == 1
    runaway = [e for e in events(found) if e["event"] == "runaway"]
    assert len(runaway) == 1
    assert runaway[0]["reason"] == "quiet_budget"
    assert runaway[0]["action"] == "interrupt"
    assert any(f["line"] in ("x += 1", "while True:") for f in runaway[0]["stack"])  # it names the loop
    # The note reads as one line of text for humans.
    texts = [m["content"]["data"]["text/plain"] for m in found if m["msg_type"] == "display_data"]
    assert any(t.startswith("cancelkernel: ") and "quiet budget of 0.5 s" in t and "\n" not in t for t in texts)


def test_quiet_budget_spares_a_chatty_cell(kc):
    reply, found = run(
        kc,
        "%%budget quiet=0.5\nimport time\nfor i in range(12):\n    print(i, flush=True)\n    time.sleep(0.15)\n'done'",
    )
    assert reply["content"]["status"] == "ok"
    assert not reply["metadata"][protocol.KEY]["interrupted"]
    assert not [e for e in events(found) if e["event"] == "runaway"]


@pytest.mark.parametrize(
    "write",
    [
        "print(i)",  # stdout, sent every 0.2 s: the watchdog sees it buffered
        "print(i, file=sys.stderr, flush=i % 500 == 0)",  # stderr, sent again and again between its looks
    ],
)
def test_quiet_budget_spares_a_cell_that_writes_without_pause(kc, write):
    # Four quiet budgets of output with no pause: every tick must see it.
    code = (
        "%%budget quiet=0.5\nimport sys, time\ni, end = 0, time.monotonic() + 2\n"
        f"while time.monotonic() < end:\n    {write}\n    i += 1\n'done'"
    )
    reply, found = run(kc, code)
    assert reply["content"]["status"] == "ok", reply["content"]
    assert not reply["metadata"][protocol.KEY]["interrupted"]
    assert not [e for e in events(found) if e["event"] == "runaway"]


def test_display_output_feeds_the_quiet_clock(kc):
    reply, found = run(
        kc, "%%budget quiet=0.6\nimport time\nfor i in range(15):\n    display(i)\n    time.sleep(0.1)\n'done'"
    )
    assert reply["content"]["status"] == "ok", reply["content"]
    assert not reply["metadata"][protocol.KEY]["interrupted"]
    assert len([m for m in found if m["msg_type"] == "display_data"]) == 15


def test_quiet_budget_trips_a_cell_that_stops_writing(kc):
    code = "%%budget quiet=0.5\nfor i in range(20000):\n    print(i)\nx = 0\nwhile True:\n    x += 1"
    reply, found = run(kc, code)
    meta = reply["metadata"][protocol.KEY]
    assert meta["interrupted"]
    assert meta["reason"] == "quiet_budget"
    assert meta["stopped_at"].endswith((":5", ":6"))  # in the silent loop
    printed = "".join(
        m["content"]["text"] for m in found if m["msg_type"] == "stream" and m["content"]["name"] == "stdout"
    )
    assert printed.endswith("19999\n")


def test_wall_budget_from_metadata(kc):
    reply, _found = run(
        kc, "import time\nprint('started', flush=True)\ntime.sleep(30)", metadata={"cancelkernel": {"wall_budget": 0.6}}
    )
    meta = reply["metadata"][protocol.KEY]
    assert meta["interrupted"]
    assert meta["reason"] == "wall_budget"
    assert meta["stopped_at"]
    assert meta["stopped_at"].endswith(":3")
    assert meta["budgets"]["wall_budget"] == 0.6
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    # the state survives and the next cell runs
    assert run(kc, "print('next')")[0]["content"]["status"] == "ok"


def test_warn_only_does_not_interrupt():
    with running_kernel("main", extra_arguments=WARN_ARGS) as (_, kc):
        reply, found = run(kc, "%%budget wall=0.3\nimport time\ntime.sleep(1.0)\n'finished'")
        assert reply["content"]["status"] == "ok"
        runaway = [e for e in events(found) if e["event"] == "runaway"]
        assert len(runaway) == 1
        assert runaway[0]["action"] == "warn"


@pytest.mark.parametrize(
    "directive",
    ["%%budget wall=-1", "%%budget quiet=soon", "%%budget wall", "%%timeout 0"],
)
def test_bad_budget_is_refused_and_not_run(kc, directive):
    reply, found = run(kc, f"{directive}\nran = True")
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "BudgetError"
    assert "not run" in reply["content"]["evalue"]
    assert any(m["msg_type"] == "error" for m in found)
    assert run(kc, "print('ran' in dir())")[1][-1]["content"]["text"].strip() == "False"


def test_bad_budget_metadata_is_refused(kc):
    reply, _ = run(kc, "ran = True", metadata={"cancelkernel": {"quiet_budget": -2}})
    assert reply["content"]["ename"] == "BudgetError"


def test_status_answers_while_busy_and_reports_the_cell(kc):
    msg_id = kc.execute("%%budget wall=60\nwhile True:\n    pass", stop_on_error=False)
    seen = wait_running(kc, msg_id)
    status = cancel_status(kc, timeout=10)
    assert status["status"] == "ok"
    current = status["execution"]
    assert current["msg_id"] == msg_id
    assert current["state"] == "running"
    assert current["first_line"] == "%%budget wall=60"
    assert current["elapsed"] > seen["elapsed"] > 0, (seen, current)  # its clock runs
    assert current["wall_budget"] == 60
    assert current["interrupts_sent"] == 0
    assert current["where"].startswith("Cell In["), current
    assert current["line"] in ("while True:", "pass"), current
    interrupt(kc, msg_id)
    wait_reply(kc, msg_id)
    idle = cancel_status(kc)
    assert idle["execution"] is None


def test_swallowed_interrupt_is_reported_unresponsive_and_not_repeated():
    code = "import time\nwhile True:\n    try:\n        time.sleep(0.01)\n    except BaseException:\n        pass"
    with running_kernel("main", extra_arguments=GRACE_ARGS) as (km, kc):
        msg_id = kc.execute(code, stop_on_error=False)
        wait_running(kc, msg_id, at="time.sleep(0.01)")  # inside the try
        assert interrupt(kc, msg_id)["interrupted"] is True
        wait_state(kc, msg_id, protocol.STATE_UNRESPONSIVE)
        # A bound on a check that nothing happens: in five more grace periods the kernel must not interrupt again
        time.sleep(5 * GRACE)
        status = cancel_status(kc)
        assert status["execution"]["state"] == protocol.STATE_UNRESPONSIVE
        assert status["execution"]["interrupts_sent"] == 1
        assert status["last_stack"]["why"] == "unresponsive"
        assert any(f["line"].startswith("time.sleep") or f["line"] == "pass" for f in status["last_stack"]["frames"])
        found = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not [e for e in events(found) if e["event"] == "unresponsive"]:
            found.append(kc.get_iopub_msg(timeout=5))
        unresponsive = [e for e in events(found) if e["event"] == "unresponsive"]
        assert unresponsive
        assert unresponsive[0]["why"] == protocol.UNRESPONSIVE_CAUGHT
        assert "caught the interrupt" in unresponsive[0]["message"]
        assert "interrupt again" in unresponsive[0]["message"]
        assert km.is_alive()


def test_gil_holding_call_is_dumped_to_the_advertised_file():
    """One C call holding the GIL: the control channel is silent, faulthandler still dumps."""
    with running_kernel("main", extra_arguments=GRACE_ARGS) as (km, kc):
        info = control_request(kc, "kernel_info_request")["content"]
        assert protocol.FEATURE in info["supported_features"]
        dump_file = info[protocol.KEY]["dump_file"]
        assert dump_file
        assert os.path.exists(dump_file)
        assert os.stat(dump_file).st_mode & 0o077 == 0  # owner-only
        kc.execute("%%budget wall=0.3\nstate = 1\ntotal = sum(range(10**12))", stop_on_error=False)
        # Past the wall budget and the grace: faulthandler's own thread writes while the GIL is held.
        wait_dumped_in_cell(dump_file, 3, timeout=20)
        with open(dump_file) as f:
            text = f.read()
        assert "line 3 in <module>" in text, text
        with pytest.raises(TimeoutError):  # wedged: control cannot answer, heartbeat can
            cancel_status(kc, timeout=1.0)
        assert kc.is_alive()
        # SIGUSR1 also dumps on demand, from outside.
        before = os.path.getsize(dump_file)
        km.signal_kernel(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and os.path.getsize(dump_file) <= before:
            time.sleep(0.1)
        assert os.path.getsize(dump_file) > before


def test_unwritable_dump_dir_warns_and_everything_else_works(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with running_kernel("main", extra_arguments=[f"--CancelKernel.dump_dir={blocker}"]) as (_, kc):
        info = control_request(kc, "kernel_info_request")["content"]
        assert info[protocol.KEY]["dump_file"] is None
        reply, _ = run(kc, "%%budget wall=0.3\nimport time\ntime.sleep(10)")
        assert reply["metadata"][protocol.KEY]["reason"] == "wall_budget"


DEADLINE_CASES = {
    "python loop": (
        "from cancelkernel import fail_after\nwith fail_after(0.3):\n    while True:\n        pass",
        "DeadlineExceeded",
    ),
    "sleep": (
        "from cancelkernel import fail_after\nimport time\nwith fail_after(0.3):\n    time.sleep(10)",
        "DeadlineExceeded",
    ),
    "cooperative native sleep": (
        "from cancelkernel import fail_after, cancellable_sleep\nwith fail_after(0.3):\n    cancellable_sleep(10)",
        "DeadlineExceeded",
    ),
    "fail_at": (
        "from cancelkernel import fail_at\nimport time\nwith fail_at(time.monotonic() + 0.3):\n    time.sleep(10)",
        "DeadlineExceeded",
    ),
    "%%timeout": ("%%timeout 0.3\nimport time\ntime.sleep(10)", "DeadlineExceeded"),
    "outer fires first": (
        "from cancelkernel import fail_after, move_on_after\nimport time\n"
        "with fail_after(0.3):\n    with move_on_after(10):\n        time.sleep(10)",
        "DeadlineExceeded",
    ),
}


@pytest.mark.parametrize("case", list(DEADLINE_CASES))
def test_deadlines_fire(kc, case):
    code, ename = DEADLINE_CASES[case]
    reply, _found = run(kc, code)
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == ename
    evalue = reply["content"]["evalue"]
    if case == "fail_at":
        # An absolute deadline, computed a moment before the scope starts: under load it spans a little less than 0.3 s.
        assert "fail_at(" in evalue, evalue
        assert "expired after 0.2" in evalue or "expired after 0.3" in evalue, evalue
    else:
        assert "0.3" in evalue, evalue
        assert "expired" in evalue, evalue
    assert reply["metadata"][protocol.KEY]["reason"] == "deadline"
    assert run(kc, "after = 1")[0]["content"]["status"] == "ok"  # nothing fires later


def test_nested_inner_move_on_and_deadline_is_a_timeout_error(kc):
    code = (
        "from cancelkernel import fail_after, move_on_after, DeadlineExceeded\nimport time\n"
        "with fail_after(10):\n    with move_on_after(0.2) as inner:\n        time.sleep(10)\n"
        "try:\n    with fail_after(0.2):\n        time.sleep(10)\nexcept TimeoutError as e:\n    caught = str(e)\n"
        "time.sleep(0.5)\n"  # a later sleep must not be hit by anything left over
        "print(inner.cancel_called, inner.cancelled_caught, 'fail_after(0.2)' in caught)"
    )
    reply, found = run(kc, code)
    assert reply["content"]["status"] == "ok", reply["content"]
    assert [m["content"]["text"] for m in found if m["msg_type"] == "stream"] == ["True True True\n"]


def test_deadline_outside_the_kernel_says_what_to_do():
    from cancelkernel import fail_after

    with pytest.raises(RuntimeError, match="cancelkernel kernel"), fail_after(1):
        pass


def test_kernel_info_advertises_the_extension(kc):
    info = control_request(kc, "kernel_info_request")["content"]
    ours = info[protocol.KEY]
    assert ours["version"] == protocol.PROTOCOL_VERSION
    assert {"targeted_interrupt", "cancel_status", "budgets", "deadlines", "dump_file"} <= set(ours["features"])
    assert json.dumps(ours)  # plain JSON
