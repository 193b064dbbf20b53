"""`cancelkernel demo`: start the kernel, interrupt runaway cells, show the state survives.

The kernelspec is installed into a private temporary prefix (never into your
Jupyter directories), so the demo runs on a fresh machine with nothing set up.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import tempfile
import time
import typing as t
from collections.abc import Iterator

from .. import protocol
from ..testing import Kernel, private_kernelspecs, send_control, wait_reply

# (what the cell does, code, modes that cannot stop it) — each runs until interrupted.
RUNAWAYS = [
    ("a Python loop", "while True:\n    pass", ()),
    ("time.sleep", "import time\ntime.sleep(10**6)", ()),
    ("Event.wait", "import threading\nthreading.Event().wait()", ()),
    ("socket recv", "import socket\na, b = socket.socketpair()\na.recv(1)", ()),
    ("a subprocess", "import subprocess\nsubprocess.run(['sleep', '1000'])", ()),
    ("await asyncio.sleep", "import asyncio\nawait asyncio.sleep(10**6)", ()),
    # The regex engine holds the GIL; only the main thread runs signal handlers that can make it let go.
    ("regex backtracking", "import re\nre.match(r'(a+)+$', 'a' * 40 + 'b')", ("worker",)),
]
REPEATS = 3


def _reply(kc: t.Any, msg_id: str, timeout: float) -> dict | None:
    try:
        return wait_reply(kc, msg_id, timeout=timeout)
    except TimeoutError:
        return None


def demo_mode(mode: str, out: t.TextIO = sys.stdout) -> bool:
    """Run the runaway cells in one exec mode; True if every one stopped and state survived."""
    kernel = Kernel("cancelkernel-demo", extra_arguments=[f"--CancelKernel.exec_thread={mode}"])
    ok = True
    try:
        kernel.start()
        kc = kernel.kc
        assert kc is not None
        setup = kc.execute("survivor = 'still here'", stop_on_error=False)
        _reply(kc, setup, 30)
        print(
            f"\n== exec_thread={mode}: user code on the {'main thread' if mode == 'main' else 'worker thread'}",
            file=out,
        )
        print(f"   {'runaway cell':24} {'stopped by':10} {'interrupt -> reply (median of 3)':34} state", file=out)
        for label, code, cannot in RUNAWAYS:
            times, how, survived = [], "", True
            for _ in range(REPEATS):
                msg_id = kc.execute(code, stop_on_error=False)
                time.sleep(0.3)
                start = time.perf_counter()
                send_control(kc, protocol.INTERRUPT_REQUEST, {"target": msg_id})
                reply = _reply(kc, msg_id, 10)
                if reply is None:
                    how = (
                        "cannot be stopped in this mode: kernel restarted"
                        if mode in cannot
                        else "NOT stopped: kernel restarted"
                    )
                    kernel.restart()
                    kc = kernel.kc
                    assert kc is not None
                    _reply(kc, kc.execute("survivor = 'still here'", stop_on_error=False), 30)
                    survived = False
                    break
                times.append((time.perf_counter() - start) * 1000)
                meta = reply["metadata"].get("cancelkernel", {})
                how = "abandon" if meta.get("abandoned_thread") else reply["content"].get("ename", "?")
                check = kc.execute("print(survivor)", stop_on_error=False)
                survived = survived and (_reply(kc, check, 10) or {}).get("content", {}).get("status") == "ok"
            if not times:
                ok = ok and mode in cannot  # a known limit is shown, not a failure
                print(f"   {label:24} {how} (state lost)", file=out)
                continue
            ok = ok and survived
            how = {"KeyboardInterrupt": "interrupt", "CancelledError": "cancel"}.get(how, how)
            print(
                f"   {label:24} {how:10} {statistics.median(times):8.1f} ms{'':26}{'kept' if survived else 'LOST'}",
                file=out,
            )
    finally:
        kernel.shutdown()
    return ok


def run_demo(modes: list[str], out: t.TextIO = sys.stdout) -> int:
    print("cancelkernel demo: every cell below runs forever until it is interrupted once.", file=out)
    log_path = os.path.join(tempfile.gettempdir(), f"cancelkernel-demo-{os.getpid()}.log")
    with _stderr_to(log_path), private_kernelspecs(**{"cancelkernel-demo": {}}):
        results = [demo_mode(mode, out) for mode in modes]
        from .demo_policy import demo_policy

        print("\nThe agent client's policy (cancelkernel.agent): budgets, interrupt once, restart, log", file=out)
        results.append(demo_policy(out=out) == 0)
    print(
        "\nEverything behaved as expected." if all(results) else "\nSomething did not behave as expected (see above).",
        file=out,
    )
    print(f"The kernels' own log lines: {log_path}", file=out)
    return 0 if all(results) else 1


@contextlib.contextmanager
def _stderr_to(path: str) -> Iterator[None]:
    """File descriptor 2 into `path` (the kernels inherit it), so their log lines do not break up the table."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "w") as log:
            os.dup2(log.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
    finally:
        os.close(saved)
