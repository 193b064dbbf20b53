"""Ordinary programs behave as on stock ipykernel, both exec modes: what the kernel replaces or adds must not show.

- `time.sleep` (the kernel's cooperative replacement) pickles by reference, has the
  original's name, module, qualified name and help, and `Pool.map(time.sleep, ...)` runs;
- a process forked from a cell gets Python's own SIGINT handler and none of the
  kernel's executions, so an interrupted pool worker never prints the kernel's internals;
- worker mode: exec threads given up on (blocked in C) end once their call returns,
  and take their event loop's file descriptors with them.

Each case is compared with stock ipykernel where stock can run it.
"""

from __future__ import annotations

import os
import time

import pytest
from helpers import GRACE_ARGS, kernel_pid, value_of

from cancelkernel.testing import (
    MODES,
    cell_status,
    create_subshell,
    drain_channel,
    execute,
    interrupt,
    running_kernel,
    send_execute,
    wait_no_abandoned_threads,
    wait_reply,
    wait_running,
)

SLEEP_LOOKS_STOCK = """
import inspect, pickle, pydoc, time
facts = {
    "pickles to itself": pickle.loads(pickle.dumps(time.sleep)) is time.sleep,
    "module": time.sleep.__module__,
    "qualname": time.sleep.__qualname__,
    "name": time.sleep.__name__,
    "doc": time.sleep.__doc__.splitlines()[0],
    "help": "Delay execution" in pydoc.render_doc(time.sleep),
    "same object": time.sleep is time.sleep,
}
try:
    facts["signature"] = str(inspect.signature(time.sleep))
except ValueError:  # the builtin has none on some versions: then neither may ours
    facts["signature"] = "ValueError"
"""


def _stdout(msgs: list[dict]) -> str:
    return "".join(m["content"].get("text", "") for m in msgs if m["msg_type"] == "stream")


@pytest.fixture(scope="module")
def stock_sleep_facts() -> str:
    with running_kernel(None, kernel_name="python3") as (_, kc):
        assert execute(kc, SLEEP_LOOKS_STOCK)["content"]["status"] == "ok"
        return value_of(kc, "facts")


@pytest.mark.parametrize("mode", MODES)
def test_time_sleep_is_indistinguishable_from_stock(mode: str, stock_sleep_facts: str) -> None:
    with running_kernel(mode) as (_, kc):
        assert execute(kc, SLEEP_LOOKS_STOCK)["content"]["status"] == "ok"
        assert value_of(kc, "facts") == stock_sleep_facts


@pytest.mark.parametrize("context", ["fork", "spawn"])
@pytest.mark.parametrize("mode", MODES)
def test_a_pool_maps_time_sleep(mode: str, context: str) -> None:
    with running_kernel(mode) as (_, kc):
        code = (
            f"import multiprocessing, time\nwith multiprocessing.get_context({context!r}).Pool(2) as p:\n"
            "    done = p.map(time.sleep, [0.01] * 4)"
        )
        reply = execute(kc, code, timeout=60)["content"]
        assert reply["status"] == "ok", reply
        assert value_of(kc, "done") == "[None, None, None, None]"


# An Event set just as one 5 ms slice of the cooperative wait ends; a setter that sees its waiter
# still asleep a second later counts a lost wake-up and sets again (set() notifies anew).
EVENT_WAKEUPS = r"""
import threading, time
lost = 0
def setter(ev, back):
    global lost
    time.sleep(0.0049)
    ev.set()
    if not back.wait(1.0):
        lost += 1
        ev.set()
for _ in range(600):
    ev, back = threading.Event(), threading.Event()
    t = threading.Thread(target=setter, args=(ev, back))
    t.start()
    ev.wait()
    back.set()
    t.join()
"""


