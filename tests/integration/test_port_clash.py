"""A port another process takes between the launcher choosing it and the kernel binding it
(jupyter_client chooses free ports, then lets them go).

The kernel says so with its own exit code, and the agent client launches it
again with new ports instead of failing the user's run.  The clash is made
real: a socket of this test listens on the port the launcher is given.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
from helpers import kernel_args
from jupyter_client.connect import LocalPortCache

from cancelkernel import protocol
from cancelkernel.agent import AgentKernel


@contextlib.contextmanager
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 that something else listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


@pytest.mark.parametrize("taken", ["shell_port", "iopub_port", "control_port"])
def test_the_kernel_exits_with_port_in_use(tmp_path, taken: str) -> None:
    """Whichever socket's bind fails, the kernel exits (a socket left open made zmq's context term wait forever)."""
    with taken_port() as port:
        free = LocalPortCache.instance()
        ports = {
            name: free.find_available_port("127.0.0.1")
            for name in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
            if name != taken
        }
        connection = {
            taken: port,
            **ports,
            "ip": "127.0.0.1",
            "transport": "tcp",
            "key": "k",
            "signature_scheme": "hmac-sha256",
        }
        path = tmp_path / "kernel.json"
        path.write_text(json.dumps(connection))
        kernel = subprocess.run(
            [sys.executable, "-m", "cancelkernel", "kernel", "-f", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert kernel.returncode == protocol.EXIT_PORT_IN_USE, kernel.stderr
    assert "start the kernel again with new ports" in kernel.stderr
    assert f":{port}" in kernel.stderr  # which port, in the kernel's own message


def test_the_agent_launches_again_with_new_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = LocalPortCache.instance()
    choose = cache.find_available_port
    with taken_port() as port:
        handed = []

        def first_the_taken_port(ip: str) -> int:
            # The first launch's shell port is the one this test holds: the race, made certain.
            if not handed:
                handed.append(port)
                return port
            return choose(ip)

        monkeypatch.setattr(cache, "find_available_port", first_the_taken_port)
        with AgentKernel("cancelkernel", spare=False, extra_arguments=kernel_args("cancelkernel")) as agent:
            result = agent.run("print(6 * 7)")
            pid = agent.pid
    assert handed == [port]
    assert result.status == "ok", result
    assert "42" in result.text
    assert pid is not None
    assert pid != os.getpid()
