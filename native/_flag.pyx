# cython: language_level=3, binding=False
"""The compiled cancellation flag: the functions of _fallback.py, plus a C SIGINT handler.

Each thread that runs an execution has a slot: one 64-bit word {int32 cancelled;
uint32 gen}, always written whole with atomic stores and compare-and-swap, so a
flag can never be seen set for any execution but the one that was cancelled,
and two cells running at once never see each other's cancel.  The exported
word ck_state is the summary every inline check loads: non-zero only while some
execution is cancelled or a GIL yield is asked, so the check stays one relaxed
load.  A C SIGINT handler chained in front of Python's cancels the parent
execution the moment an outside SIGINT arrives, even while a native loop holds
the GIL: Python's own handler only notes the signal for the interpreter to act
on between bytecodes, which such a loop never reaches.  The C code is in src/;
docs/native.md says what it gives native code.
"""

cdef extern from *:
    # This module defines the C API, so it needs the header's types but not its import helpers.
    """
    #define CANCELKERNEL_NO_IMPORT_HELPERS 1
    """

from libc.stdint cimport int32_t, uint32_t, uint64_t
from libc.math cimport isnan
from cpython.ref cimport PyObject
from cpython.pycapsule cimport PyCapsule_New

cdef extern from "Python.h":
    # Declared here with PyObject* so that NULL (clear) can be passed.
    int PyThreadState_SetAsyncExc(unsigned long id, PyObject *exc)
    int PyErr_CheckSignals()
    int PyGILState_Check() noexcept nogil
    ctypedef struct PyThreadState
    PyThreadState *PyEval_SaveThread() noexcept nogil
    void PyEval_RestoreThread(PyThreadState *) noexcept nogil
    bint PyExceptionClass_Check(object)

cdef extern from *:
    """
    /* How many thread states carry `tid`.  On 3.11 a thread being started has its
       state made by its parent, with the parent's id, until it runs: then two
       match, and SetAsyncExc would hit the first, the new thread's. */
    static int ck_threads_with_id(unsigned long tid) {
        int n = 0;
        PyThreadState *t = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
        for (; t != NULL; t = PyThreadState_Next(t)) {
            if (t->thread_id == tid) n++;
        }
        return n;
    }
    """
    int ck_threads_with_id(unsigned long tid)

cdef extern from "flag.h":
    # The C core: src/flag.c (slots), src/sigint.c, src/yield.c, compiled into this extension (setup.py).
    # ck_state_t and ck_load_cancelled come from _flag.pxd.
    enum: CK_SLOTS
    void ck_bind_summary(ck_state_t *summary) noexcept nogil
    int ck_begin(uint32_t gen, unsigned long thread_ident, int parent) noexcept nogil
    void ck_end(uint32_t gen) noexcept nogil
    int ck_cancel(uint32_t gen) noexcept nogil
    void ck_uncancel(uint32_t gen) noexcept nogil
    uint32_t ck_running_gen() noexcept nogil
    int ck_slow_check() noexcept nogil
    void ck_yield_pause(long max_us, int until_cancelled) noexcept
    int *ck_flag_ptr() noexcept nogil
    const int *ck_summary_flag() noexcept nogil
    int ck_yield_requested() noexcept nogil
    int ck_handler_installed() noexcept nogil
    int ck_install_handler() noexcept nogil
    void ck_set_main_thread(unsigned long main_thread_ident, long main_thread_native_id) noexcept nogil
    int ck_on_main_thread() noexcept nogil
    void ck_expect(uint32_t gen) noexcept nogil
    void ck_unexpect(uint32_t gen) noexcept nogil
    uint32_t ck_take_arrival() noexcept nogil
    void ck_sigint_seen() noexcept nogil
    unsigned long ck_sigint_unseen() noexcept nogil
    int ck_sigint_wake() noexcept nogil
    double ck_monotonic() noexcept nogil
    int ck_start_yield(int signum, int stall_ms) noexcept nogil
    void ck_beat() noexcept nogil
    void ck_control_acted() noexcept nogil
    void ck_yield_watch(int fd) noexcept nogil
    int ck_sleep_until(double deadline, int poll_signals) noexcept nogil

cdef extern from "cancelkernel_native.h":
    # The C API handed to plain C extensions through the _C_API capsule.
    ctypedef struct ck_c_api_t "cancelkernel_c_api":
        unsigned int version
        unsigned int size
        const int *cancelled
        int (*raise_if_cancelled)() except -1 nogil
        int (*cancellable_sleep)(double) except -1 nogil
        int (*cancel_requested_slow)() noexcept nogil
    enum: CANCELKERNEL_C_API_VERSION
    const char *CANCELKERNEL_CAPSULE_NAME

import threading as _threading

# The Python API: the names in cancelkernel.native.API, each defined below (tests/unit/test_native_flag.py checks).
available = True

# ck_state (declared in _flag.pxd) is the storage of the summary word; it starts zeroed: nothing cancelled.
ck_bind_summary(&ck_state)

