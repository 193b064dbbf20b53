#!/usr/bin/env python
"""What the MCP server adds: `cancelkernel mcp` over stdio vs the agent client in-process, side by side, in ONE run.

Two measurements, each run interleaved (the two sides take turns going first) so machine load hits both alike:

1. Round trip of a trivial cell: `execute(code="1")` through the SDK's client to a
   `cancelkernel mcp` subprocess over stdio, vs `AgentKernel.run("1")`.
2. Interrupt -> result for the runaway set (benchmarks/_common.py RUNAWAYS): the cell
   is started (MCP: `execute(wait=0.3)` answers `running`; direct: `submit`), 0.3 to
   0.4 s later (the same random delay for both sides, so that neither lines up with a
   periodic tick of the kernel or the client) the clock starts and the cell is interrupted (MCP:
   the `interrupt` tool, which answers with the result; direct: `Submission.interrupt()`
   then `result()`).  The direct cell is submitted as the MCP server submits its cells
   (want_status=False: no status request until someone follows the cell).
   Cells that cannot be interrupted (the regex holds the GIL) end in a restart on both
   sides: the same policy, measured the same way.
   A second figure takes the kernel's part out of each sample: the agent client's own
   interrupt latency (from sending the interrupt_request to the execute_reply; the MCP
   answer carries it in its interrupt action) is subtracted, so what is left is what each
   side spends outside the kernel.  The kernel's part varies from sample to sample (the
   regex's most: it waits for a GIL yield), and the plain p50 difference keeps that noise.

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
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(("JUPYTER", "PYTHON", "VIRTUAL_ENV", "PATH", "HOME", "TMPDIR"))
    }
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


async def mcp_interrupt(client: Client, code: str, delay: float) -> tuple[float, str, float | None]:
    """Seconds from the interrupt call to its answer, its status, and the agent client's interrupt latency (or None)."""
    started = time.perf_counter()
    running = await call(client, "execute", code=code, wait=DELAY)
    assert running.get("status") == "running", running
    await asyncio.sleep(max(0.0, delay - (time.perf_counter() - started)))
    clock = time.perf_counter()
    answer = await call(client, "interrupt", execution_id=running["execution_id"], wait=60)
    took = time.perf_counter() - clock
    actions = [a for a in answer.get("actions") or [] if a.get("action") == "interrupt"]
    return took, str(answer.get("status")), actions[-1].get("latency") if actions else None


def direct_interrupt(ak: AgentKernel, code: str, delay: float) -> tuple[float, str, float | None]:
    started = time.perf_counter()
    sub = ak.submit(code, want_status=False)  # as the MCP server submits a cell
    time.sleep(max(0.0, delay - (time.perf_counter() - started)))
    clock = time.perf_counter()
    sub.interrupt()
    result = sub.result(60)
    return time.perf_counter() - clock, result.status, result.interrupt_latency


def summary(samples: list[float]) -> dict[str, Any]:
    return {"p50": percentile(samples, 50), "p90": percentile(samples, 90), "n": len(samples)}


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    data: dict[str, Any] = {
        "environment": environment(),
        "runs": args.runs,
        "delay": [DELAY, DELAY + 0.1],
        "server_options": OPTIONS,
        "cases": {},
    }
    rng = random.Random(args.seed)
    with AgentKernel("cancelkernel", spare=False) as ak:
        async with Client(server_parameters(), cache=None) as client:
            for _ in range(5):  # warm-up: the lazy default kernel, imports, both sides' first cells
                await mcp_round_trip(client)
                direct_round_trip(ak)
            mcp_samples, direct_samples = [], []
            for run in range(args.trivial_runs):
                if run % 2:  # turns: neither side always goes first
                    direct_samples.append(direct_round_trip(ak))
                mcp_samples.append(await mcp_round_trip(client))
                if not run % 2:
                    direct_samples.append(direct_round_trip(ak))
            data["round_trip"] = {"mcp": summary(mcp_samples), "direct": summary(direct_samples)}
            for label, code in RUNAWAYS:
                if not args.cases or label in args.cases:
                    data["cases"][label] = await runaway(client, ak, code, args.runs, rng)
    return data


