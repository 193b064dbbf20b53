"""The interactive shell: IPython's, with user code handed to the runtime's executor.

Only `run_code` changes (upstream.run_code_like_ipython, a labelled copy):
the code object runs through the executor (main thread or worker) inside a
cancellation window, and an interrupt is reported briefly and fast instead of
with IPython's full traceback (which costs more than the interrupt itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import types
from collections.abc import Callable
from typing import Any, cast

from ipykernel.zmqshell import ZMQInteractiveShell
from traitlets import Any as AnyTrait
from traitlets import Type

from ..frames import format_frames
from ..runtime.deadlines import DeadlineExceeded, expired_scope
from ..runtime.execution import CellInterrupt, Execution, InterruptReport
from ..runtime.executors import run_here
from ..runtime.holders import release_stopped_frames
from ..runtime.stacks import from_traceback
from .concurrent_cells import (
    Bookkeeping,
    CellDisplayHook,
    CellPayloads,
    CountedPatch,
    SharedBuiltinTrap,
    SharedDisplayTrap,
    per_cell,
)
from .events import interrupt_message
from .streams import CancelDisplayPublisher
from .upstream import HistoryWrittenInOrder, run_code_like_ipython


class CancelShell(ZMQInteractiveShell):
    """ZMQInteractiveShell whose cells run through a cancellation-aware executor."""

    runtime = AnyTrait(None, allow_none=True, help="The Runtime whose executor runs user code (set by the kernel).")
    display_pub_class = Type(
        CancelDisplayPublisher, help="Publisher of display() output; feeds the quiet-budget clock."
    )
    displayhook_class = Type(
        CellDisplayHook, help="The displayhook of cell values; keeps each cell's result apart (concurrent_cells.py)."
    )

    # What ipykernel keeps on the shell for the reply, kept per cell (two cells can show an error at once).
    _last_traceback = per_cell("last_traceback")
    _last_traceback_during_displayhook = per_cell("traceback_during_displayhook", False)

    # This cell's transform, answered again to IPython's run_cell (upstream.run_cell_like_stock); None outside it.
    pre_transformed = per_cell("pre_transformed")

    # Called with the msg_id of the cell when an error is shown (set by the kernel): an error is output too.
    on_output: Callable[[str | None], None] | None = None
    # Called with the cell's execution just before its traceback is shown (set by the kernel: no live note after it).
    on_traceback: Callable[[Execution | None], None] | None = None

    def __init__(self, *args: Any, **kwargs: Any):
        # IPython's run_cell bookkeeping, one cell at a time (concurrent_cells.py); made before super()
        # runs the init_* steps below, which build the shared traps.
        self.bookkeeping = Bookkeeping()
        self.excepthook_patch = CountedPatch(self._install_excepthook, self._restore_excepthook)
        super().__init__(*args, **kwargs)

    def init_history(self) -> None:
        """IPython's init_history (9.18.1) with a history whose writes never make a cell wait (upstream.py)."""
        self.history_manager = HistoryWrittenInOrder(shell=self, parent=self)
        self.configurables.append(self.history_manager)  # type: ignore[arg-type]  # IPython annotates it too narrowly

    def init_builtins(self) -> None:
        super().init_builtins()
        self.builtin_trap = SharedBuiltinTrap(shell=self)

    def init_displayhook(self) -> None:
        super().init_displayhook()
        self.display_trap = SharedDisplayTrap(hook=self.displayhook)

    def init_payload(self) -> None:
        self.payload_manager = CellPayloads(parent=self)
        self.configurables.append(self.payload_manager)  # type: ignore[arg-type]  # IPython annotates it too narrowly

    async def run_cell_async(self, *args: Any, **kwargs: Any) -> Any:
        """IPython's run_cell_async with its bookkeeping under the lock (released while user code runs, in run_code)."""
        with self.bookkeeping.held():
            return await super().run_cell_async(*args, **kwargs)

    def transform_cell(self, raw_cell: str) -> str:
        """IPython's transform_cell, except for the very cell text the kernel just transformed (asked twice a cell)."""
        done = self.pre_transformed
        if done is not None and done[0] is raw_cell:
            return cast(str, done[1])
        return cast(str, super().transform_cell(raw_cell))

    def should_run_async(
        self, raw_cell: str, *, transformed_cell: str | None = None, preprocessing_exc_tuple: Any = None
    ) -> bool:
        """IPython's should_run_async, answered again without compiling for the cell the kernel already asked about."""
        done = self.pre_transformed
        if done is not None and done[0] is raw_cell and done[1] is transformed_cell and preprocessing_exc_tuple is None:
            self.pre_transformed = None  # both answers given: a run_cell from the cell's own code asks afresh
            return bool(done[2])
        return bool(
            super().should_run_async(
                raw_cell, transformed_cell=transformed_cell, preprocessing_exc_tuple=preprocessing_exc_tuple
            )
        )

    def _install_excepthook(self) -> None:
        self._saved_excepthook, sys.excepthook = sys.excepthook, self.excepthook
        self.sys_excepthook = self._saved_excepthook

    def _restore_excepthook(self) -> None:
        sys.excepthook = self._saved_excepthook

    async def run_code(self, code_obj: types.CodeType, result: Any = None, *, async_: bool = False) -> bool:
        """Execute a code object; on an exception show a traceback and return True."""
        __tracebackhide__ = "__ipython_bottom__"
        return await run_code_like_ipython(
            self, code_obj, result, async_, self._execute, lambda exc: self._report(exc, result)
        )

    async def _execute(self, code_obj: types.CodeType, async_: bool) -> None:
        __tracebackhide__ = True
        if self.runtime is None:
            await run_here(code_obj, async_, self.user_global_ns, self.user_ns)
        else:
            await self.runtime.executor.run(code_obj, async_, self.user_global_ns, self.user_ns)

    def _report(self, exc: BaseException, result: Any) -> bool:
        """Our way of showing an interrupt or a whole-cell deadline; False: IPython's traceback."""
        execution = self._interrupted_execution(exc)
        if execution is not None:
            self.show_interrupt(execution, exc)
            if execution.memory.kind is not None:
                # Stopped for memory: the traceback would keep every unwound frame's locals (and their memory) alive.
                execution.memory.released = release_stopped_frames(exc.__traceback__)
            return True
        scope = expired_scope(exc)
        if scope is not None:
            # A whole-cell deadline (%%timeout) has no `with` block to turn its expiry into DeadlineExceeded.
            error = DeadlineExceeded(scope.message()).with_traceback(exc.__traceback__)
            if result is not None:
                result.error_in_exec = error
            self.showtraceback(exc_tuple=(DeadlineExceeded, error, exc.__traceback__), running_compiled_code=True)
            return True
        return False

    def current_execution(self) -> Execution | None:
        """The execution whose code this shell runs now (the parent shell's, or this subshell thread's)."""
        if self.runtime is None:
            return None
        core = self.runtime.core
        found = core.on_thread(self.runtime.executor.exec_thread_id) or core.on_thread(threading.get_ident())
        return cast("Execution | None", found)

    def _interrupted_execution(self, exc: BaseException) -> Execution | None:
        """The execution this exception interrupted, if it is one of our interrupts."""
        if isinstance(exc, CellInterrupt) and exc.execution is not None:
            return exc.execution
        execution = self.current_execution()
        if (
            execution is not None
            and execution.cancelled
            and isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError))
        ):
            return execution  # e.g. input() re-raises a plain KeyboardInterrupt
        return None

    def show_interrupt(self, execution: Execution, exc: BaseException) -> None:
        """Publish a short error for an interrupted cell: where it stopped, why, after how long (said once)."""
        frames = from_traceback(exc.__traceback__, self.cell_label)
        if not frames and execution.stack is not None:
            frames = execution.stack.frames  # raised from outside its thread (abandoned): where it was blocked
        ename = "CancelledError" if isinstance(exc, asyncio.CancelledError) else "KeyboardInterrupt"
        gil_held = self.runtime.gil_held(execution) if self.runtime is not None else 0.0
        evalue = interrupt_message(execution, gil_held)
        stb = [f"\x1b[31m{ename:<42}\x1b[0mTraceback (most recent call last)"]
        stb += format_frames(frames, color=True)
        stb.append(f"\x1b[31m{ename}\x1b[0m: {evalue}")
        execution.report = InterruptReport(ename, evalue, frames, told_gil=bool(gil_held))
        # IPython formats the exception again for its history (ultratb, ~10 ms and
        # growing with depth) unless the exception renders itself.
        with contextlib.suppress(AttributeError):
            exc._render_traceback_ = lambda: stb  # type: ignore[attr-defined]
        self._showtraceback(type(exc), evalue, stb, execution)

    def _showtraceback(self, etype: type, evalue: object, stb: list[str], execution: Execution | None = None) -> None:
        if self.on_traceback is not None:
            self.on_traceback(execution or self.current_execution())
        if self.on_output is not None:
            self.on_output(None)
        super()._showtraceback(etype, evalue, stb)

    def cell_label(self, filename: str) -> str | None:
        """'Cell In[3]' for a cell's file name, as IPython shows it."""
        try:
            named = self.compile.format_code_name(filename)
        except Exception:  # noqa: BLE001 - older IPython
            return None
        return " ".join(named) if named else None
