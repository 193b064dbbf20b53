"""Cells on several threads at once: each execution's cancel is seen by its own thread only.

Shared behaviour runs on BOTH the compiled module and the pure-Python
fallback; the summary word and the GIL-yield bit exist only in the compiled
one.  Tests that start the yield thread run in a subprocess: it lives as long
as the process and would slow every later check down.
"""

from __future__ import annotations

import ctypes
import importlib
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType

import pytest

HANG = 10.0  # generous: only stops a broken flag from hanging the suite


def _native():
    return importlib.import_module("cancelkernel.native._flag")


class Thread:
    """A thread of its own that runs what it is given, so a check can be made *on* it."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1)
        self.ident: int = self.run(threading.get_ident)

    def run(self, fn: Callable, *args):
        return self._pool.submit(fn, *args).result(HANG)


@pytest.fixture
def threads() -> Iterator[list[Thread]]:
    made = [Thread() for _ in range(3)]
    yield made
    for thread in made:
        thread._pool.shutdown(wait=True)


@pytest.fixture
def gens(flag) -> Iterator[list[int]]:
    """Gens a test begins; all of them are ended afterwards, whatever thread they run on."""
    begun: list[int] = []
    yield begun
    for gen in begun:
        flag.end(gen)


def _run(code: str, timeout: float = 120) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"rc={result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _raises(flag) -> bool:
    try:
        flag.raise_if_cancelled()
    except KeyboardInterrupt:
        return True
    return False


# -- each execution's cancel is its own thread's --


def test_two_threads_see_only_their_own_cancel(flag, threads, gens):
    a, b, _ = threads
    gens += [11, 12]
    flag.begin(11, a.ident, parent=False)
    flag.begin(12, b.ident, parent=False)
    assert (a.run(flag.running_gen), b.run(flag.running_gen)) == (11, 12)
    cell_a = ctypes.c_int.from_address(a.run(flag.flag_address))
    cell_b = ctypes.c_int.from_address(b.run(flag.flag_address))
    assert ctypes.addressof(cell_a) != ctypes.addressof(cell_b)
    assert flag.cancel(11) is True
    assert a.run(flag.cancel_requested) is True
    assert a.run(_raises, flag) is True
    assert b.run(flag.cancel_requested) is False
    assert b.run(_raises, flag) is False
    assert cell_a.value != 0
    assert cell_b.value == 0
    assert flag.cancel_requested() is False  # the test's own thread runs nothing and there is no parent
    flag.end(11)
    assert cell_a.value == 0
    assert a.run(flag.cancel_requested) is False
    assert a.run(flag.running_gen) == 0
    assert flag.cancel(11) is False
    assert flag.cancel(12) is True
    assert b.run(flag.cancel_requested) is True
    assert cell_b.value != 0


def test_a_thread_without_an_execution_sees_the_parent_only(flag, threads, gens):
    parent, child, idle = threads
    gens += [21, 22]
    flag.begin(21, parent.ident)  # parent=True: what an outside SIGINT cancels
    flag.begin(22, child.ident, parent=False)
    assert idle.run(flag.running_gen) == 21
    cell = ctypes.c_int.from_address(idle.run(flag.flag_address))
    flag.cancel(22)
    assert idle.run(flag.cancel_requested) is False
    assert parent.run(flag.cancel_requested) is False
    assert cell.value == 0
    flag.cancel(21)
    assert idle.run(flag.cancel_requested) is True
    assert cell.value != 0
    assert child.run(flag.cancel_requested) is True  # its own execution's cancel, not the parent's
    flag.uncancel(22)
    assert child.run(flag.cancel_requested) is False
    assert idle.run(flag.cancel_requested) is True
    flag.end(21)  # no parent any more
    assert idle.run(flag.running_gen) == 0
    assert idle.run(flag.cancel_requested) is False


def test_flag_address_before_begin_is_the_int_begin_uses(flag, threads, gens):
    a = threads[0]
    cell = ctypes.c_int.from_address(a.run(flag.flag_address))
    gens.append(31)
    flag.begin(31, a.ident, parent=False)
    flag.cancel(31)
    assert cell.value != 0


def test_uncancel_clears_the_flag_and_the_gen_keeps_running(flag, gens):
    gens.append(41)
    flag.begin(41)
    cell = ctypes.c_int.from_address(flag.flag_address())
    assert flag.cancel(41) is True
    assert flag.cancel_requested() is True
    flag.uncancel(41)
    assert flag.cancel_requested() is False
    assert cell.value == 0
    assert flag.running_gen() == 41
    flag.uncancel(41)  # idempotent
    flag.uncancel(40)  # not running: nothing happens
    assert flag.cancel(41) is True
    assert flag.cancel_requested() is True
    assert cell.value != 0


def test_begun_again_on_another_thread_an_execution_moves(flag, threads, gens):
    a, b, _ = threads
    gens.append(51)
    flag.begin(51, a.ident, parent=False)
    flag.cancel(51)
    flag.begin(51, b.ident, parent=False)  # begin clears its earlier cancel too
    assert a.run(flag.running_gen) == 0
    assert b.run(flag.running_gen) == 51
    assert b.run(flag.cancel_requested) is False
    flag.cancel(51)
    assert b.run(flag.cancel_requested) is True
    assert a.run(flag.cancel_requested) is False


def _own_cancels(flag, index: int, rounds: int, ended: list[int], wrong: list[str]) -> None:
    """One thread's begin/cancel/end of its own gens; what it saw that it should not goes into `wrong`."""
    for n in range(rounds):
        gen = 1_000_000 + 2 * n + index
        flag.begin(gen, parent=False)
        if flag.cancel_requested():
            wrong.append(f"{gen} cancelled at begin")
        if not flag.cancel(gen) or not flag.cancel_requested():
            wrong.append(f"{gen} not cancelled by its own cancel()")
        flag.end(gen)
        ended[index] = gen
        if flag.cancel_requested():
            wrong.append(f"{gen} still cancelled after end")


