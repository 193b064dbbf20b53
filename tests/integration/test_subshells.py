"""Cells in subshells (JEP 91) are tracked, stopped and reported like parent-shell cells, both exec modes.

A subshell runs its cells on a thread of its own, at the same time as the
parent shell's cell: each must be interruptible on its own (targeted), all
together (an empty interrupt, JupyterLab's button), or by subshell
(`subshell_id`), with their own budgets, stacks and reply metadata.
"""

from __future__ import annotations

import time

import pytest
from helpers import GRACE_ARGS, execute_replies, value_of

from cancelkernel import protocol
from cancelkernel.testing import (
    cancel_status,
    control_request,
    create_subshell,
    interrupt,
    send_execute,
    wait_reply,
    wait_running,
    wait_state,
)

pytestmark = pytest.mark.kernel_options(*GRACE_ARGS)


def send(kc, code: str, subshell_id: str | None = None, metadata: dict | None = None) -> str:
    return send_execute(kc, code, metadata=metadata, store_history=False, subshell_id=subshell_id)


def running(kc, *msg_ids: str, at: str | None = None) -> dict:
    """Wait until every one of msg_ids runs its own code (at line `at`, if given); the status then."""
    for msg_id in msg_ids:
        wait_running(kc, msg_id, at=at)
    return cancel_status(kc)


LOOP = "n_{name} = 0\nwhile True:\n    n_{name} += 1"
# Where a status sees a running LOOP: its back jump, on the `while` line, after the body ran (so n > 0).
IN_LOOP = "while True:"


def test_parent_and_subshell_cells_are_interrupted_one_by_one(kc) -> None:
    sub = create_subshell(kc)
    main = send(kc, LOOP.format(name="main"))
    other = send(kc, LOOP.format(name="sub"), sub)
    now = running(kc, main, other, at=IN_LOOP)  # both loops under way
    shells = {e["msg_id"]: e["subshell_id"] for e in now["executions"]}
    assert shells == {main: None, other: sub}
    assert interrupt(kc, main) == {"status": "ok", "interrupted": True, "execution": main, "executions": [main]}
    assert execute_replies(kc, [main])[main]["content"]["ename"] == "KeyboardInterrupt"
    assert [e["msg_id"] for e in cancel_status(kc)["executions"]] == [other]  # the subshell cell runs on
    n_main = int(value_of(kc, "n_main"))  # the parent shell is free again: its loop ran, then stopped
    assert n_main > 0
    hit = interrupt(kc, other)
    assert hit["interrupted"]
    assert hit["execution"] == other
    reply = execute_replies(kc, [other])[other]
    meta = reply["metadata"]["cancelkernel"]
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    assert meta["msg_id"] == other
    assert meta["reason"] == "request"
    assert meta["stopped_at"]
    assert meta["stack"]
    # The namespace is shared and kept: the subshell's loop counted, the parent's count is untouched by its interrupt.
    assert int(value_of(kc, "n_sub")) > 0
    assert int(value_of(kc, "n_main")) == n_main


def test_kernel_info_names_the_main_shells_state_and_every_running_cell(kc) -> None:
    sub = create_subshell(kc)
    other = send(kc, LOOP.format(name="only_sub"), sub)
    wait_running(kc, other)
    info = control_request(kc, "kernel_info_request")["content"]
    assert info["execution_state"] == "idle", info  # the JEP's field is the main shell's: free
    assert [(e["msg_id"], e["subshell_id"]) for e in info["cancelkernel"]["executions"]] == [(other, sub)]
    main = send(kc, LOOP.format(name="with_main"))
    wait_running(kc, main)
    info = control_request(kc, "kernel_info_request")["content"]
    assert info["execution_state"] == "busy", info
    assert [(e["msg_id"], e["subshell_id"]) for e in info["cancelkernel"]["executions"]] == [(main, None), (other, sub)]
    hit = interrupt(kc)
    assert hit["interrupted"]
    assert set(hit["executions"]) == {main, other}
    execute_replies(kc, [main, other])


def test_an_empty_interrupt_stops_every_shell(kc) -> None:
    sub = create_subshell(kc)
    main = send(kc, LOOP.format(name="a"))
    other = send(kc, "import time\ntime.sleep(100)", sub)  # a sleep in a subshell wakes cooperatively
    running(kc, main, other)
    hit = interrupt(kc)
    assert hit["interrupted"]
    assert set(hit["executions"]) == {main, other}
    got = execute_replies(kc, [main, other])
    assert {m: r["content"]["ename"] for m, r in got.items()} == {main: "KeyboardInterrupt", other: "KeyboardInterrupt"}
    assert cancel_status(kc)["executions"] == []


