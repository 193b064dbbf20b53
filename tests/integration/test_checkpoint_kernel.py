"""Checkpoints through real kernels: %checkpoint, checkpoint_request, restart_kernel()."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from cancelkernel.testing import (
    MODES,
    REPLY_TIMEOUT,
    checkpoint_request,
    outputs,
    restart,
    running_kernel,
    send_execute,
    wait_reply,
)


@contextlib.contextmanager
def checkpoint_kernel(
    mode: str, runtime_dir: Any, *, extra_arguments: list[str] | None = None
) -> Iterator[tuple[KernelManager, BlockingKernelClient]]:
    """A real kernel with checkpoints, its runtime dir (so its checkpoints) under `runtime_dir`."""
    args = list(extra_arguments or [])
    env = {"JUPYTER_RUNTIME_DIR": str(runtime_dir)}
    with running_kernel(mode, extra_arguments=args, env=env) as pair:
        yield pair


def run(kc: BlockingKernelClient, code: str, *, metadata: dict | None = None, timeout: float = REPLY_TIMEOUT) -> dict:
    """Run a cell; return {"reply": execute_reply, "stdout": ..., "stderr": ..., "error": error content or None}."""
    msg_id = send_execute(kc, code, metadata=metadata)
    reply = wait_reply(kc, msg_id, timeout=timeout)
    found = outputs(kc, msg_id, timeout=timeout)
    text = {"stdout": "", "stderr": ""}
    error = None
    for m in found:
        if m["msg_type"] == "stream":
            text[m["content"]["name"]] += m["content"]["text"]
        elif m["msg_type"] == "error":
            error = m["content"]
    return {"reply": reply, "error": error, **text}


def ok(kc: BlockingKernelClient, code: str, **kwargs: Any) -> dict:
    result = run(kc, code, **kwargs)
    assert result["reply"]["content"]["status"] == "ok", result
    return result


SETUP = """
import collections as coll
import json
from os import path as p
from xml.etree import ElementTree as ET
import threading
from dataclasses import dataclass

class Shape:
    def __init__(self, name, sides):
        self.name, self.sides = name, sides
    def describe(self):
        return f"{self.name} has {self.sides} sides"

class Square(Shape):
    def __init__(self):
        super().__init__("square", 4)

@dataclass
class Point:
    x: int
    y: int = 0

def area(side):
    return side * side

