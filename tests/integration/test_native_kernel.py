"""The native flag through a real kernel, in both exec modes: examples/native/montecarlo.pyx.

- A cooperative loop that HOLDS the GIL starves every Python thread of the
  kernel, the control thread included, so an interrupt_request cannot even be
  read (docs/cancellation.md, "One C call that holds the GIL").  A SIGINT to the kernel process reaches the
  C handler, which sets the flag in microseconds: that is how it is stopped.
- A cooperative loop that releases the GIL is stopped by a plain interrupt_request.
- A loop that never checks is not stopped by either (documented): escalating
  to a restart is the watchdog's job; here the test restarts the kernel.
"""

from __future__ import annotations

import queue
import signal

import pytest
from helpers import assert_interrupted, start_cell, start_gil_holder

from cancelkernel.testing import (
    MODES,
    REPLY_TIMEOUT,
    cancel_status,
    execute,
    interrupt,
    restart,
    running_kernel,
    signal_handled,
    wait_reply,
)

# A loop that runs "forever" unless stopped (10**15 iterations is days).
FOREVER = "10**15"
# How long a loop that ignores interrupts must keep the kernel busy to count as not stopped.
NOT_STOPPED_FOR = 3.0


def setup_cell(example_dir: str) -> str:
    return (
        f"import sys; sys.path.insert(0, {example_dir!r})\n"
        "import montecarlo, cancelkernel, cancelkernel.native as native\n"
        "x = 41\n"
        "assert native.available, native.import_error\n"
    )


def assert_state_survived(kc) -> None:
    reply = execute(kc, "assert x + 1 == 42 and montecarlo.progress() > 0, (x, montecarlo.progress())")
    assert reply["content"]["status"] == "ok", reply["content"]


def test_kernel_reports_the_native_flag():
    with running_kernel("main") as (_km, kc):
        reply = kc.kernel_info(reply=True, timeout=REPLY_TIMEOUT)
        assert reply["content"]["cancelkernel"]["native_flag"] is True


@pytest.mark.parametrize("mode", MODES)
def test_gil_held_loop_is_stopped_by_sigint(mode, example_dir):
    with running_kernel(mode) as (km, kc):
        assert execute(kc, setup_cell(example_dir))["content"]["status"] == "ok"
        msg_id = start_cell(kc, f"montecarlo.pi_gil({FOREVER})")
        km.signal_kernel(signal.SIGINT)
        reply = wait_reply(kc, msg_id)
        assert_interrupted(reply)
        assert reply["metadata"]["cancelkernel"]["reason"] == "signal"
        assert_state_survived(kc)


@pytest.mark.parametrize("mode", MODES)
def test_nogil_loop_is_stopped_by_an_interrupt_request(mode, example_dir):
    with running_kernel(mode) as (_km, kc):
        assert execute(kc, setup_cell(example_dir))["content"]["status"] == "ok"
        msg_id = start_cell(kc, f"montecarlo.pi_nogil({FOREVER})")
        answer = interrupt(kc)
        assert answer["interrupted"] is True
        assert answer["execution"] == msg_id
        reply = wait_reply(kc, msg_id)
        assert_interrupted(reply)
        assert reply["metadata"]["cancelkernel"]["reason"] == "request"
        assert_state_survived(kc)


@pytest.mark.parametrize("mode", MODES)
def test_cancellable_sleep_is_stopped_by_an_interrupt_request(mode, example_dir):
    with running_kernel(mode) as (_km, kc):
        assert execute(kc, setup_cell(example_dir))["content"]["status"] == "ok"
        for code in ("montecarlo.nap(3600)", "cancelkernel.cancellable_sleep(3600)"):
            msg_id = start_cell(kc, code)
            assert interrupt(kc)["interrupted"] is True
            assert_interrupted(wait_reply(kc, msg_id))
        assert execute(kc, "x")["content"]["status"] == "ok"


@pytest.mark.parametrize("mode", MODES)
def test_loop_without_a_cancel_point_is_not_stopped(mode, example_dir):
    # Documented limit: nothing inside the process can stop a GIL-held loop that never checks.
    with running_kernel(mode, extra_arguments=["--CancelKernel.on_runaway=warn"]) as (km, kc):
        assert execute(kc, setup_cell(example_dir))["content"]["status"] == "ok"
        msg_id = start_gil_holder(kc, "", f"montecarlo.pi_nocheck({FOREVER})")
        # Both kinds of interrupt; the control thread is starved, so do not wait for its reply.
        kc.control_channel.send(kc.session.msg("interrupt_request", {}))
        km.signal_kernel(signal.SIGINT)
        with pytest.raises((TimeoutError, queue.Empty)):
            wait_reply(kc, msg_id, timeout=NOT_STOPPED_FOR)
        assert km.is_alive()
        # The way out is a restart (what the watchdog escalates to).
        restart(km, kc, timeout=REPLY_TIMEOUT)
        reply = execute(kc, "1 + 1")
        assert reply["content"]["status"] == "ok"


