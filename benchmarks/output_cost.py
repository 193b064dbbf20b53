#!/usr/bin/env python
"""What output costs: stock ipykernel vs cancelkernel (main and worker mode), in ONE run.

Every write of a cell feeds our quiet-budget clock (kernel/streams.py); this
measures what output-heavy cells cost against stock: 200,000 `print`s to
stdout and to stderr, a flood of `display()`, and one 50 MB write and print.
Each case is timed from the `execute_request` sent to its `execute_reply` and
`status: idle` received, every output counted on the way, together with the
CPU time the kernel process used meanwhile (all its threads, from /proc: the
number the machine's load does not move).  Kernels are interleaved sample by
sample (case, run, kernel, in a rotating order), so drift in the machine's
load hits all of them alike.  The client reads iopub with no high-water mark;
zmq may still drop part of a flood on the kernel's side when the machine is
loaded (stock's too): such samples are listed, and taken again only if the
idle status itself was lost.

    python benchmarks/output_cost.py --runs 7 --json benchmarks/results/output_cost.json
    python benchmarks/output_cost.py --cases print,display --runs 3
    python benchmarks/output_cost.py --breakdown      # also: the CPU one write costs inside each kernel
    python benchmarks/output_cost.py --runs 0 --breakdown --kernels stock,main,main-noyield

Prints two markdown tables (wall and kernel CPU: p50 / p90 per kernel, p50
ratio to stock) and the load average at the start and the end; --json keeps
every raw sample and the environment.  Leaves no kernel behind, also on
Ctrl-C or errors (Linux only: /proc).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import queue
import subprocess
import sys
import time
import typing as t
from dataclasses import dataclass

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (
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
    wait_reply,
    write_json,
)

from cancelkernel.testing import private_kernelspecs

KERNELS = {
    **STOCK_AND_OURS,
    # Optional, to tell where a difference comes from: main mode without the GIL yield, with Python's switch interval.
    "main-noyield": ("cancelkernel", ("--CancelKernel.exec_thread=main", "--CancelKernel.gil_yield=0")),
    "main-switch5ms": ("cancelkernel", ("--CancelKernel.exec_thread=main", "--CancelKernel.switch_interval=0")),
}
DEFAULT_KERNELS = ("stock", "main", "worker")

BIG = 50_000_000  # characters of the large single writes
DROPPED_AFTER = 5.0  # seconds of silence on iopub after the reply: the idle status was dropped


@dataclass(frozen=True)
class Case:
    label: str
    code: str
    stream_chars: int  # characters of stream text the cell prints (all streams)
    displays: int  # display_data messages it publishes


CASES = {
    "print": Case(
        "`print(i)` × 200,000", "for i in range(200000):\n    print(i)", sum(len(str(i)) + 1 for i in range(200000)), 0
    ),
    "stderr": Case(
        "`print(i, file=sys.stderr)` × 200,000",
        "import sys\nfor i in range(200000):\n    print(i, file=sys.stderr)",
        sum(len(str(i)) + 1 for i in range(200000)),
        0,
    ),
    "display": Case("`display(i)` × 10,000", "for i in range(10000):\n    display(i)", 0, 10000),
    "write": Case("`sys.stdout.write` of 50 MB", "import sys\nsys.stdout.write(_big)", BIG, 0),
    "print_big": Case("`print` of a 50 MB string", "print(_big)", BIG + 1, 0),
}

# Made once per kernel, so the large writes time the write, not building the string.
SETUP = f"_big = 'x' * {BIG}\nimport sys"

# --breakdown: CPU seconds of the calling thread per call of each piece, inside the kernel (best of 5 rounds of N
# calls): the thread's own CPU time, so that other processes on the machine do not count.
BREAKDOWN = r"""
import sys, time, json
def _per_call(fn, n=50000):
    best = float("inf")
    for _ in range(5):
        t0 = time.thread_time()
        for _i in range(n):
            fn()
        best = min(best, (time.thread_time() - t0) / n)
    return best
_s = sys.stdout
_w = _s.write
_found = {"stdout.write('x')": _per_call(lambda: _w("x")), "print(1)": _per_call(lambda: print(1))}
try:
    from cancelkernel.kernel import streams as _streams
    from ipykernel.iostream import OutStream as _Out
    _found["OutStream.write (stock's own)"] = _per_call(lambda: _Out.write(_s, "x"))
    for _name in ("_parent_msg_id",):
        if hasattr(_streams, _name):
            _found["streams." + _name] = _per_call(lambda: getattr(_streams, _name)(_s))
    from cancelkernel.runtime.executors import is_abandoned_thread as _ab
    _found["is_abandoned_thread()"] = _per_call(_ab)
    _cb = getattr(_s, "on_output", None)
    if _cb is not None:
        _found["on_output(msg_id)"] = _per_call(lambda: _cb(None))
except ImportError:
    pass
