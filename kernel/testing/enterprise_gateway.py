"""A real Jupyter Enterprise Gateway on loopback: its own venv, a random port and token, always stopped.

EG runs from its cached venv (gateway_env.py) with the kernelspecs written
here from a template (docs/enterprise-gateway/distributed/kernel.json): the
template's `python` becomes this interpreter (it has cancelkernel) and its
launcher path EG's `launch_ipykernel.py`, copied into the kernelspec as EG's
own kernelspecs carry it.  The DistributedProcessProxy starts kernels on
`remote_hosts`: on a local address it runs the launcher itself, on another
one over SSH (remote_host.py makes such a host).  When EG stops, every
kernel process it started is stopped too, found by the kernelspec path on
its command line.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
import typing as t
from collections.abc import Iterator
from dataclasses import dataclass

from .gateway_env import GatewayEnv
from .servers import Server, _serving, free_port

# The environment EG starts from: the distributed proxy exports all of it into the remote shell that starts a kernel.
KEPT_VARIABLES = ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONHASHSEED")
# Seconds EG waits for a launcher's connection info (its default, 30, is short on a busy 2-core machine).
LAUNCH_TIMEOUT = 120


@dataclass(frozen=True)
class KernelSpecChoice:
    """One kernelspec to write: its name, its interrupt_mode, extra env."""

    name: str
    interrupt_mode: str = "message"
    env: t.Mapping[str, str] | None = None


@dataclass
class Gateway:
    """A running EG: the server (url, token, log), its scratch dir, and the kernel logs' dir."""

    server: Server
    scratch: str
    kernel_logs: str

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def token(self) -> str:
        return self.server.token

    def kernel_ids(self) -> list[str]:
        status, body = self.server.request("GET", "/api/kernels", timeout=10)
        assert status == 200, (status, body)
        return [str(k["id"]) for k in body]

    def kernel_processes(self) -> list[int]:
        """Pids on this host whose command line names one of this gateway's kernelspecs (its kernels)."""
        return processes_mentioning(self.scratch)

    def log_tail(self, lines: int = 60) -> str:
        kernels = ""
        for name in sorted(os.listdir(self.kernel_logs)) if os.path.isdir(self.kernel_logs) else []:
            with contextlib.suppress(OSError), open(os.path.join(self.kernel_logs, name), errors="replace") as f:
                kernels += f"\n--- {name}\n" + "".join(f.readlines()[-20:])
        return self.server.log_tail(lines) + kernels


def write_kernelspecs(
    template: str, into: str, launcher: str, choices: t.Sequence[KernelSpecChoice], *, python: str = sys.executable
) -> str:
    """Kernelspecs made from `template` under `into`/kernels/NAME; `into` is what JUPYTER_PATH names."""
    with open(template) as f:
        spec = json.load(f)
    for choice in choices:
        directory = os.path.join(into, "kernels", choice.name)
        os.makedirs(os.path.join(directory, "scripts"), exist_ok=True)
        copied = shutil.copy(launcher, os.path.join(directory, "scripts", os.path.basename(launcher)))
        argv = [python, copied, *spec["argv"][2:]]
        written = {
            **spec,
            "argv": argv,
            "display_name": f"{spec['display_name']} [{choice.name}]",
            "interrupt_mode": choice.interrupt_mode,
            "env": {**spec.get("env", {}), **(choice.env or {})},
        }
        with open(os.path.join(directory, "kernel.json"), "w") as f:
            json.dump(written, f, indent=2)
    return into


@contextlib.contextmanager
def enterprise_gateway(
    env: GatewayEnv,
    template: str,
    kernelspecs: t.Sequence[KernelSpecChoice],
    *,
    remote_hosts: str = "127.0.0.1",
    response_ip: str = "127.0.0.1",
    home: str | None = None,
    extra_env: t.Mapping[str, str] | None = None,
) -> Iterator[Gateway]:
    """EG from `env`'s venv on 127.0.0.1 with `kernelspecs` made from `template`; stopped with its kernels after.

    remote_hosts: EG_REMOTE_HOSTS, where the distributed proxy starts kernels.
    response_ip: where launchers send their connection info back (an address they can reach).
    home: HOME of EG, whose .ssh (key, known_hosts) paramiko reads to reach the remote hosts.
    """
    token = secrets.token_hex(16)
    scratch = tempfile.mkdtemp(prefix="cancelkernel-eg-")
    kernel_logs = os.path.join(scratch, "kernel-logs")
    os.makedirs(kernel_logs)
    # Under the scratch dir, so every kernel's command line names it (the cleanup finds them by it).
    write_kernelspecs(template, scratch, env.launch_ipykernel, kernelspecs)
    inherit = {name: os.environ[name] for name in KEPT_VARIABLES if name in os.environ}
    settings = {
        "HOME": home or scratch,
        "JUPYTER_PATH": scratch,
        "EG_AUTH_TOKEN": token,
        # GET /api/kernels lists kernels: the cleanup finds every one (EG says 403 by default).
        "EG_LIST_KERNELS": "True",
        # The agent client starts kernels as EG's own user; EG refuses root by default and CI runs as root.
        "EG_UNAUTHORIZED_USERS": "nobody-is-refused",
        "EG_REMOTE_HOSTS": remote_hosts,
        "EG_RESPONSE_IP": response_ip,
        "EG_RESPONSE_PORT": str(free_port()),
        "EG_KERNEL_LOG_DIR": kernel_logs,
        "EG_KERNEL_LAUNCH_TIMEOUT": str(LAUNCH_TIMEOUT),
        **(extra_env or {}),
    }

    def command(port: int) -> list[str]:
        return [
            env.python,
            "-m",
            "enterprise_gateway",
            "--EnterpriseGatewayApp.ip=127.0.0.1",
            f"--EnterpriseGatewayApp.port={port}",
            "--EnterpriseGatewayApp.port_retries=0",
            "--log-level=DEBUG",
        ]

    try:
        with _serving(command, token, settings, "Enterprise Gateway", inherit=inherit) as server:
            yield Gateway(server, scratch, kernel_logs)
    finally:
        stop_processes(processes_mentioning(scratch))  # kernels EG left behind (it was killed, say)
        shutil.rmtree(scratch, ignore_errors=True)


def processes_mentioning(text: str) -> list[int]:
    """Pids of this host's processes whose command line contains `text` (this process excluded)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        with contextlib.suppress(OSError), open(f"/proc/{entry}/cmdline", "rb") as f:
            if text.encode() in f.read():
                found.append(int(entry))
    return found


def stop_processes(pids: t.Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
