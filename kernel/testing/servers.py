"""A real `jupyter server` (or kernel gateway) on loopback: random port, a token, always stopped.

Used by the tests and the benchmarks that go through Jupyter Server's REST API
(JupyterLab's interrupt button is `POST /api/kernels/{id}/interrupt`).  Each
server gets its own runtime directory, so the connection files of its
kernels can be read by a test that wants to talk to a kernel directly.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import typing as t
from collections.abc import Iterator
from dataclasses import dataclass

from jupyter_client.blocking.client import BlockingKernelClient

from ..agent.lifecycle.rest import RestClient
from .kernels import wait_answering

START_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A running server: where it is, its token, its runtime dir (the kernels' connection files)."""

    url: str
    token: str
    runtime_dir: str
    log_path: str
    process: subprocess.Popen

    def request(self, method: str, path: str, body: object = None, *, timeout: float = 30.0) -> tuple[int, t.Any]:
        """(HTTP status, the JSON body or None) of one REST call with the token."""
        return RestClient(self.url, self.token).request(method, path, body, timeout=timeout)

    def websocket_url(self, path: str) -> str:
        return RestClient(self.url, self.token).websocket_url(path)

    def start_kernel(self, name: str = "cancelkernel") -> str:
        status, body = self.request("POST", "/api/kernels", {"name": name})
        assert status == 201, (status, body, self.log_tail())
        return str(body["id"])

    def client(self, kernel_id: str, timeout: float = START_TIMEOUT) -> BlockingKernelClient:
        """A direct ZeroMQ client of one of the server's kernels (through its connection file)."""
        path = os.path.join(self.runtime_dir, f"kernel-{kernel_id}.json")
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            assert time.monotonic() < deadline, f"no connection file {path}"
            time.sleep(0.05)
        kc = BlockingKernelClient(connection_file=path)
        kc.load_connection_file()
        kc.start_channels()
        wait_answering(kc, timeout)
        return kc

    def interrupt(self, kernel_id: str) -> int:
        """What JupyterLab's interrupt button does; the HTTP status."""
        return self.request("POST", f"/api/kernels/{kernel_id}/interrupt")[0]

    def execution_state(self, kernel_id: str) -> str:
        status, body = self.request("GET", f"/api/kernels/{kernel_id}")
        assert status == 200, (status, body)
        return str(body["execution_state"])

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def stop(self, timeout: float = 60.0) -> int | None:
        """What a service manager's stop does: SIGTERM to the server, which shuts its kernels down and exits;
        its exit code (SIGKILL to its process group after `timeout`, None then)."""
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
            return None

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError), open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
        return ""


@contextlib.contextmanager
def jupyter_server(
    *, argv: list[str] | None = None, env: dict[str, str] | None = None, token: str | None = None
) -> Iterator[Server]:
    """`python -m jupyter_server` on 127.0.0.1, a random port and token (or `token`: a server that replaces
    another one); stopped (process group) after."""
    token = token or secrets.token_hex(16)
    root = tempfile.mkdtemp(prefix="cancelkernel-root-")

    def command(port: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "jupyter_server",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            "--ServerApp.open_browser=False",
            f"--ServerApp.root_dir={root}",
            *(["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),
            *(argv or []),
        ]

    try:
        with _serving(command, token, env, "jupyter server") as server:
            yield server
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def kernel_gateway(*, argv: list[str] | None = None, env: dict[str, str] | None = None) -> Iterator[Server]:
    """`python -m kernel_gateway` (Jupyter Kernel Gateway) on 127.0.0.1, a random port and token; stopped after."""
    token = secrets.token_hex(16)

    def command(port: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "kernel_gateway",
            "--KernelGatewayApp.ip=127.0.0.1",
            f"--KernelGatewayApp.port={port}",
            "--KernelGatewayApp.port_retries=0",
            f"--KernelGatewayApp.auth_token={token}",
            *(argv or []),
        ]

    # Listing kernels (off by default in the gateway) lets the cleanup find every kernel it started.
    with _serving(command, token, {"KG_LIST_KERNELS": "True", **(env or {})}, "kernel gateway") as server:
        yield server


@contextlib.contextmanager
def server_through_gateway(gateway: Server) -> Iterator[Server]:
    """A Jupyter Server in gateway mode (`--gateway-url`): its kernels run in `gateway`."""
    with jupyter_server(argv=[f"--gateway-url={gateway.url}", f"--GatewayClient.auth_token={gateway.token}"]) as server:
        yield server


# Tries of a server whose free port another process took before it bound it.
START_ATTEMPTS = 3


@contextlib.contextmanager
def _serving(
    command: t.Callable[[int], list[str]],
    token: str,
    env: dict[str, str] | None,
    what: str,
    *,
    inherit: t.Mapping[str, str] | None = None,
) -> Iterator[Server]:
    """Start `command(port)`, wait until GET /api answers, and stop it (its kernels first) whatever happens.

    inherit: the environment the server starts from (default: this process's), before `env`.
    """
    scratch = tempfile.mkdtemp(prefix="cancelkernel-server-")
    runtime_dir = os.path.join(scratch, "runtime")
    os.makedirs(runtime_dir)
    log_path = os.path.join(scratch, "server.log")
    environment = {**(os.environ if inherit is None else inherit), "JUPYTER_RUNTIME_DIR": runtime_dir, **(env or {})}
    server: Server | None = None
    try:
        with open(log_path, "wb") as log:
            for attempt in range(1, START_ATTEMPTS + 1):
                port = free_port()
                process = subprocess.Popen(
                    command(port), stdout=log, stderr=subprocess.STDOUT, env=environment, start_new_session=True
                )
                server = Server(f"http://127.0.0.1:{port}", token, runtime_dir, log_path, process)
                if _answers(server, what, last_try=attempt == START_ATTEMPTS):
                    break
            assert server is not None
            yield server
    finally:
        if server is not None:
            _stop(server)
        shutil.rmtree(scratch, ignore_errors=True)


def _stop(server: Server) -> None:
    """The server's kernels, then the server (its process group)."""
    process = server.process
    with contextlib.suppress(Exception):  # the server's kernels first: they live in process groups of their own
        for kernel in server.request("GET", "/api/kernels", timeout=5)[1] or []:
            server.request("DELETE", f"/api/kernels/{kernel['id']}", timeout=15)
    stop_process_group(process)


def stop_process_group(process: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM to `process`'s group (it leads one), SIGKILL if it is still there after `grace` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(grace)


def _answers(server: Server, what: str, *, last_try: bool) -> bool:
    """Wait until the server answers: True; False when its port was taken first (and this is not the last try)."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if server.process.poll() is not None:
            if not last_try and "already in use" in server.log_tail():
                return False
            raise RuntimeError(
                f"{what} exited with {server.process.returncode} before it answered:\n{server.log_tail()}"
            )
        with contextlib.suppress(OSError):
            if (
                server.request("GET", "/api", timeout=2)[0] == 200
                and server.request("GET", "/api/kernels", timeout=2)[0] == 200
            ):
                return True
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not answer within {START_TIMEOUT:g} s:\n{server.log_tail()}")
        time.sleep(0.1)
