/* flag.h: the compiled cancellation flag's C core (internal; built into cancelkernel.native._flag).
 *
 * Not installed and not for third-party code: that uses native/__init__.pxd
 * (Cython) or native/include/cancelkernel_native.h (C).  The storage of the
 * flag is the Cython variable `ck_state` of _flag.pyx, exported through
 * __pyx_capi__; every function here takes a pointer to it.
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
/* One 64-bit word, always written whole, so `cancelled` is only ever
   non-zero together with the gen it cancelled. */
typedef union ck_state {
    struct { int32_t cancelled; uint32_t gen; } f;
    uint64_t word;
} ck_state_t;
/* Helpers only, never storage: a static variable here would be duplicated
   in every module that cimports this file. */
static inline int ck_load_cancelled(ck_state_t *s) {
    return __atomic_load_n(&s->f.cancelled, __ATOMIC_RELAXED);
}
#endif

/* Hidden: the extension exports only PyInit__flag, so no other library's
   symbol of the same name can interpose on these calls. */
#if defined(__GNUC__) && !defined(_WIN32)
#define CK_INTERNAL __attribute__((visibility("hidden")))
#else
#define CK_INTERNAL
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* --- the state word (the storage is the Cython variable ck_state) --- */

CK_INTERNAL uint32_t ck_load_gen(ck_state_t *s);
CK_INTERNAL void ck_begin(ck_state_t *s, uint32_t gen);
CK_INTERNAL void ck_end(ck_state_t *s, uint32_t gen);
/* Async-signal-safe: only atomics.  Returns 1 if `gen` is running and now cancelled. */
CK_INTERNAL int ck_cancel(ck_state_t *s, uint32_t gen);
CK_INTERNAL int *ck_cancelled_ptr(ck_state_t *s);

/* --- SIGINT: a C handler chained in front of Python's --- */

/* The main thread, by CPython's thread ident: where an outside SIGINT is forwarded. */
CK_INTERNAL void ck_set_main_thread(unsigned long main_thread_ident);
CK_INTERNAL int ck_on_main_thread(void);
/* 1: the C handler is the current SIGINT action, 0: it is not, -1: errno set. */
CK_INTERNAL int ck_handler_installed(void);
/* 0: already ours, 1: installed in front of the current action, -1: errno set. */
CK_INTERNAL int ck_install_handler(ck_state_t *state);
/* The kernel is about to SIGINT itself for `gen` (ck_expect), or no longer is (ck_unexpect). */
CK_INTERNAL void ck_expect(uint32_t gen);
CK_INTERNAL void ck_unexpect(uint32_t gen);
/* Gen running when the last outside SIGINT arrived, then 0 until the next one. */
CK_INTERNAL uint32_t ck_take_arrival(void);

/* --- GIL yield: ask one C call that holds the GIL to let other threads run --- */

/* 0: started (or already running, parameters updated), -1: pthread_create failed. */
CK_INTERNAL int ck_start_yield(ck_state_t *state, int signum, int stall_ms);
CK_INTERNAL void ck_beat(void);

/* --- cancellable sleep --- */

CK_INTERNAL double ck_monotonic(void);
/* Sleep in slices of at most 1 ms.  0: deadline reached, 1: cancelled,
   2: a signal arrived or, if poll_signals, 20 slices passed (run Python's handlers). */
CK_INTERNAL int ck_sleep_until(ck_state_t *s, double deadline, int poll_signals);

#ifdef __cplusplus
}
#endif

#endif /* CANCELKERNEL_FLAG_H */
