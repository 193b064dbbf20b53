"""The server hop, measured: targeted interrupts through a Jupyter Server's websocket vs straight to the kernel.

    python benchmarks/remote.py [--runs 20] [--notebooks 20] [--json PATH]
    python benchmarks/remote.py --netem [--delay 0.05 --jitter 0.01 --loss 0.01] [--runs 20] [--cuts 5]

1. One kernel started by a real `jupyter server` on loopback, reached two ways
   in the same run: its own ZeroMQ channels (direct) and the server's websocket
   (the agent client's remote transport).  For each runaway cell: a targeted
   interrupt_request 0.3 s after the cell started, time from building it until
   the cell's execute_reply; p50 and p90 per path, and the difference (goal:
   the hop adds at most 2 ms at p50).  The two paths take turns going first,
   and the websocket is read while the cell runs, as the agent client's run
   loop reads it: the clock covers the hop, not a backlog of the kernel's
   broadcasts (the other path's cells included) that nobody read.  The regex
   waits for a GIL yield and varies most: give it runs (--runs 40 or more).
2. N small notebooks with one runaway each, run with `run_notebooks` at
   --jobs 1, 4 and 8, on local kernels and through the server: wall time, and
   whether every runaway was stopped by exactly one interrupt.

With --netem, instead, the same kernel through a faulty link (kernel/testing/faulty_link.py: a TCP proxy
with `--delay` each way, `--jitter` and `--loss`, netem's parameters; not tc netem itself, see that
module for what it models) and straight to the server, sample by sample in turns:

3. The targeted interrupt of each runaway through the link vs without it: p50, p90, the link's round trip
   (configured, and as the transport's pings measured it), and the extra time as a ratio of the round trip
   (goal: about 1, the hop plus one round trip).
4. The agent client's own interrupt (its wall budget trips) through the link vs without it: the latency
   it reports, and how the interrupt went (`message`: answered on the control channel; `message+rest`:
   judged unanswered, the server's REST interrupt sent too).
5. `--cuts` cuts of 3 s in the middle of a cell that prints 1..20: whether every output came once and in
   order, and the seconds the cell took past the cut.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _common import RUNAWAYS, environment, fmt_seconds, markdown_table, percentile, write_json  # noqa: E402

from cancelkernel.agent import AgentKernel  # noqa: E402
from cancelkernel.agent.batch import run_notebooks  # noqa: E402
from cancelkernel.agent.transport.websocket import WebsocketTransport  # noqa: E402
from cancelkernel.testing import (  # noqa: E402
    FileFlag,
    act_when,
    execute,
    private_kernelspecs,
    send_execute,
    wait_for,
    wait_reply,
)
from cancelkernel.testing.faulty_link import Faults, FaultyLink, faulty_link  # noqa: E402
from cancelkernel.testing.servers import jupyter_server  # noqa: E402

CASES = RUNAWAYS
DELAY = 0.3


def direct(kc, code: str) -> float:
    msg_id = send_execute(kc, code)
    time.sleep(DELAY)
    sent = time.perf_counter()
    interrupt = kc.session.msg("interrupt_request", {"target": msg_id})  # built on the clock, as ws.send builds its own
    kc.control_channel.send(interrupt)
    wait_reply(kc, msg_id, 10)
    took = time.perf_counter() - sent
    wait_for(kc.control_channel, lambda m: m["parent_header"].get("msg_id") == interrupt["header"]["msg_id"], 10)
    return took


def through_server(ws: WebsocketTransport, code: str) -> float:
    content = {
        "code": code,
        "silent": False,
        "store_history": False,
        "user_expressions": {},
        "allow_stdin": False,
        "stop_on_error": False,
    }
    msg_id = ws.send("shell", "execute_request", content)
    until = time.monotonic() + DELAY
    while (left := until - time.monotonic()) > 0:
        ws.poll(left)  # what the kernel broadcasts meanwhile is read as it comes, as the agent client's run loop does
    sent = time.perf_counter()
    ws.send("control", "interrupt_request", {"target": msg_id})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for channel, msg in ws.poll(0.5):
            if channel == "shell" and msg["parent_header"].get("msg_id") == msg_id:
                return time.perf_counter() - sent
    raise TimeoutError(f"no reply through the server for {code!r}")


def hop(server, runs: int) -> tuple[list[list[str]], dict]:
    kernel_id = server.start_kernel("cancelkernel")
    kc = server.client(kernel_id)
    ws = WebsocketTransport(server.websocket_url(f"/api/kernels/{kernel_id}/channels"), server.token)
    execute(kc, "1")
    samples: dict[str, dict[str, list[float]]] = {}
    for label, code in CASES:
        paths = samples.setdefault(label, {"direct": [], "server": []})
        for run in range(runs):
            # Turns: neither path always runs right after the other's cell.
            for path in ("direct", "server") if run % 2 == 0 else ("server", "direct"):
                paths[path].append(direct(kc, code) if path == "direct" else through_server(ws, code))
        ws.poll(0.2)
    ws.close()
    kc.stop_channels()
    server.request("DELETE", f"/api/kernels/{kernel_id}")
    rows = []
    for label, _ in CASES:
        d50, d90 = percentile(samples[label]["direct"], 50), percentile(samples[label]["direct"], 90)
        s50, s90 = percentile(samples[label]["server"], 50), percentile(samples[label]["server"], 90)
        rows.append(
            [
                label,
                fmt_seconds(d50),
                fmt_seconds(d90),
                fmt_seconds(s50),
                fmt_seconds(s90),
                f"{(s50 - d50) * 1000:+.2f} ms",
            ]
        )
    return rows, samples


def notebooks(directory: str, count: int) -> list[str]:
    import nbformat

    paths = []
    for i in range(count):
        nb = nbformat.v4.new_notebook()
        nb.cells = [
            nbformat.v4.new_code_cell(f"n = {i}"),
            nbformat.v4.new_code_cell("while True:\n    pass"),
            nbformat.v4.new_code_cell("print(n)"),
        ]
        path = os.path.join(directory, f"nb{i:02d}.ipynb")
        nbformat.write(nb, path)
        paths.append(path)
    return paths


def batches(server, count: int) -> tuple[list[list[str]], list[dict]]:
    rows, raw = [], []
    with tempfile.TemporaryDirectory(prefix="ck-bench-nb-") as scratch:
        paths = notebooks(scratch, count)
        for where, options in (("local", {}), ("server", {"server_url": server.url, "token": server.token})):
            for jobs in (1, 4, 8):
                out = os.path.join(scratch, f"out-{where}-{jobs}")
                started = time.monotonic()
                outcomes = run_notebooks(paths, jobs=jobs, output=out, wall_budget=1.0, allow_errors=True, **options)
                seconds = time.monotonic() - started
                once = all(o.interventions == 1 and o.cells == 3 for o in outcomes)
                rows.append([where, str(jobs), f"{seconds:.1f} s", "yes" if once else "NO"])
                raw.append({"where": where, "jobs": jobs, "seconds": seconds, "every_runaway_stopped_once": once})
    return rows, raw


# -- through a faulty link -----------------------------------------------------------------


def drain(ws: WebsocketTransport) -> None:
    """Read what the kernel broadcast to this websocket while the other path ran (it counts for neither)."""
    while ws.poll(0):
        pass


def link_hop(server, link: FaultyLink, runs: int) -> tuple[list[list[str]], dict]:
    """Section 3: targeted interrupts, without the link and through it, in turns."""
    kernel_id = server.start_kernel("cancelkernel")
    path = f"/api/kernels/{kernel_id}/channels"
    paths = {
        "server": WebsocketTransport(server.websocket_url(path), server.token),
        "link": WebsocketTransport(f"ws://127.0.0.1:{link.port}{path}", server.token),
    }
    samples: dict[str, dict[str, list[float]]] = {}
    try:
        for label, code in CASES:
            taken = samples.setdefault(label, {"server": [], "link": []})
            for run in range(runs):
                for name in ("server", "link") if run % 2 == 0 else ("link", "server"):
                    for ws in paths.values():
                        drain(ws)
                    taken[name].append(through_server(paths[name], code))
    finally:
        measured = paths["link"].round_trip.smoothed
        for ws in paths.values():
            ws.close()
        server.request("DELETE", f"/api/kernels/{kernel_id}")
    round_trip = link.faults.round_trip
    rows = []
    for label, _ in CASES:
        s50, s90 = percentile(samples[label]["server"], 50), percentile(samples[label]["server"], 90)
        l50, l90 = percentile(samples[label]["link"], 50), percentile(samples[label]["link"], 90)
        rows.append(
            [
                label,
                fmt_seconds(s50),
                fmt_seconds(s90),
                fmt_seconds(l50),
                fmt_seconds(l90),
                f"{(l50 - s50) / round_trip:.2f}" if round_trip else "—",
                f"{(l90 - s90) / round_trip:.2f}" if round_trip else "—",
            ]
        )
    return rows, {"samples": samples, "round_trip": round_trip, "measured_round_trip": measured}


def agent_interrupts(server, link: FaultyLink, runs: int) -> tuple[list[list[str]], dict]:
    """Section 4: the agent client's own interrupt (its wall budget), without the link and through it, in turns."""
    agents = {
        "server": AgentKernel(server_url=server.url, token=server.token, kernel_budgets=False).start(),
        "link": AgentKernel(server_url=link.url, token=server.token, kernel_budgets=False).start(),
    }
    taken: dict[str, list[dict]] = {name: [] for name in agents}
    try:
        for run in range(runs):
            for name in ("server", "link") if run % 2 == 0 else ("link", "server"):
                result = agents[name].run("while True:\n    pass", wall_budget=0.3)
                action = result.actions[0] if result.actions else {}
                taken[name].append(
                    {"status": result.status, "latency": result.interrupt_latency, "via": action.get("via")}
                )
                agents[name].reset_cell(result.cell_key)  # the next sample is a first runaway again
    finally:
        for agent in agents.values():
            agent.close()
    rows = []
    for name, results in taken.items():
        latencies = [r["latency"] for r in results if r["latency"] is not None]
        stopped = sum(r["status"] == "interrupted" for r in results)
        answered = sum(r["via"] == "message" for r in results)
        rows.append(
            [
                name,
                fmt_seconds(percentile(latencies, 50)),
                fmt_seconds(percentile(latencies, 90)),
                f"{stopped}/{len(results)}",
                f"{answered}/{len(results)}",
            ]
        )
    return rows, taken


