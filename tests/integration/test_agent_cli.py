"""`cancelkernel exec` / `cancelkernel run` (agent/cli.py), and connecting to a running kernel."""

from __future__ import annotations

import json
import os
from typing import Any

import nbformat
import pytest
from helpers import AGENT_GRACE, kernel_args, kernel_pid

from cancelkernel.agent import AgentKernel, read_log
from cancelkernel.cli.agent_commands import exec_main, run_main
from cancelkernel.testing import process_exited, running_kernel

pytestmark = pytest.mark.timeout(120)


def _notebook(path: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# a runaway in the middle"),
        nbformat.v4.new_code_cell("x = 20\nprint('x is', x)"),
        nbformat.v4.new_code_cell(
            "print('spinning', flush=True)\nwhile True:\n    pass", metadata={"tags": ["wall-budget=0.5"]}
        ),
        nbformat.v4.new_code_cell("print(x + 1)"),
        nbformat.v4.new_code_cell("sum(range(10**12))", metadata={"cancelkernel": {"wall_budget": 0.5}}),
        nbformat.v4.new_code_cell("print('after the restart')"),
    ]
    nbformat.write(nb, path)


def test_run_notebook_with_runaway_cells(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    src = os.path.join(str(tmp_path), "nb.ipynb")
    out = os.path.join(str(tmp_path), "out.ipynb")
    log = os.path.join(str(tmp_path), "agent.jsonl")
    _notebook(src)
    code = run_main([src, "-o", out, "--log", log, "--allow-errors", "--interrupt-grace", str(AGENT_GRACE)])
    assert code == 1  # runaway cells fail the run even with --allow-errors
    err = capsys.readouterr().err
    progress = [line for line in err.splitlines() if line.startswith("[")]
    assert len(progress) == 5
    assert progress[0].startswith("[1/5] cell 1: ok")
    assert progress[1].startswith("[2/5] cell 2: interrupted")
    assert progress[3].startswith("[4/5] cell 4: restarted")
    nb = nbformat.read(out, as_version=4)
    nbformat.validate(nb)
    runaway = nb.cells[2]
    texts = [o.get("text") or o.get("data", {}).get("text/plain", "") for o in runaway.outputs]
    assert "spinning\n" in texts
    assert any("cancelkernel agent: interrupted" in t for t in texts)
    assert runaway.metadata["cancelkernel"]["agent"]["status"] == "interrupted"
    assert nb.cells[3].outputs[0]["text"] == "21\n"
    report = nb.cells[4].outputs[-1]["data"]["text/plain"]
    assert "restarted" in report
    assert "sum(range(10**12))" in report
    assert nb.cells[5].outputs[0]["text"] == "after the restart\n"
    assert [r["action"] for r in read_log(log)] == ["interrupt", "interrupt", "restart"]
    assert read_log(log)[-1]["timings"]["spare"] is True  # three cells before the wedge: the warm spare was ready


def test_run_without_a_spare_restarts_cold(tmp_path: Any) -> None:
    src, log = os.path.join(str(tmp_path), "nb.ipynb"), os.path.join(str(tmp_path), "agent.jsonl")
    _notebook(src)
    assert (
        run_main([src, "-o", os.path.join(str(tmp_path), "out.ipynb"), "--log", log, "--allow-errors", "--no-spare"])
        == 1
    )
    restart = read_log(log)[-1]
    assert restart["action"] == "restart"
    assert restart["timings"]["spare"] is False


def test_run_keeps_the_checkpoints_under_the_root_it_is_given(tmp_path: Any) -> None:
    src, root = os.path.join(str(tmp_path), "nb.ipynb"), os.path.join(str(tmp_path), "shared")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("kept = 41"), nbformat.v4.new_code_cell("print(kept + 1)")]
    nbformat.write(nb, src)
    out = os.path.join(str(tmp_path), "out.ipynb")
    assert run_main([src, "-o", out, "--checkpoint", "after-ok", "--checkpoint-root", root, "--no-spare"]) == 0
    (kernel_dir,) = os.listdir(root)  # the one kernel's directory, its autosaved checkpoint in it
    assert os.path.isfile(os.path.join(root, kernel_dir, "default", "manifest.json"))
    assert run_main([src, "--checkpoint-root", root, "--server-url", "http://127.0.0.1:9"]) == 2  # the server decides


