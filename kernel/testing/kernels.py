"""Drive real kernels through jupyter_client: what the tests, the benchmarks and the demo share.

Every kernel started here is registered and shut down by whoever started it,
and `shutdown_all()` (called at exit, by `kernels_cleaned_up()`, and on
SIGTERM/SIGHUP inside it) kills whatever is left, process group included: no
kernel outlives the program that started it.  Our kernelspecs come from
`private_kernelspecs()`, which installs them into a temporary prefix visible
to this process only.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import time
import typing as t
from collections.abc import Iterator

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from .. import protocol
from ..kernelspec import install
from ..pids import forget_reused_group, kill_child_group

# Generous bounds: they only stop a broken kernel from hanging the caller.
START_TIMEOUT = 60.0
REPLY_TIMEOUT = 30.0
# The exec modes of our kernel.
MODES = list(protocol.EXEC_THREADS)

# -- kernelspecs ------------------------------------------------------------------------


@contextlib.contextmanager
def private_kernelspecs(**specs: dict) -> Iterator[str]:
    """Install our kernelspecs into a temporary prefix on JUPYTER_PATH; yields the prefix.

    `specs` maps a spec name to `kernelspec.install` options; default: "cancelkernel"
    (main mode) and "cancelkernel-worker".
    """
    prefix = tempfile.mkdtemp(prefix="cancelkernel-specs-")
    old = os.environ.get("JUPYTER_PATH")
    try:
        for name, options in (specs or {"cancelkernel": {}, "cancelkernel-worker": {"exec_thread": "worker"}}).items():
            install(prefix=prefix, name=name, **options)
        os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [os.path.join(prefix, "share", "jupyter"), old]))
        yield prefix
    finally:
        if old is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = old
        shutil.rmtree(prefix, ignore_errors=True)


# -- kernels ------------------------------------------------------------------------------

_live: list[KernelManager] = []  # every kernel started here and not yet shut down
# Their process groups (jupyter_client starts each kernel in a session of its own): pgid -> the kernel process
# that leads it, so a group is killed only while its number is still ours (pids.group_is_ours).
_groups: dict[int, subprocess.Popen] = {}


class Kernel:
    """A running kernel and a blocking client connected to it."""

    def __init__(
        self,
        kernel_name: str = "cancelkernel",
        *,
        label: str = "",
        extra_arguments: t.Sequence[str] = (),
        env: dict | None = None,
        output: t.Any = None,
    ):
        self.label = label or kernel_name
        self.kernel_name = kernel_name
        self.extra_arguments = list(extra_arguments)
        self.env = env
        self.output = output  # a file for the kernel's stdout/stderr (None: inherit ours)
        self.km: KernelManager | None = None
        self.kc: BlockingKernelClient | None = None
        self.kernel_info: dict = {}
        self.restarts = 0
        self._ipc_dir: str | None = None

    def start(self, timeout: float = START_TIMEOUT) -> Kernel:
        # IPC sockets in a directory of this kernel's own: TCP ports chosen here could be taken by another
        # process (a parallel test's kernel) before the kernel binds them, also across restart_kernel.
        self._ipc_dir = tempfile.mkdtemp(prefix="ck-ipc-")
        km = KernelManager(kernel_name=self.kernel_name, transport="ipc", ip=os.path.join(self._ipc_dir, "k"))
        kwargs: dict[str, t.Any] = {"extra_arguments": self.extra_arguments}
        if self.env is not None:
            kwargs["env"] = {**os.environ, **self.env}
        if self.output is not None:
            kwargs["stdout"] = kwargs["stderr"] = self.output  # kept by restart_kernel too
        _live.append(km)
        self.km = km
        km.start_kernel(**kwargs)
        _remember_pgid(km)
        self._connect(timeout)
        return self

    def _connect(self, timeout: float) -> None:
        assert self.km is not None
        if self.kc is not None:
            with contextlib.suppress(Exception):
                self.kc.stop_channels()
        kc = self.km.client()
        kc.start_channels()
        self.kc = kc
        kc.wait_for_ready(timeout=timeout)
        # wait_for_ready consumed the kernel_info_reply; ask again to keep its content.
        self.kernel_info = wait_reply(kc, kc.kernel_info(), timeout=timeout)["content"]
        drain_channel(kc.iopub_channel)

    def restart(self, timeout: float = START_TIMEOUT) -> None:
        """Kill the kernel (its whole process group) and start it again."""
        assert self.km is not None
        self.restarts += 1
        forget_reused_group(self.km)
        self.km.restart_kernel(now=True)
        _remember_pgid(self.km)
        self._connect(timeout)

    @property
    def pid(self) -> int | None:
        return getattr(getattr(self.km, "provisioner", None), "pid", None)

    def shutdown(self) -> None:
        if self.kc is not None:
            with contextlib.suppress(Exception):
                self.kc.stop_channels()
            self.kc = None
        if self.km is not None:
            _shutdown(self.km)
            self.km = None
        if self._ipc_dir is not None:
            shutil.rmtree(self._ipc_dir, ignore_errors=True)
            self._ipc_dir = None


@contextlib.contextmanager
def running_kernel(
    exec_thread: str | None = "main",
    *,
    kernel_name: str = "cancelkernel",
    extra_arguments: list[str] | None = None,
    env: dict | None = None,
) -> Iterator[tuple[KernelManager, BlockingKernelClient]]:
    """A real kernel that answers, always shut down; `exec_thread` applies to our kernels only."""
    args = list(extra_arguments or [])
    if exec_thread is not None and kernel_name.startswith("cancelkernel"):
        args.append(f"--CancelKernel.exec_thread={exec_thread}")
    kernel = Kernel(kernel_name, extra_arguments=args, env=env)
    try:
        kernel.start()
        assert kernel.km is not None
        assert kernel.kc is not None
        yield kernel.km, kernel.kc
    finally:
        kernel.shutdown()


def _remember_pgid(km: KernelManager) -> None:
    provisioner = getattr(km, "provisioner", None)
    pgid, process = getattr(provisioner, "pgid", None), getattr(provisioner, "process", None)
    if pgid and process is not None and pgid != os.getpgid(0):
        _groups[pgid] = process


def _shutdown(km: KernelManager) -> None:
    forget_reused_group(km)  # a kernel that died earlier: its number may be another process's by now
    with contextlib.suppress(Exception):
        if km.has_kernel:
            km.shutdown_kernel(now=True)  # SIGKILL to the kernel's process group
    with contextlib.suppress(Exception):
        if km.has_kernel:
            km.kill_kernel()  # type: ignore[attr-defined]  # jupyter_client's run_sync wrapper
    with contextlib.suppress(Exception):
        km.cleanup_resources()
    with contextlib.suppress(ValueError):
        _live.remove(km)


def shutdown_all() -> None:
    """Shut down every kernel started here, then SIGKILL any process left in their groups."""
    for km in list(_live):
        _shutdown(km)
    for pgid, process in list(_groups.items()):
        kill_child_group(process, pgid)
        _groups.pop(pgid, None)


atexit.register(shutdown_all)


def _terminate(signum: int, frame: t.Any) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def kernels_cleaned_up() -> Iterator[None]:
    """Run a body; whatever happens (error, Ctrl-C, SIGTERM), leave no kernel behind."""
    previous = {s: signal.signal(s, _terminate) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        # A second Ctrl-C must not interrupt the cleanup itself.
        old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            shutdown_all()
        finally:
            signal.signal(signal.SIGINT, old_int)
            for s, handler in previous.items():
                signal.signal(s, handler)


# -- messages -------------------------------------------------------------------------------


def send_execute(
    kc: BlockingKernelClient,
    code: str,
    *,
    metadata: dict | None = None,
    stop_on_error: bool = False,
    store_history: bool = True,
    subshell_id: str | None = None,
    allow_stdin: bool = False,
) -> str:
    """Send an execute_request (with request metadata, or to a subshell, which kc.execute cannot); return its msg_id."""
    content = {"code": code, "silent": False, "store_history": store_history, "user_expressions": {}}
    content.update(allow_stdin=allow_stdin, stop_on_error=stop_on_error)
    msg = kc.session.msg("execute_request", content, metadata=metadata or {})
    if subshell_id is not None:
        msg["header"]["subshell_id"] = subshell_id
    kc.shell_channel.send(msg)
    return str(msg["header"]["msg_id"])


def create_subshell(kc: BlockingKernelClient, timeout: float = REPLY_TIMEOUT) -> str:
    """A new subshell of the kernel (JEP 91); its subshell_id."""
    reply = control_request(kc, "create_subshell_request", timeout=timeout)["content"]
    if reply.get("status") != "ok":
        raise RuntimeError(f"create_subshell_request failed: {reply}")
    return str(reply["subshell_id"])


def wait_for(channel: t.Any, predicate: t.Callable[[dict], bool], timeout: float, what: str = "message") -> dict:
    """The first message on `channel` matching `predicate` (others are dropped); `_received` is its perf_counter."""
    deadline = time.perf_counter() + timeout
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            raise TimeoutError(f"no {what} within {timeout:g} s")
        try:
            msg = channel.get_msg(timeout=left)
        except queue.Empty:
            continue
        msg["_received"] = time.perf_counter()
        if predicate(msg):
            return t.cast(dict, msg)


def wait_reply(kc: BlockingKernelClient, msg_id: str, timeout: float = REPLY_TIMEOUT) -> dict:
    """The shell reply to `msg_id`."""
    return wait_for(
        kc.shell_channel, lambda m: m["parent_header"].get("msg_id") == msg_id, timeout, f"reply to {msg_id}"
    )


def wait_answering(kc: BlockingKernelClient, timeout: float = START_TIMEOUT) -> None:
    """Until a kernel_info_request is answered on shell and its status seen on iopub (both channels connected).

    For clients made from a connection file: jupyter_client's wait_for_ready
    has no process to watch for them and calls the kernel dead when no
    heartbeat came back within its first second (a loaded machine).
    """
    deadline = time.perf_counter() + timeout
    while not _kernel_info_answered(kc, max(0.1, min(2.0, deadline - time.perf_counter()))):
        if time.perf_counter() > deadline:
            raise TimeoutError(f"the kernel did not answer kernel_info on shell and iopub within {timeout:g} s")


def _kernel_info_answered(kc: BlockingKernelClient, seconds: float) -> bool:
    msg_id = kc.kernel_info()
    try:
        wait_reply(kc, msg_id, timeout=seconds)
        wait_for(kc.iopub_channel, lambda m: m["parent_header"].get("msg_id") == msg_id, seconds)
    except TimeoutError:
        return False
    return True


def execute(kc: BlockingKernelClient, code: str, *, timeout: float = REPLY_TIMEOUT, **kwargs: t.Any) -> dict:
    """Run code, return its execute_reply (collecting nothing else)."""
    return wait_reply(kc, kc.execute(code, **kwargs), timeout=timeout)


def wait_idle(kc: BlockingKernelClient, msg_id: str, timeout: float = REPLY_TIMEOUT) -> dict:
    """Wait for iopub `status: idle` of request `msg_id`."""
    return wait_for(
        kc.iopub_channel,
        lambda m: (
            m["msg_type"] == "status"
            and m["parent_header"].get("msg_id") == msg_id
            and m["content"].get("execution_state") == "idle"
        ),
        timeout,
        f"idle status for {msg_id}",
    )


def outputs(kc: BlockingKernelClient, msg_id: str, *, timeout: float = REPLY_TIMEOUT) -> list[dict]:
    """iopub messages of one request, until its idle status."""
    found: list[dict] = []

    def collect(msg: dict) -> bool:
        if msg["parent_header"].get("msg_id") != msg_id:
            return False
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return True
        found.append(msg)
        return False

    wait_for(kc.iopub_channel, collect, timeout, f"idle status for {msg_id}")
    return found


def run_cell(
    kc: BlockingKernelClient, code: str, *, metadata: dict | None = None, timeout: float = REPLY_TIMEOUT
) -> tuple[dict, list[dict]]:
    """Execute and collect (execute_reply, the request's iopub messages)."""
    msg_id = send_execute(kc, code, metadata=metadata)
    found = outputs(kc, msg_id, timeout=timeout)
    return wait_reply(kc, msg_id, timeout=timeout), found


def drain_channel(channel: t.Any) -> list[dict]:
    """Everything already waiting on one channel."""
    msgs = []
    while True:
        try:
            msgs.append(channel.get_msg(timeout=0))
        except queue.Empty:
            return msgs


def drain(kc: BlockingKernelClient) -> None:
    """Drop whatever earlier requests left on every channel (late iopub, stdin requests)."""
    for channel in (kc.iopub_channel, kc.shell_channel, kc.stdin_channel, kc.control_channel):
        drain_channel(channel)


def send_control(kc: BlockingKernelClient, msg_type: str, content: dict | None = None) -> tuple[str, float]:
    """Send a control request now; returns (msg_id, perf_counter just before the send)."""
    msg = kc.session.msg(msg_type, content or {})
    sent = time.perf_counter()
    kc.control_channel.send(msg)
    return str(msg["header"]["msg_id"]), sent


def control_request(
    kc: BlockingKernelClient, msg_type: str, content: dict | None = None, *, timeout: float = REPLY_TIMEOUT
) -> dict:
    """Send a request on the control channel and return its reply (TimeoutError if none)."""
    msg_id, _ = send_control(kc, msg_type, content)
    return wait_for(
        kc.control_channel, lambda m: m["parent_header"].get("msg_id") == msg_id, timeout, f"reply to {msg_type}"
    )


def interrupt(kc: BlockingKernelClient, target: str | None = None, *, timeout: float = REPLY_TIMEOUT) -> dict:
    """Send interrupt_request (targeted if `target`), return the interrupt_reply content."""
    reply = control_request(kc, protocol.INTERRUPT_REQUEST, {"target": target} if target else {}, timeout=timeout)
    return t.cast(dict, reply["content"])


def checkpoint_request(
    kc: BlockingKernelClient, action: str, name: str | None = None, *, timeout: float = 60.0
) -> dict:
    """Send checkpoint_request (save, restore, list, drop; docs/checkpoints.md) on shell;
    its reply content, once the kernel is idle."""
    msg = kc.session.msg("checkpoint_request", {"action": action, **({"name": name} if name is not None else {})})
    kc.shell_channel.send(msg)
    msg_id = str(msg["header"]["msg_id"])
    reply = wait_reply(kc, msg_id, timeout)
    if reply["msg_type"] != "checkpoint_reply":
        raise RuntimeError(f"a checkpoint_request was answered by {reply['msg_type']}: {reply['content']}")
    wait_idle(kc, msg_id, timeout)
    return t.cast(dict, reply["content"])


def restart(km: KernelManager, kc: BlockingKernelClient, *, now: bool = True, timeout: float = START_TIMEOUT) -> None:
    """Restart the kernel on the same connection file (`now`: SIGKILL, else a shutdown request), until it answers."""
    km.restart_kernel(now=now)
    kc.wait_for_ready(timeout=timeout)
