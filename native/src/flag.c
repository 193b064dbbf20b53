/* flag.c: executions and their cancel flags, one slot per thread (declared in flag.h; bound by _flag.pyx).
 *
 * Each slot has an owner thread and a 64-bit word {int32 cancelled; uint32 gen},
 * always written whole with atomic stores and compare-and-swap, so a flag can
 * never be seen set for any execution but the one that was cancelled.  The
 * exported summary word is what every inline check loads: its `cancelled` is
 * CK_YIELD_BIT (a GIL yield is asked) plus CK_ONE_CANCEL per cancelled running
 * execution, so it stays 0, and the check stays one relaxed load, while nothing
 * is cancelled.
 */

/* First, as in any extension: it sets the feature macros (POSIX, XSI) the headers below depend on. */
#include <Python.h>

#include "flag.h"

#include <errno.h>

#include <time.h>

#define CK_YIELD_BIT 1
#define CK_ONE_CANCEL 2

/* Own cache line each, so one thread's cancel never slows another thread's checks. */
typedef struct ck_slot {
    unsigned long owner;  /* CPython thread ident, 0: unowned */
    ck_state_t state;
} __attribute__((aligned(64))) ck_slot_t;

static ck_state_t *ck_summary;  /* the exported word; its `gen` is the parent execution's gen */
static ck_slot_t ck_slots[CK_SLOTS];
/* Bumped on every change of a slot's owner, so a thread's cached "my slot" can be trusted without a scan. */
static unsigned ck_epoch = 1;
static int ck_parent_hint;  /* the slot the parent was begun in: looked at before any scan */

/* The calling thread's slot index + 1 (0: none), valid while ck_tls_epoch == ck_epoch. */
static __thread int ck_tls_slot;
static __thread unsigned ck_tls_epoch;

void ck_bind_summary(ck_state_t *summary) { ck_summary = summary; }

static inline uint64_t ck_pack(int32_t cancelled, uint32_t gen) {
    ck_state_t s;
    s.f.cancelled = cancelled;
    s.f.gen = gen;
    return s.word;
}

static inline ck_state_t ck_load_slot(int i) {
    ck_state_t s;
    s.word = __atomic_load_n(&ck_slots[i].state.word, __ATOMIC_ACQUIRE);
    return s;
}

/* Paired exactly with a slot's 0->1 and 1->0 transitions, so the count returns to 0 when no cancel is left. */
static inline void ck_count(int32_t delta) { __atomic_add_fetch(&ck_summary->f.cancelled, delta, __ATOMIC_ACQ_REL); }

static inline unsigned long ck_owner(int i) { return __atomic_load_n(&ck_slots[i].owner, __ATOMIC_ACQUIRE); }

static int ck_find_owner(unsigned long ident) {
    for (int i = 0; i < CK_SLOTS; i++)
        if (ck_owner(i) == ident) return i;
    return -1;
}

/* Async-signal-safe: a scan of the fixed table, the parent's slot first. */
static int ck_find_gen(uint32_t gen) {
    int hint = __atomic_load_n(&ck_parent_hint, __ATOMIC_RELAXED);
    if (ck_load_slot(hint).f.gen == gen) return hint;
    for (int i = 0; i < CK_SLOTS; i++)
        if (ck_load_slot(i).f.gen == gen) return i;
    return -1;
}

static int ck_my_slot(void) {
    unsigned long me = PyThread_get_thread_ident();
    unsigned epoch = __atomic_load_n(&ck_epoch, __ATOMIC_ACQUIRE);
    int i = ck_tls_slot - 1;
    if (ck_tls_epoch == epoch && (i < 0 || ck_owner(i) == me)) return i;
    i = ck_find_owner(me);
    ck_tls_slot = i + 1;
    ck_tls_epoch = epoch;
    return i;
}

/* The slot `ident` owns, else an unowned one, else an idle one (its owner runs no execution); -1 if none.
   Callers hold the GIL, so no two claims race; the CAS only keeps the owner word whole. */
