"""Unit tests: deadline scopes and the runtime's registry, fired by a real watchdog into a real thread."""

from __future__ import annotations

import os
import threading
import time

import pytest

from cancelkernel.runtime.core import CancellationCore
from cancelkernel.runtime.deadlines import DeadlineExceeded, DeadlineRegistry, fail_after, fail_at, move_on_after
from cancelkernel.runtime.dumps import DumpFile
from cancelkernel.runtime.execution import Window
from cancelkernel.runtime.watchdog import Watchdog


def no_label(filename: str) -> str | None:
    return None


@pytest.fixture
def registry() -> DeadlineRegistry:
    return DeadlineRegistry(CancellationCore(signal_children=False), wake=lambda: None)


def test_outside_a_cell_a_scope_explains_itself() -> None:
    with pytest.raises(RuntimeError, match="inside a running cell of the cancelkernel kernel"), fail_after(1):
        pass


def test_a_relative_deadline_starts_at_enter(registry: DeadlineRegistry) -> None:
    core = registry._core
    execution = core.begin("x", "", thread_id=threading.get_ident())
    scope = fail_after(5)
    time.sleep(0.2)
    with registry.cell(execution, no_label):
        before = time.monotonic()
        with scope:
            assert before + 5 <= scope.deadline <= time.monotonic() + 5
            assert registry.next_deadline() == scope.deadline
        assert registry.next_deadline() is None  # disarmed on exit
    assert scope.where.endswith(f"{os.path.basename(__file__)}:{scope.where.rsplit(':', 1)[1]}")
    core.end(execution)


def test_the_outermost_expired_scope_is_the_one_that_fires(registry: DeadlineRegistry) -> None:
    core = registry._core
    execution = core.begin("x", "", thread_id=threading.get_ident())
    with registry.cell(execution, no_label):
        now = time.monotonic()
        with fail_at(now + 10) as outer, move_on_after(0) as inner:
            assert registry.expired(now + 1) is inner
            assert registry.expired(now + 11) is outer  # both expired: the outer one catches, as in trio
    core.end(execution)


@pytest.mark.parametrize("bad", [float("nan"), "1", True, None])
def test_bad_arguments(bad: object) -> None:
    with pytest.raises(TypeError):
        fail_after(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        fail_at(bad)  # type: ignore[arg-type]


def test_negative_seconds_are_refused() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        move_on_after(-1)


def test_the_watchdog_fires_a_deadline_into_the_cells_thread(tmp_path: object) -> None:
    core = CancellationCore(signal_children=False)
    dumps = DumpFile(os.path.join(str(tmp_path), "stacks.txt"))
    watchdog = Watchdog(core, grace=0.5, dumps=dumps, on_trip=lambda e, r: None, on_unresponsive=lambda e: None)
    outcome: dict[str, object] = {}
    ready = threading.Event()

    def cell() -> None:
        execution = core.begin("cell", "", thread_id=threading.get_ident())
        window = Window(threading.get_ident(), on_main_thread=False)
        try:
            with watchdog.deadlines.cell(execution, no_label):
                core.open_window(execution, window)
                ready.set()
                try:
                    with fail_after(0.2) as scope:
                        while True:
                            pass
                except DeadlineExceeded as exc:
                    outcome["error"] = exc
                    outcome["caught"] = scope.cancelled_caught
                with move_on_after(0.1) as quiet:
                    time.sleep(0.05)  # finishes in time: nothing fires
                outcome["quiet"] = quiet.cancel_called
        finally:
            core.close_window(execution, window)
            core.end(execution)

    thread = threading.Thread(target=cell)
    try:
        thread.start()
        assert ready.wait(10)
        thread.join(10)
        assert not thread.is_alive()
        assert "expired after 0.2" in str(outcome["error"])
        assert outcome["caught"] is True
        assert outcome["quiet"] is False
        assert watchdog.deadlines.next_deadline() is None
    finally:
        watchdog.stop()
        dumps.close()