def test_stress_no_thread_sees_a_cancel_it_did_not_make(flag):
    # Two threads begin/cancel/end their own gens; a third hammers cancel() of gens that just ended.
    rounds = 1500
    stop = threading.Event()
    ended = [0, 0]
    wrong: list[str] = []

    def hammer() -> None:
        while not stop.is_set():
            flag.cancel(ended[0])
            flag.cancel(ended[1])

    workers = [threading.Thread(target=_own_cancels, args=(flag, i, rounds, ended, wrong)) for i in (0, 1)]
    canceller = threading.Thread(target=hammer)
    for thread in (canceller, *workers):
        thread.start()
    try:
        for worker in workers:
            worker.join(60)
    finally:
        stop.set()
        canceller.join(HANG)
    assert wrong == []
    if flag.available:
        assert _summary() & ~1 == 0  # every count of a cancel was paired with its clear


# -- several windows at once --

BoomA = type("BoomA", (Exception,), {})
BoomB = type("BoomB", (Exception,), {})


def _blocked_worker(release: threading.Event, caught: list) -> threading.Thread:
    def run():
        try:
            release.wait(HANG)  # blocked in C: a pending async exception waits for the next bytecode
            for _ in range(1000):
                pass
        except (BoomA, BoomB) as exc:
            caught.append(type(exc))
        else:
            caught.append(None)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_several_windows_at_once(flag):
    releases = [threading.Event(), threading.Event()]
    caught: list[list] = [[], []]
    workers = [_blocked_worker(releases[i], caught[i]) for i in (0, 1)]
    flag.open_window(61, workers[0].ident)
    flag.open_window(62, workers[1].ident)
    try:
        assert flag.raise_in_window(61, BoomA) is True  # only the first worker
        releases[0].set()
        workers[0].join(HANG)
        assert caught[0] == [BoomA]
        flag.close_window(61, workers[0].ident)
        assert flag.raise_in_window(61, BoomA) is False
        flag.close_window(61, workers[1].ident)  # another gen's window on that thread: kept
        assert flag.raise_in_window(62, BoomB) is True
        releases[1].set()
        workers[1].join(HANG)
        assert caught[1] == [BoomB]  # the first raise never reached it
    finally:
        for release in releases:
            release.set()
        flag.close_window(62, workers[1].ident)
        for worker in workers:
            worker.join(HANG)