def cuts(server, link: FaultyLink, count: int, seconds: float = 3.0) -> tuple[list[list[str]], list[dict]]:
    """Section 5: a cut of `seconds` while a cell prints 1..20 (held at 7 until the cut is made)."""
    expected = "".join(f"{i}\n" for i in range(1, 21))
    raw = []
    with AgentKernel(server_url=link.url, token=server.token) as ak:
        for _ in range(count):
            gate = FileFlag("bench-cut")
            code = f"for i in range(1, 21):\n    print(i, flush=True)\n    if i == 7:\n        {gate.wait_code}\n"

            def printed() -> bool:
                watch = ak.running
                return watch is not None and any("7\n" in o.get("text", "") for o in list(watch.outputs))

            act_when(printed, lambda gate=gate: (link.cut(seconds), gate.set()))
            started = time.monotonic()
            result = ak.run(code, wall_budget=120)
            raw.append(
                {
                    "exact": result.text == expected,
                    "status": result.status,
                    "past_cut": time.monotonic() - started - seconds,
                    "reconnects": ak.link.transport.reconnects,
                }
            )
    past = [r["past_cut"] for r in raw]
    exact = sum(r["exact"] for r in raw)
    rows = [
        [f"{seconds:g} s", f"{exact}/{len(raw)}", fmt_seconds(percentile(past, 50)), fmt_seconds(percentile(past, 90))]
    ]
    return rows, raw


