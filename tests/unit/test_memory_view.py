"""Where the kernel reads its memory usage and limit: /proc parsing, a cgroup v2 tree, a real v1 cgroup made here."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from cancelkernel.runtime.memory import (
    MemoryCgroup,
    cgroup_of,
    machine_bytes,
    memory_view,
    parse_mountinfo,
    parse_proc_cgroup,
    resident_bytes,
)

PROC_CGROUP_V1 = """9:name=systemd:/
4:memory:/process_api/a06b
1:cpu,cpuacct:/
0::/
"""
PROC_CGROUP_V2 = "0::/user.slice/user-1000.slice/session-3.scope\n"
MOUNTINFO = """25 30 0:22 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
31 30 0:27 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
32 30 0:28 / /sys/fs/cgroup/cpu rw,nosuid - cgroup cgroup rw,cpu,cpuacct
"""


def test_proc_cgroup_and_mountinfo() -> None:
    assert parse_proc_cgroup(PROC_CGROUP_V1) == ("/process_api/a06b", "/")
    assert parse_proc_cgroup(PROC_CGROUP_V2) == (None, "/user.slice/user-1000.slice/session-3.scope")
    assert parse_mountinfo(MOUNTINFO) == (("/", "/sys/fs/cgroup/memory"), ("/", "/sys/fs/cgroup/unified"))
    assert parse_mountinfo("garbage\n") == (None, None)


def test_a_v2_tree_gives_the_smallest_limit_up_the_tree_and_the_working_set(tmp_path) -> None:
    parent = tmp_path / "pod"
    leaf = parent / "kernel"
    leaf.mkdir(parents=True)
    (parent / "memory.max").write_text(f"{2 * 2**30}\n")
    (leaf / "memory.max").write_text("max\n")
    (leaf / "memory.current").write_text(f"{500 * 2**20}\n")
    (leaf / "memory.stat").write_text(f"anon 1\ninactive_file {100 * 2**20}\nactive_file 5\n")
    (leaf / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n")
    cgroup = MemoryCgroup(2, str(leaf))
    assert cgroup.limit() == 2 * 2**30
    assert cgroup.usage() == 400 * 2**20
    assert cgroup.oom_kills() == 1
    (leaf / "memory.max").write_text(f"{2**30}\n")
    assert cgroup.limit() == 2**30


def test_this_process() -> None:
    rss = resident_bytes()
    assert rss is not None
    assert 10 * 2**20 < rss < (machine_bytes() or 0)
    view = memory_view()
    assert view.limit is not None
    assert view.limit > 0
    assert view.source in ("cgroup v1", "cgroup v2", "machine")
    usage = view.usage()
    assert usage is not None
    assert usage > 0


def _v1_root() -> str:
    root = "/sys/fs/cgroup/memory"
    if not sys.platform.startswith("linux") or not os.access(root, os.W_OK):
        pytest.fail(f"this test needs a writable cgroup v1 memory hierarchy at {root} (CI runs as root and has one)")
    return root


def test_a_real_v1_cgroup_with_a_limit() -> None:
    root = _v1_root()
    path = os.path.join(root, f"cancelkernel-test-{uuid.uuid4().hex[:8]}")
    os.mkdir(path)
    # Charges stay where they were made (v1 moves none by default): the child allocates once inside.
    grow = "import sys, time; sys.stdin.readline(); b = bytearray(50 * 2**20); print(flush=True); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", grow], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        with open(os.path.join(path, "memory.limit_in_bytes"), "w") as f:
            f.write(str(256 * 2**20))
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(child.pid))
        assert child.stdin is not None
        assert child.stdout is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        child.stdout.readline()
        cgroup = cgroup_of(child.pid)
        assert cgroup == MemoryCgroup(1, path)
        view = memory_view(child.pid)
        assert (view.source, view.limit) == ("cgroup v1", 256 * 2**20)
        usage = view.usage()
        assert usage is not None
        assert 50 * 2**20 <= usage < 256 * 2**20
        assert cgroup.oom_kills() == 0
    finally:
        child.kill()
        child.wait()
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()
        with open(os.path.join(path, "cgroup.procs")) as f:
            leftover = f.read().split()
        for pid in leftover:  # none expected: the child is dead; moved back so the directory can go
            with open(os.path.join(root, "cgroup.procs"), "w") as f:
                f.write(pid)
        os.rmdir(path)
