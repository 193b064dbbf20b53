#!/usr/bin/env python
"""Where the time of one request goes: the stages of a trivial execute and of an interrupt, stock and ours.

Each kernel loads `stage_probe.py` (`--IPKernelApp.exec_files`), which
timestamps the stages of every request in the kernel (shell channel thread,
main thread, control thread; every message sent).  The stamps share the
client's clock (CLOCK_MONOTONIC), so each stage is placed on one time line
from the client's send to the client's receipt of the reply.  Kernels are
interleaved sample by sample; each stage is reported as the median of its
offset from the send, with the increment over the previous stage.

    python benchmarks/stages.py --runs 300                  # trivial `1`, stock and main
    python benchmarks/stages.py --interrupt sleep --runs 30  # interrupt of `time.sleep`
    python benchmarks/stages.py --interrupt loop --kernels main --runs 30

A probe adds about a microsecond per stamp; compare stages, not totals, with
benchmarks/round_trip.py and interrupt_latency.py.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import (  # noqa: E402
    STOCK_AND_OURS,
    Kernel,
    drain_channel,
    kernels_cleaned_up,
    markdown_table,
    send_control,
    wait_for,
    wait_idle,
    wait_reply,
)

from cancelkernel.testing import private_kernelspecs  # noqa: E402

PROBE = os.path.join(HERE, "stage_probe.py")
KERNELS = STOCK_AND_OURS
INTERRUPTS = {
    "sleep": "import time\ntime.sleep(10**6)",
    "loop": "while True:\n    pass",
    "event": "import threading\nthreading.Event().wait()",
    "regex": "import re\nre.match(r'(a+)+$', 'a' * 40 + 'b')",
    "deep": "import time\ndef _deep(n):\n    if n:\n        return _deep(n - 1)\n    time.sleep(10**6)\n_deep(200)",
}
TIMEOUT = 30.0


def take_stamps(kernel: Kernel) -> list:
    kc = kernel.kc
    assert kc is not None
    reply = wait_reply(
        kc,
        kc.execute("", silent=True, store_history=False, user_expressions={"s": "__import__('stage_probe').take()"}),
        TIMEOUT,
    )
    import ast

    return ast.literal_eval(reply["content"]["user_expressions"]["s"]["data"]["text/plain"])


def trivial(kernel: Kernel, code: str) -> tuple[float, list]:
    kc = kernel.kc
    assert kc is not None
    take_stamps(kernel)
    drain_channel(kc.iopub_channel)
    msg = kc.session.msg(
        "execute_request",
        {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        },
    )
    sent = time.perf_counter()
    kc.shell_channel.send(msg)
    reply = wait_reply(kc, msg["header"]["msg_id"], TIMEOUT)
    wait_idle(kc, msg["header"]["msg_id"], TIMEOUT)
    stamps = [(n, t - sent, th, cpu) for n, t, th, cpu in take_stamps(kernel) if sent <= t <= reply["_received"]]
    return reply["_received"] - sent, [*stamps, ("client: reply in", reply["_received"] - sent, "client", 0.0)]


def interrupted(kernel: Kernel, code: str, delay: float) -> tuple[float, list]:
    kc = kernel.kc
    assert kc is not None
    take_stamps(kernel)
    for channel in (kc.iopub_channel, kc.control_channel, kc.shell_channel):
        drain_channel(channel)
    msg_id = kc.execute(code, stop_on_error=True)
    wait_for(
        kc.iopub_channel,
        lambda m: m["msg_type"] == "execute_input" and m["parent_header"].get("msg_id") == msg_id,
        TIMEOUT,
    )
    time.sleep(delay)
    _, sent = send_control(kc, "interrupt_request", {})
    reply = wait_reply(kc, msg_id, TIMEOUT)
    wait_idle(kc, msg_id, TIMEOUT)
    stamps = [(n, t - sent, th, cpu) for n, t, th, cpu in take_stamps(kernel) if sent <= t <= reply["_received"]]
    return reply["_received"] - sent, [*stamps, ("client: reply in", reply["_received"] - sent, "client", 0.0)]


def report(label: str, samples: list[tuple[float, list]]) -> str:
    """Per stage: median offset from the send (wall), the step from the stage before, and the CPU the stage's
    thread spent since its previous stamp (load changes it least)."""
    offsets: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    cpu: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    for _, stamps in samples:
        seen = set()
        last_cpu: dict[str, float] = {}
        for name, offset, thread, spent in sorted(stamps, key=lambda s: s[1]):
            key = (name, thread)
            if thread in last_cpu and key not in seen:
                cpu[key].append(spent - last_cpu[thread])
            last_cpu[thread] = spent
            if key in seen:
                continue  # the first of a repeated stamp (a second status) places the stage
            seen.add(key)
            offsets[key].append(offset)
    total = statistics.median(s[0] for s in samples)
    rows, previous, cpu_total = [], 0.0, 0.0
    for (name, thread), values in sorted(offsets.items(), key=lambda kv: statistics.median(kv[1])):
        if len(values) < len(samples) / 2:
            continue  # a stage seen in few samples (a stray) is not a stage of this request
        at = statistics.median(values)
        step = at - previous
        spent = statistics.median(cpu[(name, thread)]) if cpu.get((name, thread)) else None
        cpu_total += spent or 0.0
        rows.append(
            [
                name,
                thread,
                f"{at * 1e3:.3f}",
                f"{step * 1e3:+.3f}",
                f"{100 * step / total:.0f} %",
                "" if spent is None else f"{spent * 1e3:.3f}",
            ]
        )
        previous = at
    head = (
        f"{label}: {len(samples)} samples, median total {total * 1e3:.3f} ms; "
        f"CPU of the stamped stages {cpu_total * 1e3:.3f} ms"
    )
    headers = ["stage (first stamp)", "thread", "at ms", "step ms", "share", "thread CPU ms"]
    return head + "\n\n" + markdown_table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--kernels", default="stock,main")
    parser.add_argument("--code", default="1", help="the trivial cell (default `1`)")
    parser.add_argument("--interrupt", choices=sorted(INTERRUPTS), help="time an interrupt of this cell instead")
    parser.add_argument("--delay", type=float, default=0.1, help="seconds from the cell's start to the interrupt")
    args = parser.parse_args(argv)
    labels = [k for k in KERNELS if k in args.kernels.split(",")]
    samples: dict[str, list] = {label: [] for label in labels}
    load = os.getloadavg()
    with kernels_cleaned_up(), private_kernelspecs():
        kernels = {}
        for label in labels:
            name, extra = KERNELS[label]
            env = {"PYTHONPATH": os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))}
            kernels[label] = Kernel(
                name,
                label=label,
                extra_arguments=(
                    *extra,
                    f"--IPKernelApp.exec_files={PROBE!r}".replace("'", '"').replace('="', '=["', 1) + "]",
                ),
                env=env,
            ).start()
        for kernel in kernels.values():
            for _ in range(20):
                trivial(kernel, args.code)
            if args.interrupt:
                interrupted(kernel, INTERRUPTS[args.interrupt], args.delay)
        for _ in range(args.runs):
            for label in labels:
                if args.interrupt:
                    samples[label].append(interrupted(kernels[label], INTERRUPTS[args.interrupt], args.delay))
                else:
                    samples[label].append(trivial(kernels[label], args.code))
        for kernel in kernels.values():
            kernel.shutdown()
    what = f"interrupt of `{INTERRUPTS[args.interrupt]!r}`" if args.interrupt else f"execute `{args.code}`"
    print(f"{what}; load average {load[0]:.1f} before, {os.getloadavg()[0]:.1f} after\n")
    for label in labels:
        print(report(label, samples[label]))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
