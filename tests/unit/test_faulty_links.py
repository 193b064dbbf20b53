"""What the remote transport's way back and its round trip rely on, and the faulty link the tests put between
the agent client and a server (kernel/testing/faulty_link.py), driven over loopback with an echo server."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from cancelkernel.agent.transport.outage import FIRST_PAUSE, MAX_PAUSE, Outage
from cancelkernel.agent.transport.round_trip import RoundTrip
from cancelkernel.testing.faulty_link import Faults, faulty_link


def test_an_outage_spaces_its_tries_and_ends_at_its_bound() -> None:
    outage = Outage(100.0, within=10.0)
    assert outage.due(100.0)  # the first try at once
    pauses = []
    now = 100.0
    for _ in range(8):
        outage.failed("refused", now)
        pauses.append(round(outage.next_try - now, 3))
        now = outage.next_try
    assert pauses[0] == FIRST_PAUSE
    assert pauses == sorted(pauses)  # it grows ...
    assert max(pauses) == MAX_PAUSE  # ... up to a limit
    assert not outage.due(outage.next_try - 0.01)
    assert not outage.over(109.9)
    assert outage.over(110.0)
    assert outage.try_timeout(109.5) == 1.0  # a try near the bound is short, never under a second
    assert "8 tries; last: refused" in outage.text(110.0)


def test_the_round_trip_is_smoothed_and_allows_for_its_variation() -> None:
    trip = RoundTrip()
    assert trip.allowance() == 0.0  # nothing measured: nothing added (a local server answers at once)
    trip.sample(0.1)
    assert trip.smoothed == pytest.approx(0.1)
    assert trip.allowance() == pytest.approx(0.1 + 4 * 0.05)
    for _ in range(50):
        trip.sample(0.1)
    assert trip.allowance() == pytest.approx(0.1, abs=0.01)  # a steady link: about one round trip
    trip.sample(0.5)  # one late answer widens the allowance more than it moves the mean
    assert trip.smoothed < 0.2
    assert trip.allowance() > 0.45


@pytest.fixture
def echo() -> Iterator[int]:
    """A TCP server on loopback that sends back what it reads, one thread per connection; its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def exchange(port: int, payload: bytes, timeout: float = 10.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = conn.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


def answered(port: int, payload: bytes) -> bool:
    """Whether a new connection through the link gets `payload` back (a reset or a close: no)."""
    try:
        return exchange(port, payload) == payload
    except OSError:
        return False


def still_open(conn: socket.socket) -> bool:
    """Whether an open connection still carries bytes both ways."""
    try:
        conn.sendall(b"x")
        return conn.recv(1) == b"x"
    except OSError:
        return False


def test_the_link_delays_every_byte_and_keeps_their_order(echo: int) -> None:
    faults = Faults(delay=0.05, jitter=0.02, loss=0.2, seed=1)
    with faulty_link(echo, faults) as link:
        payload = bytes(range(256)) * 2000  # many chunks, some hit by a loss
        started = time.monotonic()
        assert exchange(link.port, payload) == payload  # in order, nothing lost: TCP retransmits, late
        assert time.monotonic() - started >= faults.round_trip - 2 * faults.jitter  # a floor, never a ceiling
        assert link.connections_made == 1


def test_a_cut_resets_the_connections_and_refuses_new_ones_until_it_heals(echo: int) -> None:
    with faulty_link(echo) as link:
        conn = socket.create_connection(("127.0.0.1", link.port), timeout=10)
        conn.sendall(b"ping")
        assert conn.recv(4) == b"ping"
        cut = link.cut(None)
        assert cut.connections_reset == 1
        assert not still_open(conn)  # reset, or closed: either way the connection is gone
        conn.close()
        assert not answered(link.port, b"during")
        assert cut.refused >= 1
        link.heal()
        assert cut.ended is not None
        assert answered(link.port, b"after")


def test_a_retargeted_link_reaches_the_new_server(echo: int) -> None:
    with faulty_link(1) as link:  # nothing listens on port 1: a client is reset, as by a server that is down
        assert not answered(link.port, b"down")
        link.retarget(echo)
        assert answered(link.port, b"up")
