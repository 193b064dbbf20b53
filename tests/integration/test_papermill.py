"""The papermill engine (`papermill ... --engine cancelkernel`), driven by real papermill: its CLI and execute_notebook.

Also portable budgets: the same notebook with `%%budget` cells runs on a
stock ipykernel through `cancelkernel run` and through the engine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import nbformat
import papermill
import pytest
from helpers import kernel_args
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from papermill.exceptions import PapermillExecutionError

from cancelkernel.agent import BadInputError
from cancelkernel.protocol import REPORT_MIME
from cancelkernel.testing import process_exited

pytestmark = pytest.mark.timeout(180)

# Generous: only there so that a broken engine fails the test instead of hanging it.
HANG = 120
WEDGE = "sum(range(10**12))"  # one C call holding the GIL: no interrupt can stop it


def _notebook(path: str, cells: list[Any], kernel: str = "cancelkernel", **metadata: Any) -> None:
    nb = new_notebook(cells=cells)
    nb.metadata.kernelspec = {"name": kernel, "language": "python", "display_name": kernel}
    nb.metadata.update(metadata)
    nbformat.write(nb, path)


def _papermill(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The papermill command, as a user runs it (its kernels die with it: they poll their parent)."""
    return subprocess.run(
        [sys.executable, "-m", "papermill", *args, "--no-progress-bar"],
        capture_output=True, text=True, timeout=HANG, env={**os.environ, **(env or {})},
    )  # fmt: skip


def _texts(cell: Any) -> str:
    return "".join(o.get("text") or o.get("data", {}).get("text/plain", "") for o in cell.outputs)


def _report(cell: Any) -> dict[str, Any]:
    reports = [o["data"][REPORT_MIME] for o in cell.outputs if REPORT_MIME in o.get("data", {})]
    assert len(reports) == 1, cell.outputs
    return dict(reports[0])


def _cell(nb: Any, start: str) -> Any:
    """The code cell whose source starts so (papermill inserts cells: parameters, error markers)."""
    found = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(start)]
    assert len(found) == 1, [c.source for c in nb.cells]
    return found[0]


def _errors(cell: Any) -> list[str]:
    return [o["ename"] for o in cell.outputs if o["output_type"] == "error"]


def test_ok_notebook_keeps_parameters_cwd_saves_and_log_output(tmp_path: Any) -> None:
    src, out = str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb")
    workdir = tmp_path / "work"
    workdir.mkdir()
    _notebook(src, [
        new_markdown_cell("# parameters, cwd, saves"),
        new_code_cell("n = 1", metadata={"tags": ["parameters"]}),
        new_code_cell("import os\nprint('pid', os.getpid())\nprint('cwd', os.getcwd())"),
        new_code_cell("import time\nprint('second', n * 2, flush=True)\ntime.sleep(3)"),
        new_code_cell(""),
        new_code_cell("n * 10"),
    ])  # fmt: skip
    cmd = [sys.executable, "-m", "papermill", src, out, "-k", "cancelkernel", "--engine", "cancelkernel",
           "-p", "n", "5", "--cwd", str(workdir), "--log-output", "--autosave-cell-every", "1",
           "--stdout-file", str(tmp_path / "stdout.txt"), "--no-progress-bar"]  # fmt: skip
    seen_while_running = ""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            deadline = time.monotonic() + HANG
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
                try:
                    saved = nbformat.read(out, as_version=4)
                except Exception:  # noqa: BLE001 - not written yet, or mid-write
                    continue
                if len(saved.cells) > 4 and saved.cells[4].metadata.papermill["status"] == "running":
                    seen_while_running = _texts(saved.cells[3]) + _texts(saved.cells[4])
            _, err = proc.communicate(timeout=HANG)
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    nb = nbformat.read(out, as_version=4)
    injected = nb.cells[2]
    assert "injected-parameters" in injected.metadata["tags"]
    assert "n = 5" in injected.source
    pid_line, cwd_line = _texts(nb.cells[3]).splitlines()
    assert cwd_line == f"cwd {workdir}"
    assert _texts(nb.cells[4]) == "second 10\n"
    assert nb.cells[6].outputs[0]["data"]["text/plain"] == "50"
    assert [c.metadata.papermill["status"] for c in nb.cells] == ["completed"] * len(nb.cells)
    assert nb.metadata.language_info["name"] == "python"
    # Saved after each cell (cell 3's output) and autosaved while cell 4 slept (its partial output).
    assert "cwd" in seen_while_running
    assert "second 10" in seen_while_running
    # --log-output, papermill's logger
    assert "second 10" in err
    assert "Executing Cell" in err
    assert (tmp_path / "stdout.txt").read_text() == f"{pid_line}\n{cwd_line}\nsecond 10\n"
    assert process_exited(int(pid_line.split()[1]))


