"""Waiting on a kernel's state, never on the clock: a cell runs its code, sits in its blocking call, holds the GIL.

A test that sends a cell, sleeps, then interrupts passes only when the
machine is fast enough; these helpers ask the kernel instead (our
`cancel_status_request` answers on the control channel while a cell runs).

Why "innermost frame at the line of a C call" means "inside that call": the
interpreter acts on an interrupt (async exception or signal) only at its
eval-breaker checks, which sit at function entry, backward jumps and after
calls; none lies between the start of a line like `lock.acquire()` and its
call.  So once a thread's innermost frame is at such a line, an interrupt
cannot land before the call has started.

What the status cannot say, a file can: `FileFlag` is a flag between the
test and a cell, one the cell sets (a marker: "I got here") or one it waits
for (a gate: the test lets it go on when it chooses).  Other state (a
process exited, an agent's warm spare ready) is polled with `wait_until`.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import signal
import tempfile
import threading
import time
import typing as t

from .. import protocol
from ..frames import is_cell_file, parse_faulthandler
from .kernels import REPLY_TIMEOUT, control_request, wait_reply

# Seconds between two status requests: short, since each is one round trip on the control channel.
POLL = 0.02


def cancel_status(kc: t.Any, *, timeout: float = REPLY_TIMEOUT) -> dict:
    """The kernel's cancel_status_reply content: what runs where, abandoned threads, memory (docs/protocol.md)."""
    return t.cast(dict, control_request(kc, protocol.CANCEL_STATUS_REQUEST, timeout=timeout)["content"])


def cell_status(kc: t.Any, msg_id: str) -> dict | None:
    """The cancel_status entry of the running execution `msg_id` (None: it does not run now)."""
    return next((e for e in cancel_status(kc).get("executions") or [] if e.get("msg_id") == msg_id), None)


def wait_running(
    kc: t.Any,
    msg_id: str,
    *,
    at: str | None = None,
    innermost: str | None = None,
    timeout: float = REPLY_TIMEOUT,
) -> dict:
    """Wait until `msg_id` runs its own code; returns its cancel_status entry.

    at: the source text of the line the cell's innermost user frame must be at
    (stripped).  innermost: text the thread's innermost frame's source line must
    contain (any code: a blocking call inside the standard library, say).
    """
    return _wait_status(
        kc,
        msg_id,
        lambda e: e.get("where") is not None and _matches(e, at, innermost),
        f"running (at={at!r}, innermost={innermost!r})",
        timeout,
    )


def wait_awaiting(kc: t.Any, msg_id: str, *, timeout: float = REPLY_TIMEOUT) -> dict:
    """Wait until the thread of `msg_id` sits in its event loop's selector; returns its cancel_status entry.

    For a top-level-await cell, whose suspended coroutine is on no thread's
    stack (`where` stays None).  Alone this does not say WHICH await: ipykernel
    awaits too before the cell starts.  So wait first for a marker the cell
    sets right before its `await` (FileFlag): the coroutine runs from there to
    the await without giving the loop back, so once the loop sits in its
    selector the cell is suspended in that await.
    """
    return _wait_status(kc, msg_id, _in_selector, "suspended in an await (its loop in the selector)", timeout)


def wait_state(kc: t.Any, msg_id: str, state: str, *, timeout: float = REPLY_TIMEOUT) -> dict:
    """Wait until the running execution `msg_id` is in `state` (e.g. unresponsive-to-interrupt);
    its cancel_status entry.

    The kernel decides such a state itself (past the interrupt grace): the test asks until it has.
    """
    return _wait_status(kc, msg_id, lambda e: e.get("state") == state, f"in state {state!r}", timeout)


def wait_no_abandoned_threads(kc: t.Any, *, timeout: float = REPLY_TIMEOUT) -> None:
    """Wait until the kernel lists no abandoned exec thread (worker mode): every one has exited."""
    deadline = time.monotonic() + timeout
    while True:
        listed = cancel_status(kc).get("abandoned_threads")
        if not listed:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"abandoned exec threads still alive after {timeout:g} s: {listed}")
        time.sleep(POLL)


