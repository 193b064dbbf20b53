"""Small helpers shared by the benchmarks: percentiles, and JSON / table / SVG output.

Kernels and messages come from `cancelkernel.testing` (the same helpers the
tests use): every kernel is registered, and `shutdown_all()` (called by
`kernels_cleaned_up()`, at exit, and on SIGTERM/SIGHUP) kills whatever is
left, process group included.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

# -- kernels and messages: the helpers the tests and the demo use too -----------------
from cancelkernel.testing import (  # noqa: F401 - re-exported for the benchmark scripts
    Kernel,
    control_request,
    drain_channel,
    kernels_cleaned_up,
    send_control,
    shutdown_all,
    wait_for,
    wait_idle,
    wait_reply,
)

# -- the runaway cells the server benchmarks interrupt (label, code) --------------------

RUNAWAYS = [
    ("while True: pass", "while True:\n    pass"),
    ("time.sleep", "import time\ntime.sleep(10**6)"),
    ("Event().wait()", "import threading\nthreading.Event().wait()"),
    ("recv", "import socket\na, b = socket.socketpair()\na.recv(1)"),
    ("await asyncio.sleep", "import asyncio\nawait asyncio.sleep(10**6)"),
    ("regex", "import re\nre.match(r'(a+)+$', 'a' * 40 + 'b')"),
]


# -- processes -----------------------------------------------------------------------

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (every thread), in seconds, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # fields 14 and 15 of proc(5), counted after the ")"


# -- numbers -------------------------------------------------------------------------


# Stock ipykernel and ours in both exec modes: label -> (kernelspec name, extra kernel arguments).
STOCK_AND_OURS: dict[str, tuple[str, tuple[str, ...]]] = {
    "stock": ("python3", ()),
    "main": ("cancelkernel", ("--CancelKernel.exec_thread=main",)),
    "worker": ("cancelkernel", ("--CancelKernel.exec_thread=worker",)),
}

BASE_SUFFIX = "-base"  # "main-base": main mode of the cancelkernel installed in --baseline DIR


def kernel_from(
    label: str, baseline: str | None, kernels: dict[str, tuple[str, tuple[str, ...]]] | None = None, **kwargs: Any
) -> Kernel:
    """An unstarted Kernel for a label of `kernels` (default STOCK_AND_OURS), or "<mode>-base": that mode
    importing cancelkernel from `baseline`."""
    name, extra = (kernels or STOCK_AND_OURS)[label.removesuffix(BASE_SUFFIX)]
    if label.endswith(BASE_SUFFIX):
        if not baseline:
            raise ValueError(f"{label} needs --baseline DIR")
        kwargs["env"] = {**(kwargs.get("env") or {}), "PYTHONPATH": os.path.abspath(baseline)}
    return Kernel(name, label=label, extra_arguments=extra, **kwargs)


def check_imported_from(kernel: Kernel, baseline: str | None) -> None:
    """Raise unless a "<mode>-base" kernel imported cancelkernel from `baseline` (a PYTHONPATH that did not apply)."""
    if not (kernel.label.endswith(BASE_SUFFIX) and baseline):
        return
    kc = kernel.kc
    assert kc is not None
    reply = wait_reply(kc, kc.execute("pass", user_expressions={"from": "__import__('cancelkernel').__file__"}))
    where = reply["content"]["user_expressions"]["from"]["data"]["text/plain"]
    if os.path.abspath(baseline) not in where:
        raise RuntimeError(f"{kernel.label} imported cancelkernel from {where}, not from {baseline}")


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
        except Exception:  # noqa: BLE001 - an import may fail in any way: the version is then unknown
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


def read_json(path: str) -> Any:
    """What write_json wrote, with every "never" an infinite duration again."""
    with open(path) as f:
        return _from_json(json.load(f))


def _from_json(value: Any) -> Any:
    if value == "never":
        return math.inf
    if isinstance(value, dict):
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


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
        return (
            "| "
            + " | ".join(c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(cells, widths, align, strict=False))
            + " |"
        )

    rule = (
        "|"
        + "|".join(("-" * (w + 1) + ":") if a == "r" else ("-" * (w + 2)) for w, a in zip(widths, align, strict=False))
        + "|"
    )
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
    except Exception:  # noqa: BLE001 - optional: a matplotlib that fails to import in any way draws nothing
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
        for bar, never in zip(bars, hatches, strict=False):
            if never:
                bar.set_hatch("//")
                bar.set_alpha(0.5)
                ax.annotate(
                    "never",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height() * 0.8),
                    ha="center",
                    va="top",
                    fontsize=7,
                    rotation=90,
                )
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
