# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Estimate pi by Monte Carlo, in three variants that differ only in how they can be stopped.

- `pi_gil`: holds the GIL the whole time and checks the flag every iteration.
  No Python thread runs meanwhile, not even the kernel's control thread, so
  only a SIGINT reaches it (the C handler sets the flag).
- `pi_nogil`: releases the GIL and checks the flag every iteration; an
  ordinary interrupt_request stops it.
- `pi_nocheck`: holds the GIL and never checks: nothing short of killing the
  kernel stops it (escalation is the watchdog's job).

Build it against cancelkernel (see native_build.py next to this file).
"""

from libc.stdint cimport uint64_t

from cancelkernel.native cimport cancel_requested, raise_if_cancelled, cancellable_sleep

# Iterations done by the last call, kept when it is interrupted: proof the loop ran.
cdef long long _done = 0


def progress():
    """Iterations the last call had done when it returned or was stopped."""
    return _done


cdef inline double _uniform(uint64_t *state) noexcept nogil:
    # xorshift64: each draw depends on the previous one, so the loop cannot be vectorised.
    state[0] ^= state[0] << 13
    state[0] ^= state[0] >> 7
    state[0] ^= state[0] << 17
    return <double>(state[0] >> 11) * (1.0 / 9007199254740992.0)


def pi_gil(long long n, uint64_t seed=88172645463325252):
    """GIL held throughout, a cancel point every iteration."""
    global _done
    cdef long long i, hits = 0
    cdef double x, y
    for i in range(n):
        x = _uniform(&seed)
        y = _uniform(&seed)
        if x * x + y * y <= 1.0:
            hits += 1
        if cancel_requested():
            _done = i
            raise_if_cancelled()
    _done = n
    return 4.0 * hits / n


cdef long long _count_nogil(long long n, uint64_t seed, long long *done) except -1 nogil:
    cdef long long i, hits = 0
    cdef double x, y
    for i in range(n):
        x = _uniform(&seed)
        y = _uniform(&seed)
        if x * x + y * y <= 1.0:
            hits += 1
        if cancel_requested():
            done[0] = i
            raise_if_cancelled()  # takes the GIL only to raise
    done[0] = n
    return hits


def pi_nogil(long long n, uint64_t seed=88172645463325252):
    """GIL released, a cancel point every iteration."""
    cdef long long hits
    with nogil:
        hits = _count_nogil(n, seed, &_done)
    return 4.0 * hits / n


def pi_nocheck(long long n, uint64_t seed=88172645463325252):
    """GIL held, no cancel point: an interrupt cannot stop it."""
    global _done
    cdef long long i, hits = 0
    cdef double x, y
    for i in range(n):
        x = _uniform(&seed)
        y = _uniform(&seed)
        if x * x + y * y <= 1.0:
            hits += 1
    _done = n
    return 4.0 * hits / n


def nap(double seconds):
    """cancellable_sleep from Cython: waits without the GIL, raises on cancel."""
    cancellable_sleep(seconds)