# -- compiled only: the summary word every inline check loads --


class _CApi(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("size", ctypes.c_uint),
        ("cancelled", ctypes.POINTER(ctypes.c_int)),
        ("raise_if_cancelled", ctypes.c_void_p),
        ("cancellable_sleep", ctypes.c_void_p),
        ("cancel_requested_slow", ctypes.CFUNCTYPE(ctypes.c_int)),
    ]


def _c_api() -> _CApi:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return _CApi.from_address(get(_native()._C_API, b"cancelkernel.native._flag._C_API"))


def _summary() -> int:
    return _c_api().cancelled[0]


def test_summary_is_zero_unless_a_cancel_is_running(threads):
    f, api = _native(), _c_api()
    # Version 2 has cancel_requested_slow
    assert api.version == 2
    assert api.size == ctypes.sizeof(_CApi)
    a = threads[0]
    f.end(f.running_gen())
    try:
        assert api.cancelled[0] & ~1 == 0  # the inline check is one load that reads 0: no call
        f.begin(71)
        f.begin(72, a.ident, parent=False)
        assert api.cancelled[0] & ~1 == 0
        assert f.cancel_requested() is False
        f.cancel(72)
        assert api.cancelled[0] & ~1 != 0  # every check now takes the slow path ...
        # ... which says: not this thread's
        assert api.cancel_requested_slow() == 0
        assert f.cancel_requested() is False
        assert a.run(api.cancel_requested_slow) == 1
        f.cancel(71)
        f.uncancel(72)
        assert api.cancel_requested_slow() == 1
        assert a.run(api.cancel_requested_slow) == 0
        f.end(71)
        assert api.cancelled[0] & ~1 == 0
    finally:
        f.end(71)
        f.end(72)


@pytest.mark.parametrize("module", ["_flag", "_fallback"])
def test_begin_refuses_when_every_slot_runs_an_execution(module):
    out = _run(f"""
        from cancelkernel.native import {module} as f
        for tid in range(1, 129):   # 128 made-up threads, each running an execution
            f.begin(tid, tid, parent=False)
        try:
            f.begin(999, 999)
        except RuntimeError as exc:
            print("RuntimeError", "128" in str(exc))
        f.end(5)
        f.begin(999, 999)             # an idle slot is reused
        print(f.cancel(999))
    """)
    assert out.split() == ["RuntimeError", "True", "True"]


# -- compiled only: the GIL-yield bit --


def test_yield_bit_is_set_by_a_stalled_heartbeat_and_cleared_by_a_beat():
    out = _run("""
        import signal, time
        from cancelkernel.native import _flag as f
        sent = []
        signal.signal(signal.SIGUSR1, lambda *a: sent.append(1))

        def busy(seconds):
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                pass

        f.begin(5)
        assert f.start_gil_yield(signal.SIGUSR1, 0.02) is True
        busy(0.3)                         # the main thread running, no heartbeat: the bit and the signal
        assert f.yield_requested() is True and sent, sent
        f.gil_heartbeat()
        assert f.yield_requested() is False
        f.start_gil_yield(0, 0.02)        # signum 0: the bit only, no signal
        time.sleep(0.05)
        sent.clear()
        busy(0.3)
        assert f.yield_requested() is True and not sent, sent
        f.end(5)                          # nothing runs: the yield thread drops the bit itself
        time.sleep(0.3)
        assert f.yield_requested() is False
        print("OK")
    """)
    assert out.strip() == "OK"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the yield thread reads /proc")
