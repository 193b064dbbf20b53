#!/usr/bin/env python
"""The JupyterLab extension's costs and reaction times, in a real JupyterLab driven by headless chromium.

Measured in one run (docs/jupyterlab.md quotes the numbers):

- **not answering**: how long after one C call starts holding the GIL the cell
  says "the kernel does not answer" (goal: within the kernel's grace period plus
  one second, the poll interval).  Two cases: the call is the cell's first line
  (no status ever answered: the countdown comes from the kernel's `started`
  event), and the call comes after 3 s of Python (the page had polled all along).
  Times are taken in the page: Shift+Enter's keydown and the moment the cell's
  line first has `data-phase="not-answering"` (a MutationObserver).
- **idle**: with one notebook of ours and one stock notebook open and idle, the
  kernel processes' CPU (utime+stime from /proc) and the websocket frames each
  page sends over the window (the extension sends nothing while idle).
- **polling while a cell runs**: the frames a page sends per second while a
  Python loop runs (a status request about once per poll interval).

    python benchmarks/lab_extension.py                       # 5 repeats, 30 s idle window
    python benchmarks/lab_extension.py --repeats 10 --json benchmarks/results/lab_extension.json
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(os.path.dirname(HERE), "tests", "browser"))
from _common import cpu_seconds, environment, percentile, write_json  # noqa: E402
from lab_page import KERNEL_TIMEOUT, Notebook, lab_server, ms  # noqa: E402

from cancelkernel.testing import kernels_cleaned_up  # noqa: E402

STOCK_DISPLAY_NAME = "Python 3 (ipykernel)"
HOLD = "sum(range(10**13))"  # one C call that holds the GIL for hours

# Installed in the page: when Shift+Enter went down, and when each cell line first showed each phase.
WATCH_PHASES = """() => {
    window.__ck = {runAt: null, phases: {}};
    document.addEventListener('keydown', e => {
        if (e.key === 'Enter' && e.shiftKey) window.__ck.runAt = Date.now();
    }, true);
    new MutationObserver(() => {
        for (const line of document.querySelectorAll('.ck-CellStatus[data-phase]')) {
            const phase = line.getAttribute('data-phase');
            if (!(phase in window.__ck.phases)) window.__ck.phases[phase] = Date.now();
        }
    }).observe(document.body, {subtree: true, childList: true, attributes: true, attributeFilter: ['data-phase']});
}"""


def kernel_pid(kernel_id: str) -> int:
    """The pid of the kernel started on kernel-<id>.json (the server does not say it)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if f"kernel-{kernel_id}.json".encode() in f.read():
                        return int(entry)
            except OSError:
                continue
    raise RuntimeError(f"no process for kernel {kernel_id}")


class Frames:
    """Websocket frames a page sends (all its kernel connections)."""

    def __init__(self, page) -> None:
        self.sent = 0
        page.on("websocket", lambda ws: ws.on("framesent", self._count))

    def _count(self, _payload) -> None:
        self.sent += 1


def restart(notebook: Notebook) -> None:
    """The toolbar's restart (a GIL-held cell answers nothing else); until the page says the new kernel is idle."""
    notebook.restart()
    notebook.wait_status("Idle")


def not_answering_after(notebook: Notebook, code: str, hold_after: float) -> float:
    """Seconds from the start of the GIL hold to "not answering" on the cell (hold_after: seconds of Python first)."""
    page = notebook.page
    page.evaluate(WATCH_PHASES)
    cell = notebook.run(code)
    page.wait_for_function("() => 'not-answering' in window.__ck.phases", timeout=ms(KERNEL_TIMEOUT), polling="raf")
    ck = page.evaluate("() => window.__ck")
    assert cell.element.locator(".ck-CellStatus-budgets").inner_text().startswith("wall budget"), (
        "no countdown on the held cell"
    )
    restart(notebook)
    return (ck["phases"]["not-answering"] - ck["runAt"]) / 1000 - hold_after


def measure(args: argparse.Namespace) -> dict:
    from playwright.sync_api import sync_playwright

    results: dict = {}
    with kernels_cleaned_up(), lab_server() as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=shutil.which("chromium"), headless=True, args=["--no-sandbox"]
        )
        try:
            pages = {}
            frames = {}
            for label, name in (("ours", "Python 3 (cancelkernel)"), ("stock", STOCK_DISPLAY_NAME)):
                page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
                frames[label] = Frames(page)
                pages[label] = Notebook(page, server, name)
                pages[label].open_from_launcher()
                pages[label].run_done("x = 1")
            ours = pages["ours"]
            grace = 1.0  # the kernel's interrupt_grace default; the page reads it from kernel_info
            first = [not_answering_after(ours, f"%%budget wall=60\n{HOLD}", 0.0) for _ in range(args.repeats)]
            later = [
                not_answering_after(
                    ours,
                    f"%%budget wall=60\nimport time\nt = time.time()\nwhile time.time() - t < 3: pass\n{HOLD}",
                    3.0,
                )
                for _ in range(args.repeats)
            ]
            for label, samples in (("held from the first line", first), ("held after 3 s of Python", later)):
                results[f"not answering, {label}"] = {
                    "p50": percentile(samples, 50), "max": max(samples), "samples": samples, "goal": grace + 1.0,
                }  # fmt: skip

            # Polling while a Python loop runs: frames per second the page sends.
            loop_seconds = 10.0
            before = frames["ours"].sent
            started = time.monotonic()
            ours.run_done(
                f"import time\nt = time.time()\nwhile time.time() - t < {loop_seconds}: pass", timeout=KERNEL_TIMEOUT
            )
            took = time.monotonic() - started
            # -1: the execute_request
            results["frames per second while a cell runs"] = round((frames["ours"].sent - before - 1) / took, 2)

            # Idle, both pages open.
            pids = {label: kernel_pid(notebook.kernel_id()) for label, notebook in pages.items()}
            time.sleep(args.settle)
            cpu = {label: cpu_seconds(pid) for label, pid in pids.items()}
            sent = {label: counter.sent for label, counter in frames.items()}
            started = time.monotonic()
            time.sleep(args.seconds)
            window = time.monotonic() - started
            for label, pid in pids.items():
                used = cpu_seconds(pid) - cpu[label]
                results[f"idle {label}"] = {
                    "cpu_seconds": round(used, 3), "percent": round(100 * used / window, 3),
                    "frames_sent": frames[label].sent - sent[label], "window": round(window, 1),
                }  # fmt: skip
        finally:
            browser.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="GIL-held cells per case (default 5)")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the idle window (default 30)")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds idle before the window starts (default 3)")
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args()
    if shutil.which("chromium") is None:
        print("lab_extension: needs Debian's chromium (apt-get install chromium) and the test extra", file=sys.stderr)
        return 2
    results = measure(args)
    for key, value in results.items():
        if isinstance(value, dict) and "p50" in value:
            print(f"{key}: p50 {value['p50']:.3f} s, max {value['max']:.3f} s (goal <= {value['goal']:.1f} s)")
        elif isinstance(value, dict):
            print(
                f"{key}: {value['cpu_seconds']:.2f} CPU s over {value['window']} s ({value['percent']:.2f} %), "
                f"{value['frames_sent']} frames sent"
            )
        else:
            print(f"{key}: {value}")
    if args.json:
        write_json(args.json, {"environment": environment(), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
