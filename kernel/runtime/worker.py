"""Worker mode: user code on one persistent worker thread with its own asyncio loop.

Interrupts arrive as async exceptions (GIL-atomic with the window, in the
native module), `time.sleep` is woken cooperatively, an awaiting cell's task
is cancelled.  A worker blocked in a C call that no exception can reach
(`Event.wait`, `recv`, ...) is abandoned after the grace period and replaced;
the namespace is shared, so the variables are kept.  A worker that runs
Python code and swallowed the interrupt is never abandoned: it is reported
unresponsive, as in main mode.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..protocol import UNRESPONSIVE_ABANDONED, UNRESPONSIVE_CAUGHT
from .cooperative import CooperativeWaits
from .core import CancellationCore
from .deadlines import DeadlineRegistry
from .execution import Execution, Window
from .executors import Executor, LabelOf, abandon, nested, run_here, runs_python
from .stacks import blocked_at

log = logging.getLogger("cancelkernel")

_real_sleep = time.sleep


@dataclass
class _Job:
    execution: Execution
    code: types.CodeType
    async_: bool
    globals_: dict
    locals_: Any
    context: contextvars.Context
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    window: Window | None = None
    error: BaseException | None = None
    finished: bool = False


class _Worker(threading.Thread):
    """One persistent exec thread running its own asyncio loop, as the main thread does in stock.

    Cells run as callbacks of that loop (sync cells) or as tasks on it (await
    cells), so thread-locals, sqlite connections and asyncio tasks a cell
    started all live on between cells.
    """

    def __init__(self, executor: WorkerExecutor, number: int):
        super().__init__(name=f"cancelkernel-exec-{number}", daemon=True)
        self.executor = executor
        self.core = executor.core
        self.job: _Job | None = None
        self.abandoned = False
        self.abandoned_at = 0.0  # time.time() it was given up on
        self.stopping = False
        self.loop = asyncio.new_event_loop()
        # Set by the core when it delivers an interrupt: wakes cooperative_sleep.
        self.waker = threading.Event()

    def submit(self, job: _Job) -> None:
        self.loop.call_soon_threadsafe(self._start, job)

    def stop(self) -> None:
        self.stopping = True
        self.loop.call_soon_threadsafe(self.loop.stop)

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            while not (self.abandoned or self.stopping):
                try:
                    self.loop.run_forever()
                except BaseException as exc:  # noqa: BLE001 - a late interrupt escaped a callback
                    job = self.job
                    if job is not None and not job.finished:
                        job.error = job.error or exc
                        self._finish(job)
        finally:
            # The thread ends: so do its loop's selector and self-pipe (an abandoned worker's too).
            asyncio.set_event_loop(None)
            self.loop.close()

    def _start(self, job: _Job) -> None:
        self.job = job
        self.waker.clear()
        assert self.ident is not None
        job.window = Window(self.ident, on_main_thread=False, waker=self.waker)
        if job.async_:
            job.context.run(self._start_async, job)
            if job.error is not None:
                self._finish(job)
        else:
            job.context.run(self._run_sync, job)
            self._finish(job)

    def _run_sync(self, job: _Job) -> None:
        assert job.window is not None
        try:
            with self.executor.deadlines.cell(job.execution, self.executor.label_of):
                self.core.open_window(job.execution, job.window)
                exec(job.code, job.globals_, job.locals_)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread as is
            job.error = exc

    def _start_async(self, job: _Job) -> None:
        window = job.window
        assert window is not None
        try:
            # The task copies this context: deadlines entered in the cell belong to it.
            with self.executor.deadlines.cell(job.execution, self.executor.label_of):
                coro = eval(job.code, job.globals_, job.locals_)
                task = self.loop.create_task(coro)
            window.task, window.loop = task, self.loop
            self.core.open_window(job.execution, window)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread as is
            job.error = exc
            if window.task is not None:
                window.task.cancel()
            return
        task.add_done_callback(lambda done: self._async_done(job, done))

    def _async_done(self, job: _Job, task: asyncio.Future) -> None:
        try:
            task.result()
        except BaseException as exc:  # noqa: BLE001 - CancelledError included
            job.error = exc
        self._finish(job)

    def _finish(self, job: _Job) -> None:
        # After close_window no interrupt can reach this thread any more.
        assert self.ident is not None
        window = job.window or Window(self.ident, on_main_thread=False)
        late_interrupt = self.core.close_window(job.execution, window)
        if late_interrupt is not None and job.error is None:
            job.error = late_interrupt
        job.finished = True
        self.job = None
        if self.abandoned:
            self.loop.stop()  # the main thread has moved on: report nothing, touch nothing, end
            return
        error = _trim(job.error) if job.error is not None else None
        job.loop.call_soon_threadsafe(_resolve, job.future, error)


def _resolve(future: asyncio.Future, error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


def _trim(error: BaseException) -> BaseException:
    """Drop the runtime's frames from the top of a traceback: the user sees their code first."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return error.with_traceback(tb)


