"""Unit tests: the pieces that keep IPython's per-cell state safe for two cells at once (kernel/concurrent_cells.py).

The trap test hammers enter/exit from two threads with a tiny switch interval:
IPython's own BuiltinTrap fails it within a few thousand rounds here
(`KeyError: 'exit'`, the failure a storm cell once ended with).
"""

from __future__ import annotations

import builtins
import sys
import threading

import pytest
from IPython.core.interactiveshell import InteractiveShellABC

from cancelkernel.kernel import concurrent_cells
from cancelkernel.kernel.concurrent_cells import (
    Bookkeeping,
    CountedPatch,
    SharedBuiltinTrap,
    SharedDisplayTrap,
    cell_state,
    per_cell,
)

ROUNDS = 20_000


class _Shell:
    def get_ipython(self) -> _Shell:
        return self


InteractiveShellABC.register(_Shell)


@pytest.fixture
def tiny_switch_interval():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can: the race shows at once
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _hammer(enter_exit, threads: int = 2) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def run() -> None:
        start.wait()
        try:
            for _ in range(ROUNDS):
                enter_exit()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return errors


def test_the_builtin_trap_survives_two_threads(tiny_switch_interval) -> None:
    trap = SharedBuiltinTrap(shell=_Shell())
    quitter = builtins.__dict__.get("exit")

    def enter_exit() -> None:
        with trap:
            assert "exit" not in builtins.__dict__
            assert builtins.__dict__["get_ipython"] == trap.shell.get_ipython

    assert not _hammer(enter_exit)
    assert trap._nested_level == 0
    assert builtins.__dict__.get("exit") is quitter, "exit was not put back"
    assert "get_ipython" not in builtins.__dict__


def test_the_display_trap_survives_two_threads(tiny_switch_interval) -> None:
    hook = lambda value: None  # noqa: E731
    original = sys.displayhook
    trap = SharedDisplayTrap(hook=hook)

    def enter_exit() -> None:
        with trap:
            assert sys.displayhook is hook

    assert not _hammer(enter_exit)
    assert trap._nested_level == 0
    assert sys.displayhook is original


def test_a_counted_patch_is_applied_once_and_undone_by_the_last_user() -> None:
    calls: list[str] = []
    patch = CountedPatch(lambda: calls.append("apply"), lambda: calls.append("undo"))
    patch.enter()
    patch.enter()
    patch.exit()
    assert calls == ["apply"]
    patch.exit()
    assert calls == ["apply", "undo"]
    patch.exit()  # one exit too many never undoes twice
    assert calls == ["apply", "undo"]


def test_bookkeeping_is_given_up_while_user_code_runs_and_taken_back_after() -> None:
    book = Bookkeeping(patience=5.0)
    other_got_it = threading.Event()
    release_other = threading.Event()

    def other_cell() -> None:
        with book.held():
            other_got_it.set()
            release_other.wait(5)

    with book.held(), book.held():  # nested run_cell: re-entrant
        with book.released():
            t = threading.Thread(target=other_cell)
            t.start()
            assert other_got_it.wait(5), "another cell could not do its bookkeeping while ours ran user code"
            release_other.set()
            t.join(5)
        assert book._lock._is_owned(), "both levels taken back after the user code"
    assert not book._lock._is_owned()


def test_bookkeeping_held_too_long_by_another_thread_is_given_up_on() -> None:
    book = Bookkeeping(patience=0.05)
    holding, done = threading.Event(), threading.Event()

    def hog() -> None:
        with book.held():
            holding.set()
            done.wait(5)

    t = threading.Thread(target=hog, name="a-wedged-hook")
    t.start()
    assert holding.wait(5)
    ran = []
    with book.held():  # goes on without the lock, after the patience
        ran.append(True)
    done.set()
    t.join(5)
    assert ran == [True]


class _Holder:
    value = per_cell("payloads", factory=list)
    flag = per_cell("allow_stdin", False)


def test_a_per_cell_attribute_lives_in_the_cell_and_falls_back_outside() -> None:
    holder = _Holder()
    assert holder.flag is False
    assert holder.value == []
    holder.value.append("outside")
    with cell_state(allow_stdin=True) as state:
        assert holder.flag is True
        holder.value = ["inside"]
        assert state.payloads == ["inside"]
        seen_in_thread = []
        # A copied context (what the worker thread runs a cell in) sees the same cell.
        ctx = concurrent_cells.contextvars.copy_context()
        t = threading.Thread(target=lambda: seen_in_thread.append(ctx.run(lambda: holder.value)))
        t.start()
        t.join()
        assert seen_in_thread == [["inside"]]
    assert holder.value == ["outside"]
    assert holder.flag is False
