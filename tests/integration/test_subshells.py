"""Cells in subshells (JEP 91) are tracked, stopped and reported like parent-shell cells, both exec modes.

A subshell runs its cells on a thread of its own, at the same time as the
parent shell's cell: each must be interruptible on its own (targeted), all
together (an empty interrupt, JupyterLab's button), or by subshell
(`subshell_id`), with their own budgets, stacks and reply metadata.
"""

from __future__ import annotations

import time

import pytest

from cancelkernel.testing import MODES, REPLY_TIMEOUT, control_request, create_subshell, interrupt, running_kernel, send_execute, wait_reply, wait_running

GRACE = ["--CancelKernel.interrupt_grace=0.5"]


def send(kc, code: str, subshell_id: str | None = None, metadata: dict | None = None) -> str:
    return send_execute(kc, code, metadata=metadata, store_history=False, subshell_id=subshell_id)


def replies(kc, msg_ids: list[str], timeout: float = 30.0) -> dict[str, dict]:
    """The execute_replies of several requests (they may come in any order)."""
    wanted, found = set(msg_ids), {}
    deadline = time.monotonic() + timeout
    while wanted - set(found):
        left = deadline - time.monotonic()
        assert left > 0, f"no reply for {wanted - set(found)}"
        msg = kc.get_shell_msg(timeout=left)
        parent = msg["parent_header"].get("msg_id")
        if parent in wanted and msg["msg_type"] == "execute_reply":
            found[parent] = msg
    return found


def status(kc) -> dict:
    return control_request(kc, "cancel_status_request")["content"]


def running(kc, *msg_ids: str, at: str | None = None) -> dict:
    """Wait until every one of msg_ids runs its own code (at line `at`, if given); the status then."""
    for msg_id in msg_ids:
        wait_running(kc, msg_id, at=at)
    return status(kc)


def value(kc, expression: str) -> str:
    msg_id = kc.execute("", user_expressions={"v": expression})
    return str(wait_reply(kc, msg_id)["content"]["user_expressions"]["v"]["data"]["text/plain"])


LOOP = "n_{name} = 0\nwhile True:\n    n_{name} += 1"
# Where a status sees a running LOOP: its back jump, on the `while` line, after the body ran (so n > 0).
IN_LOOP = "while True:"


@pytest.fixture(params=MODES)
def kc(request):
    with running_kernel(request.param, extra_arguments=GRACE) as (_, client):
        yield client


def test_parent_and_subshell_cells_are_interrupted_one_by_one(kc) -> None:
    sub = create_subshell(kc)
    main = send(kc, LOOP.format(name="main"))
    other = send(kc, LOOP.format(name="sub"), sub)
    now = running(kc, main, other, at=IN_LOOP)  # both loops under way
    shells = {e["msg_id"]: e["subshell_id"] for e in now["executions"]}
    assert shells == {main: None, other: sub}
    assert interrupt(kc, main) == {"status": "ok", "interrupted": True, "execution": main, "executions": [main]}
    assert replies(kc, [main])[main]["content"]["ename"] == "KeyboardInterrupt"
    assert [e["msg_id"] for e in status(kc)["executions"]] == [other]  # the subshell cell runs on
    n_main = int(value(kc, "n_main"))  # the parent shell is free again: its loop ran, then stopped
    assert n_main > 0
    hit = interrupt(kc, other)
    assert hit["interrupted"] and hit["execution"] == other
    reply = replies(kc, [other])[other]
    meta = reply["metadata"]["cancelkernel"]
    assert reply["content"]["ename"] == "KeyboardInterrupt" and meta["msg_id"] == other and meta["reason"] == "request"
    assert meta["stopped_at"] and meta["stack"]
    # The namespace is shared and kept: the subshell's loop counted, the parent's count is untouched by its interrupt.
    assert int(value(kc, "n_sub")) > 0 and int(value(kc, "n_main")) == n_main


def test_an_empty_interrupt_stops_every_shell(kc) -> None:
    sub = create_subshell(kc)
    main = send(kc, LOOP.format(name="a"))
    other = send(kc, "import time\ntime.sleep(100)", sub)  # a sleep in a subshell wakes cooperatively
    running(kc, main, other)
    hit = interrupt(kc)
    assert hit["interrupted"] and set(hit["executions"]) == {main, other}
    got = replies(kc, [main, other])
    assert {m: r["content"]["ename"] for m, r in got.items()} == {main: "KeyboardInterrupt", other: "KeyboardInterrupt"}
    assert status(kc)["executions"] == []