numbers = list(range(1000))
table = {"a": 1, "b": [1, 2, 3]}
blob = bytes(range(256)) * 8000
square = Square()
points = [Point(1, 2), Point(3)]
counter = coll.Counter("hello")
lock = threading.Lock()
gen = (i for i in range(3))
"""

CHECK = """
assert coll.Counter is __import__("collections").Counter and counter["l"] == 2
assert p.join("a", "b") == "a/b" and ET.__name__ == "xml.etree.ElementTree" and json.dumps(1) == "1"
assert square.describe() == "square has 4 sides" and isinstance(square, Square) and isinstance(square, Shape)
assert points == [Point(1, 2), Point(3, 0)]
assert area(3) == 9
assert numbers == list(range(1000)) and table == {"a": 1, "b": [1, 2, 3]} and blob == bytes(range(256)) * 8000
assert "lock" not in globals() and "gen" not in globals()
print("state ok")
"""


@pytest.mark.parametrize("mode", MODES)
def test_round_trip_across_restart_through_the_protocol(mode, tmp_path):
    with checkpoint_kernel(mode, tmp_path) as (km, kc):
        ok(kc, SETUP)
        saved = checkpoint_request(kc, "save")
        assert saved["status"] == "ok", saved
        assert saved["name"] == "default"
        assert {"square", "Shape", "area", "p"} <= set(saved["saved_names"])
        assert {s["name"] for s in saved["skipped"]} == {"lock", "gen"}
        restart(km, kc)
        assert run(kc, "square")["error"]["ename"] == "NameError"  # the restart really lost the state
        restored = checkpoint_request(kc, "restore")
        assert restored["status"] == "ok", restored
        assert {"coll", "json", "p", "ET", "Shape", "Square", "Point", "area", "square", "points", "blob"} <= set(
            restored["restored"]
        )
        skipped = {s["name"]: s["reason"] for s in restored["skipped"]}
        assert set(skipped) == {"lock", "gen"}
        assert "cannot pickle" in skipped["lock"]
        assert "generator" in skipped["gen"]
        assert restored["summary"].startswith(f"restored {len(restored['restored'])} names")
        assert "state ok" in ok(kc, CHECK)["stdout"]
        # What came back can be saved again, and the new definitions still work.
        again = checkpoint_request(kc, "save", "again")
        assert again["status"] == "ok", again
        assert not {s["name"] for s in again["skipped"]}, again


@pytest.mark.parametrize("mode", MODES)
def test_round_trip_with_the_magic(mode, tmp_path):
    with checkpoint_kernel(mode, tmp_path) as (km, kc):
        ok(kc, SETUP)
        out = ok(kc, "%checkpoint save first")["stdout"]
        assert "saved" in out
        assert "'first'" in out
        assert "lock: not saved: unpicklable" in out
        listing = ok(kc, "%checkpoint list")["stdout"]
        assert "* first" in listing
        restart(km, kc, now=False)  # the polite restart: shutdown_request(restart=True), then a new process
        ok(kc, "square = 'something else'")
        out = ok(kc, "%checkpoint restore")["stdout"]
        assert out.startswith("restored ")
        assert "from checkpoint 'first'" in out
        assert "skipped 2" in out
        assert "state ok" in ok(kc, CHECK)["stdout"]
        assert "dropped checkpoint 'first'" in ok(kc, "%checkpoint drop first")["stdout"]
        assert "no checkpoints" in ok(kc, "%checkpoint list")["stdout"]


def test_directory_is_per_kernel_owner_only_and_stable_across_restart(tmp_path):
    with checkpoint_kernel("main", tmp_path) as (km, kc):
        ok(kc, "x = 1")
        first = checkpoint_request(kc, "save", "one")
        directory = first["directory"]
        root = os.path.join(str(tmp_path), "cancelkernel-checkpoints")
        assert os.path.dirname(directory) == root
        assert os.path.basename(directory).startswith(os.path.splitext(os.path.basename(km.connection_file))[0])
        restart(km, kc)
        listed = checkpoint_request(kc, "list")
        assert listed["directory"] == directory
        assert [(c["name"], c["latest"]) for c in listed["checkpoints"]] == [("one", True)]
        for where, _dirs, files in os.walk(directory):
            assert stat.S_IMODE(os.stat(where).st_mode) == 0o700, where
            for f in files:
                assert stat.S_IMODE(os.stat(os.path.join(where, f)).st_mode) == 0o600, f
    with checkpoint_kernel("main", tmp_path) as (km, kc):
        other = checkpoint_request(kc, "list")
        # Another kernel, another directory
        assert other["directory"] != directory
        assert other["checkpoints"] == []


SLOW = """
import os, time
class Slow:
    def __reduce__(self):
        open(MARKER, "w").close()  # the save has reached this variable: the test kills the kernel now
        time.sleep(120)
        return (int, ())