# The windows: user code of execution _window_gen[i] runs on thread _window_tid[i] (gen 0: a free entry).
# Only touched with the GIL held and no Python code in between, so each
# function below is atomic with respect to the others: an async exception is only
# ever aimed at a thread while it runs that execution's user code.
cdef unsigned long long _window_gen[CK_SLOTS]
cdef unsigned long _window_tid[CK_SLOTS]

cdef ck_c_api_t _c_api

# The main thread: where SIGINT is forwarded, and where cancellable_sleep runs Python's handlers.
ck_set_main_thread(_threading.main_thread().ident, _threading.main_thread().native_id)

_FULL = f"cancelkernel.native: {CK_SLOTS} threads already run cells at once; no cancellation slot is free"


cdef inline uint32_t _gen32(object gen) except? 0:
    # Gens live in 32 bits beside the flag; 2**32 cells later one wraps, skipping 0 (= idle).
    cdef unsigned long long g = <unsigned long long>(int(gen) & 0xFFFFFFFFFFFFFFFF)
    if g == 0:
        return 0
    g &= 0xFFFFFFFF
    return <uint32_t>g if g else 1


cdef inline unsigned long long _gen64(object gen) except? 0:
    return <unsigned long long>(int(gen) & 0xFFFFFFFFFFFFFFFF)


cdef int _raise_cancelled() except -1 nogil:
    with gil:
        raise KeyboardInterrupt("cancelled")


cdef int ck_cancel_requested_slow() noexcept nogil:
    return ck_slow_check()


cdef int ck_raise_cancelled() except -1 nogil:
    # Checks for itself: modules built against the first .pxd call it whenever the summary is non-zero.
    if ck_slow_check():
        return _raise_cancelled()
    return 0


cdef int ck_cancellable_sleep(double seconds) except -1 nogil:
    cdef double deadline
    cdef int status, poll_signals
    cdef PyThreadState *ts
    if isnan(seconds) or seconds < 0:
        with gil:
            raise ValueError(f"sleep length must be a non-negative number, not {seconds!r}")
    deadline = ck_monotonic() + seconds
    poll_signals = ck_on_main_thread()
    while True:
        # Wait without the GIL even when the caller holds it.
        if PyGILState_Check():
            ts = PyEval_SaveThread()
            status = ck_sleep_until(deadline, poll_signals)
            PyEval_RestoreThread(ts)
        else:
            status = ck_sleep_until(deadline, poll_signals)
        if status == 0:
            return 0
        if status == 1:
            return _raise_cancelled()
        # A signal may be pending: run Python's handlers first, as time.sleep does.
        with gil:
            if PyErr_CheckSignals() < 0:
                return -1


# --- lifetime of an execution (the cancellation core serialises these) ---

def begin(gen, thread_id=None, parent=True):
    """Execution `gen` starts; its user code runs on `thread_id` (default: this thread), not cancelled."""
    cdef uint32_t g = _gen32(gen)
    cdef unsigned long tid = _threading.get_ident() if thread_id is None else thread_id
    if g == 0 or tid == 0:
        raise ValueError(f"begin needs a positive gen and a thread id, not {gen!r}, {thread_id!r}")
    if ck_begin(g, tid, 1 if parent else 0) < 0:
        raise RuntimeError(_FULL)


def end(gen):
    """Execution `gen` ended: its flag reads False, and nothing of it can be seen any more."""
    cdef uint32_t g = _gen32(gen)
    ck_end(g)
    ck_unexpect(g)


def cancel(gen):
    """Set `gen`'s flag if `gen` is running; return whether it is set."""
    return ck_cancel(_gen32(gen)) != 0


def uncancel(gen):
    """Clear `gen`'s flag; it keeps running."""
    ck_uncancel(_gen32(gen))


def running_gen():
    """The execution whose cancel this thread sees (its own, else the parent's); 0 if none."""
    return ck_running_gen()


def cancel_requested():
    """True while this thread's execution (its own, else the parent's) is cancelled."""
    return ck_load_cancelled(&ck_state) != 0 and ck_slow_check() != 0


def raise_if_cancelled():
    """Raise KeyboardInterrupt if this thread's execution has been cancelled."""
    if ck_load_cancelled(&ck_state) != 0 and ck_slow_check() != 0:
        raise KeyboardInterrupt("cancelled")


def cancellable_sleep(seconds):
    """Sleep, but raise KeyboardInterrupt within about a millisecond of a cancel of this thread's execution."""
    ck_cancellable_sleep(float(seconds))


def flag_address():
    """Address of a C int that is non-zero while this thread's execution is cancelled (call it in the cell)."""
    cdef int *p = ck_flag_ptr()
    if p == NULL:
        raise RuntimeError(_FULL)
    return <size_t>p


# --- SIGINT attribution: the C handler tells the kernel's own SIGINT from an outside one ---

def expect_sigint(gen):
    """The kernel is about to SIGINT its main thread for `gen`: the C handler only chains it."""
    ck_expect(_gen32(gen))


