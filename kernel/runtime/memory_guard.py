"""Memory budgets and the guard below the kernel's memory limit, sampled by the watchdog.

Two measures, two rules (docs/memory.md):

- a cell's **memory budget** counts the growth of the kernel process's
  resident set since the cell began (`/proc/self/statm`; memory of child
  processes is not in it).  A subshell cell running beside it grows the same
  process: the kernel cannot tell which thread allocated, so the growth of
  both counts against each;
- the **guard** watches what the out-of-memory killer counts: the working set
  of the kernel's memory cgroup against its limit, or, without a cgroup
  limit, the machine's used memory against its total.  When that passes the
  limit minus a margin, it interrupts the running cells that grew the kernel
  by at least GUARD_MIN_GROWTH since they began (a cell that started after
  the memory was taken is not blamed); until one did, the charge is not read.

The margin is what the fastest growth we stop can add between two samples and
the interrupt taking effect: FASTEST_GROWTH bytes/s for REACTION seconds, kept
between 5 % and 25 % of the limit.  The files read on every tick are kept open
(pread: a few microseconds, benchmarks/memory.py); the cgroup's memory.stat
(or /proc/meminfo) is read only near the guard's level.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

try:
    import resource
except ImportError:  # not on Windows: no data limit there
    resource = None  # type: ignore[assignment]

from ..protocol import MEMORY_BUDGET, MEMORY_GUARD, REASON_MEMORY_BUDGET
from .execution import Execution
from .memory import PAGE_SIZE, MemoryView, OpenFile, machine_bytes, memory_view

# The fastest growth the guard is sized for (bytes/s): one thread touching fresh pages (about 0.3 GB/s
# here under a CPU hog, a few GB/s on an idle machine), and a sample + an interrupt to stop it.
FASTEST_GROWTH = 5e9
REACTION = 0.04  # two watchdog ticks: the sample that sees it, and the interrupt taking effect
NEAR = 0.5  # past this share of its limit the running-cell record is rewritten every tick
GUARD_MIN_GROWTH = 16 * 2**20  # a cell that grew the kernel by less did not cause the shortage
# RLIMIT_DATA is set above a cgroup's limit by what the kernel maps but does not touch (thread stacks,
# arenas: VmData minus resident when it is set) plus this, at least DATA_LIMIT_SLACK: a growth loop meets
# the guard first, and one allocation bigger than the limit fails at once.
DATA_LIMIT_SLACK = 256 * 2**20
UNTOUCHED_SLACK = 128 * 2**20

log = logging.getLogger("cancelkernel")


def derived_margin(limit: int) -> int:
    """The guard's margin below `limit`: FASTEST_GROWTH for REACTION, within 5-25 % of the limit."""
    return int(min(max(FASTEST_GROWTH * REACTION, 0.05 * limit), 0.25 * limit))


def machine_used(meminfo: str | None) -> int | None:
    """MemTotal minus MemAvailable from a /proc/meminfo text: what the machine's out-of-memory killer runs out of."""
    total, available = _meminfo_kib(meminfo, "MemTotal:"), _meminfo_kib(meminfo, "MemAvailable:")
    return None if total is None or available is None else (total - available) * 1024


def _meminfo_kib(meminfo: str | None, field: str) -> int | None:
    """One field of /proc/meminfo in KiB, found without splitting the whole file (read at every cell's start)."""
    start = (meminfo or "").find(field)
    if start != 0 and (start < 0 or meminfo[start - 1] != "\n"):  # type: ignore[index]  # found, so not None
        return None
    try:
        return int(meminfo[start + len(field) :].split(None, 1)[0])  # type: ignore[index]
    except (IndexError, ValueError):
        return None


def _vm_data() -> int | None:
    """The process's private data mappings (VmData), what RLIMIT_DATA counts."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


@dataclass(frozen=True)
class GuardSettings:
    """The guard's configuration (kernel options memory_guard, memory_guard_margin)."""

    enabled: bool = True
    margin: int = 0  # bytes below the limit; 0 = derived_margin(limit)
    data_limit: bool = True  # RLIMIT_DATA at a cgroup's limit + DATA_LIMIT_SLACK: one huge allocation is a MemoryError


