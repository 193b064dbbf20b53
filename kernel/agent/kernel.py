"""The link to one kernel: start or connect, send, receive, interrupt, restart, shut down.

Mechanism only, no policy: what to do when a cell runs away lives in policy.py.
It speaks the Jupyter protocol (plus our extensions, when the kernel
advertises them) and imports nothing of the kernel's internals.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import typing as t
from dataclasses import dataclass, field

import zmq
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from jupyter_client.manager import KernelManager

from cancelkernel import protocol

from .errors import BadInputError, KernelStartError

# How long an interrupt_request may go unanswered before the kernel counts as
# wedged (GIL held) and a local kernel gets SIGINT instead.
CONTROL_ANSWER = 0.2
# Seconds of continuous heartbeat silence before a connected (non-local) kernel counts as dead.
HEARTBEAT_DEAD = 3.0
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0", ""}


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
    raw: dict = field(default_factory=dict)

    @classmethod
    def from_reply(cls, content: dict) -> KernelInfo:
        ext = content.get(protocol.KEY) if protocol.FEATURE in (content.get("supported_features") or []) else None
        info = cls(
            implementation=str(content.get("implementation", "")),
            language=str((content.get("language_info") or {}).get("name", "")),
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
            info.pid = ext.get("pid") if isinstance(ext.get("pid"), int) else None
            info.dump_file = ext.get("dump_file") if isinstance(ext.get("dump_file"), str) else None
        return info

    def has(self, feature: str) -> bool:
        return self.ours and feature in self.features


@dataclass
class InterruptSent:
    """One interrupt decision and how it was delivered."""

    sent_at: float
    via: str  # "message", "signal", "message+signal", "none"
    reply: dict | None = None  # interrupt_reply content, when the control channel answered


class KernelLink:
    """One kernel, owned (started here) or connected (by connection file)."""

    def __init__(
        self,
        kernel_name: str | None = None,
        *,
        connection_file: str | os.PathLike | None = None,
        extra_arguments: list[str] | None = None,
        env: dict[str, str] | None = None,
        start_timeout: float = 60.0,
        owner_restart_wait: float = 5.0,
    ):
        if connection_file is not None:
            path = os.fspath(connection_file)
            if not os.path.isfile(path):
                raise BadInputError(
                    f"connection file {path!r} does not exist; pass the kernel's connection file "
                    f"(see `jupyter --runtime-dir`, or %connect_info in the kernel)"
                )
            self.connection_file: str | None = os.path.abspath(path)
            try:
                with open(path, encoding="utf-8") as f:
                    self._connection = json.load(f)
                if not isinstance(self._connection, dict) or "shell_port" not in self._connection:
                    raise ValueError("no shell_port")
            except (OSError, ValueError) as exc:
                raise BadInputError(f"connection file {path!r} is not a Jupyter connection file ({exc})") from exc
            self.kernel_name = kernel_name or str(self._connection.get("kernel_name") or "")
        else:
            self.connection_file = None
            self._connection = {}
            self.kernel_name = kernel_name or "cancelkernel"
        self.owned = connection_file is None
        self.extra_arguments = list(extra_arguments or [])
        self.env = env
        self.start_timeout = start_timeout
        self.owner_restart_wait = owner_restart_wait
        self.km: KernelManager | None = None
        self.kc: BlockingKernelClient | None = None
        self.info = KernelInfo()
        self.session_id = ""  # the running kernel's session: a "starting" status from another one means a new kernel
        self.restarts = 0
        self._control_replies: dict[str, dict] = {}
        self._spec_dir: str | None = None
        self._adopted: KernelManager | None = None
        self._hb_silent_since: float | None = None
        self._verified_pid: int | None = None

    # -- start / connect --

    @property
    def kernel_id(self) -> str:
        """A name for this kernel in logs: the connection file's base name."""
        cf = self.connection_file or (self.km.connection_file if self.km is not None else "")
        return os.path.splitext(os.path.basename(cf))[0] if cf else ""

    def start(self) -> None:
        try:
            if self.owned:
                self._start_owned()
            else:
                self._connect()
            self.wait_ready(self.start_timeout)
        except BaseException:
            self.shutdown()
            raise

    def _start_owned(self) -> None:
        km = KernelManager(kernel_name=self.kernel_name, kernel_spec_manager=self._spec_manager())
        km.shutdown_wait_time = 2.0
        kwargs: dict[str, t.Any] = {"extra_arguments": self.extra_arguments}
        if self.env is not None:
            kwargs["env"] = {**os.environ, **self.env}
        try:
            km.start_kernel(**kwargs)
        except NoSuchKernel as exc:
            raise KernelStartError(
                f"no kernelspec named {self.kernel_name!r}; see `jupyter kernelspec list` "
                f"(install ours with `cancelkernel install --user`)"
            ) from exc
        except Exception as exc:
            raise KernelStartError(f"could not start kernel {self.kernel_name!r}: {exc}") from exc
        self.km = km
        self.kc = km.client()
        self.kc.start_channels()

    def _spec_manager(self) -> KernelSpecManager:
        """The usual specs; our own kernels also work when no spec is installed (this interpreter runs them)."""
        ksm = KernelSpecManager()
        if not self.kernel_name.startswith("cancelkernel"):
            return ksm
        try:
            ksm.get_kernel_spec(self.kernel_name)
            return ksm
        except NoSuchKernel:
            pass
        modes = {"cancelkernel": "main", "cancelkernel-worker": "worker"}
        if self.kernel_name not in modes:
            return ksm
        self._spec_dir = tempfile.mkdtemp(prefix="cancelkernel-agent-spec-")
        spec_dir = os.path.join(self._spec_dir, self.kernel_name)
        os.makedirs(spec_dir)
        argv = [sys.executable, "-m", "cancelkernel", "kernel", "-f", "{connection_file}"]
        if modes[self.kernel_name] == "worker":
            argv.append("--CancelKernel.exec_thread=worker")
        with open(os.path.join(spec_dir, "kernel.json"), "w") as f:
            json.dump({"argv": argv, "display_name": self.kernel_name, "language": "python", "interrupt_mode": "message"}, f)
        return KernelSpecManager(kernel_dirs=[self._spec_dir])

    def _connect(self) -> None:
        kc = BlockingKernelClient(connection_file=self.connection_file)
        try:
            kc.load_connection_file()
        except Exception as exc:
            raise BadInputError(f"connection file {self.connection_file!r} could not be loaded: {exc}") from exc
        kc.start_channels()
        self.kc = kc

    def wait_ready(self, timeout: float) -> None:
        """kernel_info answered and iopub connected; raises KernelStartError when the kernel does not come up."""
        kc = self._client()
        deadline = time.monotonic() + timeout
        while True:
            msg_id = kc.kernel_info()
            sent = time.monotonic()
            while time.monotonic() - sent < 1.0:
                if not self.is_alive(for_start=True):
                    raise KernelStartError(self._died_text("while starting"))
                try:
                    msg = kc.shell_channel.get_msg(timeout=0.05)
                except Exception:  # queue.Empty
                    if time.monotonic() > deadline:
                        raise KernelStartError(
                            f"kernel {self.kernel_name!r} did not answer kernel_info within {timeout:g} s; "
                            f"check the kernel's log, or raise start_timeout"
                        ) from None
                    continue
                if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "kernel_info_reply":
                    if self._iopub_connected(kc):
                        self.info = KernelInfo.from_reply(msg["content"])
                        self.session_id = str(msg["header"].get("session", ""))
                        self._verify_pid()
                        self.flush()
                        return
                    break
            if time.monotonic() > deadline:
                raise KernelStartError(f"kernel {self.kernel_name!r} did not become ready within {timeout:g} s")

    @staticmethod
    def _iopub_connected(kc: BlockingKernelClient) -> bool:
        # The kernel_info request makes the kernel publish busy/idle: seeing any proves iopub is subscribed.
        try:
            kc.iopub_channel.get_msg(timeout=0.3)
        except Exception:
            return False
        return True

    def _client(self) -> BlockingKernelClient:
        if self.kc is None:
            raise KernelStartError("the kernel is not running; use AgentKernel as a context manager or call start()")
        return self.kc

    # -- liveness --

    def is_alive(self, *, for_start: bool = False) -> bool:
        """Is the kernel process there?  Owned: the process; connected: the heartbeat."""
        km = self._adopted or self.km
        if km is not None:
            return bool(km.is_alive())
        kc = self.kc
        if kc is None:
            return False
        if for_start:
            return True
        if self._verified_pid is not None:
            return process_running(self._verified_pid)  # authoritative on this host, no heartbeat delay
        if kc.hb_channel.is_beating():
            self._hb_silent_since = None
            return True
        # A missed heartbeat on a loaded machine is not a death: only a longer silence is.
        now = time.monotonic()
        if self._hb_silent_since is None:
            self._hb_silent_since = now
        return now - self._hb_silent_since < HEARTBEAT_DEAD

    def exit_code(self) -> int | None:
        km = self._adopted or self.km
        if km is None or km.provisioner is None:
            return None
        with contextlib.suppress(Exception):
            return km.provisioner.process.poll()  # type: ignore[attr-defined]
        return None

    def _died_text(self, when: str) -> str:
        return f"kernel {self.kernel_name!r} died {when}{describe_exit(self.exit_code())}"

    @property
    def local(self) -> bool:
        """Can this client signal the kernel process (started here, or its pid verified on this host)?"""
        if self.owned or self._adopted is not None:
            return True
        return self._verified_pid is not None and process_running(self._verified_pid)

    def _verify_pid(self) -> None:
        """Trust a connected kernel's advertised pid only if that process on this host runs our connection file.

        (A kernel in a container may forward its ports to localhost: its pid means nothing here.)
        """
        self._verified_pid = None
        pid = self.info.pid
        if self.owned or pid is None or str(self._connection.get("ip", "")) not in LOCAL_HOSTS or not self.connection_file:
            return
        if not process_running(pid):
            return
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
        except OSError:
            return
        if os.path.basename(self.connection_file) in cmdline:
            self._verified_pid = pid

    def signal(self, signum: int) -> bool:
        """Send a signal to the kernel process; False if it cannot be reached."""
        km = self._adopted or self.km
        try:
            if km is not None:
                km.signal_kernel(signum)
                return True
            if self.local and self.info.pid is not None:
                os.kill(self.info.pid, signum)
                return True
        except (OSError, RuntimeError):
            return False
        return False

    # -- messages --

    def execute(self, code: str, *, cell_id: str | None = None, metadata: dict | None = None) -> str:
        """Send an execute_request (stop_on_error off: one failing cell never aborts the next one)."""
        kc = self._client()
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
        msg = kc.session.msg("execute_request", content, metadata=meta)
        kc.shell_channel.send(msg)
        return str(msg["header"]["msg_id"])

    def poll(self, timeout: float) -> list[tuple[str, dict]]:
        """Messages ready on shell, iopub and control within `timeout` seconds, oldest first per channel."""
        kc = self._client()
        poller = zmq.Poller()
        channels = {"shell": kc.shell_channel, "iopub": kc.iopub_channel, "control": kc.control_channel}
        for ch in channels.values():
            poller.register(ch.socket, zmq.POLLIN)
        ready = dict(poller.poll(int(max(timeout, 0) * 1000)))
        out: list[tuple[str, dict]] = []
        for name, ch in channels.items():
            if ch.socket in ready:
                for _ in range(1000):  # bounded: a flood never starves the caller's checks
                    if not ch.socket.poll(0):
                        break
                    msg = ch._recv()
                    if name == "control":
                        self._keep_control(msg)
                    out.append((name, msg))
        return out

    def flush(self) -> None:
        """Drop every pending message (after a restart: nothing old may be mistaken for new)."""
        with contextlib.suppress(Exception):
            while self.poll(0):
                pass
        self._control_replies.clear()

    def control(self, msg_type: str, content: dict | None = None, *, timeout: float) -> dict | None:
        """A control request; its reply, or None if none came within `timeout` (wedged, or not understood)."""
        kc = self._client()
        msg = kc.session.msg(msg_type, content or {})
        kc.control_channel.send(msg)
        return self.wait_control(str(msg["header"]["msg_id"]), timeout)

    def _keep_control(self, msg: dict) -> None:
        # Late replies (an interrupt_reply after its wait ended) are kept for a while, never without bound.
        if len(self._control_replies) > 100:
            self._control_replies.pop(next(iter(self._control_replies)))
        self._control_replies[msg["parent_header"].get("msg_id", "")] = msg

    def wait_control(self, msg_id: str, timeout: float) -> dict | None:
        kc = self._client()
        deadline = time.monotonic() + timeout
        while msg_id not in self._control_replies:
            left = deadline - time.monotonic()
            if left <= 0 or not kc.control_channel.socket.poll(int(left * 1000)):
                if msg_id not in self._control_replies:
                    return None
                break
            self._keep_control(kc.control_channel._recv())
        return self._control_replies.pop(msg_id)

    def shell_request(self, msg_type: str, content: dict, *, timeout: float, reply_type: str) -> dict | None:
        """A shell request sent while no cell runs; its reply, or None after `timeout`."""
        kc = self._client()
        msg = kc.session.msg(msg_type, content)
        kc.shell_channel.send(msg)
        msg_id = msg["header"]["msg_id"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.is_alive():
                return None
            try:
                reply = kc.shell_channel.get_msg(timeout=0.1)
            except Exception:
                continue
            if reply["parent_header"].get("msg_id") == msg_id and reply["msg_type"] == reply_type:
                return reply
        return None

    def cancel_status(self, timeout: float = 0.3) -> dict | None:
        """Our kernel's cancel_status_reply content; None for stock kernels (they never answer) or when wedged."""
        if not self.info.ours:
            return None
        reply = self.control(protocol.CANCEL_STATUS_REQUEST, {}, timeout=timeout)
        return reply["content"] if reply is not None else None

    def interrupt(self, target: str | None, *, wedged: bool = False) -> InterruptSent:
        """Deliver ONE interrupt by the path that works.

        Our kernel: a targeted interrupt_request; if the control channel does
        not answer within CONTROL_ANSWER (the GIL is held), the same decision
        goes out as SIGINT to a local kernel, which our C handler turns into
        the native cancel flag.  Stock kernels: as their kernelspec says.
        """
        sent = time.monotonic()
        km = self._adopted or self.km
        if not self.info.ours and km is not None and self._interrupt_mode(km) == "signal":
            return InterruptSent(sent, "signal" if self.signal(signal.SIGINT) else "none")
        content = {"target": target} if self.info.ours and target else {}
        reply = self.control("interrupt_request", content, timeout=0.0 if wedged else CONTROL_ANSWER)
        if reply is not None:
            return InterruptSent(sent, "message", reply.get("content") or {})
        if self.local and self.signal(signal.SIGINT):
            return InterruptSent(sent, "message+signal")
        return InterruptSent(sent, "message")

    @staticmethod
    def _interrupt_mode(km: KernelManager) -> str:
        with contextlib.suppress(Exception):
            return str(km.kernel_spec.interrupt_mode) if km.kernel_spec else "signal"
        return "signal"

    # -- stacks when the kernel cannot answer --

    def read_dump(self, since: float) -> str:
        """The kernel's faulthandler dump file, if written after `since` (time.time()); it is rewritten per dump."""
        path = self.info.dump_file
        if not path:
            return ""
        try:
            if os.path.getmtime(path) < since:
                return ""
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read(1_000_000)
        except OSError:
            return ""

    # -- restart / shutdown --

    def restart(self, *, dead: bool = False) -> None:
        """A fresh kernel on the same connection (same ports and connection file, so checkpoints are found).

        dead: the kernel already died (or its owner replaced it): nothing to stop first.
        """
        self.restarts += 1
        km = self._adopted or self.km
        if km is not None:
            try:
                km.restart_kernel(now=True)
            except Exception as exc:
                raise KernelStartError(f"could not restart kernel {self.kernel_name!r}: {exc}") from exc
        else:
            self._restart_connected(dead)
        self.flush()
        self.wait_ready(self.start_timeout)

    def _restart_connected(self, dead: bool) -> None:
        """Kill a local kernel we do not own, then wait for its owner to restart it, else start it here."""
        old_pid = self.info.pid
        if dead:
            pass
        elif self.local and self._verified_pid is not None:
            with contextlib.suppress(OSError):
                os.kill(self._verified_pid, signal.SIGKILL)
            deadline = time.monotonic() + 5.0
            while process_running(self._verified_pid) and time.monotonic() < deadline:
                time.sleep(0.02)
        elif self.is_alive():
            raise KernelStartError(
                f"the kernel at {self.connection_file} does not respond and this client cannot stop it "
                f"(it is not a process on this host, or it did not say its pid); restart it from its owner "
                f"(e.g. the Jupyter server's restart button or REST API) and connect again"
            )
        deadline = time.monotonic() + self.owner_restart_wait
        kc = self._client()
        asked: set[str] = set()  # requests queued while no kernel listened are all answered by the next one
        while time.monotonic() < deadline:
            asked.add(kc.kernel_info())
            until = time.monotonic() + 0.5
            while time.monotonic() < until:
                try:
                    msg = kc.shell_channel.get_msg(timeout=0.1)
                except Exception:
                    continue
                if msg["parent_header"].get("msg_id") not in asked or msg["msg_type"] != "kernel_info_reply":
                    continue
                pid = (msg["content"].get(protocol.KEY) or {}).get("pid")
                if old_pid is None or pid != old_pid:
                    return  # the owner (e.g. a Jupyter server's restarter) brought it back
        if not self.kernel_name or str(self._connection.get("ip", "")) not in LOCAL_HOSTS:
            raise KernelStartError(
                f"the kernel at {self.connection_file} was stopped and nobody restarted it within "
                f"{self.owner_restart_wait:g} s; the connection file names no kernelspec to start it with. "
                f"Restart it from its owner (e.g. the Jupyter server) and connect again."
            )
        km = KernelManager(kernel_name=self.kernel_name, connection_file=self.connection_file, kernel_spec_manager=self._spec_manager())
        km.load_connection_file()
        km.cache_ports = False  # keep the connection file's ports: our client (and the kernel's other users) use them
        km.shutdown_wait_time = 2.0
        try:
            km.start_kernel(extra_arguments=self.extra_arguments)
        except Exception as exc:
            raise KernelStartError(f"could not start a new {self.kernel_name!r} kernel on {self.connection_file}: {exc}") from exc
        self._adopted = km

    @property
    def pid(self) -> int | None:
        if self.info.pid is not None:
            return self.info.pid
        km = self._adopted or self.km
        with contextlib.suppress(Exception):
            return int(km.provisioner.pid)  # type: ignore[union-attr]
        return None

    def shutdown(self, *, shutdown_connected: bool = False) -> None:
        """Stop the channels; shut down (then kill) a kernel started here.  Never raises.

        A connected kernel (and one started here to replace it) keeps running
        for its other users unless shutdown_connected.
        """
        if shutdown_connected and not self.owned and self.kc is not None:
            with contextlib.suppress(Exception):
                self.kc.shutdown()
                deadline = time.monotonic() + 5.0
                while time.monotonic() < deadline and self._connected_alive():
                    time.sleep(0.05)
            adopted = self._adopted
            if adopted is not None:
                with contextlib.suppress(Exception):
                    adopted.shutdown_kernel(now=not adopted.is_alive())
                if adopted.has_kernel:
                    with contextlib.suppress(Exception):
                        adopted.kill_kernel()
        kc, self.kc = self.kc, None
        if kc is not None:
            with contextlib.suppress(Exception):
                kc.stop_channels()
        km, self.km = self.km, None
        if km is not None:
            with contextlib.suppress(Exception):
                km.shutdown_kernel(now=not km.is_alive())
            if km.has_kernel:
                with contextlib.suppress(Exception):
                    km.kill_kernel()
            with contextlib.suppress(Exception):
                km.cleanup_resources()
        # An adopted kernel replaces one we were only connected to: it stays up for its users.
        self._adopted = None
        if self._spec_dir is not None:
            shutil.rmtree(self._spec_dir, ignore_errors=True)
            self._spec_dir = None


    def _connected_alive(self) -> bool:
        if self._adopted is not None:
            return bool(self._adopted.is_alive())
        return self.local


def process_running(pid: int) -> bool:
    """The process exists and is not a zombie (a dead child nobody reaped yet)."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True  # no /proc (macOS): trust kill(0)


def describe_exit(code: int | None) -> str:
    """' (killed by SIGKILL: ...)' from a process exit code."""
    if code is None:
        return ""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = {
            "SIGKILL": ": killed from outside, often by the out-of-memory killer",
            "SIGSEGV": ": a segmentation fault in native code",
            "SIGABRT": ": aborted by native code",
        }.get(name, "")
        return f" (killed by {name}{hint})"
    return f" (exit code {code})"
