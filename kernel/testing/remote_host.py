"""A second host for Enterprise Gateway's kernels: a network namespace with its own address, PIDs and sshd.

    with remote_host() as host:      # root only; Debian's openssh-server and iproute2
        host.address                 # 10.213.N.2, reached from here over a veth pair (10.213.N.1 on this side)

The "host" is a network namespace made here with a veth pair and a /30 of
its own, and an sshd started inside it in new PID and UTS namespaces
(`unshare --pid --fork --mount-proc --uts`), with a host key and a client
key made here (key-only login).  It shares this machine's filesystem (the
same Python and cancelkernel are there) but not its network, its loopback,
its host name or its PIDs: a pid a kernel there reports means nothing here,
and its ports are reached only at its own address.  Traffic goes only between the two ends of the veth
pair.  sshd is the PID namespace's first process, so stopping it stops every
process started there; the namespace (and with it the veth pair) is then
deleted, also when the test failed.  Namespaces left by a process that was
killed (`ckeg-PID-N`) are removed by the next one.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

from .servers import stop_process_group

SSHD = "/usr/sbin/sshd"
PREFIX = "ckeg-"
SUBNET = "10.213"
START_TIMEOUT = 30.0
TOOLS = ("ip", "unshare", "ssh", "ssh-keygen")
ENTER = ("ip", "netns", "exec")
UNSHARE = ("unshare", "--pid", "--fork", "--mount-proc", "--uts")


class RemoteHostError(RuntimeError):
    """The namespace or its sshd could not be made (not root, a tool missing)."""


@dataclass
class RemoteHost:
    """A running "host": its namespace, address, the client side's HOME (.ssh/id_ed25519, known_hosts)."""

    namespace: str
    hostname: str
    address: str
    local_address: str  # this side of the veth pair: what the host reaches this machine at
    home: str
    sshd: subprocess.Popen
    log_path: str

    @property
    def key(self) -> str:
        return os.path.join(self.home, ".ssh", "id_ed25519")

    def ssh(self, command: str, *, timeout: float = 30.0) -> subprocess.CompletedProcess:
        """`command` run on the host over SSH (inside its PID namespace), as root."""
        return subprocess.run(
            [
                "ssh",
                "-F",
                "/dev/null",
                "-i",
                self.key,
                "-o",
                f"UserKnownHostsFile={os.path.join(self.home, '.ssh', 'known_hosts')}",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "BatchMode=yes",
                f"root@{self.address}",
                command,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def pids(self) -> list[int]:
        """This machine's pids of the processes in the host's network namespace (sshd and what it started)."""
        done = subprocess.run(["ip", "netns", "pids", self.namespace], capture_output=True, text=True, check=False)
        return [int(p) for p in done.stdout.split()]

    def processes_mentioning(self, text: str) -> list[int]:
        """Pids (this machine's) of the host's processes whose command line contains `text`."""
        found = []
        for pid in self.pids():
            with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(pid)
        return found

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError), open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
        return ""


def check_can_make() -> None:
    """RemoteHostError saying what is missing, before anything is made."""
    if os.geteuid() != 0:
        raise RemoteHostError("a network namespace needs root (CI runs as root)")
    missing = [tool for tool in TOOLS if shutil.which(tool) is None] + ([] if os.path.exists(SSHD) else [SSHD])
    if missing:
        raise RemoteHostError(
            f"missing {', '.join(missing)}: apt-get install openssh-server openssh-client iproute2 util-linux"
        )


@contextlib.contextmanager
def remote_host() -> Iterator[RemoteHost]:
    """A namespace with a veth pair, its addresses and a running sshd; all of it removed after."""
    check_can_make()
    remove_stale()
    scratch = tempfile.mkdtemp(prefix="cancelkernel-host-")
    os.chmod(scratch, 0o755)
    number = _free_subnet()
    namespace = f"{PREFIX}{os.getpid()}-{number}"
    host = f"{SUBNET}.{number}.2"
    local = f"{SUBNET}.{number}.1"
    hostname = f"{PREFIX}host-{number}"
    sshd: subprocess.Popen | None = None
    try:
        _network(namespace, number, local, host)
        home = _keys(scratch, host)
        config = _sshd_config(scratch, host)
        log_path = os.path.join(scratch, "sshd.log")
        with open(log_path, "wb") as log:
            # New PID and UTS namespaces too: the host's pids and its host name are its own.
            sshd = subprocess.Popen(
                [*ENTER, namespace, *UNSHARE, "/bin/sh", "-c", f"hostname {hostname} && exec {SSHD} -D -e -f {config}"],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        running = RemoteHost(namespace, hostname, host, local, home, sshd, log_path)
        _wait_login(running)
        yield running
    finally:
        if sshd is not None:
            _stop(sshd)
        _remove(namespace)
        shutil.rmtree(scratch, ignore_errors=True)


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RemoteHostError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")


def _free_subnet() -> int:
    """N of a 10.213.N.0/30 no interface here uses yet."""
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=False).stdout
    for number in random.sample(range(1, 255), 254):
        if f" {SUBNET}.{number}." not in used:
            return number
    raise RemoteHostError(f"every {SUBNET}.N.0/30 is in use")


def _network(namespace: str, number: int, local: str, host: str) -> None:
    outside, inside = f"{PREFIX}{number}a", f"{PREFIX}{number}b"
    _run("ip", "netns", "add", namespace)
    _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
    _run("ip", "link", "set", inside, "netns", namespace)
    _run("ip", "addr", "add", f"{local}/30", "dev", outside)
    _run("ip", "link", "set", outside, "up")
    _run("ip", "netns", "exec", namespace, "ip", "addr", "add", f"{host}/30", "dev", inside)
    _run("ip", "netns", "exec", namespace, "ip", "link", "set", inside, "up")
    _run("ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up")


def _keys(scratch: str, host: str) -> str:
    """The host key, a client key that the host authorizes, and a known_hosts that names the host: the client's HOME."""
    home = os.path.join(scratch, "home")
    ssh_dir = os.path.join(home, ".ssh")
    os.makedirs(ssh_dir, mode=0o700)
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "cancelkernel-test-host", "-f", f"{scratch}/host_key")
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "cancelkernel-test-client", "-f", f"{ssh_dir}/id_ed25519")
    shutil.copy(f"{ssh_dir}/id_ed25519.pub", f"{scratch}/authorized_keys")
    with open(f"{scratch}/host_key.pub") as f:
        kind, key = f.read().split()[:2]
    with open(f"{ssh_dir}/known_hosts", "w") as f:
        f.write(f"{host} {kind} {key}\n")
    return home


