"""Memory runaways in real memory cgroups made by the test:
budgets, the guard below the limit, deaths named with evidence.

Each test makes its own cgroup (v2 where writable, else v1), moves only the
kernel it started into it, and removes it after (cancelkernel.testing.cgroups).
Where no cgroup can be made (not root), the tests fail saying why: CI runs as root.
"""

from __future__ import annotations

import json
import os
import queue
import time

import pytest
from helpers import AGENT_GRACE, kernel_pid, value_of

from cancelkernel import protocol
from cancelkernel.agent import AgentKernel
from cancelkernel.runtime.memory_guard import DATA_LIMIT_SLACK, derived_margin
from cancelkernel.testing import (
    MODES,
    cancel_status,
    create_subshell,
    interrupt,
    restart,
    running_kernel,
    send_execute,
    wait_reply,
    wait_running,
)
from cancelkernel.testing.cgroups import memory_cgroup

GiB, MiB = 2**30, 2**20
# A growth loop in steps of 10 MB, under a name the report must find.
GROW = "held = []\nwhile True:\n    held.append(bytearray(10 * 2**20))"


def run(kc, code: str, *, metadata: dict | None = None, subshell_id: str | None = None, timeout: float = 120.0) -> dict:
    return wait_reply(kc, send_execute(kc, code, metadata=metadata, subshell_id=subshell_id), timeout=timeout)


def notes_of(kc, msg_id: str) -> list[dict]:
    """The events our kernel published into the cell msg_id (its notes), from what iopub holds now."""
    found = []
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=0.5)
        except queue.Empty:  # nothing more
            return found
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "display_data":
            event = msg["content"].get("transient", {}).get(protocol.EVENT_MIME)
            if event:
                found.append(event)


@pytest.mark.parametrize("mode", MODES)
def test_a_cell_past_its_memory_budget_is_interrupted_and_told_what_holds_it(mode) -> None:
    with memory_cgroup(4 * GiB) as cgroup, running_kernel(mode) as (km, kc):
        cgroup.add(kernel_pid(km))
        assert run(kc, "keep = 'still here'")["content"]["status"] == "ok"
        reply = run(kc, "%%budget memory=200M\n" + GROW)
        meta = reply["metadata"][protocol.KEY]
        assert reply["content"]["status"] == "error", reply["content"]
        assert reply["content"]["ename"] == "KeyboardInterrupt", reply["content"]
        assert "memory budget of 200 MiB" in reply["content"]["evalue"]
        assert meta["reason"] == protocol.REASON_MEMORY_BUDGET
        assert meta["interrupts_sent"] == 1
        memory = meta["memory"]
        assert memory["kind"] == protocol.MEMORY_BUDGET
        assert memory["budget"] == 200 * MiB
        grown = memory["at_trip"] - memory["start"]
        # Stopped past the budget, by less than what the fastest growth adds between a sample and the interrupt.
        assert 200 * MiB < grown < 200 * MiB + derived_margin(4 * GiB), memory
        count = int(value_of(kc, "len(held)"))
        assert memory["holders"][0]["name"] == "held", memory
        assert memory["holders"][0]["type"] == f"list of {count} bytearray", memory
        assert abs(memory["holders"][0]["bytes"] - count * 10 * MiB) < MiB  # the estimate is the real size
        # `held` keeps it: not come back
        assert memory["after"] is not None
        assert memory["after"] >= 200 * MiB
        assert value_of(kc, "keep") == "'still here'"  # the kernel lives, the other variables are intact
        assert cgroup.oom_kills() == 0


@pytest.mark.parametrize("mode", MODES)
def test_memory_held_by_a_stopped_function_is_named_and_comes_back(mode) -> None:
    """A list grown in a function's local: the interrupt's traceback would keep it alive where no `del` reaches it."""
    with running_kernel(mode) as (_km, kc):
        grow = "def grow():\n    mine = []\n    while True:\n        mine.append(bytearray(10 * 2**20))"
        assert run(kc, grow)["content"]["status"] == "ok"
        msg_id = send_execute(kc, "%%budget memory=200M\ngrow()")
        reply = wait_reply(kc, msg_id, timeout=120.0)
        memory = reply["metadata"][protocol.KEY]["memory"]
        assert reply["content"]["ename"] == "KeyboardInterrupt", reply["content"]
        assert memory["kind"] == protocol.MEMORY_BUDGET, reply["content"]
        assert memory["released"], memory
        assert memory["released"][0]["name"] == "mine in grow()", memory
        # The budget counts the kernel's whole growth, so the list may hold a little less than 200 MiB at the
        # trip (199.2 MB once).
        assert memory["released"][0]["bytes"] > 100 * MiB, memory
        assert memory["released"][0]["type"].startswith("list of "), memory
        # It came back: the kernel is near where it began, not at the trip.
        assert memory["after"] - memory["start"] < (memory["at_trip"] - memory["start"]) / 2, memory
        after = [e for e in notes_of(kc, msg_id) if e["event"] == protocol.EVENT_MEMORY]
        assert len(after) == 1, after
        assert "mine in grow()" in after[0]["message"], after
        assert "came back" in after[0]["message"], after
        assert run(kc, "grow.__name__")["content"]["status"] == "ok"  # the kernel goes on


