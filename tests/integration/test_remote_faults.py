"""The agent client and a real Jupyter Server with a faulty network between them (issue 24, item 4).

The link is `cancelkernel.testing.faulty_link`, a TCP proxy on loopback: 50 ms
each way with 10 ms of jitter and 1 % of packets lost (each loss costs a
retransmission), connections cut, and the server behind it replaced by
another one.  Runaways are still interrupted through it; a cut in the middle
of a cell loses and repeats no output, and the next cell works; a link that
does not come back within the bound fails the cell with a clear error and
the client works again once it is back; a server restarted in the middle of
a cell gives `died` with the state restored where a checkpoint is reachable,
lost where not.  Every move is made on state (the cell printed N, a gate
file), never on a timer; the timeouts only stop a broken setup from hanging.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator

import pytest
from helpers import AGENT_GRACE

from cancelkernel.agent import AgentKernel, KernelStartError
from cancelkernel.kernelspec import install
from cancelkernel.testing import FileFlag, act_when, wait_until
from cancelkernel.testing.faulty_link import Faults, FaultyLink, faulty_link
from cancelkernel.testing.servers import Server, jupyter_server

FAULTS = Faults(delay=0.05, jitter=0.01, loss=0.01)
COUNT = "".join(f"{i}\n" for i in range(1, 21))


@pytest.fixture(scope="module")
def server(kernelspecs: str) -> Iterator[Server]:
    with jupyter_server() as running:
        yield running


@contextlib.contextmanager
def agent_through(
    link: FaultyLink, token: str, kernel_name: str = "cancelkernel", **kwargs: object
) -> Iterator[AgentKernel]:
    """An AgentKernel whose every byte crosses `link`; closed (its kernel deleted) even when the test fails."""
    kwargs.setdefault("interrupt_grace", AGENT_GRACE)
    ak = AgentKernel(kernel_name, server_url=link.url, token=token, **kwargs)  # type: ignore[arg-type]
    try:
        yield ak.start()
    finally:
        ak.close()


def printed(ak: AgentKernel) -> str:
    """What the running cell printed so far ("" when none runs)."""
    watch = ak.running
    outputs = list(watch.outputs) if watch is not None else []
    return "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")


def bound_reconnects(ak: AgentKernel, seconds: float) -> None:
    """How long the client waits for the link to come back (30 s by default), set for one test."""
    ak.link.lifecycle.reconnect_within = seconds  # type: ignore[attr-defined]
    ak.link.transport.reconnect_within = seconds  # type: ignore[union-attr]


def test_runaways_are_interrupted_through_a_slow_lossy_link(server: Server) -> None:
    with faulty_link(server.port, FAULTS) as link, agent_through(link, server.token, kernel_budgets=False) as ak:
        assert ak.run("x = 1\nprint(x)").text == "1\n"
        for runaway in ("while True:\n    pass", "import time\ntime.sleep(10**6)"):
            # The client's own budget trips: its interrupt crosses the link, and so does the reply.
            result = ak.run(runaway, wall_budget=1.0)
            assert result.status == "interrupted", result.summary()
            assert result.state == "suspect", result.summary()
            assert result.actions[0]["action"] == "interrupt", result.summary()
        running = ak.submit("import time\nprint('go', flush=True)\nwhile True:\n    time.sleep(0.01)")
        assert wait_until(lambda: running.watch.outputs, timeout=60)
        ak.interrupt()
        stopped = running.result(60)
        assert stopped.status == "interrupted", stopped.summary()
        assert stopped.reason == "manual", stopped.summary()
        assert ak.run("print(x)").text == "1\n"
        # The link's round trip was measured (the websocket's pings) and at least one way's delay shows in it.
        assert (ak.link.transport.round_trip.smoothed or 0) > FAULTS.delay  # type: ignore[union-attr]


def test_a_cut_in_the_middle_of_a_cell_loses_and_repeats_no_output(server: Server) -> None:
    gate = FileFlag("cut")
    # The cell stops at 7 until the cut is made: nothing is in flight when it comes, and 8..20 are
    # printed while the link is down (the server keeps them for the client's session and replays them).
    code = f"import time\nfor i in range(1, 21):\n    print(i, flush=True)\n    if i == 7:\n        {gate.wait_code}\n"
    with faulty_link(server.port, FAULTS) as link, agent_through(link, server.token) as ak:
        acted = act_when(lambda: "7\n" in printed(ak), lambda: (link.cut(3.0), gate.set()))
        result = ak.run(code, wall_budget=120)
        assert acted.wait(30), result.summary()
        assert result.status == "ok", result.summary()
        assert result.text == COUNT, result.summary()  # every output, once, in order
        (cut,) = link.cuts
        assert cut.connections_reset >= 1  # the websocket itself was cut, not only a REST call
        assert cut.ended is not None
        assert ak.link.transport.reconnects >= 1  # type: ignore[union-attr]
        assert ak.run("print('next')").text == "next\n"


def test_a_stall_in_the_middle_of_a_cell_is_waited_out(server: Server) -> None:
    """A partition TCP outlives (every byte held for 3 s, nothing closed): the cell's answer comes, whole."""
    gate = FileFlag("stall")
    code = f"for i in range(1, 21):\n    print(i, flush=True)\n    if i == 7:\n        {gate.wait_code}\n"
    with faulty_link(server.port, FAULTS) as link, agent_through(link, server.token) as ak:
        acted = act_when(lambda: "7\n" in printed(ak), lambda: (link.stall(3.0), gate.set()))
        result = ak.run(code, wall_budget=120)
        assert acted.wait(30), result.summary()
        assert result.status == "ok", result.summary()
        assert result.text == COUNT, result.summary()
        assert not link.cuts


