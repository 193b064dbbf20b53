"""The watchdog: a thread of its own that notices runaway and unresponsive cells.

For every running execution it checks the wall budget (seconds of execution),
the quiet budget (seconds without output: output is noticed on the tick after
it, `notice_output`) and the memory budget and guard
(memory_guard.py: one sample of the kernel's memory per tick), and reports an interrupt that
did not stop the cell within the grace period.  It also fires expired
deadline scopes, raises in a worker whose awaiting cell ignored its task
cancel, beats the GIL-yield heartbeat, pushes the stack dump's dead man's
switch, and measures how long it was itself kept from running (what a held
GIL looks like from inside).  It decides nothing itself: the runtime passes callbacks that publish
events, take stacks and interrupt ONCE.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection

from .. import native
from .core import CancellationCore
from .deadlines import DeadlineRegistry
from .dumps import DumpFile
from .execution import Execution
from .memory_guard import MemoryGuard

log = logging.getLogger("cancelkernel")

# How often the watchdog looks while a cell runs: budgets are checked to this precision.
TICK = 0.02
# How often a live watchdog pushes the stack dump's deadline forward.
PUSH_EVERY = 0.1
# The dump fires after the watchdog has been starved this long (at least; see Watchdog.starved_after).
MIN_STARVED = 0.3

# Asked on every tick: the msg_ids of the cells that wrote since the last ask (None: a write with no cell named).
OutputReader = Callable[[], Collection["str | None"]]


class Watchdog:
    """Budgets, deadlines and grace periods of every running execution, on a thread of its own."""

    def __init__(
        self,
        core: CancellationCore,
        *,
        grace: float,
        dumps: DumpFile,
        on_trip: Callable[[Execution, str], None],
        on_unresponsive: Callable[[Execution], None],
        memory: MemoryGuard | None = None,
        on_tick: Callable[[list[Execution], float], None] | None = None,
    ):
        self.core = core
        self.memory = memory
        self._on_tick = on_tick
        self.grace = grace
        self.dumps = dumps
        self.deadlines = DeadlineRegistry(core, self.wake)
        self._on_trip = on_trip
        self._on_unresponsive = on_unresponsive
        self._wake = threading.Event()
        self._stopped = False
        self._pushed_at = 0.0
        self._last_tick: float | None = None  # None while idle (it sleeps until woken)
        self._idle = False  # about to sleep until woken: a cell that begins must wake it
        self._logged: set[tuple[str, str]] = set()
        self.output_readers: list[OutputReader] = []  # the kernel's streams (Runtime.read_output_on_tick)
        self._thread = threading.Thread(target=self._run, name="cancelkernel-watchdog", daemon=True)
        self._thread.start()

    @property
    def starved_after(self) -> float:
        """Seconds without a push after which the dump fires: the grace period, never less than MIN_STARVED."""
        return max(self.grace, MIN_STARVED)

    def starved_for(self, now: float) -> float:
        """Seconds since the last look while cells run: large only if the watchdog is being kept from running."""
        last = self._last_tick
        return 0.0 if last is None else max(0.0, now - last)

    def wake(self) -> None:
        """Look again now (a cell began, a scope was armed)."""
        if self._last_tick is None:
            self._last_tick = time.monotonic()  # starvation counts from here even if no tick comes
        self._wake.set()

    def cell_began(self) -> None:
        """A cell began: wake the watchdog only if it sleeps for want of a cell (else it ticks within TICK anyway).

        Waking it for every cell made a tick, and a thread switch, on the path of every short cell.
        """
        if self._idle or self._last_tick is None:
            self.wake()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        self.dumps.disarm()

    def _next_wake(self, now: float) -> float | None:
        waits = []
        deadline = self.deadlines.next_deadline()
        if deadline is not None:
            waits.append(deadline - now)
        if self.core.running():
            waits.append(TICK)
        return min(waits) if waits else None

    def _run(self) -> None:
        while not self._stopped:
            wait = self._next_wake(time.monotonic())
            if wait is None:
                self.dumps.disarm()
                self._last_tick = None
                self._idle = True
                # Looked at again once `_idle` is set: a cell that began before it did not wake us.
                if self._next_wake(time.monotonic()) is None:
                    self._wake.wait()
                self._idle = False
                self._wake.clear()
                continue
            if wait > 0 and self._wake.wait(wait):
                self._wake.clear()
            try:
                self.tick(time.monotonic())
            except Exception as exc:  # noqa: BLE001 - the watchdog must outlive any bug in a callback
                self._log_once(exc)

    def _log_once(self, exc: Exception) -> None:
        """A failing check is logged the first time, not on every tick."""
        key = (type(exc).__name__, str(exc))
        if key not in self._logged:
            self._logged.add(key)
            log.error("watchdog check failed (logged once; it keeps running)", exc_info=exc)

    def tick(self, now: float) -> None:
        """One look at everything (public for tests with an injected clock)."""
        native.gil_heartbeat()  # proof that Python threads still get the GIL
        running = self.core.running()
        gap = self.starved_for(now)
        for execution in running:
            # A gap this long means no Python thread but the one holding the GIL ran.
            if gap >= MIN_STARVED and gap > execution.watch.starved and not execution.ended:
                execution.watch.starved = gap
        self._last_tick = now if running else None
        if self.memory is not None and running:
            try:
                self.memory.sample(running)
            except Exception as exc:  # noqa: BLE001 - a failing memory read must not stop the time budgets below
                self._log_once(exc)
        scope = self.deadlines.expired(now)
        if scope is not None and not self.core.fire_scope(scope):
            self._wake.wait(TICK)  # between statements: try again when user code resumes
        self.notice_output(running)
        for execution in running:
            self.check(execution, now)
        self._push_dump_deadline(running, now)
        if self._on_tick is not None and running:
            self._on_tick(running, now)

    def notice_output(self, running: list[Execution]) -> None:
        """Restart the quiet clock of every running cell that wrote or displayed something since the last tick.

        Nothing is timed per write: a stream only buffers it (its reader tells who wrote), a display only
        numbers it (`output_mark`).  The clock is read here, after looking, so it restarts no earlier than the
        output it saw and at most a tick later: a cell that keeps writing is never tripped as quiet, and one
        that stops trips between its quiet budget and two ticks past it (later only while the watchdog itself
        is kept from running).
        """
        wrote: set[str | None] = set()
        for reader in self.output_readers:
            try:
                wrote.update(reader())
            except Exception as exc:  # noqa: BLE001 - a reader that cannot tell must not trip cells that write
                self._log_once(exc)
                wrote.add(None)
        seen_at: float | None = None
        for execution in running:
            watch = execution.watch
            mark = watch.output_mark
            if mark != watch.mark_seen or None in wrote or execution.msg_id in wrote:
                watch.mark_seen = mark
                seen_at = time.monotonic() if seen_at is None else seen_at
                watch.last_output = seen_at

    def check(self, execution: Execution, now: float) -> None:
        """One look at one execution."""
        if execution.ended:
            return
        state, watch = execution.cancel, execution.watch
        if state.escalate_at is not None and now >= state.escalate_at:
            self.core.escalate(execution)
        if watch.tripped is None and not execution.cancelled:
            watch.tripped = execution.overran(now) or (self.memory.over(execution) if self.memory is not None else None)
            if watch.tripped is not None:
                self._on_trip(execution, watch.tripped)
        if (
            execution.cancelled
            and not watch.unresponsive
            and state.time is not None
            and now - state.time > self.grace
            and execution.window is not None
        ):
            watch.unresponsive = True
            self._on_unresponsive(execution)

    def _push_dump_deadline(self, running: list[Execution], now: float) -> None:
        """Keep the dump a starvation period past the nearest budget (or cancel) of any running cell."""
        due = dump_due(running, now)
        if due is None:
            self.dumps.disarm()
        elif not self.dumps.armed or now - self._pushed_at >= PUSH_EVERY:
            self._pushed_at = now
            # Checked again under the dump's lock: a cell that ended since `running` was read wants nothing.
            self.dumps.arm_while(due + self.starved_after, lambda: any(not e.ended for e in running))


def dump_due(running: list[Execution], now: float) -> float | None:
    """Seconds until someone will want a stack if the GIL is held from now on (None: nobody will).

    A cancelled cell (or one whose deadline fired) wants it at once; a cell
    with a budget or a whole-cell timeout when that runs out.
    """
    dues = []
    for execution in running:
        if execution.ended:
            continue
        if execution.cancelled or execution.cancel.pending_scope is not None:
            dues.append(0.0)
            continue
        left = execution.seconds_to_trip(now)
        if left is not None:
            dues.append(left)
        if execution.budgets.timeout:
            dues.append(max(0.0, execution.started + execution.budgets.timeout - now))
    return min(dues) if dues else None
