"""Install and CLI, and bad input, through the real commands.

`cancelkernel install/uninstall` and `jupyter kernelspec list` run as
subprocesses with JUPYTER_PATH pointing at a temporary prefix; a kernel is
then started from the installed spec with jupyter_client's start_new_kernel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from jupyter_client.manager import start_new_kernel

from cancelkernel.testing import REPLY_TIMEOUT, START_TIMEOUT, execute

BIN = Path(sys.executable).parent
CANCELKERNEL = str(BIN / "cancelkernel")
JUPYTER = str(BIN / "jupyter")


def cli(*args: str, env: dict | None = None, command: list[str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*(command or [CANCELKERNEL]), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private install prefix that Jupyter (here and in subprocesses) searches first."""
    data = tmp_path / "prefix" / "share" / "jupyter"
    monkeypatch.setenv("JUPYTER_PATH", os.pathsep.join([str(data), os.environ.get("JUPYTER_PATH", "")]))
    return tmp_path / "prefix"


def spec_dir(prefix: Path, name: str) -> Path:
    return prefix / "share" / "jupyter" / "kernels" / name


def test_install_writes_the_kernelspec(prefix: Path) -> None:
    result = cli("install", "--prefix", str(prefix))
    assert result.returncode == 0, result.stderr
    where = spec_dir(prefix, "cancelkernel")
    assert str(where) in result.stdout
    spec = json.loads((where / "kernel.json").read_text())
    assert spec["interrupt_mode"] == "signal"
    assert spec["display_name"] == "Python 3 (cancelkernel)"
    assert spec["language"] == "python"
    # The interpreter that ran the install (the console script's shebang may name python3).
    assert os.path.samefile(spec["argv"][0], sys.executable), spec["argv"][0]
    assert spec["argv"][1:4] == ["-m", "cancelkernel", "kernel"]
    assert "{connection_file}" in spec["argv"]
    assert not any("exec_thread" in arg for arg in spec["argv"])  # main mode is the default
    assert spec["metadata"]["cancelkernel"]["exec_thread"] == "main"
    for logo in ("logo-32x32.png", "logo-64x64.png", "logo-svg.svg"):
        assert (where / logo).is_file(), logo
        assert (where / logo).stat().st_size > 0, logo


def test_install_bakes_kernel_options_into_argv(prefix: Path) -> None:
    result = cli(
        "install",
        "--prefix",
        str(prefix),
        "--exec-thread",
        "worker",
        "--name",
        "cancelkernel-worker",
        "--interrupt-grace",
        "0.5",
    )
    assert result.returncode == 0, result.stderr
    spec = json.loads((spec_dir(prefix, "cancelkernel-worker") / "kernel.json").read_text())
    assert "--CancelKernel.exec_thread=worker" in spec["argv"]
    assert "--CancelKernel.interrupt_grace=0.5" in spec["argv"]
    assert spec["interrupt_mode"] == "signal"
    assert spec["metadata"]["cancelkernel"]["exec_thread"] == "worker"
    assert spec["metadata"]["debugger"] is False


def test_display_name_option(prefix: Path) -> None:
    result = cli("install", "--prefix", str(prefix), "--name", "ck-named", "--display-name", "My Stoppable Python")
    assert result.returncode == 0, result.stderr
    assert (
        json.loads((spec_dir(prefix, "ck-named") / "kernel.json").read_text())["display_name"] == "My Stoppable Python"
    )


def test_kernelspec_list_shows_it_and_uninstall_removes_it(prefix: Path) -> None:
    name = "cancelkernel-listed"
    assert cli("install", "--prefix", str(prefix), "--name", name).returncode == 0
    listed = cli("kernelspec", "list", "--json", command=[JUPYTER])
    assert listed.returncode == 0, listed.stderr
    specs = json.loads(listed.stdout)["kernelspecs"]
    assert name in specs
    assert Path(specs[name]["resource_dir"]) == spec_dir(prefix, name)
    assert specs[name]["spec"]["display_name"] == "Python 3 (cancelkernel)"

    removed = cli("uninstall", "--name", name)
    assert removed.returncode == 0, removed.stderr
    assert not spec_dir(prefix, name).exists()
    listed = cli("kernelspec", "list", "--json", command=[JUPYTER])
    assert name not in json.loads(listed.stdout)["kernelspecs"]


@pytest.mark.parametrize(
    "command", [[CANCELKERNEL], [sys.executable, "-m", "cancelkernel"]], ids=["script", "python-m"]
)
def test_help(command: list[str]) -> None:
    result = cli("--help", command=command)
    assert result.returncode == 0, result.stderr
    for word in ("install", "uninstall", "kernel"):
        assert word in result.stdout
    result = cli("install", "--help", command=command)
    assert result.returncode == 0
    assert "--prefix" in result.stdout
    assert "--exec-thread" in result.stdout


def test_python_m_installs_like_the_script(prefix: Path) -> None:
    result = cli(
        "install", "--prefix", str(prefix), "--name", "via-python-m", command=[sys.executable, "-m", "cancelkernel"]
    )
    assert result.returncode == 0, result.stderr
    spec = json.loads((spec_dir(prefix, "via-python-m") / "kernel.json").read_text())
    assert spec["argv"][0] == sys.executable


