"""The control-channel requests the kernel answers its own way: interrupts, cancel status, subshell deletion.

A mixin of CancelKernel (it uses the kernel's runtime, session and pending
cancels); kept apart so each module has one job.  The busy/idle rule for our
own control requests is here too, with the shell channel hook that notes
every execute_request as it arrives (interrupts.py says why).
"""

from __future__ import annotations

import asyncio
import logging
import time
import typing as t

from ipykernel.jsonutil import json_clean

from .. import protocol
from ..runtime.stacks import innermost_frame
from . import metadata, upstream
from .interrupts import InterruptRequestError, parse_request
from .replies import internal_error_text

log = logging.getLogger(__name__)

# Control requests of ours that must not move the kernel's busy/idle state as a server sees it.
OWN_CONTROL_REQUESTS = frozenset({protocol.CANCEL_STATUS_REQUEST})
# Seconds between a deleted subshell's last reply being sent and the deletion (see delete_subshell_request).
FORWARD_PAUSE = 0.05

if t.TYPE_CHECKING:
    from ipykernel.ipkernel import IPythonKernel as _Kernel
else:
    _Kernel = object


class ControlRequests(_Kernel):
    """interrupt_request, cancel_status_request, delete_subshell_request, and the status rule."""

    runtime: t.Any
    pending_cancels: t.Any
    exec_thread: protocol.ExecThread
    interrupt_grace: float
    _shutting_down: bool
    _start_lock: t.Any
    _last_stack: dict | None

    async def interrupt_request(self, stream: t.Any, ident: t.Any, parent: dict) -> None:
        """Interrupt every running execution (any shell), or only `target`, or only `subshell_id`'s cell."""
        if not self.session:
            return
        try:
            reply = self._interrupt(parent.get("content"))
        except InterruptRequestError as exc:
            reply = _error_content("ValueError", str(exc))
        self.session.send(stream, protocol.INTERRUPT_REPLY, reply, parent, ident=ident)

    def _interrupt(self, content: object) -> dict[str, t.Any]:
        ask = parse_request(content, self._subshell_ids())
        if self._shutting_down:
            return _error_content("RuntimeError", "the kernel is shutting down; nothing was interrupted")
        if ask.target is not None:
            with self._start_lock:
                hit = [e for e in [self.runtime.cancel(ask.target, protocol.REASON_REQUEST)] if e is not None]
                pending = None if hit else self.pending_cancels.remember(ask.target) == "pending"
        elif "subshell_id" in (content or {}):  # type: ignore[operator]
            hit = self.runtime.cancel_all(protocol.REASON_REQUEST, subshell_id=ask.subshell_id)
        else:
            hit = self.runtime.cancel_all(protocol.REASON_REQUEST)
        reply: dict[str, t.Any] = {
            "status": "ok",
            "interrupted": bool(hit),
            "execution": hit[0].msg_id if hit else None,
            "executions": [e.msg_id for e in hit],
        }
        if not hit:
            running = self.runtime.core.parent_execution
            reply["running"] = running.msg_id if running else None
            if ask.target is not None:
                reply["pending"] = pending
        return reply

    def _subshell_ids(self) -> list[str] | None:
        """The subshells that exist now (None: this kernel cannot tell)."""
        thread = self.shell_channel_thread
        if not thread:
            return None
        try:
            return list(thread.manager.list_subshell())
        except Exception:  # noqa: BLE001 - a manager being torn down
            return None

    async def delete_subshell_request(self, socket: t.Any, ident: t.Any, parent: dict) -> None:
        """Stop the subshell's running cell first: deleting waits for its thread, and the control channel with it."""
        content = parent.get("content")
        subshell_id = content.get("subshell_id") if isinstance(content, dict) else None
        if isinstance(subshell_id, str) and self.runtime.cancel_all(protocol.REASON_SHUTDOWN, subshell_id=subshell_id):
            deadline = time.monotonic() + self.interrupt_grace + 0.5  # its reply must leave before the subshell goes
            while self._subshell_busy(subshell_id) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            # The reply is on the subshell's socket; the shell channel thread forwards it on its next turn, and
            # deleting the subshell closes that socket: give the forward a moment first.
            await asyncio.sleep(FORWARD_PAUSE)
        await super().delete_subshell_request(socket, ident, parent)

    def _subshell_busy(self, subshell_id: str) -> bool:
        """The subshell's cell still runs, or its thread has not yet sent the reply (ipykernel holds its lock until then)."""
        if any(e.subshell_id == subshell_id for e in self.runtime.core.running()):
            return True
        try:
            return bool(self.shell_channel_thread.manager.get_subshell_asyncio_lock(subshell_id).locked())
        except Exception:  # noqa: BLE001 - gone already, or an ipykernel without it: nothing left to wait for
            return False

    async def cancel_status_request(self, stream: t.Any, ident: t.Any, parent: dict) -> None:
        """Answer on the control channel: what runs, for how long, and its state."""
        if not self.session:
            return
        try:
            content = json_clean(self.cancel_status())
        except Exception as exc:  # noqa: BLE001 - a status request must always be answered
            log.exception("cancel_status failed")
            content = {"status": "error", "ename": type(exc).__name__, "evalue": internal_error_text("to build the cancel status", exc), "traceback": []}
        self.session.send(stream, protocol.CANCEL_STATUS_REPLY, content, parent, ident=ident)

    def cancel_status(self) -> dict:
        dumps = self.runtime.dumps
        running = self.runtime.core.running()
        return metadata.cancel_status(
            running,
            stacks={e.msg_id: self.runtime.stack_of(e) for e in running},
            innermost={e.msg_id: innermost_frame(e.thread_id) for e in running},
            exec_thread=self.exec_thread,
            native_flag=self.runtime.native_flag,
            interrupt_grace=self.interrupt_grace,
            dump_file=dumps.path if dumps.available else None,
            last_stack=self._last_stack,
            abandoned_threads=self.runtime.executor.abandoned_threads(),
            memory=self.runtime.memory.status(),
        )

    async def shell_channel_thread_main(self, msg: t.Any) -> None:
        """Note every execute_request as it reaches the kernel, so an interrupt can wait for it (interrupts.py)."""
        upstream.note_received(self, msg, self.pending_cancels.received)
        await super().shell_channel_thread_main(msg)

    def _publish_status(self, status: str, channel: str, parent: dict | None = None) -> None:
        """No busy/idle around our own control requests: Jupyter Server would take that idle for the kernel's."""
        if channel == "control" and upstream.parent_type(self, channel, parent) in OWN_CONTROL_REQUESTS:
            return
        super()._publish_status(status, channel, parent)



def _error_content(ename: str, evalue: str) -> dict:
    return {"status": "error", "ename": ename, "evalue": evalue, "traceback": [], "interrupted": False, "execution": None}
