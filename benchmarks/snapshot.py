#!/usr/bin/env python
"""Snapshots by fork (issue 25), measured before trusted: fork cost, copy-on-write, promotion, beside today's path.

The idea: before a risky cell the kernel forks; the child holds the
copy-on-write image of the process from before the cell until it is dropped
(the cell ended well) or promoted (the kernel wedged or died): it then builds a
fresh kernel application around the existing shell and namespace, on new ports
and a new connection file.  The prototype is benchmarks/snapshot_child.py (not
in the package).  Parts (`--parts`):

- bare:      fork time (the parent's pause), the child's start and its drop, against the heap
             (numpy arrays or many small Python objects; 100 MB, 1 GB, 10 GB): one fresh Python
             process per heap; then copy-on-write: a rewrite of half the arrays (or objects), a loop
             that only reads every object and a full gc.collect() (also after gc.freeze()), each alone
             and with a child holding the heap (time, and the child's private pages afterwards: the
             memory the copies added).
- kernel:    the same in a real cancelkernel (jupyter_client): the snapshot taken in the shell's
             dispatch before a cell (execute_request metadata), the client's round trip of that cell
             beside a plain one, and a checkpoint save of the same heap (what a risky cell costs today).
- promotion: a snapshot, then a cell that wedges (`sum(range(10**12))`, holding the GIL); from the
             decision (signal the child, SIGKILL the wedged kernel) to the new kernel answering
             kernel_info and a read of the namespace from before the cell, two ways: the child rebuilds
             after the decision (the issue's design), or it built its kernel right after the fork and
             the client connected ahead ("prepared"); interleaved run by run with
             today's path: the agent client's warm spare plus checkpoint restore (benchmarks/recovery.py's
             wedged case, a numpy state).  The promoted kernel is the next run's kernel (a chain).
             Then the promoted kernel's threads and an interrupt of a GIL-holding regex, beside a fresh one.
- locks:     N snapshots promoted while other threads are busy (prints, logging to the kernel's
             stderr, our module-level lock, allocations, a control-channel flood, cells on a subshell):
             each promoted kernel must answer kernel_info and read the namespace; a promotion still
             running after 30 s dumps its stacks (faulthandler) and counts as a deadlock.

    python benchmarks/snapshot.py --json benchmarks/results/snapshot.json
    python benchmarks/snapshot.py --parts bare --sizes 100,1024 --runs 5
    python benchmarks/snapshot.py --parts promotion --promotion-sizes 1024 --runs 7
    python benchmarks/snapshot.py --parts locks --lock-forks 200

A 10 GB heap is measured only if /proc/meminfo says >= 18 GB available at that moment, else 4 GB if
>= 10 GB, else skipped (said in the output); a copy-on-write step only if its copies fit with 2 GB to
spare.  Needs numpy (pip install numpy; not a dependency of cancelkernel).  Every kernel and every
child is killed at the end, also on errors, and their files (a runtime directory of the run's own) removed.
The driver makes itself a child subreaper: a promoted kernel whose old kernel was killed is re-parented
here, not to init (where ipykernel's parent poller would end it within a second: docs/checkpoints.md).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import typing as t

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import snapshot_child as sc  # noqa: E402 - the prototype and the measured process's helpers, beside this file
import zmq  # noqa: E402
from _common import environment, fmt_seconds, markdown_table, percentile, write_json  # noqa: E402
from jupyter_client.blocking.client import BlockingKernelClient  # noqa: E402

from cancelkernel.testing import (  # noqa: E402
    Kernel,
    control_request,
    create_subshell,
    kernels_cleaned_up,
    private_kernelspecs,
    wait_for,
    wait_reply,
)

GB = 2**30
MB = 2**20
MARGIN = 2 * GB  # what a copy-on-write step leaves free, at least
BIG_NEEDS = 18 * GB  # available memory a 10 GB heap needs ...
FALLBACK_NEEDS = 10 * GB  # ... else a 4 GB heap
GOAL_PROMOTION = 0.050  # s, decision -> kernel_info answered, 1 GB
REPLY = 120.0  # s; only stops a broken setup from hanging
# The decision -> answer of a promotion that hangs: its faulthandler dump (snapshot_child.PROMOTION_HANG) comes first.
PROMOTION_TIMEOUT = sc.PROMOTION_HANG + 10.0
# The state of the promotion runs: recovery.py's numpy state, and a marker the risky cell changes.
STATE = "import numpy\nblob = numpy.arange({n}, dtype=numpy.uint8)\nrows = list(range(1000))"
PREFIX_SUM = sum(i % 256 for i in range(4096))  # of blob[:4096] before the risky cell writes it
RISKY = "marker = -1\nblob[:4096] = 7\n{flag}sum(range(10**12))"
INSTALL = (
    "import sys\nsys.path.insert(0, {here!r})\nimport snapshot_child as _sc\nsys.path.pop(0)\n"
    "_snaps = _sc.install(get_ipython().kernel)"
)

_children: set[int] = set()  # every process group we must kill at the end (promoted kernels, snapshots)


# -- machine -------------------------------------------------------------------------------


def available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def effective_size(size_mb: int, notes: list[str]) -> int | None:
    """The heap to measure for `size_mb`: a 10 GB one only with the memory for it, else 4 GB, else none."""
    if size_mb < 4096:
        return size_mb
    free = available()
    if free >= BIG_NEEDS:
        return size_mb
    if free >= FALLBACK_NEEDS:
        notes.append(f"{size_mb} MB heap skipped: {free / GB:.1f} GB available (< 18 GB); measured 4 GB instead")
        return 4096
    notes.append(f"{size_mb} MB heap skipped: {free / GB:.1f} GB available (< 10 GB, not even 4 GB)")
    return None


def become_subreaper() -> None:
    """Orphans of our kernels (a snapshot whose kernel was killed) come to us: reaped, and killed at the end."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


