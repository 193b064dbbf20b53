"""Helpers of the integration tests (no tests here): the settings they share, asking a kernel, runaways,
processes, the agent.

Kernels, messages and waits on a kernel's state are `cancelkernel.testing`'s
(the benchmarks and the demo use them too); the fixtures are in conftest.py;
`cancelkernel mcp` as a process driven by the SDK's client is mcp_helpers.py.
"""

from __future__ import annotations

import contextlib
import os
import queue
import time
import typing as t
from collections.abc import Iterator

from cancelkernel.agent import AgentKernel
from cancelkernel.testing import (
    REPLY_TIMEOUT,
    FileFlag,
    dump_file_of,
    execute,
    process_exited,
    send_execute,
    spare_pid,
    wait_awaiting,
    wait_dumped_in_cell,
    wait_running,
)

# -- settings -------------------------------------------------------------------------------

# The kernel's interrupt grace where a test starts our kernel itself: short, so that a worker-mode exec
# thread blocked in C is abandoned quickly, and a cell that catches its interrupt is reported soon.
GRACE = 0.3
GRACE_ARGS = [f"--CancelKernel.interrupt_grace={GRACE}"]
# For GIL-holding cells: their wall budget only arms the kernel's stack dump, it must not interrupt them.
WARN_ARGS = [*GRACE_ARGS, "--CancelKernel.on_runaway=warn"]
DUMP_BUDGET = {"cancelkernel": {"wall_budget": 0.2}}
# Generous: only there so that a broken kernel cannot hang the suite.
STOP_TIMEOUT = 20.0
# The agent client's grace (AgentKernel, `cancelkernel run`, `cancelkernel mcp`), longer than the default 1 s:
# on a loaded machine a kernel (a remote one all the more) may take a while to answer an interrupt, and a grace
# too short turns an expected "interrupted" into a restart (seen with stock under a CPU hog at 0.5 s).
AGENT_GRACE = 2.0

# -- asking the kernel ------------------------------------------------------------------------


def value_of(kc: t.Any, expression: str) -> str:
    """text/plain of `expression` evaluated in the kernel (user_expressions of an empty cell,
    kept out of the history)."""
    reply = execute(kc, "", user_expressions={"v": expression}, store_history=False)["content"]
    assert reply["status"] == "ok", reply
    result = reply["user_expressions"]["v"]
    assert result["status"] == "ok", result
    return str(result["data"]["text/plain"])


def line_at(kc: t.Any, stopped_at: str) -> str:
    """The source line a "file:line" names, read through the kernel's linecache (cells live there)."""
    path, _, lineno = stopped_at.rpartition(":")
    return str(eval(value_of(kc, f"__import__('linecache').getline({path!r}, {int(lineno)}).strip()")))


def execute_replies(kc: t.Any, msg_ids: list[str], *, timeout: float = REPLY_TIMEOUT) -> dict[str, dict]:
    """The execute_reply of each of `msg_ids`, in whatever order they come; other shell messages are dropped."""
    found: dict[str, dict] = {}
    deadline = time.monotonic() + timeout
    while set(msg_ids) - set(found):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no execute_reply for {sorted(set(msg_ids) - set(found))} within {timeout:g} s")
        try:
            msg = kc.shell_channel.get_msg(timeout=left)
        except queue.Empty:
            continue
        parent = msg["parent_header"].get("msg_id")
        if parent in msg_ids and msg["msg_type"] == "execute_reply":
            found.setdefault(parent, msg)
    return found


def no_reply_within(channel: t.Any, msg_id: str, seconds: float) -> bool:
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


def heartbeat_answers(kc: t.Any, timeout: float = REPLY_TIMEOUT) -> bool:
    """One ping on the kernel's heartbeat socket echoed within `timeout`.

    The heartbeat is a C ZeroMQ device that answers without the GIL; the client's
    HBChannel thread judges it by a 1 s beat that a loaded machine's client misses.
    """
    import zmq

    socket = zmq.Context.instance().socket(zmq.REQ)
    socket.linger = 0
    try:
        socket.connect(kc._make_url("hb"))
        socket.send(b"ping")
        return bool(socket.poll(int(timeout * 1000))) and socket.recv() == b"ping"
    finally:
        socket.close()


def send_interrupt(kc: t.Any, target: str | None) -> str:
    """Send an interrupt_request (targeted if `target`) without waiting for its reply; its msg_id."""
    msg = kc.session.msg("interrupt_request", {"target": target} if target else {})
    kc.control_channel.send(msg)
    return str(msg["header"]["msg_id"])


