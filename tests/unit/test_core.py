"""Unit tests: the cancellation core, without a kernel (worker-thread delivery, scoping, the window)."""

from __future__ import annotations

import signal
import sys
import threading
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from cancelkernel import native
from cancelkernel.runtime.core import CancellationCore
from cancelkernel.runtime.execution import CellInterrupt, Execution, Window
from cancelkernel.runtime.signals import SigintOwner


class LoopThread:
    """A thread that runs a Python loop inside `execution`'s window, and records how it ended."""

    def __init__(self, core: CancellationCore, msg_id: str):
        self.core = core
        self.msg_id = msg_id
        self.started = threading.Event()
        self.go = threading.Event()
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.execution: Execution | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        window = Window(threading.get_ident(), on_main_thread=False)
        self.go.wait(10)
        assert self.execution is not None
        try:
            self.core.open_window(self.execution, window)
            self.started.set()
            self._spin()
        except BaseException as exc:  # noqa: BLE001 - what the test looks at
            self.error = exc
        finally:
            late = self.core.close_window(self.execution, window)
            self.error = self.error or late

    def _spin(self) -> None:
        # In a function of its own: an async exception landing in a loop that sits directly in a `try` can
        # escape the `try` on some CPython versions (gh-108214, seen on 3.13.0 too); from a call it cannot.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not self.stop.is_set():
            pass

    def begin(self) -> Execution:
        self.thread.start()
        assert self.thread.ident is not None
        self.execution = self.core.begin(self.msg_id, "while True: pass", thread_id=self.thread.ident)
        self.go.set()
        assert self.started.wait(10)
        return self.execution

    def join(self) -> None:
        self.thread.join(15)
        assert not self.thread.is_alive()


@contextmanager
def core() -> Iterator[CancellationCore]:
    yield CancellationCore(signal_children=False)


def test_a_targeted_cancel_raises_in_the_execution_thread_only() -> None:
    with core() as c:
        a, b = LoopThread(c, "a"), LoopThread(c, "b")
        ea, eb = a.begin(), b.begin()
        assert {e.msg_id for e in c.running()} == {"a", "b"}
        assert c.on_thread(a.thread.ident) is ea
        assert c.find("b") is eb
        assert c.cancel("b", "request") is eb
        b.join()
        # The class names its execution
        assert isinstance(b.error, CellInterrupt)
        assert b.error.execution is eb
        # The other cell runs on
        assert a.thread.is_alive()
        assert not ea.cancelled
        c.end(eb)
        a.stop.set()
        a.join()
        assert a.error is None  # b's interrupt never reached a
        c.end(ea)
        assert c.running() == []


def test_a_cancel_for_an_ended_or_unknown_execution_is_a_no_op() -> None:
    with core() as c:
        loop = LoopThread(c, "done")
        execution = loop.begin()
        c.cancel("done", "request")
        loop.join()
        c.end(execution)
        assert c.cancel("done", "request") is None  # never "for whatever runs next"
        assert c.cancel("never-seen", "request") is None
        assert c.cancel(None, "request") is None  # idle
        assert execution.cancel.interrupts_sent == 1


def test_an_interrupt_between_statements_is_raised_when_the_window_opens() -> None:
    with core() as c:
        execution = c.begin("x", "x", thread_id=threading.get_ident())
        assert c.cancel("x", "request") is execution  # no window: nothing raised now
        window = Window(threading.get_ident(), on_main_thread=False)
        with pytest.raises(CellInterrupt):
            c.open_window(execution, window)
        c.open_window(execution, window)  # one interrupt is one KeyboardInterrupt
        assert c.close_window(execution, window) is None
        c.end(execution)


def test_unknown_reasons_are_refused() -> None:
    with core() as c, pytest.raises(ValueError, match="unknown cancel reason"):
        c.cancel(None, "because")


def test_the_parent_shell_execution_is_the_untargeted_one() -> None:
    with core() as c:
        sub = c.begin("sub", "", thread_id=1, subshell_id="s1")
        main = c.begin("main", "", thread_id=2)
        assert c.parent_execution is main
        assert c.running()[0] is main
        c.end(main)
        assert c.parent_execution is None
        c.end(sub)


