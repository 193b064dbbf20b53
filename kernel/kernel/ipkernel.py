"""CancelKernel: ipykernel's IPythonKernel wired to the runtime.

It owns nothing but the wiring: `interrupt_request` (optionally targeted),
`cancel_status_request`, `checkpoint_request`, execute_reply metadata, the
notes a person sees (notes.py publishes them, events.py says which).  The runtime runs, watches and stops the code; the checkpoint
package saves state; metadata.py says what a reply contains.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import sys
import threading
import typing as t

from ipykernel.ipkernel import IPythonKernel
from ipykernel.jsonutil import json_clean

from .. import __version__, directives, last_cell, protocol
from ..checkpoint.magics import register as register_checkpoint_magics
from ..checkpoint.settings import CheckpointSettings
from ..checkpoint.shell import ShellCheckpoints, handle_checkpoint_request, maybe_autosave, restore_on_start, save_before
from ..frames import Frame
from ..kernel_files import RUNNING, STACKS, kernel_file
from ..runtime.execution import Budgets, Execution, StackRecord
from ..runtime.holders import biggest_names
from ..runtime.memory import raise_oom_score
from ..runtime.memory_guard import GuardSettings
from ..runtime.runtime import Runtime
from . import concurrent_cells, events, metadata, upstream
from .comms import CommStatus
from .control import ControlRequests
from .interrupts import PendingCancels
from .notes import CellNotes
from .options import KernelOptions
from .replies import InternalError, error_reply, internal_error_text
from .shell import CancelShell
from .streams import connect_streams
from .texts import interrupt_message

# Seconds after a shutdown_request by which the kernel process is gone, whatever hangs.
SHUTDOWN_DEADLINE = 3.0


class CancelKernel(CommStatus, ControlRequests, KernelOptions, IPythonKernel):
    """An IPython kernel whose cells can always be stopped."""

    shell_class = CancelShell

    # checkpoint_request is shell-only: it runs between cells, never while one runs.
    msg_types = [*IPythonKernel.msg_types, protocol.CHECKPOINT_REQUEST]
    control_msg_types = [*IPythonKernel.control_msg_types, protocol.CANCEL_STATUS_REQUEST]

    # Read by ipykernel's input()/getpass() in the cell's own code: kept per cell (concurrent_cells.py).
    _allow_stdin = concurrent_cells.per_cell("allow_stdin", False)

    # Stock sleeps 0.5 ms before every reply as a "mitigation" for late output;
    # our streams flush what they hold before the reply, so it only adds latency.
    _execute_sleep = 0.0

    def __init__(self, **kwargs: t.Any):
        super().__init__(**kwargs)
        shell = self.shell
        assert isinstance(shell, CancelShell)
        _log_to(self.log)
        upstream.honour_frontend_subshell()  # widgets answer on the subshell JupyterLab chose (comms.py)
        self._shutting_down = False
        self._last_stack: dict | None = None
        self._parents: dict[str, dict] = {}
        self.notes = CellNotes(self, self._parents)
        self._reply_metadata: dict[str, dict] = {}
        self._aborted_before_reply = False
        self.pending_cancels = PendingCancels()
        # Held while a cell starts and while a targeted interrupt decides "running or pending":
        # an interrupt can never fall between the two (and be lost).
        self._start_lock = threading.Lock()
        record_path = self._kernel_file(RUNNING)
        # A record left by a kernel that is gone: it died while a cell ran (told in the first cell, and in kernel_info).
        self.previous_kernel = last_cell.previous_kernel(record_path)
        self._previous_told = False
        if self.oom_score_adj > 0:
            raise_oom_score(self.oom_score_adj)  # out of memory, the kernel goes first: not its server or agent
        self.runtime = Runtime(
            mode=self.exec_thread,
            grace=self.interrupt_grace,
            dump_path=self._kernel_file(STACKS),
            label_of=shell.cell_label,
            listener=self,
            interrupt_on_trip=self.on_runaway == "interrupt",
            gil_yield=self.gil_yield,
            switch_interval=self.switch_interval,
            memory_guard=GuardSettings(enabled=self.memory_guard, margin=self.memory_guard_margin, data_limit=self.memory_data_limit),
            record_path=record_path,
        )
        # Stock swaps input/getpass around each cell; with two cells at once the saved originals were lost.
        self._input_patch = concurrent_cells.CountedPatch(
            lambda: IPythonKernel._forward_input(self, self._allow_stdin), lambda: IPythonKernel._restore_input(self)
        )
        self.runtime.sigint.register_run_code(upstream.run_code_like_ipython.__code__)
        shell.runtime = self.runtime
        shell.on_output = self.runtime.output_seen
        shell.on_traceback = self.notes.close
        connect_streams(shell, self.runtime.output_seen, [sys.stdout, sys.stderr])
        self.checkpoints = ShellCheckpoints(shell, CheckpointSettings(parent=self))
        register_checkpoint_magics(shell, self.checkpoints)
        # After IPython drops leading blank lines, so the blank we leave keeps line numbers as typed.
        cleanup = shell.input_transformers_cleanup
        first_is_blank_dropper = bool(cleanup) and getattr(cleanup[0], "__name__", "") == "leading_empty_lines"
        cleanup.insert(1 if first_is_blank_dropper else 0, directives.strip_directive)

    def _kernel_file(self, kind: str) -> str:
        """A file of this kernel's own beside its connection file's name: the same for a kernel restarted on it."""
        connection_file = getattr(self.parent, "connection_file", "") or f"kernel-{os.getpid()}.json"
        return kernel_file(connection_file, kind, self.dump_dir or None)

    # -- SIGINT: the runtime owns it for the kernel's whole life --

    def pre_handler_hook(self) -> None:
        """Stock swaps in default_int_handler here; ours stays installed instead."""

    def post_handler_hook(self) -> None:
        """Re-install our SIGINT handler if a cell replaced it (stock restores its saved one)."""
        runtime = getattr(self, "runtime", None)
        if runtime is not None:
            runtime.sigint.ensure()

    def _forward_input(self, allow_stdin: bool = False) -> None:
        """input() and getpass() ask the frontend: installed by the first cell running, for all of them."""
        self._allow_stdin = allow_stdin
        self._input_patch.enter()

    def _restore_input(self) -> None:
        self._input_patch.exit()

    # -- kernel_info: advertise the extension so clients can detect it first --

    @property
    def kernel_info(self) -> dict:
        info: dict = super().kernel_info
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
            "checkpoint_dir": self.checkpoints.directory,
            "features": list(protocol.FEATURES),
            "running_record": self.runtime.record_path,
            "previous_kernel": _without_record(self.previous_kernel),
            "memory": self.runtime.memory.status(),
        }
        return info

    # -- requests of our own (the control ones are in control.py) --

    async def checkpoint_request(self, stream: t.Any, ident: t.Any, parent: dict) -> None:
        """Save, restore, list or drop checkpoints of the user namespace."""
        if not self.session:
            return
        reply = handle_checkpoint_request(self.checkpoints, parent.get("content") or {})
        self.session.send(stream, protocol.CHECKPOINT_REPLY, json_clean(reply), parent, ident=ident)

    # -- what the runtime tells us (RuntimeListener) --

    def tripped(self, execution: Execution, reason: str, interrupting: bool) -> None:
        """A budget tripped (watchdog thread, before the interrupt): say so in the cell, with the stack."""
        frames = self._remember(execution, execution.stack)
        event = events.runaway(execution, reason, frames, interrupting=interrupting, guard_source=self.runtime.memory.view.source)
        self.notes.publish(execution, event)

    def unresponsive(self, execution: Execution, why: str) -> None:
        """The interrupt did not stop the cell within the grace period (watchdog thread): say why, and where it is."""
        frames = self._remember(execution, execution.stack)
        self.notes.publish(execution, events.unresponsive(execution, why, frames, self.interrupt_grace))

    def _remember(self, execution: Execution, record: StackRecord | None) -> list[Frame]:
        if record is None:
            return []
        self._last_stack = metadata.stack_record(execution, record)
        return record.frames

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
        """Run a cell inside an execution the runtime can cancel; add our reply metadata.

        Whatever fails in our own machinery, the cell gets a reply naming the problem.
        """
        shell = self.shell
        assert isinstance(shell, CancelShell)
        parent = self.get_parent("shell")
        header = parent.get("header", {})
        msg_id, subshell_id = header.get("msg_id", ""), header.get("subshell_id")
        try:
            wanted = self._directives(code, cell_meta)
            if not silent:
                self._tell_previous_kernel()
                restore_on_start(self.checkpoints)  # once, before the first cell of a (re)started kernel
            before = save_before(self.checkpoints) if wanted.checkpoint == "before" else None
            budgets = Budgets(
                wall=wanted.wall_budget or 0.0, quiet=wanted.quiet_budget or 0.0, timeout=wanted.timeout, memory=wanted.memory_budget or 0
            )
            self._parents[msg_id] = parent
            with self._start_lock:
                if self.pending_cancels.take(msg_id):
                    self._parents.pop(msg_id, None)
                    return self._cancelled_before_start(msg_id, self._count_as_run(code, silent, store_history))
                execution = self.runtime.begin(msg_id, code, budgets, subshell_id=subshell_id)
            if not silent and (budgets.wall or budgets.quiet or budgets.memory):
                self.notes.started(execution)
        except directives.BudgetError as exc:
            count = self._count_as_run(code, silent, store_history)
            return self._refuse(msg_id, directives.BudgetError, f"{exc} (the cell was not run)", count)
        except Exception as exc:  # noqa: BLE001 - never a missing reply
            self.log.exception("cancelkernel: preparing cell %s failed", msg_id)
            self._parents.pop(msg_id, None)
            count = self._count_as_run(code, silent, store_history)
            return self._refuse(msg_id, InternalError, internal_error_text("to prepare the cell (it was not run)", exc), count)
        try:
            try:
                with concurrent_cells.cell_state(allow_stdin=allow_stdin):
                    reply = await upstream.run_cell_like_stock(
                        self, code, silent, store_history, user_expressions, allow_stdin, cell_meta, cell_id,
                        always_async=self.exec_thread == "worker",
                    )
            except (KeyboardInterrupt, asyncio.CancelledError) as exc:
                # Last line of defence: an interrupt that escaped the shell still gets a reply.
                reply = self._escaped_interrupt_reply(execution, exc)
        finally:
            self.notes.close(execution)
            self.runtime.end(execution)
            self.pending_cancels.finished(msg_id)
        try:
            self._finish(execution, reply, before, silent)
        except Exception as exc:  # noqa: BLE001 - the cell ran: keep its reply, say what failed after it
            self.log.exception("cancelkernel: finishing cell %s failed", msg_id)
            self._reply_metadata[msg_id] = {"msg_id": msg_id, "internal_error": internal_error_text("after the cell", exc)}
        finally:
            self._parents.pop(msg_id, None)
        return reply

    def _tell_previous_kernel(self) -> None:
        """The first cell of a kernel whose predecessor died while a cell ran: say how it died (before any restore)."""
        if self.previous_kernel is not None and not self._previous_told:
            self._previous_told = True
            print(f"cancelkernel: the previous kernel (pid {self.previous_kernel['pid']}) {self.previous_kernel['message']}", file=sys.stderr, flush=True)

    def _finish(self, execution: Execution, reply: dict, before: dict | None, silent: bool) -> None:
        """After the cell: its report, a dump taken while it ran, autosave, the reply metadata."""
        if execution.report is not None and reply.get("status") == "error":
            reply["ename"], reply["evalue"] = execution.report.ename, execution.report.evalue
        held = self.runtime.gil_held(execution)
        if execution.dump is not None:
            frames = self._remember(execution, execution.dump)
            if held and not (execution.report is not None and execution.report.told_gil):
                self.notes.publish(execution, events.gil_held(execution, frames, held, self.runtime.dumps.path), last=True)
        if execution.memory.kind is not None:
            # What still holds memory once the frame unwound (locals are gone): the names an agent or person can free.
            execution.memory.holders = biggest_names(self.shell.user_ns if self.shell is not None else {})
            self.notes.publish(execution, events.memory_after(execution), last=True)
        autosaved = None if silent else maybe_autosave(self.checkpoints, reply.get("status"))
        if before or autosaved:
            execution.checkpoint = {"before": before, "autosave": autosaved}
        self._reply_metadata[execution.msg_id] = metadata.reply_metadata(execution, reply, self.exec_thread)

    def _directives(self, code: str, cell_meta: dict | None) -> directives.CellDirectives:
        """Kernel defaults < execute_request metadata < a %%budget / %%timeout first line."""
        defaults = directives.CellDirectives(
            wall_budget=self.wall_budget or None, quiet_budget=self.quiet_budget or None, memory_budget=self.memory_budget or None
        )
        meta = directives.from_metadata((cell_meta or {}).get(protocol.KEY) if isinstance(cell_meta, dict) else None)
        line = directives.first_directive_line(code)
        magic = directives.parse_directive(line) if line else directives.CellDirectives()
        return directives.merge(defaults, meta, magic)

    def _count_as_run(self, code: str, silent: bool, store_history: bool) -> int:
        """A cell answered without running still takes its execution count and history entry, as stock's error cells do."""
        shell = self.shell
        assert isinstance(shell, CancelShell)
        with shell.bookkeeping.held():
            count = shell.execution_count
            if store_history and not silent:
                if shell.history_manager is not None:
                    shell.history_manager.store_inputs(count, code, code)
                shell.execution_count += 1
        return count

    def _refuse(self, msg_id: str, etype: type, evalue: str, count: int) -> dict:
        """The cell is not run: say why in the cell."""
        assert self.shell is not None
        self.pending_cancels.finished(msg_id)
        self._reply_metadata[msg_id] = metadata.refused_metadata(msg_id)
        return error_reply(self.shell, etype, evalue, count)

    def _cancelled_before_start(self, msg_id: str, count: int) -> dict:
        """An interrupt named this cell before it started: it never runs user code."""
        assert self.shell is not None
        self.pending_cancels.finished(msg_id)
        self._reply_metadata[msg_id] = metadata.cancelled_before_start_metadata(msg_id, self.exec_thread)
        evalue = "cell cancelled before it started: an interrupt_request named it while it waited"
        return error_reply(self.shell, KeyboardInterrupt, evalue, count)

    def _escaped_interrupt_reply(self, execution: Execution, exc: BaseException) -> dict:
        etype = asyncio.CancelledError if isinstance(exc, asyncio.CancelledError) else KeyboardInterrupt
        self.log.warning("interrupt escaped the shell for %s; replying anyway", execution.msg_id)
        assert self.shell is not None
        # run_cell counted the cell before the interrupt escaped it.
        return error_reply(self.shell, etype, interrupt_message(execution), self.shell.execution_count - 1)

    def finish_metadata(self, parent: dict, metadata: dict, reply_content: dict) -> dict:
        """Add our metadata; start stop_on_error's aborting BEFORE the error reply leaves (upstream.py)."""
        content = parent.get("content")
        if not isinstance(content, dict):
            content = {}  # still packed: ipykernel answers a request for a deleted subshell from its header alone
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
        return t.cast(dict, super().do_shutdown(restart))


def _log_to(app_log: logging.Logger) -> None:
    """Our log lines go where the kernel's own go (the server's log), never into a cell's stderr."""
    ours = logging.getLogger("cancelkernel")
    for handler in app_log.handlers:
        if handler not in ours.handlers:
            ours.addHandler(handler)
    ours.propagate = False



def _without_record(death: dict | None) -> dict | None:
    """The previous kernel's death as kernel_info says it: cause, evidence and message, not the raw record."""
    return None if death is None else {k: v for k, v in death.items() if k != "record"}
