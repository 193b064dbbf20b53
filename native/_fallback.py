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

# Taken at import: cooperative waits replace time.sleep with one an interrupt ends early.
_real_sleep = time.sleep

# The Python API: the names in cancelkernel.native.API, each defined below (tests/unit/test_native_flag.py checks);
# every other name here starts with an underscore.
available = False

_SLOTS = 128  # as many threads as the compiled flag lets run executions at once (CK_SLOTS in src/flag.h)
_FULL = f"cancelkernel.native: {_SLOTS} threads already run cells at once; no cancellation slot is free"


class _Slot:
    """One thread's execution: `gen` runs (0: idle) and is cancelled iff `cancelled_gen == gen`."""

    __slots__ = ("cancelled_gen", "flag", "gen", "owner")

    def __init__(self, owner: int) -> None:
        self.owner = owner
        self.gen = 0
        self.cancelled_gen = 0  # written only by cancel() for its own gen, so a stale cancel reads as not set
        self.flag = ctypes.c_int(0)  # what flag_address() hands to native callers (ctypes)

    def is_cancelled(self) -> bool:
        cancelled = self.cancelled_gen
        return cancelled != 0 and cancelled == self.gen


_slots: dict[int, _Slot] = {}  # thread id -> its slot
_slot_list: tuple[_Slot, ...] = ()  # every slot, replaced whole, so readers iterate without a lock
_parent: tuple[int, _Slot] | None = None  # (gen, slot) of the parent shell's execution
_alloc_lock = threading.Lock()  # guards slot allocation only: begin() and flag_address(), never a signal handler
_lock = threading.Lock()  # guards _windows only
_windows: dict[int, int] = {}  # gen -> thread id while that execution's user code runs off the main thread


def _set_async_exc(thread_id: int, exc_class: type | None) -> int:
    # None must reach C as NULL (clear), not as Py_None, so no argtypes here.
    arg = None if exc_class is None else ctypes.py_object(exc_class)
    return int(ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), arg))


def _claim(thread_id: int) -> _Slot:
    """The slot `thread_id` owns, else a new one, else an idle one (its owner runs no execution)."""
    global _slot_list
    with _alloc_lock:
        slot = _slots.get(thread_id)
        if slot is not None:
            return slot
        if len(_slot_list) < _SLOTS:
            slot = _Slot(thread_id)
            _slot_list = (*_slot_list, slot)
        else:
            slot = next((s for s in _slot_list if s.gen == 0), None)
            if slot is None:
                raise RuntimeError(_FULL)
            _slots.pop(slot.owner, None)
            slot.owner = thread_id
        _slots[thread_id] = slot
        return slot


def _find(gen: int) -> _Slot | None:
    parent = _parent
    if parent is not None and parent[0] == gen and parent[1].gen == gen:
        return parent[1]
    return next((s for s in _slot_list if s.gen == gen), None) if gen else None


def _clear(slot: _Slot) -> None:
    slot.gen = 0  # first: from here on nobody reads this slot's cancel
    slot.cancelled_gen = 0
    slot.flag.value = 0


def _drop_parent(gen: int) -> None:
    global _parent
    parent = _parent
    if parent is not None and parent[0] == gen:
        _parent = None


def _view() -> _Slot | None:
    """The calling thread's slot while it runs an execution, else the parent's slot; None: neither."""
    slot = _slots.get(threading.get_ident())
    if slot is not None and slot.gen:
        return slot
    parent = _parent
    if parent is not None and parent[1].gen == parent[0]:
        return parent[1]
    return None


# begin/end/cancel take no lock on the state: the caller (the cancellation core)
# serialises them, and a signal handler on the main thread may call cancel()
# while the main thread is inside begin() or end(), where a lock would deadlock.


def begin(gen: int, thread_id: int | None = None, parent: bool = True) -> None:
    """Execution `gen` starts; its user code runs on `thread_id` (default: this thread), not cancelled."""
    global _parent
    tid = threading.get_ident() if thread_id is None else int(thread_id)
    if not gen or not tid:
        raise ValueError(f"begin needs a positive gen and a thread id, not {gen!r}, {thread_id!r}")
    slot = _claim(tid)
    for other in _slot_list:
        if other is not slot and other.gen == gen:  # an execution runs on one thread: begun again, it moves
            _clear(other)
    old = slot.gen
    slot.cancelled_gen = 0
    slot.flag.value = 0
    slot.gen = gen
    if parent:
        _parent = (gen, slot)
    else:
        _drop_parent(gen)
        _drop_parent(old)  # replaced on its thread: no longer running