_exits: dict[int, int] = {}  # pid -> wait status, of every process reaped here


def reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while True:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid <= 0:
                return
            _exits[pid] = status


def how_it_ended(pid: int) -> str:
    reap()
    status = _exits.get(pid)
    if status is None:
        return "not reaped here"
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exited with status {os.WEXITSTATUS(status)}"


def wait_file(path: str, timeout: float = REPLY) -> None:
    deadline = time.perf_counter() + timeout
    while not os.path.exists(path):
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout:g} s")
        time.sleep(0.005)


def kill_children() -> None:
    for pid in list(_children):
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(OSError):
                kill(pid, signal.SIGKILL)
        _children.discard(pid)
    time.sleep(0.2)
    reap()


# -- bare processes --------------------------------------------------------------------------


def bare_part(shapes: list[str], sizes: list[int], runs: int, cow_runs: int, notes: list[str]) -> list[dict]:
    rows = []
    for shape in shapes:
        for wanted in sizes:
            size = effective_size(wanted, notes)
            if size is None:
                continue
            room = max(0, available() - size * MB - MARGIN)
            few = cow_runs if size <= 1024 else 1
            print(f"bare {shape} {size} MB: {uptime()}", file=sys.stderr)
            command = [sys.executable, os.path.join(HERE, "snapshot_child.py"), shape, str(size), str(runs)]
            done = subprocess.run([*command, str(few), str(room)], capture_output=True, text=True, check=False)
            if done.returncode != 0:
                notes.append(f"bare {shape} {size} MB failed: {done.stderr.strip()[-500:]}")
                continue
            rows.append({"shape": shape, "size_mb": size, "load": os.getloadavg(), **json.loads(done.stdout)})
    return rows


# -- kernels ---------------------------------------------------------------------------------


def request(
    kc: BlockingKernelClient, code: str, *, metadata: dict | None = None, expressions: dict | None = None
) -> str:
    content = {"code": code, "silent": False, "store_history": True, "user_expressions": expressions or {}}
    content.update(allow_stdin=False, stop_on_error=False)
    msg = kc.session.msg("execute_request", content, metadata=metadata or {})
    kc.shell_channel.send(msg)
    return str(msg["header"]["msg_id"])


def run(kc: BlockingKernelClient, code: str, *, timeout: float = REPLY, **kwargs: t.Any) -> dict:
    """A cell that must succeed; its reply content (user expressions evaluated to Python values)."""
    reply = wait_reply(kc, request(kc, code, **kwargs), timeout)["content"]
    if reply["status"] != "ok":
        raise RuntimeError(f"cell failed: {reply.get('ename')}: {reply.get('evalue')}\n{code}")
    reply["values"] = {k: _value(v) for k, v in (reply.get("user_expressions") or {}).items()}
    return t.cast(dict, reply)


def _value(expression: dict) -> t.Any:
    if expression.get("status") != "ok":
        raise RuntimeError(f"user expression failed: {expression.get('ename')}: {expression.get('evalue')}")
    import ast

    return ast.literal_eval(expression["data"]["text/plain"])


def timed(kc: BlockingKernelClient, code: str, **kwargs: t.Any) -> tuple[float, dict]:
    started = time.perf_counter()
    reply = run(kc, code, **kwargs)
    return time.perf_counter() - started, reply


def snapshot_spec(directory: str, label: str) -> dict:
    return {
        "connection_file": os.path.join(directory, f"promoted-{label}.json"),
        "stages_file": os.path.join(directory, f"stages-{label}.json"),
    }


def take(kc: BlockingKernelClient, spec: dict, code: str = "pass") -> tuple[float, dict]:
    """A cell run after a snapshot was taken before it; (round trip, the parent's stats of the snapshot)."""
    elapsed, reply = timed(kc, code, metadata={"snapshot": spec}, expressions={"s": "_snaps.stats[-1]"})
    stat = reply["values"]["s"]
    if stat.get("taken"):
        _children.add(stat["pid"])
    return elapsed, stat


