"""execute_reply contents the kernel builds itself: a refused cell, an escaped interrupt, a cell cancelled before it started."""

from __future__ import annotations

import typing as t


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


class InternalError(Exception):
    """Something in cancelkernel's own per-cell machinery failed; the cell gets a reply saying so."""

    def _render_traceback_(self) -> list[str]:
        return [f"InternalError: {self}"]


def internal_error_text(when: str, exc: BaseException) -> str:
    return (
        f"cancelkernel failed {when}: {type(exc).__name__}: {exc}. The kernel keeps running; "
        f"please report this with the kernel's log (the full traceback is there)"
    )