@pytest.mark.parametrize("mode", MODES)
def test_sigint_still_sets_the_flag_in_the_tenth_cell(mode, example_dir):
    # ipykernel-style code re-installs Python's handler around messages, which drops
    # a chained C handler (docs/cancellation.md, "One C call that holds the GIL"): it must be back for every cell.
    with running_kernel(mode) as (km, kc):
        assert execute(kc, setup_cell(example_dir))["content"]["status"] == "ok"
        for i in range(8):
            code = f"y = {i}; print(y)"
            if mode == "main" and i % 3 == 0:
                # What ipykernel's pre/post handler hooks do around every message
                # (a worker-mode cell cannot: it is not on the main thread).
                code += "\nimport signal; signal.signal(signal.SIGINT, signal.getsignal(signal.SIGINT))"
            reply = execute(kc, code)
            assert reply["content"]["status"] == "ok", reply["content"]
        msg_id = start_cell(kc, f"montecarlo.pi_gil({FOREVER})")  # the tenth cell
        km.signal_kernel(signal.SIGINT)
        assert_interrupted(wait_reply(kc, msg_id))
        # And again, once more after an interrupted cell.
        msg_id = start_cell(kc, f"montecarlo.pi_gil({FOREVER})")
        km.signal_kernel(signal.SIGINT)
        assert_interrupted(wait_reply(kc, msg_id))
        assert_state_survived(kc)


def test_a_cell_replacing_the_sigint_handler_does_not_break_it(example_dir):
    # Main mode only: a worker-mode cell cannot call signal.signal (not the main thread).
    with running_kernel("main") as (km, kc):
        assert execute(kc, setup_cell(example_dir))["content"]["status"] == "ok"
        reply = execute(
            kc,
            "import signal\n"
            "assert native.sigint_handler_installed()\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "assert not native.sigint_handler_installed()\n",
        )
        assert reply["content"]["status"] == "ok", reply["content"]
        reply = execute(kc, "assert native.sigint_handler_installed()")
        assert reply["content"]["status"] == "ok", reply["content"]
        msg_id = start_cell(kc, f"montecarlo.pi_gil({FOREVER})")
        km.signal_kernel(signal.SIGINT)
        assert_interrupted(wait_reply(kc, msg_id))
        assert_state_survived(kc)


@pytest.mark.parametrize("mode", MODES)
def test_an_idle_sigint_does_not_cancel_the_next_cell(mode, example_dir):
    with running_kernel(mode) as (km, kc):
        assert execute(kc, setup_cell(example_dir))["content"]["status"] == "ok"
        signal_handled(km, kc)  # handled while idle, before the next cell is sent
        reply = execute(kc, "assert not cancelkernel.cancel_requested()\nmontecarlo.pi_gil(10**6)")
        assert reply["content"]["status"] == "ok", reply["content"]


@pytest.mark.parametrize("mode", MODES)
def test_a_stale_targeted_interrupt_does_not_set_the_flag(mode, example_dir):
    # A targeted interrupt for a cell that already ended must not set the flag for the next one.
    with running_kernel(mode) as (_km, kc):
        assert execute(kc, setup_cell(example_dir))["content"]["status"] == "ok"
        first = kc.execute("1")
        wait_reply(kc, first)
        assert interrupt(kc, target=first)["interrupted"] is False
        reply = execute(kc, "assert not cancelkernel.cancel_requested()\nmontecarlo.pi_nogil(10**6)")
        assert reply["content"]["status"] == "ok", reply["content"]
        status = cancel_status(kc)
        assert status["native_flag"] is True


@pytest.mark.parametrize("mode", MODES)
def test_kernel_works_with_the_fallback_flag(mode):
    # CANCELKERNEL_NATIVE=0: the pure-Python flag; Python cancel points still work.
    with running_kernel(mode, env={"CANCELKERNEL_NATIVE": "0"}) as (_km, kc):
        reply = kc.kernel_info(reply=True, timeout=REPLY_TIMEOUT)
        assert reply["content"]["cancelkernel"]["native_flag"] is False
        reply = execute(kc, "import cancelkernel, cancelkernel.native as native\nx = 41\nassert not native.available")
        assert reply["content"]["status"] == "ok", reply["content"]
        for code in (
            "cancelkernel.cancellable_sleep(3600)",
            "while True:\n    try:\n        cancelkernel.raise_if_cancelled()\n    except ValueError:\n        pass",
        ):
            msg_id = start_cell(kc, code)
            assert interrupt(kc)["interrupted"] is True
            assert_interrupted(wait_reply(kc, msg_id))
        reply = execute(kc, "assert x == 41 and not cancelkernel.cancel_requested()")
        assert reply["content"]["status"] == "ok", reply["content"]
