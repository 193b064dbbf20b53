/* flag.h: the compiled cancellation flag's C core (internal; built into cancelkernel.native._flag).
 *
 * Not installed and not for third-party code: that uses native/__init__.pxd
 * (Cython) or native/include/cancelkernel_native.h (C).  flag.c holds the
 * per-thread slots and the summary word (the Cython variable `ck_state` of
 * _flag.pyx, exported through __pyx_capi__ and bound once by ck_bind_summary),
 * sigint.c the C SIGINT handler, yield.c the GIL-yield thread.
 */
#ifndef CANCELKERNEL_FLAG_H
#define CANCELKERNEL_FLAG_H

#include <stdint.h>

/* The same text as the verbatim block of native/_flag.pxd, under the same guard,
   so a translation unit that sees both (the Cython-generated _flag.c) gets one
   definition, and modules that only cimport _flag.pxd never need this header.
   tests/unit/test_native_sources.py checks that the two stay identical. */
#ifndef CANCELKERNEL_FLAG_PXD_C
#define CANCELKERNEL_FLAG_PXD_C
#include <stdint.h>
/* One 64-bit word, always written whole in a thread's slot, so `cancelled`
   is only ever non-zero together with the gen it cancelled; the exported
   ck_state is the summary: `cancelled` is non-zero while any check must
   take the slow path. */
typedef union ck_state {
    struct { int32_t cancelled; uint32_t gen; } f;
    uint64_t word;
} ck_state_t;
/* Helpers only, never storage: a static variable here would be duplicated
   in every module that cimports this file.  Expected 0, so compilers keep
   the slow path out of the loop. */
static inline int ck_load_cancelled(ck_state_t *s) {
    return __builtin_expect(__atomic_load_n(&s->f.cancelled, __ATOMIC_RELAXED), 0);
}
#endif

/* Hidden: the extension exports only PyInit__flag, so no other library's
   symbol of the same name can interpose on these calls. */
#if defined(__GNUC__) && !defined(_WIN32)
#define CK_INTERNAL __attribute__((visibility("hidden")))
#else
#define CK_INTERNAL
#endif

/* How many threads may run executions (or own a flag_address) at once. */
#define CK_SLOTS 128

#ifdef __cplusplus
extern "C" {
#endif

/* --- executions, one slot per thread (flag.c); callers of begin and flag_ptr hold the GIL --- */

CK_INTERNAL void ck_bind_summary(ck_state_t *summary);
/* 0, or -1: every slot runs an execution. */
CK_INTERNAL int ck_begin(uint32_t gen, unsigned long thread_ident, int parent);
CK_INTERNAL void ck_end(uint32_t gen);
/* Async-signal-safe: only atomics.  Returns 1 if `gen` is running and now cancelled. */
CK_INTERNAL int ck_cancel(uint32_t gen);
CK_INTERNAL void ck_uncancel(uint32_t gen);
/* The parent shell's running execution, 0 if none (async-signal-safe). */
CK_INTERNAL uint32_t ck_parent_gen(void);
/* The calling thread's execution: its own slot's, else the parent's; 0 if none. */
CK_INTERNAL uint32_t ck_running_gen(void);
CK_INTERNAL int ck_thread_cancelled(void);
/* What the inline checks call once the summary is non-zero: yield the GIL if asked, then ck_thread_cancelled. */
CK_INTERNAL int ck_slow_check(void);
/* With the GIL: let go of it while a yield is asked (and, if until_cancelled, this thread is not cancelled),
   at most max_us. */
CK_INTERNAL void ck_yield_pause(long max_us, int until_cancelled);
/* The int the calling thread's execution sets; NULL: no slot is free. */
CK_INTERNAL int *ck_flag_ptr(void);
/* The summary's `cancelled`: what the C API hands to plain C extensions. */
CK_INTERNAL const int *ck_summary_flag(void);
CK_INTERNAL int ck_any_running(void);
CK_INTERNAL void ck_set_yield(void);
CK_INTERNAL void ck_clear_yield(void);
CK_INTERNAL int ck_yield_requested(void);

/* --- SIGINT: a C handler chained in front of Python's (sigint.c) --- */

/* The main thread, by CPython's thread ident (where an outside SIGINT is forwarded) and by the system's thread id. */
CK_INTERNAL void ck_set_main_thread(unsigned long main_thread_ident, long main_thread_native_id);
CK_INTERNAL int ck_on_main_thread(void);
/* 0 if sent, else -1 (no main thread known) or pthread_kill's error. */
CK_INTERNAL int ck_kill_main_thread(int sig);
/* 1: the main thread is on a core or waiting for one, 0: it sleeps (a blocking call, or waiting for the GIL),
   -1: cannot tell (no /proc). */
CK_INTERNAL int ck_main_thread_running(void);
/* A SIGINT can reach the C handler and yet its Python handler never run: CPython sets its flag, and a blocking call
   that the signal did not break (restarted under another handler, or entered just after) sleeps on.  Python's
   handler calls ck_sigint_seen; ck_sigint_unseen counts those it has not seen; ck_sigint_wake sends the main
   thread one more, taken as re-sent (neither new nor outside), so the call breaks and the flag is looked at. */
CK_INTERNAL void ck_sigint_seen(void);
CK_INTERNAL unsigned long ck_sigint_unseen(void);
CK_INTERNAL int ck_sigint_wake(void);
/* 1: the C handler is the current SIGINT action, 0: it is not, -1: errno set. */
CK_INTERNAL int ck_handler_installed(void);
/* 0: already ours, 1: installed in front of the current action, -1: errno set. */
CK_INTERNAL int ck_install_handler(void);
/* The kernel is about to SIGINT itself for `gen` (ck_expect), or no longer is (ck_unexpect). */
CK_INTERNAL void ck_expect(uint32_t gen);
CK_INTERNAL void ck_unexpect(uint32_t gen);
/* Gen of the parent execution when the last outside SIGINT arrived, then 0 until the next one. */
CK_INTERNAL uint32_t ck_take_arrival(void);

/* --- GIL yield: ask one C call that holds the GIL to let other threads run (yield.c) --- */

/* 0: started (or already running, parameters updated), -1: pthread_create failed.  signum 0: no signal. */
CK_INTERNAL int ck_start_yield(int signum, int stall_ms);
CK_INTERNAL void ck_beat(void);
/* The control thread acted on the message a yield was asked for: the yield ends. */
CK_INTERNAL void ck_control_acted(void);
/* An execution began: wake the yield thread if it sleeps because none ran. */
CK_INTERNAL void ck_yield_wake(void);
/* Watch `fd` (the control socket's) while executions run: a message it holds unread asks for a yield at once; -1: none. */
CK_INTERNAL void ck_yield_watch(int fd);

/* --- cancellable sleep (yield.c) --- */

CK_INTERNAL double ck_monotonic(void);
/* Sleep in slices of at most 1 ms.  0: deadline reached, 1: the calling thread's execution is cancelled,
   2: a signal arrived or, if poll_signals, 20 slices passed (run Python's handlers). */
CK_INTERNAL int ck_sleep_until(double deadline, int poll_signals);

#ifdef __cplusplus
}
#endif

#endif /* CANCELKERNEL_FLAG_H */