_found["time.monotonic()"] = _per_call(time.monotonic)
sys.stdout.flush()
"""


def lossless(kernel: Kernel) -> Kernel:
    """Reconnect the client with no receive high-water mark: a flood is received whole, not dropped at 1,000 queued."""
    assert kernel.km is not None
    assert kernel.kc is not None
    kernel.kc.stop_channels()
    kc = kernel.km.client()
    kc.context.setsockopt(zmq.RCVHWM, 0)  # the default of every socket made from it from now on
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    kernel.kc = kc
    return kernel


class Dropped(Exception):
    """A sample's idle status never arrived: zmq's PUB socket drops past its high-water mark (stock's too)."""


@dataclass
class Heard:
    """What one sample's request brought on iopub."""

    where: str
    msg_id: str
    chars: int = 0
    displays: int = 0
    idle_at: float | None = None

    def take(self, msg: dict) -> None:
        if msg["parent_header"].get("msg_id") != self.msg_id:
            return
        kind = msg["msg_type"]
        if kind == "stream":
            self.chars += len(msg["content"]["text"])
        elif kind == "display_data":
            self.displays += 1
        elif kind == "error":
            raise RuntimeError(f"{self.where} failed: {msg['content']['evalue']}")
        elif kind == "status" and msg["content"]["execution_state"] == "idle":
            self.idle_at = time.perf_counter()


def run_case(kernel: Kernel, case: Case, timeout: float, drops: list[str]) -> tuple[float, float]:
    """(seconds from the request sent to its reply and idle status received, all output counted; CPU seconds the
    kernel process used meanwhile, every thread: what the machine's load does not change)."""
    kc, pid = kernel.kc, kernel.pid
    assert kc is not None
    assert pid is not None
    cpu_before = cpu_seconds(pid)
    started = time.perf_counter()
    heard = Heard(f"{kernel.label}: {case.label}", kc.execute(case.code))
    reply: dict | None = None
    last_heard = started
    while heard.idle_at is None:
        try:
            msg = kc.iopub_channel.get_msg(timeout=0.2)
        except queue.Empty:
            reply = reply or _reply_if_there(kc, heard.msg_id)
            if time.perf_counter() - started > timeout:
                raise TimeoutError(f"{heard.where}: no idle status within {timeout:g} s") from None
            if reply is not None and time.perf_counter() - last_heard > DROPPED_AFTER:
                raise Dropped(f"{heard.where}: the idle status never came") from None
            continue
        last_heard = time.perf_counter()
        heard.take(msg)
    reply = reply or wait_reply(kc, heard.msg_id, timeout=timeout)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"{heard.where}: {reply['content']}")
    if (heard.chars, heard.displays) != (case.stream_chars, case.displays):
        # The kernel did all the work (the idle status came last): the sample counts, the loss is noted.
        drops.append(
            f"{heard.where}: received {heard.chars:,} of {case.stream_chars:,} characters, "
            f"{heard.displays:,} of {case.displays:,} displays"
        )
    return max(heard.idle_at, reply["_received"]) - started, cpu_seconds(pid) - cpu_before


def _reply_if_there(kc: t.Any, msg_id: str) -> dict | None:
    """The execute_reply if it has arrived (the shell channel is read only while iopub is silent)."""
    while True:
        try:
            msg = kc.shell_channel.get_msg(timeout=0)
        except queue.Empty:
            return None
        if msg["parent_header"].get("msg_id") == msg_id:
            msg["_received"] = time.perf_counter()
            return t.cast(dict, msg)


def sample(kernel: Kernel, case: Case, timeout: float, drops: list[str]) -> tuple[float, float]:
    """One sample; one whose idle status was dropped on the way is noted and taken again (3 tries)."""
    for _ in range(3):
        try:
            return run_case(kernel, case, timeout, drops)
        except Dropped as exc:
            drops.append(str(exc))
            print(f"dropped, taken again: {exc}", file=sys.stderr)
    raise RuntimeError(f"{kernel.label}: {case.label}: output dropped three times in a row: {drops[-1]}")


def breakdown(kernel: Kernel) -> dict[str, float]:
    """Per-call seconds of one write and of the pieces of our wrapper, measured inside the kernel."""
    kc = kernel.kc
    assert kc is not None
    reply = wait_reply(kc, kc.execute(BREAKDOWN, user_expressions={"found": "json.dumps(_found)"}), timeout=300)
    found = reply["content"]["user_expressions"]["found"]
    if found.get("status") != "ok":
        raise RuntimeError(f"{kernel.label}: the breakdown failed: {found}")
    return dict(json.loads(ast.literal_eval(found["data"]["text/plain"])))


def start(label: str, baseline: str | None) -> Kernel:
    """A kernel of KERNELS (or, for "<mode>-base", that mode importing cancelkernel from `baseline`), set up."""
    kernel = lossless(kernel_from(label, baseline, KERNELS, output=subprocess.DEVNULL).start())
    check_imported_from(kernel, baseline)
    kc = kernel.kc
    assert kc is not None
    wait_reply(kc, kc.execute(SETUP))
    return kernel


