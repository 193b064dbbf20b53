"""Unit tests: the quiet clock, read on the watchdog's tick from a real OutStream, and restarted by the watchdog."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import zmq
from ipykernel.iostream import IOPubThread
from jupyter_client.session import Session

from cancelkernel.kernel.streams import CancelOutStream, CellsThatWrote
from cancelkernel.runtime.core import CancellationCore
from cancelkernel.runtime.dumps import DumpFile
from cancelkernel.runtime.execution import Execution
from cancelkernel.runtime.watchdog import Watchdog


@pytest.fixture
def stream() -> Iterator[CancelOutStream]:
    """Our stream on a real IOPub thread object, not started: ipykernel then does the thread's work (flushes,
    sends to a PUB socket nobody reads) at once, in the caller.  Our stdout is not captured."""
    context = zmq.Context()
    socket = context.socket(zmq.PUB)
    socket.linger = 0
    pub_thread = IOPubThread(socket)
    stream = CancelOutStream(Session(key=b""), pub_thread, "stdout", watchfd=False)
    try:
        yield stream
    finally:
        stream.close()
        pub_thread.close()
        pub_thread.io_loop.close(all_fds=True)
        context.term()


def in_cell(stream: CancelOutStream, msg_id: str | None) -> None:
    stream.parent_header = {"msg_id": msg_id} if msg_id is not None else {}


def test_a_write_is_seen_once_by_the_next_look(stream: CancelOutStream) -> None:
    cells_that_wrote = CellsThatWrote(stream)
    in_cell(stream, "a")
    stream.write("x")
    assert cells_that_wrote() == {"a"}
    assert cells_that_wrote() == set()  # nothing new
    stream.write("")
    assert cells_that_wrote() == set()  # an empty write is no output


def test_output_sent_before_the_look_still_counts(stream: CancelOutStream) -> None:
    cells_that_wrote = CellsThatWrote(stream)
    in_cell(stream, "a")
    stream.write("x")
    stream.flush()  # sent (its buffers rotated out) before anyone looked
    assert cells_that_wrote() == {"a"}
    stream.flush()
    assert cells_that_wrote() == set()


def test_output_seen_and_then_sent_is_not_new(stream: CancelOutStream) -> None:
    cells_that_wrote = CellsThatWrote(stream)
    in_cell(stream, "a")
    stream.write("x")
    assert cells_that_wrote() == {"a"}
    stream.flush()
    assert cells_that_wrote() == set()  # the same "x", only sent since
    stream.write("y")
    stream.flush()
    stream.write("z")
    stream.flush()
    assert cells_that_wrote() == {"a"}


def test_each_cell_is_told_apart(stream: CancelOutStream) -> None:
    cells_that_wrote = CellsThatWrote(stream)
    in_cell(stream, "a")
    stream.write("x")
    in_cell(stream, "b")
    stream.write("y")
    assert cells_that_wrote() == {"a", "b"}
    stream.write("more")
    assert cells_that_wrote() == {"b"}
    in_cell(stream, None)
    stream.write("whose?")
    assert cells_that_wrote() == {None}


def execution(msg_id: str) -> Execution:
    """An execution the core does not run: the watchdog's own thread leaves it alone."""
    return Execution(msg_id=msg_id, generation=0, code="", thread_id=0)


@pytest.fixture
def watchdog(tmp_path: object) -> Iterator[Watchdog]:
    dumps = DumpFile(os.path.join(str(tmp_path), "stacks.txt"))
    watchdog = Watchdog(
        CancellationCore(signal_children=False),
        grace=0.5,
        dumps=dumps,
        on_trip=lambda e, r: None,
        on_unresponsive=lambda e: None,
    )
    try:
        yield watchdog
    finally:
        watchdog.stop()
        dumps.close()


def test_the_watchdog_restarts_the_clock_of_the_cells_that_wrote(watchdog: Watchdog) -> None:
    a, b = execution("a"), execution("b")
    wrote: list[set[str | None]] = [{"a"}, set(), {None}]
    watchdog.output_readers.append(lambda: wrote.pop(0))
    a.watch.last_output = b.watch.last_output = 0.0
    watchdog.notice_output([a, b])
    assert a.watch.last_output > 0.0
    assert b.watch.last_output == 0.0
    seen = a.watch.last_output
    watchdog.notice_output([a, b])
    assert (a.watch.last_output, b.watch.last_output) == (seen, 0.0)  # nobody wrote
    watchdog.notice_output([a, b])
    assert a.watch.last_output > seen  # no cell named: every running cell
    assert b.watch.last_output > 0.0


def test_a_display_restarts_the_clock_on_the_next_tick(watchdog: Watchdog) -> None:
    a, b = execution("a"), execution("b")
    a.watch.last_output = b.watch.last_output = 0.0
    a.output_seen()
    assert a.watch.last_output == 0.0  # not timed where it happened
    watchdog.notice_output([a, b])
    assert a.watch.last_output > 0.0
    assert b.watch.last_output == 0.0
    seen = a.watch.last_output
    watchdog.notice_output([a, b])
    assert a.watch.last_output == seen


def test_a_reader_that_fails_never_lets_a_writing_cell_trip(watchdog: Watchdog) -> None:
    def broken() -> set[str | None]:
        raise RuntimeError("the stream's layout changed")

    a = execution("a")
    a.budgets.quiet = 0.5
    a.watch.last_output = 0.0
    watchdog.output_readers.append(broken)
    watchdog.notice_output([a])
    assert a.watch.last_output > 0.0
    assert a.overran() is None