def test_many_cancels_at_random_moments_never_hit_a_later_execution() -> None:
    """The stray-interrupt race (docs/cancellation.md): every interrupt lands in its own cell or nowhere."""
    with core() as c:
        stray = []
        for i in range(300):
            window = Window(threading.get_ident(), on_main_thread=False)
            execution = c.begin(f"cell-{i}", "", thread_id=threading.get_ident())
            target = f"cell-{i - 1}" if i % 3 == 0 else f"cell-{i}"
            fire = threading.Timer(0.0002 * (i % 7), lambda t=target: c.cancel(t, "request"))
            fire.start()
            try:
                try:
                    c.open_window(execution, window)
                    for _ in range(3000):
                        pass
                finally:
                    late = c.close_window(execution, window)
                if late is not None:
                    raise late
            except CellInterrupt as exc:
                if exc.execution is not execution:
                    stray.append((i, exc.execution))
            finally:
                c.close_window(execution, window)
                fire.join()
                c.end(execution)
        assert stray == []


def test_closing_a_window_leaves_no_async_exception_signal_behind() -> None:
    """After a worker cell ends, a traced call in that thread returns (CPython 3.11 spun forever at it).

    Clearing a pending async exception with SetAsyncExc(tid, NULL) sets the
    interpreter's "async exception pending" signal and nothing resets it: on
    3.11 a thread with a trace function (an abandoned exec thread) then loops
    forever at its next function call, and on 3.11/3.12 every thread takes the
    slow path at every eval-breaker check.  The core lets a pending exception
    fire and drops it instead.
    """
    core = CancellationCore(signal_children=False)
    returned = threading.Event()

    def callee() -> int:
        return 1

    def exec_thread() -> None:
        execution = core.begin("traced", "pass", thread_id=threading.get_ident())
        window = Window(threading.get_ident(), on_main_thread=False)
        core.open_window(execution, window)
        core.close_window(execution, window)
        core.end(execution)
        sys.settrace(lambda *args: None)
        try:
            callee()
        finally:
            sys.settrace(None)
        returned.set()

    thread = threading.Thread(target=exec_thread, daemon=True)
    thread.start()
    assert returned.wait(10), "a traced call after close_window never returned"


def test_a_sigint_whose_python_handler_never_ran_is_sent_again() -> None:
    """CPython can lose a SIGINT: its C handler ran, Python's never did, the wait sleeps on.  The watchdog's tick
    (wake_if_unseen) sends one more.  Here Python's handler ignores the first one, as if it had never run."""
    assert native.available, "the C SIGINT handler is what counts the SIGINTs"
    calls: list[bool] = []
    c = CancellationCore(signal_children=False)
    owner = SigintOwner(c)
    execution = c.begin("wait", "threading.Event().wait()", thread_id=threading.get_ident())
    window = Window(threading.get_ident(), on_main_thread=True)

    def first_one_lost(signum: int, frame: types.FrameType | None) -> None:
        calls.append(True)
        if len(calls) > 1:
            owner._on_sigint(signum, frame)

    def run_code() -> None:  # stands for the shell's run_code: only under it does our handler raise
        threading.Event().wait(30)  # the bound only: the interrupt ends it

    def watchdog() -> None:
        while not execution.cancel.delivered:
            owner.wake_if_unseen(c.running(), time.monotonic())
            time.sleep(0.005)

    old = signal.signal(signal.SIGINT, first_one_lost)
    native.install_sigint_handler()
    owner.register_run_code(run_code.__code__)
    ticking = threading.Thread(target=watchdog, daemon=True)
    try:
        c.open_window(execution, window)
        ticking.start()
        threading.Timer(0.05, c.cancel, ("wait", "request")).start()
        with pytest.raises(CellInterrupt):
            run_code()
    finally:
        execution.cancel.delivered = True  # ends the ticking thread whatever happened
        signal.signal(signal.SIGINT, old)
        c.close_window(execution, window)
        c.end(execution)
        ticking.join(10)
    assert len(calls) == 2
    assert execution.cancel.interrupts_sent == 1
    assert native.sigint_unseen() == 0
