"""The cancellation core: the one place that knows how to stop one execution.

An execution is one execute_request, named by its msg_id and a generation
number.  A cancel names an execution and is a no-op for any other: it is never
"for whatever runs next".  Delivery, in order: the native flag, an exception
in the thread running the user's code (SIGINT on the main thread, an async
exception on a worker), the waker of a worker's cooperative sleep, the asyncio
task of a top-level-await cell, SIGINT to child processes.

Nothing here knows about Jupyter.  See cancellation-facts.md §3-§5 for why each
step is shaped the way it is.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Callable

from . import native

# Why an execution was cancelled: the values of metadata.cancelkernel.reason.
REASONS = ("request", "signal", "wall_budget", "quiet_budget", "deadline", "shutdown")

# Seconds an awaiting worker cell gets to take a task cancel before we raise in its thread.
ASYNC_ESCALATION = 0.05

# How long the main thread lets go of the GIL when asked to yield (see enable_gil_yield).
YIELD_SLEEP = 0.002
_real_sleep = time.sleep


class CellInterrupt(KeyboardInterrupt):
    """Base of the per-execution interrupt classes (async exceptions need a class)."""

    execution: Execution | None = None


@dataclass
class Window:
    """User code of one execution is running on `thread_id` (main or worker)."""

    thread_id: int
    on_main_thread: bool
    task: asyncio.Future | None = None
    loop: asyncio.AbstractEventLoop | None = None
    waker: threading.Event | None = None  # set on delivery: wakes a worker's cooperative time.sleep


@dataclass
class Execution:
    """One cell's run, from execute_request to execute_reply."""

    msg_id: str
    gen: int
    code: str
    started: float = field(default_factory=time.monotonic)
    cancel_reason: str | None = None
    cancel_time: float | None = None
    interrupts_sent: int = 0
    delivered: bool = False
    abandoned_thread: str | None = None
    window: Window | None = None
    pending_scope: object | None = None  # a deadline scope that fired and has not exited yet
    thread_id: int | None = None  # the thread that last ran this execution's user code
    ended: bool = False
    escalate_at: float | None = None  # when to raise in a worker whose task cancel did not land
    exc_class: type[CellInterrupt] = CellInterrupt

    @property
    def first_line(self) -> str:
        for line in self.code.splitlines():
            if line.strip():
                return line.strip()[:120]
        return ""

    @property
    def cancelled(self) -> bool:
        return self.cancel_reason is not None

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def _is_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class CancellationCore:
    """Scopes every cancel to one execution and delivers it to where the code runs."""

    def __init__(self, *, signal_children: bool = True, on_cancel: Callable[[Execution], None] | None = None):
        self._lock = threading.Lock()
        self._gens = itertools.count(1)
        self._current: Execution | None = None
        self._sigint_expected: Execution | None = None
        self._signal_children = signal_children
        self._on_cancel = on_cancel
        self._run_code_codes: set[types.CodeType] = set()

    # -- lifetime of an execution (called by the executor, on the kernel's main thread) --

    @property
    def current(self) -> Execution | None:
        return self._current

    def begin(self, msg_id: str, code: str) -> Execution:
        gen = next(self._gens)
        execution = Execution(msg_id=msg_id, gen=gen, code=code)
        # A class per execution: an async exception can only carry a class.
        execution.exc_class = type("KeyboardInterrupt", (CellInterrupt,), {"execution": execution})
        with self._lock:
            self._current = execution
            native.begin(gen)
        return execution

    def end(self, execution: Execution) -> None:
        with self._lock:
            execution.ended = True
            execution.window = None
            if self._current is execution:
                self._current = None
            if self._sigint_expected is execution:
                self._sigint_expected = None
            native.end(execution.gen)

    # -- the window: user code of the execution is running on some thread --

    def register_run_code(self, code: types.CodeType) -> None:
        """Frames of this code object mark "inside the shell's run_code" for SIGINT."""
        self._run_code_codes.add(code)

    def open_window(self, execution: Execution, window: Window) -> None:
        """Called on the exec thread just before user code; raises if already cancelled."""
        if not window.on_main_thread:
            native.open_window(execution.gen, window.thread_id)
        execution.thread_id = window.thread_id
        execution.window = window
        if execution.cancelled and not execution.delivered:
            # It arrived between two statements: one interrupt is one KeyboardInterrupt,
            # raised here; a cell that caught an earlier one goes on as with stock.
            execution.delivered = True
            raise execution.exc_class()

    def close_window(self, execution: Execution, window: Window) -> KeyboardInterrupt | None:
        """Called on the exec thread after user code; survives an interrupt landing in it.

        Afterwards no interrupt can reach that thread (a pending async exception
        is cleared).  Returns the interrupt that fired while closing, if one did.
        """
        late: KeyboardInterrupt | None = None
        while True:
            try:
                if execution.window is window:
                    execution.window = None
                if not window.on_main_thread:
                    native.close_window(execution.gen, window.thread_id)
                return late
            except KeyboardInterrupt as exc:  # ours or a deadline scope's, fired at the boundary
                late = exc

    # -- cancelling (any thread but the exec thread's own signal handler) --

    def cancel(self, target: str | None, reason: str) -> Execution | None:
        """Cancel the running execution if it is `target` (or any, if None).

        Returns the execution hit, or None if nothing matched (idle, or the
        target already ended).  Never blocks on the exec thread.
        """
        if reason not in REASONS:
            raise ValueError(f"unknown cancel reason {reason!r}; expected one of {REASONS}")
        with self._lock:
            execution = self._current
            if execution is None or (target is not None and execution.msg_id != target):
                return None
            self._mark_cancelled(execution, reason)
            self._deliver(execution, execution.exc_class)
        if self._signal_children:
            _signal_child_processes(signal.SIGINT)
        if self._on_cancel is not None:
            self._on_cancel(execution)
        return execution

    def _mark_cancelled(self, execution: Execution, reason: str) -> None:
        if execution.cancel_reason is None:
            execution.cancel_reason = reason
            execution.cancel_time = time.monotonic()
        execution.interrupts_sent += 1
        execution.delivered = False  # each interrupt is raised once, wherever the code is
        native.cancel(execution.gen)

    def _deliver(self, execution: Execution, exc_class: type[BaseException]) -> None:
        window = execution.window
        if window is None:
            return  # between statements: open_window raises when user code resumes
        if window.on_main_thread:
            native.expect_sigint(execution.gen)
            self._sigint_expected = execution
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        elif window.loop is not None:
            # An awaiting cell: cancel its task; the watchdog raises in the
            # thread later only if busy code keeps the loop from running.
            window.loop.call_soon_threadsafe(self._cancel_task_if_open, execution, window)
            execution.escalate_at = time.monotonic() + ASYNC_ESCALATION
        else:
            if native.raise_in_window(execution.gen, exc_class):
                execution.delivered = True
        if window.waker is not None:
            window.waker.set()

    def escalate(self, execution: Execution) -> None:
        """Raise in a worker whose awaiting cell did not take the task cancel (busy code)."""
        with self._lock:
            execution.escalate_at = None
            window = execution.window
            if self._current is not execution or window is None or window.on_main_thread:
                return
            exc_class = self._exc_for(execution)
            if exc_class is not None and native.raise_in_window(execution.gen, exc_class):
                execution.delivered = True

    def _exc_for(self, execution: Execution) -> type[BaseException] | None:
        """What to raise now: the execution's interrupt (once), else a fired deadline's."""
        if execution.cancelled and not execution.delivered:
            return execution.exc_class
        scope = execution.pending_scope
        if scope is not None and getattr(scope, "active", False):
            return scope.exc_class  # type: ignore[attr-defined]
        return None

    # -- deadlines (deadlines.py): a cancel scoped to a `with` block, not the execution --

    def fire_scope(self, scope: object) -> bool:
        """The scope's deadline passed: raise its class in the exec thread (watchdog thread)."""
        with self._lock:
            execution = self._current
            if execution is None or not getattr(scope, "active", False) or getattr(scope, "cancel_called", True):
                return False
            window = execution.window
            wanted = scope.thread_id  # type: ignore[attr-defined]
            if window is None or (wanted and window.thread_id != wanted):
                return False
            scope.cancel_called = True  # type: ignore[attr-defined]
            execution.pending_scope = scope
            native.cancel(execution.gen)
            if not execution.cancelled:
                self._deliver(execution, scope.exc_class)  # type: ignore[attr-defined]
            return True

    def end_scope(self, scope: object) -> None:
        """The scope's block exited (exec thread): nothing of its deadline may fire later."""
        execution = self._current
        if execution is None or execution.pending_scope is not scope:
            return
        execution.pending_scope = None
        if execution.cancelled:
            return
        native.begin(execution.gen)  # the flag was set for the deadline only: clear it
        window = execution.window
        if window is not None and not window.on_main_thread:
            # Drop a deadline exception still pending for this thread, keep the window.
            native.close_window(execution.gen, window.thread_id)
            native.open_window(execution.gen, window.thread_id)
            if execution.cancelled:
                execution.delivered = True
                raise execution.exc_class()

    def _cancel_task_if_open(self, execution: Execution, window: Window) -> None:
        # Runs on the loop's thread: only cancel while the task still awaits user code.
        if execution.window is not window or self._exc_for(execution) is None:
            return
        if window.task is not None and not window.task.done():
            execution.delivered = True
            window.task.cancel()

    # -- SIGINT: the kernel owns it; it only ever reaches the execution it was meant for --

    def install_sigint(self) -> None:
        """Own SIGINT on the main thread (and chain the native C handler in front)."""
        signal.signal(signal.SIGINT, self._on_sigint)
        native.install_sigint_handler()

    def enable_gil_yield(self, stall: float) -> bool:
        """Main mode: when one C call holds the GIL for `stall` s, signal it to hand the GIL over.

        A C call that checks Python signals (the regex engine does) then runs
        our handler, which sleeps a moment: the control thread gets the GIL and
        can read an interrupt or status request.  Needs the compiled module.
        """
        signum = getattr(signal, "SIGRTMIN", None)
        if signum is None or not native.available or not _is_main_thread():
            return False
        signum += 3  # glibc keeps the first real-time signals for itself; +3 is free and rarely used
        signal.signal(signum, _yield_gil)
        signal.siginterrupt(signum, False)  # never turn a system call of user code into EINTR
        return bool(native.start_gil_yield(signum, stall))

    def heartbeat(self) -> None:
        """The watchdog got the GIL: no C call is hogging it right now."""
        native.gil_heartbeat()

    def ensure_sigint(self) -> None:
        """Re-install after user code or a library replaced the handler."""
        if not _is_main_thread():
            return
        if signal.getsignal(signal.SIGINT) != self._on_sigint:
            signal.signal(signal.SIGINT, self._on_sigint)
        if not native.sigint_handler_installed():
            native.install_sigint_handler()

    def _on_sigint(self, signum: int, frame: types.FrameType | None) -> None:
        # Runs on the main thread between bytecodes, possibly inside our own
        # critical sections: never take self._lock here.
        expected, self._sigint_expected = self._sigint_expected, None
        arrival = native.take_sigint_arrival()
        execution = self._current
        if execution is None:
            return
        if expected is None:
            # An outside SIGINT (kill -INT, signal interrupt mode, Ctrl-C).
            if arrival == 0 or (arrival > 0 and arrival != execution.gen):
                return  # it arrived while idle or during an execution that has ended
            self._mark_cancelled(execution, "signal")
        elif expected is not execution:
            return  # our own SIGINT for an execution that has ended
        window = execution.window
        exc_class = self._exc_for(execution)
        if window is None or exc_class is None:
            return
        if not window.on_main_thread:
            self._deliver(execution, exc_class)
        elif self._inside_run_code(frame):
            execution.delivered = True
            raise exc_class()
        elif window.task is not None:
            # A top-level-await cell suspended in the event loop: cancel its task.
            assert window.loop is not None
            window.loop.call_soon_threadsafe(self._cancel_task_if_open, execution, window)

    def _inside_run_code(self, frame: types.FrameType | None) -> bool:
        codes = self._run_code_codes
        while frame is not None:
            if frame.f_code in codes:
                return True
            frame = frame.f_back
        return False


def _yield_gil(signum: int, frame: types.FrameType | None) -> None:
    """Let the threads waiting for the GIL (control, watchdog) run; a pending SIGINT then lands here."""
    _real_sleep(YIELD_SLEEP)


def _child_pids(pid: int) -> list[int]:
    """Descendants of `pid` (Linux: /proc/PID/task/TID/children; [] where that is missing)."""
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children", "rb") as f:
                    children = [int(c) for c in f.read().split()]
            except (OSError, ValueError):
                continue
            found.extend(children)
            frontier.extend(children)
    return found


def _signal_child_processes(signum: int) -> None:
    """SIGINT the kernel's child processes, as stock ipykernel's killpg would, but not us."""
    for pid in _child_pids(os.getpid()):
        try:
            os.kill(pid, signum)
        except OSError:
            pass
