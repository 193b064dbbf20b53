#!/usr/bin/env python
"""Interrupt latency: stock ipykernel vs cancelkernel (main and worker mode), in ONE run.

For every kernel and every runaway cell of the public set: start the cell,
send `interrupt_request` on the control channel DELAY s (0.3) after the cell
started (its `execute_input` arrived), and time interrupt -> `execute_reply`.
Stock gets the very same message (jupyter_client's `KernelManager.interrupt_kernel`
would send it too, but never reads the reply).  Also timed: the round trip of the
trivial cell `1`.  A case that has no reply CAP s (5) after the interrupt is
"never"; that kernel is then killed and restarted before the next sample.
Before every sample the kernel must answer a check cell and a variable assigned
at warm-up must still hold its value (state survival is counted per kernel).

Kernels are interleaved sample by sample (case, run, kernel), so drift in the
machine's load hits all of them alike.

    python benchmarks/interrupt_latency.py --runs 10 --json benchmarks/results/latency.json
    python benchmarks/interrupt_latency.py --kernels stock,main --cases loop,sleep --runs 3

Prints a markdown table (p50 / p90 per kernel, p50 ratio to stock), writes
every raw sample with the environment to --json, and a grouped bar chart (log
scale) to --svg if matplotlib is importable (it is not a dependency).  Leaves
no kernel behind, also on Ctrl-C or errors.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TextIO

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (
    Kernel,
    check_imported_from,
    drain_channel,
    environment,
    fmt_seconds,
    grouped_bar_svg,
    kernels_cleaned_up,
    markdown_table,
    percentile,
    read_json,
    send_control,
    wait_for,
    wait_idle,
    wait_reply,
    write_json,
)

from cancelkernel.testing import cancel_status, private_kernelspecs

# -- what is measured ----------------------------------------------------------------


@dataclass(frozen=True)
class KernelConfig:
    label: str
    kernel_name: str
    args: tuple[str, ...]
    description: str
    interrupt: str = "message"  # "message": interrupt_request on control; "signal": SIGINT to the process group
    baseline: str | None = None  # import cancelkernel from this directory (--baseline)


_MAIN = ("--CancelKernel.exec_thread=main",)
_WORKER = ("--CancelKernel.exec_thread=worker",)
KERNELS = {
    "stock": KernelConfig("stock", "python3", (), "stock ipykernel (python3 kernelspec), interrupt_request"),
    "main": KernelConfig("main", "cancelkernel", _MAIN, "cancelkernel, exec_thread=main, interrupt_request"),
    "worker": KernelConfig("worker", "cancelkernel", _WORKER, "cancelkernel, exec_thread=worker, interrupt_request"),
    # Optional: interrupted the way jupyter_client's interrupt_kernel() does for a
    # kernelspec without interrupt_mode "message" (stock's python3 spec, i.e. what
    # JupyterLab does): SIGINT to the kernel's process group, sent by the client.
    "stock-sig": KernelConfig("stock-sig", "python3", (), "stock ipykernel, SIGINT to its process group", "signal"),
    "main-sig": KernelConfig(
        "main-sig", "cancelkernel", _MAIN, "cancelkernel main, SIGINT to its process group", "signal"
    ),
    "worker-sig": KernelConfig(
        "worker-sig", "cancelkernel", _WORKER, "cancelkernel worker, SIGINT to its process group", "signal"
    ),
    # Optional: main mode with the memory guard off, beside "main", for what the guard's sampling costs.
    "main-noguard": KernelConfig(
        "main-noguard",
        "cancelkernel",
        (*_MAIN, "--CancelKernel.memory_guard=False"),
        "cancelkernel main, memory guard off, interrupt_request",
    ),
}
DEFAULT_KERNELS = ("stock", "main", "worker")


@dataclass(frozen=True)
class Case:
    name: str
    title: str
    code: str
    stdin: bool = False


CASES = {
    c.name: c
    for c in [
        Case("loop", "`while True: pass`", "while True:\n    pass"),
        Case("sleep", "`time.sleep(10**6)`", "import time\ntime.sleep(10**6)"),
        Case("event", "`threading.Event().wait()`", "import threading\nthreading.Event().wait()"),
        Case(
            "lock",
            "lock acquired twice",
            "import threading\n_lock = threading.Lock()\n_lock.acquire()\n_lock.acquire()",
        ),
        Case("queue", "`queue.Queue().get()`", "import queue\nqueue.Queue().get()"),
        Case("socket", "`recv` on a silent socketpair", "import socket\n_sa, _sb = socket.socketpair()\n_sa.recv(1)"),
        Case("pipe", "`os.read` on an empty pipe", "import os\n_pr, _pw = os.pipe()\nos.read(_pr, 1)"),
        Case(
            "subprocess", '`subprocess.run(["sleep","1000"])`', 'import subprocess\nsubprocess.run(["sleep", "1000"])'
        ),
        Case("input", "`input()`, never answered", "input()", stdin=True),
        Case("asyncio", "`await asyncio.sleep(10**6)`", "import asyncio\nawait asyncio.sleep(10**6)"),
        Case("regex", "`re.match(r'(a+)+$', 'a'*40+'b')`", "import re\nre.match(r'(a+)+$', 'a' * 40 + 'b')"),
        Case(
            "thread_join",
            "join a thread that never ends",
            "import threading\n_t = threading.Thread(target=threading.Event().wait, daemon=True)\n"
            "_t.start()\n_t.join()",
        ),
        # {native_dir}: where the montecarlo example was built for this run (examples/native).
        Case(
            "cython",
            "GIL-held cooperative Cython loop",
            "import sys\nsys.path.insert(0, {native_dir!r})\nimport montecarlo\nmontecarlo.pi_gil(10**15)",
        ),
        Case(
            "deep_sleep",
            "`time.sleep` 200 frames deep",
            "import time\ndef _deep(n):\n    if n:\n        return _deep(n - 1)\n    time.sleep(10**6)\n_deep(200)",
        ),
    ]
}

# Where the Cython example was built (the "cython" case), set by main().
NATIVE_DIR: str | None = None


def code_of(case: Case) -> str:
    """The case's code, with the Cython example's build directory filled in."""
    return case.code.replace("{native_dir!r}", repr(NATIVE_DIR))


def build_native_example() -> str:
    """Build examples/native/montecarlo.pyx against the installed cancelkernel, into a temporary directory."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "native"))
    from native_build import build_montecarlo

    return str(build_montecarlo(tempfile.mkdtemp(prefix="ck-latency-native-")))