async def runaway(client: Client, ak: AgentKernel, code: str, runs: int, rng: random.Random) -> dict[str, Any]:
    """One runaway case, the two sides taking turns: times, and times less each sample's kernel part."""
    times: dict[str, list[float]] = {"mcp": [], "direct": []}
    outside: dict[str, list[float]] = {"mcp": [], "direct": []}
    statuses = set()
    for run in range(runs):
        # A new cell each run: a second runaway of the same cell is restarted, not interrupted (the policy).
        source = f"{code}\n# run {run}"
        delay = DELAY + rng.uniform(0.0, 0.1)
        for side in ("mcp", "direct") if run % 2 == 0 else ("direct", "mcp"):
            if side == "mcp":
                took, status, latency = await mcp_interrupt(client, source + " mcp", delay)
            else:
                took, status, latency = direct_interrupt(ak, source + " direct", delay)
            times[side].append(took)
            if latency is not None:
                outside[side].append(took - latency)
            statuses.add(f"{side}:{status}")
    return {
        "mcp": summary(times["mcp"]),
        "direct": summary(times["direct"]),
        "outside_kernel": {"mcp": summary(outside["mcp"]), "direct": summary(outside["direct"])},
        "statuses": sorted(statuses),
    }


def table(data: dict[str, Any]) -> str:
    rows = []

    def row(label: str, entry: dict[str, Any], extra: str = "") -> None:
        m, d = entry["mcp"], entry["direct"]
        added = m["p50"] - d["p50"]
        rows.append(
            [
                label,
                f"{fmt_seconds(m['p50'])} ({fmt_seconds(m['p90'])})",
                f"{fmt_seconds(d['p50'])} ({fmt_seconds(d['p90'])})",
                f"{added * 1e3:+.2f} ms",
                f"{added_outside * 1e3:+.2f} ms" if (added_outside := outside_added(entry)) is not None else "—",
                extra,
            ]
        )

    row('execute("1") round trip', data["round_trip"], "ok")
    for label, entry in data["cases"].items():
        row(
            f"interrupt -> result: {label}",
            entry,
            ", ".join(s.split(":")[1] for s in entry["statuses"] if s.startswith("mcp:")),
        )
    return markdown_table(
        [
            "case",
            "MCP over stdio p50 (p90)",
            "agent client p50 (p90)",
            "MCP adds (p50)",
            "outside the kernel (p50)",
            "status",
        ],
        rows,
        ["l", "r", "r", "r", "r", "l"],
    )


def outside_added(entry: dict[str, Any]) -> float | None:
    """What MCP adds with each sample's kernel part (the agent client's interrupt latency) taken out, if known."""
    outside = entry.get("outside_kernel") or {}
    m, d = (outside.get(side) or {} for side in ("mcp", "direct"))
    if m.get("p50") is None or d.get("p50") is None:
        return None
    return float(m["p50"] - d["p50"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs", type=int, default=10, help="interrupt samples per runaway case and side (default: %(default)s)"
    )
    parser.add_argument(
        "--trivial-runs", type=int, default=100, help='execute("1") samples per side (default: %(default)s)'
    )
    parser.add_argument(
        "--cases", type=lambda s: s.split(","), default=None, help="runaway labels to run (default: all)"
    )
    parser.add_argument(
        "--seed", type=int, default=12, help="seed of the random interrupt delays (default: %(default)s)"
    )
    parser.add_argument("--json", default=None, metavar="FILE", help="write the samples' summaries as JSON")
    args = parser.parse_args()
    data = asyncio.run(measure(args))
    print(table(data))
    worst = max([data["round_trip"], *data["cases"].values()], key=lambda e: e["mcp"]["p50"] - e["direct"]["p50"])
    added = (worst["mcp"]["p50"] - worst["direct"]["p50"]) * 1e3
    known = [a for a in map(outside_added, data["cases"].values()) if a is not None]
    print(
        f"\ngoal (MCP adds at most 5 ms p50): {'met' if added <= 5 else 'NOT met'}; "
        f"the largest addition is {added:+.2f} ms"
        + (f" ({max(known) * 1e3:+.2f} ms outside the kernel)" if known else "")
    )
    if args.json:
        write_json(args.json, data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