def test_the_yield_signal_never_reaches_a_main_thread_asleep():
    """Asleep in a blocking call the main thread holds no GIL to hand over, and a signal there can make a SIGINT
    lost (docs/cancellation.md): the yield thread sets the bit and sends nothing."""
    out = _run("""
        import signal, sys, threading, time
        from cancelkernel.native import _flag as f
        main = threading.main_thread()
        window = [False]
        during = []
        signal.signal(signal.SIGUSR1, lambda *a: during.append(window[0]))
        done = threading.Event()
        asked = []

        def blocked():
            with open(f"/proc/self/task/{main.native_id}/stat") as stat:
                state = stat.read().rsplit(")", 1)[1].split()[0]
            frame = sys._current_frames().get(main.ident)
            return state == "S" and frame is not None and frame.f_code.co_name == "wait"

        def helper():
            deadline = time.monotonic() + 30
            while not (blocked() and time.sleep(0.005) is None and blocked()):  # in done.wait(), twice
                assert time.monotonic() < deadline
            window[0] = True
            f.begin(5)
            time.sleep(0.3)               # the heartbeat stalls 15 times over
            asked.append(f.yield_requested())
            window[0] = False
            f.end(5)
            done.set()

        assert f.start_gil_yield(signal.SIGUSR1, 0.02) is True
        threading.Thread(target=helper).start()
        assert done.wait(60)
        print(f"asked={asked[0]} signalled_while_asleep={True in during}")
    """)
    assert out.strip() == "asked=True signalled_while_asleep=False"


def test_a_message_left_unread_asks_for_the_yield_until_it_is_read():
    out = _run("""
        import socket, time
        from cancelkernel.native import _flag as f

        def until(predicate):
            deadline = time.monotonic() + 10
            while not predicate():
                assert time.monotonic() < deadline
                time.sleep(0.001)

        reader, writer = socket.socketpair()
        f.begin(5)
        f.start_gil_yield(0, 60.0)        # no stall can ask within the test: only the unread message does
        f.yield_for_readable(reader.fileno())
        time.sleep(0.05)
        assert f.yield_requested() is False
        writer.send(b"x")                 # a message nobody takes in
        until(f.yield_requested)
        reader.recv(1)                    # taken in, and acted on by the control thread: the request ends
        f.control_acted()
        until(lambda: not f.yield_requested())
        f.end(5)
        print("OK")
    """)
    assert out.strip() == "OK"


@pytest.mark.parametrize("ended_by", ["the SIGINT", "the control thread acting"])
def test_a_yield_pause_lasts_until_the_interrupt_arrives_or_the_control_thread_acted(ended_by: str):
    """The signal handler's pause lets go of the GIL while a yield is asked for the control thread: it ends when
    the SIGINT arrives or the control thread acted on its message, long before its bound."""
    out = _run(f"""
        import signal, socket, sys, threading, time
        from cancelkernel.native import _flag as f

        reader, writer = socket.socketpair()
        f.begin(5)
        f.start_gil_yield(0, 60.0)
        f.yield_for_readable(reader.fileno())
        writer.send(b"x")
        while not f.yield_requested():
            time.sleep(0.001)
        reader.recv(1)  # taken in: the request stays until the control thread acted
        main = threading.get_ident()

        def pause():
            f.yield_pause(300.0)

        def other():
            while sys._current_frames()[main].f_code is not pause.__code__:  # the main thread is in the pause
                time.sleep(0.0005)
            if {ended_by!r} == "the SIGINT":
                signal.pthread_kill(main, signal.SIGINT)
            else:
                f.control_acted()

        helper = threading.Thread(target=other)
        began = time.monotonic()
        helper.start()
        try:
            pause()
        except KeyboardInterrupt:
            pass
        waited = time.monotonic() - began
        helper.join()
        f.control_acted()
        f.end(5)
        assert waited < 60, waited  # ended by the helper, not by its 300 s bound
        print("OK")
    """)
    assert out.strip() == "OK"


