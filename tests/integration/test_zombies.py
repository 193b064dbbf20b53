"""Worker mode never leaves a thread running a cell that has been answered (no zombie cells)."""

from __future__ import annotations

import time

from cancelkernel.testing import control_request, execute, interrupt, running_kernel, send_execute, wait_reply

GRACE = ["--CancelKernel.interrupt_grace=0.5"]


def value(kc, expression: str) -> str:
    return str(execute(kc, "", user_expressions={"v": expression})["content"]["user_expressions"]["v"]["data"]["text/plain"])


def status(kc) -> dict:
    return control_request(kc, "cancel_status_request")["content"]


SWALLOWING_SLEEPER = """counter = [0]
while True:
    try:
        counter[0] += 1
        time.sleep(0.05)
    except BaseException:
        pass
"""


def test_a_cell_that_swallows_interrupts_around_sleep_is_unresponsive_not_abandoned() -> None:
    with running_kernel("worker", extra_arguments=GRACE) as (km, kc):
        execute(kc, "import time")
        cell = send_execute(kc, SWALLOWING_SLEEPER)
        time.sleep(0.3)
        assert interrupt(kc, cell)["interrupted"]
        time.sleep(1.2)  # past the grace
        now = status(kc)
        assert now["execution"]["msg_id"] == cell and now["execution"]["state"] == "unresponsive-to-interrupt"
        assert now["abandoned_threads"] == []  # it runs Python code: not ours to replace, the client escalates
        km.restart_kernel(now=True)  # what the agent client does next


RETURNS_TO_PYTHON = """counter = [0]
try:
    threading.Event().wait(2.0)
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
    with running_kernel("worker", extra_arguments=GRACE) as (_, kc):
        execute(kc, "import threading, time")
        cell = send_execute(kc, RETURNS_TO_PYTHON)
        time.sleep(0.3)
        interrupt(kc, cell)
        reply = wait_reply(kc, cell)  # blocked in C past the grace: abandoned and replaced
        assert reply["metadata"]["cancelkernel"]["abandoned_thread"]
        listed = status(kc)["abandoned_threads"]
        assert [t["name"] for t in listed] == [reply["metadata"]["cancelkernel"]["abandoned_thread"]]
        assert listed[0]["since"] > 0 and "wait" in listed[0]["blocked_at"]
        time.sleep(2.5)  # the wait returns: the thread is back in the cell's Python code
        first = int(value(kc, "counter[0]"))
        time.sleep(0.5)
        assert int(value(kc, "counter[0]")) == first == 0  # it never ran the loop: stopped at once
        deadline = time.monotonic() + 10
        while status(kc)["abandoned_threads"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert status(kc)["abandoned_threads"] == []  # and it exited
