"""Waiting for a cell inside a tool call: progress from the kernel's side, and a cancellation that interrupts.

While a call waits, a progress notification goes out about once a second
(when the client asked for progress) with what the kernel knows: seconds
since the last output and the line the cell is on, not only elapsed time.
If the client cancels an `execute` (`notifications/cancelled`, or the HTTP
stream closing), the SDK cancels the handler: the cell then gets its one
targeted interrupt, never left running without a caller.
"""

from __future__ import annotations

import contextlib
import threading
import typing as t

import anyio
import anyio.to_thread

from ..agent.threads import leaving_no_loop, start_thread
from ..words import plural
from .executions import ToolExecution

if t.TYPE_CHECKING:
    from mcp.server.mcpserver import Context

    from ..agent.watch import CellWatch

T = t.TypeVar("T")

PROGRESS_EVERY = 1.0
WATCH_AFTER = 0.5  # a cell still running after this long is asked where it is (for progress and status)
CANCELLED = "the MCP client cancelled the execute call"


async def follow(
    ctx: Context | None, execution: ToolExecution, wait: float, *, interrupt_on_cancel: bool, watch: bool = True
) -> None:
    """Return when the execution has ended or `wait` seconds have passed, reporting progress meanwhile.

    watch=False (waiting for an interrupt to land): no new status requests, which would
    queue behind the interrupt on the kernel's control channel and hold up the result.
    """
    deadline = anyio.current_time() + wait
    try:
        if watch and execution.watch.elapsed() >= WATCH_AFTER:
            execution.watched()
        while not execution.done:
            left = deadline - anyio.current_time()
            if left <= 0:
                return
            # Ticks on the cell's own clock: at WATCH_AFTER it is watched, then a report every PROGRESS_EVERY.
            age = execution.watch.elapsed()
            step = WATCH_AFTER - age if age < WATCH_AFTER else PROGRESS_EVERY - age % PROGRESS_EVERY
            # The cell's thread wakes this wait as it ends: the answer goes out at once.
            if await execution.ended_within(max(0.01, min(step, left))):
                return
            age = execution.watch.elapsed()
            if watch and age >= WATCH_AFTER - 0.02:
                execution.watched()
            if age >= PROGRESS_EVERY - 0.02:
                await report(ctx, execution)
    except anyio.get_cancelled_exc_class():
        if interrupt_on_cancel:
            execution.interrupt(CANCELLED)
        raise


async def report(ctx: Context | None, execution: ToolExecution) -> None:
    await report_watch(ctx, f"{execution.id} on kernel {execution.kernel_id}", execution.watch)


async def report_watch(ctx: Context | None, label: str, w: CellWatch | None) -> None:
    """One progress notification (nothing if the client sent no progress token)."""
    if ctx is None or w is None:
        return
    with contextlib.suppress(Exception):  # a client that went away gets no progress; the call's own end says so
        await ctx.report_progress(round(w.elapsed(), 3), None, progress_text(label, w))


def progress_text(label: str, w: CellWatch | None) -> str:
    """A running cell as the kernel sees it, in one line (progress messages, a task's statusMessage)."""
    if w is None:
        return f"{label}: starting"
    where = w.current_line()
    return (
        f"{label}: running {w.elapsed():.1f} s, {w.seconds_since_output():.1f} s since output, "
        f"{plural(len(w.outputs), 'output')}" + (f", at {where}" if where else "")
    )


async def run_blocking(
    ctx: Context | None,
    label: str,
    fn: t.Callable[[], T],
    *,
    watch: t.Callable[[], CellWatch | None],
    on_cancel: t.Callable[[], None],
) -> T:
    """fn() on its own thread (a notebook cell run to the end), with progress from `watch()`;
    a cancellation calls on_cancel()."""
    done = threading.Event()
    box: dict[str, t.Any] = {}

    def go() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the tool
            box["error"] = exc
        finally:
            done.set()

    start_thread(go, name="cancelkernel-mcp-notebook")
    try:
        while not await anyio.to_thread.run_sync(done.wait, PROGRESS_EVERY, abandon_on_cancel=True):
            await report_watch(ctx, label, watch())
    except anyio.get_cancelled_exc_class():
        on_cancel()
        raise
    if "error" in box:
        raise box["error"]
    return t.cast(T, box["result"])


async def in_thread(fn: t.Callable[..., t.Any], *args: t.Any) -> t.Any:
    """Run blocking agent-client work (start, restart, checkpoint) off the event loop."""
    return await anyio.to_thread.run_sync(leaving_no_loop(fn), *args)