TRIVIAL = "trivial"
TRIVIAL_TITLE = "`1` (round trip, no interrupt)"

# Goals (checked and printed at the end).
GOAL_CASES = ("loop", "sleep", "socket", "event")
GOAL_P50 = 0.005
# Interrupt -> reply against main mode's own trivial round trip, same run: p50 and p90 ratios.
GOAL_OWN_P50 = 1.0
GOAL_OWN_P90 = 1.5

CHECK_TIMEOUT = 10.0  # a kernel that cannot answer the check cell in this time is restarted
START_TIMEOUT = 2.0  # wait this long for a runaway cell's execute_input (then interrupt anyway)


# -- one kernel under test -----------------------------------------------------------


class Bench:
    """A kernel under test plus everything measured on it."""

    def __init__(self, config: KernelConfig, log, output=None):
        self.config = config
        env = {"PYTHONPATH": config.baseline} if config.baseline else None
        self.kernel = Kernel(
            config.kernel_name, label=config.label, extra_arguments=config.args, output=output, env=env
        )
        self.log = log
        self.token = f"survived-{uuid.uuid4().hex[:8]}"
        self.samples: dict[str, list[dict]] = {}
        self.warmup: list[dict] = []
        self.state = {"checked": 0, "survived": 0, "lost": [], "reset_after_restart": 0, "unresponsive": 0}
        self.restart_log: list[dict] = []
        self.end_status: dict | None = None

    @property
    def kc(self):
        assert self.kernel.kc is not None
        return self.kernel.kc

    @property
    def is_cancelkernel(self) -> bool:
        return "cancelkernel" in self.kernel.kernel_info

    # -- set-up --

    def start(self) -> None:
        self.kernel.start()
        self._set_state()
        check_imported_from(self.kernel, self.config.baseline)

    def _set_state(self) -> None:
        reply = self.execute(f"_bench_state = {self.token!r}", timeout=CHECK_TIMEOUT, silent=True)
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"{self.config.label}: could not set the state variable: {reply['content']}")

    def warm_up(self, delay: float, cap: float) -> None:
        imports = "import asyncio, os, queue, re, socket, subprocess, threading, time"
        self.execute(imports, timeout=CHECK_TIMEOUT)
        for _ in range(5):
            self.execute("1", timeout=CHECK_TIMEOUT)
        # One interrupt, not counted: the first one pays for lazy imports (traceback machinery).
        self.warmup.append(self.interrupt_sample(CASES["sleep"], -1, delay, cap))
        self.warmup.append(self.interrupt_sample(CASES["loop"], -1, delay, cap))

    def restart(self, why: str) -> None:
        self.log(f"  [{self.config.label}] restarting the kernel: {why}")
        started = time.perf_counter()
        self.kernel.restart()
        self._set_state()
        self.state["reset_after_restart"] += 1
        self.restart_log.append({"why": why, "seconds": round(time.perf_counter() - started, 3)})

    # -- requests --

    def execute(self, code: str, *, timeout: float, **kwargs) -> dict:
        msg_id = self.kc.execute(code, **kwargs)
        reply = wait_reply(self.kc, msg_id, timeout)
        if not kwargs.get("silent"):
            wait_idle(self.kc, msg_id, timeout)
        return reply

    def check_state(self) -> bool:
        """Before a sample: the kernel answers, and the warm-up variable still holds its value."""
        drain_channel(self.kc.iopub_channel)
        drain_channel(self.kc.stdin_channel)
        try:
            reply = self.execute(
                "pass", timeout=CHECK_TIMEOUT, silent=True, store_history=False, user_expressions={"s": "_bench_state"}
            )
        except TimeoutError:
            self.state["unresponsive"] += 1
            self.restart("no reply to the check cell: the kernel is not idle")
            return False
        self.state["checked"] += 1
        value = reply["content"].get("user_expressions", {}).get("s", {})
        ok = value.get("status") == "ok" and value.get("data", {}).get("text/plain") == repr(self.token)
        if ok:
            self.state["survived"] += 1
        else:
            self.state["lost"].append(value.get("ename") or value.get("data", {}).get("text/plain"))
            self._set_state()
        return ok

    def trivial_sample(self, run: int) -> dict:
        msg = self.kc.session.msg(
            "execute_request",
            {
                "code": "1",
                "silent": False,
                "store_history": True,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": True,
            },
        )
        sent = time.perf_counter()
        self.kc.shell_channel.send(msg)
        reply = wait_reply(self.kc, msg["header"]["msg_id"], CHECK_TIMEOUT)
        latency = reply["_received"] - sent
        wait_idle(self.kc, msg["header"]["msg_id"], CHECK_TIMEOUT)
        return {"run": run, "outcome": "ok", "latency": latency, "status": reply["content"]["status"]}

    def interrupt_sample(self, case: Case, run: int, delay: float, cap: float) -> dict:
        """Start the runaway cell, interrupt it `delay` s after it started, time the reply."""
        kc = self.kc
        for channel in (kc.shell_channel, kc.control_channel, kc.stdin_channel, kc.iopub_channel):
            drain_channel(channel)
        sample: dict = {"run": run, "outcome": None, "latency": None}
        sent = time.perf_counter()
        msg_id = kc.execute(code_of(case), allow_stdin=case.stdin, stop_on_error=True)
        # "Started" = its execute_input arrived (published just before the code runs).
        try:
            started = _wait_execute_input(kc, msg_id, START_TIMEOUT)
        except TimeoutError:
            # A cell that grabs the GIL at once (regex) can starve the IOPub thread before
            # execute_input leaves: interrupt it anyway, counting from the request.
            started = sent
            sample["execute_input_seen"] = False
        time.sleep(max(0.0, started + delay - time.perf_counter()))
        int_id, t_int = self._interrupt()
        sample["started_to_interrupt"] = round(t_int - started, 6)
        # Raw perf_counter stamps (CLOCK_MONOTONIC on Linux: comparable with stamps taken in the kernel).
        sample["clock"] = {"started": started, "interrupt": t_int}
        reply, ack = _wait_reply_and_ack(kc, msg_id, int_id, t_int + cap)
        if ack is not None:
            sample["ack"] = ack["_received"] - t_int
            sample["interrupt_reply"] = ack["content"]
        if reply is None:
            sample["outcome"] = "never"
            self.restart(f"{case.name}: no execute_reply {cap:g} s after the interrupt")
            return sample
        sample["latency"] = reply["_received"] - t_int
        sample["clock"]["reply"] = reply["_received"]
        _describe_reply(sample, reply, started, delay)
        try:
            wait_idle(kc, msg_id, CHECK_TIMEOUT)
        except TimeoutError:
            sample["no_idle"] = True
        if ack is None and int_id:  # the interrupt_reply may come after the execute_reply
            try:
                late = _wait_ack(kc, int_id, 1.0)
                sample["ack"] = late["_received"] - t_int
                sample["interrupt_reply"] = late["content"]
            except TimeoutError:
                sample["ack"] = None
        return sample

    def _interrupt(self) -> tuple[str, float]:
        """Interrupt the running cell the way this kernel is configured: (interrupt_request msg_id or "", sent at)."""
        if self.config.interrupt == "signal":
            assert self.kernel.km is not None
            int_id, t_int = "", time.perf_counter()
            self.kernel.km.signal_kernel(signal.SIGINT)  # what interrupt_kernel() does in signal mode
            return int_id, t_int
        return send_control(self.kc, "interrupt_request", {})

    def finish(self) -> None:
        """What the kernel says about itself at the end (cancelkernel only)."""
        if self.is_cancelkernel and self.kernel.kc is not None:
            try:
                self.end_status = cancel_status(self.kc, timeout=5.0)
            except TimeoutError:
                self.end_status = {"error": "no cancel_status_reply"}

    def result(self) -> dict:
        info = self.kernel.kernel_info
        return {
            "label": self.config.label,
            "description": self.config.description,
            "kernel_name": self.config.kernel_name,
            "extra_arguments": list(self.config.args),
            "implementation": info.get("implementation"),
            "implementation_version": info.get("implementation_version"),
            "cancelkernel": info.get("cancelkernel"),
            "state": self.state,
            "restarts": self.restart_log,
            "warmup": self.warmup,
            "samples": self.samples,
            "end_status": self.end_status,
        }


