# cython: language_level=3
"""Cancel points for Cython code: `from cancelkernel.native cimport cancel_requested, raise_if_cancelled`.

All three are usable with or without the GIL.  The flag is set while the
running cell is cancelled (interrupt request, SIGINT, budget) and cleared when
the next cell begins.
"""

from cancelkernel.native._flag cimport ck_state, ck_load_cancelled, ck_raise_cancelled, ck_cancellable_sleep


cdef inline bint cancel_requested() noexcept nogil:
    """True while the running cell is cancelled: one relaxed atomic load."""
    return ck_load_cancelled(&ck_state) != 0


cdef inline int raise_if_cancelled() except -1 nogil:
    """Raise KeyboardInterrupt if the running cell is cancelled (takes the GIL only then)."""
    if ck_load_cancelled(&ck_state) != 0:
        return ck_raise_cancelled()
    return 0


cdef inline int cancellable_sleep(double seconds) except -1 nogil:
    """Sleep without the GIL; raise KeyboardInterrupt within ~1 ms of a cancel."""
    return ck_cancellable_sleep(seconds)
