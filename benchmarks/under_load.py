"""Proof under load: the suite and the storm, run again and again from a fresh clone while every core is kept busy.

    python benchmarks/under_load.py [--suite 5] [--storm 20] [--repo PATH] [--hog stress-ng|python]

Clones `--repo` (default: this checkout's main branch, as committed) into a
temporary directory, installs it with the test extra into a venv of its own,
starts a CPU hog on every core (`stress-ng --cpu N` when it is installed, else
one busy Python process per core), then runs the README's test command
`--suite` times and `tests/integration/test_storm.py` `--storm` times, and
prints how many runs failed, with the failing tests of each.  The hog is
stopped whatever happens.  Exit status: 1 if any run failed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOG_CODE = "while True: pass"


def start_hog(kind: str) -> list[subprocess.Popen]:
    cores = os.cpu_count() or 2
    if kind == "stress-ng" and shutil.which("stress-ng"):
        return [subprocess.Popen(["stress-ng", "--cpu", str(cores), "--quiet"], start_new_session=True)]
    return [subprocess.Popen([sys.executable, "-c", HOG_CODE], start_new_session=True) for _ in range(cores)]


def stop_hog(hogs: list[subprocess.Popen]) -> None:
    for hog in hogs:
        with contextlib.suppress(OSError):
            os.killpg(hog.pid, signal.SIGKILL)
        hog.wait()


def stop_run(run: subprocess.Popen) -> None:
    """A pytest run we are leaving (this script was stopped):
    SIGTERM first, so it shuts its kernels down, then SIGKILL."""
    if run.poll() is not None:
        return
    for signum, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(run.pid, signum)
            run.wait(timeout=wait)
            return
        except (OSError, subprocess.TimeoutExpired):
            continue


def _stop_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(f"stopped by signal {signum}")


def fresh_install(repo: str, workdir: str) -> str:
    """Clone and install; returns the clone's venv python."""
    clone = os.path.join(workdir, "clone")
    print(f"== cloning {repo}", flush=True)
    subprocess.run(["git", "clone", "--quiet", repo, clone], check=True)
    python = os.path.join(clone, ".venv", "bin", "python")
    subprocess.run([sys.executable, "-m", "venv", os.path.join(clone, ".venv")], check=True)
    print("== installing the test extra", flush=True)
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True, cwd=clone)
    subprocess.run([python, "-m", "pip", "install", "--quiet", ".[test]"], check=True, cwd=clone)
    return python


def run_pytest(python: str, args: list[str], label: str, log_dir: str) -> tuple[bool, float, list[str], str]:
    """One pytest run; (passed, seconds, failing tests, the summary line)."""
    clone = os.path.dirname(os.path.dirname(os.path.dirname(python)))
    log = os.path.join(log_dir, f"{label}.log")
    started = time.monotonic()
    with open(log, "w") as out:
        run = subprocess.Popen([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=clone, stdout=out,
                               stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            returncode = run.wait()
        finally:
            stop_run(run)
    seconds = time.monotonic() - started
    with open(log) as f:
        text = f.read()
    failing = sorted(set(re.findall(r"^(?:FAILED|ERROR) (\S+)", text, re.MULTILINE)))
    summary = next(
        (line.strip("= ") for line in reversed(text.splitlines()) if re.search(r"\d+ (passed|failed)", line)),
        "no summary",
    )
    return returncode == 0, seconds, failing, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", type=int, default=5, help="runs of the whole suite (default 5)")
    parser.add_argument("--storm", type=int, default=20, help="runs of tests/integration/test_storm.py (default 20)")
    parser.add_argument("--repo", default=ROOT, help="the repository to clone (default: this checkout)")
    parser.add_argument("--hog", choices=["stress-ng", "python"], default="stress-ng", help="what keeps the cores busy")
    parser.add_argument("--keep", action="store_true", help="keep the clone and the logs")
    args = parser.parse_args()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop_on_signal)  # the finally clauses below stop the run and the hog
    workdir = tempfile.mkdtemp(prefix="cancelkernel-under-load-")
    log_dir = os.path.join(workdir, "logs")
    os.makedirs(log_dir)
    python = fresh_install(args.repo, workdir)
    runs = [("suite", i, []) for i in range(1, args.suite + 1)] + [
        ("storm", i, ["tests/integration/test_storm.py"]) for i in range(1, args.storm + 1)
    ]
    hogs = start_hog(args.hog)
    failed: dict[str, int] = {"suite": 0, "storm": 0}
    try:
        hog = "stress-ng" if args.hog == "stress-ng" and shutil.which("stress-ng") else "busy Python processes"
        print(f"== CPU hog: {hog} on {os.cpu_count()} cores; logs in {log_dir}", flush=True)
        for kind, i, extra in runs:
            ok, seconds, failing, summary = run_pytest(python, extra, f"{kind}-{i}", log_dir)
            failed[kind] += not ok
            print(
                f"{kind} run {i}: {'ok' if ok else 'FAILED'} in {seconds:.0f} s ({summary})"
                + "".join(f"\n    {t}" for t in failing),
                flush=True,
            )
    finally:
        stop_hog(hogs)
    print(
        f"== under load: suite {args.suite - failed['suite']}/{args.suite} green, "
        f"storm {args.storm - failed['storm']}/{args.storm} green"
    )
    if not args.keep and not any(failed.values()):
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"== kept: {workdir}")
    return 1 if any(failed.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