@pytest.mark.parametrize("mode", MODES)
def test_an_event_set_is_never_lost_by_a_cooperative_wait(mode: str) -> None:
    """Event.wait() in a cell on a thread not the main one (worker mode; a subshell in main mode).

    Slicing the original Condition.wait lost about 1 wake-up in 200 here: a
    `Pool.map` (which waits on an Event) then hung for good.
    """
    with running_kernel(mode) as (_, kc):
        subshell = create_subshell(kc) if mode == "main" else None
        reply = wait_reply(kc, send_execute(kc, EVENT_WAKEUPS, subshell_id=subshell), timeout=300)["content"]
        assert reply["status"] == "ok", reply
        assert value_of(kc, "lost") == "0"


# Threads that flush while the cell writes: each flush must not trip over the buffers the IOPub thread just sent.
FLUSH_WHILE_WRITING = r"""
import sys, threading
flush_errors = []
def flusher():
    for _ in range(20000):
        try:
            sys.stdout.flush()
        except ValueError as e:
            flush_errors.append(repr(e))
threads = [threading.Thread(target=flusher) for _ in range(2)]
for t in threads:
    t.start()
for i in range(20000):
    sys.stdout.write(".")
    if i % 50 == 0:
        sys.stdout.flush()
for t in threads:
    t.join()
"""


@pytest.mark.parametrize("mode", MODES)
def test_flushing_from_threads_while_a_cell_writes_never_fails(mode: str) -> None:
    """The kernel's flush looked at buffers the IOPub thread had closed: ValueError in a user's
    flush (7 in one such cell), and in the kernel's own flush before a reply (the reply never came)."""
    with running_kernel(mode) as (_, kc):
        reply = execute(kc, FLUSH_WHILE_WRITING, timeout=300)["content"]
        assert reply["status"] == "ok", reply
        assert value_of(kc, "flush_errors") == "[]"


THREAD_STARTER = "import threading\nwhile True:\n    threading.Thread(target=lambda: None).start()"


@pytest.mark.parametrize("mode", MODES)
def test_a_cell_starting_threads_in_a_loop_is_interrupted_every_time(mode: str) -> None:
    """On a thread not the main one (worker mode; a subshell in main mode).

    On 3.11 a thread being started carries its parent's id until it runs, and the
    interrupt was raised in the new thread instead (10 of 30 lost here): the cell
    ran on, waiting in `Thread.start` for a thread that had died of it.
    """
    with running_kernel(mode, extra_arguments=["--CancelKernel.interrupt_grace=30"]) as (_, kc):
        subshell = create_subshell(kc) if mode == "main" else None
        for _ in range(20):
            msg_id = send_execute(kc, THREAD_STARTER, subshell_id=subshell)
            wait_running(kc, msg_id)
            interrupt(kc, msg_id)
            reply = wait_reply(kc, msg_id, timeout=60)["content"]
            assert reply.get("ename") == "KeyboardInterrupt", reply


@pytest.mark.parametrize("mode", MODES)
def test_the_status_answers_while_a_cell_starts_threads(mode: str) -> None:
    """Reading a cell's stack (cancel_status) while it starts threads: on 3.11 a collection inside
    sys._current_frames deadlocked the kernel against the starting thread (CPython gh-106883).

    Two kernels at once, so that each one's threads compete for the cores (seen within 30 reads so).
    """
    with running_kernel(mode) as (_, kc1), running_kernel(mode) as (_, kc2):
        cells = []
        for kc in (kc1, kc2):
            subshell = create_subshell(kc) if mode == "main" else None
            cells.append((kc, send_execute(kc, THREAD_STARTER, subshell_id=subshell)))
        for kc, msg_id in cells:
            wait_running(kc, msg_id)
        for _ in range(200):
            for kc, msg_id in cells:
                assert cell_status(kc, msg_id) is not None  # each one answered (30 s bound only against a hang)
        for kc, msg_id in cells:
            interrupt(kc, msg_id)
            assert wait_reply(kc, msg_id, timeout=60)["content"].get("ename") == "KeyboardInterrupt"


FORKED_CHILD = """
import multiprocessing, signal, sys, time
def _report(conn):
    conn.send({
        "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
        "running": [e.msg_id for e in get_ipython().kernel.runtime.core.running()],
        "sleep returns": (time.sleep(0.01), True)[1],
    })
ctx = multiprocessing.get_context("fork")
parent_end, child_end = ctx.Pipe()
child = ctx.Process(target=_report, args=(child_end,))
child.start()
seen = parent_end.recv()
child.join()
"""


