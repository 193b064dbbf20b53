"""Blocking waits an interrupt can reach in threads other than the main one:
`time.sleep` and `threading.Condition.wait`.

A thread blocked in C cannot receive an async exception (only SIGINT on the
main thread breaks such a call).  So while a cell's window is open on another
thread (worker mode's exec thread, a subshell's thread), two waits become
cooperative: `time.sleep` waits on the window's waker, which the core sets
when it delivers; `Condition.wait`, under `Event.wait`, `Queue.get`,
`Future.result`, `Semaphore`, `Barrier` and `Pool.map`, waits in short slices,
so the delivered exception fires within one slice.  Everywhere else (the main
thread, threads outside a cell, a forked child) both are the originals.

The replacements stand in for the originals in every use that does not care
about interrupts: same name, module and qualified name (so `pickle` and
`multiprocessing` send `time.sleep` by reference), same signature and help,
one object for as long as the kernel lives.
"""

from __future__ import annotations

import _thread
import contextlib
import functools
import threading
import time
import types
from collections.abc import Callable

from .core import CancellationCore

_real_sleep = time.sleep
_real_condition_wait = threading.Condition.wait
_allocate_lock = _thread.allocate_lock

# The longest single wait of the sleep, so a lost wake-up costs an hour at most, never forever.
MAX_WAIT = 3600.0
# One slice of a cooperative Condition.wait: the latency of an interrupt reaching it.
WAIT_SLICE = 0.005


class CooperativeWaits:
    """The cooperative `time.sleep` and `Condition.wait` of one kernel, bound to its cancellation core."""

    def __init__(self, core: CancellationCore):
        self.core = core
        self.sleep = self._make_sleep()
        self.condition_wait = self._make_condition_wait()
        self._codes = {self.sleep.__code__, self.condition_wait.__code__}

    def _window_waker(self) -> threading.Event | None:
        """The waker of the cell window open on this thread, if it is one an interrupt cannot reach in C."""
        thread = threading.current_thread()
        if thread is threading.main_thread() or getattr(thread, "abandoned", False):
            return None
        execution = self.core.on_thread(threading.get_ident())
        window = execution.window if execution is not None else None
        return window.waker if window is not None else None

    def _make_sleep(self) -> Callable[[float], None]:
        window_waker = self._window_waker

        @functools.wraps(_real_sleep)
        def sleep(seconds: float, /) -> None:
            __tracebackhide__ = True
            waker = window_waker()
            if waker is None:
                return _real_sleep(seconds)
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0 or seconds != seconds:
                return _real_sleep(seconds)  # the same errors (and zero-sleep yield) as the real one
            deadline = time.monotonic() + seconds
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                if waker.wait(min(left, MAX_WAIT)):
                    waker.clear()

        return sleep

    def _make_condition_wait(self) -> Callable[..., bool]:
        window_waker = self._window_waker

        @functools.wraps(_real_condition_wait)
        def wait(self: threading.Condition, timeout: float | None = None) -> bool:
            """The stdlib's Condition.wait (3.11-3.13), its waiter lock taken in slices instead of one blocking call.

            Slicing calls of the original instead would lose wake-ups: a notify landing
            as one slice times out is consumed, yet that call says "timed out", and the
            next slice waits for a notify that never comes (Event.wait() hung forever).
            """
            __tracebackhide__ = True
            if window_waker() is None or (timeout is not None and not timeout > 0):
                return _real_condition_wait(self, timeout)
            if not self._is_owned():  # type: ignore[attr-defined]
                raise RuntimeError("cannot wait on un-acquired lock")
            waiter = _allocate_lock()
            waiter.acquire()
            self._waiters.append(waiter)  # type: ignore[attr-defined]
            saved_state = self._release_save()  # type: ignore[attr-defined]
            gotit = False
            try:
                deadline = None if timeout is None else time.monotonic() + timeout
                while not gotit:
                    step = WAIT_SLICE if deadline is None else min(WAIT_SLICE, deadline - time.monotonic())
                    if step <= 0:
                        break
                    # Between two slices the thread runs Python: a delivered interrupt fires here.
                    gotit = waiter.acquire(True, step)
                return gotit
            finally:
                self._acquire_restore(saved_state)  # type: ignore[attr-defined]
                if not gotit:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)  # type: ignore[attr-defined]

        return wait

    def install(self) -> None:
        if time.sleep is _real_sleep:
            time.sleep = self.sleep  # type: ignore[assignment]  # the same call, woken by interrupts
        if threading.Condition.wait is _real_condition_wait:
            threading.Condition.wait = self.condition_wait  # type: ignore[method-assign]

    def uninstall(self) -> None:
        if time.sleep is self.sleep:
            time.sleep = _real_sleep
        if threading.Condition.wait is self.condition_wait:
            threading.Condition.wait = _real_condition_wait  # type: ignore[method-assign]

    def in_wait(self, frame: types.FrameType | None) -> bool:
        """The thread sits in one of these waits: it runs Python code that an interrupt reaches, not one C call."""
        for _ in range(4):
            if frame is None:
                return False
            if frame.f_code in self._codes:
                return True
            frame = frame.f_back
        return False
