"""The cancellation core: the one place that knows how to stop one execution.

An execution is one execute_request, named by its msg_id and a generation
number.  A cancel names an execution and is a no-op for any other: it is never
"for whatever runs next".  Delivery, in order: the native flag, an exception
in the thread running the user's code (SIGINT on the main thread, an async
exception on a worker), the wake-up event of cooperative sleeps, the asyncio
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
REASONS = ("request", "signal", "wall_budget", "quiet_budget", "deadline")


class CellInterrupt(KeyboardInterrupt):
    """Base of the per-execution interrupt classes (async exceptions need a class)."""

    execution: Execution | None = None


@dataclass
class Window:
    """User code of one execution is running on `thread_id` (main or worker)."""

    thread_id: int
    on_main_thread: bool
    code: types.CodeType | None = None
    task: asyncio.Future | None = None
    loop: asyncio.AbstractEventLoop | None = None


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
    ended: bool = False
    wake: threading.Event = field(default_factory=threading.Event)
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
        self._sigint_installed = False

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
        execution.window = window
        if execution.cancelled:
            execution.delivered = True
            raise execution.exc_class()

    def close_window(self, execution: Execution, window: Window) -> bool:
        """Called on the exec thread after user code; survives an interrupt landing in it.

        Afterwards no interrupt can reach that thread (a pending async exception
        is cleared).  Returns True if an interrupt fired while closing.
        """
        interrupted = False
        while True:
            try:
                if execution.window is window:
                    execution.window = None
                if not window.on_main_thread:
                    native.close_window(execution.gen, window.thread_id)
                return interrupted
            except CellInterrupt:
                interrupted = True

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
            self._deliver(execution)
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
        native.cancel(execution.gen)
        execution.wake.set()

    def _deliver(self, execution: Execution) -> None:
        window = execution.window
        if window is None:
            return  # between statements: open_window raises when user code resumes
        if window.on_main_thread:
            native.expect_sigint(execution.gen)
            self._sigint_expected = execution
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        else:
            if native.raise_in_window(execution.gen, execution.exc_class):
                execution.delivered = True
            if window.loop is not None:
                window.loop.call_soon_threadsafe(self._cancel_task_if_open, execution, window)

    def _cancel_task_if_open(self, execution: Execution, window: Window) -> None:
        # Runs on the loop's thread: only cancel while the task still awaits user code.
        if execution.window is window and window.task is not None and not window.task.done():
            execution.delivered = True
            window.task.cancel()

    # -- SIGINT: the kernel owns it; it only ever reaches the execution it was meant for --

    def install_sigint(self) -> None:
        """Own SIGINT on the main thread (and chain the native C handler in front)."""
        signal.signal(signal.SIGINT, self._on_sigint)
        native.install_sigint_handler()
        self._sigint_installed = True

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
        if window is None:
            return
        if window.on_main_thread:
            if window.task is not None and not self._inside_run_code(frame):
                # A top-level-await cell suspended in the event loop: cancel its task.
                assert window.loop is not None
                window.loop.call_soon_threadsafe(self._cancel_task_if_open, execution, window)
                return
            if self._inside_run_code(frame):
                execution.delivered = True
                raise execution.exc_class()
        else:
            if native.raise_in_window(execution.gen, execution.exc_class):
                execution.delivered = True
            if window.loop is not None:
                window.loop.call_soon_threadsafe(self._cancel_task_if_open, execution, window)

    def _inside_run_code(self, frame: types.FrameType | None) -> bool:
        codes = self._run_code_codes
        while frame is not None:
            if frame.f_code in codes:
                return True
            frame = frame.f_back
        return False


def _child_pids(pid: int) -> list[int]:
    """Descendants of `pid` in the same process group (Linux /proc; [] elsewhere)."""
    try:
        pgid = os.getpgid(pid)
        entries = os.listdir("/proc")
    except OSError:
        return []
    parents: dict[int, int] = {}
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may contain spaces and parentheses: split after the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid:
            parents[int(name)] = int(fields[1])
    found, frontier = [], {pid}
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found.extend(children)
        frontier = set(children)
    return found


def _signal_child_processes(signum: int) -> None:
    """SIGINT the kernel's child processes, as stock ipykernel's killpg would, but not us."""
    for pid in _child_pids(os.getpid()):
        try:
            os.kill(pid, signum)
        except OSError:
            pass
