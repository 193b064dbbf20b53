# cython: language_level=3, binding=False
"""The compiled cancellation flag: the functions of _fallback.py, plus a C SIGINT handler.

State is one 64-bit word {int32 cancelled; uint32 gen}, always written whole
with atomic stores and compare-and-swap, so the flag can never be seen set for
any execution but the one that was cancelled.  A C SIGINT handler chained in
front of Python's sets it the moment an outside SIGINT arrives, even while a
native loop holds the GIL (cancellation-facts.md §5).
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
    #include <errno.h>
    #include <pthread.h>
    #include <signal.h>
    #include <string.h>
    #include <time.h>

    /* --- the state word (the storage is the Cython variable ck_state) --- */

    static inline uint64_t ck_pack(int32_t cancelled, uint32_t gen) {
        ck_state_t s;
        s.f.cancelled = cancelled;
        s.f.gen = gen;
        return s.word;
    }

    static inline uint32_t ck_load_gen(ck_state_t *s) {
        ck_state_t cur;
        cur.word = __atomic_load_n(&s->word, __ATOMIC_ACQUIRE);
        return cur.f.gen;
    }

    static inline void ck_begin(ck_state_t *s, uint32_t gen) {
        __atomic_store_n(&s->word, ck_pack(0, gen), __ATOMIC_RELEASE);
    }

    static inline void ck_end(ck_state_t *s, uint32_t gen) {
        uint64_t old = __atomic_load_n(&s->word, __ATOMIC_ACQUIRE);
        for (;;) {
            ck_state_t cur;
            cur.word = old;
            if (cur.f.gen != gen) return;  /* another execution's word: not ours to clear */
            if (__atomic_compare_exchange_n(&s->word, &old, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
        }
    }

    /* Async-signal-safe: only atomics.  Returns 1 if `gen` is running and now cancelled. */
    static inline int ck_cancel(ck_state_t *s, uint32_t gen) {
        if (gen == 0) return 0;
        uint64_t old = __atomic_load_n(&s->word, __ATOMIC_ACQUIRE);
        for (;;) {
            ck_state_t cur;
            cur.word = old;
            if (cur.f.gen != gen) return 0;
            if (cur.f.cancelled) return 1;
            if (__atomic_compare_exchange_n(&s->word, &old, ck_pack(1, gen), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                return 1;
        }
    }

    static inline int *ck_cancelled_ptr(ck_state_t *s) { return (int *)&s->f.cancelled; }

    /* --- SIGINT: a C handler chained in front of Python's --- */

    static ck_state_t *ck_sig_state;     /* the exported flag, bound at module init */
    static uint32_t ck_expected_gen;     /* the kernel is about to SIGINT itself for this gen */
    static uint32_t ck_arrival_gen;      /* gen running when the last outside SIGINT arrived */
    static int ck_forwarded;             /* a SIGINT re-sent to the main thread is on its way */
    static pthread_t ck_main_thread;
    static int ck_have_main_thread;
    /* Two slots so a handler still running on another thread never reads a half-written action. */
    static struct sigaction ck_prev[2];
    static int ck_prev_index;

    static void ck_sigint_handler(int sig, siginfo_t *info, void *ctx);

    static void ck_chain(int sig, siginfo_t *info, void *ctx) {
        const struct sigaction *prev = &ck_prev[__atomic_load_n(&ck_prev_index, __ATOMIC_ACQUIRE)];
        if (prev->sa_flags & SA_SIGINFO) {
            if (prev->sa_sigaction != NULL && prev->sa_sigaction != ck_sigint_handler)
                prev->sa_sigaction(sig, info, ctx);
        } else if (prev->sa_handler == SIG_DFL) {
            /* The default action of SIGINT ends the process: restore it and let it happen on return. */
            sigaction(sig, prev, NULL);
            raise(sig);
        } else if (prev->sa_handler != SIG_IGN && prev->sa_handler != NULL) {
            prev->sa_handler(sig);
        }
    }

    /* An outside SIGINT (kill -INT, Ctrl-C, signal interrupt mode) cancels the running execution. */
    static void ck_outside_sigint(void) {
        uint32_t gen = ck_load_gen(ck_sig_state);
        if (gen != 0 && ck_cancel(ck_sig_state, gen))
            __atomic_store_n(&ck_arrival_gen, gen, __ATOMIC_RELEASE);
    }

    static void ck_sigint_handler(int sig, siginfo_t *info, void *ctx) {
        int saved_errno = errno;
        if (ck_have_main_thread && !pthread_equal(pthread_self(), ck_main_thread)) {
            /* Never the kernel's own SIGINT (that one is sent to the main thread), so
               record it, then re-send it to the main thread, whose blocking calls only
               a SIGINT delivered there can break. */
            ck_outside_sigint();
            __atomic_store_n(&ck_forwarded, 1, __ATOMIC_RELEASE);
            if (pthread_kill(ck_main_thread, sig) != 0) {
                __atomic_store_n(&ck_forwarded, 0, __ATOMIC_RELEASE);
                ck_chain(sig, info, ctx);
            }
            errno = saved_errno;
            return;
        }
        int forwarded = __atomic_exchange_n(&ck_forwarded, 0, __ATOMIC_ACQ_REL);
        uint32_t expected = __atomic_exchange_n(&ck_expected_gen, 0, __ATOMIC_ACQ_REL);
        if (!forwarded && expected == 0)
            ck_outside_sigint();
        ck_chain(sig, info, ctx);
        errno = saved_errno;
    }

    static unsigned long ck_main_ident;  /* the same thread as CPython's thread ident */

    /* CPython makes the forking thread the child's main thread; follow it, or a
       fork from a worker thread would forward SIGINT to a thread that does not exist. */
    static void ck_after_fork_child(void) {
        ck_main_thread = pthread_self();
        ck_main_ident = PyThread_get_thread_ident();
        __atomic_store_n(&ck_forwarded, 0, __ATOMIC_RELAXED);
    }

    static void ck_set_main_thread(unsigned long main_thread_ident) {
        static int atfork_registered;
        /* CPython's thread ident is the pthread_t (what signal.pthread_kill relies on too). */
        ck_main_thread = (pthread_t)main_thread_ident;
        ck_main_ident = main_thread_ident;
        ck_have_main_thread = 1;
        if (!atfork_registered && pthread_atfork(NULL, NULL, ck_after_fork_child) == 0)
            atfork_registered = 1;
    }

    static int ck_on_main_thread(void) { return PyThread_get_thread_ident() == ck_main_ident; }

    static int ck_action_is_ours(const struct sigaction *a) {
        return (a->sa_flags & SA_SIGINFO) && a->sa_sigaction == ck_sigint_handler;
    }

    static int ck_handler_installed(void) {
        struct sigaction cur;
        if (sigaction(SIGINT, NULL, &cur) != 0) return -1;
        return ck_action_is_ours(&cur);
    }

    /* 0: already ours, 1: installed in front of the current action, -1: errno set. */
    static int ck_install_handler(ck_state_t *state) {
        struct sigaction cur, act;
        ck_sig_state = state;
        if (sigaction(SIGINT, NULL, &cur) != 0) return -1;
        if (ck_action_is_ours(&cur)) return 0;
        int next = 1 - __atomic_load_n(&ck_prev_index, __ATOMIC_ACQUIRE);
        ck_prev[next] = cur;
        __atomic_store_n(&ck_prev_index, next, __ATOMIC_RELEASE);
        memset(&act, 0, sizeof act);
        act.sa_sigaction = ck_sigint_handler;
        act.sa_mask = cur.sa_mask;
        /* Keep SA_RESTART as Python set it, so blocking calls see EINTR exactly as before. */
        act.sa_flags = SA_SIGINFO | SA_ONSTACK | (cur.sa_flags & SA_RESTART);
        if (sigaction(SIGINT, &act, NULL) != 0) return -1;
        return 1;
    }

    static inline void ck_expect(uint32_t gen) { __atomic_store_n(&ck_expected_gen, gen, __ATOMIC_RELEASE); }

    static inline void ck_unexpect(uint32_t gen) {
        uint32_t want = gen;
        __atomic_compare_exchange_n(&ck_expected_gen, &want, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }

    static inline uint32_t ck_take_arrival(void) { return __atomic_exchange_n(&ck_arrival_gen, 0, __ATOMIC_ACQ_REL); }

    /* --- GIL yield: ask one C call that holds the GIL to let other threads run ---
       The kernel's watchdog bumps ck_heartbeat every tick; if it stops moving while
       an execution runs, one C call holds the GIL.  Many such calls (the regex engine,
       cooperative extensions) still check Python's signals: a signal whose Python
       handler sleeps a moment hands the GIL to the control thread, which can then
       read the interrupt request.  Code that checks nothing is not affected. */

    static unsigned long ck_heartbeat;
    static int ck_yield_signal;
    static int ck_yield_stall_ms;
    static int ck_yield_running;
    static ck_state_t *ck_yield_state;

    static void *ck_yield_main(void *unused) {
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, NULL);  /* no signal is ever handled on this thread */
        unsigned long last = 0;
        int stalled = 0;
        struct timespec tick = {0, 10 * 1000 * 1000};
        for (;;) {
            nanosleep(&tick, NULL);
            unsigned long beat = __atomic_load_n(&ck_heartbeat, __ATOMIC_RELAXED);
            if (ck_load_gen(ck_yield_state) == 0 || beat != last) {
                last = beat;
                stalled = 0;
                continue;
            }
            stalled += 10;
            if (stalled >= __atomic_load_n(&ck_yield_stall_ms, __ATOMIC_RELAXED) && ck_have_main_thread) {
                pthread_kill(ck_main_thread, __atomic_load_n(&ck_yield_signal, __ATOMIC_RELAXED));
                stalled = 0;
            }
        }
        return NULL;
    }

    /* 0: started (or already running, parameters updated), -1: pthread_create failed. */
    static int ck_start_yield(ck_state_t *state, int signum, int stall_ms) {
        __atomic_store_n(&ck_yield_signal, signum, __ATOMIC_RELAXED);
        __atomic_store_n(&ck_yield_stall_ms, stall_ms, __ATOMIC_RELAXED);
        if (ck_yield_running) return 0;
        ck_yield_state = state;
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&thread, &attr, ck_yield_main, NULL);
        pthread_attr_destroy(&attr);
        if (rc != 0) return -1;
        ck_yield_running = 1;
        return 0;
    }

    static inline void ck_beat(void) { __atomic_add_fetch(&ck_heartbeat, 1, __ATOMIC_RELAXED); }

    /* --- cancellable sleep --- */

    static double ck_monotonic(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    }

    /* Sleep in slices of at most 1 ms.  0: deadline reached, 1: cancelled,
       2: a signal arrived or, if poll_signals, 20 slices passed (run Python's handlers). */
    static int ck_sleep_until(ck_state_t *s, double deadline, int poll_signals) {
        int slices = 0;
        for (;;) {
            if (ck_load_cancelled(s)) return 1;
            double left = deadline - ck_monotonic();
            if (left <= 0) return 0;
            if (left > 1e-3) left = 1e-3;
            struct timespec ts;
            ts.tv_sec = 0;
            ts.tv_nsec = (long)(left * 1e9);
            if (nanosleep(&ts, NULL) != 0 && errno == EINTR) return 2;
            /* A SIGINT that landed on another thread only trips Python's flag: look now and then. */
            if (poll_signals && ++slices >= 20) return 2;
        }
    }
    """
    uint32_t ck_load_gen(ck_state_t *s) noexcept nogil
    void ck_begin(ck_state_t *s, uint32_t gen) noexcept nogil
    void ck_end(ck_state_t *s, uint32_t gen) noexcept nogil
    int ck_cancel(ck_state_t *s, uint32_t gen) noexcept nogil
    int *ck_cancelled_ptr(ck_state_t *s) noexcept nogil
    int ck_handler_installed() noexcept nogil
    int ck_install_handler(ck_state_t *state) noexcept nogil
    void ck_set_main_thread(unsigned long main_thread_ident) noexcept nogil
    int ck_on_main_thread() noexcept nogil
    void ck_expect(uint32_t gen) noexcept nogil
    void ck_unexpect(uint32_t gen) noexcept nogil
    uint32_t ck_take_arrival() noexcept nogil
    double ck_monotonic() noexcept nogil
    int ck_start_yield(ck_state_t *state, int signum, int stall_ms) noexcept nogil
    void ck_beat() noexcept nogil
    int ck_sleep_until(ck_state_t *s, double deadline, int poll_signals) noexcept nogil

