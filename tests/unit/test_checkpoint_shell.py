"""The kernel's side of checkpoints, without a kernel: request handler, hooks, settings."""

from __future__ import annotations

import os
import types

import pytest
from traitlets.config import Config

from cancelkernel.checkpoint import manifests
from cancelkernel.checkpoint.settings import ROOT_NAME, CheckpointSettings, default_directory
from cancelkernel.checkpoint.shell import (
    AUTOSAVE_NAME,
    BEFORE_NAME,
    ShellCheckpoints,
    handle_checkpoint_request,
    maybe_autosave,
    save_before,
)


def fake_shell(**user: object) -> types.SimpleNamespace:
    """What the checkpoint code uses of an IPython shell: its namespaces and cell file names."""
    hidden = {"In": [], "Out": {}, "get_ipython": lambda: None}
    ns = {"__name__": "__main__", **hidden, **user}
    return types.SimpleNamespace(
        user_ns=ns, user_ns_hidden=dict(hidden), compile=types.SimpleNamespace(_filename_map={})
    )


@pytest.fixture
def settings(tmp_path) -> CheckpointSettings:
    return CheckpointSettings(directory=str(tmp_path / "cp"))


def test_request_round_trip(settings):
    shell = fake_shell(a=1, b=[1, 2])
    cps = ShellCheckpoints(shell, settings)
    saved = handle_checkpoint_request(cps, {"action": "save", "name": "one"})
    assert saved["status"] == "ok"
    assert saved["action"] == "save"
    assert saved["name"] == "one"
    assert saved["saved_names"] == ["a", "b"]
    assert saved["names"] == 2
    assert saved["skipped"] == []
    assert saved["path"].endswith(os.sep + "one")
    assert saved["directory"] == settings.resolve_directory()
    assert "saved 2 names" in saved["summary"]
    listed = handle_checkpoint_request(cps, {"action": "list"})
    assert listed["status"] == "ok"
    assert listed["latest"] == "one"
    assert [(c["name"], c["latest"], c["names"]) for c in listed["checkpoints"]] == [("one", True, 2)]
    shell.user_ns["a"] = "changed"
    restored = handle_checkpoint_request(cps, {"action": "restore"})
    assert restored["status"] == "ok"
    assert restored["name"] == "one"
    assert restored["restored"] == ["a", "b"]
    # `saved` is one thing in every reply: the time of that save.
    assert isinstance(saved["saved"], float)
    assert saved["saved"] == listed["checkpoints"][0]["saved"] == restored["saved"]
    assert shell.user_ns["a"] == 1
    dropped = handle_checkpoint_request(cps, {"action": "drop", "name": "one"})
    assert dropped["status"] == "ok"
    assert dropped["path"].endswith("one")
    assert handle_checkpoint_request(cps, {"action": "list"})["checkpoints"] == []


@pytest.mark.parametrize(
    ("content", "ename", "text"),
    [
        ({}, "ValueError", "must be one of save, restore, list, drop"),
        ({"action": "SAVE"}, "ValueError", "must be one of"),
        ({"action": "save", "name": 3}, "ValueError", "must be a string"),
        ({"action": "drop"}, "ValueError", "needs the 'name'"),
        ({"action": "save", "name": "a/b"}, "BadCheckpointName", "path separator"),
        ({"action": "restore"}, "CheckpointNotFound", "save one first"),
        ({"action": "drop", "name": "nope"}, "CheckpointNotFound", "no checkpoint named 'nope'"),
    ],
)
def test_request_errors(settings, content, ename, text):
    cps = ShellCheckpoints(fake_shell(a=1), settings)
    reply = handle_checkpoint_request(cps, content)
    assert reply["status"] == "error"
    assert reply["ename"] == ename
    assert text in reply["evalue"]
    assert reply["traceback"] == []
    assert reply["action"] == content.get("action")


def test_request_with_unexpected_failure_reports_a_traceback(settings, monkeypatch):
    cps = ShellCheckpoints(fake_shell(a=1), settings)
    monkeypatch.setattr(manifests, "list_checkpoints", lambda d: 1 / 0)
    reply = handle_checkpoint_request(cps, {"action": "list"})
    assert reply["status"] == "error"
    assert reply["ename"] == "ZeroDivisionError"
    assert reply["traceback"]