static int ck_claim(unsigned long ident) {
    int i = ck_find_owner(ident);
    if (i >= 0) return i;
    for (i = 0; i < CK_SLOTS; i++) {
        unsigned long none = 0;
        if (ck_owner(i) == 0 &&
            __atomic_compare_exchange_n(&ck_slots[i].owner, &none, ident, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            goto claimed;
    }
    for (i = 0; i < CK_SLOTS; i++) {
        unsigned long prev = ck_owner(i);
        if (ck_load_slot(i).f.gen == 0 &&
            __atomic_compare_exchange_n(&ck_slots[i].owner, &prev, ident, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            goto claimed;
    }
    return -1;
claimed:
    __atomic_add_fetch(&ck_epoch, 1, __ATOMIC_ACQ_REL);
    return i;
}

/* Slot i runs `gen`: make it idle; returns 1 if it did. */
static int ck_clear_if(int i, uint32_t gen) {
    ck_state_t cur = ck_load_slot(i);
    while (cur.f.gen == gen) {
        if (__atomic_compare_exchange_n(&ck_slots[i].state.word, &cur.word, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            if (cur.f.cancelled) ck_count(-CK_ONE_CANCEL);
            return 1;
        }
    }
    return 0;
}

uint32_t ck_parent_gen(void) { return __atomic_load_n(&ck_summary->f.gen, __ATOMIC_ACQUIRE); }

static void ck_drop_parent(uint32_t gen) {
    uint32_t want = gen;
    __atomic_compare_exchange_n(&ck_summary->f.gen, &want, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

int ck_begin(uint32_t gen, unsigned long thread_ident, int parent) {
    int i = ck_claim(thread_ident);
    if (i < 0) return -1;
    /* An execution runs on one thread: begun again elsewhere, it moves. */
    for (int j = 0; j < CK_SLOTS; j++)
        if (j != i) ck_clear_if(j, gen);
    ck_state_t old;
    old.word = __atomic_exchange_n(&ck_slots[i].state.word, ck_pack(0, gen), __ATOMIC_ACQ_REL);
    if (old.f.cancelled) ck_count(-CK_ONE_CANCEL);
    if (parent) {
        __atomic_store_n(&ck_parent_hint, i, __ATOMIC_RELAXED);
        __atomic_store_n(&ck_summary->f.gen, gen, __ATOMIC_RELEASE);
    } else {
        ck_drop_parent(gen);
        if (old.f.gen != 0) ck_drop_parent(old.f.gen);  /* replaced on its thread: no longer running */
    }
    ck_yield_wake();
    return 0;
}

void ck_end(uint32_t gen) {
    if (gen == 0) return;
    ck_drop_parent(gen);
    for (int i = 0; i < CK_SLOTS; i++) ck_clear_if(i, gen);
}

int ck_cancel(uint32_t gen) {
    if (gen == 0) return 0;
    int i = ck_find_gen(gen);
    if (i < 0) return 0;
    ck_state_t cur = ck_load_slot(i);
    for (;;) {
        if (cur.f.gen != gen) return 0;
        if (cur.f.cancelled) return 1;
        if (__atomic_compare_exchange_n(&ck_slots[i].state.word, &cur.word, ck_pack(1, gen), 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            ck_count(CK_ONE_CANCEL);
            return 1;
        }
    }
}

void ck_uncancel(uint32_t gen) {
    if (gen == 0) return;
    int i = ck_find_gen(gen);
    if (i < 0) return;
    ck_state_t cur = ck_load_slot(i);
    while (cur.f.gen == gen && cur.f.cancelled) {
        if (__atomic_compare_exchange_n(&ck_slots[i].state.word, &cur.word, ck_pack(0, gen), 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            ck_count(-CK_ONE_CANCEL);
            return;
        }
    }
}

/* The calling thread's view: its own slot while it runs an execution, else the parent's slot (-1: none). */
static int ck_view(ck_state_t *out) {
    int i = ck_my_slot();
    if (i >= 0) {
        *out = ck_load_slot(i);
        if (out->f.gen != 0) return i;
    }
    uint32_t parent = ck_parent_gen();
    if (parent == 0) return -1;
    int j = ck_find_gen(parent);
    if (j < 0) return -1;
    *out = ck_load_slot(j);
    return out->f.gen == parent ? j : -1;
}

uint32_t ck_running_gen(void) {
    ck_state_t s;
    return ck_view(&s) >= 0 ? s.f.gen : 0;
}

int ck_thread_cancelled(void) {
    ck_state_t s;
    return ck_view(&s) >= 0 && s.f.cancelled != 0;
}

/* A pause lets go of the GIL in steps this long, until the yield is no longer asked (the waiting thread ran). */
#define CK_PAUSE_STEP_US 50

void ck_yield_pause(long max_us, int until_cancelled) {
    /* Ends as soon as the waiting thread has acted and cleared the bit: the control thread reading an interrupt
       (ck_control_acted), a starved watchdog (its heartbeat).  A signal ends it (its Python handler runs next), and so does this
       thread's cancel flag if `until_cancelled`: a cancel point reads the flag itself, while a call that only
       checks Python's signals must wait for the SIGINT the control thread sends after setting the flag. */
    double until = ck_monotonic() + (double)max_us * 1e-6;
    struct timespec step = {0, CK_PAUSE_STEP_US * 1000};
    PyThreadState *ts = PyEval_SaveThread();
    do {
        if (nanosleep(&step, NULL) != 0 && errno == EINTR) break;
    } while (ck_yield_requested() && !(until_cancelled && ck_thread_cancelled()) && ck_monotonic() < until);
    PyEval_RestoreThread(ts);
}

int ck_slow_check(void) {
    if ((__atomic_load_n(&ck_summary->f.cancelled, __ATOMIC_RELAXED) & CK_YIELD_BIT) && PyGILState_Check())
        ck_yield_pause(1000, 1);
    return ck_thread_cancelled();
}

int *ck_flag_ptr(void) {
    ck_state_t s;
    int i = ck_view(&s);
    if (i < 0) i = ck_claim(PyThread_get_thread_ident());
    return i < 0 ? NULL : (int *)&ck_slots[i].state.f.cancelled;
}

const int *ck_summary_flag(void) { return (const int *)&ck_summary->f.cancelled; }

int ck_any_running(void) {
    for (int i = 0; i < CK_SLOTS; i++)
        if (ck_load_slot(i).f.gen != 0) return 1;
    return 0;
}

void ck_set_yield(void) { __atomic_fetch_or(&ck_summary->f.cancelled, CK_YIELD_BIT, __ATOMIC_ACQ_REL); }

void ck_clear_yield(void) {
    /* Looked at first: the heartbeat calls this on every tick, and a plain load keeps the line shared. */
    if (ck_yield_requested()) __atomic_fetch_and(&ck_summary->f.cancelled, ~CK_YIELD_BIT, __ATOMIC_ACQ_REL);
}

int ck_yield_requested(void) { return (__atomic_load_n(&ck_summary->f.cancelled, __ATOMIC_ACQUIRE) & CK_YIELD_BIT) != 0; }
