#!/usr/bin/env python
"""What the native cancel point costs, and how fast it stops a loop.

1. ns per iteration of non-vectorisable loops (a xorshift chain; the Monte
   Carlo example) without and with the inline check `cancel_requested()`
   (and `raise_if_cancelled()`).  Goal: overhead <= 5 %.
2. Flag set -> loop exit (in one process: a nogil loop on a thread spins on
   `cancel_requested()`, the main thread calls `cancel()`), and flag set ->
   KeyboardInterrupt back in Python.
3. Interrupt -> execute_reply through a real kernel, main and worker mode:
   the nogil loop stopped by `interrupt_request`, the GIL-held loop stopped
   by SIGINT to the kernel (its control thread is starved, so a message could
   not even be read).  Goal: p50 <= 5 ms.

The loops are compiled in a temporary directory against the installed
cancelkernel with the venv's Cython, as a third-party package would.

    python benchmarks/native_overhead.py
    python benchmarks/native_overhead.py --runs 20 --json benchmarks/results/native.json
    python benchmarks/native_overhead.py --no-kernel     # parts 1 and 2 only
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "native"))
from _common import (  # noqa: E402
    Kernel,
    environment,
    fmt_seconds,
    kernels_cleaned_up,
    markdown_table,
    percentile,
    send_control,
    wait_for,
    wait_reply,
    write_json,
)
from native_build import build_extensions  # noqa: E402

from cancelkernel.testing import private_kernelspecs  # noqa: E402

OVERHEAD_GOAL = 5.0  # percent
LATENCY_GOAL = 0.005  # seconds, p50

BENCH_SOURCE = """\
# cython: language_level=3, boundscheck=False, wraparound=False
from libc.stdint cimport uint64_t
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC
from cancelkernel.native cimport cancel_requested, raise_if_cancelled


cdef inline uint64_t step(uint64_t x) noexcept nogil:
    # xorshift64*: every iteration depends on the last, nothing to vectorise.
    x ^= x >> 12
    x ^= x << 25
    x ^= x >> 27
    return x * 2685821657736338717ULL


def plain(long long n, uint64_t x=88172645463325252):
    cdef long long i
    with nogil:
        for i in range(n):
            x = step(x)
    return x


def checked(long long n, uint64_t x=88172645463325252):
    cdef long long i
    with nogil:
        for i in range(n):
            x = step(x)
            if cancel_requested():
                break
    return x


def checked_raise(long long n, uint64_t x=88172645463325252):
    cdef long long i
    with nogil:
        for i in range(n):
            x = step(x)
            raise_if_cancelled()
    return x


cdef long long now_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec * 1000000000LL + ts.tv_nsec


def spin_until_cancelled():
    # CLOCK_MONOTONIC ns at which the loop saw the flag (time.monotonic_ns() uses the same clock).
    cdef uint64_t x = 1
    cdef long long seen
    with nogil:
        while not cancel_requested():
            x = step(x)
        seen = now_ns()
    return seen