cdef extern from "cancelkernel_native.h":
    # The C API handed to plain C extensions through the _C_API capsule.
    ctypedef struct ck_c_api_t "cancelkernel_c_api":
        unsigned int version
        unsigned int size
        const int *cancelled
        int (*raise_if_cancelled)() except -1 nogil
        int (*cancellable_sleep)(double) except -1 nogil
    enum: CANCELKERNEL_C_API_VERSION
    const char *CANCELKERNEL_CAPSULE_NAME

import threading as _threading

__all__ = [
    "available", "begin", "end", "cancel", "running_gen", "cancel_requested", "raise_if_cancelled",
    "cancellable_sleep", "flag_address", "expect_sigint", "take_sigint_arrival", "install_sigint_handler",
    "sigint_handler_installed", "open_window", "close_window", "raise_in_window", "start_gil_yield", "gil_heartbeat",
]

available = True

# ck_state (declared in _flag.pxd) is the storage; it starts zeroed: no execution, not cancelled.

# The window: user code of execution `_window_gen` runs on thread `_window_tid` (worker mode).
# Only touched with the GIL held and no Python code in between, so each
# function below is atomic with respect to the others (cancellation-facts.md §4).
cdef unsigned long long _window_gen = 0
cdef unsigned long _window_tid = 0

