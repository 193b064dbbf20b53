"""One cell run, from execute_request to execute_reply: everything the kernel knows about it.

An `Execution` is created by the cancellation core when a cell begins and
dropped when its reply has been built.  It is the only owner of the cell's
state; who writes which part is fixed:

- identity (msg_id, generation, code, thread, subshell): set at begin, never changed;
- `cancel`: the cancellation core, under its lock (and its SIGINT handler on
  the main thread, which never takes the lock);
- `budgets`: set at begin; `watch`: the watchdog thread (`output_mark` by
  whichever thread displays the cell's output: an int store is atomic);
- `memory`: the memory guard (at begin, on the watchdog thread, at the end);
- `stack`, `dump`, `dump_from`: the runtime (on the watchdog thread, or when the
  interrupt is shown / the cell ends);
- `report`, `abandoned_thread`, `checkpoint`, `notes_closed`: the kernel side,
  at the moments its docstrings name.

The reply metadata is a pure function of this object (kernel/metadata.py).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..frames import Frame
from ..protocol import REASON_MEMORY_BUDGET, REASON_QUIET_BUDGET, REASON_WALL_BUDGET

if TYPE_CHECKING:
    from .deadlines import CancelScope


class CellInterrupt(KeyboardInterrupt):
    """Base of the per-execution interrupt classes (an async exception can only carry a class)."""

    execution: Execution | None = None

    def __init__(self, *args: object):
        super().__init__(*args)
        if getattr(threading.current_thread(), "abandoned", False):
            # Made in the thread it is raised in: an abandoned exec thread that got back
            # to Python code must not go on running the cell (abandoned.py).
            from .abandoned import stop_this_thread

            stop_this_thread()


@dataclass
class Window:
    """User code of one execution is running on `thread_id` right now."""

    thread_id: int
    on_main_thread: bool
    task: asyncio.Future | None = None  # an awaiting cell's task: cancelled instead of raised into
    loop: asyncio.AbstractEventLoop | None = None
    waker: threading.Event | None = None  # set on delivery: wakes a worker's cooperative time.sleep


@dataclass
class Budgets:
    """Seconds the cell may run (wall), may stay silent (quiet), bytes it may grow the kernel by,
    a whole-cell deadline."""

    wall: float = 0.0  # 0 = off
    quiet: float = 0.0  # 0 = off
    timeout: float | None = None  # %%timeout / metadata "timeout": DeadlineExceeded after this long
    memory: int = 0  # bytes of growth of the kernel's resident set since the cell began; 0 = off

    @property
    def limited(self) -> bool:
        """A wall, quiet or memory budget is set: what a page counts down (the timeout is a deadline, not a budget)."""
        return bool(self.wall or self.quiet or self.memory)

    def for_reason(self, reason: str | None) -> float:
        """The budget behind a cancel reason (seconds; bytes for REASON_MEMORY_BUDGET), 0.0 for any other reason."""
        if reason == REASON_WALL_BUDGET:
            return self.wall
        if reason == REASON_QUIET_BUDGET:
            return self.quiet
        if reason == REASON_MEMORY_BUDGET:
            return float(self.memory)
        return 0.0


@dataclass
class CancelState:
    """Whether and why the execution was cancelled (written by the cancellation core only)."""

    reason: str | None = None
    time: float | None = None  # time.monotonic() of the first cancel
    interrupts_sent: int = 0
    delivered: bool = False  # the latest interrupt was raised (each one is raised once)
    escalate_at: float | None = None  # when to raise in a worker whose task cancel did not land
    pending_scope: CancelScope | None = None  # a deadline scope that fired and has not exited yet


# Every display anywhere takes the next number: an execution's output_mark changes at each one and never comes back.
OUTPUT_MARKS = itertools.count(1)


@dataclass
class WatchState:
    """The watchdog's clocks and findings for one execution."""

    # The quiet clock: when the watchdog first saw the cell's latest output (stream writes, displays, tracebacks),
    # on its tick after it (Watchdog.notice_output): never before the output, a tick after it at most.
    last_output: float = field(default_factory=time.monotonic)
    output_mark: int = 0  # the OUTPUT_MARKS number of its latest display or traceback (Execution.output_seen)
    mark_seen: int = 0  # the output_mark the watchdog has acted on
    tripped: str | None = None  # the budget that tripped, once
    unresponsive: bool = False  # an interrupt did not stop it within the grace period
    unresponsive_why: str | None = None  # protocol.UNRESPONSIVE_*: caught, blocked, abandoned
    starved: float = 0.0  # the longest time the watchdog could not run while the cell ran (seconds)

    def seconds_since_output(self) -> float:
        return time.monotonic() - self.last_output


