"""The cancellation core: the one place that knows how to stop the code of one execution.

Executions are kept by the thread that runs their user code, so cells running
at once on different threads are tracked and stopped independently.  A cancel
names an execution (its execute_request msg_id) and is a no-op for any other:
it is never "for whatever runs next".  Delivery, in order: the native flag, an
exception in the thread running the user's code (SIGINT on the main thread, an
async exception elsewhere), the waker of a cooperative sleep, the asyncio task
of an awaiting cell, SIGINT to child processes.

Why each step is shaped this way: docs/design.md ("One interrupt, from the
control channel to the user's code and back") and docs/cancellation.md.  Nothing here knows about Jupyter.
"""

from __future__ import annotations

import itertools
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import native
from ..protocol import CANCEL_REASONS
from .children import ChildSignaller
from .execution import Execution, Window

if TYPE_CHECKING:
    from .deadlines import CancelScope

# Seconds an awaiting worker cell gets to take a task cancel before we raise in its thread.
ASYNC_ESCALATION = 0.05


def _breaker_check() -> None:
    """Does nothing: entering a Python function is one of the interpreter's eval-breaker checks."""


def drop_pending_async_exception() -> None:
    """Let an async exception still pending for the calling thread fire here, and drop it.

    Taking it this way is the only way that also resets the interpreter's
    "async exception pending" signal on 3.11 and 3.12 (docs/cancellation.md,
    "Delivering an interrupt to a thread").  Call it only after the window is
    closed, so that no new exception can be aimed at the thread.
    """
    try:  # noqa: SIM105 - not contextlib.suppress: an async exception may land in its frames, out of its reach
        _breaker_check()
    except BaseException:  # noqa: BLE001 - ours (an interrupt or a deadline), arrived after the cell's code ended
        pass


