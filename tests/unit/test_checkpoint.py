"""Checkpoints, the pure logic: save / restore / list / drop on a namespace dict."""

from __future__ import annotations

import array
import errno
import json
import linecache
import os
import pickle
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from cancelkernel import checkpoint
from cancelkernel.checkpoint import (
    BadCheckpointName,
    CheckpointNotFound,
    CheckpointTooLarge,
    CheckpointWriteError,
    CorruptCheckpoint,
    UntrustedCheckpoint,
    store,
)
from cancelkernel.checkpoint import buffers as cbuffers
from cancelkernel.checkpoint import pickling as cpickle

_cells = iter(range(1, 10**9))


def cell(ns: dict, source: str) -> None:
    """Run source the way IPython runs a cell: its text kept in linecache under a file name of its own."""
    source = textwrap.dedent(source)
    filename = f"<test-cell-{next(_cells)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile(source, filename, "exec"), ns)


def fresh() -> dict:
    return {"__name__": "__main__"}


def data_dir(directory: str, name: str = "default") -> str:
    cpath = os.path.join(directory, name)
    with open(os.path.join(cpath, "manifest.json")) as f:
        return os.path.join(cpath, json.load(f)["data"])


def entry(directory: str, var: str, name: str = "default") -> dict:
    with open(os.path.join(directory, name, "manifest.json")) as f:
        return next(e for e in json.load(f)["entries"] if e["name"] == var)


@pytest.fixture
def cdir(tmp_path) -> str:
    return str(tmp_path / "checkpoints")


# -- round trips --------------------------------------------------------------------


def test_data_round_trip(cdir):
    ns = fresh()
    ns.update(
        n=42,
        f=1.5,
        s="héllo",
        t=(1, "a", None),
        l=[1, [2, 3], {"k": {4, 5}}],
        d={"a": 1, ("x", 2): b"raw"},
        fz=frozenset({1, 2}),
        small_bytes=b"abc",
        big_bytes=os.urandom(3_000_000),
        ba=bytearray(os.urandom(1_000_000)),
        arr=array.array("d", [0.5 * i for i in range(200_000)]),
        mv=memoryview(bytearray(range(256))).cast("B"),
        mv2d=memoryview(bytearray(range(24))).cast("B", (4, 6)),
        ro=memoryview(b"readonly"),
        records=[{"id": i, "name": f"r{i}"} for i in range(10_000)],
    )
    manifest = checkpoint.save(ns, cdir)
    assert not manifest.skipped
    out = fresh()
    report = checkpoint.restore(out, cdir)
    assert sorted(report.restored) == sorted(k for k in ns if k != "__name__")
    assert not report.skipped
    for key in ("n", "f", "s", "t", "l", "d", "fz", "small_bytes", "big_bytes", "ba", "arr", "records"):
        assert out[key] == ns[key], key
        assert type(out[key]) is type(ns[key]), key
    assert out["arr"].typecode == "d"
    assert out["mv"].tolist() == ns["mv"].tolist()
    assert not out["mv"].readonly
    assert out["mv2d"].shape == (4, 6)
    assert out["mv2d"].tolist() == ns["mv2d"].tolist()
    assert out["ro"].readonly
    assert out["ro"].tobytes() == b"readonly"
    # Large buffers get files of their own; small values share one.
    files = sorted(os.listdir(data_dir(cdir)))
    assert "small.pkl" in files
    assert len(files) >= 4