def _wait_execute_input(kc, msg_id: str, timeout: float) -> float:
    deadline = time.perf_counter() + timeout
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            raise TimeoutError(f"no execute_input for {msg_id}")
        if not kc.iopub_channel.socket.poll(int(left * 1000) + 1):
            continue
        msg = kc.iopub_channel.get_msg(timeout=0)
        received = time.perf_counter()
        if msg["msg_type"] == "execute_input" and msg["parent_header"].get("msg_id") == msg_id:
            return received


def _wait_reply_and_ack(kc, msg_id: str, int_id: str, deadline: float) -> tuple[dict | None, dict | None]:
    """Poll shell and control together, stamping each message when it arrives."""
    poller = zmq.Poller()
    shell, control = kc.shell_channel.socket, kc.control_channel.socket
    poller.register(shell, zmq.POLLIN)
    poller.register(control, zmq.POLLIN)
    reply = ack = None
    while reply is None:
        left = deadline - time.perf_counter()
        if left <= 0:
            break
        events = dict(poller.poll(int(left * 1000) + 1))
        now = time.perf_counter()
        if shell in events:
            msg = kc.shell_channel.get_msg(timeout=0)
            msg["_received"] = now
            if msg["parent_header"].get("msg_id") == msg_id:
                reply = msg
        if control in events:
            msg = kc.control_channel.get_msg(timeout=0)
            msg["_received"] = now
            if msg["parent_header"].get("msg_id") == int_id:
                ack = msg
    return reply, ack