def breakdowns(kernels: dict[str, Kernel], rounds: int = 3) -> dict[str, dict[str, float]]:
    """The best per-call time of each piece over `rounds` rounds, kernel after kernel in each round."""
    best: dict[str, dict[str, float]] = {label: {} for label in kernels}
    for _ in range(rounds):
        for label, kernel in kernels.items():
            for name, seconds in breakdown(kernel).items():
                best[label][name] = min(seconds, best[label].get(name, seconds))
    return best


def measure(
    kernels: dict[str, Kernel], cases: list[str], runs: int, timeout: float, drops: list[str]
) -> dict[str, dict[str, list]]:
    samples: dict[str, dict[str, list]] = {c: {k: [] for k in kernels} for c in cases}
    order = list(kernels)
    for run in range(runs + 1):  # run 0 warms every case up and is not counted
        for case_name in cases:
            for label in order:
                wall_and_cpu = sample(kernels[label], CASES[case_name], timeout, drops)
                if run:
                    samples[case_name][label].append(wall_and_cpu)
            order = order[1:] + order[:1]  # nobody always goes first
        print(f"run {run}/{runs} done, load {os.getloadavg()[0]:.2f}", file=sys.stderr)
    return samples


def table(samples: dict[str, dict[str, list]], kernels: list[str], column: int) -> str:
    """p50 / p90 per kernel and the p50 ratio to stock, of the wall time (column 0) or the kernel's CPU time (1)."""
    headers = ["case"]
    for label in kernels:
        headers += [f"{label} p50", f"{label} p90"] + ([] if label == "stock" else [f"{label} ÷ stock"])
    rows = []
    for case_name, per_kernel in samples.items():
        row = [CASES[case_name].label]
        stock = percentile([s[column] for s in per_kernel.get("stock", [])], 50)
        for label in kernels:
            values = [s[column] for s in per_kernel[label]]
            p50, p90 = percentile(values, 50), percentile(values, 90)
            row += [fmt_seconds(p50), fmt_seconds(p90)]
            if label != "stock":
                row.append(f"{p50 / stock:.3f}×" if stock and p50 else "—")
        rows.append(row)
    return markdown_table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=7, help="samples per case and kernel (default 7)")
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)}")
    p.add_argument(
        "--kernels", default=",".join(DEFAULT_KERNELS), help=f"comma-separated subset of {','.join(KERNELS)}"
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one sample may take before it fails")
    p.add_argument("--breakdown", action="store_true", help="also time one write and its pieces inside each kernel")
    p.add_argument(
        "--baseline",
        metavar="DIR",
        help="also run main and worker mode of the cancelkernel installed in DIR (`pip install --no-deps --target DIR "
        "CHECKOUT`) as main-base and worker-base: before and after a change in one run",
    )
    p.add_argument("--json", metavar="FILE", help="write every raw sample and the environment here")
    args = p.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    labels = [k for k in args.kernels.split(",") if k]
    if args.baseline:
        labels += [f"{mode}-base" for mode in ("main", "worker") if mode in labels]
    unknown = [c for c in cases if c not in CASES] + [
        k for k in labels if k not in KERNELS and k.removesuffix("-base") not in KERNELS
    ]
    if unknown:
        p.error(f"unknown case or kernel: {', '.join(unknown)}")
    load_before = os.getloadavg()
    with kernels_cleaned_up(), private_kernelspecs():
        kernels = {}
        drops: list[str] = []
        try:
            for label in labels:
                kernels[label] = start(label, args.baseline)
            pieces = breakdowns(kernels) if args.breakdown else {}
            samples = measure(kernels, cases, args.runs, args.timeout, drops) if args.runs else {}
        finally:
            for kernel in kernels.values():
                kernel.shutdown()
    load_after = os.getloadavg()
    print("wall time, request sent -> reply and idle received (all output counted):\n")
    print(table(samples, labels, 0))
    print("\nCPU time of the kernel process (all threads, /proc; clock tick 10 ms) over the same samples:\n")
    print(table(samples, labels, 1))
    print(
        f"\nload average (1, 5, 15 min): {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} at the start, "
        f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} at the end; {args.runs} samples per cell"
    )
    if drops:
        print(f"\nsamples of which zmq dropped part of the output under load (idle lost: taken again): {len(drops)}")
        for line in drops:
            print(f"  {line}")
    if pieces:
        print("\nCPU time of the writing thread per call, inside each kernel (best of 3 rounds of 5 × 50,000):")
        names = sorted({n for found in pieces.values() for n in found})
        rows = [[n] + [f"{pieces[k][n] * 1e6:.3f} µs" if n in pieces[k] else "—" for k in labels] for n in names]
        print(markdown_table(["call", *labels], rows))
    if args.json:
        write_json(
            args.json,
            {
                "samples": samples,
                "breakdown": pieces,
                "dropped": drops,
                "load": [load_before, load_after],
                "environment": environment(),
                "runs": args.runs,
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
