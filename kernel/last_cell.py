"""The last cell a kernel was running: a small record it keeps on disk, so whoever comes next can say what happened.

While a cell has run for RECORD_AFTER seconds, the kernel keeps a JSON file
(its path is in kernel_info_reply `cancelkernel.running_record`, next to the
stack dump file) saying which cell, at which line, how much memory, and the
out-of-memory kill counts of its cgroup and of the machine at that moment; it
is rewritten every REWRITE_EVERY seconds (every watchdog tick once the cgroup is past half
its limit) and removed when the cell ends.  A
file left behind by a process that is gone means that kernel died while the
cell ran.  `death_of(record)` tells why, with evidence only: "oom" when an
OOM kill count rose since the record was written, else "unknown".

Both the restarted kernel (which tells the person in its first cell) and the
agent client (which reports `died` with its cause) read it with these
functions.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import typing as t

from .pids import process_running
from .runtime.memory import MemoryCgroup, cgroup_of
from .sizes import format_size

RECORD_AFTER = 0.2  # a cell shorter than this leaves no record (and costs no write)
REWRITE_EVERY = 0.5
CAUSE_OOM = "oom"
CAUSE_UNKNOWN = "unknown"


def machine_oom_kills() -> int | None:
    """The machine's count of OOM kills since boot (/proc/vmstat oom_kill, Linux 4.13+)."""
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def cgroup_oom_kills(path: str | None, version: int | None) -> int | None:
    return MemoryCgroup(version, path).oom_kills() if path and version in (1, 2) else None


def write(path: str, record: dict) -> None:
    """Replace the record in one rename: a reader never sees half of one."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, path)


def remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def read(path: str) -> dict | None:
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def process_gone(pid: object) -> bool:
    """A record's pid names no running process (a zombie runs nothing); False for anything that is not a pid."""
    return isinstance(pid, int) and pid > 0 and not process_running(pid)


def death_of(record: dict) -> dict:
    """Why the kernel that wrote `record` died: {"cause", "evidence", "message", ...} (evidence only)."""
    cgroup_then, machine_then = record.get("cgroup_oom_kills"), record.get("machine_oom_kills")
    cgroup_now = cgroup_oom_kills(record.get("cgroup"), record.get("cgroup_version"))
    machine_now = machine_oom_kills()
    if isinstance(cgroup_then, int) and cgroup_now is not None and cgroup_now > cgroup_then:
        cause, evidence = CAUSE_OOM, f"the OOM kill count of its cgroup rose from {cgroup_then} to {cgroup_now}"
    elif isinstance(machine_then, int) and machine_now is not None and machine_now > machine_then:
        cause, evidence = CAUSE_OOM, f"the machine's OOM kill count rose from {machine_then} to {machine_now}"
    else:
        cause, evidence = CAUSE_UNKNOWN, "no OOM kill was counted in its cgroup or on the machine"
    return {"cause": cause, "evidence": evidence, "message": death_message(record, cause), "record": record}


def death_message(record: dict, cause: str) -> str:
    """'was killed by the out-of-memory killer (last seen at 0.98 of 1 GiB) while running Cell In[7], line 3
    (l.append(x)), 2.1 s into it'."""
    what = (
        "was killed by the out-of-memory killer"
        if cause == CAUSE_OOM
        else "died, cause unknown (no OOM kill was counted)"
    )
    charged, limit = record.get("charged"), record.get("limit")
    if isinstance(charged, int) and isinstance(limit, int) and limit:
        what += f" (last seen at {charged / limit:.2f} of {format_size(limit)})"
    text = f"{what} while running {record.get('where') or 'the cell'}"
    if isinstance(record.get("elapsed"), (int, float)):
        text += f", {record['elapsed']:.1f} s into it"
    return text


def previous_kernel(path: str) -> dict | None:
    """At a kernel's start: the death of the kernel that left `path` behind (None:
    it ended its cells, or still runs)."""
    record = read(path)
    if record is None or record.get("pid") == os.getpid() or not process_gone(record.get("pid")):
        return None
    remove(path)
    return {"pid": record.get("pid"), **death_of(record)}


def baseline(pid: int) -> dict:
    """For a client watching kernel `pid` (any kernel, stock too): the OOM kill counts now, to compare after a death."""
    cgroup = cgroup_of(pid)
    return {
        "pid": pid,
        "cgroup": cgroup.path if cgroup is not None else None,
        "cgroup_version": cgroup.version if cgroup is not None else None,
        "cgroup_oom_kills": cgroup.oom_kills() if cgroup is not None else None,
        "machine_oom_kills": machine_oom_kills(),
    }


def new_record(**fields: t.Any) -> dict:
    return {"pid": os.getpid(), "time": time.time(), **fields}
