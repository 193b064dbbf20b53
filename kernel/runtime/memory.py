"""How much memory the kernel uses and may use: its cgroup (v2 or v1), its resident set, the machine.

What the out-of-memory killer acts on is the cgroup's charge, so that is what
counts when the kernel has a memory cgroup with a limit; its "working set"
(usage minus inactive file pages, what the kubelet evicts on) is used, so a
cell that merely reads big files does not look like a runaway.  Without a
cgroup limit, the limit is the machine's memory and usage is the process's
resident set (`/proc/PID/statm`, a few microseconds to read).

Linux only; elsewhere nothing is found (None) and nothing is guarded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# v1 writes "no limit" as the largest page-aligned signed 64-bit number; anything this big is none.
_UNLIMITED = 2**62
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _stat_field(text: str | None, *names: str) -> int | None:
    """The first of `names` in a memory.stat text."""
    if text is None:
        return None
    values = dict(line.split(None, 1) for line in text.splitlines() if " " in line)
    for name in names:
        if name in values:
            return int(values[name])
    return None


@dataclass(frozen=True)
class MemoryCgroup:
    """One process's memory cgroup: its directory under the cgroup mount, and its version."""

    version: int  # 1 or 2
    path: str

    @property
    def usage_file(self) -> str:
        """The file that holds the cgroup's whole charge."""
        return os.path.join(self.path, "memory.current" if self.version == 2 else "memory.usage_in_bytes")

    def raw_usage(self) -> int | None:
        """The cgroup's whole charge in bytes, page cache included (one small read)."""
        text = _read(self.usage_file)
        return int(text) if text is not None else None

    def usage(self) -> int | None:
        """The working set in bytes: the cgroup's charge minus its inactive file pages."""
        current = self.raw_usage()
        if current is None:
            return None
        stat = _read(os.path.join(self.path, "memory.stat"))
        inactive = (
            _stat_field(stat, "inactive_file")
            if self.version == 2
            else _stat_field(stat, "total_inactive_file", "inactive_file")
        )
        return max(0, current - (inactive or 0))

    def limit(self) -> int | None:
        """The smallest limit of this cgroup and its ancestors; None when there is none."""
        if self.version == 1:
            stat = _read(os.path.join(self.path, "memory.stat"))
            limit = _stat_field(stat, "hierarchical_memory_limit")
            if limit is None:
                text = _read(os.path.join(self.path, "memory.limit_in_bytes"))
                limit = int(text) if text is not None else None
            return limit if limit is not None and limit < _UNLIMITED else None
        smallest: int | None = None
        path = self.path
        while True:
            text = _read(os.path.join(path, "memory.max"))
            if text is None:
                break  # above the delegated part of the tree (or the root, which has no memory.max)
            if text.strip() != "max":
                smallest = int(text) if smallest is None else min(smallest, int(text))
            parent = os.path.dirname(path)
            if parent == path:
                break
            path = parent
        return smallest

    def oom_kills(self) -> int | None:
        """How many processes the OOM killer took in this cgroup so far."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        return _stat_field(_read(os.path.join(self.path, name)), "oom_kill")


class OpenFile:
    """A /proc or cgroup file kept open and read again with pread:
    about 2 us a read instead of 40 (open, read, close)."""

    def __init__(self, path: str):
        self.path = path
        try:
            self._fd: int | None = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._fd = None

    def read(self) -> str | None:
        if self._fd is None:
            return None
        try:
            return os.pread(self._fd, 4096, 0).decode()
        except OSError:
            return None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def parse_proc_cgroup(text: str) -> tuple[str | None, str | None]:
    """(v1 memory cgroup path, v2 cgroup path) from the text of /proc/PID/cgroup."""
    v1 = v2 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v1, v2


def parse_mountinfo(text: str) -> tuple[tuple[str, str] | None, tuple[str, str] | None]:
    """((root, mount point) of the v1 memory hierarchy, (root, mount point) of cgroup2) from /proc/PID/mountinfo."""
    v1 = v2 = None
    for line in text.splitlines():
        before, sep, after = line.partition(" - ")
        if not sep:
            continue
        fields, tail = before.split(), after.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        root, mount_point, fstype, options = fields[3], fields[4], tail[0], tail[2].split(",")
        if fstype == "cgroup" and "memory" in options and v1 is None:
            v1 = (root, mount_point)
        elif fstype == "cgroup2" and v2 is None:
            v2 = (root, mount_point)
    return v1, v2


def _under(mount: tuple[str, str], path: str) -> str:
    root, mount_point = mount
    if root != "/" and (path == root or path.startswith(root + "/")):
        path = path[len(root) :]
    return os.path.join(mount_point, path.lstrip("/"))


def cgroup_of(pid: int | str = "self") -> MemoryCgroup | None:
    """The memory cgroup of `pid` (v2 when its memory controller is on there, else v1); None if none."""
    cgroups, mounts = _read(f"/proc/{pid}/cgroup"), _read(f"/proc/{pid}/mountinfo")
    if cgroups is None or mounts is None:
        return None
    v1_path, v2_path = parse_proc_cgroup(cgroups)
    v1_mount, v2_mount = parse_mountinfo(mounts)
    if v2_path is not None and v2_mount is not None:
        path = _under(v2_mount, v2_path)
        if os.path.exists(os.path.join(path, "memory.current")):
            return MemoryCgroup(2, path)
    if v1_path is not None and v1_mount is not None:
        path = _under(v1_mount, v1_path)
        if os.path.exists(os.path.join(path, "memory.usage_in_bytes")):
            return MemoryCgroup(1, path)
    return None


def resident_bytes(pid: int | str = "self") -> int | None:
    """The process's resident set in bytes (children not included)."""
    text = _read(f"/proc/{pid}/statm")
    return int(text.split()[1]) * PAGE_SIZE if text else None


def machine_bytes() -> int | None:
    """The machine's memory (MemTotal)."""
    text = _read("/proc/meminfo")
    for line in (text or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


@dataclass(frozen=True)
class MemoryView:
    """Where the kernel's usage and limit come from; `usage()` reads it now."""

    limit: int | None
    source: str  # "cgroup v2", "cgroup v1" or "machine"
    cgroup: MemoryCgroup | None
    pid: int | str = "self"

    def usage(self) -> int | None:
        if self.cgroup is not None:
            return self.cgroup.usage()
        return resident_bytes(self.pid)


def memory_view(pid: int | str = "self") -> MemoryView:
    """The cgroup with a limit when there is one, else the machine and the process's resident set."""
    cgroup = cgroup_of(pid)
    limit = cgroup.limit() if cgroup is not None else None
    if cgroup is not None and limit is not None:
        return MemoryView(limit, f"cgroup v{cgroup.version}", cgroup, pid)
    return MemoryView(machine_bytes(), "machine", None, pid)


def raise_oom_score(adj: int) -> int | None:
    """Raise this process's oom_score_adj to `adj` if it is lower (raising needs no privilege); the value now."""
    text = _read("/proc/self/oom_score_adj")
    if text is None:
        return None
    current = int(text)
    if adj > current:
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write(str(adj))
        except OSError:
            return current
        return adj
    return current