def test_a_link_that_does_not_come_back_fails_the_cell_clearly_and_the_client_lives_on(server: Server) -> None:
    gate = FileFlag("down")
    with faulty_link(server.port, FAULTS) as link, agent_through(link, server.token) as ak:
        bound_reconnects(ak, 2.0)
        acted = act_when(lambda: "before\n" in printed(ak), lambda: link.cut(None))
        with pytest.raises(KernelStartError, match=r"could not be opened again within 2 s") as caught:
            ak.run(f"print('before', flush=True)\n{gate.wait_code}\nprint('after')", wall_budget=120)
        assert acted.wait(30)
        assert "the server or the network is down" in str(caught.value)
        assert "next call tries to reconnect" in str(caught.value)
        # Still down: the next cell says so as clearly (and is not run later behind the caller's back).
        with pytest.raises(KernelStartError, match=r"could not be opened again within 2 s"):
            ak.run("print('not run')")
        link.heal()
        gate.set()  # the first cell ends meanwhile; its last output goes to nobody
        back = ak.run("print('back')")
        assert back.status == "ok", back.summary()
        assert back.text == "back\n", back.summary()


def shared_checkpoints_spec(scratch: str) -> dict[str, str]:
    """A kernelspec whose kernels keep checkpoints in one directory, whichever server starts them:
    the environment for a server that offers it (its JUPYTER_PATH)."""
    prefix = os.path.join(scratch, "specs")
    install(
        prefix=prefix,
        name="cancelkernel-shared",
        extra_args=[f"--CheckpointSettings.directory={os.path.join(scratch, 'checkpoints')}"],
    )
    return {
        "JUPYTER_PATH": os.pathsep.join(
            filter(None, [os.path.join(prefix, "share", "jupyter"), os.environ.get("JUPYTER_PATH")])
        )
    }


@pytest.mark.parametrize("checkpoints", ["reachable", "per-kernel"])
def test_a_server_restarted_in_the_middle_of_a_cell(kernelspecs: str, tmp_path: object, checkpoints: str) -> None:
    reachable = checkpoints == "reachable"
    env = shared_checkpoints_spec(str(tmp_path)) if reachable else None
    name = "cancelkernel-shared" if reachable else "cancelkernel"
    token = secrets.token_hex(16)
    with contextlib.ExitStack() as stack:
        first = stack.enter_context(jupyter_server(token=token, env=env))
        link = stack.enter_context(faulty_link(first.port, FAULTS))
        ak = stack.enter_context(agent_through(link, token, name, checkpoint="after-ok"))
        bound_reconnects(ak, 120.0)  # the new server may take longer than 30 s to start on a loaded machine
        assert ak.run("x = 41").status == "ok"  # saved after it (after-ok)
        old_kernel = ak.link.kernel_id
        servers: list[Server] = []

        def restart_the_server() -> None:
            """What `systemctl restart` does: the server stops (its kernels with it), a new one starts at the same
            address (the client finds nobody there while it starts)."""
            first.stop()
            servers.append(stack.enter_context(jupyter_server(token=token, env=env)))  # stopped by the stack
            link.retarget(servers[0].port)

        acted = act_when(lambda: "started\n" in printed(ak), restart_the_server, timeout=60)
        result = ak.run("import time\nprint('started', flush=True)\ntime.sleep(600)", wall_budget=300)
        assert acted.wait(60), result.summary()
        assert result.status == "died", result.summary()
        assert "server" in (result.reason_text or ""), result.summary()
        assert result.state == ("restored" if reachable else "lost"), result.summary()
        if not reachable:
            assert result.lost_reason, result.summary()  # the saved checkpoint, and why the new kernel cannot see it
        assert result.text == "started\n", result.summary()
        assert ak.link.kernel_id != old_kernel
        assert ak.link.kernel_id in [k["id"] for k in servers[0].request("GET", "/api/kernels")[1]]
        assert ak.run("print(x)" if reachable else "print('alive')").text == ("41\n" if reachable else "alive\n")
