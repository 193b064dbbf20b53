"""The server hop, measured: targeted interrupts through a Jupyter Server's websocket vs straight to the kernel.

    python benchmarks/remote.py [--runs 10] [--notebooks 20] [--json PATH]

1. One kernel started by a real `jupyter server` on loopback, reached two ways
   in the same run: its own ZeroMQ channels (direct) and the server's websocket
   (the agent client's remote transport).  For each runaway cell: a targeted
   interrupt_request 0.3 s after the cell started, time until its
   execute_reply; p50 and p90 per path, and the difference (goal: the hop
   adds at most 2 ms at p50).
2. N small notebooks with one runaway each, run with `run_notebooks` at
   --jobs 1, 4 and 8, on local kernels and through the server: wall time, and
   whether every runaway was stopped by exactly one interrupt.
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

from cancelkernel.agent.batch import run_notebooks  # noqa: E402
from cancelkernel.agent.transport.websocket import WebsocketTransport  # noqa: E402
from cancelkernel.testing import execute, private_kernelspecs, send_execute, wait_for, wait_reply  # noqa: E402
from cancelkernel.testing.servers import jupyter_server  # noqa: E402

CASES = RUNAWAYS
DELAY = 0.3


def direct(kc, code: str) -> float:
    msg_id = send_execute(kc, code)
    time.sleep(DELAY)
    interrupt = kc.session.msg("interrupt_request", {"target": msg_id})
    sent = time.perf_counter()
    kc.control_channel.send(interrupt)
    wait_reply(kc, msg_id, 10)
    took = time.perf_counter() - sent
    wait_for(kc.control_channel, lambda m: m["parent_header"].get("msg_id") == interrupt["header"]["msg_id"], 10)
    return took


def through_server(ws: WebsocketTransport, code: str) -> float:
    content = {"code": code, "silent": False, "store_history": False, "user_expressions": {}, "allow_stdin": False, "stop_on_error": False}
    msg_id = ws.send("shell", "execute_request", content)
    time.sleep(DELAY)
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
        for _ in range(runs):
            samples.setdefault(label, {}).setdefault("direct", []).append(direct(kc, code))
            samples[label].setdefault("server", []).append(through_server(ws, code))
        ws.poll(0.2)
    ws.close()
    kc.stop_channels()
    server.request("DELETE", f"/api/kernels/{kernel_id}")
    rows = []
    for label, _ in CASES:
        d50, d90 = percentile(samples[label]["direct"], 50), percentile(samples[label]["direct"], 90)
        s50, s90 = percentile(samples[label]["server"], 50), percentile(samples[label]["server"], 90)
        rows.append([label, fmt_seconds(d50), fmt_seconds(d90), fmt_seconds(s50), fmt_seconds(s90), f"{(s50 - d50) * 1000:+.2f} ms"])
    return rows, samples


def notebooks(directory: str, count: int) -> list[str]:
    import nbformat

    paths = []
    for i in range(count):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(f"n = {i}"), nbformat.v4.new_code_cell("while True:\n    pass"), nbformat.v4.new_code_cell("print(n)")]
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--notebooks", type=int, default=20)
    parser.add_argument("--json", default=os.path.join(HERE, "results", "remote.json"))
    args = parser.parse_args()
    with private_kernelspecs(), jupyter_server() as server:
        hop_rows, samples = hop(server, args.runs)
        batch_rows, batch_raw = batches(server, args.notebooks)
    print(markdown_table(["case", "direct p50", "direct p90", "server p50", "server p90", "hop (p50)"], hop_rows))
    print()
    print(markdown_table(["kernels", "jobs", f"{args.notebooks} notebooks", "every runaway stopped once"], batch_rows, ["l", "r", "r", "l"]))
    write_json(args.json, {"environment": environment(), "runs": args.runs, "hop": samples, "batches": batch_raw})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
