#!/usr/bin/env python
"""Trivial round trips: stock ipykernel vs cancelkernel, interleaved sample by sample, in ONE run.

What an agent running thousands of small cells pays per cell: the time from
sending an `execute_request` to receiving its `execute_reply`, for three cells:

- `1`: the smallest cell with a value (execute_result);
- `x`: a cell whose value is big (a 100 kB string, set at warm-up): the displayhook
  and a large execute_result;
- `print('a')`: output on a stream.

For every run, cell after cell, kernel after kernel (so drift in the machine's
load hits all kernels alike); after each reply the kernel's idle status is
awaited (not timed), so every sample starts from an idle kernel.  Each kernel
has an IPython directory of its own (its own history database, as a kernel
alone on a machine has), and the CPU time the kernel process spent per cell
(all its threads, from /proc) is printed too: the number load changes least.

    python benchmarks/round_trip.py --runs 1000 --json benchmarks/results/round_trip.json
    python benchmarks/round_trip.py --kernels stock,main,worker --runs 300
    python benchmarks/round_trip.py --baseline /tmp/ckbase --runs 300   # before/after a change, one run
    python benchmarks/round_trip.py --kernels stock,main,floor,floor-ipython   # against the protocol floor

`floor` and `floor-ipython` are benchmarks/floor_kernel.py: the least a Python
kernel does to answer a cell (jupyter_client's Session, the same messages as
ipykernel), running it with eval, or through IPython's run_cell.

Prints p50 / p90 per kernel and cell, the p50 ratio to stock, and cells per
second (1 / p50) for each; writes every raw sample to --json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import (  # noqa: E402
    BASE_SUFFIX,
    STOCK_AND_OURS,
    Kernel,
    check_imported_from,
    cpu_seconds,
    environment,
    fmt_seconds,
    kernel_from,
    kernels_cleaned_up,
    markdown_table,
    percentile,
    wait_idle,
    wait_reply,
    write_json,
)

from cancelkernel.testing import private_kernelspecs  # noqa: E402

# The protocol floor (benchmarks/floor_kernel.py): what any Python kernel pays, and with IPython's run_cell.
FLOOR_KERNELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "floor": ("cancelkernel-floor", ()),
    "floor-ipython": ("cancelkernel-floor-ipython", ("--ipython",)),
}
KERNELS = {**STOCK_AND_OURS, **FLOOR_KERNELS}
CELLS = {"1": "1", "x": "x", "print": "print('a')"}
SETUP = "x = 'x' * 100_000"
TIMEOUT = 30.0


def sample(kernel: Kernel, code: str) -> float:
    """Seconds from sending `code` to its execute_reply; then waits for idle (untimed)."""
    kc = kernel.kc
    assert kc is not None
    content = {
        "code": code,
        "silent": False,
        "store_history": True,
        "user_expressions": {},
        "allow_stdin": False,
        "stop_on_error": True,
    }
    msg = kc.session.msg("execute_request", content)
    sent = time.perf_counter()
    kc.shell_channel.send(msg)
    reply = wait_reply(kc, msg["header"]["msg_id"], TIMEOUT)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"{kernel.label}: {code!r} failed: {reply['content']}")
    wait_idle(kc, msg["header"]["msg_id"], TIMEOUT)
    return float(reply["_received"] - sent)


def install_floor_kernelspecs(prefix: str) -> None:
    """The floor kernels' kernelspecs, beside ours in the private prefix."""
    script = os.path.join(HERE, "floor_kernel.py")
    for name, _arguments in FLOOR_KERNELS.values():
        directory = os.path.join(prefix, "share", "jupyter", "kernels", name)
        os.makedirs(directory, exist_ok=True)
        spec = {"argv": [sys.executable, script, "-f", "{connection_file}"], "display_name": name, "language": "python"}
        with open(os.path.join(directory, "kernel.json"), "w") as f:
            json.dump(spec, f)


def warm_up(kernel: Kernel, count: int) -> None:
    assert kernel.kc is not None
    wait_reply(kernel.kc, kernel.kc.execute(SETUP), TIMEOUT)
    for _ in range(count):
        for code in CELLS.values():
            sample(kernel, code)


