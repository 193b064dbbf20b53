"""Interrupt storm, both execution modes.

Stock ipykernel 7.4 loses the execute_reply of about a quarter of the cells in
such a storm: its SIGINT lands in kernel code, and `dispatch_shell` swallows
the KeyboardInterrupt without replying (docs/cancellation.md, "Stock ipykernel, the baseline").  Here a
real kernel runs at least 500 short cells of random length (busy loops,
sleeps, some printing, a few lock waits blocked in C for longer than the
interrupt grace so worker mode has to abandon its exec thread), two in flight at a time, while
`interrupt_request`s arrive at random moments:

- a third targeted at executions that have already ended (their reply was
  received before the interrupt was sent): they must hit nothing;
- a third targeted at the cell just sent (running, queued, or just finished);
- a third untargeted (empty content, what JupyterLab sends): they hit
  whatever runs, and their reply names it.

Checked at the end:

- every cell got exactly one execute_reply (none lost, none duplicated, none
  aborted);
- a cell reports KeyboardInterrupt only if an interrupt_reply named it as hit
  (`interrupted: true, execution: <its msg_id>`), and then its reply metadata
  says `interrupted: true`; every other cell is `ok`;
- the kernel is alive and its state is right: every `ok` cell ran its last
  statement (appended its number to a list) exactly once, no cell ran twice,
  and a cell that ran its last statement but was reported interrupted was a
  hit cell (an interrupt that arrives after the last statement but before the
  cell ends may still stop it: that is the interrupt doing its job);
- every line a cell printed reached iopub with that cell's msg_id as parent.

The random seed is fixed (20261129), printed (run with `-s` to see it), and
can be changed with CANCELKERNEL_STORM_SEED.  Timing still varies from run to
run: the seed fixes the cells and the interrupt schedule, not the races.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import time

import pytest
from helpers import GRACE, GRACE_ARGS, value_of

from cancelkernel.testing import MODES, control_request, execute, running_kernel

N_CELLS = 520
SEED = int(os.environ.get("CANCELKERNEL_STORM_SEED", "20261129"))  # fixed; override to explore
DEADLINE = 150.0  # seconds for the whole storm of one mode: only a hang guard


def _cell_code(i: int, rng: random.Random) -> tuple[str, bool]:
    kind = rng.random()
    if kind < 0.45:
        seconds = rng.uniform(0.0, 0.02)
        work = f"_t = time.perf_counter() + {seconds:.5f}\nwhile time.perf_counter() < _t:\n    pass"
    elif kind < 0.97:
        work = f"time.sleep({rng.uniform(0.0, 0.02):.5f})"
    elif kind < 0.985:
        # Blocked in C past the grace when interrupted: worker mode abandons the exec thread.  A lock the
        # cell holds itself, acquired again with a timeout (Event.wait would not do: it is cooperative on
        # the exec thread); named per cell, so a cell in the subshell at the same time cannot take it.
        lock = f"_storm_lock_{i}"
        work = (
            f"{lock} = threading.Lock(); {lock}.acquire(); "
            f"{lock}.acquire(timeout={rng.uniform(GRACE + 0.1, GRACE + 0.3):.3f})"
        )
    else:
        work = f"time.sleep({rng.uniform(GRACE + 0.1, GRACE + 0.3):.3f})"
    printing = rng.random() < 0.3
    lines = [work]
    if printing:
        lines.append(f"print('storm-cell-{i}')")
    lines.append(f"_storm_done.append({i})")
    return "\n".join(lines), printing


class _Storm:
    """Sends cells and interrupts, collects every reply on shell, control and iopub."""

    def __init__(self, kc, rng: random.Random, subshell: str | None = None):
        self.kc = kc
        self.rng = rng
        self.subshell = subshell  # a third of the cells go there, when given
        self.cells: list[str] = []  # msg_id per cell number
        self.cell_ids: set[str] = set()
        self.printing: dict[str, int] = {}
        self.replies: dict[str, list[dict]] = {}
        self.stray_shell: list[dict] = []
        self.interrupts: dict[str, dict] = {}  # interrupt msg_id -> {"kind", "target", "reply"}
        self.streams: list[dict] = []
        self.errors: list[dict] = []

    def send_cell(self, i: int) -> str:
        code, printing = _cell_code(i, self.rng)
        content = {
            "code": code,
            "silent": False,
            "store_history": False,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": False,
        }
        msg = self.kc.session.msg("execute_request", content)
        if self.subshell is not None and self.rng.random() < 1 / 3:
            msg["header"]["subshell_id"] = self.subshell
        self.kc.shell_channel.send(msg)
        msg_id = msg["header"]["msg_id"]
        self.cells.append(msg_id)
        self.cell_ids.add(msg_id)
        if printing:
            self.printing[msg_id] = i
        return msg_id

    def send_interrupt(self, kind: str, target: str | None) -> None:
        content = {"target": target} if target is not None else {}
        msg = self.kc.session.msg("interrupt_request", content)
        self.kc.control_channel.send(msg)
        self.interrupts[msg["header"]["msg_id"]] = {"kind": kind, "target": target, "reply": None}

    def ended(self) -> list[str]:
        return [m for m in self.cells if self.replies.get(m)]

    def in_flight(self) -> int:
        return sum(1 for m in self.cells if not self.replies.get(m))

    def pump(self, block: float = 0.0) -> None:
        """Read everything available; wait up to `block` seconds for a shell reply."""
        got_shell = self._drain_shell(block)
        while got_shell:
            got_shell = self._drain_shell(0.0)
        self._drain_control()
        self._drain_iopub()

    def _drain_shell(self, timeout: float) -> bool:
        try:
            msg = self.kc.shell_channel.get_msg(timeout=timeout)
        except queue.Empty:
            return False
        parent = msg["parent_header"].get("msg_id")
        if msg["msg_type"] == "execute_reply" and parent in self.cell_ids:
            self.replies.setdefault(parent, []).append(msg)
        else:
            self.stray_shell.append(msg)
        return True

    def _drain_control(self) -> None:
        while True:
            try:
                msg = self.kc.control_channel.get_msg(timeout=0)
            except queue.Empty:
                return
            parent = msg["parent_header"].get("msg_id")
            if parent in self.interrupts:
                self.interrupts[parent]["reply"] = msg

    def _drain_iopub(self) -> None:
        while True:
            try:
                msg = self.kc.iopub_channel.get_msg(timeout=0)
            except queue.Empty:
                return
            if msg["msg_type"] == "stream":
                self.streams.append(msg)
            elif msg["msg_type"] == "error":
                self.errors.append(msg)


def _run_storm(kc, rng: random.Random, subshell: str | None = None, cells: int = N_CELLS) -> _Storm:
    storm = _Storm(kc, rng, subshell)
    deadline = time.monotonic() + DEADLINE
    for i in range(cells):
        assert time.monotonic() < deadline, f"storm did not finish in {DEADLINE} s (seed {SEED})"
        msg_id = storm.send_cell(i)
        if rng.random() < 2 / 3:
            time.sleep(rng.uniform(0.0, 0.025))
            storm.pump()
            kind = rng.choice(["ended", "current", "untargeted"])
            ended = storm.ended()
            if kind == "ended" and ended:
                storm.send_interrupt("ended", rng.choice(ended[-50:]))
            elif kind == "current":
                storm.send_interrupt("current", msg_id)
            else:
                storm.send_interrupt("untargeted", None)
        storm.pump()
        while storm.in_flight() >= 2:  # at most two cells in flight: one running, one queued
            assert time.monotonic() < deadline, f"storm stalled waiting for replies (seed {SEED})"
            storm.pump(block=1.0)
    while storm.in_flight() or any(v["reply"] is None for v in storm.interrupts.values()):
        if time.monotonic() > deadline:
            break
        storm.pump(block=0.5)
    # Anything duplicated would arrive now.
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        storm.pump(block=0.1)
    return storm


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("with_subshell", [False, True], ids=["parent", "subshell"])
def test_interrupt_storm(mode: str, with_subshell: bool) -> None:
    """500+ cells (260 with a subshell in the mix), interrupts at random moments:
    every cell answered once, only hit cells interrupted."""
    print(
        f"\ninterrupt storm: mode={mode} subshell={with_subshell} seed={SEED} "
        f"(set CANCELKERNEL_STORM_SEED={SEED} to replay)"
    )
    rng = random.Random(SEED)
    with running_kernel(mode, extra_arguments=GRACE_ARGS) as (km, kc):
        assert execute(kc, "import threading, time\n_storm_done = []")["content"]["status"] == "ok"
        subshell = control_request(kc, "create_subshell_request")["content"]["subshell_id"] if with_subshell else None
        storm = _run_storm(kc, rng, subshell, N_CELLS // 2 if with_subshell else N_CELLS)

        _check_one_reply_each(storm)
        hit = _check_interrupt_replies(storm)
        ok_cells, interrupted_cells = _check_only_hit_cells_interrupted(storm, hit)
        assert km.is_alive()
        finished_but_interrupted = _check_kernel_state(kc, ok_cells, interrupted_cells)

        kinds = {
            k: sum(1 for v in storm.interrupts.values() if v["kind"] == k) for k in ("ended", "current", "untargeted")
        }
        print(
            f"mode={mode} seed={SEED}: {len(storm.cells)} cells, {len(storm.interrupts)} interrupts {kinds}, "
            f"{len(hit)} hit, {len(interrupted_cells)} cells interrupted, {len(ok_cells)} ok, "
            f"{len(finished_but_interrupted)} interrupted after their last statement, "
            f"{len(hit) - len(interrupted_cells)} hit but finished ok",
            flush=True,
        )
        _check_output_attributed(storm, ok_cells)


def _check_one_reply_each(storm: _Storm) -> None:
    """Every cell got exactly one reply, and nothing else was answered."""
    missing = [m for m in storm.cells if not storm.replies.get(m)]
    doubled = {m: len(r) for m, r in storm.replies.items() if len(r) > 1}
    assert not missing, f"{len(missing)} of {len(storm.cells)} cells never got an execute_reply (seed {SEED})"
    assert not doubled, f"cells answered more than once: {doubled} (seed {SEED})"
    assert not [m for m in storm.stray_shell if m["msg_type"] == "execute_reply"], "replies to unknown requests"


def _check_interrupt_replies(storm: _Storm) -> set[str]:
    """Every interrupt was answered; none aimed at an ended execution hit anything.  The cells hit."""
    unanswered = [k for k, v in storm.interrupts.items() if v["reply"] is None]
    assert not unanswered, f"{len(unanswered)} interrupt_requests got no interrupt_reply (seed {SEED})"
    hit: set[str] = set()
    for info in storm.interrupts.values():
        content = info["reply"]["content"]
        assert content["status"] == "ok", content
        if info["kind"] == "ended":
            assert content["interrupted"] is False, f"an interrupt for an ended execution hit something: {content}"
            assert content["pending"] is False, f"an interrupt for an ended execution was kept for later: {content}"
        if content["interrupted"]:
            assert content["execution"] in storm.cells, content
            assert set(content["executions"]) <= set(storm.cells), content
            if info["target"] is not None:
                assert content["executions"] == [info["target"]], content
            hit.update(content["executions"])
        elif content.get("pending"):
            hit.add(info["target"])  # named before it started: it is cancelled when it does
    return hit


def _check_only_hit_cells_interrupted(storm: _Storm, hit: set[str]) -> tuple[set[int], set[int]]:
    """Only hit cells report KeyboardInterrupt; every other cell is ok.  (ok cells, interrupted cells) by number."""
    index = {m: i for i, m in enumerate(storm.cells)}
    ok_cells: set[int] = set()
    interrupted_cells: set[int] = set()
    for msg_id in storm.cells:
        reply = storm.replies[msg_id][0]
        content, meta = reply["content"], reply["metadata"].get("cancelkernel") or {}
        assert meta.get("msg_id") == msg_id, f"reply metadata names another execution: {meta}"
        if content["status"] == "ok":
            ok_cells.add(index[msg_id])
            assert meta.get("interrupted") is False, meta
            continue
        assert content["status"] == "error", content
        assert content["ename"] == "KeyboardInterrupt", f"cell {index[msg_id]}: {content['ename']}: {content['evalue']}"
        assert msg_id in hit, (
            f"cell {index[msg_id]} ({msg_id}) reports KeyboardInterrupt but no interrupt_reply named it "
            f"(a stray interrupt; seed {SEED}): {content['evalue']}"
        )
        assert meta.get("interrupted") is True, meta
        assert meta.get("reason") == "request", meta
        interrupted_cells.add(index[msg_id])
    for err in storm.errors:
        parent = err["parent_header"].get("msg_id")
        assert parent in hit, (
            f"an error was published for a cell that was not hit: {parent} {err['content'].get('ename')}"
        )
    return ok_cells, interrupted_cells


def _check_kernel_state(kc, ok_cells: set[int], interrupted_cells: set[int]) -> set[int]:
    """The kernel's state is what the replies say.  The hit cells that still ran their last statement."""
    done = eval(value_of(kc, "_storm_done"))  # a list of ints
    assert len(done) == len(set(done)), "a cell ran its last statement twice"
    assert ok_cells <= set(done), f"ok cells whose last statement never ran: {sorted(ok_cells - set(done))[:20]}"
    finished_but_interrupted = set(done) - ok_cells
    assert finished_but_interrupted <= interrupted_cells, sorted(finished_but_interrupted - interrupted_cells)
    # The counter (cells that ran to their last statement) equals the ok replies, plus hit
    # cells whose interrupt arrived after their last statement.
    assert int(value_of(kc, "len(_storm_done)")) == len(ok_cells) + len(finished_but_interrupted)
    return finished_but_interrupted


