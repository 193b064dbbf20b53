"""Real memory cgroups for tests and benchmarks: make one with a limit, move a kernel into it, remove it after.

cgroup v2 is used where its memory controller can be enabled for a child of
the mount's root, else cgroup v1 (`/sys/fs/cgroup/memory`).  Removing moves
every pid still inside back to the parent first (only pids moved in here ever
are: other kernels run on the same machine).  `MemoryCgroupUnavailable` says
why none can be made (not root, no memory controller).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator

from ..runtime.memory import MemoryCgroup

V1_ROOT = "/sys/fs/cgroup/memory"
V2_ROOTS = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup")


class MemoryCgroupUnavailable(RuntimeError):
    """No memory cgroup can be made here; the message says why and what would make one possible."""


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


class TestCgroup:
    """One memory cgroup made for a test."""

    __test__ = False  # not a pytest class

    def __init__(self, version: int, path: str, parent: str):
        self.version = version
        self.path = path
        self.parent = parent

    def set_limit(self, limit: int) -> None:
        _write(os.path.join(self.path, "memory.max" if self.version == 2 else "memory.limit_in_bytes"), str(limit))

    def add(self, pid: int) -> None:
        """Move `pid` in (v1 moves the memory it already has with it, so the limit counts all of it)."""
        if self.version == 1:
            with contextlib.suppress(OSError):
                _write(os.path.join(self.path, "memory.move_charge_at_immigrate"), "3")
        _write(os.path.join(self.path, "cgroup.procs"), str(pid))

    def pids(self) -> list[int]:
        try:
            return [int(line) for line in _read(os.path.join(self.path, "cgroup.procs")).split()]
        except OSError:
            return []

    def oom_kills(self) -> int:
        return MemoryCgroup(self.version, self.path).oom_kills() or 0

    def remove(self) -> None:
        """Move whatever is left to the parent, then remove the directory (retrying while a dying pid lingers)."""
        for _ in range(200):
            for pid in self.pids():
                with contextlib.suppress(OSError):
                    _write(os.path.join(self.parent, "cgroup.procs"), str(pid))
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.05)  # a killed process leaves its cgroup a moment after it dies
        raise RuntimeError(f"could not remove the test cgroup {self.path}: pids {self.pids()} stay in it")


def _v2_parent() -> str | None:
    for root in V2_ROOTS:
        controllers = os.path.join(root, "cgroup.controllers")
        if os.path.exists(controllers) and "memory" in _read(controllers).split():
            return root
    return None


def _make_under(version: int, parent: str, name: str, limit: int) -> TestCgroup:
    """A child of `parent` limited to `limit` bytes; a half-made child is removed again if the limit is refused."""
    cgroup = TestCgroup(version, os.path.join(parent, name), parent)
    os.mkdir(cgroup.path)
    try:
        cgroup.set_limit(limit)
    except OSError:
        cgroup.remove()
        raise
    return cgroup


def make(limit: int) -> TestCgroup:
    """A new memory cgroup limited to `limit` bytes (v2 where possible, else v1)."""
    name = f"cancelkernel-test-{uuid.uuid4().hex[:12]}"
    errors = []
    parent = _v2_parent()
    if parent is not None:
        try:
            subtree = os.path.join(parent, "cgroup.subtree_control")
            if "memory" not in _read(subtree).split():
                _write(subtree, "+memory")
            return _make_under(2, parent, name, limit)
        except OSError as exc:
            errors.append(f"cgroup v2 at {parent}: {exc}")
    else:
        errors.append("cgroup v2: no memory controller offered at " + " or ".join(V2_ROOTS))
    if os.path.isdir(V1_ROOT):
        try:
            return _make_under(1, V1_ROOT, name, limit)
        except OSError as exc:
            errors.append(f"cgroup v1 at {V1_ROOT}: {exc}")
    else:
        errors.append(f"cgroup v1: {V1_ROOT} is not mounted")
    raise MemoryCgroupUnavailable(
        "no memory cgroup can be made here (" + "; ".join(errors) + "): these tests need root and a memory controller "
        "(CI runs as root on a machine with cgroup v1 at /sys/fs/cgroup/memory)"
    )


@contextlib.contextmanager
def memory_cgroup(limit: int) -> Iterator[TestCgroup]:
    """A memory cgroup of `limit` bytes for the duration of the block, removed after, even on failure."""
    cgroup = make(limit)
    try:
        yield cgroup
    finally:
        cgroup.remove()