def take_sigint_arrival():
    """Parent gen the last outside SIGINT cancelled (0: idle or none; -1: cannot tell)."""
    cdef uint32_t arrival = ck_take_arrival()
    if arrival != 0:
        return arrival
    # Without our handler in front (a cell replaced it) a SIGINT left no trace: cannot tell.
    return 0 if ck_handler_installed() == 1 else -1


def sigint_seen():
    """Python's SIGINT handler runs: every SIGINT that reached the C handler so far is seen."""
    ck_sigint_seen()


def sigint_unseen():
    """SIGINTs that reached the C handler on the main thread and that Python's handler has not seen."""
    return ck_sigint_unseen()


def sigint_wake():
    """Send the main thread one more SIGINT, taken as re-sent: a blocking call breaks, Python looks at its flag."""
    if ck_sigint_wake() != 0:
        raise OSError("pthread_kill(main thread, SIGINT) failed")


def install_sigint_handler():
    """Chain the C handler in front of the current SIGINT action (again, if replaced)."""
    if ck_install_handler() < 0:
        raise OSError("sigaction(SIGINT) failed")
    return True


def sigint_handler_installed():
    """True iff the C handler is the current SIGINT action (signal.signal() replaces it)."""
    return ck_handler_installed() == 1


# --- GIL yield: see src/yield.c ---

def start_gil_yield(signum, stall_seconds):
    """When the heartbeat stalls `stall_seconds` mid-execution, ask cancel points to yield the GIL (and send `signum`, unless 0)."""
    cdef int stall_ms = max(20, int(float(stall_seconds) * 1000))
    if ck_start_yield(int(signum), stall_ms) < 0:
        raise OSError("could not start the GIL-yield thread")
    return True


def yield_for_readable(fd):
    """While a cell runs, a message left unread on `fd` (the control socket's) for 0.1 ms asks for the GIL yield at once."""
    ck_yield_watch(int(fd))


def gil_heartbeat():
    """Called by the watchdog on every tick: proof that Python threads still get the GIL (clears the yield bit)."""
    ck_beat()


def control_acted():
    """The control thread acted on a message (delivered an interrupt, answered): a yield asked for it ends."""
    ck_control_acted()


def yield_requested():
    """True while cancel points are asked to yield the GIL."""
    return ck_yield_requested() != 0


def yield_pause(seconds):
    """Let go of the GIL while a yield is asked (until the thread that asked acted, or a signal came), at most `seconds`."""
    ck_yield_pause(<long>(float(seconds) * 1e6), 0)


# --- async exceptions into worker threads, atomic with respect to the windows ---

def open_window(gen, thread_id):
    """User code of execution `gen` starts running on thread `thread_id`."""
    cdef unsigned long long g = _gen64(gen)
    cdef unsigned long tid = thread_id
    cdef int i, free = -1
    if g == 0:
        return
    for i in range(CK_SLOTS):
        if _window_gen[i] == g:  # one window per execution: reopened, it moves
            _window_gen[i] = 0
        if _window_gen[i] == 0 and free < 0:
            free = i
    if free < 0:
        raise RuntimeError(_FULL)
    _window_tid[free] = tid
    _window_gen[free] = g


def close_window(gen, thread_id):
    """User code stopped: no exception can be aimed at that thread for `gen` any more.

    One already pending is left for the thread to take (the core lets it fire and drops it):
    clearing it with SetAsyncExc(tid, NULL) would leave the interpreter's async-exception signal
    set for good on 3.11 and 3.12, slowing every thread, and spinning a traced one on 3.11.
    """
    cdef unsigned long long g = _gen64(gen)
    cdef unsigned long tid = thread_id
    cdef int i
    for i in range(CK_SLOTS):
        if g != 0 and _window_gen[i] == g and _window_tid[i] == tid:
            _window_gen[i] = 0


def raise_in_window(gen, exc_class):
    """Raise `exc_class` in the thread running `gen`'s user code, if it still is."""
    cdef unsigned long long g = _gen64(gen)
    cdef int i
    if not PyExceptionClass_Check(exc_class):
        raise TypeError(f"raise_in_window needs an exception class, not {exc_class!r}")
    if g == 0:
        return False
    for i in range(CK_SLOTS):
        if _window_gen[i] == g:
            if ck_threads_with_id(_window_tid[i]) != 1:
                return False  # it is starting a thread that still has its id: the caller tries again
            return PyThreadState_SetAsyncExc(_window_tid[i], <PyObject *>exc_class) == 1
    return False


# --- the C API capsule (cancelkernel_native.h: cancelkernel_import()) ---

_c_api.version = CANCELKERNEL_C_API_VERSION
_c_api.size = sizeof(ck_c_api_t)
_c_api.cancelled = ck_summary_flag()
_c_api.raise_if_cancelled = ck_raise_cancelled
_c_api.cancellable_sleep = ck_cancellable_sleep
_c_api.cancel_requested_slow = ck_cancel_requested_slow
_C_API = PyCapsule_New(<void *>&_c_api, CANCELKERNEL_CAPSULE_NAME, NULL)