def _check_output_attributed(storm: _Storm, ok_cells: set[int]) -> None:
    """Printed output reached iopub, attributed to the cell that printed it."""
    seen: dict[int, list[str]] = {}
    for msg in storm.streams:
        for line in msg["content"]["text"].splitlines():
            if line.startswith("storm-cell-"):
                seen.setdefault(int(line.rsplit("-", 1)[1]), []).append(msg["parent_header"].get("msg_id"))
    for number, parents in seen.items():
        assert parents == [storm.cells[number]], f"output of cell {number} attributed to {parents}"
    for number in storm.printing.values():
        if number in ok_cells:
            assert number in seen, f"ok cell {number} printed, but its output never reached iopub"


SIGINT_CELLS = 300


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_sigint_storm(mode: str) -> None:
    """The same storm with SIGINT sent to the kernel process (interrupt_mode "signal" clients, kill -INT).

    Stock ipykernel 7.4 loses replies here (the SIGINT lands in kernel code).
    A SIGINT names no execution, so: every cell gets exactly one reply; a cell
    reports KeyboardInterrupt only if a SIGINT was sent while it was in flight
    (between its execute_request and its reply), and then its metadata says
    reason "signal"; the kernel is alive and its state right at the end.
    """
    seed = SEED + 1
    print(f"\nSIGINT storm: mode={mode} seed={seed}")
    rng = random.Random(seed)
    with running_kernel(mode, extra_arguments=GRACE_ARGS) as (km, kc):
        assert execute(kc, "import time\n_sig_done = []")["content"]["status"] == "ok"
        cells, sent, replies, signals = _run_sigint_storm(km, kc, rng, seed)

        missing = [i for i, m in enumerate(cells) if m not in replies]
        assert not missing, f"{len(missing)} cells never got an execute_reply: {missing[:20]} (seed {seed})"
        doubled = [i for i, m in enumerate(cells) if len(replies[m]) > 1]
        assert not doubled, f"cells answered more than once: {doubled}"
        assert set(replies) <= set(cells), "replies to requests never sent"
        ok_cells, interrupted = set(), set()
        for i, msg_id in enumerate(cells):
            received, reply = replies[msg_id][0]
            content, meta = reply["content"], reply["metadata"]["cancelkernel"]
            if content["status"] == "ok":
                ok_cells.add(i)
                continue
            assert content["ename"] == "KeyboardInterrupt", (i, content["ename"], content["evalue"])
            assert any(sent[msg_id] <= s <= received for s in signals), f"cell {i} interrupted with no SIGINT in flight"
            assert meta["interrupted"] is True, meta
            assert meta["reason"] == "signal", meta
            interrupted.add(i)
        assert km.is_alive()
        done = eval(value_of(kc, "_sig_done"))
        assert len(done) == len(set(done)), "a cell ran its last statement twice"
        assert ok_cells <= set(done)
        assert set(done) - ok_cells <= interrupted
        assert execute(kc, "1")["content"]["status"] == "ok"
        print(
            f"mode={mode}: {len(cells)} cells, {len(signals)} SIGINTs, {len(interrupted)} interrupted, "
            f"{len(ok_cells)} ok"
        )


