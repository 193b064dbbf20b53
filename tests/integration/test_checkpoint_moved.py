"""Checkpoints under a root: found again by the kernel that replaces one, and an honest `lost` when it cannot see them.

A kernel restarted "on another host" is a kernel started in a private mount namespace with an empty tmpfs over the
root and a host name of its own (`unshare --mount --uts`: root only); one whose connection file changes at every
start (as under Enterprise Gateway) is started through a launcher that copies the file.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest
from helpers import agent

from cancelkernel import protocol
from cancelkernel.agent import read_log

pytestmark = pytest.mark.timeout(120)

WEDGE = "sum(range(10**12))"  # one C call holding the GIL: only a restart stops it
OTHER_HOST = "ck-other-host"

# Starts our kernel; from the second start on, as `plan.json` beside it says: in a private mount namespace with an
# empty tmpfs over the checkpoint root and another host name, or with a connection file of a new name each time.
LAUNCHER = """
import json, os, shutil, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "plan.json")) as f:
    plan = json.load(f)
count = os.path.join(here, "starts")
n = int(open(count).read()) + 1 if os.path.exists(count) else 1
with open(count, "w") as f:
    f.write(str(n))
args = sys.argv[1:]
if plan.get("copy_connection_file"):
    i = args.index("-f") + 1
    copy = os.path.join(here, "connection-%d.json" % n)
    shutil.copy(args[i], copy)
    args[i] = copy
kernel = [sys.executable, "-m", "cancelkernel", "kernel", *args]
hidden = plan.get("hide_root_after_first")
if n > 1 and hidden:
    script = 'mount -t tmpfs tmpfs "$0" && hostname "$1" && shift && exec "$@"'
    unshare = ["unshare", "--mount", "--uts", "--propagation", "private"]
    os.execvp("unshare", [*unshare, "sh", "-c", script, hidden, plan["host"], *kernel])
