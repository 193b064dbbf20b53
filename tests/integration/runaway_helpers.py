"""Helpers of the runaway tests (test_runaways.py, test_interrupts.py): start a runaway, ask the kernel, interrupt."""

from __future__ import annotations

import os
import queue
import time

from cancelkernel.testing import FileFlag, dump_file_of, execute, send_execute, wait_awaiting, wait_dumped_in_cell, wait_running

GRACE = 0.3
GRACE_ARGS = [f"--CancelKernel.interrupt_grace={GRACE}"]
# For GIL-holding cells: their wall budget only arms the kernel's stack dump, it must not interrupt them.
WARN_ARGS = [*GRACE_ARGS, "--CancelKernel.on_runaway=warn"]
DUMP_BUDGET = {"cancelkernel": {"wall_budget": 0.2}}
# Generous: only there so that a broken kernel cannot hang the suite.
STOP_TIMEOUT = 20.0


def start_runaway(kc, setup: str, runaway: str, *, innermost: str | None = None, allow_stdin: bool = False) -> tuple[str, str, int]:
    """Start a runaway cell; return (msg_id, code, line of the runaway) once the kernel shows it in that line.

    `innermost`: text of the thread's innermost line once the runaway's call,
    made in Python code, blocks (e.g. "acquire(" under a join).  A top-level
    await is suspended on no thread's stack: the cell sets a marker right
    before it, then its loop back in the selector means it waits in the await.
    """
    assert "\n" not in runaway, "the runaway is one line"
    lines = [line for line in setup.splitlines() if line]
    marker = FileFlag("awaiting") if runaway.startswith("await ") else None
    if marker is not None:
        lines.append(marker.set_code)
    lines.append(runaway)
    code = "\n".join(lines)
    # stop_on_error=False (send_execute's default): ipykernel 7.4 may abort a request sent right
    # after an error reply (a race of its own, see test_interrupts.py); not what this tests.
    msg_id = send_execute(kc, code, allow_stdin=allow_stdin)
    if marker is not None:
        marker.wait(STOP_TIMEOUT)
        wait_awaiting(kc, msg_id, timeout=STOP_TIMEOUT)
    else:
        wait_running(kc, msg_id, at=runaway, innermost=innermost, timeout=STOP_TIMEOUT)
    return msg_id, code, len(lines)


def start_gil_holder(kc, setup: str, call: str) -> str:
    """Start a cell whose last line is one C call that holds the GIL; return its msg_id once it is inside.

    Nothing answers a status request then: the cell's wall budget arms the
    kernel's dead man's switch, and its dump shows the cell at the call's line
    (the kernel must run with on_runaway=warn so the budget interrupts nothing).
    """
    dump_file = dump_file_of(kc)
    lines = [line for line in setup.splitlines() if line] + [call]
    msg_id = send_execute(kc, "\n".join(lines), metadata=DUMP_BUDGET)
    wait_dumped_in_cell(dump_file, len(lines), timeout=STOP_TIMEOUT)
    return msg_id


def user_expr(kc, expr: str) -> str:
    """text/plain of an expression evaluated in the kernel (via user_expressions)."""
    reply = execute(kc, "", user_expressions={"v": expr}, store_history=False)
    result = reply["content"]["user_expressions"]["v"]
    assert result["status"] == "ok", result
    return result["data"]["text/plain"]


def line_at(kc, stopped_at: str) -> str:
    """The source line a "file:line" names, read through the kernel's linecache (cells live there)."""
    path, _, lineno = stopped_at.rpartition(":")
    return eval(user_expr(kc, f"__import__('linecache').getline({path!r}, {int(lineno)}).strip()"))


def kernel_pid(km) -> int:
    return km.provisioner.process.pid


def child_processes(pid: int, name: str) -> list[int]:
    """PIDs of live (non-zombie) children of `pid` whose command is `name`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index(b"(") + 1 : stat.rindex(b")")].decode()
        fields = stat[stat.rindex(b")") + 2 :].split()
        if comm == name and int(fields[1]) == pid and fields[0] != b"Z":
            found.append(int(entry))
    return found


def wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def no_reply_within(channel, msg_id: str, seconds: float) -> bool:
    """True if no message answering `msg_id` arrives on `channel` within `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        try:
            msg = channel.get_msg(timeout=left)
        except queue.Empty:
            return True
        if msg["parent_header"].get("msg_id") == msg_id:
            return False


def send_interrupt(kc, target: str | None) -> str:
    msg = kc.session.msg("interrupt_request", {"target": target} if target else {})
    kc.control_channel.send(msg)
    return msg["header"]["msg_id"]


def start_cell(kc, code: str) -> str:
    """Start a cell; return its msg_id once the kernel shows it running its code (a one-line cell: at that line).

    A native loop that checks the flag answers status requests even while it
    holds the GIL (the kernel's GIL yield).  Its line is one attribute lookup
    and one call: at that line means inside the loop.  A cell of several
    lines here is one loop from its first line on.
    """
    msg_id = send_execute(kc, code)
    wait_running(kc, msg_id, at=None if "\n" in code else code)
    return msg_id


def assert_interrupted(reply: dict) -> None:
    content = reply["content"]
    assert content["status"] == "error", content
    assert content["ename"] == "KeyboardInterrupt", content
