"""The runtime of one kernel process: everything that stops cells, wired together.

It owns the cancellation core, the SIGINT owner, the executor, the watchdog
(with its deadline registry) and the stack-dump file.  The kernel side asks
it to begin, cancel and end executions, and hears back through a
`RuntimeListener` (to publish what happened); it never reaches inside.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Protocol

from .. import native
from ..frames import Frame, dumped_stack
from ..protocol import STACK_DUMP, STACK_RUNAWAY, STACK_UNRESPONSIVE
from .core import CancellationCore
from .deadlines import CancelScope, CellContext, DeadlineRegistry, fail_after
from .dumps import DumpFile
from .execution import Budgets, Execution, StackRecord
from .executors import Executor, make_executor
from .signals import SigintOwner
from .sleep import install as install_sleep
from .sleep import make_cooperative_sleep
from .sleep import uninstall as uninstall_sleep
from .stacks import thread_stack
from .watchdog import Watchdog


class RuntimeListener(Protocol):
    """What the kernel side is told (from the watchdog thread, or the thread that cancelled)."""

    def cancelled(self, execution: Execution) -> None: ...

    def tripped(self, execution: Execution, reason: str, interrupting: bool) -> None: ...

    def unresponsive(self, execution: Execution, abandoned: bool) -> None: ...


class Runtime:
    """Core, SIGINT, executor, watchdog, deadlines and dumps of one kernel."""

    def __init__(
        self,
        *,
        mode: str,
        grace: float,
        dump_path: str,
        label_of: Callable[[str], str | None],
        listener: RuntimeListener,
        interrupt_on_trip: bool = True,
        gil_yield: float = 0.0,
        switch_interval: float = 0.0,
    ):
        self.mode = mode
        self.grace = grace
        self.label_of = label_of
        self.listener = listener
        self.interrupt_on_trip = interrupt_on_trip
        self.core = CancellationCore(on_cancel=listener.cancelled)
        self.sigint = SigintOwner(self.core)
        self.dumps = DumpFile(dump_path)
        self.watchdog = Watchdog(
            self.core, grace=grace, dumps=self.dumps, on_trip=self._on_trip, on_unresponsive=self._on_unresponsive
        )
        self.sleep = make_cooperative_sleep(self.core)
        install_sleep(self.sleep)
        self.executor: Executor = make_executor(mode, self.core, self.deadlines, label_of, self.sleep)
        self._cell_scopes: dict[int, CancelScope] = {}
        if switch_interval:
            # A busy cell holds the GIL; the control thread waits this long for it at every hand-over.
            sys.setswitchinterval(switch_interval)
        if threading.current_thread() is threading.main_thread():
            self.sigint.install()
            if gil_yield:
                # Main mode also signals the main thread; every mode sets the yield bit cooperative loops check.
                self.sigint.enable_gil_yield(gil_yield, signal_main=mode == "main")

    @property
    def deadlines(self) -> DeadlineRegistry:
        return self.watchdog.deadlines

    @property
    def native_flag(self) -> bool:
        """The compiled cancellation flag is loaded (False: the pure-Python fallback)."""
        return bool(native.available)

    # -- executions --

    def begin(self, msg_id: str, code: str, budgets: Budgets, *, subshell_id: str | None = None) -> Execution:
        """A cell starts: track it, arm its budgets and its whole-cell deadline.

        A parent-shell cell runs where the executor runs cells; a subshell's
        cell runs on the subshell's own thread (the calling thread).
        """
        self.sigint.ensure()
        thread_id = self.executor.exec_thread_id if subshell_id is None else threading.get_ident()
        execution = self.core.begin(msg_id, code, thread_id=thread_id, subshell_id=subshell_id)
        execution.budgets = budgets
        if budgets.timeout:
            scope = fail_after(budgets.timeout)
            scope.description = f"%%timeout {budgets.timeout:g}"
            scope.start(CellContext(execution, self.deadlines, self.label_of), "the whole cell", thread_id=execution.thread_id)
            self._cell_scopes[execution.gen] = scope
        due = min((b for b in (budgets.wall, budgets.quiet, budgets.timeout or 0.0) if b), default=None)
        if due is not None:
            # Armed here, not by the watchdog: a cell that holds the GIL from its first line still gets dumped.
            self.dumps.arm(due + self.watchdog.starved_after)
        self.watchdog.wake()
        return execution

    def end(self, execution: Execution) -> None:
        """The cell finished: nothing armed for it may fire later; collect a dump taken meanwhile."""
        scope = self._cell_scopes.pop(execution.gen, None)
        if scope is not None:
            scope.stop()
        self.core.end(execution)
        if not self.core.running():
            self.dumps.disarm()
        self._collect_dump(execution)

    def cancel(self, target: str | None, reason: str) -> Execution | None:
        return self.core.cancel(target, reason)

    def cancel_all(self, reason: str, *, subshell_id: str | None | object = ...) -> list[Execution]:
        return self.core.cancel_all(reason, subshell_id=subshell_id)

    def output_seen(self, msg_id: str | None) -> None:
        """Output of the cell `msg_id` (or of whatever runs, if unknown): its quiet clock restarts."""
        running = self.core.running()
        for execution in running:
            if msg_id is None or execution.msg_id == msg_id:
                execution.output_seen()

    def stack_of(self, execution: Execution) -> list[Frame]:
        """The execution's live stack (needs the GIL)."""
        return thread_stack(execution.thread_id, self.label_of)

    def close(self) -> None:
        self.watchdog.stop()
        self.executor.shutdown()
        uninstall_sleep(self.sleep)
        self.dumps.close()

    # -- what the watchdog found --

    def _on_trip(self, execution: Execution, reason: str) -> None:
        """A budget tripped: take the stack, tell the kernel side, interrupt ONCE."""
        execution.stack = StackRecord(STACK_RUNAWAY, execution.elapsed(), self.stack_of(execution))
        self.listener.tripped(execution, reason, self.interrupt_on_trip)
        if self.interrupt_on_trip:
            self.core.cancel(execution.msg_id, reason)

    def _on_unresponsive(self, execution: Execution) -> None:
        """The interrupt did not stop the cell within the grace period."""
        execution.stack = StackRecord(STACK_UNRESPONSIVE, execution.elapsed(), self.stack_of(execution))
        abandoned = self.executor.on_unresponsive(execution)
        self.listener.unresponsive(execution, abandoned)

    def _collect_dump(self, execution: Execution) -> None:
        """faulthandler wrote stacks while the GIL was held: keep this execution's thread's part."""
        text = self.dumps.take()
        if not text or not (execution.cancelled or execution.watch.tripped or execution.watch.unresponsive):
            return
        frames = dumped_stack(text, execution.thread_id, self.label_of)
        if frames:
            execution.dump = StackRecord(STACK_DUMP, execution.elapsed(), frames, source="faulthandler")