os.execv(sys.executable, kernel)
"""


def launcher_kernelspec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **plan: t.Any) -> str:
    """A kernelspec 'launched' that starts our kernel through LAUNCHER with `plan`; its name."""
    home = tmp_path / "launcher"
    home.mkdir()
    (home / "launcher.py").write_text(LAUNCHER)
    (home / "plan.json").write_text(json.dumps(plan))
    spec = {
        "argv": [sys.executable, str(home / "launcher.py"), "-f", "{connection_file}"],
        "display_name": "launched",
        "language": "python",
    }
    specs = tmp_path / "share" / "jupyter" / "kernels" / "launched"
    specs.mkdir(parents=True)
    (specs / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv(
        "JUPYTER_PATH",
        os.pathsep.join(filter(None, [str(tmp_path / "share" / "jupyter"), os.environ.get("JUPYTER_PATH")])),
    )
    return "launched"


def test_checkpoints_under_the_root_come_back_after_a_restart(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    env = {protocol.CHECKPOINT_ROOT_ENV: str(root), protocol.KERNEL_ID_ENV: "kernel-under-root"}
    with agent("cancelkernel", runtime_dir=tmp_path, env=env, spare=False) as ak:
        assert ak.info.checkpoint_root == str(root)
        assert ak.info.checkpoint_dir == str(root / "kernel-under-root")
        assert ak.run("kept = 41").status == "ok"
        saved = ak.save_checkpoint()
        assert saved["directory"] == ak.info.checkpoint_dir
        assert stat.S_IMODE(os.stat(saved["directory"]).st_mode) == 0o700
        back = ak.restart()
        assert (back.state, back.missing, back.note) == ("restored", False, None)
        assert "kept" in back.names
        assert ak.run("print(kept + 1)").text == "42\n"


@pytest.mark.parametrize("kernel_id", ["eg-kernel-1", None])
def test_a_new_connection_file_at_each_start_needs_the_kernel_id(
    kernel_id: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = launcher_kernelspec(tmp_path, monkeypatch, copy_connection_file=True)
    env = {protocol.CHECKPOINT_ROOT_ENV: str(tmp_path / "shared")}
    if kernel_id:
        env[protocol.KERNEL_ID_ENV] = kernel_id
    log = str(tmp_path / "agent.jsonl")
    with agent(name, runtime_dir=tmp_path, env=env, checkpoint="after-ok", spare=False, log=log) as ak:
        assert ak.run("kept = 41").status == "ok"  # saved after it (after-ok)
        before = ak.info.checkpoint_dir
        r = ak.run(WEDGE, wall_budget=0.5)
        assert r.status == "restarted", r.summary()
        if kernel_id:
            assert (r.state, r.lost_reason) == ("restored", None), r.summary()
            assert ak.info.checkpoint_dir == before == str(tmp_path / "shared" / kernel_id)
            assert ak.run("print(kept + 1)").text == "42\n"
            return
        assert r.state == "lost", r.summary()
        assert ak.info.checkpoint_dir != before  # the key was the connection file's name, which changed
        said = f"it looked in {ak.info.checkpoint_dir}, another directory (the same root, another key"
        assert said in (r.lost_reason or ""), r.summary()
        assert f"saved in {before}" in (r.lost_reason or "")
        assert ak.run("kept").error_name == "NameError"
    restart = next(rec for rec in read_log(log) if rec["action"] == "restart")
    assert before in restart["outcome"]


def test_a_kernel_restarted_where_the_root_is_not_shared_is_lost_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = subprocess.run(["unshare", "--mount", "--uts", "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here (unshare --mount --uts needs root): {probe.stderr.strip()}")
    root = tmp_path / "shared"
    root.mkdir()
    name = launcher_kernelspec(tmp_path, monkeypatch, hide_root_after_first=str(root), host=OTHER_HOST)
    log = str(tmp_path / "agent.jsonl")
    env = {protocol.CHECKPOINT_ROOT_ENV: str(root)}
    with agent(name, runtime_dir=tmp_path, env=env, checkpoint="after-ok", spare=False, log=log) as ak:
        first_host = ak.info.host
        assert first_host not in (None, OTHER_HOST)
        assert ak.run("kept = 41").status == "ok"  # saved after it (after-ok)
        saved = ak.link.saved
        assert saved is not None
        assert saved.path is not None
        assert os.path.isfile(os.path.join(saved.path, "manifest.json"))
        r = ak.run(WEDGE, wall_budget=0.5)
        assert (r.status, r.state, r.restored) == ("restarted", "lost", []), r.summary()
        assert ak.info.host == OTHER_HOST
        assert ak.info.checkpoint_dir == saved.directory  # the same path, another filesystem behind it
        reason = r.lost_reason or ""
        assert f"{saved.path} is not there on {OTHER_HOST}" in reason, r.summary()
        assert f"{root} is not shared between {first_host} and {OTHER_HOST}" in reason
        assert reason in r.summary()
        assert ak.run("kept").error_name == "NameError"  # an empty namespace, and said to be one
        assert os.path.isfile(os.path.join(saved.path, "manifest.json"))  # still there, on this side
    restart = next(rec for rec in read_log(log) if rec["action"] == "restart")
    assert saved.path in restart["outcome"]
    assert restart["state"] == "lost"


def test_a_kernel_started_here_does_not_inherit_this_process_kernel_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(protocol.KERNEL_ID_ENV, "the-gateway-kernel-this-runs-in")
    env = {protocol.CHECKPOINT_ROOT_ENV: str(tmp_path / "shared")}
    with agent("cancelkernel", runtime_dir=tmp_path, env=env, spare=False) as ak:
        assert ak.info.checkpoint_dir is not None
        assert os.path.basename(ak.info.checkpoint_dir) != "the-gateway-kernel-this-runs-in"
        assert ak.run(f"import os\nprint(os.environ.get({protocol.KERNEL_ID_ENV!r}))").text == "None\n"


def test_checkpoint_files_gone_before_a_restart_are_lost_with_the_reason(tmp_path: Path) -> None:
    env = {protocol.CHECKPOINT_ROOT_ENV: str(tmp_path / "shared")}
    with agent("cancelkernel", runtime_dir=tmp_path, env=env, spare=False) as ak:
        assert ak.run("kept = 41").status == "ok"
        saved = ak.save_checkpoint("mine")
        os.rename(saved["directory"], saved["directory"] + ".moved")
        back = ak.restart()
        assert (back.state, back.missing) == ("lost", True)
        assert f"it looked for {saved['path']}, which is not there any more" in (back.note or "")
        assert ak.run("kept").error_name == "NameError"