class WorkerExecutor(Executor):
    """User code on one persistent worker thread; the main loop stays free."""

    mode = "worker"

    def __init__(
        self,
        core: CancellationCore,
        deadlines: DeadlineRegistry,
        label_of: LabelOf,
        waits: CooperativeWaits | None = None,
    ):
        super().__init__(core, deadlines, label_of, waits)
        self._count = 0
        self._abandoned: list[_Worker] = []
        # Execution generation -> hand its interrupt to the waiting cell
        self._releases: dict[int, Callable[[], object]] = {}
        self._worker = self._new_worker()

    def _new_worker(self) -> _Worker:
        self._count += 1
        worker = _Worker(self, self._count)
        worker.start()
        return worker

    async def run_cell_code(self, code: types.CodeType, async_: bool, globals_: dict, locals_: Any) -> None:
        __tracebackhide__ = True
        execution = self.core.on_thread(self.exec_thread_id)
        if execution is None or nested(execution):
            await run_here(code, async_, globals_, locals_)
            return
        if execution.cancelled and not execution.cancel.delivered:
            execution.cancel.delivered = True
            raise execution.exc_class()
        if not self._worker.is_alive():
            log.warning("exec thread %s died; starting a new one", self._worker.name)
            self._worker = self._new_worker()
        loop = asyncio.get_running_loop()
        job = _Job(execution, code, async_, globals_, locals_, contextvars.copy_context(), loop, loop.create_future())
        self._worker.submit(job)
        error = await job.future
        if error is not None:  # pragma: no cover - _resolve sets exceptions, not results
            raise error

    @property
    def exec_thread_id(self) -> int:
        ident = self._worker.ident
        assert ident is not None
        return ident

    def on_unresponsive(self, execution: Execution) -> str:
        worker = self._worker
        job = worker.job
        if job is None or job.execution is not execution or job.finished:
            return super().on_unresponsive(execution)  # a subshell's cell (runs in place) or already over
        if job.async_ or runs_python(worker.ident, self.waits):
            return UNRESPONSIVE_CAUGHT  # its loop runs / it runs Python: it got the interrupt and goes on
        # Give up on this thread: it keeps its pending interrupt, which fires
        # when the blocking call returns, in a thread that reports nothing.
        abandon(worker)
        worker.abandoned_at = time.time()
        self._abandoned.append(worker)
        where = blocked_at(worker.ident)
        execution.abandoned_thread = worker.name
        self._worker = self._new_worker()
        log.warning(
            "exec thread %s abandoned, blocked at %s; new exec thread %s", worker.name, where, self._worker.name
        )
        error = execution.exc_class("its exec thread was abandoned, blocked in a call that ignores interrupts")
        self._releases[execution.generation] = lambda: job.loop.call_soon_threadsafe(_resolve, job.future, error)
        return UNRESPONSIVE_ABANDONED

    def release(self, execution: Execution) -> None:
        release = self._releases.pop(execution.generation, None)
        if release is not None:
            release()

    def abandoned_threads(self) -> list[dict]:
        self._abandoned = [w for w in self._abandoned if w.is_alive()]
        return [{"name": w.name, "blocked_at": blocked_at(w.ident), "since": w.abandoned_at} for w in self._abandoned]

    def shutdown(self) -> None:
        self._worker.stop()
