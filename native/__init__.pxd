# cython: language_level=3
"""Cancel points for Cython code: `from cancelkernel.native cimport cancel_requested, raise_if_cancelled`.

All three are usable with or without the GIL, and answer for the calling
thread's cell.  The flag is set while that cell is cancelled (interrupt
request, SIGINT, budget) and cleared when the next cell begins.
"""

from cancelkernel.native._flag cimport (
    ck_state, ck_load_cancelled, ck_cancel_requested_slow, ck_raise_cancelled, ck_cancellable_sleep,
)


cdef inline bint cancel_requested() noexcept nogil:
    """True while this thread's cell is cancelled: one relaxed atomic load while no cell is.

    While a GIL yield is asked it may release the GIL for about a millisecond, as any call into Python may.
    """
    if ck_load_cancelled(&ck_state) == 0:
        return False
    return ck_cancel_requested_slow() != 0


cdef inline int raise_if_cancelled() except -1 nogil:
    """Raise KeyboardInterrupt if this thread's cell is cancelled (takes the GIL only then)."""
    if ck_load_cancelled(&ck_state) != 0:
        return ck_raise_cancelled()
    return 0


cdef inline int cancellable_sleep(double seconds) except -1 nogil:
    """Sleep without the GIL; raise KeyboardInterrupt within ~1 ms of a cancel of this thread's cell."""
    return ck_cancellable_sleep(seconds)
