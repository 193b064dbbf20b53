/* yield.c: the GIL-yield thread and the cancellable sleep (declared in flag.h).
 *
 * The kernel's watchdog bumps ck_heartbeat every tick; if it stops moving while
 * an execution runs, one C call holds the GIL.  The yield thread then sets the
 * yield bit of the summary word: every cancel point that call reaches releases
 * the GIL for a moment (ck_slow_check), so the control thread can read an
 * interrupt request.  With a signal number it also signals the main thread while
 * that thread runs, for calls that check Python's signals instead (the regex
 * engine): a handler that sleeps a moment hands the GIL over too.  Code that
 * checks nothing is not affected.
 *
 * While no execution runs the thread sleeps on a condition variable that
 * ck_begin signals (ck_yield_wake): an idle kernel never wakes up for it.
 *
 * With a watched file descriptor (the control socket's, ck_yield_watch) it also
 * sees a control message that waits: the descriptor stays readable until the
 * control thread takes the message in, which it cannot do while one C call holds
 * the GIL.  A message unread for CK_WAIT_YIELD_US asks for the yield at once
 * (instead of after the heartbeat's stall), and, with a signal number, one unread
 * for CK_WAIT_SIGNAL_US signals the main thread too (again every
 * CK_WAIT_SIGNAL_EVERY_US); the bit is cleared once the control thread acted on
 * the message (ck_control_acted), and a pause (ck_yield_pause) ends then, or
 * when the interrupt arrived, so a cooperative loop pauses only while it must.
 * The signal may come before the switch interval (0.5 ms) hands the GIL over from
 * a cell running bytecode: its handler only makes that hand-over a little earlier,
 * and waiting for the switch first cost a GIL-held call 0.3-0.7 ms per interrupt.
 */

/* First, as in any extension: it sets the feature macros (POSIX, XSI) the headers below depend on. */
#include <Python.h>

#include "flag.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

/* A control message unread this long asks for a yield; this long, the signal too (then every SIGNAL_EVERY);
   the fd is looked at every STEP while it is (a step costs a poll only while a message waits). */
#define CK_WAIT_STEP_US 50
#define CK_WAIT_YIELD_US 100
#define CK_WAIT_SIGNAL_US 300
#define CK_WAIT_SIGNAL_EVERY_US 20000
/* How often the main thread's state is read (/proc, about 10 us) while it sleeps and a message waits. */
#define CK_WAIT_LOOK_EVERY_US 200
/* Unread (or not acted on) this long, it is not the GIL (the control thread is busy elsewhere): the fd is left
   alone a while. */
#define CK_WAIT_GIVE_UP_US 100000
#define CK_WAIT_COOLDOWN_TICKS 10
#define CK_TICK_MS 10

static unsigned long ck_heartbeat;
static int ck_yield_signal;
static int ck_yield_stall_ms;
static int ck_yield_running;
static int ck_watch_fd = -1;
/* Set while a yield is asked for the control thread: only it (ck_control_acted) or the yield thread ends that one,
   never the watchdog's heartbeat, whose tick may come first and would hand the GIL back too early. */
static int ck_control_yield;
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

void ck_yield_watch(int fd) { __atomic_store_n(&ck_watch_fd, fd, __ATOMIC_RELAXED); }

/* Signal the main thread only while it runs: asleep (in a blocking call, or waiting for the GIL) it holds no GIL
   to hand over, and the signal can only do harm there.  Its handler is installed with SA_RESTART, so the wait it
   interrupts is restarted, and a SIGINT that lands while that handler runs is restarted with it: lost, the
   wait goes on (docs/cancellation.md, "A SIGINT that is lost").  1 if sent. */
static int ck_signal_main_if_running(int signum) {
    return ck_main_thread_running() != 0 && ck_kill_main_thread(signum) == 0;
}

static int ck_readable(int fd, int timeout_ms) {
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, timeout_ms) > 0 && (p.revents & POLLIN);
}