def test_prepare_imports_what_the_values_need_and_unpickles_nothing(cdir, tmp_path, monkeypatch):
    # The spare kernel's step before a restore: the modules of the saved objects, even nested ones, get imported.
    (tmp_path / "ck_prep_things.py").write_text("class Thing:\n    def __init__(self, n):\n        self.n = n\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import ck_prep_things

    ns = fresh()
    ns.update(rows={"a": [ck_prep_things.Thing(1)]}, it=ck_prep_things.Thing(2), js=json)
    checkpoint.save(ns, cdir)
    assert "ck_prep_things" in entry(cdir, "rows")["imports"]
    del sys.modules["ck_prep_things"]
    name, imported, failed = checkpoint.prepare(cdir)
    assert name == "default"
    assert failed == []
    assert set(imported) == {"ck_prep_things", "json"}
    assert "ck_prep_things" in sys.modules
    os.chmod(os.path.join(cdir, "default"), 0o777)  # an untrusted checkpoint: refused before anything is imported
    del sys.modules["ck_prep_things"]
    with pytest.raises(checkpoint.UntrustedCheckpoint):
        checkpoint.prepare(cdir)
    assert "ck_prep_things" not in sys.modules


def test_shared_value_of_two_names_comes_back_as_two_copies(cdir):
    ns = fresh()
    ns["a"] = [1, 2]
    ns["b"] = ns["a"]
    checkpoint.save(ns, cdir)
    out = fresh()
    checkpoint.restore(out, cdir)
    assert out["a"] == out["b"] == [1, 2]
    assert out["a"] is not out["b"]  # documented: one pickle per variable


def test_modules_come_back_as_imports_with_their_aliases(cdir):
    ns = fresh()
    cell(
        ns,
        """
        import collections as coll
        import json
        from os import path as p
        from xml.etree import ElementTree as ET
        import xml.dom.minidom
        """,
    )
    checkpoint.save(ns, cdir)
    statements = {n: entry(cdir, n)["statement"] for n in ("coll", "json", "p", "ET", "xml")}
    assert statements == {
        "coll": "import collections as coll",
        "json": "import json",
        "p": "from os import path as p",
        "ET": "from xml.etree import ElementTree as ET",
        "xml": "import xml",
    }
    out = fresh()
    checkpoint.restore(out, cdir)
    assert out["coll"] is sys.modules["collections"]
    assert out["p"] is os.path
    assert out["ET"] is sys.modules["xml.etree.ElementTree"]
    assert out["xml"] is sys.modules["xml"]


def test_a_module_not_importable_by_name_is_skipped(cdir):
    import types

    ns = fresh()
    ns["fake"] = types.ModuleType("not_a_real_module_xyz")
    manifest = checkpoint.save(ns, cdir)
    assert [s.name for s in manifest.skipped] == ["fake"]
    assert "not importable by name" in manifest.skipped[0].reason


def test_cell_functions_classes_and_instances(cdir):
    ns = fresh()
    cell(
        ns,
        """
        import functools
        from dataclasses import dataclass

        class Base:
            def __init__(self, x):
                self.x = x
            def double(self):
                return self.x * 2

        class Child(Base):
            scale = 3
            def triple(self):
                return self.x * self.scale

        @dataclass
        class Point:
            x: int
            y: int = 0

        class Outer:
            class Inner:
                def value(self):
                    return "inner"

        def make(x):
            return Child(x)

        @functools.lru_cache(maxsize=None)
        def cached(n):
            return n + 1

        async def coro_fn():
            return 1

        square = lambda v: v * v
        alias = make
        obj = Child(7)
        pts = [Point(1, 2), Point(3)]
        inner = Outer.Inner()
        callbacks = {"make": make, "cls": Child}
        """,
    )
    manifest = checkpoint.save(ns, cdir)
    assert {s.name for s in manifest.skipped} == set(), manifest.summary()
    kinds = {n: entry(cdir, n)["kind"] for n in ("Base", "make", "square", "obj", "cached")}
    assert kinds == {"Base": "class", "make": "function", "square": "function", "obj": "value", "cached": "function"}
    out = fresh()
    report = checkpoint.restore(out, cdir)
    assert not report.skipped, report.summary()
    assert out["make"](2).triple() == 6
    assert out["obj"].double() == 14
    assert out["obj"].triple() == 21
    assert type(out["obj"]) is out["Child"]
    assert issubclass(out["Child"], out["Base"])
    assert out["pts"] == [out["Point"](1, 2), out["Point"](3, 0)]
    assert out["inner"].value() == "inner"
    assert type(out["inner"]) is out["Outer"].Inner
    assert out["square"](5) == 25
    assert out["alias"] is out["make"]
    assert out["callbacks"]["make"] is out["make"]
    assert out["callbacks"]["cls"] is out["Child"]
    assert out["cached"](1) == 2
    # What came back from source can be saved again (its source is still findable).
    again = checkpoint.save(out, cdir, "again")
    assert not again.skipped, again.summary()


def test_definitions_restore_in_dependency_order(cdir):
    ns = fresh()
    cell(ns, "class Base:\n    tag = 'base'\n")
    cell(ns, "class Child(Base):\n    pass\n")
    # Namespace order puts Child before Base: restore must retry until Base exists.
    reordered = fresh()
    reordered["Child"] = ns["Child"]
    reordered["Base"] = ns["Base"]
    reordered["c"] = ns["Child"]()
    checkpoint.save(reordered, cdir)
    out = fresh()
    report = checkpoint.restore(out, cdir)
    assert not report.skipped, report.summary()
    assert out["c"].tag == "base"
    assert issubclass(out["Child"], out["Base"])


def test_definition_needing_data_comes_back_after_the_data(cdir):
    ns = fresh()
    cell(ns, "SCALE = 4\nclass Scaled:\n    factor = SCALE\n    def get(self):\n        return self.factor\n")
    checkpoint.save(ns, cdir)
    out = fresh()
    report = checkpoint.restore(out, cdir)
    assert not report.skipped, report.summary()
    assert out["Scaled"]().get() == 4


def test_function_alias_whose_original_name_was_rebound(cdir):
    ns = fresh()
    cell(ns, "def f():\n    return 'f'\ng = f\nf = 5\n")
    checkpoint.save(ns, cdir)
    out = fresh()
    checkpoint.restore(out, cdir)
    assert out["g"]() == "f"
    assert out["f"] == 5


def test_closures_exec_functions_and_redefined_classes_are_skipped_with_reasons(cdir):
    ns = fresh()
    cell(
        ns,
        """
        def adder(n):
            def add(x):
                return x + n
            return add
        add3 = adder(3)
        class Old:
            def m(self):
                return 1
        stale = Old()
        """,
    )
    cell(ns, "class Old:\n    def m(self):\n        return 2\n")
    exec("def made_by_exec():\n    return 1\n", ns)
    cell(ns, "pair = [lambda: 1, lambda: 2]\n")
    manifest = checkpoint.save(ns, cdir)
    reasons = {s.name: s.reason for s in manifest.skipped}
    assert set(reasons) == {"add3", "stale", "made_by_exec", "pair"}, manifest.summary()
    assert "closure" in reasons["add3"]
    assert "redefined" in reasons["stale"]
    assert "source is not available" in reasons["made_by_exec"]
    assert "unpicklable" in reasons["pair"]


def test_unpicklable_objects_are_skipped_and_reported(cdir):
    import threading

    ns = fresh()
    ns["lock"] = threading.Lock()
    ns["gen"] = (i for i in range(3))
    ns["ok"] = 1
    manifest = checkpoint.save(ns, cdir)
    reasons = {s.name: s.reason for s in manifest.skipped}
    assert set(reasons) == {"lock", "gen"}
    assert "cannot pickle" in reasons["lock"]
    assert "lock" in reasons["lock"]
    assert "generator" in reasons["gen"]
    assert entry(cdir, "lock")["status"] == "skipped"
    assert "unpicklable" in entry(cdir, "lock")["reason"]
    out = fresh()
    report = checkpoint.restore(out, cdir)
    assert report.restored == ["ok"]
    assert {s.name for s in report.skipped} == {"lock", "gen"}
    assert all(s.stage == "save" for s in report.skipped)
    text = report.summary()
    assert "restored 1 name from" in text
    assert "skipped 2" in text
    assert "lock: not saved: unpicklable" in text


def test_ipython_names_are_left_out():
    hidden = {"open": open, "In": [], "Out": {}}
    ns = {
        "In": [], "Out": {}, "_": 1, "__": 2, "___": 3, "_i": "", "_ii": "", "_iii": "", "_i7": "", "_7": 0,
        "_oh": {}, "_ih": [], "_dh": [], "get_ipython": None, "exit": None, "quit": None,
        "__builtins__": {}, "__name__": "__main__", "__doc__": None,
        "open": open, "x": 1, "_private": 2, "_i_am_user": 3,
    }  # fmt: skip
    names = [n for n, _ in checkpoint.user_items(ns, hidden)]
    assert names == ["x", "_private", "_i_am_user"]
    ns["open"] = "my own open"
    assert "open" in [n for n, _ in checkpoint.user_items(ns, hidden)]


# -- limits -------------------------------------------------------------------------


def test_variables_over_the_size_limit_are_skipped(cdir):
    ns = fresh()
    ns.update(buf=bytes(10_000), many=list(range(5_000)), small=b"x")
    manifest = checkpoint.save(ns, cdir, size_limit=4_000)
    reasons = {s.name: s.reason for s in manifest.skipped}
    assert set(reasons) == {"buf", "many"}
    assert all("over the size limit" in r and "size_limit" in r for r in reasons.values())
    assert os.listdir(data_dir(cdir)) == ["small.pkl"]  # no partial file left for the skipped ones
    out = fresh()
    assert checkpoint.restore(out, cdir).restored == ["small"]


def test_total_limit_abandons_the_save_and_keeps_the_previous(cdir):
    ns = fresh()
    ns["a"] = 1
    checkpoint.save(ns, cdir, "auto")
    ns["big"] = bytes(2_000_000)
    with pytest.raises(CheckpointTooLarge):
        checkpoint.save(ns, cdir, "auto", total_limit=1_000_000)
    ns["big"] = list(range(300_000))  # not a buffer: caught while pickling
    with pytest.raises(CheckpointTooLarge):
        checkpoint.save(ns, cdir, "auto", total_limit=1_000_000)
    out = fresh()
    assert checkpoint.restore(out, cdir, "auto").restored == ["a"]
    assert len([d for d in os.listdir(os.path.join(cdir, "auto")) if d.startswith("data-")]) == 1


# -- names --------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["", "a/b", "../x", "..", "a\\b", ".hidden", "x" * 101, "sp ace", "nul\0"])
def test_bad_names_are_refused(cdir, bad):
    ns = fresh()
    ns["a"] = 1
    with pytest.raises(BadCheckpointName) as info:
        checkpoint.save(ns, cdir, bad)
    assert "checkpoint name" in str(info.value)
    with pytest.raises(BadCheckpointName):
        checkpoint.restore(ns, cdir, bad) if os.path.isdir(cdir) else checkpoint.validate_name(bad)
    with pytest.raises(BadCheckpointName):
        checkpoint.drop(cdir, bad)
    assert not os.path.exists(os.path.join(os.path.dirname(cdir), "x"))


# -- files: modes, atomicity ---------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX modes")
def test_files_are_owner_only_even_with_a_permissive_umask(cdir):
    old = os.umask(0)
    try:
        ns = fresh()
        ns.update(big=bytes(1_000_000), small=1)
        checkpoint.save(ns, cdir)
    finally:
        os.umask(old)
    for root, _dirs, files in os.walk(cdir):
        assert stat.S_IMODE(os.stat(root).st_mode) == 0o700, root
        for f in files:
            assert stat.S_IMODE(os.stat(os.path.join(root, f)).st_mode) == 0o600, f


def test_a_loose_directory_we_own_is_tightened_on_save(cdir):
    os.makedirs(cdir)
    os.chmod(cdir, 0o777)
    ns = fresh()
    ns["a"] = 1
    checkpoint.save(ns, cdir)
    assert stat.S_IMODE(os.stat(cdir).st_mode) == 0o700


def test_write_error_fails_cleanly_and_keeps_the_previous(cdir, monkeypatch):
    ns = fresh()
    ns.update(a=1, big=os.urandom(2_000_000))
    checkpoint.save(ns, cdir)
    before = os.listdir(os.path.join(cdir, "default"))
    ns.update(a=2, big=os.urandom(3_000_000))
    real_write = os.write

    def full(fd, data):
        if memoryview(data).nbytes > 100_000:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(store.os, "write", full)
    with pytest.raises(CheckpointWriteError) as info:
        checkpoint.save(ns, cdir)
    monkeypatch.undo()
    text = str(info.value)
    assert "No space left on device" in text
    assert "previous checkpoint 'default' is intact" in text
    assert sorted(os.listdir(os.path.join(cdir, "default"))) == sorted(before)  # the failed save left nothing behind
    out = fresh()
    checkpoint.restore(out, cdir)
    assert out["a"] == 1
    assert len(out["big"]) == 2_000_000


def test_leftovers_of_a_killed_save_are_ignored_then_removed(cdir):
    ns = fresh()
    ns["a"] = 1
    checkpoint.save(ns, cdir)
    cpath = os.path.join(cdir, "default")
    os.mkdir(os.path.join(cpath, "data-killed"), 0o700)
    with open(os.path.join(cpath, ".manifest.json.tmp-dead"), "w") as f:
        f.write("{half")
    out = fresh()
    assert checkpoint.restore(out, cdir).restored == ["a"]
    checkpoint.save(ns, cdir)
    assert not [e for e in os.listdir(cpath) if e in ("data-killed", ".manifest.json.tmp-dead")]


KILLED_SAVE = r"""
import os, sys, time
from cancelkernel import checkpoint
directory, marker = sys.argv[1], sys.argv[2]

class Slow:
    def __reduce__(self):
        open(marker, "w").close()   # tell the test we are in the middle of the save
        time.sleep(60)
        return (int, ())

ns = {"__name__": "__main__", "a": "new", "big": os.urandom(5_000_000), "slow": Slow(), "z": "new"}
checkpoint.save(ns, directory)
"""


def test_kill_9_during_a_save_leaves_the_previous_checkpoint_loadable(cdir, tmp_path):
    ns = fresh()
    ns.update(a="old", z="old", big=b"old")
    checkpoint.save(ns, cdir)
    marker = tmp_path / "in-the-middle"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_SAVE, cdir, str(marker)])
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, "the saving process ended early"
            assert time.monotonic() < deadline, "the save never reached the slow variable"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    cpath = os.path.join(cdir, "default")
    assert len([d for d in os.listdir(cpath) if d.startswith("data-")]) == 2  # the killed save's data, never committed
    out = fresh()
    report = checkpoint.restore(out, cdir)
    assert (out["a"], out["z"], out["big"]) == ("old", "old", b"old")
    assert not report.skipped


