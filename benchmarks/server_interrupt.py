"""JupyterLab's interrupt button, measured: Jupyter Server's REST interrupt with `interrupt_mode` message vs signal.

    python benchmarks/server_interrupt.py [--runs 5] [--json PATH]

A real `jupyter server` on loopback starts our kernel from two kernelspecs
that differ only in `interrupt_mode`; for each exec mode and runaway cell, a
cell is started (directly on the kernel's channels), then
`POST /api/kernels/{id}/interrupt` is sent (what the toolbar button does) and
the time until the cell's execute_reply is measured.  "never": no reply within
5 s (the kernel is restarted).  This decides the default interrupt_mode of
our kernelspec (README).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples", "native"))

from _common import RUNAWAYS, environment, fmt_seconds, markdown_table, percentile, write_json  # noqa: E402
from native_build import build_montecarlo  # noqa: E402

from cancelkernel.testing import execute, private_kernelspecs, send_execute, wait_reply  # noqa: E402
from cancelkernel.testing.servers import jupyter_server  # noqa: E402

CASES = [
    *RUNAWAYS,
    ("GIL-held Cython loop (cooperative)", "montecarlo.pi_gil(10**15)"),
    ("nogil Cython loop (cooperative)", "montecarlo.pi_nogil(10**15)"),
]
NEVER_AFTER = 5.0
SPECS = {
    ("message", "main"): "ck-bench-message",
    ("message", "worker"): "ck-bench-message-worker",
    ("signal", "main"): "ck-bench-signal",
    ("signal", "worker"): "ck-bench-signal-worker",
}


def one(server, kernel_id, kc, code: str, example_dir: str):
    msg_id = send_execute(kc, code)
    time.sleep(0.3)
    sent = time.perf_counter()
    assert server.interrupt(kernel_id) == 204
    try:
        wait_reply(kc, msg_id, NEVER_AFTER)
        return time.perf_counter() - sent, kc
    except TimeoutError:
        server.request("POST", f"/api/kernels/{kernel_id}/restart")
        kc.stop_channels()
        kc = server.client(kernel_id)
        setup(kc, example_dir)
        return math.inf, kc


def setup(kc, example_dir: str) -> None:
    assert (
        execute(kc, f"import sys; sys.path.insert(0, {example_dir!r})\nimport montecarlo")["content"]["status"] == "ok"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", default=os.path.join(HERE, "results", "server_interrupt.json"))
    args = parser.parse_args()
    example_dir = build_montecarlo(tempfile.mkdtemp(prefix="ck-bench-mc-"))
    specs = {name: {"interrupt_mode": im, "exec_thread": mode} for (im, mode), name in SPECS.items()}
    samples: dict[tuple[str, str, str], list[float]] = {}
    with private_kernelspecs(**specs), jupyter_server() as server:
        for (interrupt_mode, mode), spec in SPECS.items():
            kernel_id = server.start_kernel(spec)
            kc = server.client(kernel_id)
            setup(kc, example_dir)
            for label, code in CASES:
                print(f"  {interrupt_mode:7} {mode:6} {label}", file=sys.stderr, flush=True)
                for _ in range(args.runs):
                    took, kc = one(server, kernel_id, kc, code, example_dir)
                    samples.setdefault((interrupt_mode, mode, label), []).append(took)
                    if math.isinf(took):
                        break  # never: do not pay the restart again
            kc.stop_channels()
            server.request("DELETE", f"/api/kernels/{kernel_id}")
    headers = ["case", "message main", "signal main", "message worker", "signal worker"]
    rows = []
    for label, _ in CASES:
        row = [label]
        for interrupt_mode, mode in (
            ("message", "main"),
            ("signal", "main"),
            ("message", "worker"),
            ("signal", "worker"),
        ):
            row.append(fmt_seconds(percentile(samples[(interrupt_mode, mode, label)], 50)))
        rows.append(row)
    print(markdown_table(headers, rows))
    write_json(
        args.json,
        {"environment": environment(), "runs": args.runs, "samples": {"|".join(k): v for k, v in samples.items()}},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
