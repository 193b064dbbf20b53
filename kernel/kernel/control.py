"""The control-channel requests the kernel answers its own way: interrupts, cancel status, a subshell's deletion.

`ControlRequests` is an object the kernel holds, given what it acts on: the
runtime, the pending cancels and the lock a cell starts under.  It builds the
replies; the kernel's request handlers send them.  What an interrupt_request
may ask is checked here too (`parse_request`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import typing as t
from dataclasses import dataclass

from ipykernel.jsonutil import json_clean

from .. import protocol
from ..runtime.runtime import Runtime
from ..runtime.stacks import innermost_frame
from . import metadata
from .pending_cancels import PendingCancels
from .replies import internal_error_text
from .replies_left import RepliesLeft

if t.TYPE_CHECKING:
    from ipykernel.shellchannel import ShellChannelThread

log = logging.getLogger(__name__)

# Seconds between a deleted subshell's last reply being sent and the deletion (see stop_subshell_cell).
FORWARD_PAUSE = 0.05


class InterruptRequestError(ValueError):
    """An interrupt_request whose content cannot be used; the message says what to send."""


@dataclass
class InterruptAsk:
    """One interrupt_request's content, checked."""

    target: str | None = None  # an execute_request msg_id
    subshell_id: str | None = None  # only that subshell's running cell (None: every shell)


def parse_request(content: object, known_subshells: list[str] | None) -> InterruptAsk:
    """Check an interrupt_request's content; InterruptRequestError naming what is wrong."""
    if content is None:
        return InterruptAsk()
    if not isinstance(content, dict):
        raise InterruptRequestError(f"interrupt_request content must be an object, not {type(content).__name__}")
    target = content.get("target")
    if target is not None and (not isinstance(target, str) or not target.strip()):
        raise InterruptRequestError(
            f"interrupt_request 'target' must be the msg_id (a non-empty string) of an "
            f"execute_request, not {target!r}; send an empty content to interrupt whatever runs"
        )
    subshell = content.get("subshell_id")
    if subshell is not None:
        if not isinstance(subshell, str):
            raise InterruptRequestError(f"interrupt_request 'subshell_id' must be a string, not {subshell!r}")
        if known_subshells is not None and subshell not in known_subshells:
            raise InterruptRequestError(
                f"interrupt_request 'subshell_id' {subshell!r} names no subshell of this kernel "
                f"(list_subshell_request lists them); omit it to interrupt every shell"
            )
    return InterruptAsk(target=target, subshell_id=subshell)