# -- trust --------------------------------------------------------------------------


def _saved(cdir: str) -> str:
    ns = fresh()
    ns.update(a=1, big=bytes(1_000_000))
    checkpoint.save(ns, cdir)
    return data_dir(cdir)


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX ownership")
@pytest.mark.parametrize("which", ["root", "checkpoint", "data", "manifest", "small", "big"])
def test_group_writable_checkpoint_is_refused(cdir, which):
    data = _saved(cdir)
    big = next(f for f in os.listdir(data) if f.startswith("v"))
    path = {
        "root": cdir,
        "checkpoint": os.path.join(cdir, "default"),
        "data": data,
        "manifest": os.path.join(cdir, "default", "manifest.json"),
        "small": os.path.join(data, "small.pkl"),
        "big": os.path.join(data, big),
    }[which]
    os.chmod(path, os.stat(path).st_mode | stat.S_IWGRP)
    out = fresh()
    with pytest.raises(UntrustedCheckpoint) as info:
        checkpoint.restore(out, cdir)
    text = str(info.value)
    assert "refusing to restore" in text
    assert "writable by group" in text
    assert path in text
    assert "chmod go-w" in text
    # Nothing loaded
    assert "a" not in out
    assert "big" not in out


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another user needs root")
@pytest.mark.parametrize("which", ["checkpoint", "manifest", "big"])
def test_foreign_owned_checkpoint_is_refused(cdir, which):
    data = _saved(cdir)
    big = next(f for f in os.listdir(data) if f.startswith("v"))
    path = {
        "checkpoint": os.path.join(cdir, "default"),
        "manifest": os.path.join(cdir, "default", "manifest.json"),
        "big": os.path.join(data, big),
    }[which]
    os.chown(path, 65534, 65534)
    out = fresh()
    with pytest.raises(UntrustedCheckpoint) as info:
        checkpoint.restore(out, cdir)
    assert "uid 65534" in str(info.value)
    assert "not by you" in str(info.value)
    assert "a" not in out


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="symlinks")
def test_symlinked_variable_file_is_refused(cdir, tmp_path):
    data = _saved(cdir)
    big = next(f for f in os.listdir(data) if f.startswith("v"))
    elsewhere = tmp_path / "elsewhere.pkl"
    elsewhere.write_bytes(pickle.dumps(b"planted"))
    os.unlink(os.path.join(data, big))
    os.symlink(elsewhere, os.path.join(data, big))
    with pytest.raises(UntrustedCheckpoint) as info:
        checkpoint.restore(fresh(), cdir)
    assert "not a regular file" in str(info.value)