def _wait_ack(kc, int_id: str, timeout: float) -> dict:
    return wait_for(
        kc.control_channel, lambda m: m["parent_header"].get("msg_id") == int_id, timeout, "interrupt_reply"
    )


def _describe_reply(sample: dict, reply: dict, started: float, delay: float) -> None:
    """What the execute_reply of an interrupted cell says, and the sample's outcome, into `sample`."""
    content = reply["content"]
    sample["status"] = content.get("status")
    sample["ename"] = content.get("ename")
    sample["evalue"] = (content.get("evalue") or "")[:300]
    sample["traceback_lines"] = len(content.get("traceback") or [])
    meta = (reply.get("metadata") or {}).get("cancelkernel")
    if meta:
        sample["metadata"] = {
            k: meta.get(k)
            for k in ("interrupted", "reason", "elapsed", "stopped_at", "abandoned_thread", "interrupts_sent")
        }
    if reply["_received"] - started < delay:
        sample["outcome"] = "finished_early"  # it ended before the interrupt was sent
    elif content.get("status") == "error" and content.get("ename") in ("KeyboardInterrupt", "CancelledError"):
        sample["outcome"] = "stopped"
    else:
        sample["outcome"] = "other_reply"


# -- statistics and output -----------------------------------------------------------


def latencies(samples: list[dict]) -> list[float]:
    """Seconds per sample; a case that never stopped counts as infinite."""
    out = []
    for s in samples:
        if s["outcome"] == "never":
            out.append(math.inf)
        elif s.get("latency") is not None:
            out.append(s["latency"])
    return out