def netem(args: argparse.Namespace) -> int:
    faults = Faults(delay=args.delay, jitter=args.jitter, loss=args.loss)
    with private_kernelspecs(), jupyter_server() as server, faulty_link(server.port, faults) as link:
        hop_rows, hop_raw = link_hop(server, link, args.runs)
        agent_rows, agent_raw = agent_interrupts(server, link, args.runs)
        cut_rows, cut_raw = cuts(server, link, args.cuts)
    print(
        f"link: {args.delay * 1000:g} ms each way, jitter {args.jitter * 1000:g} ms, loss {args.loss:.1%}; "
        f"round trip {faults.round_trip * 1000:g} ms, measured {fmt_seconds(hop_raw['measured_round_trip'])}; "
        f"load {os.getloadavg()[0]:.2f}"
    )
    print()
    print(
        markdown_table(
            ["case", "server p50", "server p90", "link p50", "link p90", "extra / RTT (p50)", "extra / RTT (p90)"],
            hop_rows,
        )
    )
    print()
    print(
        markdown_table(["agent client", "latency p50", "latency p90", "interrupted", "answered on control"], agent_rows)
    )
    print()
    print(markdown_table(["cut", "every output once, in order", "past the cut p50", "past the cut p90"], cut_rows))
    write_json(
        args.json,
        {
            "environment": environment(),
            "faults": vars(faults),
            "runs": args.runs,
            "hop": hop_raw,
            "agent": agent_raw,
            "cuts": cut_raw,
        },
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", type=int, default=20, help="interrupt samples per runaway and path (default: %(default)s)"
    )
    parser.add_argument("--notebooks", type=int, default=20)
    parser.add_argument("--json", default=None, help="where the raw numbers go (default: results/remote[-netem].json)")
    parser.add_argument("--netem", action="store_true", help="through a faulty link instead (sections 3-5)")
    parser.add_argument("--delay", type=float, default=0.05, help="--netem: seconds each way (default: %(default)s)")
    parser.add_argument("--jitter", type=float, default=0.01, help="--netem: jitter, seconds (default: %(default)s)")
    parser.add_argument("--loss", type=float, default=0.01, help="--netem: packets lost (default: %(default)s)")
    parser.add_argument("--cuts", type=int, default=5, help="--netem: cuts of 3 s (default: %(default)s)")
    args = parser.parse_args()
    args.json = args.json or os.path.join(HERE, "results", "remote-netem.json" if args.netem else "remote.json")
    if args.netem:
        return netem(args)
    with private_kernelspecs(), jupyter_server() as server:
        hop_rows, samples = hop(server, args.runs)
        batch_rows, batch_raw = batches(server, args.notebooks)
    print(markdown_table(["case", "direct p50", "direct p90", "server p50", "server p90", "hop (p50)"], hop_rows))
    print()
    print(
        markdown_table(
            ["kernels", "jobs", f"{args.notebooks} notebooks", "every runaway stopped once"],
            batch_rows,
            ["l", "r", "r", "l"],
        )
    )
    write_json(args.json, {"environment": environment(), "runs": args.runs, "hop": samples, "batches": batch_raw})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