cdef ck_c_api_t _c_api

# The main thread: where SIGINT is forwarded, and where cancellable_sleep runs Python's handlers.
ck_set_main_thread(_threading.main_thread().ident)


cdef inline uint32_t _gen32(object gen) except? 0:
    # Gens live in 32 bits beside the flag; 2**32 cells later one wraps, skipping 0 (= idle).
    cdef unsigned long long g = <unsigned long long>(int(gen) & 0xFFFFFFFFFFFFFFFF)
    if g == 0:
        return 0
    g &= 0xFFFFFFFF
    return <uint32_t>g if g else 1


cdef inline unsigned long long _gen64(object gen) except? 0:
    return <unsigned long long>(int(gen) & 0xFFFFFFFFFFFFFFFF)


cdef int ck_raise_cancelled() except -1 nogil:
    with gil:
        raise KeyboardInterrupt("cancelled")


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
            status = ck_sleep_until(&ck_state, deadline, poll_signals)
            PyEval_RestoreThread(ts)
        else:
            status = ck_sleep_until(&ck_state, deadline, poll_signals)
        if status == 0:
            return 0
        if status == 1:
            return ck_raise_cancelled()
        # A signal may be pending: run Python's handlers first, as time.sleep does.
        with gil:
            if PyErr_CheckSignals() < 0:
                return -1


