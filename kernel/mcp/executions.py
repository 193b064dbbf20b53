"""Executions by id: each cell an MCP client ran, live while it runs, its outcome once it ended.

An execution is an `AgentKernel.submit` (the agent client's background run
with its live `CellWatch`); this module only names it, remembers how it ended
(a `CellResult`, a `RunawayCellError` with every attempt, or the failure that
stopped the run) and keeps the last KEEP_FINISHED finished ones.  A tool call
waits for a cell on the event loop itself: the cell's thread wakes the loop as
it ends, with no worker thread in between.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import typing as t
from collections import OrderedDict
from dataclasses import dataclass, field

import anyio
import anyio.to_thread

from ..agent.errors import AgentError, BadInputError, RunawayCellError
from ..agent.result import CellResult
from .options import KEEP_FINISHED

if t.TYPE_CHECKING:
    from ..agent.submission import Submission
    from ..agent.watch import CellWatch


@dataclass
class Ending:
    """How an execution ended: exactly one of result (a CellResult) or failure (a sentence) is set."""

    result: CellResult | None = None
    attempts: list[CellResult] = field(default_factory=list)  # a runaway again: every attempt, oldest first
    runaway_again: bool = False
    failure: str | None = None


class ToolExecution:
    """One cell run for an MCP client, on one kernel."""

    def __init__(
        self,
        execution_id: str,
        kernel_id: str,
        submission: Submission,
        *,
        source: str,
        cell_id: str,
        retry_of: str | None,
    ):
        self.id = execution_id
        self.kernel_id = kernel_id
        self.source = source
        self.cell_id = cell_id
        self.retry_of = retry_of
        self.started = time.time()
        self.interrupt_asked: str | None = None  # who asked: "interrupt tool", "MCP cancellation"
        self.closed_by: str | None = None  # the kernel was shut down under it (shutdown_kernel, server exit)
        self._submission = submission
        self._ending: Ending | None = None
        self._lock = threading.Lock()
        self._ended: dict[asyncio.AbstractEventLoop, anyio.Event] = {}  # set on each waiting loop as the cell ends

    @property
    def watch(self) -> CellWatch:
        return self._submission.watch

    @property
    def done(self) -> bool:
        return self._submission.done

    def wait(self, timeout: float | None) -> bool:
        """True once the cell has ended (within `timeout` seconds)."""
        return self._submission.wait(timeout)

    async def ended_within(self, timeout: float) -> bool:
        """wait() for a tool call: True once the cell has ended (within `timeout` seconds); the loop runs meanwhile."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (trio): a worker thread waits on the cell's event
            return bool(await anyio.to_thread.run_sync(self.wait, timeout, abandon_on_cancel=True))
        ended = self._ended.get(loop)
        if ended is None:
            ended = self._ended[loop] = anyio.Event()
            self._submission.when_done(lambda: loop.call_soon_threadsafe(ended.set))
        with anyio.move_on_after(timeout):
            await ended.wait()
        return self.done

    def watched(self) -> None:
        """Someone follows the cell: from now on the run loop asks our kernel where it is, about once a second.

        Off for the first moments of a cell (most end within them): the agent client would
        otherwise send a status request at the start of every cell, a control round trip each.
        """
        self.watch.want_status = True

    def interrupt(self, who: str) -> bool:
        """The cell's one interrupt (then the policy's escalation); False if it had already ended."""
        if self.done:
            return False
        self.interrupt_asked = self.interrupt_asked or who
        self._submission.interrupt()
        return True

    def ending(self) -> Ending | None:
        """How it ended, or None while it runs."""
        if not self.done:
            return None
        with self._lock:
            if self._ending is None:
                self._ending = self._collect()
            return self._ending

    def _collect(self) -> Ending:
        try:
            return Ending(result=self._submission.result(0))
        except RunawayCellError as exc:
            return Ending(
                result=exc.attempts[-1] if exc.attempts else None,
                attempts=exc.attempts,
                runaway_again=True,
                failure=None if exc.attempts else str(exc),
            )
        except AgentError as exc:
            return Ending(failure=self._why_stopped(str(exc)))
        except Exception as exc:  # noqa: BLE001 - a run that broke (e.g. the kernel shut down under it) is reported, not raised
            return Ending(failure=self._why_stopped(f"{type(exc).__name__}: {exc}"))

    def _why_stopped(self, text: str) -> str:
        if self.closed_by:
            return f"the kernel was shut down ({self.closed_by}) while the cell ran"
        return f"the run of the cell failed: {text}"


class Executions:
    """Every running execution, and the last KEEP_FINISHED finished ones (older ones are forgotten)."""

    def __init__(self, keep: int = KEEP_FINISHED):
        self.keep = keep
        self._items: OrderedDict[str, ToolExecution] = OrderedDict()
        self._counter = itertools.count(1)
        self._lock = threading.Lock()

    def new_id(self) -> str:
        return f"e{next(self._counter)}"

    def add(self, execution: ToolExecution) -> None:
        with self._lock:
            self._items[execution.id] = execution
            self._prune()

    def get(self, execution_id: t.Any) -> ToolExecution:
        if not isinstance(execution_id, str) or not execution_id:
            raise BadInputError(
                f"execution_id must be the id an execute call returned (such as 'e1'), not {execution_id!r:.80}"
            )
        with self._lock:
            found = self._items.get(execution_id)
            known = list(self._items)[-5:]
        if found is None:
            hint = f"recent ones: {', '.join(known)}" if known else "none has run yet"
            raise BadInputError(
                f"no execution {execution_id!r} (the server keeps every running execution and the last {self.keep} "
                f"finished ones; {hint})"
            )
        return found

    def running(self) -> list[ToolExecution]:
        with self._lock:
            return [e for e in self._items.values() if not e.done]

    def _prune(self) -> None:
        finished = [key for key, e in self._items.items() if e.done]
        for key in finished[: max(0, len(finished) - self.keep)]:
            del self._items[key]
