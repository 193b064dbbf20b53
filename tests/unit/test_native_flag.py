"""Unit tests of the cancellation flag, run on BOTH the compiled module and the pure-Python fallback.

Signal tests run in a subprocess: SIGINT handlers are process-wide, and
pytest's own must not be disturbed.
"""

from __future__ import annotations

import ast
import copy
import ctypes
import importlib
import math
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from types import ModuleType

import pytest

from cancelkernel import native
from cancelkernel.native import _fallback

# Generous: only stops a broken flag from hanging the suite.
HANG = 10.0


def _native():
    return importlib.import_module("cancelkernel.native._flag")


def run_python(code: str, *, env: dict | None = None, expect_rc: int = 0, prelude: str = "") -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(prelude) + textwrap.dedent(code)],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == expect_rc, f"rc={result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


# -- which implementation is used --


def test_compiled_flag_is_built():
    assert _native().available is True


# -- one API: cancelkernel.native.API, and the compiled module, the fallback and the stub each have exactly it --


def _offered(module: ModuleType) -> set[str]:
    """A module's public names, leaving out the modules it imports and its __future__ switches."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, ModuleType) and type(value).__module__ != "__future__"
    }


def _installed(name: str) -> str:
    """A source file of the installed package: the one the built module was made from."""
    with open(os.path.join(os.path.dirname(native.__file__), name), encoding="utf-8") as f:
        return f.read()


def _defs(source: str) -> dict[str, ast.FunctionDef]:
    return {
        node.name: node
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    }


def _pyx_defs(source: str) -> dict[str, ast.FunctionDef]:
    """The Python functions of a .pyx: its top-level `def` lines, whose parameters are Python syntax."""
    return _defs("\n".join(f"{line} pass" for line in re.findall(r"^def \w+\(.*?\):", source, re.M | re.S)))


def _typed(node: ast.FunctionDef) -> str:
    return f"({ast.unparse(node.args)}) -> {ast.unparse(node.returns) if node.returns else '?'}"


def _untyped(node: ast.FunctionDef) -> str:
    args = copy.deepcopy(node.args)
    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        if arg is not None:
            arg.annotation = None
    return f"({ast.unparse(args)})"


def test_the_api_is_written_once():
    assert len(set(native.API)) == len(native.API)
    assert _offered(_native()) == set(native.API)
    assert _offered(_fallback) == set(native.API)
    stub = ast.parse(_installed("_flag.pyi")).body
    declared = [n.name for n in stub if isinstance(n, ast.FunctionDef)] + [
        n.target.id for n in stub if isinstance(n, ast.AnnAssign)
    ]
    assert sorted(declared) == sorted(native.API)


def test_the_compiled_module_the_fallback_and_the_stub_agree_on_every_signature():
    stub, fallback, compiled = (
        _defs(_installed("_flag.pyi")),
        _defs(_installed("_fallback.py")),
        _pyx_defs(_installed("_flag.pyx")),
    )
    functions = set(native.API) - {"available"}
    assert set(stub) == set(fallback) == set(compiled) == functions
    for name in sorted(functions):
        assert _typed(fallback[name]) == _typed(stub[name]), name
        assert _untyped(compiled[name]) == _untyped(stub[name]), name  # the .pyx's def lines carry no types


@pytest.mark.parametrize(("env", "available"), [({}, True), ({"CANCELKERNEL_NATIVE": "0"}, False)])
def test_package_picks_the_implementation(env, available):
    out = run_python(
        """
        import importlib, cancelkernel, cancelkernel.native as n
        impl = importlib.import_module(n.cancel_requested.__module__)
        print(n.available, impl.__name__, cancelkernel.cancel_requested is n.cancel_requested,
              all(getattr(n, name) is getattr(impl, name) for name in n.API))
        """,
        env=env,
    )
    module = "cancelkernel.native._flag" if available else "cancelkernel.native._fallback"
    assert out.split() == [str(available), module, "True", "True"]


# -- begin / cancel / end: a cancel is for one execution only --


def test_idle_polling_is_false_and_never_raises(flag):
    assert flag.running_gen() == 0
    assert flag.cancel_requested() is False
    flag.raise_if_cancelled()
    assert flag.cancel(0) is False
    assert flag.cancel(7) is False
    assert flag.cancel_requested() is False


def test_cancel_hits_only_the_running_gen(flag):
    flag.begin(5)
    assert flag.running_gen() == 5
    assert flag.cancel(4) is False
    assert flag.cancel_requested() is False
    assert flag.cancel(5) is True
    assert flag.cancel(5) is True  # idempotent
    assert flag.cancel_requested() is True
    with pytest.raises(KeyboardInterrupt, match="cancelled"):
        flag.raise_if_cancelled()


def test_end_clears_only_its_own_gen(flag):
    flag.begin(8)
    flag.cancel(8)
    flag.end(7)  # a stale end for an execution that is not running
    assert flag.cancel_requested() is True
    assert flag.running_gen() == 8
    flag.end(8)
    assert flag.cancel_requested() is False
    assert flag.running_gen() == 0
    assert flag.cancel(8) is False  # a late cancel after the end
    assert flag.cancel_requested() is False


def test_begin_clears_a_previous_cancel(flag):
    flag.begin(1)
    flag.cancel(1)
    flag.begin(2)
    assert flag.cancel_requested() is False
    assert flag.cancel(1) is False


def test_flag_address_is_a_c_int_readable_by_ctypes(flag):
    cell = ctypes.c_int.from_address(flag.flag_address())
    assert cell.value == 0
    flag.begin(3)
    assert cell.value == 0
    flag.cancel(3)
    assert cell.value != 0
    flag.end(3)
    assert cell.value == 0


def test_cancel_from_another_thread_races_with_end(flag):
    # Hammer cancel() while executions begin and end: the flag is never left set for the next one.
    stop = threading.Event()
    target = [1]

    def canceller():
        while not stop.is_set():
            flag.cancel(target[0] - 1)  # always the previous, ended execution

    thread = threading.Thread(target=canceller)
    thread.start()
    try:
        for gen in range(2, 3000):
            flag.begin(gen)
            target[0] = gen
            assert flag.cancel_requested() is False, gen
            flag.end(gen)
    finally:
        stop.set()
        thread.join()


# -- cancellable_sleep --


@pytest.mark.parametrize("bad", [-1, -0.001, math.nan, float("-inf")])
def test_sleep_rejects_bad_lengths(flag, bad):
    with pytest.raises(ValueError, match="sleep length must be a non-negative number"):
        flag.cancellable_sleep(bad)


def test_sleep_sleeps_while_idle(flag):
    start = time.monotonic()
    flag.cancellable_sleep(0.05)
    flag.cancellable_sleep(0)
    assert time.monotonic() - start >= 0.045


def test_sleep_raises_at_once_when_already_cancelled(flag):
    flag.begin(1)
    flag.cancel(1)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt, match="cancelled"):
        flag.cancellable_sleep(HANG)
    assert time.monotonic() - start < HANG / 2


def test_sleep_is_woken_by_a_cancel(flag):
    flag.begin(2)
    timer = threading.Timer(0.1, flag.cancel, args=(2,))
    timer.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt, match="cancelled"):
            flag.cancellable_sleep(HANG)
    finally:
        timer.cancel()
    assert time.monotonic() - start < HANG / 2


def test_sleep_lets_other_threads_run(flag):
    # The native sleep releases the GIL: a Python thread keeps counting meanwhile.
    counted = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            counted[0] += 1

    thread = threading.Thread(target=count)
    thread.start()
    try:
        flag.cancellable_sleep(0.2)
    finally:
        stop.set()
        thread.join()
    assert counted[0] > 1000


# -- the window: async exceptions into a worker thread --


class Boom(Exception):
    pass


def _worker(release: threading.Event, caught: list):
    def run():
        try:
            release.wait(HANG)  # blocked in C: a pending async exception waits for the next bytecode
            for _ in range(1000):
                pass
        except Boom as exc:
            caught.append(exc)
        else:
            caught.append(None)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_raise_in_window_hits_the_open_window(flag):
    release, caught = threading.Event(), []
    thread = _worker(release, caught)
    flag.open_window(4, thread.ident)
    assert flag.raise_in_window(3, Boom) is False
    assert flag.raise_in_window(4, Boom) is True
    release.set()
    thread.join(HANG)
    assert len(caught) == 1
    assert isinstance(caught[0], Boom)
    flag.close_window(4, thread.ident)
    assert flag.raise_in_window(4, Boom) is False


def test_close_window_stops_new_exceptions_and_leaves_a_pending_one_to_the_thread(flag):
    """The window closes at once; an exception already pending still fires in its thread (the core drops it there)."""
    release, caught = threading.Event(), []
    thread = _worker(release, caught)
    flag.open_window(6, thread.ident)
    assert flag.raise_in_window(6, Boom) is True
    flag.close_window(6, thread.ident)  # before the thread ran a single bytecode
    assert flag.raise_in_window(6, Boom) is False
    release.set()
    thread.join(HANG)
    assert len(caught) == 1
    assert isinstance(caught[0], Boom)


def test_close_window_of_another_gen_keeps_the_window(flag):
    release, caught = threading.Event(), []
    thread = _worker(release, caught)
    try:
        flag.open_window(9, thread.ident)
        flag.close_window(8, thread.ident)
        assert flag.raise_in_window(9, Boom) is True
    finally:
        release.set()
        thread.join(HANG)
        flag.close_window(9, thread.ident)
    assert isinstance(caught[0], Boom)


def test_raise_in_window_wants_a_class(flag):
    flag.open_window(2, threading.get_ident())
    try:
        with pytest.raises(TypeError):
            flag.raise_in_window(2, Boom())
    finally:
        flag.close_window(2, threading.get_ident())


# -- SIGINT: only the compiled module has a C handler --


def test_fallback_has_no_sigint_handler():
    assert _fallback.install_sigint_handler() is False
    assert _fallback.sigint_handler_installed() is False
    assert _fallback.take_sigint_arrival() == -1


_PRELUDE = """
import os, signal, sys, threading, time
from cancelkernel.native import _flag as f
seen = []
def record(signum, frame):
    seen.append(signum)
