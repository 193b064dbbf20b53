"""`time.sleep` that an interrupt can wake, for cells that run off the main thread.

A thread blocked in the C sleep cannot receive an async exception, so while a
cell's window is open on a thread other than the main one (a worker, a
subshell), `time.sleep` waits on the window's waker instead; the exception
the core delivered fires as soon as the wait returns.  On the main thread
(SIGINT breaks the C sleep) and in any thread outside a cell, it is the real
sleep.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable

from .core import CancellationCore

_real_sleep = time.sleep

# The longest single wait, so a lost wake-up costs an hour at most, never forever.
MAX_WAIT = 3600.0


def make_cooperative_sleep(core: CancellationCore) -> Callable[[float], None]:
    """The replacement for time.sleep, bound to `core` (installed by the Runtime)."""

    def sleep(seconds: float) -> None:
        __tracebackhide__ = True
        waker = _waker_of_this_thread(core)
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

    sleep.__doc__ = _real_sleep.__doc__
    return sleep


def _waker_of_this_thread(core: CancellationCore) -> threading.Event | None:
    if threading.current_thread() is threading.main_thread() or getattr(threading.current_thread(), "abandoned", False):
        return None
    execution = core.on_thread(threading.get_ident())
    window = execution.window if execution is not None else None
    return window.waker if window is not None else None


def install(sleep: Callable[[float], None]) -> None:
    if time.sleep is _real_sleep:
        time.sleep = sleep  # type: ignore[assignment]  # the same call, woken by interrupts


def uninstall(sleep: Callable[[float], None]) -> None:
    if time.sleep is sleep:
        time.sleep = _real_sleep


def in_cooperative_wait(frame: types.FrameType | None, sleep: Callable[[float], None]) -> bool:
    """The thread sits in our sleep's wait: it runs Python code that an interrupt reaches, not a C call."""
    code = getattr(sleep, "__code__", None)
    for _ in range(4):
        if frame is None:
            return False
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False