def test_request_with_content_that_is_not_a_dict(settings):
    cps = ShellCheckpoints(fake_shell(), settings)
    assert handle_checkpoint_request(cps, None)["status"] == "error"  # type: ignore[arg-type]


def test_ipython_hidden_names_are_not_saved(settings):
    manifest = ShellCheckpoints(fake_shell(x=1), settings).save()
    assert manifest.saved_names == ["x"]


def test_directory_getter_overrides_the_settings(settings, tmp_path):
    binding = ShellCheckpoints(fake_shell(x=1), settings, lambda: str(tmp_path / "elsewhere"))
    assert binding.save().path.startswith(str(tmp_path / "elsewhere"))


def test_save_before(settings):
    result = save_before(ShellCheckpoints(fake_shell(x=1), settings))
    assert result["status"] == "ok"
    assert result["name"] == BEFORE_NAME
    assert result["names"] == 1


def test_save_before_failure_warns_and_reports(tmp_path, capsys):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    result = save_before(ShellCheckpoints(fake_shell(x=1), CheckpointSettings(directory=str(blocker))))
    assert result["status"] == "error"
    assert result["ename"] == "CheckpointWriteError"
    assert "checkpoint before this cell failed, the cell runs without one" in capsys.readouterr().err


def test_autosave_off_by_default_and_only_after_ok(settings):
    cps = ShellCheckpoints(fake_shell(x=1), settings)
    assert maybe_autosave(cps, "ok") is None
    settings.autosave = True
    assert maybe_autosave(cps, "error") is None
    result = maybe_autosave(cps, "ok")
    assert result is not None
    assert result["status"] == "ok"
    assert result["name"] == AUTOSAVE_NAME


def test_autosave_over_the_limit_is_skipped_quietly(settings, capsys):
    settings.autosave = True
    settings.autosave_limit = 1000
    shell = fake_shell(x=1)
    cps = ShellCheckpoints(shell, settings)
    assert maybe_autosave(cps, "ok")["status"] == "ok"  # type: ignore[index]
    shell.user_ns["big"] = bytes(10_000)
    result = maybe_autosave(cps, "ok")
    assert result is not None
    assert result["status"] == "skipped"
    assert "limit" in result["reason"]
    assert capsys.readouterr().err == ""
    assert cps.restore(AUTOSAVE_NAME).restored == ["x"]


def test_settings_from_config_and_every_trait_has_help():
    config = Config(
        {"CheckpointSettings": {"autosave": True, "autosave_limit": 5, "size_limit": 7, "directory": "~/cp"}}
    )
    s = CheckpointSettings(config=config)
    assert (s.autosave, s.autosave_limit, s.size_limit) == (True, 5, 7)
    assert s.resolve_directory() == os.path.expanduser("~/cp")
    for name, trait in CheckpointSettings.class_traits(config=True).items():
        assert trait.help, name
        assert len(trait.help) > 20, name
    defaults = CheckpointSettings()
    assert defaults.autosave is False


def test_default_directory_is_stable_per_connection_file(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    a = default_directory("/run/x/kernel-abc.json")
    assert a == default_directory("/run/x/kernel-abc.json")
    assert os.path.dirname(a) == os.path.join(str(tmp_path), ROOT_NAME)
    assert os.path.basename(a).startswith("kernel-abc-")
    assert a != default_directory("/run/y/kernel-abc.json")  # same base name, another kernel
    assert os.path.basename(default_directory(None)) == f"pid-{os.getpid()}"


def test_settings_find_the_connection_file_up_the_parent_chain(tmp_path, monkeypatch):
    from traitlets import Unicode
    from traitlets.config import Configurable

    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))

    class App(Configurable):
        connection_file = Unicode("/somewhere/kernel-xyz.json")

    class Kernel(Configurable):
        pass

    s = CheckpointSettings(parent=Kernel(parent=App()))
    assert s.resolve_directory() == default_directory("/somewhere/kernel-xyz.json")
