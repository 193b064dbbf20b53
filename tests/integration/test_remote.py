"""The agent client through a real Jupyter Server and a real Kernel Gateway (loopback, random ports, tokens).

Every policy path remotely: interrupted, restarted (one C call holding the
GIL) with the checkpoint restored, died (os._exit), a retried runaway raising
RunawayCellError, and stock python3 (degraded); bad input: a wrong token, a
server that is down or not Jupyter, an unknown kernel id, a kernel deleted
mid-cell, a websocket dropped mid-cell; and the CLI with --server-url.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import threading
import time
from collections.abc import Iterator

import nbformat
import pytest
from helpers import AGENT_GRACE

from cancelkernel.agent import AgentKernel, BadInputError, KernelStartError, RunawayCellError
from cancelkernel.cli.agent_commands import exec_main, run_main
from cancelkernel.testing import act_when, wait_until
from cancelkernel.testing.servers import Server, free_port, jupyter_server, kernel_gateway, server_through_gateway

# websocket-client and jupyter_kernel_gateway come with the test extra: missing, these tests fail (never skip).


@pytest.fixture(scope="module")
def server(kernelspecs: str) -> Iterator[Server]:
    with jupyter_server() as running:
        yield running


@pytest.fixture(scope="module")
def gateway(kernelspecs: str) -> Iterator[Server]:
    with kernel_gateway() as running:
        yield running


@pytest.fixture(params=["server", "gateway"])
def remote(request: pytest.FixtureRequest, server: Server, gateway: Server) -> Server:
    return server if request.param == "server" else gateway


def remote_agent(where: Server, kernel_name: str = "cancelkernel", **kwargs: object) -> AgentKernel:
    kwargs.setdefault("interrupt_grace", AGENT_GRACE)
    return AgentKernel(kernel_name, server_url=where.url, token=where.token, **kwargs).start()  # type: ignore[arg-type]


def kernels_on(where: Server) -> list[str]:
    return [k["id"] for k in where.request("GET", "/api/kernels")[1]]


def test_every_policy_path_through_the_server(remote: Server) -> None:
    ak = remote_agent(remote, checkpoint="after-ok")
    try:
        assert ak.info.ours
        assert not ak.link.local
        assert ak.run("x = 41\nprint(x + 1)").text == "42\n"
        loop = ak.run("while True:\n    pass", wall_budget=0.5)
        assert loop.status == "interrupted"
        assert loop.state == "suspect"
        assert loop.stack
        wedged = ak.run("sum(range(10**12))", wall_budget=0.5)
        assert wedged.status == "restarted"
        assert wedged.state == "restored"
        assert "x" in wedged.restored
        assert any("remote" in note for note in wedged.notes)  # no dump file or SIGUSR1 across a server, and it says so
        assert ak.run("print(x)").text == "41\n"
        died = ak.run("import os\nos._exit(1)", wall_budget=20)
        assert died.status == "died", died.summary()
        assert died.state == "restored", died.summary()
        assert ak.run("print(x)").text == "41\n"
        first = ak.run("while True:\n    pass", wall_budget=0.5, cell_id="twice")
        assert first.status == "interrupted"
        with pytest.raises(RunawayCellError) as caught:
            ak.retry(first, "while True:\n    pass  # still wrong")
        assert [a.status for a in caught.value.attempts] == ["interrupted", "restarted"]
        kernel_id = ak.link.kernel_id
    finally:
        ak.close()
    assert kernel_id not in kernels_on(remote)  # a kernel started here is deleted by close()


def test_a_kernel_behind_a_server_in_gateway_mode(gateway: Server) -> None:
    with server_through_gateway(gateway) as proxy:
        ak = remote_agent(proxy)
        try:
            assert ak.run("y = 2\nprint(y * 21)").text == "42\n"
            assert ak.run("while True:\n    pass", wall_budget=0.5).status == "interrupted"
            assert ak.run("print(y)").text == "2\n"
        finally:
            ak.close()


def test_stock_python3_through_the_server_is_degraded_not_broken(server: Server) -> None:
    ak = remote_agent(server, "python3")
    try:
        assert not ak.info.ours
        loop = ak.run("while True:\n    pass", wall_budget=0.5)
        assert loop.status == "interrupted"
        wedged = ak.run("sum(range(10**12))", wall_budget=0.5)
        # No checkpoints on stock kernels
        assert wedged.status == "restarted"
        assert wedged.state == "lost"
        assert ak.run("print('alive')").text == "alive\n"
    finally:
        ak.close()


def test_adopting_a_running_kernel_leaves_it_running(server: Server) -> None:
    kernel_id = server.start_kernel("cancelkernel")
    try:
        with AgentKernel(server_url=server.url, token=server.token, kernel_id=kernel_id) as ak:
            assert ak.run("z = 3").status == "ok"
        assert kernel_id in kernels_on(server)
    finally:
        server.request("DELETE", f"/api/kernels/{kernel_id}")


def test_adopting_a_kernel_by_id_while_another_clients_cell_runs(server: Server) -> None:
    owner = remote_agent(server)
    try:
        running = owner.submit("import time  # the owner's\nwhile True:\n    time.sleep(0.01)", wall_budget=0)
        assert wait_until(lambda: running.watch.current_line(), timeout=30)  # the kernel runs the cell's own code
        with AgentKernel(server_url=server.url, token=server.token, kernel_id=owner.link.kernel_id) as ak:
            assert ak.info.busy, ak.info
            assert [e["msg_id"] for e in ak.info.executions] == [running.watch.msg_id], ak.info
            with pytest.raises(BadInputError, match="another client sent"):
                ak.run("z = 1")
            owner.interrupt()
            assert running.result(30).status == "interrupted"
            assert ak.run("z = 1\nprint(z)").text == "1\n"
    finally:
        owner.close()


def test_a_deleted_kernel_is_died_promptly(server: Server) -> None:
    ak = remote_agent(server)
    try:
        # Deleted once the cell's first output has arrived (it runs its own code), not after a guessed delay.
        acted = act_when(
            lambda: ak.running is not None and bool(ak.running.outputs),
            lambda: server.request("DELETE", f"/api/kernels/{ak.link.kernel_id}"),
        )
        started = time.monotonic()
        result = ak.run("import time\nprint('started', flush=True)\ntime.sleep(60)", wall_budget=120)
        assert acted.wait(30)
        assert result.status == "died"
        assert time.monotonic() - started < 15
        assert "shut down" in (result.reason_text or "") or "no longer" in (result.reason_text or ""), (
            result.reason_text
        )
        assert ak.run("print('new kernel')").text == "new kernel\n"
    finally:
        ak.close()


def test_a_dropped_websocket_loses_no_reply(server: Server) -> None:
    ak = remote_agent(server)
    try:
        transport = ak.link.transport
        # Dropped once the cell's first output has arrived (it then sleeps 1.5 s before its last line).
        acted = act_when(
            lambda: ak.running is not None and bool(ak.running.outputs),
            lambda: transport._ws.sock.shutdown(socket.SHUT_RDWR),
        )
        result = ak.run("import time\nprint('before', flush=True)\ntime.sleep(1.5)\nprint('after')", wall_budget=20)
        assert acted.wait(30), result.summary()
        assert result.status == "ok", result.summary()
        assert result.text == "before\nafter\n", result.summary()
        assert transport.reconnects >= 1
    finally:
        ak.close()


def test_bad_input_is_refused_before_anything_starts(server: Server, tmp_path: object) -> None:
    before = kernels_on(server)
    with pytest.raises(BadInputError, match="403"):
        AgentKernel(server_url=server.url, token="wrong").start()
    assert kernels_on(server) == before
    with pytest.raises(BadInputError, match="no kernel"):
        AgentKernel(server_url=server.url, token=server.token, kernel_id="no-such-kernel").start()
    with pytest.raises(KernelStartError, match="cannot reach"):
        AgentKernel(server_url=f"http://127.0.0.1:{free_port()}", token="x").start()
    with pytest.raises(KernelStartError, match="no kernelspec"):
        AgentKernel("no-such-spec", server_url=server.url, token=server.token).start()
    with pytest.raises(BadInputError, match="http"):
        AgentKernel(server_url="ftp://example", token="x")
    with not_jupyter() as url, pytest.raises(BadInputError, match="not answer like a Jupyter server"):
        AgentKernel(server_url=url, token="x").start()
    assert kernels_on(server) == before


class not_jupyter:
    """A plain HTTP server on loopback that answers every GET with a web page."""

    def __enter__(self) -> str:
        class Page(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the name http.server calls
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"<html>hello</html>")

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.HTTPServer(("127.0.0.1", 0), Page)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_the_command_line_through_the_server(
    server: Server, tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    assert exec_main(["-c", "print(6 * 7)", "--server-url", server.url, "--token", server.token]) == 0
    assert capsys.readouterr().out == "42\n"
    directory = str(tmp_path)
    sources = []
    for name in ("first", "second", "third"):
        nb = nbformat.v4.new_notebook()
        nb.cells = [
            nbformat.v4.new_code_cell(f"name = {name!r}"),
            nbformat.v4.new_code_cell("while True:\n    pass"),
            nbformat.v4.new_code_cell("print(name)"),
        ]
        path = os.path.join(directory, f"{name}.ipynb")
        nbformat.write(nb, path)
        sources.append(path)
    out, logs = os.path.join(directory, "out"), os.path.join(directory, "logs")
    os.environ["JUPYTER_TOKEN"] = server.token
    try:
        code = run_main(
            [
                *sources,
                "--server-url",
                server.url,
                "--jobs",
                "3",
                "-o",
                out,
                "--log",
                logs,
                "--wall-budget",
                "1",
                "--allow-errors",
            ]
        )
    finally:
        del os.environ["JUPYTER_TOKEN"]
    err = capsys.readouterr().err
    assert code == 1  # each has a runaway cell
    assert all(f"[{n}.ipynb" in err for n in ("first", "second", "third"))  # progress lines carry the notebook
    # The summary table
    assert "interventions" in err
    assert "notebook" in err
    for name in ("first", "second", "third"):
        done = nbformat.read(os.path.join(out, f"{name}.ipynb"), as_version=4)
        assert done.cells[2].outputs[0]["text"] == f"{name}\n"
        with open(os.path.join(logs, f"{name}.jsonl")) as f:
            records = [json.loads(line) for line in f]
        assert [r["action"] for r in records] == ["interrupt"]
    assert run_main([*sources, "--jobs", "0"]) == 2
    assert "--jobs must be 1 or more" in capsys.readouterr().err
