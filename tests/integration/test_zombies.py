"""Worker mode never leaves a thread running a cell that has been answered (no zombie cells)."""

from __future__ import annotations

from helpers import GRACE_ARGS, value_of

from cancelkernel import protocol
from cancelkernel.testing import (
    cancel_status,
    execute,
    interrupt,
    running_kernel,
    send_execute,
    wait_no_abandoned_threads,
    wait_reply,
    wait_running,
    wait_state,
)

SWALLOWING_SLEEPER = """counter = [0]
while True:
    try:
        counter[0] += 1
        time.sleep(0.05)
    except BaseException:
        pass
"""


def test_a_cell_that_swallows_interrupts_around_sleep_is_unresponsive_not_abandoned() -> None:
    with running_kernel("worker", extra_arguments=GRACE_ARGS) as (km, kc):
        execute(kc, "import time")
        cell = send_execute(kc, SWALLOWING_SLEEPER)
        wait_running(kc, cell, at="time.sleep(0.05)")  # inside the try
        assert interrupt(kc, cell)["interrupted"]
        wait_state(kc, cell, protocol.STATE_UNRESPONSIVE)  # past the grace, the kernel has decided
        # It runs Python code: not ours to replace, the client escalates
        assert cancel_status(kc)["abandoned_threads"] == []
        assert [e["msg_id"] for e in cancel_status(kc)["executions"]] == [cell]
        assert cancel_status(kc)["abandoned_threads"] == []
        km.restart_kernel(now=True)  # what the agent client does next


# Blocked in C (a read of an empty pipe) until the test writes to the pipe; then back in the cell's Python code.
RETURNS_TO_PYTHON = """counter = [0]
try:
    os.read(pr, 1)
except BaseException:
    pass
while True:
    try:
        counter[0] += 1
        time.sleep(0.01)
    except BaseException:
        pass
"""


def test_an_abandoned_thread_that_gets_back_to_python_is_stopped_there() -> None:
    with running_kernel("worker", extra_arguments=GRACE_ARGS) as (_, kc):
        execute(kc, "import os, threading, time\npr, pw = os.pipe()")
        cell = send_execute(kc, RETURNS_TO_PYTHON)
        wait_running(kc, cell, at="os.read(pr, 1)")
        interrupt(kc, cell)
        reply = wait_reply(kc, cell)  # blocked in C past the grace: abandoned and replaced
        assert reply["metadata"]["cancelkernel"]["abandoned_thread"]
        listed = cancel_status(kc)["abandoned_threads"]
        assert [t["name"] for t in listed] == [reply["metadata"]["cancelkernel"]["abandoned_thread"]]
        # At the read
        assert listed[0]["since"] > 0, listed
        assert listed[0]["blocked_at"].endswith(":3 in <module>"), listed
        # The read returns: the thread is back in the cell's Python code, where it must be stopped at once.
        assert execute(kc, "os.write(pw, b'x')")["content"]["status"] == "ok"
        wait_no_abandoned_threads(kc)  # it unwound and exited (had it run the loop, it would never end)
        assert int(value_of(kc, "counter[0]")) == 0  # it never ran the loop: stopped at once
