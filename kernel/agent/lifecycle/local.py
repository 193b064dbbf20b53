"""Kernels on this machine: started here (owned) or connected to by connection file.

Start, liveness, signals, restart and shutdown, through jupyter_client's
KernelManager.  No messages beyond the ones a restart needs to recognise the
new kernel, no policy.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import threading
import time
import typing as t

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from jupyter_client.manager import KernelManager

from ... import protocol
from ...kernelspec import OUR_KERNELS, private_spec_dir
from ...pids import forget_reused_group, process_running
from ..errors import BadInputError, KernelStartError
from ..processes import describe_exit, runs_connection_file
from ..threads import start_thread
from ..transport.zmq import ZmqTransport
from .spare import SpareKernel, kill_group, retire, stop_kernel

# Seconds of continuous heartbeat silence before a connected (non-local) kernel counts as dead.
HEARTBEAT_DEAD = 3.0
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0", ""}


class LocalLifecycle:
    """One kernel on this host, owned (started here) or connected (by connection file)."""

    def __init__(
        self,
        kernel_name: str | None = None,
        *,
        connection_file: str | os.PathLike | None = None,
        extra_arguments: list[str] | None = None,
        env: dict[str, str] | None = None,
        owner_restart_wait: float = 5.0,
        spare: bool = False,
        start_timeout: float = 60.0,
    ):
        if connection_file is not None:
            path = os.fspath(connection_file)
            self.connection_file: str | None = os.path.abspath(path)
            self._connection = _read_connection_file(path)
            self.kernel_name = kernel_name or str(self._connection.get("kernel_name") or "")
        else:
            self.connection_file = None
            self._connection = {}
            self.kernel_name = kernel_name or "cancelkernel"
        self.owned = connection_file is None
        self.extra_arguments = list(extra_arguments or [])
        self.env = env
        self.owner_restart_wait = owner_restart_wait
        self.km: KernelManager | None = None
        self._adopted: KernelManager | None = None  # started here to replace a connected kernel nobody restarted
        self._spec_dir: str | None = None
        self._hb_silent_since: float | None = None
        self.verified_pid: int | None = None
        self.transport: ZmqTransport | None = None
        self.keeps_spare = spare and self.owned  # a kernel we only connected to is its owner's to restart
        self.start_timeout = start_timeout
        self._spare: SpareKernel | None = None
        self._retiring: list[threading.Thread] = []  # old kernels being cleaned up after a swap
        self.last_restart: dict[str, t.Any] = {}
        self._first_id = ""

    @property
    def kernel_id(self) -> str:
        """A name for this kernel in logs: the first connection file's base name (a swapped-in spare keeps it)."""
        if not self._first_id:
            cf = self.connection_file or (self.km.connection_file if self.km is not None else "")
            self._first_id = os.path.splitext(os.path.basename(cf))[0] if cf else ""
        return self._first_id

    @property
    def manager(self) -> KernelManager | None:
        return self._adopted or self.km

    # -- start / connect --

    def start(self) -> ZmqTransport:
        if self.owned:
            client = self._start_owned()
        else:
            client = BlockingKernelClient(connection_file=self.connection_file)
            try:
                client.load_connection_file()
            except Exception as exc:
                raise BadInputError(f"connection file {self.connection_file!r} could not be loaded: {exc}") from exc
            client.start_channels()
        self.transport = ZmqTransport(client)
        return self.transport

    def _start_owned(self) -> BlockingKernelClient:
        self.km, client = self._launch(self.extra_arguments)
        return client

    def _launch(self, extra_arguments: list[str]) -> tuple[KernelManager, BlockingKernelClient]:
        """A new kernel process from the kernelspec, with its channels open (the first kernel and every spare)."""
        km = KernelManager(kernel_name=self.kernel_name, kernel_spec_manager=self._spec_manager())
        km.shutdown_wait_time = 2.0
        inherited = {k: v for k, v in os.environ.items() if k != protocol.KERNEL_ID_ENV}
        # Not the id of a gateway's kernel this process may run in: the kernel started here is another one, and
        # the id would give it that kernel's checkpoint directory.
        kwargs: dict[str, t.Any] = {"extra_arguments": extra_arguments, "env": {**inherited, **(self.env or {})}}
        try:
            km.start_kernel(**kwargs)
        except NoSuchKernel as exc:
            raise KernelStartError(
                f"no kernelspec named {self.kernel_name!r}; see `jupyter kernelspec list` "
                f"(install ours with `cancelkernel install --user`)"
            ) from exc
        except Exception as exc:
            raise KernelStartError(f"could not start kernel {self.kernel_name!r}: {exc}") from exc
        client = km.client()
        client.start_channels()
        return km, client

    # -- the warm spare --

    def warm_spare(self, extra_arguments: list[str]) -> None:
        """Start a spare in the background if this lifecycle keeps one and has none (or only a dead one)."""
        if not self.keeps_spare or self.km is None:
            return
        spare = self._spare
        if spare is not None and (not spare.ready or spare.alive()):
            return
        if spare is not None:
            spare.discard()  # died while idle: replaced, never used
        arguments = [*self.extra_arguments, *extra_arguments]
        self._spare = SpareKernel(lambda: self._launch(arguments), ready_timeout=self.start_timeout)

    @property
    def spare(self) -> SpareKernel | None:
        return self._spare

    def prepare_spare(self, *, again: bool) -> None:
        """Have the ready spare import the latest checkpoint's modules (once, or `again` after a new save)."""
        spare = self._spare
        if spare is not None and (again or not spare.prepare_requested):
            spare.request_prepare({"action": "prepare"})

    def _swap_in_spare(self) -> bool:
        """Kill the kernel's process group and put the spare in its place;
        False (with the reason noted) if there is no usable spare."""
        spare, self._spare = self._spare, None
        if spare is None:
            self.last_restart["note"] = "no spare kernel was running yet: restarted cold"
            return False
        taken = spare.take(wait=self.start_timeout)
        if taken is None:
            self.last_restart["note"] = f"the spare kernel could not be used ({spare.error}): restarted cold"
            return False
        old, old_transport = self.km, self.transport
        self._first_id = self.kernel_id  # fixed before the connection file changes
        if old is not None:
            kill_group(old)
        self.last_restart["old_gone"] = time.monotonic()
        self.km, client = taken
        self.transport = ZmqTransport(client)
        if old_transport is not None:
            old_transport.close()
        if old is not None:
            self._retiring.append(start_thread(retire, old, name="cancelkernel-retire"))
        self.last_restart["spare"] = True
        return True

    def _spec_manager(self) -> KernelSpecManager:
        """The usual specs; our own kernels also work when no spec is installed (this interpreter runs them)."""
        ksm = KernelSpecManager()
        if self.kernel_name not in OUR_KERNELS:
            return ksm
        try:
            ksm.get_kernel_spec(self.kernel_name)
            return ksm
        except NoSuchKernel:
            pass
        if self._spec_dir is None:
            self._spec_dir = private_spec_dir(self.kernel_name)
        return KernelSpecManager(kernel_dirs=[self._spec_dir])

    # -- liveness and signals --

    def is_alive(self, *, for_start: bool = False) -> bool:
        """Is the kernel process there?  Owned: the process; connected: its pid here, else the heartbeat."""
        km = self.manager
        if km is not None:
            return bool(km.is_alive())
        if self.transport is None:
            return False
        if for_start:
            return True
        if self.verified_pid is not None:
            return process_running(self.verified_pid)  # authoritative on this host, no heartbeat delay
        if self.transport.heartbeat():
            self._hb_silent_since = None
            return True
        # A missed heartbeat on a loaded machine is not a death: only a longer silence is.
        now = time.monotonic()
        if self._hb_silent_since is None:
            self._hb_silent_since = now
        return now - self._hb_silent_since < HEARTBEAT_DEAD

    def exit_code(self) -> int | None:
        km = self.manager
        if km is None or km.provisioner is None:
            return None
        with contextlib.suppress(Exception):
            return t.cast("int | None", km.provisioner.process.poll())  # type: ignore[attr-defined]
        return None

    def died_text(self, when: str) -> str:
        return f"kernel {self.kernel_name!r} died {when}{describe_exit(self.exit_code())}"

    def verify_pid(self, pid: int | None) -> None:
        """Trust a connected kernel's advertised pid only if that process on this host runs our connection file.

        (A kernel in a container may forward its ports to localhost: its pid means nothing here.)
        """
        self.verified_pid = None
        if self.owned or pid is None or not self.connection_file or not self._on_this_host():
            return
        if process_running(pid) and runs_connection_file(pid, self.connection_file):
            self.verified_pid = pid

    def _on_this_host(self) -> bool:
        """The connection file names this host: a loopback address, or IPC sockets (files here)."""
        connection = self._connection
        return connection.get("transport") == "ipc" or str(connection.get("ip", "")) in LOCAL_HOSTS

    @property
    def local(self) -> bool:
        """Can this client signal the kernel process (started here, or its pid verified on this host)?"""
        if self.owned or self._adopted is not None:
            return True
        return self.verified_pid is not None and process_running(self.verified_pid)

    def signal(self, signum: int, pid: int | None = None) -> bool:
        """Send a signal to the kernel process; False if it cannot be reached."""
        km = self.manager
        try:
            if km is not None:
                km.signal_kernel(signum)
                return True
            if self.local and pid is not None:
                os.kill(pid, signum)
                return True
        except (OSError, RuntimeError):
            return False
        return False

    def outside_interrupt(self, pid: int | None) -> str | None:
        """Interrupt without the control channel (it does not answer): SIGINT, for a kernel on this host."""
        return "signal" if self.local and self.signal(signal.SIGINT, pid) else None

    def interrupt_mode(self) -> str:
        """The kernelspec's interrupt_mode ('signal' when unknown, as jupyter_client assumes)."""
        km = self.manager
        with contextlib.suppress(Exception):
            return str(km.kernel_spec.interrupt_mode) if km is not None and km.kernel_spec else "signal"
        return "signal"

    @property
    def pid(self) -> int | None:
        km = self.manager
        with contextlib.suppress(Exception):
            return int(km.provisioner.pid)  # type: ignore[union-attr]
        return None

    # -- restart / shutdown --

    def restart(self, *, dead: bool, old_pid: int | None, wait_for_owner: t.Callable[[float], bool]) -> None:
        """A fresh kernel on the same connection (same ports and connection file, so checkpoints are found).

        dead: the kernel already died (or its owner replaced it): nothing to stop first.
        wait_for_owner(seconds): True when a new kernel answered on the connection within that time.
        """
        self.last_restart = {"spare": False}
        if self.keeps_spare and self.km is not None and self._swap_in_spare():
            return
        km = self.manager
        if km is not None:
            forget_reused_group(km)  # a kernel that died: its group's number may be another process's by now
            try:
                km.restart_kernel(now=True)
            except Exception as exc:
                raise KernelStartError(f"could not restart kernel {self.kernel_name!r}: {exc}") from exc
            self.last_restart["old_gone"] = time.monotonic()  # restart_kernel returns with the new process started
            return
        self._restart_connected(dead, wait_for_owner)

    def _restart_connected(self, dead: bool, wait_for_owner: t.Callable[[float], bool]) -> None:
        """Kill a local kernel we do not own, then wait for its owner to restart it, else start it here."""
        if dead:
            pass
        elif self.local and self.verified_pid is not None:
            with contextlib.suppress(OSError):
                os.kill(self.verified_pid, signal.SIGKILL)
            deadline = time.monotonic() + 5.0
            while process_running(self.verified_pid) and time.monotonic() < deadline:
                time.sleep(0.02)
        elif self.is_alive():
            raise KernelStartError(
                f"the kernel at {self.connection_file} does not respond and this client cannot stop it "
                f"(it is not a process on this host, or it did not say its pid); restart it from its owner "
                f"(e.g. the Jupyter server's restart button or REST API) and connect again"
            )
        if wait_for_owner(self.owner_restart_wait):
            return  # the owner (e.g. a Jupyter server's restarter) brought it back
        if not self.kernel_name or not self._on_this_host():
            raise KernelStartError(
                f"the kernel at {self.connection_file} was stopped and nobody restarted it within "
                f"{self.owner_restart_wait:g} s; the connection file names no kernelspec to start it with. "
                f"Restart it from its owner (e.g. the Jupyter server) and connect again."
            )
        km = KernelManager(
            kernel_name=self.kernel_name, connection_file=self.connection_file, kernel_spec_manager=self._spec_manager()
        )
        km.load_connection_file()
        km.cache_ports = False  # keep the connection file's ports: our client (and the kernel's other users) use them
        km.shutdown_wait_time = 2.0
        try:
            km.start_kernel(extra_arguments=self.extra_arguments)
        except Exception as exc:
            raise KernelStartError(
                f"could not start a new {self.kernel_name!r} kernel on {self.connection_file}: {exc}"
            ) from exc
        self._adopted = km

    def shutdown(self, *, shutdown_connected: bool = False) -> None:
        """Stop the channels; shut down (then kill) a kernel started here.  Never raises.

        A connected kernel (and one started here to replace it) keeps running
        for its other users unless shutdown_connected.
        """
        if shutdown_connected and not self.owned and self.transport is not None:
            with contextlib.suppress(Exception):
                self.transport.client.shutdown()
                deadline = time.monotonic() + 5.0
                while time.monotonic() < deadline and self._connected_alive():
                    time.sleep(0.05)
            if self._adopted is not None:
                stop_kernel(self._adopted)
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.discard()
        transport, self.transport = self.transport, None
        if transport is not None:
            transport.close()
        for reaper in self._retiring:
            reaper.join(10)
        self._retiring.clear()
        km, self.km = self.km, None
        if km is not None:
            stop_kernel(km)
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


def _read_connection_file(path: str) -> dict:
    if not os.path.isfile(path):
        raise BadInputError(
            f"connection file {path!r} does not exist; pass the kernel's connection file "
            f"(see `jupyter --runtime-dir`, or %connect_info in the kernel)"
        )
    try:
        with open(path, encoding="utf-8") as f:
            connection = json.load(f)
        if not isinstance(connection, dict) or "shell_port" not in connection:
            raise ValueError("no shell_port")
    except (OSError, ValueError) as exc:
        raise BadInputError(f"connection file {path!r} is not a Jupyter connection file ({exc})") from exc
    return connection


def new_kernel_pid(content: dict) -> int | None:
    """The pid our kernel advertises in a kernel_info_reply (None for stock kernels)."""
    pid = (content.get(protocol.KEY) or {}).get("pid")
    return pid if isinstance(pid, int) else None
