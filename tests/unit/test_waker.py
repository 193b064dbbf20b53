"""The waker a transport's poll watches: another thread ends the wait; drained, it no longer does."""

from __future__ import annotations

import select
import threading

from cancelkernel.agent.transport.waker import Waker


def readable(waker: Waker, timeout: float) -> bool:
    ready, _, _ = select.select([waker.fileno()], [], [], timeout)
    return bool(ready)


def test_a_wake_from_another_thread_ends_the_wait_and_drain_forgets_it() -> None:
    waker = Waker()
    try:
        assert not readable(waker, 0)
        threading.Timer(0.05, waker.wake).start()
        assert readable(waker, 30), "the wake-up never reached the poll"
        waker.drain()
        assert not readable(waker, 0)
    finally:
        waker.close()


def test_many_wakes_never_block_and_one_drain_clears_them() -> None:
    waker = Waker()
    try:
        for _ in range(100_000):  # far more than the socket buffer holds: wake() must not block
            waker.wake()
        assert readable(waker, 0)
        waker.drain()
        assert not readable(waker, 0)
    finally:
        waker.close()