# -- damage -------------------------------------------------------------------------


def test_one_corrupt_variable_file_the_others_come_back(cdir):
    ns = fresh()
    ns.update(a=1, b="two", big1=os.urandom(1_000_000), big2=os.urandom(1_000_000), big3=os.urandom(1_000_000))
    checkpoint.save(ns, cdir)
    data = data_dir(cdir)
    e1, e2, e3, eb = (entry(cdir, n) for n in ("big1", "big2", "big3", "b"))
    with open(os.path.join(data, e1["file"]), "r+b") as f:  # one flipped byte in the middle
        f.seek(500_000)
        byte = f.read(1)
        f.seek(500_000)
        f.write(bytes([byte[0] ^ 0xFF]))
    with open(os.path.join(data, e2["file"]), "r+b") as f:  # truncated
        f.truncate(1000)
    os.unlink(os.path.join(data, e3["file"]))  # gone
    with open(os.path.join(data, "small.pkl"), "r+b") as f:  # garbage over one small value
        f.seek(eb["offset"])
        f.write(b"\x00" * eb["size"])
    out = fresh()
    report = checkpoint.restore(out, cdir)
    assert report.restored == ["a"]
    assert out["a"] == 1
    reasons = {s.name: s.reason for s in report.skipped}
    assert set(reasons) == {"big1", "big2", "big3", "b"}
    assert all(
        r.startswith("damaged:") and s.stage == "restore"
        for r, s in zip(reasons.values(), report.skipped, strict=False)
    )
    assert "checksum" in reasons["big1"]
    assert "truncated" in reasons["big2"]
    assert "missing" in reasons["big3"]
    assert "not restored: damaged" in report.summary()


