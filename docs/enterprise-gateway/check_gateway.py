"""cancelkernel through a real Enterprise Gateway: the checks a cluster operator runs after installing it.

    pip install 'cancelkernel[remote,notebook]'
    python check_gateway.py --url http://EG:8888 --token TOKEN --kernel cancelkernel_kubernetes \\
        [--checkpoint-root /shared/cancelkernel-checkpoints] [--expect-remote] [--jobs 4] [--json]

One line per check (ok, FAILED, info or skipped, with its numbers); exit 0 when none FAILED.  It starts
its own kernels with the agent client (`POST /api/kernels`) and deletes them; nothing else on the
gateway is touched.  tests/gateway runs these same checks against EG on loopback and on a second host.

1. Through EG: a targeted interrupt stops each runaway (busy loop, sleep, silent loop); cancel_status
   shows the running line; a cell that holds the GIL ends `restarted` with the checkpoint restored;
   several notebooks at once (`cancelkernel run --jobs N`); no kernel is left on the gateway.
2. Where the kernel runs: its host name (`--expect-remote`: it must differ from this machine's), and a
   cell's child process gets the interrupt (the targeted one over the websocket, and, for the record,
   EG's REST interrupt: with interrupt_mode "signal" EG's launcher signals the kernel process only).
3. Checkpoints on a shared path (`--checkpoint-root`, the kernelspec's CANCELKERNEL_CHECKPOINT_ROOT):
   the kernel saves under it, a restarted kernel (a new process, maybe on another host or pod) restores
   from it, and a restarted kernel that cannot see its checkpoint says `lost`, with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import typing as t
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field

from cancelkernel.agent import AgentKernel

RUNAWAYS = {
    "busy loop": "while True:\n    pass",
    "sleep": "import time\ntime.sleep(600)",
    "silent loop": "import time\nwhile True:\n    time.sleep(0.05)",
}
WEDGED = "sum(range(10**12))"  # one C call that holds the GIL: no interrupt stops it, only a restart
BUDGET = 1.0
WAIT = 120.0  # seconds any one step may take before the check says it hung (a broken setup, not a slow one)
# A child process of the cell that notes, in a file on the kernel's host, whether a SIGINT reached it.
CHILD = """
import os, signal, subprocess, sys, tempfile, time
mark = os.path.join(tempfile.gettempdir(), 'cancelkernel-check-' + str(os.getpid()) + '-{tag}')
child = subprocess.Popen([sys.executable, '-c', '''
import signal, sys, time
def noted(*_):
    open(sys.argv[1], "w").write("SIGINT")
    sys.exit(0)
signal.signal(signal.SIGINT, noted)
open(sys.argv[1] + ".started", "w").close()
time.sleep(600)
''', mark])
while not os.path.exists(mark + '.started'):
    time.sleep(0.01)
print('child started', flush=True)
child.wait()
"""


@dataclass
class Finding:
    """One check's outcome: ok, FAILED, info (said, not judged) or skipped."""

    check: str
    outcome: str
    detail: str
    numbers: dict[str, t.Any] = field(default_factory=dict)

    def line(self) -> str:
        numbers = ", ".join(f"{k}={v}" for k, v in self.numbers.items())
        return f"{self.outcome:8} {self.check}: {self.detail}" + (f" [{numbers}]" if numbers else "")


