"""Pure-Python stand-in for the compiled cancellation flag.

Used when the Cython module cannot be imported (no compiler at install time,
or CANCELKERNEL_NATIVE=0).  Same functions, same meaning; what it cannot do is
set the flag from a C signal handler, so code that holds the GIL is not reached.
"""

from __future__ import annotations

import ctypes
import math
import threading
import time

__all__ = [
    "available", "begin", "end", "cancel", "running_gen", "cancel_requested", "raise_if_cancelled",
    "cancellable_sleep", "flag_address", "expect_sigint", "take_sigint_arrival", "install_sigint_handler",
    "sigint_handler_installed", "open_window", "close_window", "raise_in_window", "start_gil_yield", "gil_heartbeat",
]

available = False

# A C int that native callers (ctypes) may poll; non-zero while the running
# execution is cancelled.
_flag = ctypes.c_int(0)
_lock = threading.Lock()  # guards _window only
_running_gen = 0
_window: tuple[int, int] | None = None  # (gen, thread id) while user code runs off the main thread


def _set_async_exc(thread_id: int, exc_class: type | None) -> int:
    # None must reach C as NULL (clear), not as Py_None, so no argtypes here.
    arg = None if exc_class is None else ctypes.py_object(exc_class)
    return ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), arg)


# begin/end/cancel take no lock: the caller (the cancellation core) serialises
# them, and a signal handler on the main thread may call cancel() while the
# main thread is inside begin() or end(), where a lock would deadlock.

def begin(gen: int) -> None:
    """Mark execution `gen` as running and not cancelled."""
    global _running_gen
    _flag.value = 0
    _running_gen = gen


def end(gen: int) -> None:
    """Mark execution `gen` as ended; the flag reads False until the next begin."""
    global _running_gen
    if _running_gen == gen:
        _running_gen = 0
        _flag.value = 0


def cancel(gen: int) -> bool:
    """Set the flag if `gen` is the running execution; return whether it is set."""
    if gen and _running_gen == gen:
        _flag.value = 1
        if _running_gen != gen:  # it ended meanwhile: never leave the flag set for another
            _flag.value = 0
            return False
        return True
    return False


def running_gen() -> int:
    """The generation of the running execution, 0 while idle."""
    return _running_gen


def cancel_requested() -> bool:
    """True while the running execution has been cancelled."""
    return bool(_flag.value)


def raise_if_cancelled() -> None:
    """Raise KeyboardInterrupt if the running execution has been cancelled."""
    if _flag.value:
        raise KeyboardInterrupt("cancelled")


def cancellable_sleep(seconds: float) -> None:
    """Sleep, but raise KeyboardInterrupt within about a millisecond of a cancel."""
    seconds = float(seconds)
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(f"sleep length must be a non-negative number, not {seconds!r}")
    deadline = time.monotonic() + seconds
    while True:
        raise_if_cancelled()
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.001))


def flag_address() -> int:
    """Address of a C int that is non-zero while the running execution is cancelled."""
    return ctypes.addressof(_flag)


# --- SIGINT attribution: without a C handler the Python handler decides alone.

def expect_sigint(gen: int) -> None:
    """No-op here: only the C handler needs to know a SIGINT is our own."""


def take_sigint_arrival() -> int:
    """-1: this build cannot tell which execution was running when a SIGINT arrived."""
    return -1


def install_sigint_handler() -> bool:
    """No C handler to install in the fallback."""
    return False


def sigint_handler_installed() -> bool:
    return False


# --- GIL yield needs a C thread that runs without the GIL: not in the fallback.

def start_gil_yield(signum: int, stall_seconds: float) -> bool:
    """Not available without the compiled module."""
    return False


def gil_heartbeat() -> None:
    """Nothing listens in the fallback."""


# --- Async exceptions into a worker thread, atomic with respect to the window.

def open_window(gen: int, thread_id: int) -> None:
    """User code of execution `gen` starts running on thread `thread_id`."""
    global _window
    with _lock:
        _window = (gen, thread_id)


def close_window(gen: int, thread_id: int) -> None:
    """User code stopped; drop any async exception still pending for that thread."""
    global _window
    with _lock:
        if _window == (gen, thread_id):
            _window = None
        _set_async_exc(thread_id, None)


def raise_in_window(gen: int, exc_class: type) -> bool:
    """Raise `exc_class` in the thread running `gen`'s user code, if it still is."""
    if not (isinstance(exc_class, type) and issubclass(exc_class, BaseException)):
        # An instance would reach the target thread as a SystemError instead.
        raise TypeError(f"raise_in_window needs an exception class, not {exc_class!r}")
    with _lock:
        if _window is None or _window[0] != gen:
            return False
        return _set_async_exc(_window[1], exc_class) == 1