@pytest.mark.parametrize("mode", MODES)
def test_the_guard_stops_a_growth_loop_before_the_oom_killer(mode) -> None:
    with memory_cgroup(1 * GiB) as cgroup, running_kernel(mode) as (km, kc):
        cgroup.add(kernel_pid(km))
        assert run(kc, "keep = 42")["content"]["status"] == "ok"
        msg_id = send_execute(kc, GROW)
        reply = wait_reply(kc, msg_id, timeout=120)
        meta = reply["metadata"][protocol.KEY]
        assert reply["content"]["status"] == "error", reply["content"]
        assert meta["reason"] == protocol.REASON_MEMORY_BUDGET, reply["content"]
        memory = meta["memory"]
        assert memory["kind"] == protocol.MEMORY_GUARD
        assert memory["limit"] == GiB
        assert GiB - derived_margin(GiB) <= memory["at_trip"] < GiB, memory
        assert "neared its limit of 1 GiB" in reply["content"]["evalue"]
        events = notes_of(kc, msg_id)
        kinds = [e["event"] for e in events]
        assert kinds == [protocol.EVENT_RUNAWAY, protocol.EVENT_MEMORY], kinds
        assert "held (list of" in events[1]["message"]
        assert "del held" in events[1]["message"]
        assert value_of(kc, "keep") == "42"
        assert cgroup.oom_kills() == 0
        # Freed, the next cell has the memory again.
        assert run(kc, "del held\nok = bytearray(100 * 2**20)")["content"]["status"] == "ok"


def test_a_subshell_cell_has_its_own_memory_budget(kernel) -> None:
    """The parent shell's cell (no budget) runs on while the subshell's cell trips on its own budget."""
    km, kc = kernel
    with memory_cgroup(4 * GiB) as cgroup:
        cgroup.add(kernel_pid(km))
        sub = create_subshell(kc)
        parent = send_execute(kc, "import time\nwhile True:\n    time.sleep(0.01)")
        wait_running(kc, parent)
        reply = run(kc, GROW, metadata={protocol.KEY: {"memory_budget": "150M"}}, subshell_id=sub)
        meta = reply["metadata"][protocol.KEY]
        assert meta["reason"] == protocol.REASON_MEMORY_BUDGET
        assert meta["memory"]["kind"] == protocol.MEMORY_BUDGET
        assert meta["budgets"]["memory_budget"] == 150 * MiB
        running = [e["msg_id"] for e in cancel_status(kc)["executions"]]
        assert running == [parent]  # the parent's cell was not blamed
        assert interrupt(kc, parent)["interrupted"]
        assert wait_reply(kc, parent)["content"]["ename"] == "KeyboardInterrupt"


def test_a_death_is_named_with_evidence_and_the_next_kernel_says_so() -> None:
    """Guard off: a real OOM kill; the restarted kernel names it (cgroup count) in kernel_info and in its first cell."""
    with (
        memory_cgroup(1 * GiB) as cgroup,
        running_kernel("main", extra_arguments=["--CancelKernel.memory_guard=False"]) as (km, kc),
    ):
        cgroup.add(kernel_pid(km))
        send_execute(kc, GROW)
        deadline = time.monotonic() + 120
        while km.is_alive():
            assert time.monotonic() < deadline, "the kernel outlived a growth loop in a 1 GiB cgroup with the guard off"
            time.sleep(0.05)
        assert cgroup.oom_kills() >= 1
        restart(km, kc)
        info = wait_reply(kc, kc.kernel_info())["content"][protocol.KEY]
        previous = info["previous_kernel"]
        assert previous["cause"] == "oom", previous
        assert "cgroup rose" in previous["evidence"], previous
        assert "killed by the out-of-memory killer" in previous["message"]
        assert "line 3" in previous["message"]
        said = []
        msg_id = kc.execute("first = 1")
        wait_reply(kc, msg_id)
        while True:
            try:
                msg = kc.get_iopub_msg(timeout=1)
            except queue.Empty:
                break
            if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
                said.append(msg["content"]["text"])
        assert any("the previous kernel" in text and "out-of-memory killer" in text for text in said), said
        assert not os.path.exists(info["running_record"])  # read once: the kernel after this one will not say it again


