/* flag.c: the C core of cancelkernel.native._flag (declared in flag.h; bound by _flag.pyx).
 *
 * State is one 64-bit word {int32 cancelled; uint32 gen}, always written whole
 * with atomic stores and compare-and-swap, so the flag can never be seen set for
 * any execution but the one that was cancelled.
 */

/* First, as in any extension: it sets the feature macros (POSIX, XSI) the headers below depend on. */
#include <Python.h>

#include "flag.h"

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

uint32_t ck_load_gen(ck_state_t *s) {
    ck_state_t cur;
    cur.word = __atomic_load_n(&s->word, __ATOMIC_ACQUIRE);
    return cur.f.gen;
}

void ck_begin(ck_state_t *s, uint32_t gen) {
    __atomic_store_n(&s->word, ck_pack(0, gen), __ATOMIC_RELEASE);
}

void ck_end(ck_state_t *s, uint32_t gen) {
    uint64_t old = __atomic_load_n(&s->word, __ATOMIC_ACQUIRE);
    for (;;) {
        ck_state_t cur;
        cur.word = old;
        if (cur.f.gen != gen) return;  /* another execution's word: not ours to clear */
        if (__atomic_compare_exchange_n(&s->word, &old, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
    }
}

/* Async-signal-safe: only atomics.  Returns 1 if `gen` is running and now cancelled. */
int ck_cancel(ck_state_t *s, uint32_t gen) {
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

int *ck_cancelled_ptr(ck_state_t *s) { return (int *)&s->f.cancelled; }

/* --- SIGINT: a C handler chained in front of Python's ---
   Python's own handler only notes the signal for the interpreter to act on
   between bytecodes, which a native loop holding the GIL never reaches; this
   one sets the flag the moment an outside SIGINT arrives. */

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

void ck_set_main_thread(unsigned long main_thread_ident) {
    static int atfork_registered;
    /* CPython's thread ident is the pthread_t (what signal.pthread_kill relies on too). */
    ck_main_thread = (pthread_t)main_thread_ident;
    ck_main_ident = main_thread_ident;
    ck_have_main_thread = 1;
    if (!atfork_registered && pthread_atfork(NULL, NULL, ck_after_fork_child) == 0)
        atfork_registered = 1;
}

int ck_on_main_thread(void) { return PyThread_get_thread_ident() == ck_main_ident; }

static int ck_action_is_ours(const struct sigaction *a) {
    return (a->sa_flags & SA_SIGINFO) && a->sa_sigaction == ck_sigint_handler;
}

int ck_handler_installed(void) {
    struct sigaction cur;
    if (sigaction(SIGINT, NULL, &cur) != 0) return -1;
    return ck_action_is_ours(&cur);
}

/* 0: already ours, 1: installed in front of the current action, -1: errno set. */
int ck_install_handler(ck_state_t *state) {
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

void ck_expect(uint32_t gen) { __atomic_store_n(&ck_expected_gen, gen, __ATOMIC_RELEASE); }

void ck_unexpect(uint32_t gen) {
    uint32_t want = gen;
    __atomic_compare_exchange_n(&ck_expected_gen, &want, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

uint32_t ck_take_arrival(void) { return __atomic_exchange_n(&ck_arrival_gen, 0, __ATOMIC_ACQ_REL); }

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
    (void)unused;
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
int ck_start_yield(ck_state_t *state, int signum, int stall_ms) {
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

void ck_beat(void) { __atomic_add_fetch(&ck_heartbeat, 1, __ATOMIC_RELAXED); }

/* --- cancellable sleep --- */

double ck_monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Sleep in slices of at most 1 ms.  0: deadline reached, 1: cancelled,
   2: a signal arrived or, if poll_signals, 20 slices passed (run Python's handlers). */
int ck_sleep_until(ck_state_t *s, double deadline, int poll_signals) {
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