def end(gen: int) -> None:
    """Execution `gen` ended: its flag reads False, and nothing of it can be seen any more."""
    if not gen:
        return
    _drop_parent(gen)
    for slot in _slot_list:
        if slot.gen == gen:
            _clear(slot)


def cancel(gen: int) -> bool:
    """Set `gen`'s flag if `gen` is running; return whether it is set."""
    slot = _find(gen)
    if slot is None:
        return False
    slot.cancelled_gen = gen
    slot.flag.value = 1
    if slot.gen != gen:  # it ended meanwhile: never leave the flag set for another
        if slot.cancelled_gen == gen:
            slot.cancelled_gen = 0
        if not slot.is_cancelled():
            slot.flag.value = 0
        return False
    return True


def uncancel(gen: int) -> None:
    """Clear `gen`'s flag; it keeps running."""
    slot = _find(gen)
    if slot is not None and slot.cancelled_gen == gen:
        slot.cancelled_gen = 0
        slot.flag.value = 0


def running_gen() -> int:
    """The execution whose cancel this thread sees (its own, else the parent's); 0 if none."""
    slot = _view()
    return slot.gen if slot is not None else 0


def cancel_requested() -> bool:
    """True while this thread's execution (its own, else the parent's) is cancelled."""
    slot = _view()
    return slot is not None and slot.is_cancelled()


def raise_if_cancelled() -> None:
    """Raise KeyboardInterrupt if this thread's execution has been cancelled."""
    if cancel_requested():
        raise KeyboardInterrupt("cancelled")


def cancellable_sleep(seconds: float) -> None:
    """Sleep, but raise KeyboardInterrupt within about a millisecond of a cancel of this thread's execution."""
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
    """Address of a C int that is non-zero while this thread's execution is cancelled (call it in the cell)."""
    slot = _view() or _claim(threading.get_ident())
    return ctypes.addressof(slot.flag)


# --- SIGINT attribution: without a C handler the Python handler decides alone.


def expect_sigint(gen: int) -> None:
    """No-op here: only the C handler needs to know a SIGINT is our own."""


def take_sigint_arrival() -> int:
    """-1: this build cannot tell which execution was running when a SIGINT arrived."""
    return -1


def sigint_seen() -> None:
    """No-op here: without the C handler no SIGINT is counted."""


def sigint_unseen() -> int:
    """0: without the C handler no SIGINT is counted, so none is known to be unseen."""
    return 0


def sigint_wake() -> None:
    """Never called: sigint_unseen is always 0 here."""


def install_sigint_handler() -> bool:
    """No C handler to install in the fallback."""
    return False


def sigint_handler_installed() -> bool:
    return False


# --- GIL yield needs a C thread that runs without the GIL: not in the fallback.


def start_gil_yield(signum: int, stall_seconds: float) -> bool:
    """Not available without the compiled module."""
    return False


def yield_for_readable(fd: int) -> None:
    """No yield thread to watch it."""


def gil_heartbeat() -> None:
    """Nothing listens in the fallback."""


def control_acted() -> None:
    """No yield thread asks for it."""


def yield_requested() -> bool:
    """No yield thread, so never."""
    return False


def yield_pause(seconds: float) -> None:
    """No yield bit to watch: let go of the GIL for the whole time (the real sleep: a pause never raises)."""
    _real_sleep(seconds)


# --- Async exceptions into worker threads, atomic with respect to the windows.


def open_window(gen: int, thread_id: int) -> None:
    """User code of execution `gen` starts running on thread `thread_id`."""
    with _lock:
        _windows[gen] = thread_id


def close_window(gen: int, thread_id: int) -> None:
    """User code stopped: no exception can be aimed at that thread for `gen` any more (one pending is left to fire)."""
    with _lock:
        if _windows.get(gen) == thread_id:
            del _windows[gen]


def raise_in_window(gen: int, exc_class: type[BaseException]) -> bool:
    """Raise `exc_class` in the thread running `gen`'s user code, if it still is."""
    if not (isinstance(exc_class, type) and issubclass(exc_class, BaseException)):
        # An instance would reach the target thread as a SystemError instead.
        raise TypeError(f"raise_in_window needs an exception class, not {exc_class!r}")
    with _lock:
        thread_id = _windows.get(gen)
        if thread_id is None or not gen:
            return False
        return _set_async_exc(thread_id, exc_class) == 1