def _run_sigint_storm(
    km, kc, rng: random.Random, seed: int
) -> tuple[list[str], dict[str, float], dict[str, list[tuple[float, dict]]], list[float]]:
    """SIGINT_CELLS cells, one at a time, SIGINTs at random moments: (cells, sent at, replies, SIGINTs sent at)."""
    cells: list[str] = []
    sent: dict[str, float] = {}
    replies: dict[str, list[tuple[float, dict]]] = {}
    signals: list[float] = []
    deadline = time.monotonic() + DEADLINE

    def pump(timeout: float) -> None:
        try:
            msg = kc.shell_channel.get_msg(timeout=timeout)
        except queue.Empty:
            return
        parent = msg["parent_header"].get("msg_id")
        replies.setdefault(parent, []).append((time.monotonic(), msg))

    for i in range(SIGINT_CELLS):
        assert time.monotonic() < deadline, f"SIGINT storm did not finish in {DEADLINE} s (seed {seed})"
        seconds = rng.uniform(0.0, 0.02)
        if i % 2:
            work = f"time.sleep({seconds:.5f})"
        else:
            work = f"_t = time.perf_counter() + {seconds:.5f}\nwhile time.perf_counter() < _t:\n    pass"
        msg_id = kc.execute(f"{work}\n_sig_done.append({i})", stop_on_error=False, store_history=False)
        cells.append(msg_id)
        sent[msg_id] = time.monotonic()
        if rng.random() < 0.6:
            time.sleep(rng.uniform(0.0, 0.025))
            signals.append(time.monotonic())
            km.signal_kernel(signal.SIGINT)
        wait_until = time.monotonic() + 10
        while msg_id not in replies and time.monotonic() < wait_until:
            pump(0.5)
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        pump(0.1)
    return cells, sent, replies, signals