def stats(samples: list[dict]) -> dict:
    values = latencies(samples)
    return {
        "n": len(values),
        "never": sum(1 for v in values if math.isinf(v)),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "min": min(values) if values else None,
        "outcomes": {o: sum(1 for s in samples if s["outcome"] == o) for o in sorted({s["outcome"] for s in samples})},
        "abandoned": sum(1 for s in samples if (s.get("metadata") or {}).get("abandoned_thread")),
        # Replies that were not an interrupt's: the cell ended by itself or with another error.
        "odd": sum(1 for s in samples if s["outcome"] in ("finished_early", "other_reply")),
    }


def ratio(ours: float | None, stock: float | None) -> str:
    if ours is None or stock is None:
        return "—"
    if math.isinf(ours):
        return "never" if not math.isinf(stock) else "both never"
    if math.isinf(stock):
        return "stock never"
    if stock <= 0:
        return "—"
    return f"{ours / stock:.2f}×"


def cell(st: dict, key: str) -> str:
    value = st[key]
    text = fmt_seconds(value)
    if key == "p50" and st["never"] and value is not None and not math.isinf(value):
        text += f" ({st['never']}/{st['n']} never)"
    if key == "p50" and st["abandoned"]:
        text += " †"
    if key == "p50" and st.get("odd"):
        text += f" ‡{st['odd']}"
    return text


def baseline(label: str, labels: list[str]) -> str | None:
    """What a kernel is compared with: stock interrupted the same way (message or signal)."""
    if label.startswith("stock"):
        return None
    if label.endswith("-sig") and "stock-sig" in labels:
        return "stock-sig"
    return "stock" if "stock" in labels else None


def build_table(rows: list[tuple[str, str]], summary: dict, labels: list[str]) -> str:
    """p50 and p90 per kernel, ours as a ratio to stock's p50 and to its own trivial round trip's p50."""
    headers = ["case"]
    for label in labels:
        headers += [f"{label} p50", f"{label} p90"]
        if baseline(label, labels):
            headers += [f"{label} ÷ {baseline(label, labels)}", f"{label} ÷ own `1`"]
    body = []
    for key, title in rows:
        line = [title]
        for label in labels:
            base = baseline(label, labels)
            st = summary[label].get(key)
            if st is None:
                line += ["—", "—"] + (["—", "—"] if base else [])
                continue
            line += [cell(st, "p50"), cell(st, "p90")]
            if base:
                ref = summary[base].get(key)
                own = summary[label].get(TRIVIAL)
                line.append(ratio(st["p50"], ref["p50"] if ref else None))
                line.append("—" if key == TRIVIAL or not own else ratio(st["p50"], own["p50"]).replace("stock ", ""))
        body.append(line)
    return markdown_table(headers, body)


def own_round_trip_goals(summary: dict) -> list[str]:
    """Main mode: interrupt -> reply within 1.0x its own trivial round trip at p50, 1.5x at p90 (issue 22)."""
    trivial = summary.get("main", {}).get(TRIVIAL)
    if not trivial or not trivial["p50"] or not trivial["p90"]:
        return []
    out = []
    for name, st in summary["main"].items():
        if name == TRIVIAL or st["p50"] is None or math.isinf(st["p50"]):
            continue
        p50, p90 = st["p50"] / trivial["p50"], st["p90"] / trivial["p90"]
        ok = p50 <= GOAL_OWN_P50 and p90 <= GOAL_OWN_P90
        out.append(
            f"{'PASS' if ok else 'FAIL'}  main {name}: {p50:.2f}x its trivial round trip at p50, {p90:.2f}x at p90 "
            f"(goal <= {GOAL_OWN_P50:g}x, {GOAL_OWN_P90:g}x)"
        )
    return out


def goals(summary: dict, labels: list[str]) -> list[str]:
    """The goals, as PASS/FAIL lines (plus notes on cases ours never stopped)."""
    return [
        *_latency_goals(summary, labels),
        *own_round_trip_goals(summary),
        *_round_trip_goals(summary, labels),
        *_deep_stack_goals(summary, labels),
        *_never_stopped_notes(summary, labels),
    ]