/* Sleep one tick, or less if the watched fd turns readable; 1 if it did. */
static int ck_tick(int watch) {
    int fd = watch ? __atomic_load_n(&ck_watch_fd, __ATOMIC_RELAXED) : -1;
    if (fd >= 0) return ck_readable(fd, CK_TICK_MS);
    struct timespec tick = {0, CK_TICK_MS * 1000 * 1000};
    nanosleep(&tick, NULL);
    return 0;
}

static void ck_end_control_yield(void) {
    __atomic_store_n(&ck_control_yield, 0, __ATOMIC_RELEASE);
    ck_clear_yield();
}

void ck_control_acted(void) {
    if (__atomic_load_n(&ck_control_yield, __ATOMIC_ACQUIRE)) ck_end_control_yield();
}

/* A control message is waiting: give the control thread the GIL until it acted on the message (ck_control_acted),
   not merely took it in: a pause that ended then would let a GIL-held call run on before the interrupt is
   delivered.  Returns 0, or 1 if the message stayed unread past CK_WAIT_GIVE_UP_US (or unacted on). */
static int ck_control_waiting(int fd) {
    struct timespec step = {0, CK_WAIT_STEP_US * 1000};
    double began = ck_monotonic(), signalled = -1.0, looked = -1e9;
    int asked = 0, gave_up = 0;
    while (ck_any_running()) {
        nanosleep(&step, NULL);
        if (__atomic_load_n(&ck_watch_fd, __ATOMIC_RELAXED) != fd) break;  /* unwatched: the control thread waits */
        int unread = ck_readable(fd, 0);
        if (!unread && !(asked && __atomic_load_n(&ck_control_yield, __ATOMIC_ACQUIRE))) break;
        double waited = (ck_monotonic() - began) * 1e6;  /* microseconds */
        if (waited >= CK_WAIT_GIVE_UP_US) {
            gave_up = 1;
            break;
        }
        if (waited >= CK_WAIT_YIELD_US && !asked) {
            __atomic_store_n(&ck_control_yield, 1, __ATOMIC_RELEASE);
            ck_set_yield();
            asked = 1;
        }
        int signum = __atomic_load_n(&ck_yield_signal, __ATOMIC_RELAXED);
        if (signum != 0 && waited >= CK_WAIT_SIGNAL_US && (signalled < 0 || waited - signalled >= CK_WAIT_SIGNAL_EVERY_US)
            && waited - looked >= CK_WAIT_LOOK_EVERY_US) {
            looked = waited;
            if (ck_signal_main_if_running(signum)) signalled = waited;
        }
    }
    if (asked) ck_end_control_yield();  /* acted on (a no-op then), no execution left, or given up */
    return gave_up;
}

static void *ck_yield_main(void *unused) {
    (void)unused;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);  /* no signal is ever handled on this thread */
    unsigned long last = 0;
    double since = ck_monotonic();  /* when the heartbeat last moved (or the wait began) */
    int cooldown = 0;    /* ticks left before the watched fd is looked at again */
    for (;;) {
        if (!ck_any_running()) {
            ck_clear_yield();  /* no execution to reach: never slow down code outside a cell */
            ck_wait_for_execution();
            last = __atomic_load_n(&ck_heartbeat, __ATOMIC_RELAXED);
            since = ck_monotonic();
        }
        int readable = ck_tick(cooldown == 0);
        if (cooldown > 0) cooldown--;
        if (!ck_any_running()) continue;
        if (readable && ck_control_waiting(__atomic_load_n(&ck_watch_fd, __ATOMIC_RELAXED)))
            cooldown = CK_WAIT_COOLDOWN_TICKS;
        unsigned long beat = __atomic_load_n(&ck_heartbeat, __ATOMIC_RELAXED);
        double now = ck_monotonic();
        if (beat != last) {
            last = beat;
            since = now;
            continue;
        }
        if ((now - since) * 1000.0 >= __atomic_load_n(&ck_yield_stall_ms, __ATOMIC_RELAXED)) {
            ck_set_yield();
            int signum = __atomic_load_n(&ck_yield_signal, __ATOMIC_RELAXED);
            if (signum != 0) ck_signal_main_if_running(signum);
            since = now;
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
    if (!__atomic_load_n(&ck_control_yield, __ATOMIC_ACQUIRE)) ck_clear_yield();
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