# --- lifetime of an execution (the cancellation core serialises these) ---

def begin(gen):
    """Mark execution `gen` as running and not cancelled."""
    ck_begin(&ck_state, _gen32(gen))


def end(gen):
    """Mark execution `gen` as ended; the flag reads False until the next begin."""
    cdef uint32_t g = _gen32(gen)
    ck_end(&ck_state, g)
    ck_unexpect(g)


def cancel(gen):
    """Set the flag if `gen` is the running execution; return whether it is set."""
    return ck_cancel(&ck_state, _gen32(gen)) != 0


def running_gen():
    """The generation of the running execution, 0 while idle."""
    return ck_load_gen(&ck_state)


def cancel_requested():
    """True while the running execution has been cancelled."""
    return ck_load_cancelled(&ck_state) != 0


def raise_if_cancelled():
    """Raise KeyboardInterrupt if the running execution has been cancelled."""
    if ck_load_cancelled(&ck_state) != 0:
        raise KeyboardInterrupt("cancelled")


def cancellable_sleep(seconds):
    """Sleep, but raise KeyboardInterrupt within about a millisecond of a cancel."""
    ck_cancellable_sleep(float(seconds))


def flag_address():
    """Address of a C int that is non-zero while the running execution is cancelled."""
    return <size_t>ck_cancelled_ptr(&ck_state)