class CancellationCore:
    """Scopes every cancel to one execution and delivers it to where its code runs."""

    def __init__(self, *, signal_children: bool = True):
        self._lock = threading.Lock()
        self._generations = itertools.count(1)
        self._by_thread: dict[int, Execution] = {}
        self._children = ChildSignaller() if signal_children else None
        # Set by the SIGINT owner: the execution the kernel is about to SIGINT itself for.
        self.sigint_expected: Execution | None = None

    # -- lifetime of an execution --

    def begin(self, msg_id: str, code: str, *, thread_id: int, subshell_id: str | None = None) -> Execution:
        """A cell starts; its user code will run on `thread_id`."""
        generation = next(self._generations)
        execution = Execution(
            msg_id=msg_id, generation=generation, code=code, thread_id=thread_id, subshell_id=subshell_id
        )
        with self._lock:
            self._by_thread[thread_id] = execution
            native.begin(generation, thread_id, parent=subshell_id is None)
        return execution

    def end(self, execution: Execution) -> None:
        """The cell's reply is about to be sent: nothing may reach its code any more."""
        with self._lock:
            execution.ended = True
            execution.window = None
            if self._by_thread.get(execution.thread_id) is execution:
                del self._by_thread[execution.thread_id]
            if self.sigint_expected is execution:
                self.sigint_expected = None
            native.end(execution.generation)

    def forget_after_fork(self) -> None:
        """In a process forked from the kernel: nothing runs here that an interrupt may reach
        (the child is not the kernel)."""
        self._lock = threading.Lock()  # another thread may have held it at the fork
        for execution in self._by_thread.values():
            native.close_window(execution.generation, execution.thread_id)
            native.end(execution.generation)
        drop_pending_async_exception()
        self._by_thread.clear()
        self.sigint_expected = None

    def running(self) -> list[Execution]:
        """Every execution running now, parent shell first."""
        found = list(self._by_thread.values())
        return sorted(found, key=lambda e: (e.subshell_id is not None, e.generation))

    def on_thread(self, thread_id: int | None) -> Execution | None:
        """The execution whose user code runs (or will run) on `thread_id`."""
        return self._by_thread.get(thread_id) if thread_id is not None else None

    def find(self, msg_id: str) -> Execution | None:
        return next((e for e in self.running() if e.msg_id == msg_id), None)

    @property
    def parent_execution(self) -> Execution | None:
        """The parent shell's running execution (what an untargeted interrupt or SIGINT is for)."""
        return next((e for e in self.running() if e.subshell_id is None), None)

    # -- the window: user code of the execution runs on some thread --

    def open_window(self, execution: Execution, window: Window) -> None:
        """Called on the exec thread just before user code; raises if already cancelled."""
        if not window.on_main_thread:
            native.open_window(execution.generation, window.thread_id)
        execution.window = window
        if execution.cancelled and not execution.cancel.delivered:
            # It arrived between two statements: one interrupt is one KeyboardInterrupt,
            # raised here; a cell that caught an earlier one goes on as with stock.
            execution.cancel.delivered = True
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
                    native.close_window(execution.generation, window.thread_id)
                    drop_pending_async_exception()
                return late
            except KeyboardInterrupt as exc:  # ours or a deadline scope's, fired at the boundary
                late = exc

    # -- cancelling (any thread but the exec thread's own signal handler) --

    def cancel(self, target: str | None, reason: str) -> Execution | None:
        """Cancel the running execution `target`; None cancels every running one (see cancel_all).

        Returns the execution hit (the first one, for None), or None if nothing
        matched (idle, or the target already ended).  Never blocks on the exec thread.
        """
        if target is None:
            hit = self.cancel_all(reason)
            return hit[0] if hit else None
        return next(iter(self._cancel(lambda: [e for e in self.running() if e.msg_id == target], reason)), None)

    def cancel_all(self, reason: str, *, subshell_id: str | object | None = ...) -> list[Execution]:
        """Cancel every running execution (only the one of `subshell_id`, None = the parent shell, if given)."""

        def matching() -> list[Execution]:
            return [e for e in self.running() if subshell_id is ... or e.subshell_id == subshell_id]

        return self._cancel(matching, reason)

    def _cancel(self, select: Callable[[], list[Execution]], reason: str) -> list[Execution]:
        if reason not in CANCEL_REASONS:
            raise ValueError(f"unknown cancel reason {reason!r}; expected one of {CANCEL_REASONS}")
        with self._lock:
            hit = select()
            for execution in hit:
                self.mark_cancelled(execution, reason)
                self.deliver(execution, execution.exc_class)
        if hit and self._children is not None:
            self._children.signal(signal.SIGINT)
        return hit

    def mark_cancelled(self, execution: Execution, reason: str) -> None:
        state = execution.cancel
        if state.reason is None:
            state.reason = reason
            state.time = time.monotonic()
        state.interrupts_sent += 1
        state.delivered = False  # each interrupt is raised once, wherever the code is
        native.cancel(execution.generation)

    def deliver(self, execution: Execution, exc_class: type[BaseException]) -> None:
        """Raise `exc_class` where the execution's user code is (or let open_window do it later)."""
        window = execution.window
        if window is None:
            return  # between statements: open_window raises when user code resumes
        if window.on_main_thread:
            native.expect_sigint(execution.generation)
            self.sigint_expected = execution
            main = threading.main_thread().ident
            assert main is not None
            signal.pthread_kill(main, signal.SIGINT)
        elif window.loop is not None:
            # An awaiting cell: cancel its task; the watchdog raises in the
            # thread later only if busy code keeps the loop from running.
            window.loop.call_soon_threadsafe(self.cancel_task_if_open, execution, window)
            execution.cancel.escalate_at = time.monotonic() + ASYNC_ESCALATION
        elif native.raise_in_window(execution.generation, exc_class):
            execution.cancel.delivered = True
        else:
            # Not aimed now (the thread is starting a thread that still carries its id): the watchdog tries again.
            execution.cancel.escalate_at = time.monotonic()
        if window.waker is not None:
            window.waker.set()

    def escalate(self, execution: Execution) -> None:
        """Raise in a worker whose awaiting cell did not take the task cancel (busy code)."""
        with self._lock:
            execution.cancel.escalate_at = None
            window = execution.window
            if execution.ended or window is None or window.on_main_thread:
                return
            exc_class = self.exc_for(execution)
            if exc_class is None:
                return
            if native.raise_in_window(execution.generation, exc_class):
                execution.cancel.delivered = True
            elif window.loop is None:
                execution.cancel.escalate_at = time.monotonic()  # still not aimed: the next tick tries again

    def exc_for(self, execution: Execution) -> type[BaseException] | None:
        """What to raise now: the execution's interrupt (once), else a fired deadline's."""
        if execution.cancelled and not execution.cancel.delivered:
            return execution.exc_class
        scope = execution.cancel.pending_scope
        if scope is not None and scope.active:
            return scope.exc_class
        return None

    def cancel_task_if_open(self, execution: Execution, window: Window) -> None:
        """On the loop's thread: cancel the awaiting cell's task, only while it still awaits user code."""
        if execution.window is not window or self.exc_for(execution) is None:
            return
        if window.task is not None and not window.task.done():
            execution.cancel.delivered = True
            window.task.cancel()

    # -- deadlines (deadlines.py): a cancel scoped to a `with` block, not the whole execution --

    def fire_scope(self, scope: CancelScope) -> bool:
        """The scope's deadline passed (watchdog thread): raise its class in the scope's thread."""
        with self._lock:
            execution = scope.execution
            if execution is None or execution.ended or not scope.active or scope.cancel_called:
                return False
            window = execution.window
            if window is None or window.thread_id != scope.thread_id:
                return False
            scope.cancel_called = True
            execution.cancel.pending_scope = scope
            native.cancel(execution.generation)
            if not execution.cancelled:
                self.deliver(execution, scope.exc_class)
            return True

    def end_scope(self, scope: CancelScope) -> None:
        """The scope's block exited (exec thread): nothing of its deadline may fire later."""
        execution = scope.execution
        if execution is None or execution.ended or execution.cancel.pending_scope is not scope:
            return
        execution.cancel.pending_scope = None
        if execution.cancelled:
            return
        native.uncancel(execution.generation)  # the flag was set for the deadline only: clear it
        window = execution.window
        if window is not None and not window.on_main_thread:
            # Drop a deadline exception still pending for this thread, keep the window.
            native.close_window(execution.generation, window.thread_id)
            drop_pending_async_exception()
            native.open_window(execution.generation, window.thread_id)
            if execution.cancelled:
                execution.cancel.delivered = True
                raise execution.exc_class()
