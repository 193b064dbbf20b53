"""The runtime of one kernel process: everything that stops cells, wired together.

It owns the cancellation core, the SIGINT owner, the executor, the watchdog
(with its deadline registry) and the stack-dump file.  The kernel side asks
it to begin, cancel and end executions, and hears back through a
`RuntimeListener` (to publish what happened); it never reaches inside.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import typing as t
import weakref
from collections.abc import Callable
from typing import Protocol

from .. import native
from ..frames import Frame, dumped_stack
from ..protocol import STACK_DUMP, STACK_RUNAWAY, STACK_UNRESPONSIVE
from .cell_record import CellRecordKeeper
from .cooperative import CooperativeWaits
from .core import CancellationCore
from .deadlines import CancelScope, CellContext, DeadlineRegistry, fail_after
from .dumps import DumpFile
from .execution import Budgets, Execution, StackRecord
from .executors import Executor, make_executor
from .memory_guard import GuardSettings, MemoryGuard
from .signals import SigintOwner
from .stacks import thread_stack
from .watchdog import MIN_STARVED, OutputReader, Watchdog

log = logging.getLogger("cancelkernel")


class RuntimeListener(Protocol):
    """What the kernel side is told (from the watchdog thread)."""

    def tripped(self, execution: Execution, reason: str, interrupting: bool) -> None: ...

    def traceback_waits(self, execution: Execution) -> t.ContextManager[object]:
        """While held, the cell's traceback is not shown: what `tripped` publishes inside comes before it."""
        ...

    def unresponsive(self, execution: Execution, why: str) -> None: ...


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
        memory_guard: GuardSettings | None = None,
        record_path: str | None = None,
    ):
        self.mode = mode
        self.grace = grace
        self.label_of = label_of
        self.listener = listener
        self.interrupt_on_trip = interrupt_on_trip
        self.core = CancellationCore()
        self.sigint = SigintOwner(self.core)
        self.dumps = DumpFile(dump_path)
        self.memory = MemoryGuard(memory_guard or GuardSettings())
        self.cell_record = CellRecordKeeper(record_path, self.memory, self.stack_of) if record_path else None
        self.watchdog = Watchdog(
            self.core,
            grace=grace,
            dumps=self.dumps,
            on_trip=self._on_trip,
            on_unresponsive=self._on_unresponsive,
            memory=self.memory,
            on_tick=self._on_tick,
        )
        self.waits = CooperativeWaits(self.core)
        self.waits.install()
        self.executor: Executor = make_executor(mode, self.core, self.deadlines, label_of, self.waits)
        self._cell_scopes: dict[int, CancelScope] = {}
        if switch_interval:
            # A busy cell holds the GIL; the control thread waits this long for it at every hand-over.
            sys.setswitchinterval(switch_interval)
        # A process forked from the kernel (multiprocessing, a Pool) is not the kernel: none of this acts in it.
        # A hook cannot be unregistered: never keep the runtime alive
        in_child = weakref.WeakMethod(self._in_forked_child)
        os.register_at_fork(after_in_child=lambda: (hook := in_child()) is not None and hook())
        if threading.current_thread() is threading.main_thread():
            self.sigint.install()
            if gil_yield:
                # Main mode also signals the main thread; every mode sets the yield bit cooperative loops check.
                self.sigint.enable_gil_yield(gil_yield, signal_main=mode == "main")

    def _on_tick(self, running: list[Execution], now: float) -> None:
        self.sigint.wake_if_unseen(running, now)
        if self.cell_record is not None:
            self.cell_record.on_tick(running, now)

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
        if not self.core.running():
            self.dumps.reset()  # written while idle (SIGUSR1, say): nobody's
        dump_from = self.dumps.position()
        execution = self.core.begin(msg_id, code, thread_id=thread_id, subshell_id=subshell_id)
        execution.budgets = budgets
        self.memory.begin(execution)
        execution.dump_from = dump_from
        if budgets.timeout:
            scope = fail_after(budgets.timeout)
            scope.description = f"%%timeout {budgets.timeout:g}"
            scope.start(
                CellContext(execution, self.deadlines, self.label_of), "the whole cell", thread_id=execution.thread_id
            )
            self._cell_scopes[execution.generation] = scope
        due = min((b for b in (budgets.wall, budgets.quiet, budgets.timeout or 0.0) if b), default=None)
        if due is not None:
            # Armed here, not by the watchdog: a cell that holds the GIL from its first line still gets dumped.
            self.dumps.arm_while(due + self.watchdog.starved_after, lambda: not execution.ended)
        self.watchdog.cell_began()
        return execution

    def end(self, execution: Execution) -> None:
        """The cell finished: nothing armed for it may fire later; collect a dump taken meanwhile."""
        scope = self._cell_scopes.pop(execution.generation, None)
        if scope is not None:
            scope.stop()
        starved = self.watchdog.starved_for(time.monotonic())
        if starved >= MIN_STARVED:
            execution.watch.starved = max(execution.watch.starved, starved)  # the cell held the GIL to its end
        self.core.end(execution)
        self.memory.end(execution)
        idle = lambda: not self.core.running()  # noqa: E731 - checked under the dump's lock
        self.dumps.disarm_if(idle)
        if idle() and self.cell_record is not None:
            self.cell_record.drop()
        self.take_dump(execution)
        if idle():
            self.dumps.reset()

    def cancel(self, target: str | None, reason: str) -> Execution | None:
        return self.core.cancel(target, reason)

    def cancel_all(self, reason: str, *, subshell_id: str | object | None = ...) -> list[Execution]:
        return self.core.cancel_all(reason, subshell_id=subshell_id)

    def control_acted(self) -> None:
        """The control thread acted on a message: the GIL yield asked for it ends (native/src/yield.c)."""
        native.control_acted()

    def control_waits(self) -> t.ContextManager[None]:
        """The control thread waits on purpose, its socket unread: no GIL yield is asked for it meanwhile."""
        return self.sigint.control_waits()

    def read_output_on_tick(self, reader: OutputReader) -> None:
        """Ask `reader` on every watchdog tick which cells wrote since it last asked (an output stream's)."""
        self.watchdog.output_readers.append(reader)

    def output_seen(self, msg_id: str | None) -> None:
        """Output of the cell `msg_id` (or of whatever runs, if unknown): its quiet clock restarts on the next tick."""
        running = self.core.running()
        for execution in running:
            if msg_id is None or execution.msg_id == msg_id:
                execution.output_seen()

    @property
    def record_path(self) -> str | None:
        """The running-cell record's file (None: not kept, or it could not be written)."""
        return self.cell_record.path if self.cell_record is not None else None

    def stack_of(self, execution: Execution) -> list[Frame]:
        """The execution's live stack (needs the GIL)."""
        return thread_stack(execution.thread_id, self.label_of)

    def _in_forked_child(self) -> None:
        """Right after a fork, in the child: Python's own SIGINT behaviour, no execution, no dumps into our file."""
        try:
            self.core.forget_after_fork()
            self.dumps.forget_after_fork()
            if threading.current_thread() is threading.main_thread():  # the forking thread is the child's main thread
                signal.signal(signal.SIGINT, signal.default_int_handler)
        except Exception:  # noqa: BLE001 - the child must go on whatever happens here
            pass

    def close(self) -> None:
        self.watchdog.stop()
        if self.cell_record is not None:
            self.cell_record.close()
        self.executor.shutdown()
        self.waits.uninstall()
        self.dumps.close()

    # -- what the watchdog found --

    def _on_trip(self, execution: Execution, reason: str) -> None:
        """A budget tripped: take the stack, interrupt ONCE, then tell the kernel side.

        The interrupt goes first: a memory runaway grows while the note is made (the holders, the event, a
        dozen hand-overs of the GIL against the cell), and the traceback waits for the note anyway.
        """
        execution.stack = StackRecord(STACK_RUNAWAY, execution.elapsed(), self.stack_of(execution))
        with self.listener.traceback_waits(execution):
            if self.interrupt_on_trip:
                self.core.cancel(execution.msg_id, reason)
            self.listener.tripped(execution, reason, self.interrupt_on_trip)

    def _on_unresponsive(self, execution: Execution) -> None:
        """The interrupt did not stop the cell within the grace period: find out why, say so, then let go."""
        execution.stack = StackRecord(STACK_UNRESPONSIVE, execution.elapsed(), self.stack_of(execution))
        why = self.executor.on_unresponsive(execution)
        execution.watch.unresponsive_why = why
        try:
            self.listener.unresponsive(execution, why)
        finally:
            # After the listener: what it publishes comes before the reply of an abandoned cell.
            self.executor.release(execution)

    def take_dump(self, execution: Execution) -> StackRecord | None:
        """faulthandler's stack of this execution's thread, written while it ran (once; None if there is none).

        Kept only for a cell someone wanted to act on (cancelled, tripped, or a
        budget ran out before the kernel could look) and only if it shows the
        cell: a dump of a thread outside the cell is not its report.
        """
        if execution.dump is not None:
            return execution.dump
        wanted = execution.cancelled or execution.watch.tripped or execution.watch.unresponsive or execution.overran()
        text = self.dumps.since(execution.dump_from) if wanted else ""
        if not text:
            return None
        frames = dumped_stack(text, execution.thread_id, self.label_of)
        if any(f.is_cell for f in frames):
            execution.dump = StackRecord(STACK_DUMP, execution.elapsed(), frames, source="faulthandler")
        return execution.dump

    def gil_held(self, execution: Execution) -> float:
        """Seconds one C call held the GIL during the cell, as far as the kernel can prove it (0: no proof).

        Proof is both: faulthandler dumped the cell's stack (its timer fires only when the
        watchdog stops pushing it) and the watchdog measured that it was kept from running.
        """
        if self.take_dump(execution) is None:
            return 0.0
        starved = (
            execution.watch.starved
            if execution.ended
            else max(execution.watch.starved, self.watchdog.starved_for(time.monotonic()))
        )
        return starved if starved >= MIN_STARVED else 0.0