def drop(kc: BlockingKernelClient) -> dict:
    stat = run(kc, "pass", expressions={"d": "_snaps.drop()"})["values"]["d"]
    _children.discard(stat.get("pid"))
    return t.cast(dict, stat)


def start_kernel() -> Kernel:
    kernel = Kernel("cancelkernel", extra_arguments=["--CancelKernel.exec_thread=main"]).start()
    assert kernel.kc is not None
    run(kernel.kc, INSTALL.format(here=HERE))
    return kernel


def kernel_part(shapes: list[str], sizes: list[int], runs: int, cow_runs: int, notes: list[str]) -> list[dict]:
    rows = []
    for shape in shapes:
        for wanted in sizes:
            size = effective_size(wanted, notes)
            if size is None:
                continue
            print(f"kernel {shape} {size} MB: {uptime()}", file=sys.stderr)
            kernel = start_kernel()
            try:
                rows.append(kernel_heap(kernel, shape, size, runs, cow_runs if size <= 1024 else 1))
            finally:
                kernel.shutdown()
                kill_children()
    return rows


def kernel_heap(kernel: Kernel, shape: str, size: int, runs: int, cow_runs: int) -> dict:
    kc = kernel.kc
    assert kc is not None
    room = available() - size * MB - MARGIN
    built = run(kc, f"_heap = _sc.build_heap({shape!r}, {size})", expressions={"a": "_heap['alloc']"}, timeout=3600)
    row: dict[str, t.Any] = {"shape": shape, "size_mb": size, "alloc": built["values"]["a"], "load": os.getloadavg()}
    directory = tempfile.mkdtemp(prefix="ck-snap-", dir=os.environ.get("JUPYTER_RUNTIME_DIR"))
    samples = []
    for i in range(runs):  # interleaved: a plain cell, a cell behind a snapshot, the drop
        plain, _ = timed(kc, "pass")
        behind, stat = take(kc, snapshot_spec(directory, f"k{i}"))
        samples.append({"plain": plain, "behind": behind, **stat, "drop": drop(kc).get("drop")})
    row["samples"] = samples
    row["cow"] = kernel_cow(kc, shape, directory, cow_runs, room >= size * MB // (2 if shape == "numpy" else 1))
    if size <= 1024:
        row["saves"] = [checkpoint_save(kc) for _ in range(min(runs, 3))]
    return row


def kernel_cow(kc: BlockingKernelClient, shape: str, directory: str, runs: int, fits: bool) -> dict:
    """Each work of the heap's shape by a cell, alone and behind a snapshot; what the kernel's memory view saw."""
    if not fits:
        return {
            name: {"skipped": "the copies would not fit in the available memory with 2 GB to spare"}
            for name in sc.WORKS[shape]
        }
    out: dict[str, list[dict]] = {name: [] for name in sc.WORKS[shape]}
    resident = "get_ipython().kernel.runtime.memory.status()['resident']"
    for i in range(runs):
        for name in sc.WORKS[shape]:
            code = f"_t = _sc.{name}(_heap)"
            alone = run(kc, code, expressions={"t": "_t"})["values"]["t"]
            _, stat = take(kc, snapshot_spec(directory, f"c{i}-{name}"))
            before = sc.private_bytes(stat["pid"])
            seen_before = run(kc, "pass", expressions={"r": resident})["values"]["r"]
            behind = run(kc, code, expressions={"t": "_t", "r": resident})["values"]
            extra = sc.private_bytes(stat["pid"]) - before
            sample = {"alone": alone, "behind": behind["t"], "extra": extra, "resident_grew": behind["r"] - seen_before}
            out[name].append(sample)
            drop(kc)
    return out


def checkpoint_save(kc: BlockingKernelClient) -> float:
    """Today's price of a risky cell: a checkpoint of the namespace saved before it (client's wall time)."""
    from cancelkernel.testing import checkpoint_request

    started = time.perf_counter()
    reply = checkpoint_request(kc, "save", "before", timeout=REPLY)
    if reply["status"] != "ok":
        raise RuntimeError(f"checkpoint save failed: {reply.get('evalue')}")
    return time.perf_counter() - started


# -- promotion ---------------------------------------------------------------------------------


class Chain:
    """The kernel of the next promotion run: launched by jupyter_client first, then each promoted child."""

    def __init__(self, size_mb: int):
        self.size_mb = size_mb
        self.launched: Kernel | None = None
        self.kc: BlockingKernelClient | None = None
        self.pid = 0

    def ready(self) -> BlockingKernelClient:
        if self.kc is None:
            self.launched = start_kernel()
            self.kc = self.launched.kc
            assert self.kc is not None
            run(self.kc, STATE.format(n=self.size_mb * MB), timeout=600)
            self.pid = self.launched.kernel_info["cancelkernel"]["pid"]
        return self.kc

    def promoted(self, kc: BlockingKernelClient, pid: int) -> None:
        with contextlib.suppress(Exception):
            assert self.kc is not None
            self.kc.stop_channels()
        self.kc, self.pid = kc, pid
        run(kc, "_snaps = _sc.install(get_ipython().kernel)")  # the prototype, on the new kernel object

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.kc is not None:
                self.kc.stop_channels()
        if self.launched is not None:
            self.launched.shutdown()
        kill_children()


def promote(chain: Chain, directory: str, label: str, value: int, *, prepared: bool) -> dict:
    """Snapshot, wedge, decide, promote: the times from the decision, and whether the state came back.

    `prepared`: the child built its kernel right after the fork (bound, not started) and the client connected
    to it before the decision; else the child rebuilds after the decision and the client connects then.
    """
    kc = chain.ready()
    run(kc, f"marker = {value}")
    spec = snapshot_spec(directory, label) | {"prepare": prepared}
    _, stat = take(kc, spec)
    child = stat["pid"]
    sample: dict[str, t.Any] = {"mode": "prepared" if prepared else "rebuild", "pause": stat["pause"], "pid": child}
    sample["fork"] = stat["fork"]
    client = connect(spec, time.perf_counter(), {}) if prepared else None
    # The cell says it started through a file: its execute_input may never leave (the IOPub thread waits for the
    # GIL that sum() holds), so waiting for it hangs now and then, on any kernel.
    flag = spec["stages_file"] + ".started"
    request(kc, RISKY.format(flag=f"open({flag!r}, 'w').close()\n"))
    wait_file(flag)
    time.sleep(0.3)  # in sum(), holding the GIL
    decided = time.perf_counter()
    os.kill(child, sc.PROMOTE)
    os.kill(chain.pid, signal.SIGKILL)
    client = client or connect(spec, decided, sample)
    info = wait_reply(client, client.kernel_info(), PROMOTION_TIMEOUT)
    sample["kernel_info"] = info["_received"] - decided
    read = run(client, "pass", expressions={"m": "marker", "p": "int(blob[:4096].sum())", "n": "len(blob) // 2**20"})
    sample["read"] = time.perf_counter() - decided
    values = read["values"]
    sample["state_back"] = values == {"m": value, "p": PREFIX_SUM, "n": chain.size_mb}
    sample["info_pid"] = info["content"].get("cancelkernel", {}).get("pid")
    sample.update(child_stages(spec, decided))
    chain.promoted(client, child)
    reap()
    return sample


def _parent(msg: dict) -> str | None:
    return t.cast("str | None", msg["parent_header"].get("msg_id"))


def connect(spec: dict, decided: float, sample: dict) -> BlockingKernelClient:
    """A client on the promoted kernel's connection file, as soon as the file is complete."""
    deadline = decided + PROMOTION_TIMEOUT
    path = spec["connection_file"]
    while True:
        with contextlib.suppress(OSError, ValueError):
            with open(path) as f:
                info = json.load(f)
            if info.get("shell_port") and info.get("key"):
                break
        if os.path.exists(spec["stages_file"] + ".error"):
            with open(spec["stages_file"] + ".error") as f:
                raise RuntimeError(f"the promotion failed:\n{f.read()}")
        if time.perf_counter() > deadline:
            raise TimeoutError(f"no connection file within {PROMOTION_TIMEOUT:g} s: {hang_report(spec)}")
        time.sleep(0.001)
    sample["connection_file"] = time.perf_counter() - decided
    client = BlockingKernelClient(connection_file=path, context=zmq.Context.instance())  # no context per client
    client.load_connection_file()
    client.start_channels(hb=False)
    sample["client_ready"] = time.perf_counter() - decided
    return client


def hang_report(spec: dict) -> str:
    with contextlib.suppress(OSError), open(spec["stages_file"] + ".hang") as f:
        return f.read()[-3000:] or "(no stacks dumped yet)"
    return "(no stacks file)"


def child_stages(spec: dict, decided: float) -> dict:
    """The child's stamps (seconds from the decision; negative: before it) and its CPU seconds."""
    with open(spec["stages_file"]) as f:
        stages = json.load(f)
    return {
        "stages": {k: round(v - decided, 5) for k, v in stages["stamps"].items()},
        "descriptors_replaced": stages.get("descriptors_replaced"),
        "child_cpu": stages.get("cpu"),
        "rebuild_cpu": stages.get("rebuild_cpu"),
    }


def spare_sample(ak: t.Any, size_mb: int, value: int) -> dict:
    """Today's path on the same state: checkpoint before the cell, the cell wedges, the policy restarts on the spare."""
    from cancelkernel.testing import spare_pid

    setup = ak.run(STATE.format(n=size_mb * MB) + f"\nmarker = {value}")
    assert setup.status == "ok", setup.summary()
    started = time.perf_counter()
    ak.save_checkpoint()
    save = time.perf_counter() - started
    spare_pid(ak, wait=60.0)
    time.sleep(0.3)  # the spare's prepare request done, as an agent's think time would allow
    result = ak.run(RISKY.format(flag=""), wall_budget=1.0, cell_id=f"wedged-{time.monotonic_ns()}")
    check = ak.run("print(marker, int(blob[:4096].sum()), len(blob) // 2**20)")
    timings = result.timings or {}
    return {
        "save": save,
        "status": result.status,
        "state": result.state,
        "restored": timings.get("restored"),
        "timings": timings,
        "state_back": check.text.split() == [str(value), str(PREFIX_SUM), str(size_mb)],
    }


def promotion_part(sizes: list[int], runs: int, notes: list[str]) -> dict:
    from cancelkernel.agent import AgentKernel

    out: dict[str, t.Any] = {"fork": [], "spare": [], "checks": {}}
    directory = tempfile.mkdtemp(prefix="ck-promote-", dir=os.environ.get("JUPYTER_RUNTIME_DIR"))
    for size in sizes:
        chain = Chain(size)
        ak = AgentKernel("cancelkernel", spare=True).start()
        try:
            for i in range(runs):  # interleaved: the fork paths, then today's
                print(f"promotion {size} MB run {i}: {uptime()}", file=sys.stderr)
                for prepared in (False, True):
                    sample = promote(
                        chain, directory, f"p{size}-{i}-{int(prepared)}", 2 * i + prepared, prepared=prepared
                    )
                    out["fork"].append({"size_mb": size, "run": i, "load": os.getloadavg(), **sample})
                spare = spare_sample(ak, size, i + 1)
                out["spare"].append({"size_mb": size, "run": i, "load": os.getloadavg(), **spare})
            if size == sizes[-1]:
                out["checks"] = promoted_checks(chain)
        except Exception as exc:  # noqa: BLE001 - said in the output; the other parts still run
            notes.append(f"promotion {size} MB failed: {type(exc).__name__}: {exc}\n{stacks_of(chain.pid)}")
        finally:
            ak.close()
            chain.close()
    return out


def stacks_of(pid: int) -> str:
    """Whether `pid` lives, and its threads' stacks (the prototype's faulthandler signal)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        if state == "Z":
            return f"process {pid} is gone: {how_it_ended(pid)}"
        os.kill(pid, sc.DUMP)
    except OSError as exc:
        return f"process {pid}: {exc}; {how_it_ended(pid)}"
    time.sleep(2.0)
    with contextlib.suppress(OSError), open(sc.stacks_file(pid)) as f:
        return f"process {pid} state {state}, its stacks:\n{f.read()[-8000:]}"
    return f"process {pid} state {state}, no stacks file"


REGEX = "import re\nre.match(r'(a+)+$', 'a' * 40 + 'b')"


def promoted_checks(chain: Chain) -> dict:
    """The promoted kernel beside a fresh one: its native threads, and an interrupt of a GIL-holding regex."""
    assert chain.kc is not None
    fresh = start_kernel()
    try:
        assert fresh.kc is not None
        fresh_pid = fresh.kernel_info["cancelkernel"]["pid"]
        threads = {
            "fresh": len(os.listdir(f"/proc/{fresh_pid}/task")),
            "promoted": len(os.listdir(f"/proc/{chain.pid}/task")),
        }
        return {
            "threads": threads,
            "regex_interrupt": {"fresh": regex_interrupt(fresh.kc), "promoted": regex_interrupt(chain.kc)},
        }
    finally:
        fresh.shutdown()


def regex_interrupt(kc: BlockingKernelClient, cap: float = 5.0) -> float | None:
    """Seconds from an interrupt_request to the reply of a cell stuck in one regex call; None: not within `cap`."""
    msg_id = request(kc, REGEX)
    wait_for(kc.iopub_channel, lambda m: m["msg_type"] == "execute_input" and _parent(m) == msg_id, REPLY)
    time.sleep(0.3)
    sent = time.perf_counter()
    with contextlib.suppress(TimeoutError):
        control_request(kc, "interrupt_request", {}, timeout=cap)
    try:
        reply = wait_reply(kc, msg_id, max(0.1, cap - (time.perf_counter() - sent)))
    except TimeoutError:
        return None
    return t.cast(float, reply["_received"] - sent)


# -- locks: promotions while other threads are busy -----------------------------------------------

BUSY = """
import logging, sys, threading, time
from cancelkernel.runtime import stacks as _stacks
_busy_stop = threading.Event()
_busy_log = logging.getLogger("busy")
_busy_log.addHandler(logging.StreamHandler(sys.__stderr__))
_busy_log.propagate = False
def _busy_print():
    while not _busy_stop.wait(0.005):
        print("x", end="")
def _busy_logging():
    while not _busy_stop.wait(0.005):
        _busy_log.warning("busy %s", time.time())
def _busy_lock():
    while not _busy_stop.is_set():
        with _stacks.collector_paused():
            pass
def _busy_alloc():
    while not _busy_stop.wait(0.0002):
        _junk = [bytearray(4096) for _ in range(64)]
for _f in (_busy_print, _busy_logging, _busy_lock, _busy_alloc):
    threading.Thread(target=_f, daemon=True, name=_f.__name__).start()
"""


def locks_part(forks: int, notes: list[str]) -> dict:
    kernel = start_kernel()
    stop = threading.Event()
    extra: list[BlockingKernelClient] = []
    try:
        kc = kernel.kc
        assert kc is not None
        assert kernel.km is not None
        run(kc, "import numpy\nblob = numpy.arange(50 * 2**20, dtype=numpy.uint8)\nmarker = 7")
        run(kc, BUSY)
        for target in (control_flood, subshell_cells):
            # A client of its own, with a Session of its own: km.client() shares the manager's (its message
            # counter is not thread-safe: two threads made the same msg_id, and a request was lost).
            client = BlockingKernelClient(connection_file=kernel.km.connection_file)
            client.load_connection_file()
            client.start_channels()
            extra.append(client)
            threading.Thread(target=target, args=(client, stop), daemon=True).start()
        return lock_storm(kc, forks, notes)
    finally:
        stop.set()
        for client in extra:
            with contextlib.suppress(Exception):
                client.stop_channels()
        kernel.shutdown()
        kill_children()


BUSY_COUNTS = {"control": 0, "subshell": 0}  # requests answered meanwhile: how busy the other threads were


def control_flood(kc: BlockingKernelClient, stop: threading.Event) -> None:
    while not stop.is_set():
        with contextlib.suppress(Exception):
            control_request(kc, "cancel_status_request", {}, timeout=5.0)
            BUSY_COUNTS["control"] += 1


def subshell_cells(kc: BlockingKernelClient, stop: threading.Event) -> None:
    with contextlib.suppress(Exception):
        subshell = create_subshell(kc)
        while not stop.is_set():
            msg = kc.session.msg("execute_request", {"code": "_sub = 1", "silent": True, "user_expressions": {}})
            msg["header"]["subshell_id"] = subshell
            kc.shell_channel.send(msg)
            if wait_reply(kc, str(msg["header"]["msg_id"]), 10.0)["content"]["status"] == "ok":
                BUSY_COUNTS["subshell"] += 1


def lock_storm(kc: BlockingKernelClient, forks: int, notes: list[str]) -> dict:
    directory = tempfile.mkdtemp(prefix="ck-locks-", dir=os.environ.get("JUPYTER_RUNTIME_DIR"))
    out: dict[str, t.Any] = {"taken": 0, "refused": 0, "promoted": 0, "deadlocks": [], "failures": [], "times": []}
    attempts = 0
    while out["taken"] < forks and attempts < 3 * forks:
        attempts += 1
        spec = snapshot_spec(directory, f"l{attempts}")
        _, stat = take(kc, spec)
        if not stat.get("taken"):
            out["refused"] += 1
            continue
        out["taken"] += 1
        outcome = promote_alive(stat["pid"], spec)
        if isinstance(outcome, float):
            out["promoted"] += 1
            out["times"].append(outcome)
        elif outcome.startswith("deadlock"):
            out["deadlocks"].append(outcome)
        else:
            out["failures"].append(outcome)
        drop(kc)
        if attempts % 20 == 0:
            print(f"locks: {out['taken']} taken, {out['promoted']} promoted: {uptime()}", file=sys.stderr)
    out["busy"] = dict(BUSY_COUNTS)
    if out["taken"] < forks:
        notes.append(f"locks: only {out['taken']} of {forks} snapshots taken in {attempts} attempts")
    return out


def promote_alive(pid: int, spec: dict) -> float | str:
    """Promote a snapshot while its kernel goes on (busy); the time to a read of the namespace, or what went wrong."""
    decided = time.perf_counter()
    os.kill(pid, sc.PROMOTE)
    client = None
    try:
        client = connect(spec, decided, {})
        reply = run(client, "print('promoted')", expressions={"m": "marker"}, timeout=PROMOTION_TIMEOUT)
        if reply["values"]["m"] != 7:
            return f"wrong state: marker = {reply['values']['m']!r}"
        return time.perf_counter() - decided
    except TimeoutError as exc:
        return f"deadlock: {exc}\n{hang_report(spec)}"
    except Exception as exc:  # noqa: BLE001 - counted and shown
        return f"{type(exc).__name__}: {exc}"
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.stop_channels()
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)  # the promoted kernel's own group (setsid); the kernel reaps it (drop)


# -- report --------------------------------------------------------------------------------------


def p50(values: t.Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return percentile(vals, 50) if vals else None


def p90(values: t.Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return percentile(vals, 90) if vals else None


def size_label(size_mb: int) -> str:
    return f"{size_mb / 1024:g} GB" if size_mb >= 1024 else f"{size_mb} MB"


def gigabytes(n: float | None) -> str:
    return "—" if n is None else (f"{n / GB:.2f} GB" if n >= GB else f"{n / MB:.0f} MB")


def bare_table(rows: list[dict]) -> str:
    out = []
    for r in rows:
        forks, after = r["forks"], r["forks_after_cow"]
        out.append(
            [
                r["shape"],
                size_label(r["size_mb"]),
                gigabytes(r["huge"]),
                fmt_seconds(p50(f["fork"] for f in forks)),
                fmt_seconds(p90(f["fork"] for f in forks)),
                fmt_seconds(p50(f["fork"] for f in after)),
                fmt_seconds(p50(f["ready"] for f in forks)),
                fmt_seconds(p50(f["drop"] for f in forks)),
                f"{r['load'][0]:.1f}",
            ]
        )
    headers = [
        "heap",
        "size",
        "in huge pages",
        "fork p50",
        "fork p90",
        "fork p50 after CoW",
        "child runs",
        "drop",
        "load",
    ]
    return markdown_table(headers, out)


def cow_table(rows: list[dict], where: str) -> str:
    out = []
    for r in rows:
        for name, samples in r["cow"].items():
            label = [where, r["shape"], size_label(r["size_mb"]), name.replace("_", " ")]
            if isinstance(samples, dict):
                out.append([*label, samples.get("skipped", "skipped"), "", "", "", ""])
                continue
            alone, behind = p50(s["alone"] for s in samples), p50(s.get("with_child", s.get("behind")) for s in samples)
            grew = p50(s["resident_grew"] for s in samples) if "resident_grew" in samples[0] else None
            out.append(
                [
                    *label,
                    fmt_seconds(alone),
                    fmt_seconds(behind),
                    f"{behind / alone:.1f}x" if alone and behind else "—",
                    gigabytes(p50(s["extra"] for s in samples)),
                    gigabytes(grew) if grew is not None else "—",
                ]
            )
    headers = [
        "where",
        "heap",
        "size",
        "work",
        "alone",
        "with a snapshot",
        "ratio",
        "copied (child's private)",
        "kernel RSS grew",
    ]
    return markdown_table(headers, out)


def kernel_table(rows: list[dict]) -> str:
    out = []
    for r in rows:
        s = r["samples"]
        plain, behind = p50(x["plain"] for x in s), p50(x["behind"] for x in s)
        out.append(
            [
                r["shape"],
                size_label(r["size_mb"]),
                fmt_seconds(p50(x.get("fork") for x in s)),
                fmt_seconds(p90(x.get("fork") for x in s)),
                fmt_seconds(p50(x.get("pause") for x in s)),
                fmt_seconds(p50(x.get("parked") for x in s)),
                fmt_seconds(plain),
                fmt_seconds(behind),
                fmt_seconds(p50(x.get("drop") for x in s)),
                fmt_seconds(p50(r.get("saves") or [None])),
                f"{r['load'][0]:.1f}",
            ]
        )
    headers = [
        "heap",
        "size",
        "fork p50",
        "fork p90",
        "pause p50",
        "locks taken",
        "plain cell",
        "cell behind a snapshot",
    ]
    return markdown_table([*headers, "drop", "checkpoint save (today)", "load"], out)


MODES = {"rebuild": "fork, rebuilt after the decision", "prepared": "fork, kernel built ahead"}


def promotion_table(result: dict) -> str:
    out = []
    for size in sorted({s["size_mb"] for s in result["fork"]}):
        for mode, label in MODES.items():
            fork = [s for s in result["fork"] if s["size_mb"] == size and s["mode"] == mode]
            out.append(
                [
                    size_label(size),
                    label,
                    fmt_seconds(p50(s.get("connection_file") for s in fork)),
                    fmt_seconds(p50(s["kernel_info"] for s in fork)),
                    fmt_seconds(p90(s["kernel_info"] for s in fork)),
                    fmt_seconds(p50(s["read"] for s in fork)),
                    fmt_seconds(p50(s["child_cpu"] for s in fork)),
                    fmt_seconds(p50(s["pause"] for s in fork)),
                    f"{sum(s['state_back'] for s in fork)}/{len(fork)}",
                ]
            )
        spare = [s for s in result["spare"] if s["size_mb"] == size]
        out.append(
            [
                size_label(size),
                "warm spare + checkpoint (today)",
                fmt_seconds(p50(s["timings"].get("new_kernel_ready") for s in spare)),
                "",
                "",
                fmt_seconds(p50(s["restored"] for s in spare)),
                "",
                fmt_seconds(p50(s["save"] for s in spare)),
                f"{sum(s['state_back'] for s in spare)}/{len(spare)}",
            ]
        )
    headers = ["state", "path", "file seen / spare ready", "kernel_info p50", "p90", "state read p50"]
    return markdown_table([*headers, "child CPU to its loop", "cost before the cell", "state back"], out)


STAGES = ["rebuilding", "signalled", "unshared", "app.init_sockets", "app.init_kernel", "starting", "loop_running"]


def stages_table(result: dict) -> str:
    out = []
    for size in sorted({s["size_mb"] for s in result["fork"]}):
        for mode, label in MODES.items():
            fork = [s for s in result["fork"] if s["size_mb"] == size and s["mode"] == mode]
            stamps = [fmt_seconds(p50(s["stages"].get(k) for s in fork)) for k in STAGES]
            ends = [fmt_seconds(p50(s.get(k) for s in fork)) for k in ("client_ready", "kernel_info", "read")]
            out.append([size_label(size), label, *stamps, *ends])
    headers = ["state", "path", *STAGES, "client connected", "kernel_info", "read"]
    return markdown_table(headers, out)


def verdict(result: dict) -> list[str]:
    lines = []
    for mode, label in MODES.items():
        fork = [s for s in result.get("promotion", {}).get("fork", []) if s["size_mb"] == 1024 and s["mode"] == mode]
        if fork:
            got = p50(s["kernel_info"] for s in fork)
            assert got is not None
            ok = got <= GOAL_PROMOTION
            lines.append(
                f"{'PASS' if ok else 'FAIL'}  promotion at 1 GB ({label}), decision -> kernel_info p50 "
                f"{got * 1e3:.1f} ms (goal <= {GOAL_PROMOTION * 1e3:.0f} ms; {got / GOAL_PROMOTION:.2f}x the goal)"
            )
    locks = result.get("locks")
    if locks:
        ok = not locks["deadlocks"] and not locks["failures"]
        lines.append(
            f"{'PASS' if ok else 'FAIL'}  {locks['promoted']}/{locks['taken']} snapshots promoted with busy threads "
            f"({len(locks['deadlocks'])} deadlocks, {len(locks['failures'])} failures, {locks['refused']} refused; "
            f"meanwhile {locks['busy']['control']} control requests and {locks['busy']['subshell']} subshell cells)"
        )
    return lines


def report(result: dict) -> str:
    parts = []
    if result.get("bare"):
        parts += ["Fork in a bare Python process:", bare_table(result["bare"]), ""]
        parts += ["Copy-on-write, bare process:", cow_table(result["bare"], "bare"), ""]
    if result.get("kernel"):
        parts += ["Fork in a real kernel (before a cell, main thread):", kernel_table(result["kernel"]), ""]
        parts += ["Copy-on-write, kernel:", cow_table(result["kernel"], "kernel"), ""]
    if result.get("promotion", {}).get("fork"):
        parts += ["Promotion (from the decision):", promotion_table(result["promotion"]), ""]
        parts += ["Promotion stages (p50, from the decision):", stages_table(result["promotion"]), ""]
        parts += [f"Promoted kernel checks: {json.dumps(result['promotion'].get('checks'))}", ""]
    if result.get("locks"):
        times = result["locks"]["times"]
        parts += [f"Locks: promotion with busy threads p50 {fmt_seconds(p50(times))}, p90 {fmt_seconds(p90(times))}"]
        parts += [*(d[:2000] for d in result["locks"]["deadlocks"][:3]), *result["locks"]["failures"][:5], ""]
    parts += [*result["notes"], *verdict(result)]
    return "\n".join(parts)


@contextlib.contextmanager
def _removed(directory: str) -> t.Iterator[None]:
    try:
        yield
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", default="bare,kernel,promotion,locks")
    p.add_argument("--shapes", default="numpy,small")
    p.add_argument("--sizes", default="100,1024,10240", help="heap sizes in MB (default: %(default)s)")
    p.add_argument("--kernel-sizes", default="100,1024,10240", help="heap sizes in the kernel part (MB)")
    p.add_argument("--promotion-sizes", default="100,1024")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--cow-runs", type=int, default=3, help="copy-on-write samples per step (1 above 1 GB)")
    p.add_argument("--lock-forks", type=int, default=200)
    p.add_argument("--json", default=None, metavar="FILE")
    args = p.parse_args(argv)
    try:
        import numpy  # noqa: F401
    except ImportError:
        print(sc.NO_NUMPY, file=sys.stderr)
        return 2
    parts, shapes = args.parts.split(","), args.shapes.split(",")
    ints = lambda text: [int(x) for x in text.split(",") if x.strip()]  # noqa: E731
    result: dict[str, t.Any] = {"notes": [], "uptime_start": uptime(), "environment": environment()}
    become_subreaper()
    # Every file of every kernel (connection files, stacks, records, checkpoints, the promoted kernels') in one
    # directory, removed at the end: promoted kernels are not cleaned up by any manager.
    runtime = tempfile.mkdtemp(prefix="ck-snapshot-run-")
    os.environ["JUPYTER_RUNTIME_DIR"] = runtime
    with private_kernelspecs(), kernels_cleaned_up(), _removed(runtime):
        try:
            if "bare" in parts:
                result["bare"] = bare_part(shapes, ints(args.sizes), args.runs, args.cow_runs, result["notes"])
            if "kernel" in parts:
                result["kernel"] = kernel_part(
                    shapes, ints(args.kernel_sizes), args.runs, args.cow_runs, result["notes"]
                )
            if "promotion" in parts:
                result["promotion"] = promotion_part(ints(args.promotion_sizes), args.runs, result["notes"])
            if "locks" in parts:
                result["locks"] = locks_part(args.lock_forks, result["notes"])
        finally:
            kill_children()
    result["uptime_end"] = uptime()
    print(report(result))
    print(f"\nload: start {result['uptime_start']}; end {result['uptime_end']}")
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