def test_run_notebook_stops_at_the_first_failure(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    src = os.path.join(str(tmp_path), "nb.ipynb")
    _notebook(src)
    assert run_main([src, "--interrupt-grace", str(AGENT_GRACE)]) == 1
    assert "stopped after cell 2" in capsys.readouterr().err
    nb = nbformat.read(os.path.join(str(tmp_path), "nb.executed.ipynb"), as_version=4)
    assert nb.cells[1].outputs
    assert nb.cells[2].outputs
    assert not nb.cells[3].outputs


def test_exec_prints_and_returns_the_status(capsys: pytest.CaptureFixture[str]) -> None:
    assert exec_main(["-c", "print('hi')\n6 * 7"]) == 0
    assert capsys.readouterr().out == "hi\n42\n"
    assert (
        exec_main(["-c", "import time\nprint('go', flush=True)\ntime.sleep(30)", "--wall-budget", "0.5", "--json"]) == 1
    )
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "interrupted"
    assert result["reason"] == "wall_budget"
    assert result["outputs"][0]["text"] == "go\n"


def test_exec_reads_a_file(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = os.path.join(str(tmp_path), "cell.py")
    with open(path, "w") as f:
        f.write("raise ValueError('nope')\n")
    assert exec_main([path, "--kernel", "python3"]) == 1
    assert "ValueError" in capsys.readouterr().err


def test_connect_to_a_running_kernel_and_restart_it(tmp_path: Any) -> None:
    """A kernel we did not start: interrupt it, and when it wedges, kill it and bring it back on the same connection."""
    with running_kernel("main", extra_arguments=kernel_args("cancelkernel")) as (km, _kc):
        ak = AgentKernel(connection_file=km.connection_file, owner_restart_wait=1.0)
        adopted_pid = None
        try:
            ak.start()
            assert ak.info.ours
            assert ak.link.local
            assert ak.run("y = 3\ny").text == "3\n"
            r = ak.run("while True:\n    pass", wall_budget=0.5)
            assert r.status == "interrupted"
            # The kernel's process is a child of this test process: a zombie after os._exit, still "dead".
            died = ak.run("import os\nos._exit(1)", wall_budget=10)
            assert died.status == "died", died.summary()
            adopted_pid = ak.pid
            assert adopted_pid != kernel_pid(km)
            wedged = ak.run("sum(range(10**12))", wall_budget=0.5)
            assert wedged.status == "restarted", wedged.summary()
            adopted_pid = ak.pid
            assert ak.run("print('back')").text == "back\n"
        finally:
            ak.close(shutdown=True)
        assert adopted_pid is None or process_exited(adopted_pid)


OWNER = r"""
import signal, sys, time
from jupyter_client.ioloop import IOLoopKernelManager
from tornado.ioloop import IOLoop

km = IOLoopKernelManager(kernel_name=sys.argv[1], autorestart=True)
km.start_kernel(extra_arguments=sys.argv[2:])
km.start_restarter()
print(km.connection_file, flush=True)
loop = IOLoop.current()

def stop(*_):
    km.stop_restarter()
    km.shutdown_kernel(now=True)
    loop.add_callback_from_signal(loop.stop)

signal.signal(signal.SIGTERM, stop)
loop.start()
"""


def test_kernel_auto_restarted_by_its_owner_returns_died(tmp_path: Any) -> None:
    """The owner's restarter replaces a dead kernel while a cell waits (nbclient then waits forever):
    the client must return."""
    import subprocess
    import sys

    script = os.path.join(str(tmp_path), "owner.py")
    with open(script, "w") as f:
        f.write(OWNER)
    owner = subprocess.Popen(
        [sys.executable, script, "cancelkernel", *kernel_args("cancelkernel")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None
        connection_file = owner.stdout.readline().strip()
        with AgentKernel(connection_file=connection_file, owner_restart_wait=15.0) as ak:
            first_pid = ak.pid
            ak.run("x = 1")
            r = ak.run("import os\nos._exit(1)", wall_budget=30)
            assert r.status == "died", r.summary()
            assert ak.pid != first_pid  # the owner's new kernel, not one started here
            assert ak.link.lifecycle.manager is ak.link.lifecycle.km  # nothing adopted
            assert ak.run("print('owner restarted me')").text == "owner restarted me\n"
    finally:
        owner.terminate()
        owner.wait(timeout=30)
        if owner.stdout is not None:
            owner.stdout.close()


def test_memory_budgets_from_the_flag_and_from_a_cell_tag(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    grow = "grown = []\nwhile True:\n    grown.append(bytearray(10 * 2**20))"
    assert exec_main(["-c", grow, "--memory-budget", "lots"]) == 2
    assert "--memory-budget='lots' is not a size" in capsys.readouterr().err
    assert exec_main(["-c", grow, "--memory-budget", "100M", "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert (result["status"], result["reason"]) == ("interrupted", "memory_budget"), result["reason_text"]
    assert result["memory"]["kind"] == "budget"
    assert result["memory"]["holders"][0]["name"] == "grown"
    src, out = os.path.join(str(tmp_path), "nb.ipynb"), os.path.join(str(tmp_path), "out.ipynb")
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(grow, metadata={"tags": ["memory-budget=100M"]}),
        nbformat.v4.new_code_cell("print('next')"),
    ]
    nbformat.write(nb, src)
    assert run_main([src, "-o", out, "--allow-errors"]) == 1
    cell = nbformat.read(out, as_version=4).cells[0]
    assert cell.metadata["cancelkernel"]["agent"]["reason"] == "memory_budget"
