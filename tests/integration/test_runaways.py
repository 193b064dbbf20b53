"""The public runaway set and the GIL-holding C call, both modes.

Every test drives a real kernel through jupyter_client.  For each runaway
cell: a variable assigned before it keeps its value, ONE `interrupt_request`
(control channel, `target` = the cell's execute msg_id) stops it, the reply is
an error `KeyboardInterrupt` (`CancelledError` for the top-level-await cell)
with `metadata.cancelkernel` = {interrupted: true, reason: "request",
elapsed, stopped_at: "<cell file>:<line of the runaway>"}, and the next cell
runs normally.  Worker-mode kernels run with `interrupt_grace=0.3` so that
abandoning a blocked exec thread is quick.

Who stops what, and how (measured by these tests, CPython 3.11, Linux):

=========================  ===============================  ==============================================
cell                       main mode (user code on the      worker mode (user code on one exec thread)
                           main thread)
=========================  ===============================  ==============================================
while True: pass           SIGINT -> KeyboardInterrupt at   async exception (PyThreadState_SetAsyncExc) at
                           the next bytecode                the next bytecode
time.sleep(10**6)          SIGINT breaks the sleep          the kernel's cooperative time.sleep on the exec
                                                            worker: the interrupt wakes it, the async
                                                            exception fires
threading.Event().wait()   SIGINT breaks the wait           the kernel's cooperative Condition.wait (5 ms
                                                            slices): the async exception lands between two
                                                            slices; no abandonment
queue.Queue().get()        SIGINT                           cooperative Condition.wait, as Event.wait
Pool.map (fork, sleeping   SIGINT; the with block           cooperative Condition.wait under the map: the
workers)                   terminates the pool; no worker   async exception lands, the with block
                           left behind                      terminates the pool; no worker left behind
lock acquired twice        SIGINT                           blocked in C: worker ABANDONED after the grace,
                                                            replaced; reply metadata.abandoned_thread
recv on a silent socket    SIGINT (EINTR, handler raises)   ABANDONED after the grace
os.read on an empty pipe   SIGINT                           ABANDONED after the grace
subprocess.run(sleep)      SIGINT to the kernel and to its  SIGINT to the child processes: `sleep` dies,
                           children; run() kills and reaps  waitpid returns, the async exception fires;
                           the child                        no abandonment; the child is gone
input() (no answer)        SIGINT in ipykernel's input      async exception in ipykernel's input polling
                           polling loop                     loop
await asyncio.sleep(1e6)   task cancel -> CancelledError    task cancel on the worker's loop -> CancelledError
thread.join() forever      SIGINT                           ABANDONED after the grace (the join blocks in
                                                            the C acquire of the thread's state lock)
regex backtracking         one interrupt_request stops it:  NOT stoppable at all: the worker holds the GIL
                           the Control thread starves (no   in one C call; the control thread cannot even
                           GIL); the kernel's native GIL-   answer; SIGINT does not help (only the main
                           yield thread sees the watchdog   thread runs signal handlers); the heartbeat
                           stall and signals the main       keeps answering; the only way out is killing
                           thread; _sre checks signals, the the kernel
                           Python handler hands over the
                           GIL, the request is read, and
                           SIGINT raises in the cell. A
                           plain SIGINT stops it too
sum(range(10**12))         NOT stoppable: one C call holds  NOT stoppable (same); heartbeat alive, no
                           the GIL, no signal check; the    interrupt_reply, no execute_reply; kill
                           heartbeat (a C zmq device) keeps
                           answering; kill the kernel
=========================  ===============================  ==============================================

No test guesses how long a cell needs to get into its runaway call: each
waits on the kernel's state (`cancelkernel.testing.waiting`).  A cell that
answers status requests is interrupted once its innermost frame is at the
runaway line (and, for a blocking call made in Python code, once the thread's
innermost frame is at that call); a top-level await once its loop is back in
its selector after the line before the await; a GIL-holding call once the
kernel's own stack dump (its dead man's switch, armed by a wall budget) shows
the cell in it.
"""

from __future__ import annotations

import signal
import sys
import time
import typing as t

import pytest
from helpers import (
    GRACE_ARGS,
    STOP_TIMEOUT,
    WARN_ARGS,
    child_processes,
    children_of,
    cmdline,
    heartbeat_answers,
    kernel_pid,
    line_at,
    no_reply_within,
    send_interrupt,
    start_gil_holder,
    start_runaway,
    value_of,
)

from cancelkernel.testing import (
    MODES,
    execute,
    interrupt,
    running_kernel,
    wait_for,
    wait_reply,
    wait_until,
)