@pytest.mark.parametrize("mode", MODES)
def test_a_forked_child_is_not_the_kernel(mode: str) -> None:
    """In the child: Python's own SIGINT handler, no running execution, a sleep that just sleeps."""
    with running_kernel(mode) as (_, kc):
        reply = execute(kc, FORKED_CHILD, timeout=60)["content"]
        assert reply["status"] == "ok", reply
        assert value_of(kc, "seen") == "{'sigint': True, 'running': [], 'sleep returns': True}"


@pytest.mark.parametrize("mode", MODES)
def test_interrupted_pool_workers_never_print_the_kernels_internals(mode: str) -> None:
    """The workers get the interrupt (SIGINT to the cell's children, as stock's process group signal):
    what they print is Python's."""
    with running_kernel(mode) as (_, kc):
        assert (
            execute(kc, "import multiprocessing\ndef nap(s):\n    __import__('time').sleep(s)")["content"]["status"]
            == "ok"
        )
        drain_channel(kc.iopub_channel)
        msg_id = send_execute(
            kc, "p = multiprocessing.get_context('fork').Pool(2)\nwith p:\n    p.map(nap, [1000] * 4)"
        )
        wait_running(kc, msg_id, at="p.map(nap, [1000] * 4)")
        assert interrupt(kc, msg_id)["interrupted"] is True
        assert wait_reply(kc, msg_id)["content"]["ename"] == "KeyboardInterrupt"
        printed = _stdout(drain_channel(kc.iopub_channel)) + _stdout(drain_channel(kc.iopub_channel))
        assert "cancelkernel" not in printed, printed
        assert "_on_sigint" not in printed, printed


def _threads_and_fds(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/status") as f:
        threads = next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    return threads, len(os.listdir(f"/proc/{pid}/fd"))


def test_abandoned_exec_threads_end_and_take_their_descriptors_with_them() -> None:
    """Worker mode: five exec threads given up on; once their calls return,
    threads and descriptors are back where they were."""
    with running_kernel("worker", extra_arguments=GRACE_ARGS) as (km, kc):
        pid = kernel_pid(km)
        assert execute(kc, "import os, threading\nwarm = [1]")["content"]["status"] == "ok"
        # One abandonment first: ipykernel's per-thread iopub pipes and the like are then made once.
        rounds = 6
        baseline = None
        for i in range(rounds):
            assert execute(kc, f"pr{i}, pw{i} = os.pipe()")["content"]["status"] == "ok"
            msg_id = send_execute(kc, f"os.read(pr{i}, 1)")
            wait_running(kc, msg_id, at=f"os.read(pr{i}, 1)")
            assert interrupt(kc, msg_id)["interrupted"] is True
            reply = wait_reply(kc, msg_id)
            assert reply["metadata"]["cancelkernel"]["abandoned_thread"], reply["metadata"]
            # The new exec thread lets the old one's call return; the old thread then unwinds and ends.
            assert execute(kc, f"os.write(pw{i}, b'x'); os.close(pw{i})")["content"]["status"] == "ok"
            wait_no_abandoned_threads(kc)
            assert execute(kc, f"os.close(pr{i})")["content"]["status"] == "ok"
            if i == 0:
                baseline = _threads_and_fds(pid)
        assert baseline is not None
        # ipykernel closes a dead thread's iopub pipe on its own clock (every 10 s): wait for that, boundedly.
        deadline = time.monotonic() + 30
        while (now := _threads_and_fds(pid)) > baseline and time.monotonic() < deadline:
            time.sleep(0.1)
        assert now[0] <= baseline[0], f"threads {baseline[0]} -> {now[0]} after {rounds - 1} more abandonments"
        assert now[1] <= baseline[1], f"open fds {baseline[1]} -> {now[1]} after {rounds - 1} more abandonments"
