"""Memory prepared ahead of a restore (checkpoint/prepared.py): filled with the same bytes, given back when not used."""

from __future__ import annotations

import array
import ctypes
import errno
import json
import os
import sys

import pytest

from cancelkernel import checkpoint
from cancelkernel.checkpoint import buffers as cbuffers
from cancelkernel.checkpoint import prepared
from cancelkernel.checkpoint.prepared import PreparedMemory
from cancelkernel.checkpoint.settings import CheckpointSettings
from cancelkernel.checkpoint.shell import ShellCheckpoints, handle_checkpoint_request

MB = 1 << 20


class Recording(PreparedMemory):
    """PreparedMemory that remembers what it handed to the restore."""

    def __init__(self) -> None:
        super().__init__()
        self.taken: list[bytearray | None] = []

    def take(self, length: int) -> bytearray | None:
        got = super().take(length)
        self.taken.append(got)
        return got


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prepared sizes, chunks and read steps of a few MB, so several of each without hundreds of MB."""
    monkeypatch.setattr(prepared, "HUGE_MIN", 2 * MB)
    monkeypatch.setattr(cbuffers, "CHUNK", 1 * MB)
    monkeypatch.setattr(cbuffers, "STEP", 256 << 10)


@pytest.fixture
def cdir(tmp_path) -> str:
    return str(tmp_path / "checkpoints")


def namespace() -> dict:
    return {
        "__name__": "__main__",
        "whole": bytearray(os.urandom(5 * MB + 123)),
        "other": bytearray(os.urandom(3 * MB)),
        "tiny": bytearray(os.urandom(MB + 1)),  # out of band, below the prepared size
        "numbers": array.array("d", range(300_000)),  # a view of the map, never prepared
        "n": 7,
    }


def test_a_restore_fills_the_prepared_bytearrays_with_the_saved_bytes(cdir, small):
    ns = namespace()
    checkpoint.save(ns, cdir)
    memory = Recording()
    name, _, _ = checkpoint.prepare(cdir, memory=memory, memory_limit=1 << 30)
    assert name == "default"
    assert memory.held == len(ns["whole"]) + len(ns["other"])
    assert memory.note == ""
    out = {"__name__": "__main__"}
    report = checkpoint.restore(out, cdir, memory=memory)
    assert not report.skipped
    assert set(report.restored) == {"whole", "other", "tiny", "numbers", "n"}
    for var in ("whole", "other", "tiny", "numbers", "n"):
        assert type(out[var]) is type(ns[var]), var
        assert out[var] == ns[var], var
    used = [b for b in memory.taken if b is not None]
    assert any(out["whole"] is b for b in used)
    assert any(out["other"] is b for b in used)
    assert memory.held == 0
    out["whole"][:3] = b"abc"  # its own memory: writable, and the checkpoint is not changed
    again = {"__name__": "__main__"}
    checkpoint.restore(again, cdir)
    assert again["whole"] == ns["whole"]


def test_a_checkpoint_dropped_after_the_restore_leaves_the_restored_values_whole(cdir, small):
    ns = namespace()
    checkpoint.save(ns, cdir)
    memory = PreparedMemory()
    checkpoint.prepare(cdir, memory=memory, memory_limit=1 << 30)
    out = {"__name__": "__main__"}
    checkpoint.restore(out, cdir, memory=memory)
    checkpoint.drop(cdir, "default")
    assert checkpoint.list_checkpoints(cdir) == []
    assert not os.path.exists(os.path.join(cdir, "default"))
    assert out["whole"] == ns["whole"]
    assert out["numbers"] == ns["numbers"]


def test_damage_is_found_in_prepared_memory_too_and_it_is_given_back(cdir, small):
    ns = namespace()
    checkpoint.save(ns, cdir)
    with open(os.path.join(cdir, "default", "manifest.json")) as f:
        manifest = json.load(f)
    e = next(e for e in manifest["entries"] if e["name"] == "whole")
    with open(os.path.join(cdir, "default", manifest["data"], e["file"]), "r+b") as f:
        f.seek(e["buffers"][0]["offset"] + 3 * MB + 5)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 1]))
    memory = PreparedMemory()
    checkpoint.prepare(cdir, memory=memory, memory_limit=1 << 30)
    out = {"__name__": "__main__"}
    report = checkpoint.restore(out, cdir, memory=memory)
    assert [s.name for s in report.skipped] == ["whole"]
    assert "checksum" in report.skipped[0].reason
    assert out["other"] == ns["other"]
    assert memory.held == 0


def test_memory_not_used_by_the_restore_is_given_back(cdir, small):
    checkpoint.save(namespace(), cdir)
    memory = PreparedMemory()
    checkpoint.prepare(cdir, memory=memory, memory_limit=1 << 30)
    assert memory.held > 0
    # A new save: the restore needs other sizes now.
    checkpoint.save({"__name__": "__main__", "other_size": bytearray(7 * MB)}, cdir)
    out = {"__name__": "__main__"}
    checkpoint.restore(out, cdir, memory=memory)
    assert out["other_size"] == bytearray(7 * MB)
    assert memory.held == 0
    checkpoint.prepare(cdir, memory=memory, memory_limit=1 << 30)
    with pytest.raises(checkpoint.CheckpointNotFound):
        checkpoint.restore({}, cdir, "no-such", memory=memory)
    assert memory.held == 0  # given back even when the restore fails


def test_fill_keeps_what_is_asked_again_and_stays_within_its_limit(small, monkeypatch):
    faulted: list[int] = []
    real = prepared.fault_in
    monkeypatch.setattr(prepared, "fault_in", lambda own: (faulted.append(len(own)), real(own)))
    memory = PreparedMemory()
    assert memory.fill([3 * MB, 4 * MB, MB], 1 << 30) == 7 * MB  # MB: below HUGE_MIN, not worth it
    assert sorted(faulted) == [3 * MB, 4 * MB]
    # The same sizes again: nothing new to fault in.
    assert memory.fill([4 * MB, 3 * MB], 1 << 30) == 7 * MB
    assert len(faulted) == 2
    assert memory.fill([4 * MB, 3 * MB], 5 * MB) == 4 * MB
    assert "3.1 MB not prepared" in memory.note
    # The 4 MB one was given back
    assert memory.fill([5 * MB], 1 << 30) == 5 * MB
    assert faulted[-1] == 5 * MB
    kept = memory.take(5 * MB)
    assert kept is not None
    assert len(kept) == 5 * MB
    assert memory.take(5 * MB) is None
    assert memory.held == 0
    memory.fill([3 * MB], 1 << 30)
    assert memory.release() == 3 * MB
    assert memory.held == 0
    assert memory.release() == 0


def test_without_madvise_the_pages_are_touched_one_by_one(cdir, small, monkeypatch):
    # As on a system without madvise: the fallback writes one byte a page.
    monkeypatch.setattr(prepared, "_madvise", False)
    ns = namespace()
    checkpoint.save(ns, cdir)
    memory = PreparedMemory()
    checkpoint.prepare(cdir, memory=memory, memory_limit=1 << 30)
    out = {"__name__": "__main__"}
    checkpoint.restore(out, cdir, memory=memory)
    assert out["whole"] == ns["whole"]
    assert out["other"] == ns["other"]


def test_memory_the_system_refuses_is_left_out_not_written_page_by_page(small, monkeypatch):
    def refuse(address: int, length: int, advice: int) -> int:
        if advice != prepared.MADV_POPULATE_WRITE:
            return 0
        ctypes.set_errno(errno.ENOMEM)  # as Linux says when a cgroup has no room for it
        return -1

    monkeypatch.setattr(prepared, "_madvise", refuse)
    memory = PreparedMemory()
    assert memory.fill([3 * MB], 1 << 30) == 0
    assert "3.1 MB not prepared" in memory.note


def _resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_prepared_memory_is_resident_while_held_and_given_back_after():
    size = 64 * MB  # past glibc's mmap threshold: its own mapping, unmapped when freed
    memory = PreparedMemory()
    before = _resident()
    memory.fill([size], 1 << 30)
    held = _resident()
    assert held - before >= size * 0.9, (before, held)  # faulted in: the kernel holds it, and its resident set says so
    assert memory.release() == size
    assert _resident() - before < size * 0.1


def test_the_kernels_prepare_reply_says_what_it_holds_within_half_its_room(tmp_path, small):
    settings = CheckpointSettings(directory=str(tmp_path / "cp"))
    ns = namespace()
    shell = type("Shell", (), {"user_ns": ns, "user_ns_hidden": {}, "compile": None})()
    room = [1 << 30]
    cps = ShellCheckpoints(shell, settings, room=lambda: room[0])
    assert handle_checkpoint_request(cps, {"action": "save"})["status"] == "ok"
    reply = handle_checkpoint_request(cps, {"action": "prepare"})
    size = len(ns["whole"]) + len(ns["other"])
    assert reply["status"] == "ok"
    assert reply["prepared"] == size
    assert "MB of memory faulted in" in reply["summary"]
    assert cps.release_prepared() == size
    assert cps.memory.held == 0
    room[0] = 2 * len(ns["whole"])  # only half of the room may be prepared: the largest fits, the other does not
    reply = handle_checkpoint_request(cps, {"action": "prepare"})
    assert reply["prepared"] == len(ns["whole"])
    assert "not prepared" in reply["summary"]
    settings.prepare_memory = 0
    reply = handle_checkpoint_request(cps, {"action": "prepare"})
    assert reply["prepared"] == 0
    assert cps.memory.held == 0
