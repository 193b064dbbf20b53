"""CancelKernel: ipykernel's IPythonKernel wired to the runtime.

It owns nothing but the wiring: `interrupt_request` (optionally targeted),
`cancel_status_request`, `checkpoint_request`, execute_reply metadata, events
on iopub.  The runtime runs, watches and stops the code; the checkpoint
package saves state; metadata.py says what a reply contains.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import sys
import typing as t

from ipykernel.ipkernel import IPythonKernel
from ipykernel.jsonutil import json_clean
from jupyter_core.paths import jupyter_runtime_dir

from .. import __version__, protocol
from ..checkpoint.magics import register as register_checkpoint_magics
from ..checkpoint.settings import CheckpointSettings
from ..checkpoint.shell import ShellCheckpoints, handle_checkpoint_request, maybe_autosave, save_before
from ..frames import Frame
from ..runtime.execution import Budgets, Execution, StackRecord
from ..runtime.runtime import Runtime
from . import directives, events, metadata, upstream
from .options import KernelOptions
from .shell import CancelShell
from .streams import connect_streams
from .texts import interrupt_message

# Seconds after a shutdown_request by which the kernel process is gone, whatever hangs.
SHUTDOWN_DEADLINE = 3.0


class CancelKernel(KernelOptions, IPythonKernel):
    """An IPython kernel whose cells can always be stopped."""

    shell_class = CancelShell

    # checkpoint_request is shell-only: it runs between cells, never while one runs.
    msg_types = [*IPythonKernel.msg_types, protocol.CHECKPOINT_REQUEST]
    control_msg_types = [*IPythonKernel.control_msg_types, protocol.CANCEL_STATUS_REQUEST]

    # Stock sleeps 0.5 ms before every reply as a "mitigation" for late output;
    # our streams flush what they hold before the reply, so it only adds latency.
    _execute_sleep = 0.0

    def __init__(self, **kwargs: t.Any):
        super().__init__(**kwargs)
        shell = self.shell
        assert isinstance(shell, CancelShell)
        _log_to(self.log)
        self._shutting_down = False
        self._last_stack: dict | None = None
        self._parents: dict[str, dict] = {}
        self._reply_metadata: dict[str, dict] = {}
        self._aborted_before_reply = False
        self.runtime = Runtime(
            mode=self.exec_thread,
            grace=self.interrupt_grace,
            dump_path=self._dump_path(),
            label_of=shell.cell_label,
            listener=self,
            interrupt_on_trip=self.on_runaway == "interrupt",
            gil_yield=self.gil_yield,
            switch_interval=self.switch_interval,
        )
        self.runtime.sigint.register_run_code(upstream.run_code_like_ipython.__code__)
        shell.runtime = self.runtime
        shell.on_output = self.runtime.output_seen
        connect_streams(shell, self.runtime.output_seen, [sys.stdout, sys.stderr])
        self.checkpoints = ShellCheckpoints(shell, CheckpointSettings(parent=self))
        register_checkpoint_magics(shell, self.checkpoints)
        # After IPython drops leading blank lines, so the blank we leave keeps line numbers as typed.
        cleanup = shell.input_transformers_cleanup
        first_is_blank_dropper = bool(cleanup) and getattr(cleanup[0], "__name__", "") == "leading_empty_lines"
        cleanup.insert(1 if first_is_blank_dropper else 0, directives.strip_directive)

    def _dump_path(self) -> str:
        connection_file = getattr(self.parent, "connection_file", "") or f"kernel-{os.getpid()}.json"
        stem = os.path.splitext(os.path.basename(connection_file))[0]
        return os.path.join(self.dump_dir or jupyter_runtime_dir(), f"cancelkernel-{stem}-stacks.txt")

    # -- SIGINT: the runtime owns it for the kernel's whole life --

    def pre_handler_hook(self) -> None:
        """Stock swaps in default_int_handler here; ours stays installed instead."""

    def post_handler_hook(self) -> None:
        """Re-install our SIGINT handler if a cell replaced it (stock restores its saved one)."""
        runtime = getattr(self, "runtime", None)
        if runtime is not None:
            runtime.sigint.ensure()

    # -- kernel_info: advertise the extension so clients can detect it first --

    @property
    def kernel_info(self) -> dict:
        info = super().kernel_info
        features = [f for f in info["supported_features"] if f != "debugger" or self.exec_thread == "main"]
        info["supported_features"] = [*features, protocol.FEATURE]
        dumps = self.runtime.dumps
        info[protocol.KEY] = {
            "version": protocol.PROTOCOL_VERSION,
            "package_version": __version__,
            "exec_thread": self.exec_thread,
            "interrupt_grace": self.interrupt_grace,
            "native_flag": self.runtime.native_flag,
            "pid": os.getpid(),
            "dump_file": dumps.path if dumps.available else None,
            "features": list(protocol.FEATURES),
        }
        return info

    # -- control and shell requests of our own --

    async def interrupt_request(self, stream: t.Any, ident: t.Any, parent: dict) -> None:
        """Interrupt the running execution, or only `content.target` if given."""
        if not self.session:
            return
        content = parent.get("content") or {}
        target = content.get("target") if isinstance(content, dict) else None
        reply: dict[str, t.Any]
        if target is not None and (not isinstance(target, str) or not target.strip()):
            reply = _error_content(
                "ValueError",
                f"interrupt_request 'target' must be the msg_id (a non-empty string) of an "
                f"execute_request, not {target!r}; send an empty content to interrupt whatever runs",
            )
        elif self._shutting_down:
            reply = _error_content("RuntimeError", "the kernel is shutting down; nothing was interrupted")
        else:
            hit = self.runtime.cancel(target, protocol.REASON_REQUEST)
            reply = {"status": "ok", "interrupted": hit is not None, "execution": hit.msg_id if hit else None}
            if hit is None:
                running = self.runtime.core.parent_execution
                reply["running"] = running.msg_id if running else None
        self.session.send(stream, protocol.INTERRUPT_REPLY, reply, parent, ident=ident)

    async def cancel_status_request(self, stream: t.Any, ident: t.Any, parent: dict) -> None:
        """Answer on the control channel: what runs, for how long, and its state."""
        if not self.session:
            return
        self.session.send(stream, protocol.CANCEL_STATUS_REPLY, json_clean(self.cancel_status()), parent, ident=ident)

    async def checkpoint_request(self, stream: t.Any, ident: t.Any, parent: dict) -> None:
        """Save, restore, list or drop checkpoints of the user namespace."""
        if not self.session:
            return
        reply = handle_checkpoint_request(self.checkpoints, parent.get("content") or {})
        self.session.send(stream, protocol.CHECKPOINT_REPLY, json_clean(reply), parent, ident=ident)

    def cancel_status(self) -> dict:
        dumps = self.runtime.dumps
        return metadata.cancel_status(
            self.runtime.core.running(),
            exec_thread=self.exec_thread,
            native_flag=self.runtime.native_flag,
            interrupt_grace=self.interrupt_grace,
            dump_file=dumps.path if dumps.available else None,
            last_stack=self._last_stack,
            abandoned_threads=self.runtime.executor.abandoned_threads(),
        )

    # -- what the runtime tells us (RuntimeListener) --

    def cancelled(self, execution: Execution) -> None:
        """After every interrupt: tell the cell."""
        self._publish_event(execution, events.interrupt(execution))

    def tripped(self, execution: Execution, reason: str, interrupting: bool) -> None:
        """A budget tripped (watchdog thread): say so in the cell, with the stack."""
        frames = self._remember(execution, execution.stack)
        self._publish_event(execution, events.runaway(execution, reason, frames, interrupting=interrupting))

    def unresponsive(self, execution: Execution, abandoned: bool) -> None:
        """The interrupt did not stop the cell within the grace period (watchdog thread)."""
        frames = self._remember(execution, execution.stack)
        event = events.abandoned if abandoned else events.unresponsive
        self._publish_event(execution, event(execution, frames, self.interrupt_grace))

    def _remember(self, execution: Execution, record: StackRecord | None) -> list[Frame]:
        if record is None:
            return []
        self._last_stack = metadata.stack_record(execution, record)
        return record.frames

    def _publish_event(self, execution: Execution, event: dict) -> None:
        parent = self._parents.get(execution.msg_id)
        if self.session is None or parent is None:
            return
        content = {"data": {protocol.EVENT_MIME: event, "text/plain": event["message"]}, "metadata": {}, "transient": {}}
        self.session.send(self.iopub_socket, "display_data", json_clean(content), parent=parent, ident=self._topic("display_data"))

    # -- execution --

    async def do_execute(
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
        """Run a cell inside an execution the runtime can cancel; add our reply metadata."""
        shell = self.shell
        assert isinstance(shell, CancelShell)
        parent = self.get_parent("shell")
        msg_id = parent.get("header", {}).get("msg_id", "")
        try:
            wanted = self._directives(code, cell_meta)
        except directives.BudgetError as exc:
            return self._refuse(msg_id, exc)
        before = save_before(self.checkpoints) if wanted.checkpoint == "before" else None
        budgets = Budgets(wall=wanted.wall_budget or 0.0, quiet=wanted.quiet_budget or 0.0, timeout=wanted.timeout)
        self._parents[msg_id] = parent
        execution = self.runtime.begin(msg_id, code, budgets)
        try:
            try:
                reply = await upstream.run_cell_like_stock(
                    self, code, silent, store_history, user_expressions, allow_stdin, cell_meta, cell_id,
                    always_async=self.exec_thread == "worker",
                )
            except (KeyboardInterrupt, asyncio.CancelledError) as exc:
                # Last line of defence: an interrupt that escaped the shell still gets a reply.
                reply = self._escaped_interrupt_reply(execution, exc)
        finally:
            self.runtime.end(execution)
        if execution.report is not None and reply.get("status") == "error":
            reply["ename"], reply["evalue"] = execution.report.ename, execution.report.evalue
        if execution.dump is not None:
            self._publish_event(execution, events.dumped(execution, self._remember(execution, execution.dump), self.runtime.dumps.path))
        autosaved = None if silent else maybe_autosave(self.checkpoints, reply.get("status"))
        if before or autosaved:
            execution.checkpoint = {"before": before, "autosave": autosaved}
        self._reply_metadata[msg_id] = metadata.reply_metadata(execution, reply, self.exec_thread)
        self._parents.pop(msg_id, None)
        return reply

    def _directives(self, code: str, cell_meta: dict | None) -> directives.CellDirectives:
        """Kernel defaults < execute_request metadata < a %%budget / %%timeout first line."""
        defaults = directives.CellDirectives(wall_budget=self.wall_budget or None, quiet_budget=self.quiet_budget or None)
        meta = directives.from_metadata((cell_meta or {}).get(protocol.KEY))
        line = directives.first_directive_line(code)
        magic = directives.parse_directive(line) if line else directives.CellDirectives()
        return directives.merge(defaults, meta, magic)

    def _refuse(self, msg_id: str, exc: directives.BudgetError) -> dict:
        """A bad budget: say so in the cell and do not run it."""
        assert self.shell is not None
        self._reply_metadata[msg_id] = metadata.refused_metadata(msg_id)
        # The cell never ran, so the shell's counter did not move.
        return self._error_reply(directives.BudgetError, f"{exc} (the cell was not run)", self.shell.execution_count)

    def _escaped_interrupt_reply(self, execution: Execution, exc: BaseException) -> dict:
        etype = asyncio.CancelledError if isinstance(exc, asyncio.CancelledError) else KeyboardInterrupt
        self.log.warning("interrupt escaped the shell for %s; replying anyway", execution.msg_id)
        assert self.shell is not None
        # run_cell counted the cell before the interrupt escaped it.
        return self._error_reply(etype, interrupt_message(execution), self.shell.execution_count - 1)

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

    def finish_metadata(self, parent: dict, metadata: dict, reply_content: dict) -> dict:
        """Add our metadata; start stop_on_error's aborting BEFORE the error reply leaves (upstream.py)."""
        content = parent.get("content") or {}
        header = parent.get("header", {})
        if reply_content.get("status") == "error" and content.get("stop_on_error", True) and not content.get("silent"):
            self._aborted_before_reply = upstream.abort_before_reply(self, header.get("subshell_id"))
        metadata = super().finish_metadata(parent, metadata, reply_content)
        ours = self._reply_metadata.pop(header.get("msg_id", ""), None)
        if ours is not None:
            metadata[protocol.KEY] = ours
        return metadata

    def _abort_queues(self, subshell_id: str | None = None) -> None:
        if subshell_id is None and self._aborted_before_reply:
            self._aborted_before_reply = False  # already done before the reply was sent
            return
        super()._abort_queues(subshell_id)

    # -- shutdown --

    async def shutdown_request(self, stream: t.Any, ident: t.Any, parent: dict) -> None:
        """Shut down, interrupting a running cell first: its loop must get back to the kernel to exit."""
        self._shutting_down = True
        self.runtime.cancel(None, protocol.REASON_SHUTDOWN)
        await super().shutdown_request(stream, ident, parent)

    def do_shutdown(self, restart: bool) -> dict:  # type: ignore[override]  # IPythonKernel's is sync too
        self._shutting_down = True
        # A teardown step that hangs (a thread join, a locked history database) must not
        # keep a kernel alive that said it shuts down: faulthandler's C thread logs the
        # stacks to the server log and ends the process if it is still here then.
        self.runtime.close()
        try:
            faulthandler.dump_traceback_later(SHUTDOWN_DEADLINE, exit=True, file=sys.__stderr__)  # type: ignore[arg-type]
        except (AttributeError, ValueError, RuntimeError):  # no usable stderr: jupyter_client's kill remains
            pass
        return super().do_shutdown(restart)


def _log_to(app_log: logging.Logger) -> None:
    """Our log lines go where the kernel's own go (the server's log), never into a cell's stderr."""
    ours = logging.getLogger("cancelkernel")
    for handler in app_log.handlers:
        if handler not in ours.handlers:
            ours.addHandler(handler)
    ours.propagate = False


def _error_content(ename: str, evalue: str) -> dict:
    return {"status": "error", "ename": ename, "evalue": evalue, "traceback": [], "interrupted": False, "execution": None}