def _in_selector(entry: dict) -> bool:
    top = entry.get("innermost") or {}
    return top.get("function") == "select" and os.path.basename(top.get("file") or "") == "selectors.py"


def _wait_status(kc: t.Any, msg_id: str, accept: t.Callable[[dict], bool], what: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    last: dict | None = None
    while time.monotonic() < deadline:
        last = cell_status(kc, msg_id)
        if last is not None and accept(last):
            return last
        time.sleep(POLL)  # a pause between two questions, not a guess at how long the cell takes
    raise TimeoutError(f"cell {msg_id} was not seen {what} within {timeout:g} s; last status: {last}")


def _matches(entry: dict, at: str | None, innermost: str | None) -> bool:
    if at is not None and (entry.get("line") or "").strip() != at.strip():
        return False
    if innermost is not None:
        top = entry.get("innermost") or {}
        if innermost not in (top.get("line") or ""):
            return False
    return True


def dump_file_of(kc: t.Any, timeout: float = REPLY_TIMEOUT) -> str:
    """The kernel's stack dump file (kernel_info_reply `cancelkernel.dump_file`)."""
    info = wait_reply(kc, kc.kernel_info(), timeout=timeout)["content"]
    path = (info.get(protocol.KEY) or {}).get("dump_file")
    if not path:
        raise RuntimeError(f"the kernel advertises no dump file: {info.get(protocol.KEY)}")
    return str(path)


def wait_dumped_in_cell(dump_file: str, lineno: int, *, timeout: float = REPLY_TIMEOUT) -> None:
    """Wait until the kernel's own dump shows a thread whose innermost frame is a cell at `lineno`.

    For a call that holds the GIL (nothing can answer a status request then):
    give the cell a budget, and the kernel's dead man's switch has faulthandler
    dump the stacks once its watchdog is starved.  Reading the file is safe; a
    dump asked for from outside while threads run is not (docs/cancellation.md).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(dump_file, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            text = ""
        for thread in parse_faulthandler(text):
            if thread.locations and is_cell_file(thread.locations[-1][0]) and thread.locations[-1][1] == lineno:
                return
        time.sleep(POLL)
    raise TimeoutError(f"no dump in {dump_file} showed a cell at line {lineno} within {timeout:g} s")


# -- a file as a flag between the test and a cell -----------------------------------------

_flag_dir: str | None = None
_flag_count = itertools.count()


def _flags() -> str:
    global _flag_dir
    if _flag_dir is None:
        _flag_dir = tempfile.mkdtemp(prefix="cancelkernel-flags-")
        atexit.register(shutil.rmtree, _flag_dir, True)
    return _flag_dir


class FileFlag:
    """A flag the test and a cell share through a file: a marker the cell sets, or a gate it waits for.

    `set_code` / `wait_code` are one line of cell code each; `set()` /
    `wait()` are the test's side.  The cell's wait polls the file (a pause
    between two looks, not a guess at how long anything takes).
    """

    def __init__(self, tag: str = "flag"):
        self.path = os.path.join(_flags(), f"{tag}-{os.getpid()}-{next(_flag_count)}")

    @property
    def set_code(self) -> str:
        return f"open({self.path!r}, 'w').close()"

    @property
    def wait_code(self) -> str:
        return f"while not __import__('os').path.exists({self.path!r}): __import__('time').sleep(0.01)"

    def set(self) -> None:
        open(self.path, "w").close()

    def is_set(self) -> bool:
        return os.path.exists(self.path)

    def wait(self, timeout: float = REPLY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not self.is_set():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.path} was not set within {timeout:g} s")
            time.sleep(POLL)


# -- any state, polled; a move made on state, from another thread ------------------------


def wait_until(predicate: t.Callable[[], t.Any], timeout: float = REPLY_TIMEOUT, *, poll: float = 0.05) -> t.Any:
    """The first true value `predicate()` returns, asked every `poll` s; past `timeout`, its last (false) value.

    For state no kernel reports (a process, a file, an agent's spare): `assert
    wait_until(...)` waits on it, the timeout only stops a broken setup from hanging.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(poll)  # a pause between two questions, not a guess at how long anything takes
    return predicate()


def act_when(
    predicate: t.Callable[[], t.Any], action: t.Callable[[], object], *, timeout: float = REPLY_TIMEOUT
) -> threading.Event:
    """On a thread of its own, run `action()` once `predicate()` holds (polled); the returned event is set once it ran.

    For a move the test makes while another call of its own blocks (interrupt
    the cell an agent call runs, once that cell is seen running): made on
    state, not on a timer.  If the predicate never holds within `timeout`,
    nothing is done and the event stays clear.
    """
    acted = threading.Event()

    def watch() -> None:
        if wait_until(predicate, timeout, poll=POLL):
            action()
            acted.set()

    threading.Thread(target=watch, name="cancelkernel-test-act-when", daemon=True).start()
    return acted


# -- a process, exited -------------------------------------------------------------------------


def process_exited(pid: int, timeout: float = 15.0) -> bool:
    """True once process `pid` has exited, within `timeout` s (a zombie counts: nothing is reaped here).

    A zombie only once all its threads are gone too: until then its parent
    cannot reap it yet, and sees it alive.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rpartition(") ")[2].startswith(("Z", "X")) and os.listdir(f"/proc/{pid}/task") in (
                    [],
                    [str(pid)],
                ):
                    return True
        except FileNotFoundError:
            return True
        except OSError:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                pass  # someone else's process: it exists
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL)


# -- the agent client's warm spare -------------------------------------------------------------


def spare_pid(ak: t.Any, wait: float = 0.0) -> int | None:
    """The pid of an AgentKernel's warm spare kernel, if it has one (waiting up to `wait` s for it to be ready)."""
    spare = getattr(ak.link.lifecycle, "spare", None)
    wait_until(lambda: spare is None or spare.ready, wait)
    km = spare.km if spare is not None else None
    return int(km.provisioner.pid) if km is not None and km.provisioner is not None else None


# -- a signal, handled -------------------------------------------------------------------------


def signal_handled(km: t.Any, kc: t.Any, signum: int = signal.SIGINT, *, timeout: float = REPLY_TIMEOUT) -> None:
    """Send `signum` to the kernel; return once its main thread has run the signal's Python handler.

    The signal is delivered once no thread of the process has it pending
    (/proc/<pid>/status); Python then runs the handler on the main thread at
    its next bytecode, so a shell request answered after that (kernel_info,
    handled on the main thread) comes after the handler.  For a kernel whose
    main thread runs Python (idle, or a cell of Python code on it).
    """
    pid = km.provisioner.pid
    km.signal_kernel(signum)
    deadline = time.monotonic() + timeout
    while _pending(pid, signum):
        if time.monotonic() > deadline:
            raise TimeoutError(f"signal {signum} still pending in process {pid} after {timeout:g} s")
        time.sleep(POLL)
    wait_reply(kc, kc.kernel_info(), timeout=timeout)


def _pending(pid: int, signum: int) -> bool:
    """True if `signum` is pending for process `pid` or one of its threads."""
    bit = 1 << (signum - 1)
    paths = [f"/proc/{pid}/status"]
    try:
        paths += [f"/proc/{pid}/task/{tid}/status" for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return False  # gone: nothing pending
    for path in paths:
        try:
            with open(path) as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue  # a thread that just ended
        for name in ("ShdPnd", "SigPnd"):
            if int(fields.get(name, "0").strip() or "0", 16) & bit:
                return True
    return False