SETUP = "import asyncio, multiprocessing, os, queue, re, socket, subprocess, threading, time"
# The runaway set's kernels: one per mode for the whole module
# (the `kernel` fixture replaces one a test left unhealthy).
SHARED = pytest.mark.kernel_options(*GRACE_ARGS, setup=SETUP, shared=True)


class Runaway(t.NamedTuple):
    setup: str  # lines before the runaway line
    line: str  # the runaway line
    ename: str  # what the interrupted cell reports
    abandoned_in_worker: bool  # worker mode gives up on its exec thread (blocked in C past the grace)
    innermost: str | None = None  # in the thread's innermost line once the call (made in Python code) blocks


RUNAWAYS: dict[str, Runaway] = {
    "busy_loop": Runaway("", "while True: pass", "KeyboardInterrupt", False),
    "sleep": Runaway("", "time.sleep(10**6)", "KeyboardInterrupt", False),
    "event_wait": Runaway("", "threading.Event().wait()", "KeyboardInterrupt", False, "acquire("),
    # Two statements on the setup line: its text differs from the runaway line's.
    "lock_twice": Runaway("lk = threading.Lock(); lk.acquire()", "lk.acquire()", "KeyboardInterrupt", True),
    "queue_get": Runaway("", "queue.Queue().get()", "KeyboardInterrupt", False, "acquire("),
    "socket_recv": Runaway("sa, sb = socket.socketpair()", "sa.recv(1)", "KeyboardInterrupt", True),
    "pipe_read": Runaway("pr, pw = os.pipe()", "os.read(pr, 1)", "KeyboardInterrupt", True),
    "subprocess": Runaway("", "subprocess.run(['sleep', '1000'])", "KeyboardInterrupt", False, "waitpid("),
    "input": Runaway("", "input()", "KeyboardInterrupt", False),
    "await_sleep": Runaway("", "await asyncio.sleep(10**6)", "CancelledError", False),
    "join_forever": Runaway(
        "th = threading.Thread(target=threading.Event().wait, daemon=True)\nth.start()",
        "th.join()",
        "KeyboardInterrupt",
        True,
        "acquire(" if sys.version_info < (3, 13) else "_handle.join(",  # where Thread.join blocks in C
    ),
}

# Arguments prepared on the line before, so that "at the runaway line" means "inside the one C call".
REGEX_SETUP = "pat = re.compile(r'(a+)+$'); s = 'a' * 40 + 'b'"
REGEX = "pat.match(s)"
GIL_SETUP = "r = range(10**12)"
GIL_CALL = "sum(r)"


# -- the runaway set -------------------------------------------------------------


@SHARED
@pytest.mark.parametrize("case", list(RUNAWAYS))
@pytest.mark.parametrize("mode", MODES)
def test_runaway_stopped_by_one_interrupt(kernel, mode: str, case: str) -> None:
    """One targeted interrupt_request stops the runaway; state survives; the next cell runs.

    How each mode stops each case: see the table in the module docstring.
    """
    km, kc = kernel
    setup, runaway, ename, abandons_in_worker, innermost = RUNAWAYS[case]
    var, value = f"before_{case}", f"kept-{case}-{time.monotonic_ns()}"
    assert execute(kc, f"{var} = {value!r}")["content"]["status"] == "ok"

    msg_id, _code, line = start_runaway(kc, setup, runaway, innermost=innermost, allow_stdin=(case == "input"))
    if case == "subprocess":
        assert wait_until(lambda: child_processes(kernel_pid(km), "sleep"), 10), (
            "the cell's `sleep` child never started"
        )
    if case == "input":  # the kernel has asked for the answer: the cell waits in ipykernel's polling loop
        wait_for(
            kc.stdin_channel,
            lambda m: m["msg_type"] == "input_request" and m["parent_header"].get("msg_id") == msg_id,
            STOP_TIMEOUT,
        )

    reply_to_interrupt = interrupt(kc, msg_id)
    assert reply_to_interrupt["status"] == "ok", reply_to_interrupt
    assert reply_to_interrupt["interrupted"] is True, reply_to_interrupt
    assert reply_to_interrupt["execution"] == msg_id, reply_to_interrupt

    reply = wait_reply(kc, msg_id, timeout=STOP_TIMEOUT)
    content = reply["content"]
    assert content["status"] == "error", content
    assert content["ename"] == ename, (content["ename"], content["evalue"])
    meta = reply["metadata"]["cancelkernel"]
    assert meta["msg_id"] == msg_id
    assert meta["interrupted"] is True, meta
    assert meta["reason"] == "request", meta
    assert isinstance(meta["elapsed"], (int, float)), meta
    assert meta["elapsed"] > 0, meta
    expect_abandoned = mode == "worker" and abandons_in_worker
    if expect_abandoned:
        # The reply says the exec thread was given up on (and names it).
        assert isinstance(meta["abandoned_thread"], str), meta
        assert meta["abandoned_thread"], meta
        assert "abandoned" in content["evalue"], content["evalue"]
    else:
        assert meta["abandoned_thread"] is None, meta

    # State survives and the next cell runs normally.
    nxt = execute(kc, f"assert {var} == {value!r}\nafter_{case} = len({var})")
    assert nxt["content"]["status"] == "ok", nxt["content"]
    assert value_of(kc, f"after_{case}") == str(len(value))

    if case == "subprocess":
        assert wait_until(lambda: not child_processes(kernel_pid(km), "sleep"), 10), (
            "the `sleep` child survived the interrupt"
        )

    # Where it stopped: the runaway line of the cell (the innermost user frame).
    assert isinstance(meta["stopped_at"], str), f"metadata.stopped_at is {meta['stopped_at']!r}: {meta}"
    assert line_at(kc, meta["stopped_at"]) == runaway, (meta["stopped_at"], line)


