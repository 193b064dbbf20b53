"""RepliesLeft: the control thread waits for an interrupted cell's idle AND its reply sent; the cell hands over."""

from __future__ import annotations

import threading
import time
import typing as t

from jupyter_client.session import Session

from cancelkernel.kernel.replies_left import RepliesLeft, parent_msg_id

BOUND = 30.0  # only stops a broken wait from hanging the test


class SendReporter:
    """What RepliesLeft uses of ZMQStream: on_send(callback or None)."""

    def __init__(self) -> None:
        self.callback: t.Callable | None = None

    def on_send(self, callback: t.Callable | None) -> None:
        self.callback = callback


def reply_frames(parent_id: str) -> list[bytes]:
    session = Session(key=b"secret")
    parent = session.msg("execute_request", {"code": "1"})
    parent["header"]["msg_id"] = parent_id
    reply = session.msg("execute_reply", {"status": "ok"}, parent=parent)
    return [b"client-ident", *session.serialize(reply)]


def in_thread(target: t.Callable[[], None]) -> tuple[threading.Thread, threading.Event]:
    done = threading.Event()

    def run() -> None:
        target()
        done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done


def control_waits_for(replies: RepliesLeft, msg_id: str) -> tuple[threading.Thread, threading.Event]:
    """The control thread's wait for `msg_id`, in a thread, once registered (state, not the clock)."""
    thread, done = in_thread(lambda: replies.wait([msg_id], threading.Lock(), timeout=BOUND))
    deadline = time.monotonic() + BOUND
    while msg_id not in replies._waiting:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    return thread, done


def test_the_parent_msg_id_of_wire_frames() -> None:
    assert parent_msg_id(reply_frames("cell-1")) == "cell-1"
    assert parent_msg_id([b"no", b"delimiter"]) is None
    assert parent_msg_id([b"<IDS|MSG>", b"sig", b"{}", b"not json"]) is None


def test_the_stream_reports_sends_only_while_an_interrupt_is_delivered() -> None:
    stream = SendReporter()
    replies = RepliesLeft(stream)
    assert stream.callback is None
    with replies.watching():
        assert stream.callback is not None
        with replies.watching():
            pass
        assert stream.callback is not None  # the outer delivery still watches
    assert stream.callback is None


def test_the_wait_ends_only_when_the_reply_was_sent_and_the_idle_published() -> None:
    stream = SendReporter()
    replies = RepliesLeft(stream)
    with replies.watching():
        thread, done = control_waits_for(replies, "cell-1")
        replies.idle("cell-1")
        assert not done.wait(0.05)  # idle alone: the reply still waits in the queue between threads
        assert stream.callback is not None
        stream.callback(reply_frames("cell-1"), None)
        assert done.wait(BOUND)
        thread.join(BOUND)


def test_a_cell_that_replied_before_the_wait_is_not_waited_for() -> None:
    stream = SendReporter()
    replies = RepliesLeft(stream)
    with replies.watching():
        replies.idle("cell-1")
        replies.sent(reply_frames("cell-1"))
        began = time.monotonic()
        replies.wait(["cell-1"], threading.Lock(), timeout=BOUND)
        assert time.monotonic() - began < BOUND / 2


def test_without_a_stream_the_idle_alone_counts() -> None:
    replies = RepliesLeft(None)
    thread, done = control_waits_for(replies, "cell-1")
    replies.idle("cell-1")
    assert done.wait(BOUND)
    thread.join(BOUND)
    replies.hand_over("cell-1")  # nothing is sent to wait for: returns at once


def test_an_interrupted_cell_hands_over_until_its_reply_was_sent() -> None:
    stream = SendReporter()
    replies = RepliesLeft(stream)
    with replies.watching():
        control, control_done = control_waits_for(replies, "cell-1")
        cell, handed_over = in_thread(lambda: replies.hand_over("cell-1", timeout=BOUND))
        deadline = time.monotonic() + BOUND
        while "cell-1" not in replies._sending:  # the cell's thread waits for the send (state, not the clock)
            assert not handed_over.is_set(), "the cell did not wait for its reply to be sent"
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert not handed_over.wait(0.05)
        replies.sent(reply_frames("cell-1"))
        assert handed_over.wait(BOUND)
        replies.idle("cell-1")
        assert control_done.wait(BOUND)
        for thread in (cell, control):
            thread.join(BOUND)


def test_a_cell_nobody_waits_for_does_not_hand_over() -> None:
    replies = RepliesLeft(SendReporter())
    began = time.monotonic()
    replies.hand_over("cell-1")
    assert time.monotonic() - began < BOUND / 2
    assert not replies._sending