def test_large_buffers_leave_the_stream_are_checked_per_chunk_and_come_back(cdir, monkeypatch):
    monkeypatch.setattr(cbuffers, "CHUNK", 1 << 20)  # several chunks without hundreds of MB
    monkeypatch.setattr(cbuffers, "STEP", 256 << 10)  # and several read-and-check steps in each
    ns = fresh()
    ns.update(
        whole=bytearray(os.urandom(3 << 20)),
        raw=os.urandom(2 << 20),
        numbers=array.array("d", range(400_000)),
        view=memoryview(bytearray(os.urandom(2 << 20))),
        nested={"k": bytearray(b"x" * (2 << 20))},  # inside a container: stays in the stream
    )
    checkpoint.save(ns, cdir)
    for name in ("whole", "numbers", "view"):
        e = entry(cdir, name)
        assert e["layout"] == 2, e
        assert len(e["buffers"]) == 1, e
        assert e["buffers"][0]["offset"] % 4096 == 0, e
        assert e["stream"] < 4096
        assert len(e["buffers"][0]["chunks"]) >= 2
    assert entry(cdir, "whole")["buffers"][0]["copy"] is True
    assert "copy" not in entry(cdir, "view")["buffers"][0]
    # Bytes, and buffers inside containers: in the stream, read straight into their objects
    for name in ("raw", "nested"):
        e = entry(cdir, name)
        assert e["buffers"] == []
        assert e["stream"] == e["size"]
        assert len(e["chunks"]) >= 2
    out = fresh()
    report = checkpoint.restore(out, cdir)
    assert not report.skipped
    for name in ("whole", "raw", "numbers", "nested"):
        assert type(out[name]) is type(ns[name]), name
        assert out[name] == ns[name], name
    assert out["view"].tobytes() == ns["view"].tobytes()
    assert not out["view"].readonly
    out["view"][0] = (out["view"][0] + 1) % 256  # copy-on-write: the checkpoint itself is not changed
    again = fresh()
    checkpoint.restore(again, cdir)
    assert again["view"].tobytes() == ns["view"].tobytes()


