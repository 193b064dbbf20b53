"""How one cell's run ends: replied (ok, error, interrupted), escalated to a restart, or died.

A mixin of CellRun (run.py), which holds the state these read: the reply,
the interrupt sent, the stacks the kernel sent, the result being built.
"""

from __future__ import annotations

import signal
import time
import typing as t

from .. import frames as fr
from .. import last_cell
from ..pids import process_running
from ..protocol import REASON_MEMORY_BUDGET, REASON_SHUTDOWN, Status
from ..sizes import format_size
from ..words import plural
from .processes import describe_exit
from .result import CellResult

if t.TYPE_CHECKING:
    from .detect import Tripwire
    from .link import InterruptSent, KernelLink
    from .outputs import OutputCollector
    from .policy import CellPlan, Policy


class Outcomes:
    """The endings of a CellRun."""

    p: Policy
    link: KernelLink
    plan: CellPlan
    death_baseline: dict | None
    res: CellResult
    wire: Tripwire
    collector: OutputCollector
    msg_id: str
    reply: dict | None
    reply_at: float | None
    interrupt: InterruptSent | None
    kernel_interrupt_at: float | None
    kernel_interrupt_elapsed: float | None
    kernel_stack: list[dict] | None
    dump_since: float
    clock: t.Callable[[], float]

    def _replied(self) -> CellResult:
        res, reply = self.res, self.reply
        assert reply is not None
        content = reply.get("content") or {}
        meta = (reply.get("metadata") or {}).get("cancelkernel") or {}
        res.elapsed = round((self.reply_at or self.clock()) - self.wire.started, 4)
        res.execution_count = content.get("execution_count")
        status = content.get("status")
        if status == "error":
            res.error_name, res.error_value = content.get("ename"), content.get("evalue")
            res.traceback = list(content.get("traceback") or [])
        elif status == "aborted":
            res.error_name, res.error_value = "Aborted", "the kernel aborted the request without running it"
        self._finish_outputs()
        if meta.get("interrupted") and meta.get("reason") == REASON_SHUTDOWN:
            # Someone shut the kernel down under the cell (its server deleted or culled it): it is gone.
            return self._died("the kernel was shut down while the cell ran (its server deleted or culled it, or another client stopped it)")
        kernel_stopped = bool(meta.get("interrupted")) and meta.get("reason") != "deadline"
        if self.interrupt is None and not kernel_stopped:
            res.status = "ok" if status == "ok" else "error"
            res.state = "intact"
            return res
        if self.interrupt is None:
            self._kernel_reason(meta)
        elif meta.get("reason") == REASON_MEMORY_BUDGET:
            res.memory, res.reason_text = meta.get("memory"), memory_text(meta.get("memory") or {})
        sent = self.interrupt.sent_at if self.interrupt else (self.kernel_interrupt_at or self.wire.started)
        latency = (self.reply_at or self.clock()) - sent
        kernel_sent = meta.get("interrupted_after") if isinstance(meta.get("interrupted_after"), (int, float)) else self.kernel_interrupt_elapsed
        if self.interrupt is None and kernel_sent is not None and isinstance(meta.get("elapsed"), (int, float)):
            latency = max(0.0, float(meta["elapsed"]) - float(kernel_sent))  # both on the kernel's clock
        if self.interrupt is not None or self.kernel_interrupt_at is not None or (kernel_stopped and kernel_sent is not None):
            res.interrupt_latency = round(latency, 4)
        if meta.get("abandoned_thread") and not self.p.accept_abandoned_threads and self._abandoned_alive(meta):
            return self._escalate(
                f"the interrupt did not stop the cell: the kernel abandoned its exec thread "
                f"({meta['abandoned_thread']}), which is still running the cell's code"
            )
        found = fr.from_dicts(meta.get("stack") or self.kernel_stack) or fr.parse_ipython_traceback(res.traceback)
        res.stack = _cell_stack(found, self.plan.source, res.execution_count)
        if status == "ok" and not kernel_stopped:
            res.status, res.state = "ok", "intact"
            outcome = "the cell finished on its own before the interrupt took effect"
        else:
            res.status, res.state = "interrupted", "suspect"
            took = f"{latency * 1000:.0f} ms" if latency < 1 else f"{latency:.2f} s"
            outcome = f"the cell stopped {took} after the interrupt"
            where = fr.stopped_at(fr.from_dicts(res.stack), readable=True)
            if where:
                outcome += f", at {where}"
        if res.actions:
            res.actions[-1]["outcome"] = outcome
            res.actions[-1]["latency"] = res.interrupt_latency
        return res

    def _kernel_reason(self, meta: dict) -> None:
        """The kernel stopped the cell on its own (its budgets) or someone else interrupted it."""
        reason = meta.get("reason")
        if reason == REASON_MEMORY_BUDGET:
            self.res.reason, self.res.memory = reason, meta.get("memory")
            self.res.reason_text = memory_text(meta.get("memory") or {})
            via = "kernel"
        elif reason in ("wall_budget", "quiet_budget"):
            budget = (meta.get("budgets") or {}).get(reason) or self.res.budgets.get(reason)
            what = "ran past its wall budget" if reason == "wall_budget" else "printed nothing for longer than its quiet budget"
            self.res.reason = reason
            self.res.reason_text = f"the cell {what} of {budget:g} s; the kernel interrupted it" if budget else f"the kernel stopped the cell ({reason})"
            via = "kernel"
        else:
            self.res.reason = "manual"
            self.res.reason_text = f"an interrupt from outside this client stopped the cell ({reason or 'unknown source'})"
            via = "external"
        self.res.actions.append({"action": "interrupt", "why": self.res.reason, "why_text": self.res.reason_text, "via": via,
                                 "at": None, "outcome": None})

    def _forget_running_record(self) -> None:
        """This client is about to kill the kernel on purpose: stop it first, then drop its record, so the next kernel reports no death."""
        path, pid = self.link.info.running_record, self.link.pid
        if not (self.link.local and path and pid):
            return
        if self.link.signal(signal.SIGKILL):
            deadline = time.monotonic() + 2.0
            while process_running(pid) and time.monotonic() < deadline:
                time.sleep(0.01)
        last_cell.remove(path)

    def _death(self) -> dict | None:
        """Why a local kernel died, with evidence: its running-cell record, else the OOM counts taken when the cell began."""
        if not self.link.local:
            return None
        path = self.link.info.running_record
        record = last_cell.read(path) if path else None
        if path and record is not None and record.get("pid") == (self.death_baseline or {}).get("pid"):
            last_cell.remove(path)  # read here: the next kernel must not report this death again
            return last_cell.death_of(record)
        return last_cell.death_of(self.death_baseline) if self.death_baseline else None

    def _abandoned_alive(self, meta: dict) -> bool:
        status = self.link.cancel_status(timeout=0.5)
        if status is None:
            return True  # cannot tell: assume the thread still runs
        names = {thread.get("name") for thread in status.get("abandoned_threads") or []}
        return meta.get("abandoned_thread") in names

    def _finish_outputs(self) -> None:
        self.res.outputs = self.collector.outputs
        self.res.output_bytes_dropped = self.collector.dropped

    def _stack_when_stuck(self) -> list[dict] | None:
        """Where the cell is stuck, from whatever still answers; a stack that shows the cell wins."""
        wedged = self.interrupt is not None and self.interrupt.wedged
        candidates: list[list[dict] | None] = []
        if self.reply is not None:
            candidates.append(((self.reply.get("metadata") or {}).get("cancelkernel") or {}).get("stack"))
        candidates.append(self.kernel_stack)
        if not wedged:
            status = self.link.cancel_status(timeout=0.3)
            last = (status or {}).get("last_stack") or {}
            if isinstance(last, dict) and last.get("execution") in (self.msg_id, None):
                candidates.append(last.get("frames"))
        if not any(_shows_cell(c) for c in candidates):
            candidates.append(fr.as_dicts(fr.dumped_stack(self.link.read_dump(self.dump_since))))
        if not any(candidates) and self.link.info.dump_file and self.link.local:
            # Our kernel registers faulthandler on SIGUSR1: all stacks, no GIL needed.
            if self.link.signal(signal.SIGUSR1):
                time.sleep(0.1)
                candidates.append(fr.as_dicts(fr.dumped_stack(self.link.read_dump(self.dump_since))))
        chosen = next((c for c in candidates if _shows_cell(c)), None) or next((c for c in candidates if c), None)
        if not chosen and not self.link.local:
            self.res.notes.append(
                "no stack of the hung cell: the kernel is remote, and its stack dump file and SIGUSR1 are on the server's machine"
            )
        return _cell_stack(fr.from_dicts(chosen), self.plan.source, self.res.execution_count)

    def _escalate(self, why_restart: str) -> CellResult:
        """The interrupt failed (or is not allowed): take the stack, restart, restore."""
        res = self.res
        res.elapsed = round(self.clock() - self.wire.started, 4)
        if res.actions and res.actions[-1]["outcome"] is None:
            res.actions[-1]["outcome"] = "no effect: " + why_restart
        decided = time.monotonic()
        res.stack = self._stack_when_stuck()
        self._finish_outputs()
        self._forget_running_record()
        self._restart_and_restore("restarted", res.reason or "wall_budget", why_restart, decided=decided)
        return res

    def _died(self, why: str | None) -> CellResult:
        res = self.res
        res.elapsed = round(self.clock() - self.wire.started, 4)
        if why is None:
            code = self.link.exit_code()
            why = "the kernel process died while running the cell" + describe_exit(code)
            death = self._death()  # read (and dropped) whatever the exit: the next kernel must not report it again
            # Only a kill can be the OOM killer's: an exit code of its own needs no evidence.
            if death is not None and (code is None or code == -signal.SIGKILL):
                res.cause = death["cause"]
                why += f": {death['message']} ({death['evidence']})" if death["cause"] == last_cell.CAUSE_OOM else f" ({death['evidence']})"
        if res.actions and res.actions[-1]["outcome"] is None:
            res.actions[-1]["outcome"] = "the kernel died before the cell stopped"
        res.reason, res.reason_text = "died", why
        decided = time.monotonic()
        self._finish_outputs()
        self._restart_and_restore("died", "died", why, dead=True, decided=decided)
        return res

    def _restart_and_restore(self, status: Status, why: str, why_text: str, *, decided: float, dead: bool = False) -> None:
        res = self.res
        started = self.clock()
        restarting = time.monotonic()
        how = self.link.restart(dead=dead)
        restarted = self.clock()
        restored = self.p.restore()
        done = time.monotonic()
        # Seconds since the policy decided to restart, one step at a time (README "Recovery").
        res.timings = {
            "stack_taken": round(restarting - decided, 4),
            "old_kernel_gone": round(how["old_gone"] - decided, 4) if "old_gone" in how else None,
            "new_kernel_ready": round(how["ready"] - decided, 4),
            "restored": round(done - decided, 4),
            "spare": bool(how.get("spare")),
        }
        if how.get("note"):
            res.notes.append(str(how["note"]))
        res.status = status
        res.state = restored.state
        res.restored, res.restore_skipped, res.checkpoint = restored.names, restored.skipped, restored.checkpoint
        outcome = "new kernel running"
        if restored.state == "restored":
            outcome += f"; restored {plural(len(restored.names), 'name')} from checkpoint {restored.checkpoint!r}"
            if restored.skipped:
                outcome += f", skipped {len(restored.skipped)}"
        else:
            outcome += "; state lost" + (f" ({restored.note})" if restored.note else "")
        res.actions.append(
            {
                "action": "restart",
                "why": why,
                "why_text": why_text,
                "via": "restart",
                "at": round(started - self.wire.started, 4),
                "outcome": outcome,
                "took": round(self.clock() - started, 4),
                "restart_took": round(restarted - started, 4),
                "restore_took": round(self.clock() - restarted, 4),
                "spare": bool(how.get("spare")),
            }
        )
        res.kernel["pid"] = self.link.info.pid