@dataclass
class MemoryRecord:
    """What the kernel measured of a cell's memory, in bytes (None: not measured).

    `resident` is the kernel process's resident set (what a cell's budget
    counts); `charged` is what its limit counts (the cgroup's working set,
    or the machine's used memory): what the guard watches.
    """

    resident_start: int | None = None
    charged_start: int | None = None
    kind: str | None = None  # protocol.MEMORY_BUDGET | MEMORY_GUARD once it tripped
    at_trip: int | None = None  # the tripped measure (resident for a budget, charged for the guard) at the trip
    after: int | None = None  # the same measure once the cell had ended
    limit: int | None = None  # the limit the guard keeps below (cgroup or machine), when it tripped
    holders: list[dict] = field(default_factory=list)  # the biggest names of the namespace once it ended
    # The biggest locals of the stopped frames, which the kernel let go
    released: list[dict] = field(default_factory=list)


@dataclass
class StackRecord:
    """A stack the kernel took of the cell, and why."""

    why: str  # protocol.STACK_RUNAWAY | STACK_UNRESPONSIVE | STACK_DUMP
    elapsed: float
    frames: list[Frame]
    source: str = "live"  # "live" (sys._current_frames) or "faulthandler" (taken while the GIL was held)


@dataclass
class InterruptReport:
    """What the shell showed for the interrupted cell (its reply reuses it)."""

    ename: str
    evalue: str
    frames: list[Frame]
    told_gil: bool = False  # the report already says that one C call held the GIL


@dataclass
class Execution:
    """One cell's run (see the module docstring for who writes what)."""

    msg_id: str
    generation: int  # numbers the executions of a kernel; the native flag knows an execution by it
    code: str
    thread_id: int  # the thread that runs its user code
    subshell_id: str | None = None  # None: the parent shell
    started: float = field(default_factory=time.monotonic)
    _exc_class: type[CellInterrupt] | None = field(default=None, repr=False)
    window: Window | None = None
    ended: bool = False
    budgets: Budgets = field(default_factory=Budgets)
    cancel: CancelState = field(default_factory=CancelState)
    watch: WatchState = field(default_factory=WatchState)
    stack: StackRecord | None = None
    report: InterruptReport | None = None
    dump: StackRecord | None = None  # the stack faulthandler wrote while the cell ran, if any
    dump_from: int = 0  # bytes in the dump file when the cell began: what came before is not this cell's
    notes_closed: bool = False  # its traceback is shown or it ended: no live note may follow
    abandoned_thread: str | None = None  # worker mode: the exec thread given up on (blocked in C)
    checkpoint: dict[str, Any] = field(default_factory=dict)  # {"before": ..., "autosave": ...} when saved
    memory: MemoryRecord = field(default_factory=MemoryRecord)

    @property
    def exc_class(self) -> type[CellInterrupt]:
        """The class this execution's interrupt is raised as: its own (an async exception can only carry a class).

        Made when first needed (the first cancel makes it, under the core's lock), not at every cell's start.
        """
        if self._exc_class is None:
            self._exc_class = type("KeyboardInterrupt", (CellInterrupt,), {"execution": self})
        return self._exc_class

    @property
    def first_line(self) -> str:
        for line in self.code.splitlines():
            if line.strip():
                return line.strip()[:120]
        return ""

    @property
    def cancelled(self) -> bool:
        return self.cancel.reason is not None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def seconds_to_trip(self, now: float) -> float | None:
        """Time left before a budget trips (None: no budget)."""
        left = []
        if self.budgets.wall:
            left.append(self.started + self.budgets.wall - now)
        if self.budgets.quiet:
            left.append(self.watch.last_output + self.budgets.quiet - now)
        return max(0.0, min(left)) if left else None

    def overran(self, now: float | None = None) -> str | None:
        """The budget (REASON_WALL_BUDGET / REASON_QUIET_BUDGET) that has run out by `now`, tripped or not."""
        now = time.monotonic() if now is None else now
        if self.budgets.wall and now - self.started > self.budgets.wall:
            return REASON_WALL_BUDGET
        if self.budgets.quiet and now - self.watch.last_output > self.budgets.quiet:
            return REASON_QUIET_BUDGET
        return None

    def output_seen(self) -> None:
        """The cell displayed something: its quiet clock starts again on the watchdog's next tick."""
        self.watch.output_mark = next(OUTPUT_MARKS)
