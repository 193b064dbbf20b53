"""The link to one kernel: requests and replies, the kernel's self-description, and how to interrupt it.

Mechanism only, no policy: what to do when a cell runs away lives in
policy.py.  Messages go through a transport (transport/), the process is
handled by a lifecycle (lifecycle/).  It speaks the Jupyter protocol (plus
our extensions, when the kernel advertises them) and imports nothing of the
kernel's internals.
"""

from __future__ import annotations

import collections
import os
import signal
import time
import typing as t
from dataclasses import dataclass, field

from .. import protocol
from .errors import KernelStartError
from .lifecycle import Lifecycle
from .lifecycle.local import new_kernel_pid
from .transport import Transport
from .transport.waker import Waker

# Launches of one kernel when another process takes a port it was given (protocol.EXIT_PORT_IN_USE).
START_ATTEMPTS = 3

# How long an interrupt_request may go unanswered before the kernel counts as
# wedged (GIL held) and a local kernel gets SIGINT instead (plus the link's round trip, for a remote one).
CONTROL_ANSWER = 0.2
# Late control replies kept for a while (an interrupt_reply after its wait ended), never without bound.
KEEP_CONTROL_REPLIES = 100
# Messages that arrived while waiting for a control reply, kept for the next poll (bounded: oldest dropped).
KEEP_PENDING = 10_000


@dataclass
class KernelInfo:
    """What the kernel said about itself in kernel_info_reply."""

    ours: bool = False
    implementation: str = ""
    language: str = ""
    version: str | None = None
    features: list[str] = field(default_factory=list)
    exec_thread: str | None = None
    interrupt_grace: float | None = None
    native_flag: bool = False
    pid: int | None = None
    dump_file: str | None = None
    checkpoint_dir: str | None = None
    checkpoint_root: str | None = None  # the root checkpoint_dir is under (None: a directory set outright)
    host: str | None = None  # the host name the kernel runs on
    running_record: str | None = None  # the file our kernel keeps while a cell runs (cancelkernel.last_cell)
    # The main shell busy or idle, from kernel_info_reply's execution_state (the JEP pre-proposal; None: not said).
    execution_state: str | None = None
    executions: list[dict] = field(default_factory=list)  # our kernel: every cell running when it answered
    raw: dict = field(default_factory=dict)

    @classmethod
    def from_reply(cls, content: dict) -> KernelInfo:
        ext = content.get(protocol.KEY) if protocol.FEATURE in (content.get("supported_features") or []) else None
        state = content.get(protocol.KERNEL_EXECUTION_STATE)
        info = cls(
            implementation=str(content.get("implementation", "")),
            language=str((content.get("language_info") or {}).get("name", "")),
            execution_state=state if isinstance(state, str) else None,
            raw=content,
        )
        if isinstance(ext, dict):
            info.ours = True
            info.version = ext.get("version")
            info.features = list(ext.get("features") or [])
            info.exec_thread = ext.get("exec_thread")
            grace = ext.get("interrupt_grace")
            info.interrupt_grace = float(grace) if isinstance(grace, (int, float)) else None
            info.native_flag = bool(ext.get("native_flag"))
            info.pid = new_kernel_pid(content)
            info.dump_file = ext.get("dump_file") if isinstance(ext.get("dump_file"), str) else None
            info.checkpoint_dir = _text(ext.get("checkpoint_dir"))
            info.checkpoint_root = _text(ext.get("checkpoint_root"))
            info.host = _text(ext.get("host"))
            info.running_record = ext.get("running_record") if isinstance(ext.get("running_record"), str) else None
            info.executions = [e for e in ext.get("executions") or [] if isinstance(e, dict)]
        return info

    def has(self, feature: str) -> bool:
        return self.ours and feature in self.features

    @property
    def busy(self) -> bool:
        """A cell runs on the kernel's main shell, where a cell sent now would wait behind it.

        Our kernel names its running cells (`executions`): a subshell's does not count, nor the moment between
        a cell's reply and its idle. Another kernel says only `execution_state` (when it implements the field).
        """
        if self.ours and protocol.KERNEL_EXECUTION_STATE in self.raw:
            return any(e.get("subshell_id") is None for e in self.executions)
        return self.execution_state == protocol.KERNEL_BUSY

    def running_text(self) -> str:
        """What runs there, as the kernel said it ("e1a2 (12.3 s, running)"), for an error message."""
        cells = [e for e in self.executions if e.get("subshell_id") is None] or self.executions
        if not cells:
            return "a request"
        return ", ".join(
            f"{e.get('msg_id')} ({float(e.get('elapsed') or 0):.1f} s, {e.get('state', 'running')})" for e in cells
        )


