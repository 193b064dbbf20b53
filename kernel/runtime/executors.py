"""Executors: where a cell's code objects run.  Two modes, one interface.

- `MainThreadExecutor` (mode "main"): user code on the main thread, exactly
  where stock ipykernel runs it; SIGINT breaks blocking calls.
- `WorkerExecutor` (mode "worker", worker.py): user code on one persistent
  worker thread, the main loop stays free; interrupts arrive as async
  exceptions, and a worker stuck in a blocking C call past the grace period
  is abandoned and replaced (the namespace is shared, so nothing is lost).

Both open a cancellation window around the user's code, so that an
interrupt is only ever raised inside the code of the execution it was meant
for, and run it as that execution's code for deadlines (`registry.cell`).
"""

from __future__ import annotations

import asyncio
import threading
import time
import types
from collections.abc import Callable
from typing import Any

from ..protocol import UNRESPONSIVE_BLOCKED, UNRESPONSIVE_CAUGHT
from .cooperative import CooperativeWaits
from .core import CancellationCore
from .deadlines import DeadlineRegistry
from .execution import Execution, Window
from .stacks import live_frame

_real_sleep = time.sleep

LabelOf = Callable[[str], "str | None"]


# Names of the exec threads ever given up on: while empty (nearly always), no write needs to ask which thread it is.
ABANDONED_SO_FAR: list[str] = []


def is_abandoned_thread() -> bool:
    """The calling thread is an exec thread given up on: its output goes nowhere."""
    return getattr(threading.current_thread(), "abandoned", False) is True


def abandon(thread: threading.Thread) -> None:
    """Give up on an exec thread: from now on it is muted and its cells are stopped (abandoned.py)."""
    ABANDONED_SO_FAR.append(thread.name)
    thread.abandoned = True  # type: ignore[attr-defined]


class Executor:
    """Runs one compiled code object of the current execution.

    A cell of a subshell (ipykernel runs each subshell on its own thread) runs
    in place on that thread, with worker-style delivery, in every mode.
    """

    mode = "?"

    def __init__(
        self,
        core: CancellationCore,
        deadlines: DeadlineRegistry,
        label_of: LabelOf,
        waits: CooperativeWaits | None = None,
    ):
        self.core = core
        self.deadlines = deadlines
        self.label_of = label_of
        self.waits = waits  # the cooperative waits: a thread waiting in one runs Python, it is not blocked in C
        self._wakers: dict[int, threading.Event] = {}

    async def run(self, code: types.CodeType, async_: bool, globals_: dict, locals_: Any) -> None:
        __tracebackhide__ = True
        here = self.core.on_thread(threading.get_ident())
        if here is not None and here.subshell_id is not None:
            if nested(here):
                await run_here(code, async_, globals_, locals_)
            else:
                await self.run_in_place(here, code, async_, globals_, locals_)
            return
        await self.run_cell_code(code, async_, globals_, locals_)

    async def run_cell_code(self, code: types.CodeType, async_: bool, globals_: dict, locals_: Any) -> None:
        """Run a code object of a parent-shell cell, where this mode runs them."""
        raise NotImplementedError

    async def run_in_place(
        self, execution: Execution, code: types.CodeType, async_: bool, globals_: dict, locals_: Any
    ) -> None:
        """Run on the calling thread inside `execution`'s window."""
        __tracebackhide__ = True
        ident = threading.get_ident()
        on_main = threading.current_thread() is threading.main_thread()
        window = Window(ident, on_main_thread=on_main, waker=None if on_main else self._waker(ident))
        if async_:
            # The task to cancel while the cell awaits: the one running run_cell_async.
            window.task = asyncio.current_task()
            window.loop = asyncio.get_running_loop()
        with self.deadlines.cell(execution, self.label_of):
            try:
                self.core.open_window(execution, window)
                if async_:
                    await eval(code, globals_, locals_)
                else:
                    exec(code, globals_, locals_)
            finally:
                late_interrupt = self.core.close_window(execution, window)
        if late_interrupt is not None:
            raise late_interrupt

    def _waker(self, ident: int) -> threading.Event:
        waker = self._wakers.get(ident)
        if waker is None:
            waker = self._wakers[ident] = threading.Event()
        waker.clear()
        return waker

    @property
    def exec_thread_id(self) -> int:
        """The thread that runs user code now (or will run it next)."""
        raise NotImplementedError

    def on_unresponsive(self, execution: Execution) -> str:
        """Called by the watchdog when an interrupt did not stop the code within the grace period.

        Returns why (protocol.UNRESPONSIVE_*): the code caught the interrupt and
        goes on, or it is blocked where the interrupt cannot reach it yet.
        """
        window = execution.window
        if window is None or window.on_main_thread:
            # SIGINT on the main thread is raised as soon as Python code runs: raised means caught.
            caught = execution.cancel.delivered
        else:
            caught = window.task is not None or runs_python(window.thread_id, self.waits)
        return UNRESPONSIVE_CAUGHT if caught else UNRESPONSIVE_BLOCKED

    def release(self, execution: Execution) -> None:
        """After on_unresponsive was reported: let go of what it held back (the worker's abandoned cell)."""

    def abandoned_threads(self) -> list[dict]:
        """Threads given up on, still alive, with where they are blocked."""
        return []

    def shutdown(self) -> None:
        pass


async def run_here(code: types.CodeType, async_: bool, globals_: dict, locals_: Any) -> None:
    """Run on the calling thread with no window: outside any execution, or nested in one."""
    __tracebackhide__ = True
    if async_:
        await eval(code, globals_, locals_)
    else:
        exec(code, globals_, locals_)


def nested(execution: Execution | None) -> bool:
    """run_code called from inside user code (%%capture, a nested run_cell): stay where we are."""
    window = execution.window if execution is not None else None
    return window is not None and window.thread_id == threading.get_ident()


class MainThreadExecutor(Executor):
    """User code on the main thread, as stock ipykernel does."""

    mode = "main"

    async def run_cell_code(self, code: types.CodeType, async_: bool, globals_: dict, locals_: Any) -> None:
        __tracebackhide__ = True
        execution = self.core.on_thread(threading.get_ident())
        if execution is None or nested(execution):
            await run_here(code, async_, globals_, locals_)
            return
        await self.run_in_place(execution, code, async_, globals_, locals_)

    @property
    def exec_thread_id(self) -> int:
        ident = threading.main_thread().ident
        assert ident is not None
        return ident


def runs_python(
    thread_id: int | None, waits: CooperativeWaits | None, samples: int = 5, interval: float = 0.005
) -> bool:
    """True if the thread executes Python code (its innermost frame moves,
    or it sits in a cooperative wait), not one C call."""
    seen = set()
    for _ in range(samples):
        frame = live_frame(thread_id)
        if frame is None:
            return False
        if waits is not None and waits.in_wait(frame):
            return True
        seen.add((id(frame), frame.f_lasti))
        _real_sleep(interval)
    return len(seen) > 1


def make_executor(
    mode: str, core: CancellationCore, deadlines: DeadlineRegistry, label_of: LabelOf, waits: CooperativeWaits
) -> Executor:
    if mode == "main":
        return MainThreadExecutor(core, deadlines, label_of, waits)
    if mode == "worker":
        from .worker import WorkerExecutor

        return WorkerExecutor(core, deadlines, label_of, waits)
    raise ValueError(f"unknown exec_thread mode {mode!r}; use 'main' or 'worker'")
