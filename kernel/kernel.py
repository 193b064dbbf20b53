"""CancelKernel: ipykernel's IPythonKernel wired to the cancellation core.

It owns nothing but the wiring: `interrupt_request` (optionally targeted),
`cancel_status_request`, execute_reply metadata, events on iopub.  The
executor runs code, the watchdog watches it, the core stops it.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import sys
import threading
import time
import typing as t

from ipykernel.ipkernel import IPythonKernel
from ipykernel.jsonutil import json_clean
from ipykernel.kernelbase import _accepts_parameters
from jupyter_core.paths import jupyter_runtime_dir
from traitlets import Enum, Float, Instance, Unicode

from . import __version__, budgets, checkpoint_magics, deadlines, events, iostream, native, protocol, stacks
from .cancel import CancellationCore, Execution
from .checkpoint_settings import CheckpointSettings
from .checkpoint_shell import handle_checkpoint_request, maybe_autosave, save_before
from .dumps import DumpFile, thread_frames
from .executor import Executor, make_executor
from .shell import CancelShell, interrupt_message
from .watchdog import Watchdog, Watched


# Seconds after a shutdown_request by which the kernel process is gone, whatever hangs.
SHUTDOWN_DEADLINE = 3.0


class CancelKernel(IPythonKernel):
    """An IPython kernel whose cells can always be stopped."""

    shell_class = CancelShell  # type: ignore[assignment]

    exec_thread = Enum(
        ["main", "worker"],
        default_value="main",
        help="""Where user code runs.  'main': on the main thread, as stock ipykernel
        (SIGINT breaks blocking calls; signal.signal, alarm, GUI toolkits work).
        'worker': on one persistent worker thread, keeping the main loop free;
        interrupts are async exceptions, and a worker stuck in a blocking call
        past interrupt_grace is abandoned and replaced.""",
    ).tag(config=True)

    interrupt_grace = Float(
        1.0,
        min=0.0,
        help="""Seconds an interrupted cell gets to stop.  After that the cell is
        reported unresponsive-to-interrupt (main mode) or its worker thread is
        abandoned and replaced (worker mode).""",
    ).tag(config=True)

    wall_budget = Float(
        0.0,
        min=0.0,
        help="Default wall budget: seconds a cell may run before it is treated as a runaway (0 = off).",
    ).tag(config=True)

    quiet_budget = Float(
        0.0,
        min=0.0,
        help="Default quiet budget: seconds a cell may run without any output before it is a runaway (0 = off).",
    ).tag(config=True)

    on_runaway = Enum(
        ["interrupt", "warn"],
        default_value="interrupt",
        help="What the watchdog does when a budget trips: interrupt the cell once, or only publish a warning event.",
    ).tag(config=True)

    dump_dir = Unicode(
        "",
        help="Directory for this kernel's stack dump file (default: the Jupyter runtime dir).",
    ).tag(config=True)

    switch_interval = Float(
        0.0005,
        min=0.0,
        help="""sys.setswitchinterval for the kernel process (seconds; 0 keeps Python's 0.005).
        A busy cell holds the GIL; the control thread that receives interrupt and
        status requests waits this long for it at every hand-over, so smaller
        means faster interrupts of busy Python code.""",
    ).tag(config=True)

    gil_yield = Float(
        0.04,
        min=0.0,
        help="""Main mode: when one C call has held the GIL this many seconds, send the
        main thread a signal whose handler lets go of the GIL for 2 ms, so the control
        thread can read interrupt and status requests.  Reaches C code that checks
        Python signals (the regex engine, cooperative extensions); 0 turns it off.""",
    ).tag(config=True)

    core = Instance(CancellationCore, allow_none=True)
    executor = Instance(Executor, allow_none=True)
    watchdog = Instance(Watchdog, allow_none=True)

    # checkpoint_request is shell-only: it runs between cells, never while one runs.
    msg_types = [*IPythonKernel.msg_types, protocol.CHECKPOINT_REQUEST]
    control_msg_types = [*IPythonKernel.control_msg_types, protocol.CANCEL_STATUS_REQUEST]

    # Stock sleeps 0.5 ms before every reply as a "mitigation" for late output;
    # our streams flush what they hold before the reply, so it only adds latency.
    _execute_sleep = 0.0

    def __init__(self, **kwargs: t.Any):
        super().__init__(**kwargs)
        self.core = CancellationCore(on_cancel=self._on_cancel)
        self.core.register_run_code(CancelShell.run_code.__code__)
        self.executor = make_executor(self.exec_thread, self.core)
        assert self.shell is not None
        self.shell.executor = self.executor
        self.checkpoint_settings = CheckpointSettings(parent=self)
        checkpoint_magics.register(self.shell, settings=self.checkpoint_settings)
        # After IPython drops leading blank lines, so the blank we leave keeps line numbers as typed.
        cleanup = self.shell.input_transformers_cleanup
        cleanup.insert(1 if cleanup and getattr(cleanup[0], "__name__", "") == "leading_empty_lines" else 0, budgets.strip_directive)
        self.watchdog = Watchdog(
            self.core,
            grace=self.interrupt_grace,
            on_trip=self._on_trip,
            on_unresponsive=self._on_unresponsive,
            on_alive=self._push_dump_deadline,
        )
        deadlines.runtime = self.watchdog
        deadlines.cell_label = self.shell.cell_label
        iostream.output_listeners.append(self.watchdog.output_seen)
        _log_to(self.log)
        self.dumps = DumpFile(self._dump_path())
        self._shutting_down = False
        self._last_stack: dict | None = None
        self._parents: dict[str, dict] = {}
        if self.switch_interval:
            sys.setswitchinterval(self.switch_interval)
        if threading.current_thread() is threading.main_thread():
            self.core.install_sigint()
            if self.exec_thread == "main" and self.gil_yield:
                self.core.enable_gil_yield(self.gil_yield)

    def _dump_path(self) -> str:
        connection_file = getattr(self.parent, "connection_file", "") or f"kernel-{os.getpid()}.json"
        stem = os.path.splitext(os.path.basename(connection_file))[0]
        return os.path.join(self.dump_dir or jupyter_runtime_dir(), f"cancelkernel-{stem}-stacks.txt")

    # -- SIGINT: the core owns it for the kernel's whole life (see cancel.py) --

    def pre_handler_hook(self) -> None:
        """Stock swaps in default_int_handler here; ours stays installed instead."""

    def post_handler_hook(self) -> None:
        """Re-install our SIGINT handler if a cell replaced it (stock restores its saved one)."""
        if self.core is not None:
            self.core.ensure_sigint()

    # -- kernel_info: advertise the extension so clients can detect it first --

    @property
    def kernel_info(self) -> dict:
        info = super().kernel_info
        features = [f for f in info["supported_features"] if f != "debugger" or self.exec_thread == "main"]
        features.append(protocol.FEATURE)
        info["supported_features"] = features
        info[protocol.KEY] = {
            "version": protocol.PROTOCOL_VERSION,
            "package_version": __version__,
            "exec_thread": self.exec_thread,
            "interrupt_grace": self.interrupt_grace,
            "native_flag": native.available,
            "pid": os.getpid(),
            "dump_file": self.dumps.path if self.dumps.available else None,
            "features": list(protocol.FEATURES),
        }
        return info

    # -- interrupts --

    async def interrupt_request(self, stream: t.Any, ident: t.Any, parent: dict) -> None:
        """Interrupt the running execution, or only `content.target` if given."""
        if not self.session:
            return
        content = parent.get("content") or {}
        target = content.get("target") if isinstance(content, dict) else None
        reply: dict[str, t.Any]
        if target is not None and (not isinstance(target, str) or not target.strip()):
            reply = _error_reply(
                "ValueError",
                f"interrupt_request 'target' must be the msg_id (a non-empty string) of an "
                f"execute_request, not {target!r}; send an empty content to interrupt whatever runs",
            )
        elif self._shutting_down:
            reply = _error_reply("RuntimeError", "the kernel is shutting down; nothing was interrupted")
        else:
            assert self.core is not None
            execution = self.core.cancel(target, "request")
            reply = {"status": "ok", "interrupted": execution is not None, "execution": execution.msg_id if execution else None}
            if execution is None:
                current = self.core.current
                reply["running"] = current.msg_id if current else None
        self.session.send(stream, "interrupt_reply", reply, parent, ident=ident)

    async def cancel_status_request(self, stream: t.Any, ident: t.Any, parent: dict) -> None:
        """Answer on the control channel: what runs, for how long, and its state."""
        if not self.session:
            return
        self.session.send(stream, protocol.CANCEL_STATUS_REPLY, json_clean(self.cancel_status()), parent, ident=ident)

    async def checkpoint_request(self, stream: t.Any, ident: t.Any, parent: dict) -> None:
        """Save, restore, list or drop checkpoints of the user namespace."""
        if not self.session:
            return
        reply = handle_checkpoint_request(self.shell, parent.get("content") or {})
        self.session.send(stream, protocol.CHECKPOINT_REPLY, json_clean(reply), parent, ident=ident)

    def cancel_status(self) -> dict:
        assert self.core is not None and self.watchdog is not None and self.executor is not None
        execution = self.core.current
        watched = self.watchdog.watched
        status: dict[str, t.Any] = {
            "status": "ok",
            "exec_thread": self.exec_thread,
            "native_flag": native.available,
            "interrupt_grace": self.interrupt_grace,
            "execution": None,
            "last_stack": self._last_stack,
            "dump_file": self.dumps.path if self.dumps.available else None,
            "abandoned_threads": self.executor.abandoned_threads(),
        }
        if execution is not None:
            status["execution"] = {
                "msg_id": execution.msg_id,
                "first_line": execution.first_line,
                "elapsed": round(execution.elapsed(), 4),
                "seconds_since_output": round(watched.seconds_since_output(), 4) if watched else None,
                "wall_budget": watched.wall_budget if watched else 0.0,
                "quiet_budget": watched.quiet_budget if watched else 0.0,
                "interrupts_sent": execution.interrupts_sent,
                "cancel_reason": execution.cancel_reason,
                "state": _state(execution, watched),
            }
        return status

    # -- what happens when an execution is cancelled, trips a budget or ignores an interrupt --

    def _on_cancel(self, execution: Execution) -> None:
        """After every interrupt: arm the GIL-proof dump, tell the cell."""
        self.dumps.arm(self.interrupt_grace)
        self._publish_event(execution, events.interrupt(execution))

    def _on_trip(self, watched: Watched, reason: str) -> None:
        """A budget tripped (watchdog thread): say so in the cell with the stack, interrupt ONCE."""
        assert self.core is not None
        execution = watched.execution
        frames = self._exec_stack(execution)
        self._remember_stack(execution, frames, "runaway")
        act = self.on_runaway == "interrupt"
        self._publish_event(execution, events.runaway(execution, watched, reason, frames, interrupting=act))
        if act:
            self.core.cancel(execution.msg_id, reason)

    def _on_unresponsive(self, watched: Watched) -> None:
        """The interrupt did not stop the cell within the grace period (watchdog thread)."""
        assert self.executor is not None
        execution = watched.execution
        frames = self._exec_stack(execution)
        self._remember_stack(execution, frames, "unresponsive")
        if self.executor.on_unresponsive(execution):
            self._publish_event(execution, events.abandoned(execution, frames, self.interrupt_grace))
        else:
            self._publish_event(execution, events.unresponsive(execution, frames, self.interrupt_grace))

    def _push_dump_deadline(self, seconds_to_trip: float) -> None:
        """The watchdog still runs, so the GIL is free: move the GIL-proof dump later."""
        self.dumps.arm(seconds_to_trip + self.interrupt_grace)

    def _exec_stack(self, execution: Execution | None = None) -> list[stacks.Frame]:
        assert self.executor is not None and self.shell is not None
        thread_id = (execution.thread_id if execution is not None else None) or self.executor.exec_thread_id
        return stacks.thread_stack(thread_id, self.shell.cell_label) if thread_id else []

    def _remember_stack(self, execution: Execution, frames: list[stacks.Frame], why: str) -> None:
        self._last_stack = {
            "execution": execution.msg_id,
            "why": why,
            "elapsed": round(execution.elapsed(), 4),
            "frames": stacks.as_dicts(frames),
            "stopped_at": stacks.stopped_at(frames),
        }

    def _publish_event(self, execution: Execution, event: dict) -> None:
        parent = self._parents.get(execution.msg_id)
        if self.session is None or parent is None:
            return
        content = {"data": {protocol.EVENT_MIME: event, "text/plain": event["message"]}, "metadata": {}, "transient": {}}
        self.session.send(self.iopub_socket, "display_data", json_clean(content), parent=parent, ident=self._topic("display_data"))

    # -- execution --

    async def do_execute(  # type: ignore[override]
        self,
        code: str,
        silent: bool,
        store_history: bool = True,
        user_expressions: dict | None = None,
        allow_stdin: bool = False,
        *,
        cell_meta: dict | None = None,
        cell_id: str | None = None,
    ) -> dict:
        """Run a cell inside an execution the core can cancel; add our reply metadata."""
        assert self.core is not None and self.watchdog is not None and self.shell is not None
        parent = self.get_parent("shell")
        msg_id = parent.get("header", {}).get("msg_id", "")
        shell = self.shell
        try:
            directives = self._directives(code, cell_meta)
        except budgets.BudgetError as exc:
            return self._refuse(msg_id, exc)
        before = save_before(shell, self.checkpoint_settings) if directives.checkpoint == "before" else None
        self.core.ensure_sigint()
        shell.interrupt_report = None
        execution = self.core.begin(msg_id, code)
        self._parents[msg_id] = parent
        watched = self.watchdog.watch(
            execution, wall_budget=directives.wall_budget or 0.0, quiet_budget=directives.quiet_budget or 0.0
        )
        timeout = self._arm_cell_timeout(directives)
        budget = min(b for b in (watched.wall_budget, watched.quiet_budget, directives.timeout or 0.0, float("inf")) if b)
        if budget != float("inf"):
            self.dumps.arm(budget + self.interrupt_grace)  # a GIL-holding call still gets its stack dumped
        dumped = ""
        try:
            try:
                reply = await self._run_cell(code, silent, store_history, user_expressions, allow_stdin, cell_meta, cell_id)
            except (KeyboardInterrupt, asyncio.CancelledError) as exc:
                # Last line of defence: an interrupt that escaped the shell still gets a reply.
                reply = self._escaped_interrupt_reply(execution, exc)
        finally:
            if timeout is not None:
                self.watchdog.disarm(timeout)
            self.dumps.disarm()
            dumped = self.dumps.take()
            self.watchdog.unwatch(execution)
            self.core.end(execution)
        report = shell.interrupt_report if shell.interrupt_report and shell.interrupt_report["execution"] == msg_id else None
        if report is not None and reply.get("status") == "error":
            reply["ename"] = report["ename"]
            reply["evalue"] = report["evalue"]
        metadata = _reply_metadata(execution, reply, report, self.exec_thread)
        if reply.get("ename") == "DeadlineExceeded" and not metadata["interrupted"]:
            metadata.update(interrupted=True, reason="deadline")
        if dumped and (execution.cancelled or watched.tripped or watched.unresponsive):
            self._attach_dump(execution, dumped, metadata)
        last = self._last_stack
        if metadata["interrupted"] and not metadata["stack"] and last and last["execution"] == msg_id:
            # No traceback reached the shell (the worker was abandoned): use the stack the watchdog took.
            metadata["stack"] = last["frames"]
            metadata["stopped_at"] = metadata["stopped_at"] or last["stopped_at"]
        metadata["budgets"] = {"wall_budget": watched.wall_budget, "quiet_budget": watched.quiet_budget, "timeout": directives.timeout}
        if watched.tripped:
            metadata["tripped"] = watched.tripped
        if watched.unresponsive:
            metadata["unresponsive"] = True
        autosaved = None if silent else maybe_autosave(shell, self.checkpoint_settings, reply.get("status"))
        if before or autosaved:
            metadata["checkpoint"] = {"before": before, "autosave": autosaved}
        self._execution_metadata = metadata
        self._parents.pop(msg_id, None)
        return reply

    def _directives(self, code: str, cell_meta: dict | None) -> budgets.CellDirectives:
        """Kernel defaults < execute_request metadata < a %%budget / %%timeout first line."""
        defaults = budgets.CellDirectives(wall_budget=self.wall_budget or None, quiet_budget=self.quiet_budget or None)
        meta = budgets.from_metadata((cell_meta or {}).get(protocol.KEY))
        line = budgets.first_directive_line(code)
        magic = budgets.parse_directive(line) if line else budgets.CellDirectives()
        return budgets.merge(defaults, meta, magic)

    def _arm_cell_timeout(self, directives: budgets.CellDirectives) -> deadlines.CancelScope | None:
        """%%timeout: a fail_after over the whole cell, fired by the watchdog like any deadline."""
        if not directives.timeout:
            return None
        scope = deadlines.fail_after(directives.timeout)
        scope.description = f"%%timeout {directives.timeout:g}"
        scope.started = time.monotonic()
        scope.where = "the whole cell"
        scope.active = True
        self.watchdog.arm(scope)
        return scope

    def _refuse(self, msg_id: str, exc: budgets.BudgetError) -> dict:
        """A bad budget: say so in the cell and do not run it."""
        assert self.shell is not None
        self._execution_metadata = {"msg_id": msg_id, "interrupted": False, "reason": None, "refused": True}
        # The cell never ran, so the shell's counter did not move.
        return self._error_reply(budgets.BudgetError, f"{exc} (the cell was not run)", self.shell.execution_count)

    def _error_reply(self, etype: type, evalue: str, execution_count: int) -> dict:
        """Show a one-line error in the cell and build its execute_reply content."""
        assert self.shell is not None
        stb = [f"\x1b[31m{etype.__name__}\x1b[0m: {evalue}"]
        self.shell._showtraceback(etype, evalue, stb)
        return {
            "status": "error",
            "ename": etype.__name__,
            "evalue": evalue,
            "traceback": stb,
            "execution_count": execution_count,
            "user_expressions": {},
            "payload": [],
        }

    def _attach_dump(self, execution: Execution, dumped: str, metadata: dict) -> None:
        """faulthandler wrote stacks while the kernel had no GIL: show the exec thread's."""
        assert self.executor is not None and self.shell is not None
        thread_id = execution.thread_id or self.executor.exec_thread_id or 0
        frames = thread_frames(dumped, thread_id, self.shell.cell_label)
        if not frames:
            return
        self._remember_stack(execution, frames, "dump")
        if not metadata.get("stack"):
            metadata["stack"] = stacks.as_dicts(frames)
            metadata["stopped_at"] = metadata.get("stopped_at") or stacks.stopped_at(frames)
        metadata["stack_source"] = "faulthandler"
        self._publish_event(execution, events.dumped(execution, frames, self.dumps.path))

    def finish_metadata(self, parent: dict, metadata: dict, reply_content: dict) -> dict:
        """Add our metadata; start stop_on_error aborting BEFORE the error reply leaves.

        Stock ipykernel 7 sends the reply first and only then queues the marker
        that ends aborting, so a cell sent the moment the reply arrives can be
        answered "aborted" although it came after the error.  Queuing the marker
        first means only requests already queued are aborted.
        """
        content = parent.get("content") or {}
        if reply_content.get("status") == "error" and content.get("stop_on_error", True) and not content.get("silent"):
            self._abort_before_reply(parent.get("header", {}).get("subshell_id"))
        metadata = super().finish_metadata(parent, metadata, reply_content)
        extra = getattr(self, "_execution_metadata", None)
        if extra is not None and extra.get("msg_id") == parent.get("header", {}).get("msg_id"):
            metadata[protocol.KEY] = extra
            self._execution_metadata = None
        return metadata

    def _abort_before_reply(self, subshell_id: str | None) -> None:
        if subshell_id is not None or not self.shell_channel_thread:
            return  # stock's own _abort_queues handles these
        self._aborting = True
        queued = threading.Event()

        def post_marker() -> None:
            self._post_dummy_stop_aborting_message(None)
            queued.set()

        self.shell_channel_thread.io_loop.add_callback(post_marker)
        if queued.wait(1.0):
            self._aborted_before_reply = True

    def _abort_queues(self, subshell_id: str | None = None) -> None:
        if subshell_id is None and getattr(self, "_aborted_before_reply", False):
            self._aborted_before_reply = False  # already done before the reply was sent
            return
        super()._abort_queues(subshell_id)

    def _escaped_interrupt_reply(self, execution: Execution, exc: BaseException) -> dict:
        etype = asyncio.CancelledError if isinstance(exc, asyncio.CancelledError) else KeyboardInterrupt
        self.log.warning("interrupt escaped the shell for %s; replying anyway", execution.msg_id)
        assert self.shell is not None
        # run_cell counted the cell before the interrupt escaped it.
        return self._error_reply(etype, interrupt_message(execution), self.shell.execution_count - 1)

    async def _run_cell(
        self,
        code: str,
        silent: bool,
        store_history: bool,
        user_expressions: dict | None,
        allow_stdin: bool,
        cell_meta: dict | None,
        cell_id: str | None,
    ) -> dict:
        """IPythonKernel.do_execute, except that worker mode always runs cells on the loop.

        A worker cell awaits the worker, so it cannot use IPython's blocking
        pseudo-runner; main-mode cells take exactly stock's path.
        """
        shell = self.shell
        assert shell is not None
        self._forward_input(allow_stdin)
        reply_content: dict[str, t.Any] = {}
        try:
            preprocessing_exc_tuple = None
            try:
                transformed_cell = shell.transform_cell(code)
            except Exception:  # noqa: BLE001 - reported by run_cell as stock does
                transformed_cell = code
                preprocessing_exc_tuple = sys.exc_info()
            extra: dict[str, t.Any] = {}
            if cell_id is not None and _accepts_parameters(shell.run_cell_async, ["cell_id"])["cell_id"]:
                extra["cell_id"] = cell_id
            run_async = self.exec_thread == "worker" or shell.should_run_async(
                code, transformed_cell=transformed_cell, preprocessing_exc_tuple=preprocessing_exc_tuple
            )
            if run_async:
                coro = shell.run_cell_async(
                    code,
                    store_history=store_history,
                    silent=silent,
                    transformed_cell=transformed_cell,
                    preprocessing_exc_tuple=preprocessing_exc_tuple,
                    **extra,
                )
                future = asyncio.ensure_future(coro)
                res = None
                try:
                    res = await future
                finally:
                    shell.events.trigger("post_execute")
                    if not silent:
                        shell.events.trigger("post_run_cell", res)
            else:
                res = shell.run_cell(code, store_history=store_history, silent=silent, **extra)
        finally:
            self._restore_input()

        err = res.error_before_exec if res.error_before_exec is not None else res.error_in_exec
        displayhook_error = getattr(shell, "_last_traceback_during_displayhook", False)
        if res.success and not displayhook_error:
            reply_content["status"] = "ok"
        else:
            reply_content["status"] = "error"
            reply_content.update(
                {
                    "traceback": getattr(shell, "_last_traceback", None) or [],
                    "ename": str(type(err).__name__),
                    "evalue": str(err),
                }
            )
            reply_content["engine_info"] = {"engine_uuid": self.ident, "engine_id": self.int_id, "method": "execute"}
        reply_content["execution_count"] = shell.execution_count - 1
        if reply_content["status"] == "ok":
            reply_content["user_expressions"] = shell.user_expressions(user_expressions or {})
        else:
            reply_content["user_expressions"] = {}
        reply_content["payload"] = shell.payload_manager.read_payload()
        shell.payload_manager.clear_payload()
        return reply_content

    # -- shutdown --

    async def shutdown_request(self, stream: t.Any, ident: t.Any, parent: dict) -> None:
        """Shut down, interrupting a running cell first: its loop must get back to the kernel to exit."""
        self._shutting_down = True
        if self.core is not None:
            self.core.cancel(None, "shutdown")
        await super().shutdown_request(stream, ident, parent)

    def do_shutdown(self, restart: bool) -> dict:
        self._shutting_down = True
        self.dumps.close()
        # A teardown step that hangs (a thread join, a locked history database) must not
        # keep a kernel alive that said it shuts down: faulthandler's C thread logs the
        # stacks to the server log and ends the process if it is still here then.
        try:
            faulthandler.dump_traceback_later(SHUTDOWN_DEADLINE, exit=True, file=sys.__stderr__)
        except (AttributeError, ValueError, RuntimeError):  # no usable stderr: jupyter_client's kill remains
            pass
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.executor is not None:
            self.executor.shutdown()
        return super().do_shutdown(restart)


def _log_to(app_log: logging.Logger) -> None:
    """Our log lines go where the kernel's own go (the server's log), never into a cell's stderr."""
    ours = logging.getLogger("cancelkernel")
    for handler in app_log.handlers:
        if handler not in ours.handlers:
            ours.addHandler(handler)
    ours.propagate = False


def _state(execution: Execution, watched: Watched | None) -> str:
    if watched is not None and watched.unresponsive:
        return protocol.STATE_UNRESPONSIVE
    if execution.cancelled:
        return protocol.STATE_CANCELLING
    return protocol.STATE_RUNNING


def _error_reply(ename: str, evalue: str) -> dict:
    return {"status": "error", "ename": ename, "evalue": evalue, "traceback": [], "interrupted": False, "execution": None}


def _reply_metadata(execution: Execution, reply: dict, report: dict | None, mode: str) -> dict:
    interrupted = execution.cancelled and reply.get("status") == "error" and (
        report is not None or reply.get("ename") in ("KeyboardInterrupt", "CancelledError")
    )
    frames = report["frames"] if report else []
    return {
        "msg_id": execution.msg_id,
        "interrupted": bool(interrupted),
        "reason": execution.cancel_reason if interrupted else None,
        "cancel_requested": execution.cancelled,
        "elapsed": round(execution.elapsed(), 6),
        "stopped_at": report["stopped_at"] if report else None,
        "stack": stacks.as_dicts(frames) if frames else None,
        "interrupts_sent": execution.interrupts_sent,
        "abandoned_thread": execution.abandoned_thread,
        "exec_thread": mode,
    }

