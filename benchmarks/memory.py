"""Memory runaways: how far past its budget a growing cell is stopped,
the guard against a real limit, stock side by side.

    python benchmarks/memory.py [--rates 0.1,0.5,1,2,5] [--json PATH]   (root: it makes memory cgroups)

For each target growth rate (GB/s; a cell appends 10 MB bytearrays, pacing
itself with sleeps, and the rate it reached is reported):

- budget: our kernel (both exec modes) in a 4 GiB cgroup, `%%budget memory=500M`:
  how many MB past the budget the kernel had grown when the watchdog tripped;
- guard: our kernel (main mode) in a 1 GiB cgroup, no budget: where the guard
  tripped, how far below the limit, and whether the OOM killer came first;
- stock: ipykernel in the same 1 GiB cgroup: killed or not, and when.

Then the cost of one memory sample (what the watchdog adds per 20 ms tick while
a cell runs; it samples nothing while idle).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import Kernel, environment, kernels_cleaned_up, markdown_table, wait_reply, write_json

from cancelkernel import protocol
from cancelkernel.runtime.execution import Execution
from cancelkernel.runtime.memory_guard import GuardSettings, MemoryGuard
from cancelkernel.testing import private_kernelspecs
from cancelkernel.testing.cgroups import memory_cgroup

GiB, MiB = 2**30, 2**20
BUDGET = 500 * MiB
CHUNK = 10 * 2**20
# A cell that grows at `rate` GB/s (at most: the machine's page faults bound it) and says how fast it went.
GROW = """import time
held, started = [], time.perf_counter()
while True:
    t = time.perf_counter()
    held.append(bytearray({chunk}))
    pause = {chunk} / ({rate} * 1e9) - (time.perf_counter() - t)
    if pause > 0:
        time.sleep(pause)
    __rate = len(held) * {chunk} / (time.perf_counter() - started) / 1e9
