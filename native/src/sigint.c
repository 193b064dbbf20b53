/* sigint.c: a C SIGINT handler chained in front of Python's (declared in flag.h).
 *
 * Python's own handler only notes the signal for the interpreter to act on
 * between bytecodes, which a native loop holding the GIL never reaches; this
 * one cancels the parent execution the moment an outside SIGINT arrives.
 * Async-signal-safe: the handler only touches atomics and the fixed slot table.
 */

/* First, as in any extension: it sets the feature macros (POSIX, XSI) the headers below depend on. */
#include <Python.h>

#include "flag.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static uint32_t ck_expected_gen;     /* the kernel is about to SIGINT itself for this gen */
static uint32_t ck_arrival_gen;      /* the parent gen the last outside SIGINT cancelled */
static int ck_forwarded;             /* a SIGINT re-sent to the main thread is on its way */
static unsigned long ck_reached;     /* SIGINTs that reached this handler on the main thread */
static unsigned long ck_seen;        /* how many of them Python's handler had seen when it last ran */
static pthread_t ck_main_thread;
static int ck_have_main_thread;
/* Two slots so a handler still running on another thread never reads a half-written action. */
static struct sigaction ck_prev[2];
static int ck_prev_index;

static void ck_sigint_handler(int sig, siginfo_t *info, void *ctx);

/* Send the main thread a SIGINT its handler takes as re-sent (neither new nor outside); pthread_kill's result. */
static int ck_resend_to_main(int sig) {
    __atomic_store_n(&ck_forwarded, 1, __ATOMIC_RELEASE);
    int rc = pthread_kill(ck_main_thread, sig);
    if (rc != 0) __atomic_store_n(&ck_forwarded, 0, __ATOMIC_RELEASE);
    return rc;
}

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

/* An outside SIGINT (kill -INT, Ctrl-C, signal interrupt mode) cancels the parent shell's execution. */
static void ck_outside_sigint(void) {
    uint32_t gen = ck_parent_gen();
    if (gen != 0 && ck_cancel(gen))
        __atomic_store_n(&ck_arrival_gen, gen, __ATOMIC_RELEASE);
}

static void ck_sigint_handler(int sig, siginfo_t *info, void *ctx) {
    int saved_errno = errno;
    if (ck_have_main_thread && !pthread_equal(pthread_self(), ck_main_thread)) {
        /* Never the kernel's own SIGINT (that one is sent to the main thread), so
           record it, then re-send it to the main thread, whose blocking calls only
           a SIGINT delivered there can break. */
        ck_outside_sigint();
        if (ck_resend_to_main(sig) != 0) ck_chain(sig, info, ctx);
        errno = saved_errno;
        return;
    }
    int forwarded = __atomic_exchange_n(&ck_forwarded, 0, __ATOMIC_ACQ_REL);
    uint32_t expected = __atomic_exchange_n(&ck_expected_gen, 0, __ATOMIC_ACQ_REL);
    if (!forwarded && expected == 0)
        ck_outside_sigint();
    __atomic_add_fetch(&ck_reached, 1, __ATOMIC_RELEASE);
    ck_chain(sig, info, ctx);
    errno = saved_errno;
}

static unsigned long ck_main_ident;  /* the same thread as CPython's thread ident */
static long ck_main_tid;             /* the system's id of that thread (gettid), for its state in /proc */

/* CPython makes the forking thread the child's main thread; follow it, or a
   fork from a worker thread would forward SIGINT to a thread that does not exist. */
static void ck_after_fork_child(void) {
    ck_main_thread = pthread_self();
    ck_main_ident = PyThread_get_thread_ident();
    ck_main_tid = (long)syscall(SYS_gettid);
    __atomic_store_n(&ck_forwarded, 0, __ATOMIC_RELAXED);
}

void ck_set_main_thread(unsigned long main_thread_ident, long main_thread_native_id) {
    static int atfork_registered;
    /* CPython's thread ident is the pthread_t (what signal.pthread_kill relies on too). */
    ck_main_thread = (pthread_t)main_thread_ident;
    ck_main_ident = main_thread_ident;
    ck_main_tid = main_thread_native_id;
    ck_have_main_thread = 1;
    if (!atfork_registered && pthread_atfork(NULL, NULL, ck_after_fork_child) == 0)
        atfork_registered = 1;
}

int ck_on_main_thread(void) { return PyThread_get_thread_ident() == ck_main_ident; }

int ck_kill_main_thread(int sig) { return ck_have_main_thread ? pthread_kill(ck_main_thread, sig) : -1; }

int ck_main_thread_running(void) {
    char path[64], stat[512];
    if (ck_main_tid <= 0) return -1;
    snprintf(path, sizeof path, "/proc/self/task/%ld/stat", ck_main_tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, stat, sizeof stat - 1);
    close(fd);
    if (n <= 0) return -1;
    stat[n] = '\0';
    /* "tid (name) S ...": the name may hold ')' itself, the state follows the last one. */
    const char *name_end = strrchr(stat, ')');
    if (name_end == NULL || name_end[1] != ' ') return -1;
    return name_end[2] == 'R';
}

static int ck_action_is_ours(const struct sigaction *a) {
    return (a->sa_flags & SA_SIGINFO) && a->sa_sigaction == ck_sigint_handler;
}

int ck_handler_installed(void) {
    struct sigaction cur;
    if (sigaction(SIGINT, NULL, &cur) != 0) return -1;
    return ck_action_is_ours(&cur);
}

/* 0: already ours, 1: installed in front of the current action, -1: errno set. */
int ck_install_handler(void) {
    struct sigaction cur, act;
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

void ck_sigint_seen(void) { __atomic_store_n(&ck_seen, __atomic_load_n(&ck_reached, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE); }

unsigned long ck_sigint_unseen(void) {
    return __atomic_load_n(&ck_reached, __ATOMIC_ACQUIRE) - __atomic_load_n(&ck_seen, __ATOMIC_ACQUIRE);
}

int ck_sigint_wake(void) { return ck_have_main_thread ? ck_resend_to_main(SIGINT) : -1; }

uint32_t ck_take_arrival(void) { return __atomic_exchange_n(&ck_arrival_gen, 0, __ATOMIC_ACQ_REL); }
