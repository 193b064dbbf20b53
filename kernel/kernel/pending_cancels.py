"""Interrupts of cells that have not started yet (pending cancels).

An interrupt may name an execute_request the kernel has received but not
started (it waits behind another cell, on the parent shell or a subshell), or
one it has not even received (the interrupt overtook it on the wire).  Such a
target is remembered: when its execute_request starts, it is answered as
interrupted without running any user code.  A target the kernel has never
seen is forgotten after UNSEEN_FOR seconds; one that already finished is a
no-op.  Everything here is bookkeeping by msg_id: the runtime is not involved.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

# Seconds a target the kernel has not received is remembered (docs/protocol.md).
UNSEEN_FOR = 30.0
# How many msg_ids of each kind are kept at most (oldest forgotten first): an interrupt for a
# target that finished longer ago is remembered as unseen, and no request can ever claim it.
KEEP = 1_000


class PendingCancels:
    """Execute requests received, started and finished, and interrupts waiting for their target."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()  # the shell channel thread, the control thread and the shells all call in
        self._received: OrderedDict[str, float] = OrderedDict()
        self._finished: OrderedDict[str, None] = OrderedDict()
        self._waiting: OrderedDict[str, float | None] = OrderedDict()  # msg_id -> forget at (None: it is queued)

    def _now(self) -> float:
        return self._clock()

    def received(self, msg_id: str) -> None:
        """An execute_request reached the kernel (on the shell channel thread, before it is queued)."""
        with self._lock:
            _put(self._received, msg_id, self._now())

    def remember(self, target: str) -> str:
        """An interrupt for `target`, which is not running: "finished" (a no-op) or "pending" (remembered)."""
        with self._lock:
            if target in self._finished:
                return "finished"
            queued = target in self._received
            _put(self._waiting, target, None if queued else self._now() + UNSEEN_FOR)
            return "pending"

    def take(self, msg_id: str) -> bool:
        """The execute_request starts: True if an interrupt is waiting for it (it must not run)."""
        with self._lock:
            self._received.pop(msg_id, None)
            forget_at = self._waiting.pop(msg_id, False)
            self._expire()
            return forget_at is None or (forget_at is not False and forget_at > self._now())

    def finished(self, msg_id: str) -> None:
        with self._lock:
            self._received.pop(msg_id, None)
            _put(self._finished, msg_id, None)

    def _expire(self) -> None:
        now = self._now()
        for msg_id, forget_at in list(self._waiting.items()):
            if forget_at is not None and forget_at <= now:
                del self._waiting[msg_id]


def _put(table: OrderedDict, key: str, value: object) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > KEEP:
        table.popitem(last=False)
