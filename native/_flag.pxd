# cython: language_level=3
"""The cancellation flag's C contract (the storage itself lives in _flag.pyx).

Cimport the public names from `cancelkernel.native` (native/__init__.pxd);
this file holds what they are built on.
"""

from libc.stdint cimport int32_t, uint32_t, uint64_t

cdef extern from *:
    """
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
    """
    ctypedef union ck_state_t:
        uint64_t word
    int ck_load_cancelled(ck_state_t *s) noexcept nogil

# The summary word, defined (zeroed) in _flag.pyx; Cython exports it through
# __pyx_capi__, so every cimporting module reads this one word.  Its
# `cancelled` is non-zero only while some execution is cancelled or a GIL
# yield is asked; then ck_cancel_requested_slow() says if it is this thread's.
cdef ck_state_t ck_state

# Out of line on purpose: only the rare "the summary is set" path pays for the call.
cdef int ck_cancel_requested_slow() noexcept nogil
cdef int ck_raise_cancelled() except -1 nogil
cdef int ck_cancellable_sleep(double seconds) except -1 nogil