def assert_interrupted(reply: dict, msg_id: str | None = None, *, reason: str = "request") -> None:
    """The execute_reply of a cell stopped by KeyboardInterrupt;
    with `msg_id`, its metadata names it, interrupted for `reason`."""
    content = reply["content"]
    assert content["status"] == "error", content
    assert content["ename"] == "KeyboardInterrupt", content
    if msg_id is not None:
        meta = reply["metadata"]["cancelkernel"]
        assert meta["msg_id"] == msg_id, meta
        assert meta["interrupted"] is True, meta
        assert meta["reason"] == reason, meta


# -- runaways, started and seen running -------------------------------------------------------


def start_runaway(
    kc: t.Any, setup: str, runaway: str, *, innermost: str | None = None, allow_stdin: bool = False
) -> tuple[str, str, int]:
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


def start_gil_holder(kc: t.Any, setup: str, call: str) -> str:
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


def start_cell(kc: t.Any, code: str) -> str:
    """Start a cell; return its msg_id once the kernel shows it running its code (a one-line cell: at that line).

    A native loop that checks the flag answers status requests even while it
    holds the GIL (the kernel's GIL yield).  Its line is one attribute lookup
    and one call: at that line means inside the loop.  A cell of several
    lines here is one loop from its first line on.
    """
    msg_id = send_execute(kc, code)
    wait_running(kc, msg_id, at=None if "\n" in code else code)
    return msg_id


# -- processes (Linux /proc) ------------------------------------------------------------------


def kernel_pid(km: t.Any) -> int:
    """The process of a kernel jupyter_client started."""
    pid = km.provisioner.pid
    assert isinstance(pid, int), "the kernel's pid is not known"
    return pid


def _stat(pid: int) -> tuple[str, str, int] | None:
    """(command, state, parent pid) of process `pid`; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2 :].split()
        return (
            stat[stat.index(b"(") + 1 : stat.rindex(b")")].decode(errors="replace"),
            fields[0].decode(),
            int(fields[1]),
        )
    except (OSError, ValueError, IndexError):
        return None


def parent_of(pid: int) -> int | None:
    found = _stat(pid)
    return found[2] if found is not None else None


def _children() -> dict[int, set[int]]:
    """Every process now, by its parent."""
    children: dict[int, set[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent = parent_of(int(entry))
            if parent is not None:
                children.setdefault(parent, set()).add(int(entry))
    return children


def children_of(pid: int) -> set[int]:
    """The child processes of `pid` now (zombies included: a child nobody reaped is left behind too)."""
    return _children().get(pid, set())


def descendants(pid: int) -> set[int]:
    """Every process below `pid` now: the kernels a server started, their spares included."""
    children = _children()
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), set()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def child_processes(pid: int, name: str) -> list[int]:
    """The live (non-zombie) child processes of `pid` whose command is `name`."""
    return sorted(
        child
        for child in children_of(pid)
        if (found := _stat(child)) is not None and found[0] == name and found[1] != "Z"
    )


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


# -- the agent client -------------------------------------------------------------------------


def kernel_args(name: str) -> list[str]:
    """The command-line arguments of a kernel an agent test starts: our kernels get the agent's grace."""
    return [f"--CancelKernel.interrupt_grace={AGENT_GRACE}"] if name.startswith("cancelkernel") else []


@contextlib.contextmanager
def agent(name: str = "cancelkernel", *, runtime_dir: t.Any = None, **kwargs: t.Any) -> Iterator[AgentKernel]:
    """A started AgentKernel, closed even on failure; asserts its kernel processes are gone afterwards.

    `runtime_dir`: the kernel's JUPYTER_RUNTIME_DIR, so its checkpoints go there (the test's tmp_path).
    """
    kwargs.setdefault("extra_arguments", kernel_args(name))
    if not name.startswith("cancelkernel"):
        kwargs.setdefault("interrupt_grace", AGENT_GRACE)
    if runtime_dir is not None:
        kwargs["env"] = {**(kwargs.get("env") or {}), "JUPYTER_RUNTIME_DIR": str(runtime_dir)}
    ak = AgentKernel(name, **kwargs)
    pids: list[int | None] = []
    try:
        ak.start()
        yield ak
    finally:
        pids.extend([ak.pid, spare_pid(ak)])
        ak.close()
    assert all(pid is None or process_exited(pid) for pid in pids), f"kernel process {pids} left behind"
