"""A cell run in the background (`AgentKernel.submit`).

A `Submission` runs the cell on a thread of its own: wait for it for a while,
read its watch meanwhile, interrupt it (its one interrupt), and collect its
CellResult at the end.  Whoever waits on an event loop asks to be called when
it ends (`when_done`) instead of parking a thread in `wait`.
"""

from __future__ import annotations

import contextlib
import threading
import typing as t

from .result import CellResult
from .threads import start_thread
from .watch import CellWatch


class Submission:
    """One cell running on an AgentKernel's background thread."""

    def __init__(
        self, run: t.Callable[[CellWatch], CellResult], interrupt: t.Callable[[], None], *, want_status: bool = True
    ):
        self.watch = CellWatch(want_status=want_status)
        self._interrupt = interrupt
        self._result: CellResult | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._callbacks: list[t.Callable[[], object]] = []
        self._thread = start_thread(self._go, run, name="cancelkernel-agent-cell")

    def _go(self, run: t.Callable[[CellWatch], CellResult]) -> None:
        try:
            self._result = run(self.watch)
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits (RunawayCellError included)
            self._error = exc
        finally:
            with self._lock:
                self.watch.finished.set()
                callbacks, self._callbacks = self._callbacks, []
            for callback in callbacks:
                with contextlib.suppress(Exception):  # one waiter's failure must not keep the others waiting
                    callback()

    @property
    def done(self) -> bool:
        return self.watch.finished.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once the cell has finished (within `timeout` seconds)."""
        return self.watch.finished.wait(timeout)

    def when_done(self, callback: t.Callable[[], object]) -> None:
        """Call `callback()` once the cell has finished: at once if it has, else on the cell's thread as it ends.

        The callback must be quick (a waiter on an event loop hands itself a wake-up); what it raises is ignored.
        """
        with self._lock:
            if not self.done:
                self._callbacks.append(callback)
                return
        callback()

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
