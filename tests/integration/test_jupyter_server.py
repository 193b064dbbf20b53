"""Through a real `jupyter server`: JupyterLab's interrupt button (REST) and the server's view of busy/idle.

The server runs on loopback with a random port and a token, started and
stopped by the test; its kernels' connection files let the test run cells
directly, while interrupts go through `POST /api/kernels/{id}/interrupt`,
exactly what JupyterLab's toolbar sends (no target).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from helpers import value_of

from cancelkernel.testing import (
    MODES,
    FileFlag,
    dump_file_of,
    execute,
    send_execute,
    wait_awaiting,
    wait_dumped_in_cell,
    wait_reply,
    wait_running,
)
from cancelkernel.testing.servers import Server, jupyter_server

# (what, the cell, whether the kernel stops it in main mode, in worker mode); the cell's last line is the runaway.
RUNAWAYS = [
    ("Python loop", "while True:\n    pass", True, True),
    ("time.sleep", "import time\ntime.sleep(10**6)", True, True),
    ("Event.wait", "import threading\nthreading.Event().wait()", True, True),  # worker: a cooperative wait
    # Worker: abandoned and replaced
    ("lock acquired twice", "import threading\nlk = threading.Lock(); lk.acquire()\nlk.acquire()", True, True),
    ("await", "import asyncio\nawait asyncio.sleep(10**6)", True, True),
    ("GIL-held cooperative Cython loop", "montecarlo.pi_gil(10**15)", True, True),
    # One C call that holds the GIL and checks only main-thread signals: out of reach in worker mode (documented).
    ("regex", "import re\npat = re.compile(r'(a+)+$'); s = 'a' * 40 + 'b'\npat.match(s)", True, False),
]
# Where a status sees the Python loop: its back jump, on the `while` line.
AT = {"Python loop": "while True:"}


@pytest.fixture(scope="module")
def server(kernelspecs: str) -> Iterator[Server]:
    with jupyter_server() as running:
        yield running


def kernel_in(server: Server, mode: str, example_dir: str):
    name = "cancelkernel" if mode == "main" else "cancelkernel-worker"
    kernel_id = server.start_kernel(name)
    kc = server.client(kernel_id)
    setup = f"import sys; sys.path.insert(0, {example_dir!r})\nimport montecarlo\nkept = 'state'"
    assert execute(kc, setup)["content"]["status"] == "ok"
    # The server follows the kernel's state from its own iopub subscription, which may join after the setup's
    # busy/idle on a loaded machine (ZeroMQ's slow joiner): a cell more until it has seen one.
    deadline = time.monotonic() + 60
    while server.execution_state(kernel_id) != "idle":
        assert time.monotonic() < deadline, (
            f"the server never saw the kernel's status: {server.execution_state(kernel_id)}"
        )
        assert execute(kc, "pass")["content"]["status"] == "ok"
    return kernel_id, kc


def started(kc, what: str, code: str, stoppable: bool) -> str:
    """Send the cell; return its msg_id once the kernel's state shows it in its runaway line."""
    lines = code.splitlines()
    if not stoppable:
        # One C call that holds the GIL: nothing answers a status request.  A wall budget arms the
        # kernel's dead man's switch, whose dump shows the cell in the call.  The budget cannot interrupt
        # it once the call holds the GIL; long enough not to interrupt the setup line before it either.
        dump_file = dump_file_of(kc)
        msg_id = send_execute(kc, code, metadata={"cancelkernel": {"wall_budget": 1.0}})
        wait_dumped_in_cell(dump_file, len(lines))
        return msg_id
    if lines[-1].startswith("await "):
        marker = FileFlag("awaiting")
        msg_id = send_execute(kc, "\n".join([*lines[:-1], marker.set_code, lines[-1]]))
        marker.wait()
        wait_awaiting(kc, msg_id)  # the loop is back in its selector after the marker: the cell waits in the await
        return msg_id
    msg_id = send_execute(kc, code)
    # Status requests are answered even by a GIL-holding cell that checks signals (the kernel's GIL yield).
    wait_running(kc, msg_id, at=AT.get(what, lines[-1]))
    return msg_id


@pytest.mark.parametrize("mode", MODES)
def test_the_rest_interrupt_stops_the_runaway_set(server: Server, mode: str, example_dir: str) -> None:
    kernel_id, kc = kernel_in(server, mode, example_dir)
    try:
        for what, code, in_main, in_worker in RUNAWAYS:
            stoppable = in_main if mode == "main" else in_worker
            msg_id = started(kc, what, code, stoppable)
            assert server.interrupt(kernel_id) == 204
            if not stoppable:
                with pytest.raises(TimeoutError):
                    wait_reply(kc, msg_id, timeout=5)
                server.request("POST", f"/api/kernels/{kernel_id}/restart")
                kc.stop_channels()
                kc = server.client(kernel_id)
                assert (
                    execute(kc, f"import sys; sys.path.insert(0, {example_dir!r})\nimport montecarlo\nkept = 'state'")[
                        "content"
                    ]["status"]
                    == "ok"
                )
                continue
            reply = wait_reply(kc, msg_id, timeout=10)
            assert reply["content"]["status"] == "error", (what, reply["content"])
            assert reply["content"]["ename"] in ("KeyboardInterrupt", "CancelledError"), (what, reply["content"])
            assert reply["metadata"]["cancelkernel"]["interrupted"] is True, what
            assert value_of(kc, "kept") == "'state'", what
    finally:
        kc.stop_channels()
        server.request("DELETE", f"/api/kernels/{kernel_id}")


def test_polling_our_status_leaves_the_server_busy(server: Server, example_dir: str) -> None:
    kernel_id, kc = kernel_in(server, "main", example_dir)
    try:
        gate = FileFlag("go")  # the cell runs until the test has looked
        msg_id = send_execute(kc, gate.wait_code)
        wait_running(kc, msg_id)
        seen = []
        end = time.monotonic() + 4.0
        while time.monotonic() < end:  # the length of the look, not a guess at how long anything takes
            wait_running(kc, msg_id)  # a status request while the cell runs
            seen.append(server.execution_state(kernel_id))
            time.sleep(0.1)
        gate.set()
        assert set(seen) == {"busy"}, f"the server saw {sorted(set(seen))} while the cell ran"
        assert wait_reply(kc, msg_id, timeout=10)["content"]["status"] == "ok"
        deadline = time.monotonic() + 5
        while server.execution_state(kernel_id) != "idle":
            assert time.monotonic() < deadline, "the server never saw the kernel idle again"
            time.sleep(0.05)
    finally:
        kc.stop_channels()
        server.request("DELETE", f"/api/kernels/{kernel_id}")
