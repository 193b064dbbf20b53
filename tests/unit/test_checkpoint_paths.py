"""The checkpoint root: where a kernel's checkpoints go, how it is given, and what a lost checkpoint says."""

from __future__ import annotations

import os

import pytest

from cancelkernel import protocol
from cancelkernel.agent import CellResult
from cancelkernel.agent.checkpoints import Checkpoints, lost_reason
from cancelkernel.agent.errors import BadInputError, CheckpointError
from cancelkernel.agent.link import KernelInfo, SavedCheckpoint
from cancelkernel.agent.run import latest_saved
from cancelkernel.checkpoint.settings import ROOT_NAME, CheckpointSettings, default_directory, kernel_key
from cancelkernel.cli.options import checkpoint_root_env
from cancelkernel.kernelspec import InstallError, kernel_json
from cancelkernel.mcp.options import parse_args

NOT_FOUND = "checkpoint restore failed in the kernel: CheckpointNotFound: no checkpoints in /r/k yet"

# -- the kernel's side: the directory ---------------------------------------------------------


def test_the_key_is_the_kernel_id_when_there_is_one_else_the_connection_file() -> None:
    assert kernel_key("/run/a/kernel-1.json", "5c1e-77") == "5c1e-77"
    assert kernel_key("/run/b/kernel-2.json", "5c1e-77") == "5c1e-77"  # EG: a new connection file, the same id
    by_file = kernel_key("/run/a/kernel-1.json")
    assert by_file.startswith("kernel-1-")
    assert by_file == kernel_key("/run/a/kernel-1.json", "")
    assert kernel_key(None) == f"pid-{os.getpid()}"


@pytest.mark.parametrize("kernel_id", ["../up", "a/b", ".hidden", "x" * 200, "sp ace"])
def test_a_kernel_id_that_is_not_a_plain_name_is_hashed_into_one(kernel_id: str) -> None:
    key = kernel_key(None, kernel_id)
    assert key.startswith("kernel-id-")
    assert "/" not in key
    assert ".." not in key
    assert key == kernel_key("/elsewhere.json", kernel_id)  # stable: the same id, the same directory


