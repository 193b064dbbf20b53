"""No growth: threads, open file descriptors and RSS of a kernel over 10,000 cells with interrupts.

    python benchmarks/soak.py [--cells 10000] [--mode main|worker|both|stock|all] [--json PATH]

Each cell is short (a little busy work, a short sleep, sometimes a print; one
in ten starts a thread, one in twenty sleeps 50 ms); three in ten get an
interrupt_request a few milliseconds after the request (aimed at it, at an
ended cell, or untargeted), and one in ten runs in a subshell.  The
kernel process is sampled from /proc every 1,000 cells; the table shows the
first and last samples and the largest value seen.  `stock` runs the same
cells on stock ipykernel without the interrupts (its interrupt is a SIGINT that
cannot be aimed, and one landing between cells may lose a reply): the baseline
for what IPython itself keeps per cell.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import environment, markdown_table, write_json

from cancelkernel.testing import Kernel, control_request, kernels_cleaned_up, private_kernelspecs, wait_reply


def sample(pid: int) -> dict[str, int]:
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    return {
        "threads": int(fields["Threads"].strip()),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "rss_kb": int(fields["VmRSS"].split()[0]),
    }


def soak(mode: str, cells: int, seed: int) -> dict:
    rng = random.Random(seed)
    stock = mode == "stock"
    if stock:
        kernel = Kernel("python3", label=mode)
    else:
        kernel = Kernel(
            "cancelkernel",
            label=mode,
            extra_arguments=[f"--CancelKernel.exec_thread={mode}", "--CancelKernel.interrupt_grace=0.2"],
        )
    kernel.start()
    kc = kernel.kc
    assert kc is not None
    assert kernel.pid is not None
    subshell = control_request(kc, "create_subshell_request")["content"]["subshell_id"]
    wait_reply(kc, kc.execute("import threading, time\nn = 0"))
    samples, ended, interrupted = [sample(kernel.pid)], [], 0
    started = time.monotonic()
    for i in range(cells):
        draw = rng.random()
        if draw < 0.1:
            code = "threading.Thread(target=lambda: None).start()"  # a thread of the cell's, ending at once
        elif draw < 0.15:
            code = "time.sleep(0.05)"
        else:
            code = rng.choice(
                [
                    "n += 1",
                    "time.sleep(0.002)\nn += 1",
                    "_t = time.perf_counter() + 0.002\nwhile time.perf_counter() < _t: pass",
                    "print(n)",
                ]
            )
        msg = kc.session.msg(
            "execute_request",
            {
                "code": code,
                "silent": False,
                "store_history": False,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": False,
            },
        )
        if rng.random() < 0.1:
            msg["header"]["subshell_id"] = subshell
        kc.shell_channel.send(msg)
        msg_id = msg["header"]["msg_id"]
        if rng.random() < 0.3 and not stock:
            time.sleep(rng.uniform(0, 0.003))  # a few milliseconds after the request: it may be queued, running or done
            target = rng.choice([msg_id, rng.choice(ended) if ended else None, None])
            control_request(kc, "interrupt_request", {"target": target} if target else {})
            interrupted += 1
        reply = wait_reply(kc, msg_id, timeout=30)
        assert reply["content"]["status"] in ("ok", "error"), reply["content"]
        ended.append(msg_id)
        del ended[:-50]
        if (i + 1) % 1000 == 0:
            samples.append(sample(kernel.pid))
    elapsed = time.monotonic() - started
    kernel.shutdown()
    return {"mode": mode, "cells": cells, "interrupts": interrupted, "seconds": round(elapsed, 1), "samples": samples}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--mode", choices=["main", "worker", "both", "stock", "all"], default="both")
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument(
        "--json", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "soak.json")
    )
    args = parser.parse_args()
    if args.cells < 1000:
        parser.error("--cells must be at least 1000 (one sample per 1,000 cells)")
    modes = {"both": ["main", "worker"], "all": ["main", "worker", "stock"]}.get(args.mode, [args.mode])
    results = []
    with kernels_cleaned_up(), private_kernelspecs():
        for mode in modes:
            print(f"soak: {args.cells} cells in {mode} mode ...", file=sys.stderr, flush=True)
            results.append(soak(mode, args.cells, args.seed))
    rows = []
    for r in results:
        first, last = r["samples"][1], r["samples"][-1]  # after the first 1,000 cells: everything is warm
        peak = {k: max(s[k] for s in r["samples"][1:]) for k in first}
        rows.append(
            [
                r["mode"],
                str(r["cells"]),
                str(r["interrupts"]),
                f"{r['seconds']} s",
                f"{first['threads']} -> {last['threads']} (max {peak['threads']})",
                f"{first['fds']} -> {last['fds']} (max {peak['fds']})",
                f"{first['rss_kb'] / 1024:.1f} -> {last['rss_kb'] / 1024:.1f} MB (max {peak['rss_kb'] / 1024:.1f})",
            ]
        )
    print(
        markdown_table(
            ["mode", "cells", "interrupts", "time", "threads", "open fds", "RSS"],
            rows,
            ["l", "r", "r", "r", "l", "l", "l"],
        )
    )
    write_json(args.json, {"environment": environment(), "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