signal.signal(signal.SIGINT, record)   # Python's handler, which must keep running
def settle():
    for _ in range(100):  # bytecodes, so that Python runs its pending handler
        pass
"""


def test_install_is_idempotent_and_survives_signal_signal():
    out = run_python(
        prelude=_PRELUDE,
        code="""
        assert f.sigint_handler_installed() is False
        assert f.install_sigint_handler() is True
        assert f.install_sigint_handler() is True
        assert f.sigint_handler_installed() is True
        signal.signal(signal.SIGINT, record)      # CPython silently puts its own C handler back
        assert f.sigint_handler_installed() is False
        assert f.take_sigint_arrival() == -1      # without our handler nothing can be attributed
        assert f.install_sigint_handler() is True
        assert f.sigint_handler_installed() is True
        assert f.take_sigint_arrival() == 0
        print("OK")
    """,
    )
    assert out.strip() == "OK"


def test_outside_sigint_sets_the_flag_and_chains_to_python():
    out = run_python(
        prelude=_PRELUDE,
        code="""
        f.install_sigint_handler()
        f.begin(5)
        os.kill(os.getpid(), signal.SIGINT)
        settle()
        assert f.cancel_requested() is True
        assert f.take_sigint_arrival() == 5
        assert f.take_sigint_arrival() == 0      # taken once
        assert seen == [signal.SIGINT]           # Python's handler ran too
        f.end(5)
        print("OK")
    """,
    )
    assert out.strip() == "OK"


def test_sigint_while_idle_sets_nothing():
    out = run_python(
        prelude=_PRELUDE,
        code="""
        f.install_sigint_handler()
        os.kill(os.getpid(), signal.SIGINT)
        settle()
        assert f.cancel_requested() is False and f.take_sigint_arrival() == 0
        f.begin(1)
        assert f.cancel_requested() is False     # a SIGINT while idle is not for the next execution
        assert seen == [signal.SIGINT]
        print("OK")
    """,
    )
    assert out.strip() == "OK"


def test_expected_sigint_only_chains():
    out = run_python(
        prelude=_PRELUDE,
        code="""
        f.install_sigint_handler()
        f.begin(3)
        f.expect_sigint(3)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        settle()
        assert f.cancel_requested() is False     # the kernel's own SIGINT: the core sets the flag itself
        assert f.take_sigint_arrival() == 0
        assert seen == [signal.SIGINT]
        os.kill(os.getpid(), signal.SIGINT)      # the expectation was used up: this one is outside
        settle()
        assert f.cancel_requested() is True and f.take_sigint_arrival() == 3
        print("OK")
    """,
    )
    assert out.strip() == "OK"


def test_end_drops_the_expectation():
    out = run_python(
        prelude=_PRELUDE,
        code="""
        f.install_sigint_handler()
        f.begin(3)
        f.expect_sigint(3)
        f.end(3)
        f.begin(4)
        os.kill(os.getpid(), signal.SIGINT)
        settle()
        assert f.cancel_requested() is True and f.take_sigint_arrival() == 4
        print("OK")
    """,
    )
    assert out.strip() == "OK"


def test_sigint_on_another_thread_is_forwarded_to_the_main_thread():
    # The main thread sleeps in C; only a SIGINT delivered to it breaks the sleep.
    out = run_python(
        prelude=_PRELUDE,
        code="""
        signal.signal(signal.SIGINT, signal.default_int_handler)
        f.install_sigint_handler()
        f.begin(2)
        def send():
            time.sleep(0.2)
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)   # to this thread, not main
            time.sleep(0.5)
        threading.Thread(target=send, daemon=True).start()
        start = time.monotonic()
        try:
            time.sleep(20)
        except KeyboardInterrupt:
            pass
        took = time.monotonic() - start
        assert took < 10, took
        assert f.cancel_requested() is True and f.take_sigint_arrival() == 2
        print("OK")
    """,
    )
    assert out.strip() == "OK"


def test_fork_from_a_worker_thread_keeps_sigint_working_in_the_child():
    # In the child the forking thread is the main thread (as CPython sees it): SIGINT must act there.
    out = run_python(
        prelude=_PRELUDE,
        code="""
        import warnings
        warnings.simplefilter("ignore", DeprecationWarning)   # 3.12+: fork with threads
        signal.signal(signal.SIGINT, signal.default_int_handler)
        f.install_sigint_handler()
        f.begin(7)
        result = []
        def fork():
            pid = os.fork()
            if pid == 0:
                threading.Timer(0.2, os.kill, args=(os.getpid(), signal.SIGINT)).start()
                try:
                    time.sleep(20)
                    os._exit(3)
                except KeyboardInterrupt:
                    os._exit(0 if f.cancel_requested() and f.take_sigint_arrival() == 7 else 4)
            result.append(os.waitpid(pid, 0)[1])
        thread = threading.Thread(target=fork)
        thread.start()
        thread.join()
        print(os.waitstatus_to_exitcode(result[0]))
    """,
    )
    assert out.strip() == "0"


def test_chains_to_sig_ign():
    out = run_python(
        prelude=_PRELUDE,
        code="""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        f.install_sigint_handler()
        f.begin(6)
        os.kill(os.getpid(), signal.SIGINT)
        settle()
        assert f.cancel_requested() is True
        print("OK")
    """,
    )
    assert out.strip() == "OK"


def test_chains_to_sig_dfl():
    # Python's behaviour is unchanged: with SIG_DFL a SIGINT still ends the process.
    run_python(
        prelude=_PRELUDE,
        code="""
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        f.install_sigint_handler()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
        print("survived")
    """,
        expect_rc=-2,
    )


def test_default_handler_still_raises_keyboardinterrupt():
    out = run_python(
        prelude=_PRELUDE,
        code="""
        signal.signal(signal.SIGINT, signal.default_int_handler)
        f.install_sigint_handler()
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            print("KeyboardInterrupt")
    """,
    )
    assert out.strip() == "KeyboardInterrupt"


def test_native_sleep_still_runs_python_signal_handlers():
    # Outside a kernel (no execution running) Ctrl-C must stop cancellable_sleep as it stops time.sleep.
    out = run_python(
        prelude=_PRELUDE,
        code="""
        signal.signal(signal.SIGINT, signal.default_int_handler)
        threading.Timer(0.2, os.kill, args=(os.getpid(), signal.SIGINT)).start()
        start = time.monotonic()
        try:
            f.cancellable_sleep(20)
        except KeyboardInterrupt as exc:
            print("KeyboardInterrupt", time.monotonic() - start < 10)
    """,
    )
    assert out.split() == ["KeyboardInterrupt", "True"]


def test_the_fallback_pause_uses_the_real_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    """A yield pause lets go of the GIL and never raises, even while cooperative waits replaced time.sleep."""

    def replaced(seconds: float) -> None:
        raise KeyboardInterrupt("the replaced sleep was called")

    monkeypatch.setattr(time, "sleep", replaced)
    _fallback.yield_pause(0.001)
