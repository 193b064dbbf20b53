"""Errors of the agent client: each says what happened and what to do next."""

from __future__ import annotations

import typing as t

if t.TYPE_CHECKING:
    from .result import CellResult


class AgentError(Exception):
    """Base of every error the agent client raises on purpose."""


class BadInputError(AgentError, ValueError, TypeError):
    """An argument was not usable; nothing was started or written."""


class KernelStartError(AgentError, RuntimeError):
    """The kernel could not be started, connected to, or brought back after a restart."""


class CheckpointError(AgentError, RuntimeError):
    """A checkpoint could not be saved or restored (or the kernel has no checkpoints).

    `ename`: the kernel's name for the failure (e.g. CheckpointNotFound), when the kernel answered with one.
    """

    def __init__(self, message: str, *, ename: str | None = None):
        super().__init__(message)
        self.ename = ename


class RunawayCellError(AgentError, RuntimeError):
    """A cell ran away again after its one interrupt: the client restarted the kernel instead.

    `attempts` holds every attempt's CellResult, oldest first; the last one is
    the restart this error reports.
    """

    def __init__(self, cell_key: str, attempts: list[CellResult]):
        self.cell_key = cell_key
        self.attempts = list(attempts)
        last = attempts[-1] if attempts else None
        why = last.reason_text if last is not None and last.reason_text else "it ran past its budget"
        state = last.state if last is not None else "lost"
        super().__init__(
            f"cell {cell_key!r} ran away again after {len(attempts) - 1} earlier attempt(s) ({why}); "
            f"it was not interrupted a second time: the kernel was restarted (state {state}). "
            f"Fix the cell (see .attempts for outputs and stacks) or give it a larger budget; "
            f"AgentKernel.reset_cell({cell_key!r}) allows one more interrupt."
        )