@pytest.mark.parametrize("not_by", ["the cancel flag", "a heartbeat"])
def test_a_yield_for_the_control_thread_is_not_ended_by(not_by: str):
    """Neither the cancel flag (a call that checks only Python's signals would run on before the SIGINT that
    follows it) nor the watchdog's heartbeat (it may tick before the control thread ran) ends a yield asked
    for the control thread.  The yield thread gives up 0.1 s after the message came: a try that took longer
    than that says nothing and is made again."""
    out = _run(f"""
        import socket, time
        from cancelkernel.native import _flag as f

        reader, writer = socket.socketpair()
        f.begin(5)
        f.start_gil_yield(0, 60.0)
        f.yield_for_readable(reader.fileno())
        for attempt in range(100):
            before = time.monotonic()
            writer.send(b"x")
            while not f.yield_requested():
                time.sleep(0.0005)
            reader.recv(1)
            if {not_by!r} == "the cancel flag":
                f.cancel(5)
            else:
                f.gil_heartbeat()
            still = f.yield_requested()
            conclusive = time.monotonic() - before < 0.09  # the yield thread cannot have given up yet
            f.control_acted()
            f.uncancel(5)
            while f.yield_requested():
                time.sleep(0.0005)
            if conclusive:
                assert still, attempt
                break
        else:
            raise AssertionError("every try took longer than the yield thread waits")
        f.end(5)
        print("OK")
    """)
    assert out.strip() == "OK"


GIL_LOOP_SOURCE = """\
# cython: language_level=3
from cancelkernel.native cimport cancel_requested

cdef int _in_loop = 0


def in_loop():
    return _in_loop != 0


def is_cancelled():
    return cancel_requested()


def spin_gil(unsigned long long bound):
    # Holds the GIL throughout: no Python thread runs unless cancel_requested() lets it.
    global _in_loop
    cdef unsigned long long i = 0
    _in_loop = 1
    while i < bound and not cancel_requested():
        i += 1
    _in_loop = 0
    return i
"""


@pytest.fixture(scope="module")
def gil_loop_dir(native_build: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> str:
    workdir = tmp_path_factory.mktemp("gil_loop")
    (workdir / "ck_gil_loop.pyx").write_text(GIL_LOOP_SOURCE)
    return str(native_build.build_extensions(str(workdir), {"ck_gil_loop": str(workdir / "ck_gil_loop.pyx")}))


def test_a_loop_holding_the_gil_lets_another_thread_cancel_it(gil_loop_dir):
    # The key case: a Python thread (as the control thread reading interrupt_request) needs the GIL
    # to call cancel(); the loop never gives it up except through its cancel point once the bit is set.
    out = _run(f"""
        import sys, threading, time
        sys.path.insert(0, {gil_loop_dir!r})
        import ck_gil_loop as m
        from cancelkernel.native import _flag as f
        BOUND = 10_000_000_000
        f.begin(7)
        f.start_gil_yield(0, 0.02)
        done = {{}}
        def canceller():
            while not (m.in_loop() and f.yield_requested()):   # each line needs the GIL
                time.sleep(0.001)
            done["cancelled"] = f.cancel(7)
            done["other thread sees it"] = m.is_cancelled()
        thread = threading.Thread(target=canceller, daemon=True)
        thread.start()
        spins = m.spin_gil(BOUND)
        thread.join(30)
        print(spins < BOUND, done.get("cancelled"), done.get("other thread sees it"), f.cancel_requested())
    """)
    # Stopped before its bound by a cancel made while it ran; the canceller's thread runs no execution, so
    # it sees the parent's (this one's) cancel.
    assert out.split() == ["True", "True", "True", "True"]
