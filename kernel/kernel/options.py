"""The kernel's options (`--CancelKernel.<name>=...` on its command line, or a config file)."""

from __future__ import annotations

import typing as t

from traitlets import Bool, Enum, Float, Integer, TraitError, Unicode
from traitlets.config import Configurable

from .. import protocol
from ..durations import DurationError, parse_duration
from ..sizes import SizeError, parse_size


class Duration(Float):
    """A number of seconds in the one duration grammar: `30`, `1.5`, `30s`, `2m`, `1h` (0 = off)."""

    info_text = "a duration: seconds (30, 1.5) or with a unit (500ms, 30s, 2m, 1h)"

    def validate(self, obj: t.Any, value: t.Any) -> float:
        try:
            return parse_duration(value, self.name or "duration")
        except DurationError as exc:
            raise TraitError(str(exc)) from None

    def from_string(self, s: str) -> float:
        return self.validate(None, s)


class Size(Integer):
    """A number of bytes in the one size grammar: `1073741824`, `512M`, `2G`, `1.5GiB`, `500MB` (0 = off)."""

    info_text = "a size: bytes (1073741824, 1e9) or with a unit (512M, 2G, 1.5GiB; 500MB)"

    def validate(self, obj: t.Any, value: t.Any) -> int:
        try:
            return parse_size(value, self.name or "size")
        except SizeError as exc:
            raise TraitError(str(exc)) from None

    def from_string(self, s: str) -> int:
        return self.validate(None, s)


# A base class of the kernel, not an object it holds: traitlets configures the traits of a class and its bases
# under the class's name, so these stay `--CancelKernel.<name>=...` (a held object's would be `--KernelOptions.<name>`).
class KernelOptions(Configurable):
    """Traits of CancelKernel (a mixin, so their help shows under CancelKernel)."""

    exec_thread = Enum(
        list(protocol.EXEC_THREADS),
        default_value="main",
        help="""Where user code runs.  'main': on the main thread, as stock ipykernel
        (SIGINT breaks blocking calls; signal.signal, alarm, GUI toolkits work).
        'worker': on one persistent worker thread, keeping the main loop free;
        interrupts are async exceptions, and a worker stuck in a blocking call
        past interrupt_grace is abandoned and replaced.""",
    ).tag(config=True)

    interrupt_grace = Duration(
        1.0,
        help="""Seconds an interrupted cell gets to stop.  After that the cell is
        reported unresponsive-to-interrupt (main mode) or its worker thread is
        abandoned and replaced (worker mode).""",
    ).tag(config=True)

    wall_budget = Duration(
        0.0,
        help="Default wall budget: seconds a cell may run before it is treated as a runaway (0 = off).",
    ).tag(config=True)

    quiet_budget = Duration(
        0.0,
        help="Default quiet budget: seconds a cell may run without any output before it is a runaway (0 = off).",
    ).tag(config=True)

    memory_budget = Size(
        0,
        help="""Default memory budget: bytes a cell may grow the kernel's resident set by
        before it is treated as a runaway (512M, 2G; 0 = off).""",
    ).tag(config=True)

    memory_guard = Bool(
        True,
        help="""Interrupt the running cell when the memory the out-of-memory killer counts
        (the kernel's cgroup working set against its limit, else the machine's used
        memory against its total) passes the limit minus memory_guard_margin, before
        the kernel is killed.  False turns the guard off.""",
    ).tag(config=True)

    memory_guard_margin = Size(
        0,
        help="""How far below the memory limit the guard interrupts (bytes or 512M, 1G).
        0 derives it: what 5 GB/s of growth adds in 40 ms (200 MB), within 5-25 % of the limit.""",
    ).tag(config=True)

    memory_data_limit = Bool(
        True,
        help="""With a cgroup memory limit, set RLIMIT_DATA to that limit plus what the kernel maps
        without using (thread stacks, arenas; at least 256 MiB), so that one
        allocation bigger than the limit (bytearray(10**10), numpy.ones((n, n))) raises MemoryError
        instead of meeting the out-of-memory killer.  Child processes inherit it (a JVM with a large
        -Xmx would not start).  False leaves the data limit as inherited.""",
    ).tag(config=True)

    on_runaway = Enum(
        ["interrupt", "warn"],
        default_value="interrupt",
        help="What the watchdog does when a budget trips: interrupt the cell once, or only publish a warning event.",
    ).tag(config=True)

    dump_dir = Unicode(
        "",
        help="Directory for this kernel's stack dump file (default: the Jupyter runtime dir).",
    ).tag(config=True)

    switch_interval = Float(
        0.0005,
        min=0.0,
        help="""sys.setswitchinterval for the kernel process (seconds; 0 keeps Python's 0.005).
        A busy cell holds the GIL; the control thread that receives interrupt and
        status requests waits this long for it at every hand-over, so smaller
        means faster interrupts of busy Python code.""",
    ).tag(config=True)

    gil_yield = Float(
        0.04,
        min=0.0,
        help="""Main mode: when one C call has held the GIL this many seconds, send the
        main thread a signal whose handler lets go of the GIL for 2 ms, so the control
        thread can read interrupt and status requests.  Reaches C code that checks
        Python signals (the regex engine, cooperative extensions); 0 turns it off.""",
    ).tag(config=True)

    oom_score_adj = Integer(
        500,
        min=-1000,
        max=1000,
        help="""At start the kernel raises its own /proc/self/oom_score_adj to this value
        (never lowers it; -1000..1000), so that when the machine or its cgroup runs
        out of memory the out-of-memory killer takes the kernel that runs user code,
        not Jupyter Server, the MCP server or the agent that started it.  0 or less
        leaves it as inherited.""",
    ).tag(config=True)