def test_damage_to_an_out_of_band_buffer_is_found_before_unpickling(cdir, monkeypatch):
    monkeypatch.setattr(cbuffers, "CHUNK", 1 << 20)
    monkeypatch.setattr(cbuffers, "STEP", 256 << 10)
    ns = fresh()
    ns.update(
        flipped=bytearray(os.urandom(3 << 20)), cut=bytearray(os.urandom(3 << 20)), outside=bytearray(2 << 20), fine=1
    )
    checkpoint.save(ns, cdir)
    data = data_dir(cdir)
    flipped = entry(cdir, "flipped")
    with open(os.path.join(data, flipped["file"]), "r+b") as f:
        f.seek(flipped["buffers"][0]["offset"] + (2 << 20) + 7)  # in the third chunk
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 1]))
    with open(os.path.join(data, entry(cdir, "cut")["file"]), "r+b") as f:
        f.truncate(4 << 10)
    manifest_path = os.path.join(cdir, "default", "manifest.json")
    with open(manifest_path) as f:
        manifest = json.load(f)
    outside = next(e for e in manifest["entries"] if e["name"] == "outside")
    outside["buffers"][0]["size"] = outside["size"] * 2
    os.chmod(manifest_path, 0o600)
    with open(manifest_path, "w") as f:
        json.dump(manifest, f)
    out = fresh()
    report = checkpoint.restore(out, cdir)
    reasons = {s.name: s.reason for s in report.skipped}
    assert report.restored == ["fine"]
    assert set(reasons) == {"flipped", "cut", "outside"}
    assert "checksum" in reasons["flipped"]
    assert "truncated" in reasons["cut"]
    assert "outside its file" in reasons["outside"]


