"""When an interrupted cell's reply has left the kernel: what the control thread waits for before it answers.

The control thread delivers an interrupt first, then waits without the GIL
until every cell it hit has replied (control.py `deliver_early`), so its own
busy, interrupt_reply and idle do not take the GIL from those cells while they
unwind.  A cell has replied when two things happened: its thread published the
idle status, and the shell channel thread sent its execute_reply on the shell
socket.  The reply waits in a queue between those two threads; a control
thread that took the GIL as soon as the idle was out kept the reply from the
client about a millisecond longer (`benchmarks/stages.py --interrupt loop`).
"""

from __future__ import annotations

import collections
import contextlib
import json
import threading
import time
import typing as t
from collections.abc import Iterator

# Seconds the control thread at most waits for the cells it interrupted to reply: a cell that catches its
# KeyboardInterrupt and goes on, or a C call that does not stop, never replies.
UNWIND_WAIT = 0.05
# Seconds a cell's thread at most waits, before its idle, for the shell channel thread to send its reply (hand_over).
HAND_OVER_WAIT = 0.01
# Requests remembered as replied, so one that replied before it was waited for is not waited for.
KEEP = 64
IDLE, SENT = "idle", "sent"
DELIMITER = b"<IDS|MSG>"


class RepliesLeft:
    """The replies that have left, recently, and the control thread's wait for some of them.

    `shell_stream`: the shell socket's ZMQStream, which reports its sends while an interrupt is delivered
    (`watching`); without one (an in-process kernel) the idle status alone counts.
    """

    def __init__(self, shell_stream: t.Any):
        self._stream = shell_stream if callable(getattr(shell_stream, "on_send", None)) else None
        self._needs = frozenset({IDLE, SENT}) if self._stream is not None else frozenset({IDLE})
        self._lock = threading.Lock()
        self._seen: collections.OrderedDict[str, set[str]] = collections.OrderedDict()
        self._waiting: dict[str, threading.Event] = {}
        self._sending: dict[str, threading.Event] = {}  # replies a cell's thread waits to see sent (hand_over)
        self._watching = 0  # interrupts being delivered: only then does the stream report its sends

    def idle(self, msg_id: str) -> None:
        """A shell request's idle status was published (every request: a cell may end before the wait begins)."""
        self._happened(msg_id, IDLE)

    def sent(self, frames: t.Sequence[t.Any], _status: object = None) -> None:
        """The shell socket sent a message (the stream's send callback, while `watching`): whose reply it was."""
        msg_id = parent_msg_id(frames)
        if msg_id:
            self._happened(msg_id, SENT)

    def hand_over(self, msg_id: str, timeout: float = HAND_OVER_WAIT) -> None:
        """Before an interrupted cell's idle (its thread): until the shell channel thread sent its reply.

        The reply waits for that thread, which needs the GIL, while this one
        would go on to publish the idle and take the next request: the client
        had the reply about half a millisecond later.  Only for a cell the
        control thread waits for (it was interrupted), at most `timeout`.
        """
        with self._lock:
            if SENT not in self._needs or msg_id not in self._waiting or SENT in self._seen.get(msg_id, set()):
                return
            event = self._sending.setdefault(msg_id, threading.Event())
        try:
            event.wait(timeout)
        finally:
            with self._lock:
                self._sending.pop(msg_id, None)

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Around delivering an interrupt and waiting: a cell it hits replies after it began."""
        with self._lock:
            self._watching += 1
            if self._watching == 1 and self._stream is not None:
                self._stream.on_send(self.sent)  # only now: a reply sent outside an interrupt costs nothing
        try:
            yield
        finally:
            with self._lock:
                self._watching -= 1
                if self._watching == 0 and self._stream is not None:
                    self._stream.on_send(None)

    def wait(self, msg_ids: t.Sequence[str], waiting: t.ContextManager[object], timeout: float = UNWIND_WAIT) -> None:
        """Until every one of `msg_ids` replied, at most `timeout` seconds; `waiting` is held meanwhile."""
        with self._lock:
            events = [
                self._waiting.setdefault(m, threading.Event())
                for m in msg_ids
                if not self._needs <= self._seen.get(m, set())
            ]
        deadline = time.monotonic() + timeout
        try:
            with waiting:
                for event in events:
                    event.wait(max(0.0, deadline - time.monotonic()))
        finally:
            with self._lock:
                for m in msg_ids:
                    self._waiting.pop(m, None)

    def _happened(self, msg_id: str, what: str) -> None:
        with self._lock:
            seen = self._seen.get(msg_id)
            if seen is None:
                seen = self._seen[msg_id] = set()
                if len(self._seen) > KEEP:
                    self._seen.popitem(last=False)
            seen.add(what)
            event = self._waiting.get(msg_id) if self._needs <= seen else None
            sending = self._sending.get(msg_id) if what == SENT else None
        for done in (event, sending):
            if done is not None:
                done.set()


def parent_msg_id(frames: t.Sequence[t.Any]) -> str | None:
    """The parent header's msg_id of a Jupyter message's wire frames (zmq Frames or bytes); None if not one."""
    for i, frame in enumerate(frames):
        if len(frame) == len(DELIMITER) and _bytes(frame) == DELIMITER:
            try:
                parent = json.loads(_bytes(frames[i + 3]))
            except (ValueError, IndexError):
                return None
            msg_id = parent.get("msg_id") if isinstance(parent, dict) else None
            return msg_id if isinstance(msg_id, str) else None
    return None


def _bytes(frame: t.Any) -> bytes:
    return bytes(frame.bytes if hasattr(frame, "bytes") else frame)