@pytest.mark.parametrize("mode", MODES)
def test_one_allocation_past_the_limit_is_a_memory_error_not_a_kill(mode) -> None:
    """RLIMIT_DATA at the cgroup's limit (+ slack): the kernel lives, nothing is lost."""
    with memory_cgroup(1 * GiB) as cgroup, running_kernel(mode) as (km, kc):
        cgroup.add(kernel_pid(km))
        assert run(kc, "keep = 42")["content"]["status"] == "ok"  # the kernel learns its cgroup as a cell begins
        reply = run(kc, "big = bytearray(3 * 2**30)")
        assert reply["content"]["status"] == "error", reply["content"]
        assert reply["content"]["ename"] == "MemoryError", reply["content"]
        assert value_of(kc, "keep") == "42"
        assert cgroup.oom_kills() == 0
        assert GiB + DATA_LIMIT_SLACK <= cancel_status(kc)["memory"]["data_limit"] < 2 * GiB


@pytest.mark.parametrize("kernel_name", ["cancelkernel", "python3"])
def test_the_agent_reports_an_oom_death_with_its_cause_and_restores(kernel_name) -> None:
    """A single C call past the limit, no data limit (ours: turned off;
    stock has none): died, cause oom; ours restores."""
    ours = kernel_name == "cancelkernel"
    with memory_cgroup(1 * GiB) as cgroup:
        extra = ["--CancelKernel.memory_data_limit=False"] if ours else None
        ak = AgentKernel(kernel_name, checkpoint="before-risky" if ours else "off", spare=False, extra_arguments=extra)
        try:
            ak.start()
            assert ak.run("x = 42", risky=False).ok
            assert ak.pid is not None
            cgroup.add(ak.pid)
            r = ak.run("big = bytearray(3 * 2**30)", risky=True)
            assert r.status == "died", r.summary()
            assert r.cause == "oom", r.summary()
            assert "out-of-memory killer" in (r.reason_text or ""), r.reason_text
            assert "rose from" in (r.reason_text or ""), r.reason_text
            if ours:
                assert r.state == "restored", r.summary()
                assert "x" in r.restored, r.summary()
                assert ak.run("print(x)").text == "42\n"
            else:
                assert r.state == "lost"  # stock ipykernel keeps no checkpoint: its state is gone
        finally:
            ak.close()


def test_memory_status_names_the_limit_and_the_guard() -> None:
    with memory_cgroup(2 * GiB) as cgroup, running_kernel("main") as (km, kc):
        cgroup.add(kernel_pid(km))
        run(kc, "pass")  # the kernel learns its new cgroup when a cell begins
        memory = cancel_status(kc)["memory"]
        assert memory["source"] == f"cgroup v{cgroup.version}"
        assert memory["limit"] == 2 * GiB
        assert memory["guard_at"] == 2 * GiB - derived_margin(2 * GiB)
        assert json.loads(json.dumps(memory)) == memory  # plain JSON for any client


@pytest.mark.parametrize("mode", MODES)
def test_the_agent_treats_a_memory_trip_as_a_runaway(mode) -> None:
    """One interrupt (the kernel's), an answer that says what to free;
    a cell that swallows it is restarted, state restored."""
    name = "cancelkernel" if mode == "main" else "cancelkernel-worker"
    with (
        memory_cgroup(4 * GiB) as cgroup,
        AgentKernel(name, checkpoint="before-risky", spare=False, interrupt_grace=AGENT_GRACE) as ak,
    ):
        assert ak.pid is not None
        cgroup.add(ak.pid)
        assert ak.run("keep = 'kept'", risky=False).ok
        r = ak.run(GROW, memory_budget="150M")
        assert (r.status, r.reason, r.state) == ("interrupted", "memory_budget", "suspect"), r.summary()
        assert [a["via"] for a in r.actions] == ["kernel"]
        assert r.memory is not None
        assert r.memory["kind"] == "budget"
        assert "past its memory budget of 150 MiB" in (r.reason_text or ""), r.reason_text
        assert "`del held`" in (r.reason_text or ""), r.reason_text
        swallowed = (
            "held2 = []\ntry:\n    while True:\n        held2.append(bytearray(10 * 2**20))\n"
            "except KeyboardInterrupt:\n    pass\nwhile True:\n    pass"
        )
        r = ak.run(swallowed, memory_budget="150M")
        assert (r.status, r.reason, r.state) == ("restarted", "memory_budget", "restored"), r.summary()
        assert [a["action"] for a in r.actions] == ["interrupt", "restart"]
        assert "keep" in r.restored
        assert ak.run("print(keep)").text == "kept\n"