def test_a_damaged_manifest_is_reported(cdir):
    _saved(cdir)
    with open(os.path.join(cdir, "default", "manifest.json"), "w") as f:
        f.write('{"format": "cancelkernel-checkpoint", "version": 1, "entr')
    with pytest.raises(CorruptCheckpoint) as info:
        checkpoint.restore(fresh(), cdir)
    assert "damaged" in str(info.value)
    assert "%checkpoint list" in str(info.value)
    infos = checkpoint.list_checkpoints(cdir)
    assert infos[0].problem
    assert "damaged" in infos[0].problem


def test_unpickling_error_of_one_value_is_reported(cdir):
    ns = fresh()
    cell(ns, "class Breaks:\n    def __reduce__(self):\n        return (int, ('not a number',))\n")
    ns["bad"] = ns["Breaks"]()
    ns["good"] = 2
    checkpoint.save(ns, cdir)
    out = fresh()
    report = checkpoint.restore(out, cdir)
    assert "good" in report.restored
    assert out["good"] == 2
    assert [s.name for s in report.skipped] == ["bad"]
    assert "ValueError" in report.skipped[0].reason


# -- several checkpoints -------------------------------------------------------------


def test_named_checkpoints_latest_list_and_drop(cdir):
    ns = fresh()
    ns["v"] = "first"
    checkpoint.save(ns, cdir, "one")
    time.sleep(0.01)
    ns["v"] = "second"
    checkpoint.save(ns, cdir, "two")
    infos = checkpoint.list_checkpoints(cdir)
    assert [(i.name, i.latest) for i in infos] == [("two", True), ("one", False)]
    assert infos[0].names == 1
    assert infos[0].problem is None
    out = fresh()
    assert checkpoint.restore(out, cdir).name == "two"
    assert out["v"] == "second"
    checkpoint.restore(out, cdir, "one")
    assert out["v"] == "first"
    checkpoint.drop(cdir, "two")
    assert [(i.name, i.latest) for i in checkpoint.list_checkpoints(cdir)] == [("one", True)]
    assert checkpoint.restore(fresh(), cdir).name == "one"
    with pytest.raises(CheckpointNotFound) as info:
        checkpoint.drop(cdir, "two")
    assert "available: one" in str(info.value)
    with pytest.raises(CheckpointNotFound):
        checkpoint.restore(fresh(), cdir, "two")
    os.unlink(os.path.join(cdir, ".latest"))  # the mark lost: the newest manifest wins
    assert checkpoint.restore(fresh(), cdir).name == "one"
    checkpoint.drop(cdir, "one")
    assert checkpoint.list_checkpoints(cdir) == []
    with pytest.raises(CheckpointNotFound) as info:
        checkpoint.restore(fresh(), cdir)
    assert "save one first" in str(info.value)


