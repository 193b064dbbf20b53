"""Unit tests: interrupt requests checked, and interrupts that wait for a cell that has not started."""

from __future__ import annotations

import pytest

from cancelkernel.kernel.control import InterruptRequestError, parse_request
from cancelkernel.kernel.pending_cancels import KEEP, UNSEEN_FOR, PendingCancels
from cancelkernel.testing.clock import Clock


def test_a_queued_target_waits_as_long_as_it_takes() -> None:
    clock = Clock()
    pending = PendingCancels(clock)
    pending.received("a")
    assert pending.remember("a") == "pending"
    clock.now += 10 * UNSEEN_FOR  # queued behind a long cell
    assert pending.take("a") is True
    assert pending.take("a") is False  # taken once


def test_an_unseen_target_is_forgotten_after_a_while() -> None:
    clock = Clock()
    pending = PendingCancels(clock)
    assert pending.remember("early") == "pending"
    assert pending.remember("late") == "pending"
    clock.now += UNSEEN_FOR / 2
    assert pending.take("early") is True
    clock.now += UNSEEN_FOR
    assert pending.take("late") is False


def test_a_finished_target_is_a_no_op_and_nothing_grows_without_bound() -> None:
    pending = PendingCancels(Clock())
    pending.received("done")
    pending.finished("done")
    assert pending.remember("done") == "finished"
    assert pending.take("other") is False
    for i in range(3 * KEEP):
        pending.received(f"m{i}")
        pending.finished(f"m{i}")
        pending.remember(f"x{i}")
    assert max(len(pending._received), len(pending._finished), len(pending._waiting)) <= KEEP


@pytest.mark.parametrize(
    ("content", "text"),
    [
        ({"target": 3}, "non-empty string"),
        ({"target": "  "}, "non-empty string"),
        ({"subshell_id": 7}, "must be a string"),
        ({"subshell_id": "nope"}, "names no subshell"),
        ([1, 2], "must be an object"),
        ("x", "must be an object"),
    ],
)
def test_bad_interrupt_requests_say_what_is_wrong(content: object, text: str) -> None:
    with pytest.raises(InterruptRequestError, match=text):
        parse_request(content, known_subshells=["s1"])


def test_good_interrupt_requests() -> None:
    assert parse_request(None, None).target is None
    ask = parse_request({"target": "m", "subshell_id": "s1"}, ["s1"])
    assert (ask.target, ask.subshell_id) == ("m", "s1")
    assert parse_request({"subshell_id": "anything"}, None).subshell_id == "anything"  # cannot tell: let it through