x = "new"
big = os.urandom(3_000_000)
slow = Slow()
"""


@pytest.mark.parametrize("mode", MODES)
def test_kill_9_during_a_save_leaves_the_previous_checkpoint(mode, tmp_path):
    marker = tmp_path / "in-the-middle"
    with checkpoint_kernel(mode, tmp_path / "rt") as (km, kc):
        ok(kc, "x = 'old'\nbig = b'old'")
        assert checkpoint_request(kc, "save")["status"] == "ok"
        ok(kc, f"MARKER = {str(marker)!r}\n" + SLOW)
        kc.execute("%checkpoint save")
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert time.monotonic() < deadline, "the save never reached the slow variable"
            time.sleep(0.01)
        restart(km, kc)  # SIGKILL in the middle of the save
        restored = checkpoint_request(kc, "restore")
        assert restored["status"] == "ok", restored
        assert sorted(restored["restored"]) == ["big", "x"]
        ok(kc, "assert x == 'old' and big == b'old'")


def _corrupt_one(directory: str, var: str) -> None:
    cpath = os.path.join(directory, "default")
    with open(os.path.join(cpath, "manifest.json")) as f:
        manifest = json.load(f)
    entry = next(e for e in manifest["entries"] if e["name"] == var)
    with open(os.path.join(cpath, manifest["data"], entry["file"]), "r+b") as f:
        f.seek(entry["offset"] + entry["size"] // 2)
        f.write(b"\xff\x00\xff\x00")


@pytest.mark.parametrize("mode", MODES)
def test_a_corrupt_variable_file_the_others_come_back(mode, tmp_path):
    with checkpoint_kernel(mode, tmp_path) as (km, kc):
        ok(kc, "a = 1\nbig = bytes(2_000_000)\nsmall = 'text' * 10")
        saved = checkpoint_request(kc, "save")
        _corrupt_one(saved["directory"], "big")
        _corrupt_one(saved["directory"], "small")
        restart(km, kc)
        restored = checkpoint_request(kc, "restore")
        assert restored["status"] == "ok"
        assert restored["restored"] == ["a"]
        skipped = {s["name"]: s for s in restored["skipped"]}
        assert set(skipped) == {"big", "small"}
        assert all(s["stage"] == "restore" and s["reason"].startswith("damaged:") for s in skipped.values())
        ok(kc, "assert a == 1")


@pytest.mark.parametrize("how", ["group-writable", "foreign-owned"])
def test_untrusted_checkpoint_is_refused(how, tmp_path):
    if how == "foreign-owned" and (not hasattr(os, "geteuid") or os.geteuid() != 0):
        pytest.skip("chown to another user needs root")
    with checkpoint_kernel("main", tmp_path) as (km, kc):
        ok(kc, "a = 1\nbig = bytes(1_000_000)")
        saved = checkpoint_request(kc, "save")
        manifest = os.path.join(saved["path"], "manifest.json")
        if how == "group-writable":
            os.chmod(manifest, 0o620)
        else:
            os.chown(manifest, 65534, 65534)
        restart(km, kc)
        refused = checkpoint_request(kc, "restore")
        assert refused["status"] == "error"
        assert refused["ename"] == "UntrustedCheckpoint"
        assert "refusing to restore" in refused["evalue"]
        assert manifest in refused["evalue"]
        assert ("writable by group" if how == "group-writable" else "uid 65534") in refused["evalue"]
        cell = run(kc, "%checkpoint restore")
        assert cell["reply"]["content"]["status"] == "error"
        assert cell["error"]["ename"] == "UntrustedCheckpoint"
        assert len(cell["error"]["traceback"]) == 1  # the reason, not a traceback through the checkpoint code
        assert run(kc, "a")["error"]["ename"] == "NameError"


@contextlib.contextmanager
def small_filesystem(path: Any, size: str) -> Iterator[str]:
    os.makedirs(path)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill up: {mounted.stderr.decode().strip()}")
    try:
        yield str(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_full_disk_fails_the_save_cleanly(tmp_path):
    with (
        small_filesystem(tmp_path / "small-disk", "4m") as disk,
        checkpoint_kernel("main", tmp_path, extra_arguments=[f"--CheckpointSettings.directory={disk}"]) as (km, kc),
    ):
        ok(kc, "a = 1\nb = bytes(1_000_000)")
        assert checkpoint_request(kc, "save")["status"] == "ok"
        ok(kc, "a = 2\nb = bytes(8_000_000)")
        cell = run(kc, "%checkpoint save")
        assert cell["reply"]["content"]["status"] == "error"
        assert cell["error"]["ename"] == "CheckpointWriteError"
        assert "No space left on device" in cell["error"]["evalue"]
        assert "previous checkpoint 'default' is intact" in cell["error"]["evalue"]
        reply = checkpoint_request(kc, "save")
        assert reply["status"] == "error"
        assert reply["ename"] == "CheckpointWriteError"
        restart(km, kc)
        restored = checkpoint_request(kc, "restore")
        assert restored["status"] == "ok"
        assert sorted(restored["restored"]) == ["a", "b"]
        ok(kc, "assert a == 1 and len(b) == 1_000_000")
        # Nothing half-written left
        assert sorted(os.listdir(os.path.join(disk, "default")))[0] != ".manifest.json.tmp"


@pytest.mark.parametrize("mode", MODES)
def test_checkpoint_before_a_cell_marked_risky(mode, tmp_path):
    with checkpoint_kernel(mode, tmp_path) as (km, kc):
        ok(kc, "x = 1")
        ok(kc, "x = 2")  # not marked: no checkpoint
        assert checkpoint_request(kc, "list")["checkpoints"] == []
        reply = ok(kc, "x = 3", metadata={"cancelkernel": {"checkpoint": "before"}})["reply"]
        before = reply["metadata"]["cancelkernel"]["checkpoint"]["before"]
        assert before["status"] == "ok"
        assert before["name"] == "before"
        assert before["names"] == 1
        listed = checkpoint_request(kc, "list")
        assert [c["name"] for c in listed["checkpoints"]] == ["before"]
        restart(km, kc)
        assert checkpoint_request(kc, "restore", "before")["status"] == "ok"
        ok(kc, "assert x == 2")


def test_checkpoint_before_a_budget_cell(tmp_path):
    with checkpoint_kernel("main", tmp_path) as (_km, kc):
        ok(kc, "x = 1")
        ok(kc, "%%budget wall=60 checkpoint=before\nx = 2")
        ok(kc, "%checkpoint restore before")
        ok(kc, "assert x == 1")


@pytest.mark.parametrize("mode", MODES)
def test_autosave_after_successful_cells(mode, tmp_path):
    args = ["--CheckpointSettings.autosave=True", "--CheckpointSettings.autosave_limit=5000000"]
    with checkpoint_kernel(mode, tmp_path, extra_arguments=args) as (km, kc):
        ok(kc, "x = 1")
        assert [c["name"] for c in checkpoint_request(kc, "list")["checkpoints"]] == ["autosave"]
        assert run(kc, "x = 2\nraise ValueError('no autosave after an error')")["reply"]["content"]["status"] == "error"
        ok(kc, "big = bytes(10_000_000)")  # over autosave_limit: skipped quietly, the old one stays
        restart(km, kc)
        restored = checkpoint_request(kc, "restore")
        assert restored["name"] == "autosave"
        assert restored["restored"] == ["x"]
        ok(kc, "assert x == 1")


def test_autosave_is_off_by_default(tmp_path):
    with checkpoint_kernel("main", tmp_path) as (_km, kc):
        ok(kc, "x = 1")
        assert checkpoint_request(kc, "list")["checkpoints"] == []


def test_bad_requests_get_clear_errors(tmp_path):
    with checkpoint_kernel("main", tmp_path) as (_km, kc):
        bad = checkpoint_request(kc, "explode")
        assert bad["status"] == "error"
        assert bad["ename"] == "ValueError"
        assert "save, restore, list, drop" in bad["evalue"]
        bad = checkpoint_request(kc, "save", "../escape")
        assert bad["status"] == "error"
        assert bad["ename"] == "BadCheckpointName"
        assert "path separator" in bad["evalue"]
        bad = checkpoint_request(kc, "drop")
        assert bad["status"] == "error"
        assert "needs the 'name'" in bad["evalue"]
        bad = checkpoint_request(kc, "restore")
        assert bad["status"] == "error"
        assert bad["ename"] == "CheckpointNotFound"
        assert "save one first" in bad["evalue"]
        bad = checkpoint_request(kc, "restore", "nope")
        assert bad["status"] == "error"
        assert bad["ename"] == "CheckpointNotFound"
        assert not os.path.exists(os.path.join(str(tmp_path), "cancelkernel-checkpoints", "escape"))


USAGE_ERRORS = [
    ("%checkpoint", "needs an action"),
    ("%checkpoint bogus", "unknown action 'bogus'"),
    ("%checkpoint drop", "needs the NAME"),
    ("%checkpoint list extra", "too many arguments"),
    ("%checkpoint save a b", "too many arguments"),
    ("%checkpoint save ../x", "path separator"),
]


def test_magic_usage_errors(tmp_path):
    with checkpoint_kernel("main", tmp_path) as (_km, kc):
        for line, message in USAGE_ERRORS:
            cell = run(kc, line)
            assert cell["reply"]["content"]["status"] == "error", line
            assert message in (cell["error"]["evalue"] if cell["error"] else cell["stderr"]), (line, cell)
        assert "%checkpoint save [NAME]" in ok(kc, "%checkpoint help")["stdout"]


@pytest.mark.parametrize("mode", MODES)
def test_restore_on_start_after_restart_kernel(mode, tmp_path):
    # JupyterLab's restart button is restart_kernel(): the new kernel brings back the autosave before its first cell.
    args = ["--CheckpointSettings.autosave=True", "--CheckpointSettings.restore_on_start=latest"]
    with checkpoint_kernel(mode, tmp_path, extra_arguments=args) as (km, kc):
        first = ok(kc, "x = 41")
        assert first["stdout"] == ""  # a fresh kernel with no checkpoint yet says nothing
        ok(kc, "x += 1\nimport threading\nlock = threading.Lock()")
        restart(km, kc)
        back = ok(kc, "print(x)")
        said = back["stdout"]
        assert said.startswith("restore_on_start: restored 2 names from checkpoint 'autosave'"), said
        assert said.endswith("\n42\n"), said
        assert "lock: not saved: unpicklable" in said  # and what was not restored
        assert ok(kc, "print(x)")["stdout"] == "42\n"  # once only


def test_restore_on_start_names_a_checkpoint_and_says_when_it_is_missing(tmp_path):
    args = ["--CheckpointSettings.restore_on_start=mine"]
    with checkpoint_kernel("main", tmp_path, extra_arguments=args) as (km, kc):
        missing = ok(kc, "y = 1")
        assert "no checkpoint named 'mine'" in missing["stderr"]
        assert checkpoint_request(kc, "save", "mine")["status"] == "ok"
        restart(km, kc)
        assert checkpoint_request(kc, "list")["latest"] == "mine"
        assert "restored 1 name from checkpoint 'mine'" in ok(kc, "print(y)")["stdout"]


def test_restore_on_start_refuses_a_bad_value(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cancelkernel",
            "kernel",
            "--CheckpointSettings.restore_on_start=../x",
            "-f",
            str(tmp_path / "k.json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "restore_on_start must be 'off', 'latest' or a checkpoint name" in proc.stderr


def _resident(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the kernel's /proc/<pid>/statm")
def test_memory_prepared_ahead_is_held_filled_by_the_restore_and_given_back_by_a_cell(tmp_path):
    size = 64 << 20  # past glibc's mmap threshold, and HUGE_MIN: prepared
    with checkpoint_kernel("main", tmp_path) as (km, kc):
        ok(kc, f"import os, hashlib\nblob = bytearray(os.urandom({size}))\ndigest = hashlib.sha256(blob).hexdigest()")
        assert checkpoint_request(kc, "save")["status"] == "ok"
        restart(km, kc)  # a fresh kernel on the same checkpoints, as the agent's warm spare is
        pid = km.provisioner.pid
        before = _resident(pid)
        prepared = checkpoint_request(kc, "prepare")
        assert prepared["status"] == "ok", prepared
        assert prepared["prepared"] == size, prepared
        assert "MB of memory faulted in" in prepared["summary"]
        assert _resident(pid) - before >= size * 0.9  # memory prepared ahead is memory the kernel holds
        restored = checkpoint_request(kc, "restore")
        assert restored["status"] == "ok", restored
        assert {"blob", "digest", "os", "hashlib"} <= set(restored["restored"]), restored
        out = ok(kc, "print(type(blob).__name__, len(blob), hashlib.sha256(blob).hexdigest() == digest)")
        assert out["stdout"] == f"bytearray {size} True\n"
        # Prepared again, then a cell runs instead of a restore: the memory is given back before the cell.
        with_blob = _resident(pid)
        assert checkpoint_request(kc, "prepare")["prepared"] == size
        assert _resident(pid) - with_blob >= size * 0.9
        ok(kc, "x = 1")
        assert _resident(pid) - with_blob < size * 0.5
        # The restored bytearray is the kernel's own: dropping the checkpoint leaves it whole and writable.
        assert checkpoint_request(kc, "drop", "default")["status"] == "ok"
        out = ok(kc, "blob[0] ^= 1; blob[0] ^= 1\nprint(hashlib.sha256(blob).hexdigest() == digest)")
        assert out["stdout"] == "True\n"
