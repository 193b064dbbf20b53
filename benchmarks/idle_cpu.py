#!/usr/bin/env python
"""CPU an idle kernel uses: stock ipykernel and cancelkernel (both modes), side by side, one run.

Each kernel runs one cell and one interrupted cell (so "idle" includes "idle
after an interrupt"), then sits idle.  After a settling pause, the kernel
process's utime + stime (all its threads, from /proc/PID/stat) is read at the
start and the end of the window.  Linux only.

    python benchmarks/idle_cpu.py                 # 30 s window
    python benchmarks/idle_cpu.py --seconds 60 --json benchmarks/results/idle_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import TICKS, Kernel, control_request, cpu_seconds, kernels_cleaned_up, wait_reply  # noqa: E402

from cancelkernel.testing import private_kernelspecs  # noqa: E402

KERNELS = {
    "stock": ("python3", []),
    "main": ("cancelkernel", ["--CancelKernel.exec_thread=main"]),
    "worker": ("cancelkernel", ["--CancelKernel.exec_thread=worker"]),
}


def warm_up(kernel: Kernel) -> None:
    """One plain cell and one interrupted cell, then wait for both replies."""
    kc = kernel.kc
    assert kc is not None
    wait_reply(kc, kc.execute("x = 1"))
    msg_id = kc.execute("import time\ntime.sleep(30)", stop_on_error=False)
    time.sleep(0.5)
    control_request(kc, "interrupt_request")
    wait_reply(kc, msg_id)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the idle window (default 30)")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds idle before the window starts (default 3)")
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args()
    results: dict[str, dict] = {}
    with kernels_cleaned_up(), private_kernelspecs():
        kernels = {
            label: Kernel(name, label=label, extra_arguments=extra).start() for label, (name, extra) in KERNELS.items()
        }
        try:
            for kernel in kernels.values():
                warm_up(kernel)
            time.sleep(args.settle)
            pids = {label: k.pid for label, k in kernels.items()}
            assert all(pids.values()), f"no pid for a kernel: {pids}"
            before = {label: cpu_seconds(pid) for label, pid in pids.items()}  # type: ignore[arg-type]
            started = time.monotonic()
            time.sleep(args.seconds)
            window = time.monotonic() - started
            after = {label: cpu_seconds(pid) for label, pid in pids.items()}  # type: ignore[arg-type]
        finally:
            for kernel in kernels.values():
                kernel.shutdown()
    for label in KERNELS:
        used = after[label] - before[label]
        results[label] = {
            "cpu_seconds": round(used, 3),
            "window": round(window, 2),
            "percent": round(100 * used / window, 3),
        }
    stock = results["stock"]["cpu_seconds"]
    print(f"idle CPU over {window:.1f} s (utime+stime from /proc, clock tick {1 / TICKS:g} s)")
    print("| kernel | CPU s | % of one core | vs stock |")
    print("|---|---|---|---|")
    for label, row in results.items():
        ratio = (
            "1.0"
            if label == "stock"
            else (
                f"{row['cpu_seconds'] / stock:.1f}x"
                if stock
                else ("= (both 0)" if not row["cpu_seconds"] else "stock used 0")
            )
        )
        row["vs_stock"] = ratio
        print(f"| {label} | {row['cpu_seconds']:.2f} | {row['percent']:.2f} | {ratio} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seconds": args.seconds, "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