# --- SIGINT attribution: the C handler tells the kernel's own SIGINT from an outside one ---

def expect_sigint(gen):
    """The kernel is about to SIGINT its main thread for `gen`: the C handler only chains it."""
    ck_expect(_gen32(gen))


def take_sigint_arrival():
    """Gen running when the last outside SIGINT arrived (0: idle or none; -1: cannot tell)."""
    cdef uint32_t arrival = ck_take_arrival()
    if arrival != 0:
        return arrival
    # Without our handler in front (a cell replaced it) a SIGINT left no trace: cannot tell.
    return 0 if ck_handler_installed() == 1 else -1


def install_sigint_handler():
    """Chain the C handler in front of the current SIGINT action (again, if replaced)."""
    if ck_install_handler(&ck_state) < 0:
        raise OSError("sigaction(SIGINT) failed")
    return True


def sigint_handler_installed():
    """True iff the C handler is the current SIGINT action (signal.signal() replaces it)."""
    return ck_handler_installed() == 1


# --- GIL yield (main mode): see ck_yield_main above ---

def start_gil_yield(signum, stall_seconds):
    """Send `signum` to the main thread when the watchdog's heartbeat stalls `stall_seconds` mid-execution."""
    cdef int stall_ms = max(20, int(float(stall_seconds) * 1000))
    if ck_start_yield(&ck_state, int(signum), stall_ms) < 0:
        raise OSError("could not start the GIL-yield thread")
    return True


def gil_heartbeat():
    """Called by the watchdog on every tick: proof that Python threads still get the GIL."""
    ck_beat()


# --- async exceptions into a worker thread, atomic with respect to the window ---

def open_window(gen, thread_id):
    """User code of execution `gen` starts running on thread `thread_id`."""
    global _window_gen, _window_tid
    cdef unsigned long long g = _gen64(gen)
    cdef unsigned long tid = thread_id
    _window_gen = g
    _window_tid = tid


def close_window(gen, thread_id):
    """User code stopped; drop any async exception still pending for that thread."""
    global _window_gen, _window_tid
    cdef unsigned long long g = _gen64(gen)
    cdef unsigned long tid = thread_id
    if _window_gen == g and _window_tid == tid:
        _window_gen = 0
        _window_tid = 0
    PyThreadState_SetAsyncExc(tid, NULL)


def raise_in_window(gen, exc_class):
    """Raise `exc_class` in the thread running `gen`'s user code, if it still is."""
    cdef unsigned long long g = _gen64(gen)
    if not PyExceptionClass_Check(exc_class):
        raise TypeError(f"raise_in_window needs an exception class, not {exc_class!r}")
    if g == 0 or _window_gen != g:
        return False
    return PyThreadState_SetAsyncExc(_window_tid, <PyObject *>exc_class) == 1


# --- the C API capsule (cancelkernel_native.h: cancelkernel_import()) ---

_c_api.version = CANCELKERNEL_C_API_VERSION
_c_api.size = sizeof(ck_c_api_t)
_c_api.cancelled = ck_cancelled_ptr(&ck_state)
_c_api.raise_if_cancelled = ck_raise_cancelled
_c_api.cancellable_sleep = ck_cancellable_sleep
_C_API = PyCapsule_New(<void *>&_c_api, CANCELKERNEL_CAPSULE_NAME, NULL)
