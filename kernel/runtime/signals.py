"""SIGINT belongs to the kernel for its whole life, and reaches only the execution it was meant for.

Stock ipykernel swaps SIGINT handlers around every message; we install one
Python handler (and the native C handler in front of it) and keep it,
re-installing it after a cell that replaced it.  The kernel's own SIGINT
(main-thread delivery) is marked "expected"; an outside one (kill -INT, a
kernelspec with signal interrupt mode, Ctrl-C) is attributed by the C handler
to the execution running when it arrived, so a late signal is dropped instead
of hitting the next cell.

Also here: the GIL yield (main mode), which lets the control thread read an
interrupt while one C call that checks signals holds the GIL.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import types
from collections.abc import Iterator

from .. import native
from ..protocol import REASON_SIGNAL
from .core import CancellationCore
from .execution import Execution

# At most this long the main thread lets go of the GIL when asked to yield; it takes it back as soon as the thread
# that asked has acted (or the interrupt arrived), so the bound only matters when that thread is slow to run.
YIELD_SLEEP = 0.02
# glibc keeps the first real-time signals for itself; SIGRTMIN+3 is free and rarely used.
YIELD_SIGNAL_OFFSET = 3
# Seconds a SIGINT may sit unseen by Python's handler, a cell running on the main thread, before it is sent again
# (docs/cancellation.md, "A SIGINT that is lost"); an interrupt's handler normally runs within a millisecond.
SIGINT_WAKE_AFTER = 0.05


def _is_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class SigintOwner:
    """The kernel's one SIGINT handler, scoped to executions by the core."""

    def __init__(self, core: CancellationCore):
        self.core = core
        self._run_code_codes: set[types.CodeType] = set()
        self._control_fd: int | None = None  # the control socket's descriptor the yield thread watches
        self._unseen_since: float | None = None  # when wake_if_unseen first saw a SIGINT Python's handler had not

    def register_run_code(self, code: types.CodeType) -> None:
        """Frames of this code object mark "inside the shell's run_code": only there does SIGINT raise."""
        self._run_code_codes.add(code)

    def install(self) -> None:
        """Own SIGINT on the main thread (and chain the native C handler in front)."""
        signal.signal(signal.SIGINT, self._on_sigint)
        native.install_sigint_handler()

    def ensure(self) -> None:
        """Re-install after user code or a library replaced the handler."""
        if not _is_main_thread():
            return
        if signal.getsignal(signal.SIGINT) != self._on_sigint:
            signal.signal(signal.SIGINT, self._on_sigint)
        if not native.sigint_handler_installed():
            native.install_sigint_handler()

    def enable_gil_yield(self, stall: float, *, signal_main: bool = True) -> bool:
        """When one C call holds the GIL for `stall` s, ask it to hand the GIL over.

        The native yield thread sets a bit that cooperative native loops check
        (they let go of the GIL a moment, so the control thread can read an
        interrupt), and with `signal_main` also signals the main thread: a C call
        that checks Python signals (the regex engine does) then runs our
        handler, which sleeps a moment.  Needs the compiled module.
        """
        signum = getattr(signal, "SIGRTMIN", None)
        if not native.available or not _is_main_thread():
            return False
        if signal_main and signum is not None:
            signum += YIELD_SIGNAL_OFFSET
            signal.signal(signum, _yield_gil)
            signal.siginterrupt(signum, False)  # never turn a system call of user code into EINTR
        else:
            signum = 0
        return bool(native.start_gil_yield(signum, stall))

    def yield_for_control(self, fd: int) -> None:
        """Ask for the GIL yield as soon as a message waits unread on `fd` (the control socket's), not after the stall.

        The descriptor stays readable until the control thread takes the message in,
        which it cannot while one C call holds the GIL: an interrupt then reaches a
        cooperative loop in a few milliseconds instead of the stall's tens.
        """
        self._control_fd = fd
        native.yield_for_readable(fd)

    @contextlib.contextmanager
    def control_waits(self) -> Iterator[None]:
        """The control thread leaves its socket unread on purpose (it waits for the cells it interrupted):
        a message unread meanwhile is not a GIL held from it, so the yield thread does not watch."""
        fd = self._control_fd
        if fd is None:
            yield
            return
        native.yield_for_readable(-1)
        try:
            yield
        finally:
            native.yield_for_readable(fd)

    def wake_if_unseen(self, running: list[Execution], now: float) -> bool:
        """Called on every watchdog tick: a SIGINT the C handler took on the main thread, while a cell runs
        there, that Python's handler has not seen SIGINT_WAKE_AFTER later is sent once more.  True if it was."""
        if not native.sigint_unseen() or not any(e.window is not None and e.window.on_main_thread for e in running):
            self._unseen_since = None
            return False
        if self._unseen_since is None:
            self._unseen_since = now
            return False
        if now - self._unseen_since < SIGINT_WAKE_AFTER:
            return False
        self._unseen_since = now
        native.sigint_wake()
        return True

    def _on_sigint(self, signum: int, frame: types.FrameType | None) -> None:
        # Runs on the main thread between bytecodes, possibly inside the core's
        # own critical sections: never take the core's lock here.
        native.sigint_seen()
        core = self.core
        expected, core.sigint_expected = core.sigint_expected, None
        arrival = native.take_sigint_arrival()
        if expected is None:
            self._reach_subshells()  # handled at once (the main thread wakes for it): it is not a late one
        execution = core.parent_execution
        if execution is None:
            return
        if expected is None:
            # An outside SIGINT (kill -INT, signal interrupt mode, Ctrl-C).
            if arrival == 0 or (arrival > 0 and arrival != execution.generation):
                return  # it arrived while idle or during an execution that has ended
            core.mark_cancelled(execution, REASON_SIGNAL)
        elif expected is not execution:
            return  # our own SIGINT for an execution that has ended
        window = execution.window
        exc_class = core.exc_for(execution)
        if window is None or exc_class is None:
            return
        if not window.on_main_thread:
            core.deliver(execution, exc_class)
        elif self._inside_run_code(frame):
            execution.cancel.delivered = True
            raise exc_class()
        elif window.task is not None:
            # A top-level-await cell suspended in the event loop: cancel its task.
            assert window.loop is not None
            window.loop.call_soon_threadsafe(core.cancel_task_if_open, execution, window)

    def _reach_subshells(self) -> None:
        """An outside SIGINT is an interrupt of everything, like an empty interrupt_request: subshell cells too."""
        core = self.core
        for other in core.running():
            if other.subshell_id is not None and not other.cancelled:
                core.mark_cancelled(other, REASON_SIGNAL)
                core.deliver(other, other.exc_class)

    def _inside_run_code(self, frame: types.FrameType | None) -> bool:
        codes = self._run_code_codes
        while frame is not None:
            if frame.f_code in codes:
                return True
            frame = frame.f_back
        return False


def _yield_gil(signum: int, frame: types.FrameType | None) -> None:
    """Let the threads waiting for the GIL (control, watchdog) run, until they did; a pending SIGINT then lands here."""
    native.yield_pause(YIELD_SLEEP)
