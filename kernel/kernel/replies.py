"""execute_reply contents the kernel builds itself (a refused cell, an escaped interrupt, a cell cancelled before it
started), and the execution count such a cell takes."""

from __future__ import annotations

import asyncio
import typing as t

from ..runtime.execution import Execution
from .events import interrupt_message

if t.TYPE_CHECKING:
    from .shell import CancelShell


def error_reply(shell: t.Any, etype: type, evalue: str, execution_count: int) -> dict:
    """Show a one-line error in the cell and build its execute_reply content."""
    stb = [f"\x1b[31m{etype.__name__}\x1b[0m: {evalue}"]
    shell._showtraceback(etype, evalue, stb)
    return {
        "status": "error",
        "ename": etype.__name__,
        "evalue": evalue,
        "traceback": stb,
        "execution_count": execution_count,
        "user_expressions": {},
        "payload": [],
    }


def escaped_interrupt_reply(shell: CancelShell, execution: Execution, exc: BaseException) -> dict:
    """The reply of a cell whose interrupt escaped the shell: run_cell counted the cell before it escaped."""
    etype = asyncio.CancelledError if isinstance(exc, asyncio.CancelledError) else KeyboardInterrupt
    return error_reply(shell, etype, interrupt_message(execution), shell.execution_count - 1)


def count_as_run(shell: CancelShell, code: str, silent: bool, store_history: bool) -> int:
    """A cell answered without running still takes its execution count and history entry, as stock's error cells do."""
    with shell.bookkeeping.held():
        count: int = shell.execution_count
        if store_history and not silent:
            if shell.history_manager is not None:
                shell.history_manager.store_inputs(count, code, code)
            shell.execution_count += 1
    return count


class InternalError(Exception):
    """Something in cancelkernel's own per-cell machinery failed; the cell gets a reply saying so."""

    def _render_traceback_(self) -> list[str]:
        return [f"InternalError: {self}"]


def internal_error_text(when: str, exc: BaseException) -> str:
    return (
        f"cancelkernel failed {when}: {type(exc).__name__}: {exc}. The kernel keeps running; "
        f"please report this with the kernel's log (the full traceback is there)"
    )