class MemoryGuard:
    """One kernel's memory measures, sampled once per watchdog tick while cells run."""

    def __init__(self, settings: GuardSettings | None = None):
        self.settings = settings or GuardSettings()
        self.view: MemoryView = memory_view()
        # Read at every cell's start and on every tick: kept open (pread), not opened each time.
        self._own_cgroup = OpenFile(f"/proc/{os.getpid()}/cgroup")
        self._cgroup_text = self._own_cgroup.read()
        self._statm = OpenFile(f"/proc/{os.getpid()}/statm")
        self._meminfo = OpenFile("/proc/meminfo")
        self._raw = self._open_raw()
        self.resident: int | None = None  # the latest samples
        self.raw: int | None = None  # the cgroup's whole charge (None without a cgroup)
        self.charged: int | None = None
        self.data_limit: int | None = None  # RLIMIT_DATA set from the cgroup's limit (None: not set)
        self._inherited_data_limit = resource.getrlimit(resource.RLIMIT_DATA) if resource is not None else None
        self._apply_data_limit()

    def _open_raw(self) -> OpenFile | None:
        cgroup = self.view.cgroup
        return OpenFile(cgroup.usage_file) if cgroup is not None else None

    def _resident_now(self) -> int | None:
        text = self._statm.read()
        return int(text.split()[1]) * PAGE_SIZE if text else None

    def _raw_now(self) -> int | None:
        text = self._raw.read() if self._raw is not None else None
        return int(text) if text else None

    def refresh(self) -> None:
        """Learn the limit again if the kernel was moved to another cgroup (cheap: one small read)."""
        text = self._own_cgroup.read()
        if text != self._cgroup_text:
            self._cgroup_text = text
            self.view = memory_view()
            if self._raw is not None:
                self._raw.close()
            self._raw = self._open_raw()
            self._apply_data_limit()

    def _apply_data_limit(self) -> None:
        """RLIMIT_DATA from the cgroup's limit (none without a cgroup limit: what the process inherited)."""
        if resource is None or self._inherited_data_limit is None or not self.settings.data_limit:
            return
        soft, hard = self._inherited_data_limit
        wanted = soft
        in_use, resident = _vm_data(), self._resident_now()
        if self.view.cgroup is not None and self.limit is not None:
            untouched = in_use - resident if in_use is not None and resident is not None else 0
            wanted = self.limit + max(DATA_LIMIT_SLACK, untouched + UNTOUCHED_SLACK)
            if hard != resource.RLIM_INFINITY:
                wanted = min(wanted, hard)
            if soft != resource.RLIM_INFINITY:
                wanted = min(wanted, soft)
            if in_use is not None and in_use > wanted - DATA_LIMIT_SLACK:
                log.warning(
                    "memory: not setting RLIMIT_DATA to %d: the kernel already maps %d bytes of data", wanted, in_use
                )
                wanted = soft
        try:
            resource.setrlimit(resource.RLIMIT_DATA, (wanted, hard))
        except (ValueError, OSError) as exc:
            log.warning(
                "memory: RLIMIT_DATA could not be set (%s); a single huge allocation will meet the OOM killer", exc
            )
            return
        self.data_limit = None if wanted == soft else wanted

    @property
    def limit(self) -> int | None:
        return self.view.limit

    @property
    def margin(self) -> int | None:
        limit = self.limit
        if limit is None:
            return None
        return self.settings.margin or derived_margin(limit)

    @property
    def guard_at(self) -> int | None:
        """The charge at which the guard interrupts (None: off, or no limit known)."""
        if not self.settings.enabled or self.limit is None or self.margin is None:
            return None
        return max(0, self.limit - self.margin)

    def charged_now(self) -> int | None:
        """What the limit counts, now."""
        if self.view.cgroup is not None:
            return self.view.cgroup.usage()
        return machine_used(self._meminfo.read())

    def room(self) -> int | None:
        """Bytes the kernel may still take before the guard acts (before the limit with the guard off);
        None: no limit known."""
        level = self.guard_at if self.guard_at is not None else self.limit
        charged = self.charged_now()
        if level is None or charged is None:
            return None
        return max(0, level - charged)

    def nearing_limit(self) -> bool:
        """The latest sample's raw charge is past NEAR of the cgroup's limit (False without a cgroup limit)."""
        limit = self.limit
        if self.view.cgroup is None or not limit or self.raw is None:
            return False
        return self.raw >= NEAR * limit

    def begin(self, execution: Execution) -> None:
        """A cell starts: its baselines."""
        self.refresh()
        execution.memory.resident_start = self._resident_now()
        execution.memory.charged_start = self.charged_now()

    def sample(self, running: list[Execution]) -> None:
        """One look (the watchdog's tick): the resident set and the raw charge,
        the working set when the guard needs it."""
        self.resident = self._resident_now()
        self.raw = self._raw_now()
        guard_at = self.guard_at
        self.charged = None
        # Only a cell that grew the kernel can be blamed: until one did, the working set is not read at all.
        # The raw charge is an upper bound of the working set: memory.stat is read only near the guard.
        if (
            guard_at is not None
            and any(self._grown(e) >= GUARD_MIN_GROWTH for e in running)
            and (self.raw is None or self.raw >= guard_at)
        ):
            self.charged = self.charged_now()

    def _grown(self, execution: Execution) -> int:
        start = execution.memory.resident_start
        return 0 if self.resident is None or start is None else self.resident - start

    def over(self, execution: Execution) -> str | None:
        """REASON_MEMORY_BUDGET if the latest sample puts this cell past its budget or the kernel past the guard."""
        record = execution.memory
        grown = self._grown(execution)
        if execution.budgets.memory and grown > execution.budgets.memory:
            record.kind, record.at_trip, record.limit = MEMORY_BUDGET, self.resident, self.limit
            return REASON_MEMORY_BUDGET
        guard_at = self.guard_at
        if guard_at is not None and self.charged is not None and self.charged >= guard_at and grown >= GUARD_MIN_GROWTH:
            record.kind, record.at_trip, record.limit = MEMORY_GUARD, self.charged, self.limit
            return REASON_MEMORY_BUDGET
        return None

    def end(self, execution: Execution) -> None:
        """The cell ended: what its tripped measure is now (did the memory come back?)."""
        record = execution.memory
        if record.kind == MEMORY_BUDGET:
            record.after = self._resident_now()
        elif record.kind == MEMORY_GUARD:
            record.after = self.charged_now()

    def status(self) -> dict:
        """The guard in cancel_status_reply: where the limit comes from, and where it interrupts."""
        return {
            "source": self.view.source,
            "limit": self.limit,
            "guard_at": self.guard_at,
            "margin": self.margin,
            "data_limit": self.data_limit,
            "resident": self._resident_now(),
            "charged": self.charged_now(),
            "machine": machine_bytes(),
            "pid": os.getpid(),
        }