class ControlRequests:
    """interrupt_request, cancel_status_request, and a subshell's cell stopped before the subshell is deleted."""

    def __init__(
        self,
        runtime: Runtime,
        pending_cancels: PendingCancels,
        start_lock: threading.Lock,
        shell_channel_thread: ShellChannelThread | None,
        replies_left: RepliesLeft,
        *,
        exec_thread: protocol.ExecThread,
        interrupt_grace: float,
    ):
        self._runtime = runtime
        self._pending_cancels = pending_cancels
        # Held while a cell starts, and here while a targeted interrupt decides "running or pending" (ipkernel.py).
        self._start_lock = start_lock
        self._shell_channel_thread = shell_channel_thread  # None: this kernel has no subshells
        self._exec_thread = exec_thread
        self._interrupt_grace = interrupt_grace
        self.shutting_down = False  # set by the kernel: from then on an interrupt is refused
        # (msg_id, reply content) of an interrupt_request delivered before its busy status (deliver_early).
        self._delivered: tuple[str, dict[str, t.Any]] | None = None
        # The replies of interrupted cells the control thread waits for (deliver_early).
        self._replies_left = replies_left
        # The last stack the kernel took of a cell (set by the kernel, told in cancel_status)
        self.last_stack: dict | None = None

    # -- interrupt_request --

    def deliver_early(self, request: dict | None) -> None:
        """Act on an interrupt_request before the kernel publishes its busy status; `reply_to` then gives the reply.

        Publishing hands the GIL over (a busy cell holds it): the interrupt
        goes out first, then this thread waits until the interrupted cells'
        replies have left (replies_left.py), so its own busy, reply and idle
        do not take the GIL from them while they unwind and report.
        """
        header = request.get("header") if isinstance(request, dict) else None
        if not isinstance(header, dict) or header.get("msg_type") != protocol.INTERRUPT_REQUEST:
            return
        assert request is not None
        with self._replies_left.watching():
            reply = self.interrupt(request.get("content"))
            self._runtime.control_acted()
            self._delivered = (str(header.get("msg_id")), reply)
            self._replies_left.wait(reply.get("executions") or [], self._runtime.control_waits())

    def reply_to(self, request: dict) -> dict[str, t.Any]:
        """The reply content of `request` (an interrupt_request): what deliver_early did, else the interrupt now."""
        delivered, self._delivered = self._delivered, None
        if delivered is not None and delivered[0] == request.get("header", {}).get("msg_id"):
            return delivered[1]
        return self.interrupt(request.get("content"))

    def interrupt(self, content: object) -> dict[str, t.Any]:
        """Interrupt every running execution (any shell), or only `target`, or only `subshell_id`'s cell:
        the reply's content."""
        try:
            return self._interrupt(content)
        except InterruptRequestError as exc:
            return _error_content("ValueError", str(exc))

    def _interrupt(self, content: object) -> dict[str, t.Any]:
        ask = parse_request(content, self._subshell_ids())
        if self.shutting_down:
            return _error_content("RuntimeError", "the kernel is shutting down; nothing was interrupted")
        runtime = self._runtime
        if ask.target is not None:
            with self._start_lock:
                hit = [e for e in [runtime.cancel(ask.target, protocol.REASON_REQUEST)] if e is not None]
                pending = None if hit else self._pending_cancels.remember(ask.target) == "pending"
        elif "subshell_id" in (content or {}):  # type: ignore[operator]
            hit = runtime.cancel_all(protocol.REASON_REQUEST, subshell_id=ask.subshell_id)
        else:
            hit = runtime.cancel_all(protocol.REASON_REQUEST)
        reply: dict[str, t.Any] = {
            "status": "ok",
            "interrupted": bool(hit),
            "execution": hit[0].msg_id if hit else None,
            "executions": [e.msg_id for e in hit],
        }
        if not hit:
            running = runtime.core.parent_execution
            reply["running"] = running.msg_id if running else None
            if ask.target is not None:
                reply["pending"] = pending
        return reply

    def _subshell_ids(self) -> list[str] | None:
        """The subshells that exist now (None: this kernel cannot tell)."""
        thread = self._shell_channel_thread
        if not thread:
            return None
        try:
            return list(thread.manager.list_subshell())
        except Exception:  # noqa: BLE001 - a manager being torn down
            return None

    # -- delete_subshell_request --

    async def stop_subshell_cell(self, content: object) -> None:
        """Stop the running cell of the subshell a delete_subshell_request names, and wait until its reply has left.

        Deleting a subshell waits for its thread, and the control channel with it.
        """
        subshell_id = content.get("subshell_id") if isinstance(content, dict) else None
        if isinstance(subshell_id, str) and self._runtime.cancel_all(protocol.REASON_SHUTDOWN, subshell_id=subshell_id):
            deadline = time.monotonic() + self._interrupt_grace + 0.5  # its reply must leave before the subshell goes
            while self._subshell_busy(subshell_id) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            # The reply is on the subshell's socket; the shell channel thread forwards it on its next turn, and
            # deleting the subshell closes that socket: give the forward a moment first.
            await asyncio.sleep(FORWARD_PAUSE)

    def _subshell_busy(self, subshell_id: str) -> bool:
        """The subshell's cell still runs, or its thread has not yet sent the reply
        (ipykernel holds its lock until then)."""
        if any(e.subshell_id == subshell_id for e in self._runtime.core.running()):
            return True
        thread = self._shell_channel_thread
        if thread is None:
            return False
        try:
            return bool(thread.manager.get_subshell_asyncio_lock(subshell_id).locked())
        except Exception:  # noqa: BLE001 - gone already, or an ipykernel without it: nothing left to wait for
            return False

    # -- cancel_status_request --

    def cancel_status_reply(self) -> dict:
        """The reply's content: what runs, for how long, and its state (an error reply if that cannot be built)."""
        try:
            return t.cast(dict, json_clean(self.cancel_status()))
        except Exception as exc:  # a status request must always be answered
            log.exception("cancel_status failed")
            return {
                "status": "error",
                "ename": type(exc).__name__,
                "evalue": internal_error_text("to build the cancel status", exc),
                "traceback": [],
            }

    def cancel_status(self) -> dict:
        runtime = self._runtime
        dumps = runtime.dumps
        running = runtime.core.running()
        return metadata.cancel_status(
            running,
            stacks={e.msg_id: runtime.stack_of(e) for e in running},
            innermost={e.msg_id: innermost_frame(e.thread_id) for e in running},
            exec_thread=self._exec_thread,
            native_flag=runtime.native_flag,
            interrupt_grace=self._interrupt_grace,
            dump_file=dumps.path if dumps.available else None,
            last_stack=self.last_stack,
            abandoned_threads=runtime.executor.abandoned_threads(),
            memory=runtime.memory.status(),
        )


def _error_content(ename: str, evalue: str) -> dict:
    return {
        "status": "error",
        "ename": ename,
        "evalue": evalue,
        "traceback": [],
        "interrupted": False,
        "execution": None,
    }