def _latency_goals(summary: dict, labels: list[str]) -> list[str]:
    """Main mode's p50 on the goal cases."""
    out = []
    if "main" in labels:
        for name in GOAL_CASES:
            st = summary["main"].get(name)
            if st and st["p50"] is not None:
                ok = st["p50"] <= GOAL_P50
                out.append(
                    f"{'PASS' if ok else 'FAIL'}  main p50 {name}: {fmt_seconds(st['p50'])} (goal <= "
                    f"{GOAL_P50 * 1e3:g} ms)"
                )
    return out


def _round_trip_goals(summary: dict, labels: list[str]) -> list[str]:
    """Each kernel's trivial round trip against its baseline's."""
    out = []
    for label in labels:
        base = baseline(label, labels)
        ref, ours = (summary[base].get(TRIVIAL) if base else None), summary[label].get(TRIVIAL)
        if ref and ours and ref["p50"] is not None and ours["p50"] is not None:
            ok = ours["p50"] <= ref["p50"] * 1.05 + 0.0002  # measurement slack: 5 % + 0.2 ms
            out.append(
                f"{'PASS' if ok else 'FAIL'}  {label} trivial round trip p50 {fmt_seconds(ours['p50'])} "
                f"vs {base} {fmt_seconds(ref['p50'])} (slack 5 % + 0.2 ms)"
            )
    return out


def _deep_stack_goals(summary: dict, labels: list[str]) -> list[str]:
    """What the report of a sleep 200 frames deep costs over a flat sleep."""
    out = []
    for label in labels:
        deep, flat = summary[label].get("deep_sleep"), summary[label].get("sleep")
        if not (deep and flat and deep["p50"] is not None and flat["p50"] is not None):
            continue
        if math.isinf(deep["p50"]) or math.isinf(flat["p50"]):
            continue
        extra = deep["p50"] - flat["p50"]
        verdict = "" if label.startswith("stock") else ("PASS  " if extra <= max(0.010, flat["p50"]) else "FAIL  ")
        out.append(
            f"{verdict}{label}: the report of a sleep 200 frames deep costs {fmt_seconds(max(0.0, extra))} "
            f"more than a flat sleep (p50 {fmt_seconds(deep['p50'])} vs {fmt_seconds(flat['p50'])})"
        )
    return out


def _never_stopped_notes(summary: dict, labels: list[str]) -> list[str]:
    """Cases a kernel never stopped where its baseline did."""
    out = []
    for label in labels:
        base = baseline(label, labels)
        for name, st in summary[label].items():
            ref = summary[base].get(name) if base else None
            if name != TRIVIAL and st["never"] and ref is not None and ref["never"] < ref["n"]:
                out.append(
                    f"NOTE  {label} {name}: {st['never']}/{st['n']} never stopped ({base}: {ref['never']}/{ref['n']})"
                )
    return out


def _source_of(module: str) -> dict:
    """Where the kernels import `module` from (same environment as ours), and its git state."""
    import importlib.util
    import subprocess

    spec = importlib.util.find_spec(module)
    origin = spec.origin if spec else None
    info: dict = {"origin": origin, "PYTHONPATH": os.environ.get("PYTHONPATH")}
    if origin:
        try:
            # Editable installs resolve into the checkout; `git describe` names the commit (+ -dirty).
            info["git"] = (
                subprocess.run(
                    ["git", "-C", os.path.dirname(os.path.realpath(origin)), "describe", "--always", "--dirty"],
                    capture_output=True,
                    text=True,
                    timeout=10,
                ).stdout.strip()
                or None
            )
        except (OSError, subprocess.SubprocessError):  # no git, or it did not answer
            info["git"] = None
    return info


# -- main ----------------------------------------------------------------------------