def test_the_directory_is_under_the_root_else_under_the_runtime_dir(
    tmp_path: os.PathLike, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    assert default_directory("/c/k.json", root="/shared/cp", kernel_id="id-1") == "/shared/cp/id-1"
    home = os.path.expanduser("~")
    assert default_directory(None, root="~/cp", kernel_id="id-1") == os.path.join(home, "cp", "id-1")
    assert default_directory(None, kernel_id="id-1") == os.path.join(str(tmp_path), ROOT_NAME, "id-1")


def test_the_root_comes_from_the_option_else_the_environment(
    tmp_path: os.PathLike, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv(protocol.CHECKPOINT_ROOT_ENV, "/from/env")
    monkeypatch.setenv(protocol.KERNEL_ID_ENV, "k-9")
    assert CheckpointSettings().resolve_directory() == "/from/env/k-9"
    assert CheckpointSettings().resolve_root() == "/from/env"
    assert CheckpointSettings(root="/given").resolve_directory() == "/given/k-9"
    outright = CheckpointSettings(root="/given", directory="/mine")
    assert (outright.resolve_directory(), outright.resolve_root()) == ("/mine", None)  # the directory wins
    monkeypatch.delenv(protocol.CHECKPOINT_ROOT_ENV)
    assert CheckpointSettings().resolve_root() == os.path.join(str(tmp_path), ROOT_NAME)


# -- how the root is given ------------------------------------------------------------------------


def test_install_puts_the_root_on_the_kernels_command_line() -> None:
    argv = kernel_json(checkpoint_root="/shared/cp")["argv"]
    assert "--CheckpointSettings.root=/shared/cp" in argv
    assert "--CheckpointSettings.root=~/cp" in kernel_json(checkpoint_root="~/cp")["argv"]  # each user's home
    assert not any("CheckpointSettings.root" in a for a in kernel_json()["argv"])
    with pytest.raises(InstallError, match="absolute path"):
        kernel_json(checkpoint_root="relative/cp")


def test_run_and_mcp_give_the_root_to_the_kernels_they_start(tmp_path: os.PathLike) -> None:
    root = os.path.join(str(tmp_path), "cp")
    assert checkpoint_root_env(root, server_url=None, connection_file=None) == {protocol.CHECKPOINT_ROOT_ENV: root}
    assert checkpoint_root_env(None, server_url="http://eg:8888", connection_file=None) == {}
    with pytest.raises(BadInputError, match="kernelspec"):
        checkpoint_root_env(root, server_url="http://eg:8888", connection_file=None)
    with pytest.raises(BadInputError, match="already running"):
        checkpoint_root_env(root, server_url=None, connection_file="/run/kernel-1.json")
    options = parse_args(["--checkpoint-root", root])
    assert options.checkpoint_root == root
    assert options.agent_options()["env"] == {protocol.CHECKPOINT_ROOT_ENV: root}
    assert "env" not in parse_args([]).agent_options()
    with pytest.raises(BadInputError, match="--checkpoint-root"):
        parse_args(["--checkpoint-root", root, "--server-url", "http://eg:8888"])


# -- the agent's side: what a lost checkpoint says ----------------------------------------------------


def _after(directory: str = "/r/k", host: str = "a", root: str | None = "/r") -> KernelInfo:
    return KernelInfo(ours=True, checkpoint_dir=directory, checkpoint_root=root, host=host)


def _not_found() -> CheckpointError:
    return CheckpointError(NOT_FOUND, ename="CheckpointNotFound")


def test_lost_on_another_host_names_the_path_both_hosts_and_the_unshared_root() -> None:
    said = lost_reason(SavedCheckpoint("default", "/r/k", "a"), _after(host="b"), _not_found())
    assert "checkpoint 'default' (saved in /r/k on host a)" in said
    assert "/r/k/default is not there on b" in said
    assert "/r is not shared between a and b" in said


def test_lost_in_another_directory_names_both_and_what_differs() -> None:
    said = lost_reason(SavedCheckpoint("default", "/r/k", "a"), _after("/other/k", root="/other"), _not_found())
    assert "it looked in /other/k, another directory (another checkpoint root" in said
    assert "saved in /r/k" in said
    assert protocol.CHECKPOINT_ROOT_ENV in said
    said = lost_reason(SavedCheckpoint("default", "/r/k1", "a"), _after("/r/k2"), _not_found())
    assert "it looked in /r/k2, another directory (the same root, another key" in said
    assert protocol.KERNEL_ID_ENV in said


def test_lost_on_the_same_host_and_directory_says_the_files_are_gone() -> None:
    said = lost_reason(SavedCheckpoint("default", "/r/k", "a"), _after(), _not_found())
    assert "it looked for /r/k/default, which is not there any more" in said


def test_a_refused_checkpoint_says_the_kernels_reason() -> None:
    refused = CheckpointError("... UntrustedCheckpoint: owned by nobody", ename="UntrustedCheckpoint")
    said = lost_reason(SavedCheckpoint("default", "/r/k", "a"), _after(), refused)
    assert said.endswith("was not restored by the new kernel: ... UntrustedCheckpoint: owned by nobody")


class _Link:
    kernel_name = "fake"

    def __init__(self, reply: dict, saved: SavedCheckpoint | None) -> None:
        self.info = _after(host="b")
        self.info.features = [protocol.FEATURE_CHECKPOINT]
        self.saved = saved
        self.reply = reply

    def shell_request(self, msg_type: str, content: dict, *, timeout: float, reply_type: str) -> dict:
        return {"content": self.reply}


def test_nothing_to_restore_is_news_only_when_a_checkpoint_was_saved_or_refused() -> None:
    not_found = {"status": "error", "ename": "CheckpointNotFound", "evalue": "no checkpoints in /r/k yet"}
    never_saved = Checkpoints(_Link(not_found, None)).restore_latest()  # type: ignore[arg-type]
    assert (never_saved.state, never_saved.missing) == ("lost", False)
    assert "no checkpoints in /r/k yet" in (never_saved.note or "")
    saved = Checkpoints(_Link(not_found, SavedCheckpoint("default", "/r/k", "a"))).restore_latest()  # type: ignore[arg-type]
    assert (saved.state, saved.missing) == ("lost", True)
    assert "/r/k/default is not there on b" in (saved.note or "")
    untrusted = {"status": "error", "ename": "UntrustedCheckpoint", "evalue": "owned by nobody"}
    refused = Checkpoints(_Link(untrusted, None)).restore_latest()  # type: ignore[arg-type]
    assert (refused.state, refused.missing) == ("lost", True)


def test_the_kernels_own_saves_are_remembered_by_name() -> None:
    ok = {"name": "x", "status": "ok"}
    assert latest_saved({"before": {**ok, "name": "before"}, "autosave": {**ok, "name": "autosave"}}) == "autosave"
    assert latest_saved(
        {"before": {**ok, "name": "before"}, "autosave": {"name": "autosave", "status": "skipped"}}
    ) == ("before")
    assert latest_saved({"before": {"name": "before", "status": "error"}, "autosave": None}) is None
    assert latest_saved("nonsense") is None


def test_the_summary_says_why_the_state_is_lost() -> None:
    r = CellResult("restarted", "x", state="lost", lost_reason="checkpoint 'default' ... not shared")
    assert r.summary().endswith("; state lost: checkpoint 'default' ... not shared")
    assert CellResult.from_dict(r.to_dict()).lost_reason == r.lost_reason
