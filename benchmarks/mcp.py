#!/usr/bin/env python
"""What the MCP server adds: `cancelkernel mcp` over stdio vs the agent client in-process, side by side, in ONE run.

Two measurements, each run interleaved (MCP, then direct) so machine load hits both alike:

1. Round trip of a trivial cell: `execute(code="1")` through the SDK's client to a
   `cancelkernel mcp` subprocess over stdio, vs `AgentKernel.run("1")`.
2. Interrupt -> result for the runaway set (benchmarks/_common.py RUNAWAYS): the cell
   is started (MCP: `execute(wait=0.3)` answers `running`; direct: `submit`), 0.3 to
   0.4 s later (the same random delay for both sides, so that neither lines up with a
   periodic tick of the kernel or the client) the clock starts and the cell is interrupted (MCP:
   the `interrupt` tool, which answers with the result; direct: `Submission.interrupt()`
   then `result()`).
   Cells that cannot be interrupted (the regex holds the GIL) end in a restart on both
   sides: the same policy, measured the same way.

Goal: MCP adds at most 5 ms p50.  Both sides use the same kernel options (kernelspec
`cancelkernel`, no warm spare so that a restart in one run does not load the next).

    python benchmarks/mcp.py --runs 30 --json benchmarks/results/mcp.json
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
# This file is named mcp.py: its own directory must not hide the MCP SDK's `mcp` package.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
from mcp import Client, StdioServerParameters  # noqa: E402

sys.path.append(HERE)
from _common import RUNAWAYS, environment, fmt_seconds, markdown_table, percentile, write_json  # noqa: E402

from cancelkernel.agent import AgentKernel  # noqa: E402

DELAY = 0.3  # seconds a runaway runs before it is interrupted
OPTIONS = ["--no-spare", "--wall-budget", "0", "--quiet-budget", "0"]


def server_parameters() -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if k.startswith(("JUPYTER", "PYTHON", "VIRTUAL_ENV", "PATH", "HOME", "TMPDIR"))}
    return StdioServerParameters(command=sys.executable, args=["-m", "cancelkernel", "mcp", *OPTIONS], env=env)


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    return dict(result.structured_content or {})


async def mcp_round_trip(client: Client) -> float:
    started = time.perf_counter()
    answer = await call(client, "execute", code="1")
    took = time.perf_counter() - started
    assert answer.get("status") == "ok", answer
    return took


def direct_round_trip(ak: AgentKernel) -> float:
    started = time.perf_counter()
    result = ak.run("1")
    took = time.perf_counter() - started
    assert result.status == "ok", result.summary()
    return took


async def mcp_interrupt(client: Client, code: str, delay: float) -> tuple[float, str]:
    started = time.perf_counter()
    running = await call(client, "execute", code=code, wait=DELAY)
    assert running.get("status") == "running", running
    await asyncio.sleep(max(0.0, delay - (time.perf_counter() - started)))
    clock = time.perf_counter()
    answer = await call(client, "interrupt", execution_id=running["execution_id"], wait=60)
    return time.perf_counter() - clock, str(answer.get("status"))


def direct_interrupt(ak: AgentKernel, code: str, delay: float) -> tuple[float, str]:
    started = time.perf_counter()
    sub = ak.submit(code)
    time.sleep(max(0.0, delay - (time.perf_counter() - started)))
    clock = time.perf_counter()
    sub.interrupt()
    result = sub.result(60)
    return time.perf_counter() - clock, result.status


def summary(samples: list[float]) -> dict[str, Any]:
    return {"p50": percentile(samples, 50), "p90": percentile(samples, 90), "n": len(samples)}


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    data: dict[str, Any] = {"environment": environment(), "runs": args.runs, "delay": [DELAY, DELAY + 0.1], "server_options": OPTIONS, "cases": {}}
    rng = random.Random(args.seed)
    with AgentKernel("cancelkernel", spare=False) as ak:
        async with Client(server_parameters(), cache=None) as client:
            for _ in range(5):  # warm-up: the lazy default kernel, imports, both sides' first cells
                await mcp_round_trip(client)
                direct_round_trip(ak)
            mcp_samples, direct_samples = [], []
            for _ in range(args.trivial_runs):
                mcp_samples.append(await mcp_round_trip(client))
                direct_samples.append(direct_round_trip(ak))
            data["round_trip"] = {"mcp": summary(mcp_samples), "direct": summary(direct_samples)}
            for label, code in RUNAWAYS:
                if args.cases and label not in args.cases:
                    continue
                mcp_times, direct_times, statuses = [], [], set()
                for run in range(args.runs):
                    # A new cell each run: a second runaway of the same cell is restarted, not interrupted (the policy).
                    source = f"{code}\n# run {run}"
                    delay = DELAY + rng.uniform(0.0, 0.1)
                    took, status = await mcp_interrupt(client, source + " mcp", delay)
                    mcp_times.append(took)
                    statuses.add(f"mcp:{status}")
                    took, status = direct_interrupt(ak, source + " direct", delay)
                    direct_times.append(took)
                    statuses.add(f"direct:{status}")
                data["cases"][label] = {"mcp": summary(mcp_times), "direct": summary(direct_times), "statuses": sorted(statuses)}
    return data


def table(data: dict[str, Any]) -> str:
    rows = []

    def row(label: str, entry: dict[str, Any], extra: str = "") -> None:
        m, d = entry["mcp"], entry["direct"]
        added = m["p50"] - d["p50"]
        rows.append([label, f"{fmt_seconds(m['p50'])} ({fmt_seconds(m['p90'])})", f"{fmt_seconds(d['p50'])} ({fmt_seconds(d['p90'])})",
                     f"{added * 1e3:+.2f} ms", extra])

    row('execute("1") round trip', data["round_trip"], "ok")
    for label, entry in data["cases"].items():
        row(f"interrupt -> result: {label}", entry, ", ".join(s.split(":")[1] for s in entry["statuses"] if s.startswith("mcp:")))
    return markdown_table(["case", "MCP over stdio p50 (p90)", "agent client p50 (p90)", "MCP adds (p50)", "status"], rows, ["l", "r", "r", "r", "l"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="interrupt samples per runaway case and side (default: %(default)s)")
    parser.add_argument("--trivial-runs", type=int, default=100, help='execute("1") samples per side (default: %(default)s)')
    parser.add_argument("--cases", type=lambda s: s.split(","), default=None, help="runaway labels to run (default: all)")
    parser.add_argument("--seed", type=int, default=12, help="seed of the random interrupt delays (default: %(default)s)")
    parser.add_argument("--json", default=None, metavar="FILE", help="write the samples' summaries as JSON")
    args = parser.parse_args()
    data = asyncio.run(measure(args))
    print(table(data))
    worst = max([data["round_trip"], *data["cases"].values()], key=lambda e: e["mcp"]["p50"] - e["direct"]["p50"])
    added = (worst["mcp"]["p50"] - worst["direct"]["p50"]) * 1e3
    print(f"\ngoal (MCP adds at most 5 ms p50): {'met' if added <= 5 else 'NOT met'}; the largest addition is {added:+.2f} ms")
    if args.json:
        write_json(args.json, data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