def summarize(samples: dict[str, dict[str, list[float]]], labels: list[str]) -> tuple[str, dict]:
    summary: dict[str, dict] = {}
    for label in labels:
        summary[label] = {}
        for cell, values in samples[label].items():
            summary[label][cell] = {"n": len(values), "p50": percentile(values, 50), "p90": percentile(values, 90)}
    headers = ["cell"]
    for label in labels:
        headers += [f"{label} p50", f"{label} p90"]
        if label != "stock" and "stock" in labels:
            headers += [f"{label} ÷ stock p50", f"{label} ÷ stock p90"]
        if f"{label}{BASE_SUFFIX}" in labels:
            headers.append(f"{label} ÷ {label}{BASE_SUFFIX} p50")
        headers.append(f"{label} cells/s")
    rows = []
    for cell, code in CELLS.items():
        row = [f"`{code}`" if cell != "x" else "`x` (a 100 kB str)"]
        for label in labels:
            st = summary[label][cell]
            row += [fmt_seconds(st["p50"]), fmt_seconds(st["p90"])]
            if label != "stock" and "stock" in labels:
                ref = summary["stock"][cell]
                row += [f"{st['p50'] / ref['p50']:.2f}×", f"{st['p90'] / ref['p90']:.2f}×"]
            if f"{label}{BASE_SUFFIX}" in labels:
                ref = summary[f"{label}{BASE_SUFFIX}"][cell]
                row.append(f"{st['p50'] / ref['p50']:.2f}×")
            row.append(f"{1 / st['p50']:.0f}")
        rows.append(row)
    return markdown_table(headers, rows), summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000, help="samples per cell and kernel (default 1000)")
    parser.add_argument("--warm-up", type=int, default=20, help="untimed rounds first (default 20)")
    parser.add_argument("--kernels", default="stock,main", help=f"comma-separated, from {','.join(KERNELS)}")
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="also run main and worker mode of the cancelkernel installed in DIR (`pip install --no-deps --target DIR "
        "CHECKOUT`) as main-base and worker-base: before and after a change in one run",
    )
    parser.add_argument("--json", metavar="FILE", help="write every raw sample and the environment here")
    args = parser.parse_args(argv)
    labels = [k for k in KERNELS if k in args.kernels.split(",")]
    if args.baseline:
        labels += [f"{mode}{BASE_SUFFIX}" for mode in ("main", "worker") if mode in labels]
    samples: dict[str, dict[str, list[float]]] = {label: {cell: [] for cell in CELLS} for label in labels}
    began = time.time()
    load_before = os.getloadavg()
    with kernels_cleaned_up(), private_kernelspecs() as prefix:
        install_floor_kernelspecs(prefix)
        kernels = {}
        for label in labels:
            # Each kernel its own IPython directory: two kernels writing one history database would wait on each other.
            env = {"IPYTHONDIR": tempfile.mkdtemp(prefix=f"ck-round-trip-{label}-")}
            kernels[label] = kernel_from(label, args.baseline, KERNELS, env=env).start()
            check_imported_from(kernels[label], args.baseline)
        for kernel in kernels.values():
            warm_up(kernel, args.warm_up)
        cpu_before = {label: cpu_seconds(k.pid) for label, k in kernels.items() if k.pid}
        for _ in range(args.runs):
            for cell, code in CELLS.items():
                for label in labels:
                    samples[label][cell].append(sample(kernels[label], code))
        # CPU the kernel process spent per cell (every thread): what load on the machine changes least.
        cpu_per_cell = {
            label: (cpu_seconds(kernels[label].pid) - before) / (args.runs * len(CELLS))
            for label, before in cpu_before.items()
        }
        for kernel in kernels.values():
            kernel.shutdown()
    table, summary = summarize(samples, labels)
    load_after = os.getloadavg()
    print(
        f"\nexecute_request -> execute_reply, {args.runs} samples per cell and kernel, interleaved; "
        f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after; {os.cpu_count()} CPUs.\n"
    )
    print(table)
    print()
    print(
        "kernel CPU per cell (all threads, mean over the three cells): "
        + ", ".join(
            f"{label} {cpu * 1e3:.2f} ms"
            + (f" ({cpu / cpu_per_cell['stock']:.2f}× stock)" if label != "stock" and cpu_per_cell.get("stock") else "")
            for label, cpu in cpu_per_cell.items()
        )
    )
    if args.json:
        env = environment()
        write_json(
            args.json,
            {
                "benchmark": "round_trip",
                "config": {"runs": args.runs, "warm_up": args.warm_up, "kernels": labels, "cells": CELLS},
                "environment": env,
                "load": {"before": load_before, "after": load_after},
                "duration_s": round(time.time() - began, 1),
                "summary": summary,
                "cpu_per_cell": cpu_per_cell,
                "samples": samples,
            },
        )
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