# -- bad input: a clear error, exit code 1, no traceback ----------------------------------------------


def test_install_into_an_unwritable_prefix_is_a_clear_error(tmp_path: Path) -> None:
    """A prefix under a regular file cannot be created (we run as root here, so chmod would not stop us)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = cli("install", "--prefix", str(blocker / "prefix"))
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert "cancelkernel install" in result.stderr, result.stderr
    assert "cannot write" in result.stderr, result.stderr
    assert str(blocker / "prefix") in result.stderr
    assert "--prefix" in result.stderr  # says what to do instead


def test_install_with_a_bad_name_is_a_clear_error(prefix: Path) -> None:
    result = cli("install", "--prefix", str(prefix), "--name", "../escape")
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert "kernel name" in result.stderr, result.stderr
    assert not (prefix / "share" / "jupyter" / "escape").exists()


@pytest.mark.parametrize(
    "args", [["--exec-thread", "sideways"], ["--interrupt-grace", "-1"], ["--interrupt-grace", "soon"]]
)
def test_install_with_bad_options_is_a_usage_error(prefix: Path, args: list[str]) -> None:
    result = cli("install", "--prefix", str(prefix), *args)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    assert "usage:" in result.stderr
    assert not (prefix / "share").exists()


def test_uninstall_of_a_missing_spec_is_a_clear_error(prefix: Path) -> None:
    result = cli("uninstall", "--name", "no-such-cancelkernel-spec")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "no-such-cancelkernel-spec" in result.stderr


# -- a kernel started from the installed spec ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "args", "mode"), [("ck-started", [], "main"), ("ck-started-worker", ["--exec-thread", "worker"], "worker")]
)
def test_kernel_starts_from_the_installed_spec(prefix: Path, name: str, args: list[str], mode: str) -> None:
    assert cli("install", "--prefix", str(prefix), "--name", name, *args).returncode == 0
    km, kc = start_new_kernel(kernel_name=name, startup_timeout=START_TIMEOUT)
    try:
        assert km.kernel_spec.resource_dir == str(spec_dir(prefix, name))
        reply = execute(kc, "import sys\nexe = sys.executable", user_expressions={"exe": "exe"}, timeout=REPLY_TIMEOUT)
        assert reply["content"]["status"] == "ok"
        assert os.path.samefile(eval(reply["content"]["user_expressions"]["exe"]["data"]["text/plain"]), sys.executable)
        kc.kernel_info()
        info = kc.get_shell_msg(timeout=REPLY_TIMEOUT)
        while info["msg_type"] != "kernel_info_reply":
            info = kc.get_shell_msg(timeout=REPLY_TIMEOUT)
        assert info["content"]["cancelkernel"]["exec_thread"] == mode
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_install_checkpoint_root_is_where_the_kernels_checkpoints_go(prefix: Path, tmp_path: Path) -> None:
    root = tmp_path / "shared-checkpoints"
    installed = cli("install", "--prefix", str(prefix), "--name", "ck-rooted", "--checkpoint-root", str(root))
    assert installed.returncode == 0, installed.stderr
    spec = json.loads((spec_dir(prefix, "ck-rooted") / "kernel.json").read_text())
    assert f"--CheckpointSettings.root={root}" in spec["argv"]
    km, kc = start_new_kernel(kernel_name="ck-rooted", startup_timeout=START_TIMEOUT)
    try:
        kc.kernel_info()
        info = kc.get_shell_msg(timeout=REPLY_TIMEOUT)
        while info["msg_type"] != "kernel_info_reply":
            info = kc.get_shell_msg(timeout=REPLY_TIMEOUT)
        ours = info["content"]["cancelkernel"]
        assert ours["checkpoint_root"] == str(root)
        assert os.path.dirname(ours["checkpoint_dir"]) == str(root)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    relative = cli("install", "--prefix", str(prefix), "--name", "ck-relative", "--checkpoint-root", "cp")
    assert relative.returncode == 1
    assert "--checkpoint-root must be an absolute path" in relative.stderr
    assert "Traceback" not in relative.stderr
    assert not spec_dir(prefix, "ck-relative").exists()


def test_the_demo_tells_its_story_and_keeps_the_kernels_log_apart(tmp_path: Path) -> None:
    done = subprocess.run(
        [CANCELKERNEL, "demo", "--exec-thread", "main"], capture_output=True, text=True, timeout=600,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Everything behaved as expected." in done.stdout, done.stdout
    # The kernels' log lines ("running over TCP without encryption",
    # ...) go to a file the demo names, not into its table.
    assert "[IPKernelApp]" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert "WARNING" not in done.stdout + done.stderr, done.stdout + done.stderr
    log = done.stdout.strip().splitlines()[-1].rsplit(" ", 1)[-1]
    assert done.stdout.strip().splitlines()[-1].startswith("The kernels' own log lines:")
    assert log.startswith(str(tmp_path))
    assert "IPKernelApp" in Path(log).read_text()