"""


def ns_per_iteration(func, n: int) -> float:
    start = time.perf_counter_ns()
    func(n)
    return (time.perf_counter_ns() - start) / n


def measure_overhead(bench, montecarlo, n: int, repeats: int) -> list[dict]:
    """Interleaved runs (plain, checked, ...) so that drift hits every variant alike; medians."""
    pairs = [
        ("xorshift chain", "no check", bench.plain, n),
        ("xorshift chain", "cancel_requested()", bench.checked, n),
        ("xorshift chain", "raise_if_cancelled()", bench.checked_raise, n),
        ("Monte Carlo pi (example)", "no check", montecarlo.pi_nocheck, n // 4),
        ("Monte Carlo pi (example)", "cancel_requested()", montecarlo.pi_gil, n // 4),
        ("Monte Carlo pi (example)", "raise_if_cancelled(), nogil", montecarlo.pi_nogil, n // 4),
    ]
    samples: dict[tuple[str, str], list[float]] = {(loop, variant): [] for loop, variant, _, _ in pairs}
    for _loop, _variant, func, count in pairs:  # warm-up
        func(count // 10)
    for _ in range(repeats):
        for loop, variant, func, count in pairs:
            samples[(loop, variant)].append(ns_per_iteration(func, count))
    rows = []
    for loop, variant, _, _ in pairs:
        median = statistics.median(samples[(loop, variant)])
        base = statistics.median(samples[(loop, "no check")])
        rows.append(
            {
                "loop": loop,
                "variant": variant,
                "ns_per_iteration": median,
                "overhead_percent": 100.0 * (median - base) / base,
                "samples": samples[(loop, variant)],
            }
        )
    return rows


def measure_flag_latency(flag, bench, runs: int) -> dict:
    """flag set -> loop noticed (ns), and flag set -> KeyboardInterrupt caught in Python (ns)."""
    noticed, raised = [], []
    for gen in range(1, runs + 1):
        flag.begin(gen)
        seen: list[int] = []
        thread = threading.Thread(target=lambda: seen.append(bench.spin_until_cancelled()))  # noqa: B023 - joined in this iteration
        thread.start()
        time.sleep(0.005)
        set_at = time.monotonic_ns()
        flag.cancel(gen)
        thread.join()
        noticed.append(max(0, seen[0] - set_at))
        flag.end(gen)
    for gen in range(runs + 1, 2 * runs + 1):
        flag.begin(gen)
        caught: list[int] = []

        def run() -> None:
            try:
                bench.checked_raise(1 << 62)
            except KeyboardInterrupt:
                caught.append(time.monotonic_ns())  # noqa: B023 - run() ends in this iteration

        thread = threading.Thread(target=run)
        thread.start()
        time.sleep(0.005)
        set_at = time.monotonic_ns()
        flag.cancel(gen)
        thread.join()
        raised.append(caught[0] - set_at)
        flag.end(gen)
    return {"noticed_ns": noticed, "raised_ns": raised}


# -- through a real kernel --------------------------------------------------------------

KERNEL_CASES = [
    # (label, cell, how to interrupt)
    ("nogil loop, interrupt_request", "montecarlo.pi_nogil(10**15)", "message"),
    ("GIL-held loop, SIGINT", "montecarlo.pi_gil(10**15)", "signal"),
    ("cancellable_sleep, interrupt_request", "montecarlo.nap(3600)", "message"),
]


def _install_spec(prefix: str) -> str:
    from cancelkernel.kernelspec import install

    install(prefix=prefix, name="cancelkernel-native-bench")
    path = os.path.join(prefix, "share", "jupyter")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [path, os.environ.get("JUPYTER_PATH")]))
    return "cancelkernel-native-bench"


def _start_cell(kernel: Kernel, code: str, marker: str) -> str:
    # A marker file, not a print: a GIL-held loop starves the kernel's IOPub thread.
    kc = kernel.kc
    assert kc is not None
    msg_id = kc.execute(f"open({marker!r}, 'w').close()\n{code}", stop_on_error=False)
    deadline = time.monotonic() + 30
    while not os.path.exists(marker):
        if time.monotonic() > deadline:
            raise TimeoutError(f"cell {code!r} did not start")
        time.sleep(0.002)
    os.unlink(marker)
    time.sleep(0.1)  # into the loop
    return msg_id


def measure_kernel(example_dir: str, modes: list[str], runs: int, workdir: str) -> list[dict]:
    name = _install_spec(os.path.join(workdir, "spec"))
    marker = os.path.join(workdir, "started")
    results = []
    with kernels_cleaned_up(), private_kernelspecs():
        for mode in modes:
            kernel = Kernel(name, label=mode, extra_arguments=[f"--CancelKernel.exec_thread={mode}"])
            kernel.start()
            try:
                assert kernel.kc is not None
                assert kernel.km is not None
                setup = f"import sys; sys.path.insert(0, {example_dir!r}); import montecarlo; x = 41"
                reply = wait_reply(kernel.kc, kernel.kc.execute(setup), 30)
                assert reply["content"]["status"] == "ok", reply["content"]
                for label, cell, how in KERNEL_CASES:
                    latencies = []
                    for _ in range(runs):
                        msg_id = _start_cell(kernel, cell, marker)
                        if how == "message":
                            _, sent = send_control(kernel.kc, "interrupt_request", {})
                        else:
                            sent = time.perf_counter()
                            kernel.km.signal_kernel(signal.SIGINT)
                        reply = wait_reply(kernel.kc, msg_id, 30)
                        assert reply["content"]["status"] == "error", reply["content"]
                        latencies.append(reply["_received"] - sent)
                        check = wait_reply(kernel.kc, kernel.kc.execute("assert x == 41"), 30)
                        assert check["content"]["status"] == "ok", check["content"]
                    results.append({"mode": mode, "case": label, "interrupt": how, "seconds": latencies})
                    # Control replies pile up unread; drop them between cases.
                    while True:
                        try:
                            wait_for(kernel.kc.control_channel, lambda m: True, 0.01)
                        except TimeoutError:
                            break
            finally:
                kernel.shutdown()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=50_000_000, help="loop length for the ns/iteration runs")
    parser.add_argument("--repeats", type=int, default=9, help="interleaved repeats of each loop (median taken)")
    parser.add_argument("--runs", type=int, default=10, help="samples per latency case")
    parser.add_argument("--modes", default="main,worker", help="exec modes of the kernel part")
    parser.add_argument("--no-kernel", action="store_true", help="skip the measurements through a real kernel")
    parser.add_argument("--json", metavar="FILE", help="write every sample and the environment to FILE")
    args = parser.parse_args(argv)

    import cancelkernel.native as native

    if not native.available:
        print(f"the compiled flag is not available ({native.import_error}); nothing to measure", file=sys.stderr)
        return 2
    from cancelkernel.native import _flag

    with tempfile.TemporaryDirectory(prefix="ck-native-bench-") as workdir:
        bench_pyx = os.path.join(workdir, "ck_bench.pyx")
        with open(bench_pyx, "w") as f:
            f.write(BENCH_SOURCE)
        build_extensions(
            workdir,
            {
                "ck_bench": bench_pyx,
                "montecarlo": os.path.join(ROOT, "examples", "native", "montecarlo.pyx"),
            },
        )
        sys.path.insert(0, workdir)
        import ck_bench
        import montecarlo

        overhead = measure_overhead(ck_bench, montecarlo, args.iterations, args.repeats)
        flag_latency = measure_flag_latency(_flag, ck_bench, max(args.runs, 50))
        kernel = [] if args.no_kernel else measure_kernel(workdir, args.modes.split(","), args.runs, workdir)

    print("\n## Cost of a cancel point per iteration (median of interleaved runs)\n")
    print(
        markdown_table(
            ["loop", "variant", "ns / iteration", "overhead", f"goal <= {OVERHEAD_GOAL:g} %"],
            [
                [
                    r["loop"],
                    r["variant"],
                    f"{r['ns_per_iteration']:.3f}",
                    f"{r['overhead_percent']:+.1f} %",
                    ""
                    if r["variant"] == "no check"
                    else ("ok" if r["overhead_percent"] <= OVERHEAD_GOAL else "MISSED"),
                ]
                for r in overhead
            ],
            ["l", "l", "r", "r", "l"],
        )
    )
    print("\n## Flag set -> loop reacts (one process, nogil loop on a thread)\n")
    rows = []
    for key, what in (("noticed_ns", "loop sees the flag"), ("raised_ns", "KeyboardInterrupt caught in Python")):
        values = flag_latency[key]
        rows.append(
            [what, f"{percentile(values, 50) / 1e3:.1f} µs", f"{percentile(values, 90) / 1e3:.1f} µs", str(len(values))]
        )
    print(markdown_table(["from cancel()", "p50", "p90", "runs"], rows))
    if kernel:
        print("\n## Interrupt -> execute_reply through a real kernel\n")
        print(
            markdown_table(
                ["mode", "cell", "p50", "p90", "max", f"goal p50 <= {LATENCY_GOAL * 1e3:g} ms"],
                [
                    [
                        r["mode"],
                        r["case"],
                        fmt_seconds(percentile(r["seconds"], 50)),
                        fmt_seconds(percentile(r["seconds"], 90)),
                        fmt_seconds(max(r["seconds"])),
                        "ok" if percentile(r["seconds"], 50) <= LATENCY_GOAL else "MISSED",
                    ]
                    for r in kernel
                ],
                ["l", "l", "r", "r", "r", "l"],
            )
        )
    if args.json:
        write_json(
            args.json,
            {
                "environment": environment(),
                "iterations": args.iterations,
                "repeats": args.repeats,
                "overhead": overhead,
                "flag_latency": flag_latency,
                "kernel": kernel,
                "goals": {"overhead_percent": OVERHEAD_GOAL, "latency_p50_seconds": LATENCY_GOAL},
            },
        )
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
