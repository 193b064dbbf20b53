"""The interactive shell: IPython's, with user code handed to our executor.

Only `run_code` changes.  It is IPython's own (9.x and 8.x share it), except
that the code object runs through the executor (main thread or worker) inside
a cancellation window, and an interrupt is reported briefly and fast instead
of with IPython's full traceback (which costs more than the interrupt itself).
"""

from __future__ import annotations

import asyncio
import sys
import types
from typing import Any

from ipykernel.zmqshell import ZMQInteractiveShell
from traitlets import Any as AnyTrait
from traitlets import Type

from . import iostream, stacks
from .cancel import CellInterrupt, Execution
from .deadlines import DeadlineExceeded, _ScopeExpired


class CancelShell(ZMQInteractiveShell):
    """ZMQInteractiveShell whose cells run through a cancellation-aware executor."""

    executor = AnyTrait(None, allow_none=True, help="The Executor that runs user code (set by the kernel).")
    display_pub_class = Type(iostream.CancelDisplayPublisher, help="Publisher of display() output; feeds the quiet-budget clock.")

    # The execution whose interrupt was reported last (read by the kernel for the reply).
    interrupt_report: dict | None = None

    async def run_code(self, code_obj: types.CodeType, result: Any = None, *, async_: bool = False) -> bool:  # type: ignore[override]
        """Execute a code object; on an exception show a traceback and return True."""
        __tracebackhide__ = "__ipython_bottom__"
        # As IPython: our excepthook while user code runs, so a direct call
        # to sys.excepthook does not trigger the crash handler.
        old_excepthook, sys.excepthook = sys.excepthook, self.excepthook
        self.sys_excepthook = old_excepthook
        outflag = True
        import bdb

        try:
            try:
                if self.executor is None:
                    if async_:
                        await eval(code_obj, self.user_global_ns, self.user_ns)
                    else:
                        exec(code_obj, self.user_global_ns, self.user_ns)
                else:
                    await self.executor.run(code_obj, async_, self.user_global_ns, self.user_ns)
            finally:
                sys.excepthook = old_excepthook
        except SystemExit as e:
            if result is not None:
                result.error_in_exec = e
            self.showtraceback(exception_only=True)
            from warnings import warn

            warn("To exit: use 'exit', 'quit', or Ctrl-D.", stacklevel=1)
        except bdb.BdbQuit:
            if result is not None:
                result.error_in_exec = sys.exc_info()[1]
        except self.custom_exceptions:
            etype, value, tb = sys.exc_info()
            if result is not None:
                result.error_in_exec = value
            self.CustomTB(etype, value, tb)
        except BaseException as exc:  # noqa: BLE001 - IPython's bare except
            if result is not None:
                result.error_in_exec = exc
            execution = self._interrupted_execution(exc)
            if execution is not None:
                self.show_interrupt(execution, exc)
            elif isinstance(exc, _ScopeExpired) and exc.scope is not None:
                # A whole-cell deadline (%%timeout) has no `with` block to convert it.
                error = DeadlineExceeded(exc.scope.message()).with_traceback(exc.__traceback__)
                if result is not None:
                    result.error_in_exec = error
                self.showtraceback(exc_tuple=(DeadlineExceeded, error, exc.__traceback__), running_compiled_code=True)
            else:
                self.showtraceback(running_compiled_code=True)
        else:
            outflag = False
        return outflag

    def _interrupted_execution(self, exc: BaseException) -> Execution | None:
        """The execution this exception interrupted, if it is one of our interrupts."""
        if isinstance(exc, CellInterrupt) and exc.execution is not None:
            return exc.execution
        core = getattr(self.executor, "core", None)
        execution = core.current if core is not None else None
        if execution is not None and execution.cancelled and isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
            return execution  # e.g. input() re-raises a plain KeyboardInterrupt
        return None

    def show_interrupt(self, execution: Execution, exc: BaseException) -> None:
        """Publish a short error for an interrupted cell: where it stopped, why, after how long."""
        frames = stacks.frames_from_traceback(exc.__traceback__, self.cell_label)
        ename = "CancelledError" if isinstance(exc, asyncio.CancelledError) else "KeyboardInterrupt"
        evalue = interrupt_message(execution, str(exc))
        stb = [f"\x1b[31m{ename}\x1b[0m  interrupted, {stack_heading(execution)}"]
        stb += stacks.format_frames(frames)
        stb.append(f"\x1b[31m{ename}\x1b[0m: {evalue}")
        self.interrupt_report = {
            "execution": execution.msg_id,
            "ename": ename,
            "evalue": evalue,
            "frames": frames,
            "stopped_at": stacks.stopped_at(frames),
        }
        # IPython formats the exception again for its history (ultratb, ~10 ms and
        # growing with depth) unless the exception renders itself.
        try:
            exc._render_traceback_ = lambda: stb  # type: ignore[attr-defined]
        except AttributeError:
            pass
        self._showtraceback(type(exc), evalue, stb)

    def _showtraceback(self, etype: type, evalue: object, stb: list[str]) -> None:
        iostream.output_seen()  # an error is output too: it resets the quiet-budget clock
        super()._showtraceback(etype, evalue, stb)

    def cell_label(self, filename: str) -> str | None:
        """'Cell In[3]' for a cell's file name, as IPython shows it."""
        try:
            named = self.compile.format_code_name(filename)
        except Exception:  # noqa: BLE001 - older IPython
            return None
        return " ".join(named) if named else None


def stack_heading(execution: Execution) -> str:
    return f"innermost frames last ({execution.elapsed():.2f} s after the cell started)"


_REASON_TEXT = {
    "request": "by an interrupt request",
    "signal": "by SIGINT",
    "wall_budget": "because the cell ran past its wall budget",
    "quiet_budget": "because the cell was silent past its quiet budget",
    "deadline": "because a deadline passed",
    "shutdown": "because the kernel is shutting down",
}


def interrupt_message(execution: Execution, detail: str = "") -> str:
    """One sentence: why the cell was stopped and what happened to the exec thread."""
    why = _REASON_TEXT.get(execution.cancel_reason or "", "by an interrupt")
    text = f"cell stopped {why}"
    if execution.cancel_time is not None:
        text += f" {execution.cancel_time - execution.started:.2f} s after it started"
    if detail:
        text += f"; {detail}"
    return text