"""


def grow_code(rate: float) -> str:
    return GROW.format(chunk=CHUNK, rate=rate)


def reached_rate(kc) -> float | None:
    reply = wait_reply(kc, kc.execute("", user_expressions={"r": "__rate"}))
    found = reply["content"]["user_expressions"]["r"]
    return float(found["data"]["text/plain"]) if found.get("status") == "ok" else None


def budget_run(mode: str, rate: float) -> dict:
    with memory_cgroup(4 * GiB) as cgroup:
        kernel = Kernel(mode).start()
        try:
            cgroup.add(kernel.km.provisioner.pid)
            reply = wait_reply(
                kernel.kc, kernel.kc.execute(f"%%budget memory={BUDGET}\n" + grow_code(rate)), timeout=300
            )
            memory = reply["metadata"][protocol.KEY].get("memory") or {}
            past = (memory["at_trip"] - memory["start"] - BUDGET) / 1e6 if memory else None
            stopped = reply["metadata"][protocol.KEY].get("reason") == protocol.REASON_MEMORY_BUDGET
            return {"mode": mode, "rate": rate, "reached": reached_rate(kernel.kc), "past_budget_mb": past,
                    "stopped": stopped}  # fmt: skip
        finally:
            kernel.shutdown()


def guard_run(kernel_name: str, rate: float) -> dict:
    with memory_cgroup(1 * GiB) as cgroup:
        kernel = Kernel(kernel_name).start()
        try:
            cgroup.add(kernel.km.provisioner.pid)
            started = time.monotonic()
            msg_id = kernel.kc.execute(grow_code(rate))
            while kernel.km.is_alive():
                try:
                    reply = wait_reply(kernel.kc, msg_id, timeout=0.2)
                    break
                except TimeoutError:  # no reply yet
                    continue
            else:
                return {"kernel": kernel_name, "rate": rate, "killed": True, "oom_kills": cgroup.oom_kills(),
                        "after_s": round(time.monotonic() - started, 2)}  # fmt: skip
            memory = reply["metadata"].get(protocol.KEY, {}).get("memory") or {}
            return {"kernel": kernel_name, "rate": rate, "killed": False, "oom_kills": cgroup.oom_kills(),
                    "reached": reached_rate(kernel.kc), "at_trip_mb": (memory.get("at_trip") or 0) / 1e6,
                    "below_limit_mb": (GiB - (memory.get("at_trip") or 0)) / 1e6,
                    "after_s": round(time.monotonic() - started, 2)}  # fmt: skip
        finally:
            kernel.shutdown()


def sample_cost(repeat: int = 5000) -> dict:
    """CPU microseconds per memory sample in a cgroup with a limit (what the kernel pays per watchdog tick), by case."""
    costs = {}
    with memory_cgroup(4 * GiB) as cgroup:
        cgroup.add(os.getpid())
        try:
            for case, start, margin in (
                ("cell not growing", None, 0),
                ("cell grew", 0, 0),
                ("near the guard", 0, 4 * GiB),
            ):
                # No rlimit on this process
                guard = MemoryGuard(GuardSettings(enabled=True, margin=margin, data_limit=False))
                execution = Execution(msg_id="m", generation=1, code="", thread_id=0)
                guard.begin(execution)
                if start is not None:
                    execution.memory.resident_start = start  # as if the cell had grown the kernel from nothing
                t = time.process_time()
                for _ in range(repeat):
                    guard.sample([execution])
                costs[case] = round((time.process_time() - t) / repeat * 1e6, 2)
        finally:
            with open(os.path.join(cgroup.parent, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
    return {
        "sample_us": costs,
        "worst_share_of_a_core_while_a_cell_runs": round(max(costs.values()) / 1e6 / 0.02 * 100, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="0.1,0.5,1,2,5", help="target growth rates in GB/s, comma-separated")
    parser.add_argument("--json", default=None, help="write the results here as JSON")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    results: dict = {"environment": environment(), "budget": [], "guard": [], "cost": None}
    with private_kernelspecs(), kernels_cleaned_up():
        for rate in rates:
            for mode in ("cancelkernel", "cancelkernel-worker"):
                results["budget"].append(budget_run(mode, rate))
                print(results["budget"][-1], flush=True)
            for kernel_name in ("cancelkernel", "python3"):
                results["guard"].append(guard_run(kernel_name, rate))
                print(results["guard"][-1], flush=True)
    results["cost"] = sample_cost()
    fmt = lambda v, spec=".0f": "-" if v is None else format(v, spec)  # noqa: E731
    print("\nPer-cell budget of 500 MiB (4 GiB cgroup): MB past the budget at the trip")
    print(markdown_table(
        ["target GB/s", "reached (main)", "main", "reached (worker)", "worker"],
        [[f"{rate:g}", *[x for r in results["budget"] if r["rate"] == rate
                         for x in (fmt(r["reached"], ".2f"), fmt(r["past_budget_mb"]))]]
         for rate in rates],
    ))  # fmt: skip
    print("\nNo budget, 1 GiB cgroup: ours (the guard) and stock ipykernel")
    rows = []
    for rate in rates:
        ours = next(r for r in results["guard"] if r["rate"] == rate and r["kernel"] == "cancelkernel")
        stock = next(r for r in results["guard"] if r["rate"] == rate and r["kernel"] == "python3")
        rows.append([
            f"{rate:g}", fmt(ours.get("reached"), ".2f"),
            "killed" if ours["killed"]
            else f"stopped at {ours['at_trip_mb']:.0f} MB ({ours['below_limit_mb']:.0f} MB below)",
            f"killed after {stock['after_s']:.1f} s" if stock["killed"] else "not killed",
        ])  # fmt: skip
    print(markdown_table(["target GB/s", "reached", "cancelkernel", "stock ipykernel"], rows))
    cost = results["cost"]
    print(f"\nOne memory sample (CPU us): {cost['sample_us']}; "
          f"at worst {cost['worst_share_of_a_core_while_a_cell_runs']} % of a core "
          "while a cell runs (a sample every 20 ms); nothing while idle.")  # fmt: skip
    if args.json:
        write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