NAP = "def nap(s):\n    __import__('time').sleep(s)"
# The map on a line of its own: "at that line" means the pool is built and its workers started.
POOL = "with multiprocessing.get_context('fork').Pool(2) as p:"
POOL_MAP = "    p.map(nap, [1000] * 4)"


@SHARED
@pytest.mark.parametrize("mode", MODES)
def test_a_pool_map_is_stopped_by_one_interrupt_and_leaves_no_worker(kernel, mode: str) -> None:
    """`Pool.map` over sleeping workers: ONE interrupt stops it (KeyboardInterrupt), no abandonment, no worker left.

    Worker mode: the map waits in a Condition.wait, cooperative on the exec
    thread, so the interrupt lands at once; the with block then terminates the
    pool.  Main mode: SIGINT, as stock.  The multiprocessing resource_tracker
    may stay (as on stock): it is not a pool worker.
    """
    km, kc = kernel
    pid = kernel_pid(km)
    before = children_of(pid)
    assert execute(kc, NAP)["content"]["status"] == "ok"
    msg_id, _code, _line = start_runaway(kc, POOL, POOL_MAP, innermost="acquire(")
    workers = children_of(pid) - before
    assert len(workers) >= 2, f"no pool workers among the kernel's children: {[cmdline(c) for c in children_of(pid)]}"

    assert interrupt(kc, msg_id)["interrupted"] is True
    reply = wait_reply(kc, msg_id, timeout=STOP_TIMEOUT)
    assert reply["content"]["ename"] == "KeyboardInterrupt", reply["content"]
    meta = reply["metadata"]["cancelkernel"]
    assert meta["interrupted"] is True, meta
    assert meta["reason"] == "request", meta
    assert meta["abandoned_thread"] is None, meta

    def left() -> list[str]:
        return [f"{c}: {cmdline(c)}" for c in children_of(pid) - before if "resource_tracker" not in cmdline(c)]

    assert wait_until(lambda: not left(), STOP_TIMEOUT), f"pool workers left behind: {left()}"
    assert execute(kc, "1")["content"]["status"] == "ok"


# -- regex backtracking: holds the GIL inside _sre ---------------------------------


def test_regex_main_mode_stopped_by_one_interrupt_request() -> None:
    """Main mode: the regex is in the runaway set; ONE interrupt_request must stop it.

    Stock ipykernel stops it (its kernelspec interrupts by signal; _sre checks
    signals).  Ours interrupts by message: the Control thread must get the GIL
    to read the request, and _sre never releases it on its own.  Without the
    kernel's GIL yield (a native thread that signals the main thread when the
    watchdog starves, so _sre's signal check runs Python code and hands the
    GIL over) no interrupt_reply ever arrives.
    """
    with running_kernel("main", extra_arguments=GRACE_ARGS) as (_km, kc):
        assert execute(kc, SETUP + "\nbefore_regex = 42")["content"]["status"] == "ok"
        # Status requests are answered too (slowly): the GIL yield hands the GIL over for each.
        msg_id, _code, _line = start_runaway(kc, REGEX_SETUP, REGEX)
        interrupt_id = send_interrupt(kc, msg_id)
        answered = not no_reply_within(kc.control_channel, interrupt_id, 5.0)
        assert answered, (
            "no interrupt_reply within 5 s: the Control thread cannot get the GIL while _sre runs "
            "on the main thread, so the interrupt_request is never even read"
        )
        reply = wait_reply(kc, msg_id, timeout=STOP_TIMEOUT)
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        assert reply["metadata"]["cancelkernel"]["interrupted"] is True
        assert execute(kc, "assert before_regex == 42")["content"]["status"] == "ok"


