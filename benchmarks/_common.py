"""Small helpers shared by the benchmarks: kernels that are always shut down,
control requests with their replies, percentiles, and JSON / table / SVG output.

Nothing here is specific to one benchmark.  Kernels are started with
jupyter_client by kernelspec name; every kernel started through `start_kernel`
is registered, and `shutdown_all()` (called by `kernels_cleaned_up()`, at exit,
and on SIGTERM/SIGHUP) kills whatever is left, process group included.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import platform
import queue
import signal
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

START_TIMEOUT = 60.0

# -- kernels -------------------------------------------------------------------------

_live: list[KernelManager] = []  # every kernel started here and not yet shut down
_pgids: set[int] = set()  # process groups of those kernels (jupyter_client starts each in its own session)


class Kernel:
    """A running kernel and a blocking client connected to it."""

    def __init__(
        self,
        label: str,
        kernel_name: str,
        extra_arguments: Sequence[str] = (),
        env: dict | None = None,
        output: Any = None,
    ):
        self.label = label
        self.kernel_name = kernel_name
        self.extra_arguments = list(extra_arguments)
        self.env = env
        self.output = output  # a file for the kernel's stdout/stderr (None: inherit ours)
        self.km: KernelManager | None = None
        self.kc: BlockingKernelClient | None = None
        self.kernel_info: dict = {}
        self.restarts = 0

    def start(self, timeout: float = START_TIMEOUT) -> None:
        km = KernelManager(kernel_name=self.kernel_name)
        kwargs: dict[str, Any] = {"extra_arguments": self.extra_arguments}
        if self.env is not None:
            kwargs["env"] = {**os.environ, **self.env}
        if self.output is not None:
            kwargs["stdout"] = kwargs["stderr"] = self.output  # kept by restart_kernel too
        _live.append(km)
        self.km = km
        km.start_kernel(**kwargs)
        _remember_pgid(km)
        self._connect(timeout)

    def _connect(self, timeout: float) -> None:
        assert self.km is not None
        if self.kc is not None:
            with contextlib.suppress(Exception):
                self.kc.stop_channels()
        kc = self.km.client()
        kc.start_channels()
        self.kc = kc
        kc.wait_for_ready(timeout=timeout)
        # wait_for_ready consumed the kernel_info_reply; ask again to keep its content.
        msg_id = kc.kernel_info()
        self.kernel_info = wait_shell_reply(kc, msg_id, timeout)["content"]
        drain(kc.iopub_channel)

    def restart(self, timeout: float = START_TIMEOUT) -> None:
        """Kill the kernel (its whole process group) and start it again."""
        assert self.km is not None
        self.restarts += 1
        self.km.restart_kernel(now=True)
        _remember_pgid(self.km)
        self._connect(timeout)

    @property
    def pid(self) -> int | None:
        provisioner = getattr(self.km, "provisioner", None)
        return getattr(provisioner, "pid", None)

    def shutdown(self) -> None:
        if self.kc is not None:
            with contextlib.suppress(Exception):
                self.kc.stop_channels()
            self.kc = None
        if self.km is not None:
            _shutdown(self.km)
            self.km = None


def _remember_pgid(km: KernelManager) -> None:
    pgid = getattr(getattr(km, "provisioner", None), "pgid", None)
    if pgid and pgid != os.getpgid(0):
        _pgids.add(pgid)


def _shutdown(km: KernelManager) -> None:
    with contextlib.suppress(Exception):
        if km.has_kernel:
            km.shutdown_kernel(now=True)  # SIGKILL to the kernel's process group
    with contextlib.suppress(Exception):
        if km.has_kernel:
            km.kill_kernel()
    with contextlib.suppress(Exception):
        km.cleanup_resources()
    with contextlib.suppress(ValueError):
        _live.remove(km)


def shutdown_all() -> None:
    """Shut down every kernel started here, then SIGKILL any process left in their groups."""
    for km in list(_live):
        _shutdown(km)
    for pgid in list(_pgids):
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
        _pgids.discard(pgid)


atexit.register(shutdown_all)


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def kernels_cleaned_up() -> Iterator[None]:
    """Run a benchmark body; whatever happens (error, Ctrl-C, SIGTERM), leave no kernel behind."""
    previous = {s: signal.signal(s, _terminate) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        # A second Ctrl-C must not interrupt the cleanup itself.
        old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            shutdown_all()
        finally:
            signal.signal(signal.SIGINT, old_int)
            for s, handler in previous.items():
                signal.signal(s, handler)


# -- messages ------------------------------------------------------------------------


def drain(channel: Any) -> list[dict]:
    """Everything already waiting on a channel."""
    msgs = []
    while True:
        try:
            msgs.append(channel.get_msg(timeout=0))
        except queue.Empty:
            return msgs


def wait_shell_reply(kc: BlockingKernelClient, msg_id: str, timeout: float) -> dict:
    """The shell reply to `msg_id`; raises TimeoutError. Adds `_received` (perf_counter)."""
    return wait_for(kc.shell_channel, lambda m: m["parent_header"].get("msg_id") == msg_id, timeout, f"reply to {msg_id}")


def wait_for(channel: Any, predicate: Any, timeout: float, what: str = "message") -> dict:
    """The first message on `channel` matching `predicate`; others are dropped."""
    deadline = time.perf_counter() + timeout
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            raise TimeoutError(f"no {what} within {timeout:g} s")
        try:
            msg = channel.get_msg(timeout=left)
        except queue.Empty:
            continue
        msg["_received"] = time.perf_counter()
        if predicate(msg):
            return msg


def wait_idle(kc: BlockingKernelClient, msg_id: str, timeout: float) -> dict:
    """Wait for iopub `status: idle` of request `msg_id`."""
    return wait_for(
        kc.iopub_channel,
        lambda m: m["msg_type"] == "status"
        and m["parent_header"].get("msg_id") == msg_id
        and m["content"].get("execution_state") == "idle",
        timeout,
        f"idle status for {msg_id}",
    )


def send_control(kc: BlockingKernelClient, msg_type: str, content: dict | None = None) -> tuple[str, float]:
    """Send a control request now; returns (msg_id, perf_counter just before the send)."""
    msg = kc.session.msg(msg_type, content or {})
    sent = time.perf_counter()
    kc.control_channel.send(msg)
    return msg["header"]["msg_id"], sent


def control_request(kc: BlockingKernelClient, msg_type: str, content: dict | None = None, *, timeout: float = 10.0) -> dict:
    """Send a control request and return its reply (TimeoutError if none)."""
    msg_id, _ = send_control(kc, msg_type, content)
    return wait_for(kc.control_channel, lambda m: m["parent_header"].get("msg_id") == msg_id, timeout, f"reply to {msg_type}")


# -- numbers -------------------------------------------------------------------------


def percentile(samples: Iterable[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100); math.inf samples count as the largest.

    Returns None for no samples, math.inf if the percentile falls on an infinite sample.
    """
    values = sorted(samples)
    if not values:
        return None
    pos = (len(values) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    if math.isinf(values[lo]) or (pos > lo and math.isinf(values[hi])):
        return math.inf
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def fmt_seconds(value: float | None) -> str:
    """A duration for a table: '4.2 ms', '1.03 s', 'never', '—'."""
    if value is None:
        return "—"
    if math.isinf(value):
        return "never"
    if value < 0.01:
        return f"{value * 1e3:.2f} ms"
    if value < 1:
        return f"{value * 1e3:.0f} ms" if value >= 0.1 else f"{value * 1e3:.1f} ms"
    return f"{value:.2f} s"


def environment() -> dict:
    """What the numbers were measured on."""
    versions = {}
    for name in ("ipykernel", "jupyter_client", "IPython", "zmq", "tornado", "cancelkernel"):
        try:
            module = __import__(name)
            versions[name] = getattr(module, "__version__", None)
        except Exception:  # noqa: BLE001
            versions[name] = None
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "sched_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "versions": versions,
        "executable": sys.executable,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


# -- output --------------------------------------------------------------------------


def write_json(path: str, data: Any) -> None:
    """Strict JSON: an infinite duration (something that never happened) is written as "never"."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with open(path, "w") as f:
        json.dump(_jsonable(data), f, indent=1, allow_nan=False)
        f.write("\n")


def _jsonable(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else ("never" if value > 0 else None)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]], align: Sequence[str] | None = None) -> str:
    """A GitHub markdown table; align per column: 'l' or 'r'."""
    rows = [list(map(str, r)) for r in rows]
    align = list(align or ["l"] + ["r"] * (len(headers) - 1))
    widths = [max(len(str(h)), *(len(r[i]) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(cells, widths, align)) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if a == "r" else ("-" * (w + 2)) for w, a in zip(widths, align)) + "|"
    return "\n".join([line(list(map(str, headers))), rule, *(line(r) for r in rows)])


def grouped_bar_svg(
    path: str,
    groups: Sequence[str],
    series: dict[str, Sequence[tuple[float | None, float | None]]],
    *,
    title: str,
    ylabel: str,
    never_at: float,
) -> bool:
    """Grouped bars (log scale) of (p50, p90) per group and series; needs matplotlib.

    A value of math.inf is drawn hatched at `never_at` and labelled "never".
    Returns False (and writes nothing) if matplotlib is not importable.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001 - optional
        return False
    names = list(series)
    width = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(groups) * max(1, len(names)) / 2), 5))
    for i, name in enumerate(names):
        xs, heights, errs, hatches = [], [], [], []
        for j, (p50, p90) in enumerate(series[name]):
            if p50 is None:
                continue
            never = math.isinf(p50)
            height = never_at if never else p50
            xs.append(j - 0.4 + width * (i + 0.5))
            heights.append(height)
            errs.append(0 if never or p90 is None or math.isinf(p90) else max(0.0, p90 - p50))
            hatches.append(never)
        bars = ax.bar(xs, heights, width, label=name, yerr=[[0] * len(errs), errs], capsize=2)
        for bar, never in zip(bars, hatches):
            if never:
                bar.set_hatch("//")
                bar.set_alpha(0.5)
                ax.annotate("never", (bar.get_x() + bar.get_width() / 2, bar.get_height() * 0.8), ha="center", va="top", fontsize=7, rotation=90)
    ax.set_yscale("log")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fig.savefig(path, format=os.path.splitext(path)[1].lstrip(".").lower() or "svg")  # .svg, or .png etc.
    plt.close(fig)
    return True