def test_execution_timeout_interrupts_once_then_papermill_stops(tmp_path: Any) -> None:
    src, out = str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb")
    _notebook(src, [
        new_code_cell("a = 1"),
        new_code_cell("import time\nprint('sleeping', flush=True)\ntime.sleep(60)"),
        new_code_cell("print('after')"),
    ])  # fmt: skip
    done = _papermill(src, out, "-k", "cancelkernel", "--engine", "cancelkernel", "--execution-timeout", "1")
    assert done.returncode == 1, done.stderr
    assert "PapermillExecutionError" in done.stderr, done.stderr
    assert "KeyboardInterrupt" in done.stderr
    nb = nbformat.read(out, as_version=4)
    cell = _cell(nb, "import time")
    report = _report(cell)
    assert (report["status"], report["reason"]) == ("interrupted", "wall_budget")
    assert report["elapsed"] < 60  # the cell was stopped, not waited for (its sleep was 60 s)
    assert [a["action"] for a in report["actions"]] == ["interrupt"]
    assert "sleeping\n" in _texts(cell)
    assert "cancelkernel agent: interrupted" in _texts(cell)
    assert _errors(cell) == ["KeyboardInterrupt"]
    assert cell.metadata.papermill["status"] == "failed"
    after = _cell(nb, "print('after')")
    assert after.outputs == []
    assert after.metadata.papermill["status"] == "pending"


def test_tag_budgets_and_error_rules_through_execute_notebook(tmp_path: Any) -> None:
    src, out = str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb")
    _notebook(src, [
        new_code_cell("x = 20", metadata={"tags": ["parameters"]}),
        new_code_cell("print('spinning', x, flush=True)\nwhile True:\n    pass",
                      metadata={"tags": ["wall-budget=0.5", "raises-exception"]}),
        new_code_cell("import time\nwhile True:\n    time.sleep(0.05)",
                      metadata={"cancelkernel": {"quiet_budget": 0.5}}),
        new_code_cell("print('not reached')"),
    ])  # fmt: skip
    with pytest.raises(PapermillExecutionError) as caught:
        papermill.execute_notebook(
            src, out, parameters={"x": 21}, engine_name="cancelkernel", kernel_name="cancelkernel",
            progress_bar=False, extra_arguments=kernel_args("cancelkernel"),
        )  # fmt: skip
    # Papermill names the last cell with an error output: the one that stopped the notebook.
    assert caught.value.ename == "KeyboardInterrupt"
    assert caught.value.cell_index == 3
    assert "quiet budget" in caught.value.evalue
    nb = nbformat.read(out, as_version=4)
    spin, quiet, last = _cell(nb, "print('spinning'"), _cell(nb, "import time"), _cell(nb, "print('not reached')")
    assert (_report(spin)["status"], _report(spin)["reason"]) == ("interrupted", "wall_budget")
    assert "spinning 21\n" in _texts(spin)  # the injected parameter
    # raises-exception: the notebook went on, and the quiet budget stopped the silent loop, which stops it (no tag).
    assert (_report(quiet)["status"], _report(quiet)["reason"]) == ("interrupted", "quiet_budget")
    assert quiet.metadata.papermill["status"] == "failed"
    assert last.outputs == []
    assert last.metadata.papermill["status"] == "pending"
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1
    assert "x = 21" in injected[0].source
    assert injected[0].execution_count == 2


def test_a_memory_budget_tag_through_execute_notebook(tmp_path: Any) -> None:
    src, out = str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb")
    grow = "grown = []\nwhile True:\n    grown.append(bytearray(10 * 2**20))"
    _notebook(
        src, [new_code_cell(grow, metadata={"tags": ["memory-budget=100M"]}), new_code_cell("print('not reached')")]
    )
    with pytest.raises(PapermillExecutionError) as caught:
        papermill.execute_notebook(src, out, engine_name="cancelkernel", kernel_name="cancelkernel", progress_bar=False)
    assert caught.value.ename == "KeyboardInterrupt", caught.value.evalue
    assert "memory budget of 100 MiB" in caught.value.evalue, caught.value.evalue
    report = _report(_cell(nbformat.read(out, as_version=4), "grown = []"))
    assert (report["status"], report["reason"]) == ("interrupted", "memory_budget")


def test_wedge_restarted_and_restored_then_the_notebook_goes_on(tmp_path: Any) -> None:
    """CLI: the notebook asks for checkpoints itself; the wedged cell is restarted, state restored, the rest runs."""
    src, out = str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb")
    _notebook(src, [
        new_code_cell("import json\ndata = list(range(10))"),
        new_code_cell(WEDGE, metadata={"tags": ["wall-budget=0.5"]}),
        new_code_cell("import os\nprint(len(data), json.dumps(1), os.getpid())"),
    ], cancelkernel={"checkpoint": "before-risky"})  # fmt: skip
    done = _papermill(
        src, out, "-k", "cancelkernel", "--engine", "cancelkernel", env={"JUPYTER_RUNTIME_DIR": str(tmp_path)}
    )
    # Every cell ran; the wedged one did not finish, so papermill's final check fails the run, naming it.
    assert done.returncode == 1, done.stderr
    assert "CellTimeoutError" in done.stderr, done.stderr
    nb = nbformat.read(out, as_version=4)
    wedged, after = _cell(nb, WEDGE), _cell(nb, "import os")
    report = _report(wedged)
    assert (report["status"], report["state"]) == ("restarted", "restored"), report
    assert [a["action"] for a in report["actions"]] == ["interrupt", "restart"]
    assert _errors(wedged) == ["CellTimeoutError"]
    assert "state restored" in wedged.outputs[-1]["evalue"]
    length, dumped, pid = _texts(after).split()
    assert (length, dumped) == ("10", "1")
    assert after.metadata.papermill["status"] == "completed"
    assert process_exited(int(pid))