def test_restore_from_a_directory_that_does_not_exist(tmp_path):
    with pytest.raises(CheckpointNotFound):
        checkpoint.restore(fresh(), str(tmp_path / "nowhere"))
    assert checkpoint.list_checkpoints(str(tmp_path / "nowhere")) == []


def test_plain_pickle_load_of_a_namespace_reference_explains_itself(cdir):
    ns = fresh()
    cell(ns, "class K:\n    pass\nk = K()\n")
    checkpoint.save(ns, cdir)
    e = entry(cdir, "k")
    with open(os.path.join(data_dir(cdir), e["file"]), "rb") as f:
        f.seek(e["offset"])
        blob = f.read(e["size"])
    with pytest.raises(pickle.UnpicklingError, match="namespace"):
        pickle.loads(blob)


def test_value_writer_counts_and_spills():
    budget = cpickle.Budget(None)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        w = cpickle.ValueWriter(os.path.join(d, "v.pkl"), 10**9, budget)
        w.write(b"x" * 10)
        assert not w.spilled
        assert w.size == 10
        w.write(memoryview(bytearray(cpickle.SMALL)))
        assert w.spilled
        w.finish()
        assert os.path.getsize(os.path.join(d, "v.pkl")) == 10 + cpickle.SMALL


def test_the_sentences_count_in_the_singular_and_the_plural() -> None:
    from cancelkernel.checkpoint.model import Manifest, RestoreReport
    from cancelkernel.words import plural

    assert [plural(n, "name") for n in (0, 1, 2)] == ["0 names", "1 name", "2 names"]
    assert plural(1, "process") == "1 process"
    assert plural(3, "process") == "3 processes"
    one = Manifest(name="c", path="/p", saved=0.0, entries=[{"name": "x", "status": "saved"}], seconds=0.01, bytes=10)
    assert one.summary().startswith("saved 1 name to checkpoint 'c'"), one.summary()
    two = RestoreReport(name="c", path="/p", saved=0.0, restored=["x", "y"])
    assert two.summary().startswith("restored 2 names from checkpoint 'c'"), two.summary()
    assert RestoreReport(name="c", path="/p", saved=0.0, restored=["x"]).summary().startswith("restored 1 name from")
