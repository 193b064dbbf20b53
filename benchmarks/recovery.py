#!/usr/bin/env python
"""Recovery time of the agent client: from the trip to the CellResult, per status path, ours vs stock, in ONE run.

For each kernel (cancelkernel main mode, cancelkernel worker mode, stock
ipykernel) and each runaway cell, the cell runs under a wall (or quiet) budget
of BUDGET s through `AgentKernel.run`, with STATE MB of data in the namespace
and (on kernels that have checkpoints) a checkpoint saved before the cell.
Measured: seconds from the moment the budget expired (or, for `died`, from
the moment the cell was sent) to the moment `run` returned, and the result's
status and state.  The goal for the wedged case (one C call holding the GIL):
`restarted` with state `restored` <= 3 s after the budget for 100 MB.

    python benchmarks/recovery.py --runs 3 --json benchmarks/results/recovery.json
    python benchmarks/recovery.py --kernels ours,stock --runs 1 --state-mb 10

Runs are interleaved (run, case, kernel) so machine load hits every kernel alike.
Every kernel is shut down at the end, also on errors (AgentKernel is a context manager).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import environment, fmt_seconds, markdown_table, percentile, write_json  # noqa: E402

from cancelkernel.agent import AgentKernel  # noqa: E402


@dataclass(frozen=True)
class Case:
    name: str
    code: str
    budget: str  # "wall_budget" | "quiet_budget" | "" (no budget: the cell ends the kernel)
    expect: str


CASES = [
    Case("loop", "while True:\n    pass", "wall_budget", "interrupted"),
    Case("silent", "import time\nwhile True:\n    time.sleep(0.05)", "quiet_budget", "interrupted"),
    Case("wedged", "sum(range(10**12))", "wall_budget", "restarted"),
    Case("swallowed", "import time\nwhile True:\n    try:\n        time.sleep(0.01)\n    except BaseException:\n        pass", "wall_budget", "restarted"),
    Case("died", "import os\nos._exit(1)", "", "died"),
]

KERNELS = {
    "ours": ("cancelkernel", "cancelkernel (main)"),
    "worker": ("cancelkernel-worker", "cancelkernel (worker)"),
    "stock": ("python3", "stock ipykernel"),
}


def _checkpoint_args(spec: str) -> dict[str, Any]:
    """Our kernel with checkpoints: the real wiring when kernel.py has it, else the test suite's wired subclass."""
    if not spec.startswith("cancelkernel"):
        return {}
    from cancelkernel.kernel import CancelKernel

    if "checkpoint_request" in CancelKernel.msg_types:
        return {}
    tests = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
    return {
        "extra_arguments": ["--CancelKernelApp.kernel_class=checkpoint_wired_kernel.CheckpointWiredKernel"],
        "env": {"PYTHONPATH": os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))},
    }


def sample(ak: AgentKernel, case: Case, budget: float, state_mb: int) -> dict[str, Any]:
    """One runaway cell on a kernel holding STATE MB; seconds from trip to result."""
    setup = ak.run(f"blob = bytearray({state_mb} * 2**20)\nrows = list(range(1000))")
    assert setup.status == "ok", setup.summary()
    saved = None
    if ak.checkpoints.available:
        t = time.monotonic()
        ak.save_checkpoint()
        saved = time.monotonic() - t
    kwargs = {case.budget: budget} if case.budget else {}
    sent = time.monotonic()
    result = ak.run(case.code, cell_id=f"{case.name}-{time.monotonic_ns()}", **kwargs)  # type: ignore[arg-type]
    done = time.monotonic()
    trip = sent + (budget if case.budget else 0.0)
    check = ak.run("print(len(blob) // 2**20)")
    return {
        "case": case.name,
        "status": result.status,
        "state": result.state,
        "expected": case.expect,
        "trip_to_result": round(done - trip, 4),
        "interrupt_latency": result.interrupt_latency,
        "restart_took": next((a.get("restart_took") for a in result.actions if a.get("action") == "restart"), None),
        "restore_took": next((a.get("restore_took") for a in result.actions if a.get("action") == "restart"), None),
        "restored": len(result.restored),
        "state_back": check.text.strip() == str(state_mb),
        "checkpoint_save": round(saved, 4) if saved is not None else None,
        "stopped_at": f"{result.stack[-1]['label']}:{result.stack[-1]['lineno']}" if result.stack else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernels", default="ours,worker,stock", help="comma list of ours, worker, stock (default: %(default)s)")
    p.add_argument("--cases", default=",".join(c.name for c in CASES))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--budget", type=float, default=1.0, help="the budget that trips, seconds (default: %(default)s)")
    p.add_argument("--state-mb", type=int, default=100, help="MB of data in the namespace (default: %(default)s)")
    p.add_argument("--json", default=None, metavar="FILE")
    args = p.parse_args(argv)
    kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    cases = [c for c in CASES if c.name in args.cases.split(",")]
    samples: list[dict[str, Any]] = []
    agents: dict[str, AgentKernel] = {}
    try:
        for key in kernels:
            spec, _label = KERNELS[key]
            agents[key] = AgentKernel(spec, **_checkpoint_args(spec)).start()
        for run in range(args.runs):
            for case in cases:
                for key in kernels:
                    s = sample(agents[key], case, args.budget, args.state_mb)
                    s.update(kernel=key, run=run)
                    samples.append(s)
                    print(f"  run {run} {case.name:<9} {key:<6} {s['status']:<11} {s['state']:<8} trip->result {s['trip_to_result']:.2f} s", file=sys.stderr)
    finally:
        for ak in agents.values():
            ak.close()
    rows = []
    for case in cases:
        for key in kernels:
            mine = [s for s in samples if s["case"] == case.name and s["kernel"] == key]
            times = [s["trip_to_result"] for s in mine]
            statuses = sorted({f"{s['status']}/{s['state']}" for s in mine})
            rows.append([case.name, KERNELS[key][1], ", ".join(statuses), fmt_seconds(percentile(times, 50)), fmt_seconds(max(times)),
                         f"{sum(s['state_back'] for s in mine)}/{len(mine)}"])
    print(markdown_table(["case", "kernel", "status/state", "p50 trip->result", "max", "state back"], rows))
    wedged = [s for s in samples if s["case"] == "wedged" and s["kernel"] == "ours"]
    if wedged:
        ok = all(s["status"] == "restarted" and s["state"] == "restored" and s["trip_to_result"] <= 3.0 for s in wedged)
        print(f"\ngoal (ours, wedged, {args.state_mb} MB): restarted+restored <= 3 s after the budget: {'MET' if ok else 'NOT MET'} "
              f"(max {max(s['trip_to_result'] for s in wedged):.2f} s)")
    if args.json:
        write_json(args.json, {"environment": environment(), "args": vars(args), "samples": samples})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