def _sshd_config(scratch: str, host: str) -> str:
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    path = os.path.join(scratch, "sshd_config")
    with open(path, "w") as f:
        f.write(
            f"ListenAddress {host}\n"
            "Port 22\n"
            f"HostKey {scratch}/host_key\n"
            f"PidFile {scratch}/sshd.pid\n"
            f"AuthorizedKeysFile {scratch}/authorized_keys\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\n"
            "AllowUsers root\n"
            "UsePAM no\n"
            "StrictModes no\n"
            "PrintMotd no\n"
            "LogLevel VERBOSE\n"
        )
    return path


def _wait_login(host: RemoteHost) -> None:
    """Until a key login over SSH works (the port answering is not enough: the key must be accepted)."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if host.sshd.poll() is not None:
            raise RemoteHostError(f"sshd exited with {host.sshd.returncode}:\n{host.log_tail()}")
        with contextlib.suppress(OSError), socket.create_connection((host.address, 22), timeout=2):
            done = host.ssh("true")
            if done.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RemoteHostError(f"ssh to {host.address} failed: {done.stderr}\n{host.log_tail()}")
        if time.monotonic() > deadline:
            raise RemoteHostError(
                f"sshd at {host.address} did not answer within {START_TIMEOUT:g} s:\n{host.log_tail()}"
            )
        time.sleep(0.1)


def _stop(sshd: subprocess.Popen) -> None:
    """sshd is the PID namespace's first process: when it exits, the kernel kills every process left there."""
    stop_process_group(sshd)


def _remove(namespace: str) -> None:
    """Every process still in the namespace killed, then the namespace (and its veth pair) deleted."""
    done = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, check=False)
    for pid in done.stdout.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)


def remove_stale() -> None:
    """Namespaces named after a process that no longer runs (it was killed before its cleanup)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(PREFIX):
            continue
        owner = name[len(PREFIX) :].split("-")[0]
        if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
            _remove(name)