# wait_control's answer when a message other than the reply settled the question.
_SETTLED: dict = {}


def _replies_to(message: tuple[str, dict], msg_id: str | None) -> bool:
    """The execute_reply of cell `msg_id`."""
    channel, msg = message
    return bool(msg_id) and channel == "shell" and msg["parent_header"].get("msg_id") == msg_id


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


@dataclass
class SavedCheckpoint:
    """The latest checkpoint this client saw saved, and where: what a kernel that replaces this one must find."""

    name: str
    directory: str | None
    host: str | None

    @property
    def path(self) -> str | None:
        return os.path.join(self.directory, self.name) if self.directory else None


@dataclass
class InterruptSent:
    """One interrupt decision and how it was delivered."""

    sent_at: float
    via: str  # "message", "signal", "message+signal" (local), "message+rest" (remote), "kernel", "none"
    reply: dict | None = None  # interrupt_reply content, when the control channel answered

    @property
    def wedged(self) -> bool:
        """The control channel did not answer (one C call holds the GIL): it went out another way."""
        return self.via.startswith("message+")


class KernelLink:
    """One kernel: its lifecycle, its transport, and the requests the policy makes."""

    def __init__(self, lifecycle: Lifecycle, *, start_timeout: float = 60.0):
        self.lifecycle = lifecycle
        self.start_timeout = start_timeout
        self.transport: Transport | None = None
        self.info = KernelInfo()
        self.session_id = ""  # the running kernel's session: a "starting" status from another one means a new kernel
        self.restarts = 0
        self.saved: SavedCheckpoint | None = None  # the latest checkpoint saved, as far as this client knows
        self._control_replies: dict[str, dict] = {}
        self._pending: collections.deque[tuple[str, dict]] = collections.deque(maxlen=KEEP_PENDING)
        # Another thread's interrupt ends the run loop's wait at once (made by the first poll)
        self._waker: Waker | None = None

    @property
    def kernel_name(self) -> str:
        return self.lifecycle.kernel_name

    @property
    def kernel_id(self) -> str:
        return self.lifecycle.kernel_id

    @property
    def local(self) -> bool:
        return self.lifecycle.local

    @property
    def pid(self) -> int | None:
        return self.info.pid if self.info.pid is not None else self.lifecycle.pid

    def is_alive(self) -> bool:
        return self.lifecycle.is_alive()

    def exit_code(self) -> int | None:
        return self.lifecycle.exit_code()

    def signal(self, signum: int) -> bool:
        return self.lifecycle.signal(signum, self.info.pid)

    # -- start --

    def start(self) -> None:
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self.transport = self.lifecycle.start()
                # A kernel connected to may run a cell: ask on control, answered at once (shell queues behind it).
                self.wait_ready(self.start_timeout, on_control=not self.lifecycle.owned)
                return
            except BaseException as exc:
                # Only a port clash is worth another try: the next launch chooses new ports.
                clash = isinstance(exc, KernelStartError) and self.lifecycle.exit_code() == protocol.EXIT_PORT_IN_USE
                self.shutdown()
                if not clash or attempt == START_ATTEMPTS:
                    raise

    def _transport(self) -> Transport:
        if self.transport is None:
            raise KernelStartError("the kernel is not running; use AgentKernel as a context manager or call start()")
        return self.transport

    def wait_ready(self, timeout: float, *, on_control: bool = False) -> None:
        """kernel_info answered and iopub connected; raises KernelStartError when the kernel does not come up.

        on_control: ask on the control channel first (a running cell does not hold the answer up), and
        on the shell channel if nothing answers there within a second (a kernel that answers it on shell only).
        """
        transport = self._transport()
        deadline = time.monotonic() + timeout
        asking = "control" if on_control else "shell"
        while True:
            replied, iopub_seen = self._kernel_info_round(transport, deadline, timeout, asking)
            if replied is not None and iopub_seen:
                self.info = KernelInfo.from_reply(replied["content"])
                self.session_id = str(replied["header"].get("session", ""))
                self.lifecycle.verify_pid(self.info.pid)
                self.flush()
                return
            if replied is None:
                asking = "shell"
            if time.monotonic() > deadline:
                raise KernelStartError(f"kernel {self.kernel_name!r} did not become ready within {timeout:g} s")

    def _kernel_info_round(
        self, transport: Transport, deadline: float, timeout: float, asking: str
    ) -> tuple[dict | None, bool]:
        """One kernel_info_request on `asking`, waited on for up to a second: its reply, and whether iopub spoke too."""
        msg_id = transport.send(asking, "kernel_info_request", {})
        sent = time.monotonic()
        replied: dict | None = None
        iopub_seen = False
        while time.monotonic() - sent < 1.0 and not (replied and iopub_seen):
            if not self.lifecycle.is_alive(for_start=True):
                raise KernelStartError(self.lifecycle.died_text("while starting"))
            for channel, msg in transport.poll(0.05):
                if channel == "iopub":
                    iopub_seen = True  # the request makes the kernel publish busy/idle: iopub is subscribed
                elif (
                    channel == asking
                    and msg["parent_header"].get("msg_id") == msg_id
                    and msg["msg_type"] == "kernel_info_reply"
                ):
                    replied = msg
                elif channel == "control":
                    self._keep_control(msg)
            if time.monotonic() > deadline and replied is None:
                raise KernelStartError(
                    f"kernel {self.kernel_name!r} did not answer kernel_info within {timeout:g} s; "
                    f"check the kernel's log, or raise start_timeout"
                )
        return replied, iopub_seen

    # -- messages --

    def execute(self, code: str, *, cell_id: str | None = None, metadata: dict | None = None) -> str:
        """Send an execute_request (stop_on_error off: one failing cell never aborts the next one)."""
        content = {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": False,
        }
        meta = dict(metadata or {})
        if cell_id is not None:
            meta["cellId"] = cell_id  # what JupyterLab sends; ipykernel passes it on as cell_id
        return self._transport().send("shell", "execute_request", content, metadata=meta)

    def poll(self, timeout: float) -> list[tuple[str, dict]]:
        """Messages ready on any channel within `timeout` seconds (first those that arrived during a wait)."""
        if self._pending:
            out = list(self._pending)
            self._pending.clear()
            return out + self._receive(0)
        return self._receive(timeout)

    def wake(self) -> None:
        """End a wait in `poll` now (thread-safe): the caller has something for the run loop to see."""
        waker = self._waker
        if waker is not None:
            waker.wake()

    def _receive(self, timeout: float) -> list[tuple[str, dict]]:
        """From the transport; control replies are also kept for wait_control."""
        if self._waker is None:
            self._waker = Waker()
        out = self._transport().poll(timeout, self._waker.fileno())
        self._waker.drain()
        for channel, msg in out:
            if channel == "control":
                self._keep_control(msg)
        return out

    def flush(self) -> None:
        """Drop every pending message (after a restart: nothing old may be mistaken for new)."""
        try:
            while self.poll(0):
                pass
        except Exception:  # noqa: BLE001 - a closed transport has nothing pending
            pass
        self._pending.clear()
        self._control_replies.clear()

    def control(
        self,
        msg_type: str,
        content: dict | None = None,
        *,
        timeout: float,
        settled_by: t.Callable[[tuple[str, dict]], bool] | None = None,
    ) -> dict | None:
        """A control request; its reply, or None if none came within `timeout` (wedged, or not understood).

        `timeout` is the kernel's time to answer: the link's round trip is added (none when it is 0: do not wait).
        `settled_by`: as wait_control's.
        """
        transport = self._transport()
        msg_id = transport.send("control", msg_type, content or {})
        return self.wait_control(
            msg_id, timeout + transport.link_delay() if timeout > 0 else timeout, settled_by=settled_by
        )

    def link_delay(self) -> float:
        """Seconds a reply takes beyond the kernel's own time on this link (0 on the kernel's host)."""
        return self.transport.link_delay() if self.transport is not None else 0.0

    def _keep_control(self, msg: dict) -> None:
        if len(self._control_replies) > KEEP_CONTROL_REPLIES:
            self._control_replies.pop(next(iter(self._control_replies)))
        self._control_replies[msg["parent_header"].get("msg_id", "")] = msg

    def wait_control(
        self, msg_id: str, timeout: float, *, settled_by: t.Callable[[tuple[str, dict]], bool] | None = None
    ) -> dict | None:
        """The control reply to `msg_id`; messages that arrive meanwhile wait for the next poll.

        settled_by: a message that makes the reply moot ends the wait with `_SETTLED` (the reply is kept if it comes).
        """
        deadline = time.monotonic() + timeout
        while msg_id not in self._control_replies:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            arrived = [m for m in self._receive(min(left, 0.05)) if m[0] != "control"]
            self._pending.extend(arrived)
            if settled_by is not None and msg_id not in self._control_replies and any(map(settled_by, arrived)):
                return _SETTLED
        return self._control_replies.pop(msg_id)

    def shell_request(self, msg_type: str, content: dict, *, timeout: float, reply_type: str) -> dict | None:
        """A shell request sent while no cell runs; its reply, or None after `timeout`."""
        msg_id = self._transport().send("shell", msg_type, content)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.is_alive():
                return None
            for channel, reply in self.poll(0.1):
                if (
                    channel == "shell"
                    and reply["parent_header"].get("msg_id") == msg_id
                    and reply["msg_type"] == reply_type
                ):
                    return reply
        return None

    def kernel_state(self, timeout: float = 0.5) -> KernelInfo | None:
        """kernel_info asked on the control channel, answered even while a cell runs; None if no answer came.

        Only while no cell of ours runs (the run loop owns the sockets then).
        """
        reply = self.control("kernel_info_request", {}, timeout=timeout)
        return KernelInfo.from_reply(reply["content"]) if reply is not None else None

    def cancel_status(self, timeout: float = 0.3) -> dict | None:
        """Our kernel's cancel_status_reply content; None for stock kernels (they never answer) or when wedged."""
        if not self.info.ours:
            return None
        reply = self.control(protocol.CANCEL_STATUS_REQUEST, {}, timeout=timeout)
        return reply["content"] if reply is not None else None

    def interrupt(self, target: str | None, *, wedged: bool = False) -> InterruptSent:
        """Deliver ONE interrupt by the path that works.

        Our kernel: a targeted interrupt_request; if the control channel does
        not answer within CONTROL_ANSWER and the link's round trip (the GIL is held), the same decision
        goes out as SIGINT to a local kernel, which our C handler turns into
        the native cancel flag.  Stock kernels: as their kernelspec says.
        """
        sent = time.monotonic()
        if not self.info.ours and self.lifecycle.manager is not None and self.lifecycle.interrupt_mode() == "signal":
            return InterruptSent(sent, "signal" if self.signal(signal.SIGINT) else "none")
        content = {"target": target} if self.info.ours and target else {}
        # Our kernel answers once the interrupted cell replied: that reply already says the interrupt arrived.
        reply = self.control(
            protocol.INTERRUPT_REQUEST,
            content,
            timeout=0.0 if wedged else CONTROL_ANSWER,
            settled_by=lambda m: _replies_to(m, target),
        )
        if reply is _SETTLED:
            return InterruptSent(sent, "message")
        if reply is not None:
            return InterruptSent(sent, "message", reply.get("content") or {})
        outside = self.lifecycle.outside_interrupt(self.info.pid)
        return InterruptSent(sent, f"message+{outside}" if outside else "message")

    def read_dump(self, since: float) -> str:
        """The kernel's faulthandler dump file, if written after `since` (time.time()); it is rewritten per dump."""
        path = self.info.dump_file
        if not path or not self.lifecycle.local:
            return ""  # a remote kernel's file is on the server's machine
        try:
            if os.path.getmtime(path) < since:
                return ""
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read(1_000_000)
        except OSError:
            return ""

    # -- restart / shutdown --

    def restart(self, *, dead: bool = False) -> dict[str, t.Any]:
        """A fresh kernel: the warm spare swapped in, else a restart on the same connection
        (checkpoints are found either way).

        dead: the kernel already died (or its owner replaced it): nothing to stop first.
        Returns how it went: spare (bool), note (why not the spare), and
        old_gone / ready (time.monotonic() when the old kernel was gone and the new one answered).
        """
        self.restarts += 1
        self.lifecycle.restart(dead=dead, old_pid=self.info.pid, wait_for_owner=self._new_kernel_answers)
        report = dict(self.lifecycle.last_restart)
        self.transport = self.lifecycle.transport or self.transport  # a kernel started anew has a new connection
        self.flush()
        self.wait_ready(self.start_timeout)
        report["ready"] = time.monotonic()
        return report

    # -- the warm spare --

    def warm_spare(self) -> None:
        """Keep a spare kernel ready (lifecycles that keep one), with our kernel's checkpoint directory,
        and its imports done."""
        extra = (
            [f"--CheckpointSettings.directory={self.info.checkpoint_dir}"]
            if self.info.ours and self.info.checkpoint_dir
            else []
        )
        self.lifecycle.warm_spare(extra)
        if self.info.has(protocol.FEATURE_CHECKPOINT):
            self.lifecycle.prepare_spare(again=False)

    def checkpoint_saved(self, name: str | None = None) -> None:
        """A checkpoint was saved (`name`, if known, is remembered with where it went, for a restart to find):
        the spare imports its modules now, so a restore only binds names."""
        if name:
            self.saved = SavedCheckpoint(name, self.info.checkpoint_dir, self.info.host)
        if self.info.has(protocol.FEATURE_CHECKPOINT):
            self.lifecycle.prepare_spare(again=True)

    def _new_kernel_answers(self, seconds: float) -> bool:
        """A kernel other than the one we knew answers kernel_info within `seconds` (its owner restarted it)."""
        transport = self._transport()
        old_pid = self.info.pid
        deadline = time.monotonic() + seconds
        asked: set[str] = set()  # requests queued while no kernel listened are all answered by the next one
        while time.monotonic() < deadline:
            asked.add(transport.send("shell", "kernel_info_request", {}))
            until = time.monotonic() + 0.5
            while time.monotonic() < until:
                for channel, msg in transport.poll(0.1):
                    if (
                        channel != "shell"
                        or msg["parent_header"].get("msg_id") not in asked
                        or msg["msg_type"] != "kernel_info_reply"
                    ):
                        continue
                    if old_pid is None or new_kernel_pid(msg["content"]) != old_pid:
                        return True
        return False

    def shutdown(self, *, shutdown_connected: bool = False) -> None:
        """Stop the channels; shut down a kernel started here (a connected one only if asked).  Never raises."""
        self.transport = None
        waker, self._waker = self._waker, None
        if waker is not None:
            waker.close()
        self.lifecycle.shutdown(shutdown_connected=shutdown_connected)


def describe(link: KernelLink) -> dict[str, t.Any]:
    """The `kernel` field of a result: name, id, pid, ours."""
    return {"name": link.kernel_name, "id": link.kernel_id, "pid": link.info.pid, "ours": link.info.ours}