def memory_text(memory: dict) -> str:
    """What an agent reads after a memory trip: what was measured, what holds it, what to do."""
    def size(key: str) -> str:
        value = memory.get(key)
        return format_size(value) if isinstance(value, (int, float)) else "?"

    if memory.get("kind") == "guard":
        text = f"the kernel's memory reached {size('at_trip')} of its limit of {size('limit')}, close to being killed; the kernel interrupted the cell"
    else:
        text = f"the cell grew the kernel from {size('start')} to {size('at_trip')}, past its memory budget of {size('budget')}; the kernel interrupted it"
    if isinstance(memory.get("after"), int):
        text += f"; {size('after')} once it stopped"
    released = memory.get("released") or []
    if released:
        biggest = released[0]
        held = f"{biggest.get('name')} ({biggest.get('type')}, {format_size(biggest.get('bytes') or 0)})"
        text += f". It was held by the cell's locals, which the kernel let go: {held}"
    holders = memory.get("holders") or []
    if holders:
        biggest = holders[0]
        text += (
            f". The biggest: {biggest.get('name')} ({biggest.get('type')}, {format_size(biggest.get('bytes') or 0)}); "
            f"free it with `del {biggest.get('name')}`, or process the data in chunks"
        )
    elif released:
        text += "; process the data in chunks"
    else:
        text += ". No name of the namespace holds much: the memory was in the cell's own locals; process the data in chunks"
    return text


def _shows_cell(frames: list[dict] | None) -> bool:
    return any(f.is_cell for f in fr.from_dicts(frames))


def _cell_stack(frames: list[fr.Frame], source: str, count: int | None) -> list[dict] | None:
    """Frames from the outermost cell frame inwards, as result dicts (None: no stack); `count`: the cell's execution count."""
    kept = fr.fill_cell_source(frames, source, f"Cell In[{count}]" if count else "cell")
    return fr.as_dicts(kept) or None
