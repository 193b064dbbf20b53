/* yield.c: the GIL-yield thread and the cancellable sleep (declared in flag.h).
 *
 * The kernel's watchdog bumps ck_heartbeat every tick; if it stops moving while
 * an execution runs, one C call holds the GIL.  The yield thread then sets the
 * yield bit of the summary word: every cancel point that call reaches releases
 * the GIL for a moment (ck_slow_check), so the control thread can read an
 * interrupt request.  With a signal number it also signals the main thread, for
 * calls that check Python's signals instead (the regex engine): a handler that
 * sleeps a moment hands the GIL over too.  Code that checks nothing is not affected.
 *
 * While no execution runs the thread sleeps on a condition variable that
 * ck_begin signals (ck_yield_wake): an idle kernel never wakes up for it.
 */

/* First, as in any extension: it sets the feature macros (POSIX, XSI) the headers below depend on. */
#include <Python.h>

#include "flag.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

static unsigned long ck_heartbeat;
static int ck_yield_signal;
static int ck_yield_stall_ms;
static int ck_yield_running;
static pthread_mutex_t ck_yield_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ck_yield_cond = PTHREAD_COND_INITIALIZER;

/* Block until an execution runs (checked under the lock ck_yield_wake signals under: no wake-up is lost). */
static void ck_wait_for_execution(void) {
    pthread_mutex_lock(&ck_yield_lock);
    while (!ck_any_running()) pthread_cond_wait(&ck_yield_cond, &ck_yield_lock);
    pthread_mutex_unlock(&ck_yield_lock);
}

void ck_yield_wake(void) {
    pthread_mutex_lock(&ck_yield_lock);
    pthread_cond_signal(&ck_yield_cond);
    pthread_mutex_unlock(&ck_yield_lock);
}

static void *ck_yield_main(void *unused) {
    (void)unused;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);  /* no signal is ever handled on this thread */
    unsigned long last = 0;
    int stalled = 0;
    struct timespec tick = {0, 10 * 1000 * 1000};
    for (;;) {
        if (!ck_any_running()) {
            ck_clear_yield();  /* no execution to reach: never slow down code outside a cell */
            ck_wait_for_execution();
            last = __atomic_load_n(&ck_heartbeat, __ATOMIC_RELAXED);
            stalled = 0;
        }
        nanosleep(&tick, NULL);
        unsigned long beat = __atomic_load_n(&ck_heartbeat, __ATOMIC_RELAXED);
        if (!ck_any_running()) continue;
        if (beat != last) {
            last = beat;
            stalled = 0;
            continue;
        }
        stalled += 10;
        if (stalled >= __atomic_load_n(&ck_yield_stall_ms, __ATOMIC_RELAXED)) {
            ck_set_yield();
            int signum = __atomic_load_n(&ck_yield_signal, __ATOMIC_RELAXED);
            if (signum != 0) ck_kill_main_thread(signum);
            stalled = 0;
        }
    }
    return NULL;
}

int ck_start_yield(int signum, int stall_ms) {
    __atomic_store_n(&ck_yield_signal, signum, __ATOMIC_RELAXED);
    __atomic_store_n(&ck_yield_stall_ms, stall_ms, __ATOMIC_RELAXED);
    if (ck_yield_running) return 0;
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

void ck_beat(void) {
    __atomic_add_fetch(&ck_heartbeat, 1, __ATOMIC_RELAXED);
    ck_clear_yield();
}

/* --- cancellable sleep --- */

double ck_monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int ck_sleep_until(double deadline, int poll_signals) {
    int slices = 0;
    for (;;) {
        if (ck_thread_cancelled()) return 1;
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