@dataclass
class Gateway:
    """Where the checks go, and the ids of every kernel they started (the last check looks for them)."""

    url: str
    token: str
    kernel: str
    started: set[str] = field(default_factory=set)

    def agent(self, **options: t.Any) -> AgentKernel:
        ak = AgentKernel(self.kernel, server_url=self.url, token=self.token, **options).start()
        self.started.add(ak.link.kernel_id)
        return ak

    def rest(self, method: str, path: str) -> tuple[int, t.Any]:
        request = urllib.request.Request(
            self.url.rstrip("/") + path,
            data=b"" if method == "POST" else None,
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                body = response.read()
                return response.status, json.loads(body) if body else None
        except urllib.error.HTTPError as exc:
            return exc.code, None


def check(name: str, ok: bool, detail: str, **numbers: t.Any) -> Finding:
    return Finding(name, "ok" if ok else "FAILED", detail, numbers)


# -- 1. through EG ------------------------------------------------------------------------------


def check_interrupts(gw: Gateway) -> list[Finding]:
    """Each runaway, past its budget, gets one targeted interrupt and stops: `interrupted`."""
    found = []
    ak = gw.agent()
    try:
        found.append(
            check(
                "our kernel",
                ak.info.ours,
                "kernel_info says cancelkernel" if ak.info.ours else "kernel_info says NOT cancelkernel",
            )
        )
        for name, code in RUNAWAYS.items():
            budgets = {"quiet_budget": BUDGET} if name == "silent loop" else {"wall_budget": BUDGET}
            result = ak.run(code, **budgets)
            found.append(
                check(
                    f"interrupt: {name}",
                    result.status == "interrupted",
                    result.summary(),
                    latency_s=_round(result.interrupt_latency),
                    elapsed_s=_round(result.elapsed),
                )
            )
    finally:
        ak.close()
    return found


def check_cancel_status(gw: Gateway) -> Finding:
    """While a cell runs, the kernel's cancel_status (over the websocket) names the line it is on."""
    ak = gw.agent()
    try:
        running = ak.submit("import time\nfor _ in range(6000):\n    time.sleep(0.1)", wall_budget=0)
        line = _wait_for(lambda: _line_with(running.watch.current_line(), "time.sleep"))
        running.interrupt()
        result = running.result(WAIT)
        ok = line is not None and result.status == "interrupted"
        return check("cancel_status", ok, f"running line {line!r}; then {result.summary()}")
    finally:
        ak.close()


def check_wedged(gw: Gateway) -> Finding:
    """A cell no interrupt stops is ended by a restart through EG, and the checkpoint comes back."""
    ak = gw.agent(checkpoint="after-ok")
    try:
        ak.run("x = 41")
        started = time.monotonic()
        result = ak.run(WEDGED, wall_budget=BUDGET)
        took = time.monotonic() - started
        after = ak.run("print(x + 1)").text.strip()
        ok = result.status == "restarted" and result.state == "restored" and after == "42"
        return check(
            "wedged cell",
            ok,
            f"{result.summary()}; then x + 1 = {after}",
            trip_to_result_s=_round(took),
            restored_after_decision_s=(result.timings or {}).get("restored"),
        )
    finally:
        ak.close()


def check_notebooks(gw: Gateway, jobs: int) -> Finding:
    """`cancelkernel run --jobs N`: N notebooks at once, each with a runaway that is interrupted once."""
    with tempfile.TemporaryDirectory(prefix="cancelkernel-check-") as scratch:
        paths = [_notebook(scratch, f"nb{i}") for i in range(jobs)]
        argv = [sys.executable, "-m", "cancelkernel", "run", *paths, "--server-url", gw.url, "--kernel", gw.kernel]
        argv += ["--jobs", str(jobs), "-o", f"{scratch}/out", "--log", f"{scratch}/logs", "--wall-budget", "1"]
        started = time.monotonic()
        done = subprocess.run(
            [*argv, "--allow-errors"],
            env={**os.environ, "JUPYTER_TOKEN": gw.token},
            capture_output=True,
            text=True,
            timeout=WAIT * 3,
            check=False,
        )
        took = time.monotonic() - started
        printed, actions = [], []
        for i in range(jobs):
            with open(f"{scratch}/out/nb{i}.ipynb") as f:
                text = json.load(f)["cells"][2]["outputs"][0]["text"]
            printed.append("".join(text).strip())
            with open(f"{scratch}/logs/nb{i}.jsonl") as f:
                records = [json.loads(line) for line in f]
            actions.append([r["action"] for r in records])
            gw.started.update(r["kernel"]["id"] for r in records if r.get("kernel", {}).get("id"))
    ok = (
        done.returncode == 1 and printed == [f"nb{i}" for i in range(jobs)] and all(a == ["interrupt"] for a in actions)
    )
    detail = f"exit {done.returncode} (1: each has a runaway); last cells printed {printed}; interventions {actions}"
    return check(
        f"{jobs} notebooks, --jobs {jobs}",
        ok,
        detail if ok else detail + "\n" + done.stderr[-2000:],
        seconds=_round(took),
    )


def check_no_kernel_left(gw: Gateway) -> Finding:
    """Every kernel the checks started is gone from the gateway (GET /api/kernels/{id} is 404)."""
    left = _wait_for(
        lambda: [k for k in sorted(gw.started) if gw.rest("GET", f"/api/kernels/{k}")[0] != 404] or None, 30
    )
    return check(
        "no kernel left", not left, f"{len(gw.started)} kernels started, {len(left or [])} still there {left or ''}"
    )


# -- 2. where the kernel runs ----------------------------------------------------------------------


def check_host(gw: Gateway, expect_remote: bool) -> Finding:
    ak = gw.agent()
    try:
        there = ak.run("import socket\nprint(socket.gethostname())").text.strip()
    finally:
        ak.close()
    here = socket.gethostname()
    if not expect_remote:
        return Finding("kernel host", "info", f"the kernel runs on {there!r}; this machine is {here!r}")
    return check("kernel host", there != here, f"the kernel runs on {there!r}, this machine is {here!r}")


def check_children(gw: Gateway) -> list[Finding]:
    """A cell's child process on the kernel's host gets the interrupt: targeted (judged) and REST (said)."""
    spec = gw.rest("GET", f"/api/kernelspecs/{gw.kernel}")[1] or {}
    mode = (spec.get("spec") or {}).get("interrupt_mode", "signal")
    ak = gw.agent()
    try:
        found = []
        for how in ("targeted", "rest"):
            running = ak.submit(CHILD.format(tag=how), wall_budget=0)
            started = _wait_for(lambda r=running: "child started" in str(r.watch.outputs))
            if how == "targeted":
                running.interrupt()
            else:
                gw.rest("POST", f"/api/kernels/{ak.link.kernel_id}/interrupt")
            result = running.result(WAIT)
            got = ak.run(_read_mark()).text.strip()
            detail = f"child started: {bool(started)}; cell {result.status}; the child {got}"
            if how == "targeted":
                found.append(check("child process, targeted interrupt", got == "got SIGINT", detail))
            else:
                found.append(Finding(f"child process, REST interrupt (interrupt_mode {mode})", "info", detail))
        return found
    finally:
        ak.close()


def _read_mark() -> str:
    """A cell that says whether the cell's child got SIGINT, and stops the child if it still runs."""
    return (
        "import os\n"
        "if os.path.exists(mark):\n    print('got SIGINT')\n"
        "elif child.poll() is None:\n"
        "    child.kill(); child.wait(); print('did not get SIGINT and still ran (killed now)')\n"
        "else:\n    print(f'did not get SIGINT and exited with {child.returncode}')\n"
    )


# -- 3. checkpoints on a shared path ------------------------------------------------------------------


def check_checkpoint_root(gw: Gateway, root: str) -> list[Finding]:
    ak = gw.agent()
    try:
        ak.run("kept = 'from before the restart'")
        saved = ak.save_checkpoint("shared")
        directory = str(saved.get("directory") or "")
        # The kernel keys its directory by KERNEL_ID, which EG sets to the kernel's id and keeps across restarts.
        expected = os.path.join(os.path.normpath(root), ak.link.kernel_id)
        found = [
            check(
                "checkpoint root",
                directory == expected,
                f"saved in {directory} on host {ak.info.host}"
                + ("" if directory == expected else f", not in {expected} (<root>/<KERNEL_ID>)"),
            )
        ]
        restored = ak.restart()
        after = ak.run("print(kept)").text.strip()
        found.append(
            check(
                "restore after restart",
                restored.state == "restored" and after == "from before the restart",
                f"{restored}",
            )
        )
        # The restarted kernel cannot see its checkpoint: it must say so, not pretend.
        ak.run(f"import os\nos.rename({directory!r}, {directory + '.hidden'!r})")
        result = ak.run(WEDGED, wall_budget=BUDGET)
        honest = result.status == "restarted" and result.state == "lost"
        found.append(check("checkpoint not visible", honest, result.summary()))
        reason = result.lost_reason or ""
        found.append(
            check(
                "why the checkpoint is lost",
                directory in reason,
                reason if reason else "the result gives no reason naming the checkpoint it looked for",
            )
        )
        ak.run(f"import os\nos.rename({directory + '.hidden'!r}, {directory!r})")
        ak.drop_checkpoint("shared")
        return found
    finally:
        ak.close()


# -- the run -----------------------------------------------------------------------------------------


def run_checks(
    gw: Gateway, *, jobs: int = 3, checkpoint_root: str | None = None, expect_remote: bool = False
) -> list[Finding]:
    """Every check, in order; one that raises is a FAILED finding and the rest still run."""
    steps: list[tuple[str, t.Callable[[], Finding | list[Finding]]]] = [
        ("interrupts", lambda: check_interrupts(gw)),
        ("cancel_status", lambda: check_cancel_status(gw)),
        ("wedged cell", lambda: check_wedged(gw)),
        ("notebooks", lambda: check_notebooks(gw, jobs)),
        ("kernel host", lambda: check_host(gw, expect_remote)),
        ("child processes", lambda: check_children(gw)),
        (
            "checkpoint root",
            (lambda: check_checkpoint_root(gw, checkpoint_root))
            if checkpoint_root
            else (lambda: Finding("checkpoint root", "skipped", "no --checkpoint-root given")),
        ),
        ("no kernel left", lambda: check_no_kernel_left(gw)),
    ]
    found: list[Finding] = []
    for name, step in steps:
        try:
            done = step()
        except Exception as exc:  # noqa: BLE001  a check that broke is a failed check, and the others still run
            done = Finding(name, "FAILED", f"{type(exc).__name__}: {exc}")
        found += done if isinstance(done, list) else [done]
    return found


def _notebook(directory: str, name: str) -> str:
    cells = [f"name = {name!r}", "while True:\n    pass", "print(name)"]
    notebook = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": c} for c in cells
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = os.path.join(directory, f"{name}.ipynb")
    with open(path, "w") as f:
        json.dump(notebook, f)
    return path


def _wait_for(predicate: t.Callable[[], t.Any], timeout: float = WAIT) -> t.Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    return predicate()


def _line_with(line: str | None, text: str) -> str | None:
    return line if line and text in line else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True, help="the gateway, e.g. http://enterprise-gateway:8888")
    parser.add_argument("--token", default=os.environ.get("JUPYTER_TOKEN", ""), help="EG's auth token")
    parser.add_argument("--kernel", default="cancelkernel", help="the kernelspec name on the gateway")
    parser.add_argument("--jobs", type=int, default=3, help="notebooks run at once (check 1)")
    parser.add_argument("--checkpoint-root", help="the shared checkpoint path the kernelspec names (check 3)")
    parser.add_argument("--expect-remote", action="store_true", help="fail if the kernel runs on this machine")
    parser.add_argument("--json", action="store_true", help="one JSON list of findings instead of lines")
    args = parser.parse_args(argv)
    found = run_checks(
        Gateway(args.url, args.token, args.kernel),
        jobs=args.jobs,
        checkpoint_root=args.checkpoint_root,
        expect_remote=args.expect_remote,
    )
    print(json.dumps([asdict(f) for f in found], indent=2) if args.json else "\n".join(f.line() for f in found))
    return 1 if any(f.outcome == "FAILED" for f in found) else 0


if __name__ == "__main__":
    sys.exit(main())