def test_wedge_with_state_lost_stops_like_an_error(tmp_path: Any) -> None:
    src, out = str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb")
    _notebook(src, [new_code_cell("data = 1"), new_code_cell(WEDGE), new_code_cell("print(data)")])
    with pytest.raises(PapermillExecutionError) as caught:
        papermill.execute_notebook(
            src, out, engine_name="cancelkernel", kernel_name="cancelkernel", progress_bar=False,
            execution_timeout=1, extra_arguments=kernel_args("cancelkernel"),
        )  # fmt: skip
    assert (caught.value.ename, caught.value.cell_index) == ("CellTimeoutError", 1)
    assert "state lost" in caught.value.evalue
    nb = nbformat.read(out, as_version=4)
    assert _report(_cell(nb, WEDGE))["state"] == "lost"
    assert _cell(nb, "print(data)").outputs == []  # a new, empty kernel: the rest is not run


def test_dead_kernel_fails_fast(tmp_path: Any) -> None:
    src, out = str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb")
    _notebook(src, [
        new_code_cell("import os\nprint(os.getpid())"),
        new_code_cell("print('bye', flush=True)\nos._exit(3)"),
        new_code_cell("print('after')"),
    ])  # fmt: skip
    started = time.monotonic()
    done = _papermill(src, out, "-k", "cancelkernel", "--engine", "cancelkernel")
    assert time.monotonic() - started < 60
    assert done.returncode == 1, done.stderr
    assert "DeadKernelError" in done.stderr, done.stderr
    assert "exit code 3" in done.stderr, done.stderr
    nb = nbformat.read(out, as_version=4)
    died = _cell(nb, "print('bye'")
    assert (_report(died)["status"], _report(died)["reason"]) == ("died", "died")
    assert _errors(died) == ["DeadKernelError"]
    assert "exit code 3" in died.outputs[-1]["evalue"]
    assert _cell(nb, "print('after')").outputs == []
    assert process_exited(int(_texts(_cell(nb, "import os"))))


def test_bad_notebook_options_are_refused_before_a_kernel_starts(tmp_path: Any) -> None:
    src = str(tmp_path / "in.ipynb")
    _notebook(src, [new_code_cell("1")], cancelkernel={"checkpont": "before-risky"})
    with pytest.raises(BadInputError, match="checkpont"):
        papermill.execute_notebook(
            src, None, engine_name="cancelkernel", kernel_name="cancelkernel", progress_bar=False
        )


# -- item 6: portable budgets on a stock kernel -----------------------------------------


def _portable(path: str) -> list[str]:
    cells = [
        new_code_cell("x = 2"),
        new_code_cell("%%budget wall=1\nimport time\nprint('spinning', flush=True)\nwhile True:\n    time.sleep(0.01)",
                      metadata={"tags": ["raises-exception"]}),
        new_code_cell("%%timeout 30\nprint('fine', x * 21)"),
    ]  # fmt: skip
    _notebook(path, cells, kernel="python3")
    return [c.source for c in cells]


def _check_portable(cells: list[Any], sources: list[str]) -> None:
    assert [c.source for c in cells] == sources  # the directive lines stay in the notebook as written
    runaway = cells[1]
    assert (_report(runaway)["status"], _report(runaway)["reason"]) == ("interrupted", "wall_budget")
    assert "spinning\n" in _texts(runaway)
    assert _errors(runaway) == ["KeyboardInterrupt"]
    assert _texts(cells[2]) == "fine 42\n"


def test_budget_directives_run_on_stock_ipykernel_through_cancelkernel_run(tmp_path: Any) -> None:
    src, out = str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb")
    sources = _portable(src)
    done = subprocess.run(
        [sys.executable, "-m", "cancelkernel", "run", src, "-o", out, "--kernel", "python3", "--allow-errors"],
        capture_output=True, text=True, timeout=HANG,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr  # the runaway fails the run, the rest ran
    _check_portable(nbformat.read(out, as_version=4).cells, sources)


def test_budget_directives_run_on_stock_ipykernel_through_papermill(tmp_path: Any) -> None:
    src, out = str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb")
    sources = _portable(src)
    done = _papermill(src, out, "-k", "python3", "--engine", "cancelkernel")
    assert done.returncode == 1, done.stderr
    assert "PapermillExecutionError" in done.stderr, done.stderr
    assert "degraded" in done.stderr
    assert "has no cell budgets" in done.stderr
    nb = nbformat.read(out, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code"]  # without papermill's error-marker cells
    _check_portable(cells, sources)