def test_regex_main_mode_sigint_stops_it() -> None:
    """Main mode: a SIGINT (interrupt_mode "signal" clients, kill -INT) stops the regex.

    _sre calls PyErr_CheckSignals every few thousand steps on the main thread;
    the kernel's SIGINT handler raises in the cell.  The Control thread then
    gets the GIL back too.
    """
    with running_kernel("main", extra_arguments=GRACE_ARGS) as (km, kc):
        assert execute(kc, SETUP + "\nbefore_regex = 42")["content"]["status"] == "ok"
        msg_id, _code, _line = start_runaway(kc, REGEX_SETUP, REGEX)
        km.signal_kernel(signal.SIGINT)
        reply = wait_reply(kc, msg_id, timeout=STOP_TIMEOUT)
        content, meta = reply["content"], reply["metadata"]["cancelkernel"]
        assert content["status"] == "error", content
        assert content["ename"] == "KeyboardInterrupt", content
        assert meta["interrupted"] is True, meta
        assert meta["reason"] == "signal", meta
        assert line_at(kc, meta["stopped_at"]) == REGEX
        assert execute(kc, "assert before_regex == 42")["content"]["status"] == "ok"


def test_regex_worker_mode_cannot_be_stopped() -> None:
    """Worker mode: a regex holding the GIL on the exec thread cannot be stopped; the kernel does not pretend.

    No Python thread runs while _sre holds the GIL: the Control thread cannot
    answer the interrupt_request, a SIGINT sits in the C handler (only the main
    thread runs Python signal handlers, and it needs the GIL too), and no
    execute_reply comes.  The heartbeat (a C zmq device) keeps answering.  The
    only way out is to kill the kernel (escalation is the watchdog/client's job).
    """
    with running_kernel("worker", extra_arguments=WARN_ARGS) as (km, kc):
        assert execute(kc, SETUP)["content"]["status"] == "ok"
        msg_id = start_gil_holder(kc, REGEX_SETUP, REGEX)
        interrupt_id = send_interrupt(kc, msg_id)
        assert no_reply_within(kc.control_channel, interrupt_id, 3.0), "the kernel answered while the GIL was held?"
        assert km.is_alive()
        assert kc.is_alive(), "heartbeat stopped answering"
        assert heartbeat_answers(kc), "heartbeat stopped answering"
        km.signal_kernel(signal.SIGINT)
        assert no_reply_within(kc.shell_channel, msg_id, 3.0), "the regex was stopped after all: update the docs"
        assert heartbeat_answers(kc), "heartbeat stopped answering"
        km.shutdown_kernel(now=True)  # kills the process: it cannot answer a shutdown_request
        assert wait_until(lambda: not km.is_alive(), 10)


# -- one C call holding the GIL -------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_gil_holding_call_cannot_be_stopped(mode: str) -> None:
    """`sum(r)` over `range(10**12)` holds the GIL in one C call and checks no signals: nothing stops it.

    Behaviour (both modes): the interrupt_request is not even answered (the
    Control thread needs the GIL), no execute_reply arrives, the process and
    its heartbeat stay alive (so "heartbeat alive" does not mean "responsive").
    The kernel is then killed.
    """
    with running_kernel(mode, extra_arguments=WARN_ARGS) as (km, kc):
        assert execute(kc, SETUP)["content"]["status"] == "ok"
        msg_id = start_gil_holder(kc, GIL_SETUP, GIL_CALL)
        interrupt_id = send_interrupt(kc, msg_id)
        assert no_reply_within(kc.shell_channel, msg_id, 3.0), "the GIL-holding call was stopped: update the docs"
        assert no_reply_within(kc.control_channel, interrupt_id, 0.5), (
            "the Control thread answered while the GIL was held"
        )
        assert km.is_alive()
        assert kc.is_alive(), "heartbeat stopped answering"
        assert heartbeat_answers(kc), "heartbeat stopped answering"
        km.shutdown_kernel(now=True)  # kills the process: it cannot answer a shutdown_request
        assert wait_until(lambda: not km.is_alive(), 10)