def test_subshell_id_limits_an_interrupt_and_an_unknown_one_is_an_error(kc) -> None:
    first, second = create_subshell(kc), create_subshell(kc)
    main = send(kc, LOOP.format(name="m"))
    a = send(kc, LOOP.format(name="s1"), first)
    b = send(kc, LOOP.format(name="s2"), second)
    running(kc, main, a, b)
    hit = control_request(kc, "interrupt_request", {"subshell_id": second})["content"]
    assert hit["executions"] == [b]
    assert replies(kc, [b])[b]["content"]["ename"] == "KeyboardInterrupt"
    bad = control_request(kc, "interrupt_request", {"subshell_id": "no-such-subshell"})["content"]
    assert bad["status"] == "error" and "no-such-subshell" in bad["evalue"]
    assert {e["msg_id"] for e in status(kc)["executions"]} == {main, a}  # nothing else was touched
    only_parent = control_request(kc, "interrupt_request", {"subshell_id": None})["content"]
    assert only_parent["executions"] == [main]
    interrupt(kc)
    replies(kc, [main, a])


def test_a_subshell_cell_has_its_own_budget(kc) -> None:
    sub = create_subshell(kc)
    main = send(kc, "import time\ntime.sleep(2)\nmain_done = True")
    runaway = send(kc, "%%budget wall=0.5\nwhile True:\n    pass", sub)
    got = replies(kc, [runaway, main])
    meta = got[runaway]["metadata"]["cancelkernel"]
    assert got[runaway]["content"]["ename"] == "KeyboardInterrupt" and meta["reason"] == "wall_budget" and meta["tripped"] == "wall_budget"
    assert got[main]["content"]["status"] == "ok"  # the parent's cell was not touched
    assert value(kc, "main_done") == "True"


def test_each_cell_sees_only_its_own_cancel_point(kc) -> None:
    sub = create_subshell(kc)
    code = "import cancelkernel\nwhile not cancelkernel.cancel_requested():\n    pass\nseen_{name} = True"
    main = send(kc, code.format(name="main"))
    other = send(kc, code.format(name="sub"), sub)
    running(kc, main, other, at="while not cancelkernel.cancel_requested():")
    control_request(kc, "interrupt_request", {"target": main})
    replies(kc, [main])
    time.sleep(0.3)  # a bound on a check that nothing happens: the subshell's loop must not end
    assert [e["msg_id"] for e in status(kc)["executions"]] == [other]  # the subshell's loop did not see main's cancel
    interrupt(kc, other)
    replies(kc, [other])


def test_a_subshell_cell_blocked_in_c_is_reported_unresponsive(kc) -> None:
    sub = create_subshell(kc)
    assert execute_ok(kc, "import os\npr, pw = os.pipe()")
    # A read of an empty pipe blocks in C (Event.wait would not: it is cooperative in a subshell) until the test writes.
    blocked = send(kc, "os.read(pr, 1)", sub)
    running(kc, blocked, at="os.read(pr, 1)")
    assert interrupt(kc, blocked)["interrupted"]
    deadline = time.monotonic() + REPLY_TIMEOUT  # the grace is 0.5 s; only a hang guard
    while (states := {e["msg_id"]: e["state"] for e in status(kc)["executions"]}) != {blocked: "unresponsive-to-interrupt"}:
        assert time.monotonic() < deadline and blocked in states, states
        time.sleep(0.05)
    assert status(kc)["abandoned_threads"] == []  # a subshell thread is never abandoned
    write = send(kc, "os.write(pw, b'x')")  # from the parent shell: the read returns; the interrupt then lands
    got = replies(kc, [write, blocked])
    assert got[write]["content"]["status"] == "ok", got[write]["content"]
    reply = got[blocked]
    assert reply["content"]["ename"] == "KeyboardInterrupt" and reply["metadata"]["cancelkernel"]["unresponsive"] is True


def test_an_interrupt_for_a_subshell_being_deleted_does_not_hang(kc) -> None:
    sub = create_subshell(kc)
    cell = send(kc, "import time\ntime.sleep(30)", sub)
    running(kc, cell)
    delete = kc.session.msg("delete_subshell_request", {"subshell_id": sub})
    kc.control_channel.send(delete)
    reply = control_request(kc, "interrupt_request", {"subshell_id": sub}, timeout=10)["content"]
    assert reply["status"] in ("ok", "error"), reply  # the subshell is there, or already gone: either way, answered
    assert replies(kc, [cell], timeout=15)[cell]["content"]["status"] == "error"  # stopped, not left running
    assert execute_ok(kc, "after_delete = 1")


def execute_ok(kc, code: str) -> bool:
    return bool(wait_reply(kc, kc.execute(code))["content"]["status"] == "ok")
