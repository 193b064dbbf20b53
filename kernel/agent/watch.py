"""A live view of one running cell, and cells run in the background.

The run loop (run.py) writes a `CellWatch` as it goes: the execute_request's
msg_id, the outputs so far, when the cell last spoke, what the kernel says
about it (`cancel_status`, refreshed about once a second when asked for), the
interventions.  Another thread reads it: an MCP server answering "how is
that cell doing?" while `AgentKernel.run` is busy, or a progress line.

`Submission` is a cell run on the AgentKernel's own background thread
(`AgentKernel.submit`): wait for it for a while, read its watch meanwhile,
interrupt it (its one interrupt), and collect its CellResult at the end.
"""

from __future__ import annotations

import contextlib
import threading
import time
import typing as t
from collections.abc import Iterator
from dataclasses import dataclass, field

from .errors import BadInputError
from .result import CellResult
from .threads import start_thread

# How often the run loop asks our kernel for its status while a watch wants it.
STATUS_EVERY = 1.0


@dataclass
class CellWatch:
    """What is known about a running cell right now (written by the run loop, read by anyone)."""

    want_status: bool = False  # ask the kernel for cancel_status about once a second
    msg_id: str = ""
    started: float = field(default_factory=time.monotonic)
    last_output: float = field(default_factory=time.monotonic)
    outputs: list[dict] = field(default_factory=list)  # the same list the result will hold
    kernel_status: dict | None = None  # the execution part of the latest cancel_status_reply
    actions: list[dict] = field(default_factory=list)
    finished: threading.Event = field(default_factory=threading.Event)
    status_at: float = 0.0

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def seconds_since_output(self) -> float:
        return time.monotonic() - self.last_output

    def current_line(self) -> str | None:
        """Where the kernel last saw the cell: "Cell In[3]:2 (time.sleep(10))", if known."""
        status = self.kernel_status or {}
        where, line = status.get("where"), status.get("line")
        if not where:
            return None
        return f"{where} ({line})" if line else t.cast(str, where)

    def summary(self) -> dict[str, t.Any]:
        """A JSON-able snapshot for someone asking how the cell is doing."""
        status = self.kernel_status or {}
        return {
            "msg_id": self.msg_id or None,
            "elapsed": round(self.elapsed(), 3),
            "seconds_since_output": round(self.seconds_since_output(), 3),
            "outputs": len(self.outputs),
            "where": self.current_line(),
            "kernel_state": status.get("state"),
            "interrupts_sent": status.get("interrupts_sent", 0),
            "status_age": round(time.monotonic() - self.status_at, 3) if self.kernel_status else None,
            "actions": [a.get("action") for a in self.actions],
            "finished": self.finished.is_set(),
        }


class Submission:
    """One cell running on an AgentKernel's background thread."""

    def __init__(self, run: t.Callable[[CellWatch], CellResult], interrupt: t.Callable[[], None], *, want_status: bool = True):
        self.watch = CellWatch(want_status=want_status)
        self._interrupt = interrupt
        self._result: CellResult | None = None
        self._error: BaseException | None = None
        self._thread = start_thread(self._go, run, name="cancelkernel-agent-cell")

    def _go(self, run: t.Callable[[CellWatch], CellResult]) -> None:
        try:
            self._result = run(self.watch)
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits (RunawayCellError included)
            self._error = exc
        finally:
            self.watch.finished.set()

    @property
    def done(self) -> bool:
        return self.watch.finished.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once the cell has finished (within `timeout` seconds)."""
        return self.watch.finished.wait(timeout)

    def result(self, timeout: float | None = None) -> CellResult:
        """The CellResult (raising what run() raised); TimeoutError if still running after `timeout`."""
        if not self.watch.finished.wait(timeout):
            raise TimeoutError(f"the cell {self.watch.msg_id or '(not sent yet)'} is still running")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def interrupt(self) -> None:
        """The cell's one interrupt (then the policy's escalation), as AgentKernel.interrupt."""
        self._interrupt()


class Turn:
    """Whose turn it is on one kernel: a second caller gets a clear error, never a tangled socket."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.watch: CellWatch | None = None  # the running cell's, while one runs

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    def try_claim(self) -> bool:
        return self._lock.acquire(blocking=False)

    def claim(self, doing: str) -> None:
        if not self._lock.acquire(blocking=False):
            running = self.watch
            what = f"the cell {running.msg_id}" if running is not None and running.msg_id else "another call"
            raise BadInputError(f"cannot {doing}: {what} is still in progress on this kernel; wait for it, or interrupt it first")

    def release(self) -> None:
        self.watch = None
        self._lock.release()

    @contextlib.contextmanager
    def exclusive(self, doing: str) -> Iterator[None]:
        self.claim(doing)
        try:
            yield
        finally:
            self.release()