@contextlib.contextmanager
def kernel_output(path: str, log: Callable[[str], None]) -> Iterator[TextIO | None]:
    """The file the kernels' stdout and stderr go to (None for "-": this terminal), closed at the end."""
    if path == "-":
        yield None
        return
    with open(path, "a") as output:
        log(f"kernel output (stdout/stderr) goes to {path}")
        yield output


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=10, help="samples per case and kernel (default 10)")
    p.add_argument("--trivial-runs", type=int, default=None, help="samples of the trivial cell `1` (default 3 × runs)")
    p.add_argument(
        "--kernels",
        default=",".join(DEFAULT_KERNELS),
        help=f"comma-separated, from {','.join(KERNELS)} (default {','.join(DEFAULT_KERNELS)}; "
        "*-sig: interrupted by SIGINT to the process group instead of interrupt_request)",
    )
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)}")
    p.add_argument("--delay", type=float, default=0.3, help="seconds from cell start to interrupt (default 0.3)")
    p.add_argument("--cap", type=float, default=5.0, help="seconds to wait for the reply before 'never' (default 5)")
    p.add_argument("--json", metavar="FILE", help="write all raw samples and the environment here")
    p.add_argument(
        "--svg",
        metavar="FILE",
        help="write a grouped bar chart here, .svg or .png (matplotlib: pip install '.[bench]'; else skipped)",
    )
    p.add_argument(
        "--chart-from",
        metavar="JSON",
        help="measure nothing: draw --svg (and print the table) from a run's --json file",
    )
    p.add_argument(
        "--kernel-log",
        metavar="FILE",
        default=os.path.join(tempfile.gettempdir(), "interrupt_latency-kernels.log"),
        help="append the kernels' stdout/stderr here ('-': inherit, i.e. print them); default %(default)s",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument(
        "--baseline",
        metavar="DIR",
        help="also run main and worker mode of the cancelkernel installed in DIR (`pip install --no-deps "
        "--target DIR CHECKOUT`) as main-base and worker-base: before and after a change in one run",
    )
    args = p.parse_args(argv)
    args.kernels = _subset(p, args.kernels, KERNELS, "kernel")
    if args.baseline:
        args.baseline = os.path.abspath(args.baseline)
        for label in [k for k in ("main", "worker") if k in args.kernels]:
            KERNELS[f"{label}-base"] = dataclasses.replace(
                KERNELS[label], label=f"{label}-base", baseline=args.baseline
            )
            args.kernels.append(f"{label}-base")
    args.cases = _subset(p, args.cases, CASES, "case")
    if args.runs < 1:
        p.error("--runs must be >= 1")
    if args.trivial_runs is None:
        args.trivial_runs = 3 * args.runs
    return args


def _subset(p: argparse.ArgumentParser, text: str, known: dict, what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        p.error(f"unknown {what}(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(known)}")
    return [n for n in known if n in names]  # canonical order


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def log(text: str) -> None:
        if not args.quiet:
            print(text, file=sys.stderr, flush=True)

    if args.chart_from:
        return chart_from(args, log)

    source = _source_of("cancelkernel")  # now: the kernels import what is there at start
    if "cython" in args.cases:
        global NATIVE_DIR
        log("building the Cython example (examples/native/montecarlo.pyx) ...")
        NATIVE_DIR = build_native_example()
    began = time.time()
    with kernel_output(args.kernel_log, log) as output, kernels_cleaned_up(), private_kernelspecs():
        benches = [Bench(KERNELS[label], log, output) for label in args.kernels]
        measure(benches, args, log)

    labels = [b.config.label for b in benches]
    summary = {b.config.label: {key: stats(samples) for key, samples in b.samples.items()} for b in benches}
    rows = [(TRIVIAL, TRIVIAL_TITLE)] + [(n, CASES[n].title) for n in args.cases]
    table = build_table(rows, summary, labels)
    env = environment()
    env["cancelkernel_source"] = source
    print_report(args, benches, summary, table, env)
    if args.json:
        write_json(
            args.json,
            {
                "benchmark": "interrupt_latency",
                "config": {
                    "runs": args.runs,
                    "trivial_runs": args.trivial_runs,
                    "delay": args.delay,
                    "cap": args.cap,
                    "kernels": labels,
                    "cases": args.cases,
                    "order": "interleaved: case, run, kernel",
                },
                "cases": {
                    n: {"title": CASES[n].title, "code": code_of(CASES[n]), "allow_stdin": CASES[n].stdin}
                    for n in args.cases
                },
                "environment": env,
                "duration_s": round(time.time() - began, 1),
                "summary": summary,
                "kernels": {b.config.label: b.result() for b in benches},
                "table_markdown": table,
            },
        )
        print(f"\nwrote {args.json}")
    if args.svg:
        write_chart(args, summary, labels, rows, log)
    return 0


def measure(benches: list[Bench], args: argparse.Namespace, log: Callable[[str], None]) -> None:
    """Start and warm up every kernel, take the samples (interleaved: case, run, kernel), then shut them down."""
    for bench in benches:
        log(f"starting {bench.config.description} ...")
        bench.start()
    for bench in benches:
        log(f"warming up {bench.config.label} ...")
        bench.warm_up(args.delay, args.cap)

    log(f"trivial round trip x{args.trivial_runs}")
    for bench in benches:
        bench.samples[TRIVIAL] = []
    for run in range(args.trivial_runs):
        for bench in benches:
            bench.samples[TRIVIAL].append(bench.trivial_sample(run))

    for name in args.cases:
        _measure_case(benches, CASES[name], args)
        log(
            f"{name:12s} "
            + "  ".join(f"{b.config.label}: {fmt_seconds(stats(b.samples[name])['p50'])}" for b in benches)
        )
    for bench in benches:
        bench.check_state()
        bench.finish()
    # Results are collected; the kernels go now (kernels_cleaned_up also covers errors).
    for bench in benches:
        bench.kernel.shutdown()


def _measure_case(benches: list[Bench], case: Case, args: argparse.Namespace) -> None:
    """`args.runs` interrupt samples of `case` on every kernel, run by run."""
    for bench in benches:
        bench.samples[case.name] = []
    for run in range(args.runs):
        for bench in benches:
            bench.check_state()
            bench.samples[case.name].append(bench.interrupt_sample(case, run, args.delay, args.cap))


def print_report(args: argparse.Namespace, benches: list[Bench], summary: dict, table: str, env: dict) -> None:
    """The table, its footnotes, what survived on each kernel, and the goals."""
    print()
    print(
        f"Interrupt -> execute_reply, {args.runs} runs per case (trivial: {args.trivial_runs}), "
        f"interrupt {args.delay:g} s after the cell started, cap {args.cap:g} s; "
        f"Python {env['python']}, ipykernel {env['versions']['ipykernel']}, "
        f"jupyter_client {env['versions']['jupyter_client']}, {env['cpu_count']} CPUs."
    )
    print()
    print(table)
    print()
    if any(st["abandoned"] for s in summary.values() for st in s.values()):
        print("† worker mode: the exec thread was blocked in C past interrupt_grace, abandoned and replaced.")
    if any(st.get("odd") for s in summary.values() for k, st in s.items() if k != TRIVIAL):
        print(
            "‡n n samples got a reply that was not an interrupt's (the cell ended by itself or with another error; "
            "see the JSON)."
        )
    for b in benches:
        st = b.state
        print(
            f"state survived ({b.config.label}): {st['survived']}/{st['checked']} checks"
            + (f"; lost {len(st['lost'])}" if st["lost"] else "")
            + (f"; {len(b.restart_log)} restart(s) (state re-set after each)" if b.restart_log else "")
            + (
                f"; abandoned threads alive at the end: {len(b.end_status.get('abandoned_threads') or [])}"
                if b.end_status and "abandoned_threads" in b.end_status
                else ""
            )
        )
    print()
    for line in goals(summary, [b.config.label for b in benches]):
        print(line)


def chart_from(args: argparse.Namespace, log: Callable[[str], None]) -> int:
    """The table and the chart of an earlier run, from its --json file (no kernel started)."""
    run = read_json(args.chart_from)
    config, summary = run["config"], run["summary"]
    labels = config["kernels"]
    rows = [(TRIVIAL, TRIVIAL_TITLE)] + [(n, run["cases"][n]["title"]) for n in config["cases"]]
    print(build_table(rows, summary, labels))
    if not args.svg:
        log("no --svg given: only the table was printed")
        return 0
    args.cap = config["cap"]
    write_chart(args, summary, labels, rows, log)
    return 0


def write_chart(
    args: argparse.Namespace, summary: dict, labels: list[str], rows: list[tuple[str, str]], log: Callable[[str], None]
) -> None:
    """The p50/p90 bar chart, as SVG, if matplotlib is there."""
    series = {
        label: [
            (summary[label][k]["p50"], summary[label][k]["p90"]) if k in summary[label] else (None, None)
            for k, _ in rows
        ]
        for label in labels
    }
    groups = ["1 (round trip)" if k == TRIVIAL else k for k, _ in rows]
    if grouped_bar_svg(
        args.svg,
        groups,
        series,
        title="interrupt -> execute_reply (p50, whisker to p90)",
        ylabel="seconds (log)",
        never_at=args.cap * 1.5,
    ):
        print(f"wrote {args.svg}")
    else:
        log("matplotlib is not importable: no chart written")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\ninterrupted: all kernels were shut down", file=sys.stderr)
        sys.exit(130)