def test_subshell_id_limits_an_interrupt_and_an_unknown_one_is_an_error(kc) -> None:
    first, second = create_subshell(kc), create_subshell(kc)
    main = send(kc, LOOP.format(name="m"))
    a = send(kc, LOOP.format(name="s1"), first)
    b = send(kc, LOOP.format(name="s2"), second)
    running(kc, main, a, b)
    hit = control_request(kc, "interrupt_request", {"subshell_id": second})["content"]
    assert hit["executions"] == [b]
    assert execute_replies(kc, [b])[b]["content"]["ename"] == "KeyboardInterrupt"
    bad = control_request(kc, "interrupt_request", {"subshell_id": "no-such-subshell"})["content"]
    assert bad["status"] == "error"
    assert "no-such-subshell" in bad["evalue"]
    assert {e["msg_id"] for e in cancel_status(kc)["executions"]} == {main, a}  # nothing else was touched
    only_parent = control_request(kc, "interrupt_request", {"subshell_id": None})["content"]
    assert only_parent["executions"] == [main]
    interrupt(kc)
    execute_replies(kc, [main, a])


def test_a_subshell_cell_has_its_own_budget(kc) -> None:
    sub = create_subshell(kc)
    main = send(kc, "import time\ntime.sleep(2)\nmain_done = True")
    runaway = send(kc, "%%budget wall=0.5\nwhile True:\n    pass", sub)
    got = execute_replies(kc, [runaway, main])
    meta = got[runaway]["metadata"]["cancelkernel"]
    assert got[runaway]["content"]["ename"] == "KeyboardInterrupt"
    assert meta["reason"] == "wall_budget"
    assert meta["tripped"] == "wall_budget"
    assert got[main]["content"]["status"] == "ok"  # the parent's cell was not touched
    assert value_of(kc, "main_done") == "True"


def test_each_cell_sees_only_its_own_cancel_point(kc) -> None:
    sub = create_subshell(kc)
    code = "import cancelkernel\nwhile not cancelkernel.cancel_requested():\n    pass\nseen_{name} = True"
    main = send(kc, code.format(name="main"))
    other = send(kc, code.format(name="sub"), sub)
    running(kc, main, other, at="while not cancelkernel.cancel_requested():")
    control_request(kc, "interrupt_request", {"target": main})
    execute_replies(kc, [main])
    time.sleep(0.3)  # a bound on a check that nothing happens: the subshell's loop must not end
    # The subshell's loop did not see main's cancel
    assert [e["msg_id"] for e in cancel_status(kc)["executions"]] == [other]
    interrupt(kc, other)
    execute_replies(kc, [other])


def test_a_subshell_cell_blocked_in_c_is_reported_unresponsive(kc) -> None:
    sub = create_subshell(kc)
    assert execute_ok(kc, "import os\npr, pw = os.pipe()")
    # A read of an empty pipe blocks in C (Event.wait would not: it is cooperative in a subshell) until the test writes.
    blocked = send(kc, "os.read(pr, 1)", sub)
    running(kc, blocked, at="os.read(pr, 1)")
    assert interrupt(kc, blocked)["interrupted"]
    wait_state(kc, blocked, protocol.STATE_UNRESPONSIVE)  # past the grace
    states = {e["msg_id"]: e["state"] for e in cancel_status(kc)["executions"]}
    assert states == {blocked: protocol.STATE_UNRESPONSIVE}, states
    assert cancel_status(kc)["abandoned_threads"] == []  # a subshell thread is never abandoned
    write = send(kc, "os.write(pw, b'x')")  # from the parent shell: the read returns; the interrupt then lands
    got = execute_replies(kc, [write, blocked])
    assert got[write]["content"]["status"] == "ok", got[write]["content"]
    reply = got[blocked]
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    assert reply["metadata"]["cancelkernel"]["unresponsive"] is True


def test_an_interrupt_for_a_subshell_being_deleted_does_not_hang(kc) -> None:
    sub = create_subshell(kc)
    cell = send(kc, "import time\ntime.sleep(30)", sub)
    running(kc, cell)
    delete = kc.session.msg("delete_subshell_request", {"subshell_id": sub})
    kc.control_channel.send(delete)
    reply = control_request(kc, "interrupt_request", {"subshell_id": sub}, timeout=10)["content"]
    assert reply["status"] in ("ok", "error"), reply  # the subshell is there, or already gone: either way, answered
    assert execute_replies(kc, [cell], timeout=15)[cell]["content"]["status"] == "error"  # stopped, not left running
    assert execute_ok(kc, "after_delete = 1")


def execute_ok(kc, code: str) -> bool:
    return bool(wait_reply(kc, kc.execute(code))["content"]["status"] == "ok")
