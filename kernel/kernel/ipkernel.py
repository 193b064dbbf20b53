"""CancelKernel: ipykernel's IPythonKernel wired to the runtime.

It owns nothing but the wiring: `interrupt_request` (optionally targeted),
`cancel_status_request`, `checkpoint_request`, execute_reply metadata, the
notes a person sees (notes.py publishes them, events.py says which).  The
runtime runs, watches and stops the code; the checkpoint package saves state;
metadata.py says what a reply contains.  The ipykernel hooks it overrides
delegate to objects it holds: the control requests (control.py), the comm
messages' busy/idle (comms.py) and the one busy/idle rule (status.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import functools
import logging
import os
import socket
import sys
import threading
import typing as t

import zmq
from ipykernel.ipkernel import IPythonKernel
from ipykernel.jsonutil import json_clean

from .. import __version__, directives, last_cell, protocol
from ..checkpoint.magics import register as register_checkpoint_magics
from ..checkpoint.settings import CheckpointSettings
from ..checkpoint.shell import (
    ShellCheckpoints,
    handle_checkpoint_request,
    maybe_autosave,
    restore_on_start,
    save_before,
)
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
from .notes import CellNotes
from .options import KernelOptions
from .pending_cancels import PendingCancels
from .replies import InternalError, count_as_run, error_reply, escaped_interrupt_reply, internal_error_text
from .replies_left import RepliesLeft
from .shell import CancelShell
from .status import BusyIdle, MainShellState
from .streams import connect_streams

# Seconds after a shutdown_request by which the kernel process is gone, whatever hangs.
SHUTDOWN_DEADLINE = 3.0


class CancelKernel(KernelOptions, IPythonKernel):
    """An IPython kernel whose cells can always be stopped."""

    shell_class = CancelShell

    # checkpoint_request is shell-only: it runs between cells, never while one runs.
    # Kernel declares both plain attributes: mypy refuses a ClassVar here.
    msg_types = [*IPythonKernel.msg_types, protocol.CHECKPOINT_REQUEST]  # noqa: RUF012 - never mutated
    control_msg_types = [*IPythonKernel.control_msg_types, protocol.CANCEL_STATUS_REQUEST]  # noqa: RUF012 - never mutated

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
            memory_guard=GuardSettings(
                enabled=self.memory_guard, margin=self.memory_guard_margin, data_limit=self.memory_data_limit
            ),
            record_path=record_path,
        )
        if self.gil_yield and (fd := _control_fd(self.control_stream)) is not None:
            self.runtime.sigint.yield_for_control(fd)
        self.replies_left = RepliesLeft(self.shell_stream)
        self.control_requests = ControlRequests(
            self.runtime,
            self.pending_cancels,
            self._start_lock,
            self.shell_channel_thread,
            self.replies_left,
            exec_thread=self.exec_thread,
            interrupt_grace=self.interrupt_grace,
        )
        self.comm_status = CommStatus(self.session, self._publish_status)
        self.busy_idle = BusyIdle(self.runtime.core.running, self._parents)
        self.main_shell = MainShellState()
        # Stock swaps input/getpass around each cell; with two cells at once the saved originals were lost.
        self._input_patch = concurrent_cells.CountedPatch(
            lambda: IPythonKernel._forward_input(self, self._allow_stdin), lambda: IPythonKernel._restore_input(self)
        )
        self.runtime.sigint.register_run_code(upstream.run_code_like_ipython.__code__)
        shell.runtime = self.runtime
        shell.on_output = self.runtime.output_seen
        shell.on_traceback = self.notes.close
        connect_streams(shell, self.runtime.output_seen, [sys.stdout, sys.stderr])
        self.checkpoints = ShellCheckpoints(shell, CheckpointSettings(parent=self), room=self.runtime.memory.room)
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
        """Stock's, with execution_state (the main shell busy or idle) and our block, its running cells included."""
        info: dict = super().kernel_info
        info[protocol.KERNEL_EXECUTION_STATE] = self.main_shell.execution_state()
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
            "checkpoint_root": self.checkpoints.settings.resolve_root(),
            "host": socket.gethostname(),
            "features": list(protocol.FEATURES),
            "running_record": self.runtime.record_path,
            "previous_kernel": _without_record(self.previous_kernel),
            "memory": self.runtime.memory.status(),
            "executions": metadata.running_executions(self.runtime.core.running()),
        }
        return info

    # -- the ipykernel hooks we override: each delegates to the object that does the work --

    async def interrupt_request(self, stream: t.Any, ident: t.Any, parent: dict) -> None:
        """Interrupt every running execution (any shell), or only `target`,
        or only `subshell_id`'s cell (control.py)."""
        if self.session:
            self.session.send(
                stream,
                protocol.INTERRUPT_REPLY,
                self.control_requests.reply_to(parent),
                parent,
                ident=ident,
            )

    async def cancel_status_request(self, stream: t.Any, ident: t.Any, parent: dict) -> None:
        """Answer on the control channel: what runs, for how long, and its state (control.py)."""
        if self.session:
            self.session.send(
                stream, protocol.CANCEL_STATUS_REPLY, self.control_requests.cancel_status_reply(), parent, ident=ident
            )

    async def delete_subshell_request(self, socket: t.Any, ident: t.Any, parent: dict) -> None:
        """Stop the subshell's running cell first: deleting waits for its thread,
        and the control channel with it (control.py)."""
        await self.control_requests.stop_subshell_cell(parent.get("content"))
        await super().delete_subshell_request(socket, ident, parent)

    async def shell_channel_thread_main(self, msg: t.Any) -> None:
        """Note every execute_request as it reaches the kernel, so an interrupt can wait for it (pending_cancels.py)."""
        upstream.note_received(self, msg, self.pending_cancels.received)
        await super().shell_channel_thread_main(msg)

    async def dispatch_shell(self, msg: t.Any, /, subshell_id: str | None = None, *, concurrent: bool = False) -> None:
        """A comm message handled beside a running cell gets its busy/idle (comms.py)."""
        dispatch = functools.partial(super().dispatch_shell, msg, subshell_id=subshell_id, concurrent=concurrent)
        await self.comm_status.dispatch(msg, dispatch, concurrent=concurrent)

    def _publish_status(self, status: str, channel: str, parent: dict | None = None) -> None:
        """Every busy/idle passes the one rule (status.py): none for our own control requests,
        busy again after a comm's idle."""
        parent = upstream.status_parent(self, channel, parent)
        if status == protocol.KERNEL_BUSY and channel == "control":
            self.control_requests.deliver_early(parent)  # an interrupt before the status that announces it
        elif status == protocol.KERNEL_IDLE and channel == "control":
            self.runtime.control_acted()
        shell_idle = None  # the msg_id of a shell request going idle
        if status == protocol.KERNEL_IDLE and channel == "shell" and parent:
            shell_idle = parent.get("header", {}).get("msg_id", "")
        if shell_idle is not None:
            self.replies_left.hand_over(shell_idle)  # an interrupted cell's reply leaves first
        for state, on, about in self.busy_idle.statuses(status, channel, parent):
            # Remembered first: a client that saw the idle and asks kernel_info at once must not hear busy.
            self.main_shell.published(state, on, about)
            super()._publish_status(state, on, about)
        if shell_idle is not None:
            self.replies_left.idle(shell_idle)

    # -- requests of our own --

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
        event = events.runaway(
            execution, reason, frames, interrupting=interrupting, guard_source=self.runtime.memory.view.source
        )
        self.notes.publish(execution, event)

    def traceback_waits(self, execution: Execution) -> t.ContextManager[object]:
        """Around a trip's interrupt and its note (watchdog thread): the traceback comes after the note."""
        return self.notes.held()

    def unresponsive(self, execution: Execution, why: str) -> None:
        """The interrupt did not stop the cell within the grace period (watchdog thread): say why, and where it is."""
        frames = self._remember(execution, execution.stack)
        self.notes.publish(execution, events.unresponsive(execution, why, frames, self.interrupt_grace))

    def _remember(self, execution: Execution, record: StackRecord | None) -> list[Frame]:
        if record is None:
            return []
        self.control_requests.last_stack = metadata.stack_record(execution, record)
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
            self.checkpoints.release_prepared()  # no restore is coming; given back before the cell's memory baseline
            before = save_before(self.checkpoints) if wanted.checkpoint == "before" else None
            budgets = Budgets(
                wall=wanted.wall_budget or 0.0,
                quiet=wanted.quiet_budget or 0.0,
                timeout=wanted.timeout,
                memory=wanted.memory_budget or 0,
            )
            self._parents[msg_id] = parent
            with self._start_lock:
                if self.pending_cancels.take(msg_id):
                    self._parents.pop(msg_id, None)
                    return self._cancelled_before_start(msg_id, count_as_run(shell, code, silent, store_history))
                execution = self.runtime.begin(msg_id, code, budgets, subshell_id=subshell_id)
            if not silent and budgets.limited:
                self.notes.started(execution)
        except directives.BudgetError as exc:
            count = count_as_run(shell, code, silent, store_history)
            return self._refuse(msg_id, directives.BudgetError, f"{exc} (the cell was not run)", count)
        except Exception as exc:  # never a missing reply
            self.log.exception("cancelkernel: preparing cell %s failed", msg_id)
            self._parents.pop(msg_id, None)
            count = count_as_run(shell, code, silent, store_history)
            return self._refuse(
                msg_id, InternalError, internal_error_text("to prepare the cell (it was not run)", exc), count
            )
        try:
            try:
                with concurrent_cells.cell_state(allow_stdin=allow_stdin):
                    reply = await upstream.run_cell_like_stock(
                        self,
                        code,
                        silent,
                        store_history,
                        user_expressions,
                        allow_stdin,
                        cell_meta,
                        cell_id,
                        always_async=self.exec_thread == "worker",
                    )
            except (KeyboardInterrupt, asyncio.CancelledError) as exc:
                # Last line of defence: an interrupt that escaped the shell still gets a reply.
                self.log.warning("interrupt escaped the shell for %s; replying anyway", msg_id)
                reply = escaped_interrupt_reply(shell, execution, exc)
        finally:
            self.notes.close(execution)
            self.runtime.end(execution)
            self.pending_cancels.finished(msg_id)
        try:
            self._finish(execution, reply, before, silent)
        except Exception as exc:  # the cell ran: keep its reply, say what failed after it
            self.log.exception("cancelkernel: finishing cell %s failed", msg_id)
            self._reply_metadata[msg_id] = {
                "msg_id": msg_id,
                "internal_error": internal_error_text("after the cell", exc),
            }
        finally:
            self._parents.pop(msg_id, None)
        return reply

    def _tell_previous_kernel(self) -> None:
        """The first cell of a kernel whose predecessor died while a cell ran: say how it died (before any restore)."""
        if self.previous_kernel is not None and not self._previous_told:
            self._previous_told = True
            print(
                f"cancelkernel: the previous kernel (pid {self.previous_kernel['pid']}) "
                f"{self.previous_kernel['message']}",
                file=sys.stderr,
                flush=True,
            )

    def _finish(self, execution: Execution, reply: dict, before: dict | None, silent: bool) -> None:
        """After the cell: its report, a dump taken while it ran, autosave, the reply metadata."""
        if execution.report is not None and reply.get("status") == "error":
            reply["ename"], reply["evalue"] = execution.report.ename, execution.report.evalue
        held = self.runtime.gil_held(execution)
        if execution.dump is not None:
            frames = self._remember(execution, execution.dump)
            if held and not (execution.report is not None and execution.report.told_gil):
                self.notes.publish(
                    execution, events.gil_held(execution, frames, held, self.runtime.dumps.path), last=True
                )
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
            wall_budget=self.wall_budget or None,
            quiet_budget=self.quiet_budget or None,
            memory_budget=self.memory_budget or None,
        )
        return directives.for_cell(code, cell_meta.get(protocol.KEY) if isinstance(cell_meta, dict) else None, defaults)

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
        self.control_requests.shutting_down = True
        self.runtime.cancel(None, protocol.REASON_SHUTDOWN)
        await super().shutdown_request(stream, ident, parent)

    def do_shutdown(self, restart: bool) -> dict:  # type: ignore[override]  # IPythonKernel's is sync too
        self.control_requests.shutting_down = True
        # A teardown step that hangs (a thread join, a locked history database) must not
        # keep a kernel alive that said it shuts down: faulthandler's C thread logs the
        # stacks to the server log and ends the process if it is still here then.
        self.runtime.close()
        # No usable stderr: jupyter_client's kill remains.
        with contextlib.suppress(AttributeError, ValueError, RuntimeError):
            faulthandler.dump_traceback_later(SHUTDOWN_DEADLINE, exit=True, file=sys.__stderr__)  # type: ignore[arg-type]
        return t.cast(dict, super().do_shutdown(restart))


def _log_to(app_log: logging.Logger) -> None:
    """Our log lines go where the kernel's own go (the server's log), never into a cell's stderr."""
    ours = logging.getLogger("cancelkernel")
    for handler in app_log.handlers:
        if handler not in ours.handlers:
            ours.addHandler(handler)
    ours.propagate = False


def _control_fd(stream: t.Any) -> int | None:
    """The file descriptor that is readable while the control socket holds a message not yet taken in."""
    try:
        return int(stream.socket.getsockopt(zmq.FD))
    except Exception:  # noqa: BLE001 - no control stream (an in-process kernel): nothing to watch
        return None


def _without_record(death: dict | None) -> dict | None:
    """The previous kernel's death as kernel_info says it: cause, evidence and message, not the raw record."""
    return None if death is None else {k: v for k, v in death.items() if k != "record"}
