"""One cell's run under the policy: the loop that watches it, and how each outcome is reached.

Every wait is bounded, and the process is checked every POLL seconds, so a
dead or restarted kernel never leaves the caller waiting.
"""

from __future__ import annotations

import signal
import threading
import time

from .. import frames as fr
from ..protocol import EVENT_INTERRUPT, EVENT_MIME, EVENT_RUNAWAY, EVENT_UNRESPONSIVE
from .detect import Tripwire
from .link import InterruptSent, describe
from .outputs import OutputCollector
from .policy import CellPlan, Policy
from .processes import describe_exit
from .result import CellResult

# Seconds between liveness checks and budget checks while a cell runs.
POLL = 0.1
# Extra seconds past interrupt_grace before the client gives up on a reply (our kernel reports at the grace).
MARGIN = 0.4
# After execute_reply, how long to wait for the cell's last outputs (its idle status).
IDLE_AFTER_REPLY = 2.0
# When the kernel enforces the budgets itself, the client trips this much later, so the kernel acts first.
KERNEL_SLACK = 0.3


class CellRun:
    """The state of one cell's run (one object per run keeps the loop readable)."""

    def __init__(self, policy: Policy, plan: CellPlan, manual: threading.Event):
        self.p = policy
        self.link = policy.link
        self.plan = plan
        self.manual = manual
        self.clock = policy.clock
        self.collector = OutputCollector(policy.registry, max_output_bytes=policy.max_output_bytes)
        self.wire = Tripwire(
            plan.wall_budget, plan.quiet_budget, clock=self.clock, busy=True, slack=KERNEL_SLACK if plan.kernel_enforces else 0.0
        )
        self.res = CellResult(
            status="ok",
            source=plan.source,
            cell_id=plan.cell_id,
            cell_key=plan.cell_key,
            attempt=plan.attempt,
            budgets={"wall_budget": plan.wall_budget, "quiet_budget": plan.quiet_budget},
            kernel=describe(self.link),
        )
        self.msg_id = ""
        self.reply: dict | None = None
        self.reply_at: float | None = None
        self.idle = False
        self.interrupt: InterruptSent | None = None
        self.kernel_interrupted = False
        self.probed = False  # the one status request at the budget (kernel-enforced budgets only)
        self.kernel_interrupt_at: float | None = None
        self.kernel_interrupt_elapsed: float | None = None  # the kernel's clock, from its interrupt event
        self.kernel_stack: list[dict] | None = None
        self.trip: str | None = None
        self.escalate_at: float | None = None
        self.dump_since = 0.0

    # -- the loop --

    def go(self) -> CellResult:
        self.dump_since = time.time()
        self.msg_id = self.link.execute(self.plan.source, cell_id=self.plan.cell_id, metadata=self.plan.kernel_metadata)
        self.wire.start()
        last_alive = -1.0
        while True:
            now = self.clock()
            if self.reply is not None and (self.idle or now - (self.reply_at or now) > IDLE_AFTER_REPLY):
                return self._replied()
            if now - last_alive >= POLL:
                last_alive = now
                if not self.link.is_alive():
                    return self._died(None)
            if self.reply is None and self.trip is None and self.plan.kernel_enforces and not self.probed:
                self._probe_when_due(now)
            if self.reply is None and self.trip is None:
                if self.manual.is_set():
                    self.manual.clear()
                    self.wire.tripped, self.wire.tripped_at = "manual", now
                    self._tripped("manual")
                else:
                    reason = self.wire.check()
                    if reason is not None:
                        self._tripped(reason)
                if self.trip is not None and self.escalate_at is None:
                    return self._escalate("the cell already used its one interrupt, so it is not interrupted again")
            if self.reply is None and self.escalate_at is not None and now >= self.escalate_at:
                return self._escalate(self._no_reply_text())
            for channel, msg in self.link.poll(self._timeout(now)):
                died = self._handle(channel, msg)
                if died is not None:
                    return self._died(died)

    def _probe_when_due(self, now: float) -> None:
        """At the budget itself, one status request: no answer means the GIL is held and the kernel's
        own watchdog cannot act, so the client interrupts now instead of after its slack."""
        reason = self.wire.due()
        if reason is None:
            return
        self.probed = True
        if self.kernel_interrupted or self.link.cancel_status(timeout=0.2) is not None:
            return
        self.wire.tripped, self.wire.tripped_at = reason, now
        self._tripped(reason, wedged=True)

    def _timeout(self, now: float) -> float:
        waits = [POLL]
        if self.plan.kernel_enforces and not self.probed and self.reply is None:
            due = self.wire.due_in()
            if due is not None:
                waits.append(due + 0.005)
        nxt = self.wire.next_check_in()
        if nxt is not None and self.reply is None:
            waits.append(nxt + 0.005)
        if self.escalate_at is not None and self.reply is None:
            waits.append(max(0.0, self.escalate_at - now))
        if self.reply is not None:
            waits.append(0.05)
        return max(0.0, min(waits))

    def _handle(self, channel: str, msg: dict) -> str | None:
        """Apply one message; a sentence if it shows the kernel was restarted under us."""
        parent = (msg.get("parent_header") or {}).get("msg_id")
        msg_type = msg.get("msg_type") or msg["header"]["msg_type"]
        if channel == "shell":
            if parent == self.msg_id and msg_type == "execute_reply" and self.reply is None:
                self.reply, self.reply_at = msg, self.clock()
            return None
        if channel != "iopub":
            return None
        if msg_type == "status":
            state = msg["content"].get("execution_state")
            if state == "starting" and msg["header"].get("session") != self.link.session_id:
                return "the kernel was restarted by its owner while the cell ran (a new kernel announced itself)"
            if parent == self.msg_id and state == "idle":
                self.idle = True
            return None
        if parent != self.msg_id:
            return None
        data = (msg.get("content") or {}).get("data") or {}
        event = data.get(EVENT_MIME) if isinstance(data, dict) else None
        if self.collector.add(msg) and event is None:
            self.wire.output_seen()  # the kernel's own events are not the cell speaking
        if isinstance(event, dict):
            self._kernel_event(event)
        return None

    def _kernel_event(self, event: dict) -> None:
        kind = event.get("event")
        if kind == EVENT_INTERRUPT or (kind == EVENT_RUNAWAY and event.get("action") == "interrupt"):
            self.kernel_interrupted = True
            if self.kernel_interrupt_at is None:
                self.kernel_interrupt_at = self.clock()
                if isinstance(event.get("elapsed"), (int, float)):
                    self.kernel_interrupt_elapsed = float(event["elapsed"])
        elif kind == EVENT_UNRESPONSIVE and self.escalate_at is not None:
            # The kernel says its grace passed with the cell still running: no reason to wait longer.
            self.escalate_at = min(self.escalate_at, self.clock())
        if isinstance(event.get("stack"), list) and event["stack"]:
            self.kernel_stack = event["stack"]

    # -- a trip: interrupt once --

    def _tripped(self, reason: str, *, wedged: bool = False) -> None:
        self.trip = reason
        why = self.wire.why(reason)
        self.res.reason, self.res.reason_text = reason, why
        if not self.plan.may_interrupt:
            return
        answered = not wedged
        if self.plan.kernel_enforces and reason != "manual" and not wedged:
            already, answered = self._kernel_already_interrupted()
            if already:
                # The kernel sent the cell's one interrupt itself: the client waits for it, sends none.
                self.interrupt = InterruptSent(self.kernel_interrupt_at or self.clock(), "kernel")
        if self.interrupt is None:
            # An unanswered status request already shows the GIL is held: signal at once.
            self.interrupt = self.link.interrupt(self.msg_id, wedged=not answered)
        wait = self.p.grace()
        if self.interrupt.via != "message+signal":
            wait += MARGIN  # our kernel reports an unstopped cell at its grace; give the report time to arrive
        self.escalate_at = self.interrupt.sent_at + wait
        self.res.actions.append(
            {
                "action": "interrupt",
                "why": reason,
                "why_text": why,
                "via": self.interrupt.via,
                "at": round(self.interrupt.sent_at - self.wire.started, 4),
                "outcome": None,
            }
        )

    def _kernel_already_interrupted(self) -> tuple[bool, bool]:
        """(the kernel interrupted this cell itself, the kernel answered the status request)."""
        if self.kernel_interrupted:
            return True, True
        status = self.link.cancel_status(timeout=0.2)
        if status is None:
            return False, False
        execution = status.get("execution") or {}
        return execution.get("msg_id") == self.msg_id and int(execution.get("interrupts_sent") or 0) > 0, True

    def _no_reply_text(self) -> str:
        assert self.interrupt is not None
        waited = self.clock() - self.interrupt.sent_at
        if self.interrupt.via == "message+signal":
            return f"the kernel did not answer the interrupt on its control channel (one C call holds the GIL) and the cell did not stop within {waited:.1f} s"
        if self.interrupt.via == "none":
            return "the kernel could not be interrupted (no control channel answer and no signal path)"
        return f"the interrupt did not stop the cell within {waited:.1f} s (it was swallowed or ignored)"

    # -- outcomes --

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
        kernel_stopped = bool(meta.get("interrupted")) and meta.get("reason") != "deadline"
        if self.interrupt is None and not kernel_stopped:
            res.status = "ok" if status == "ok" else "error"
            res.state = "intact"
            return res
        if self.interrupt is None:
            self._kernel_reason(meta)
        sent = self.interrupt.sent_at if self.interrupt else (self.kernel_interrupt_at or self.wire.started)
        latency = (self.reply_at or self.clock()) - sent
        if self.interrupt is None and self.kernel_interrupt_elapsed is not None and isinstance(meta.get("elapsed"), (int, float)):
            latency = max(0.0, float(meta["elapsed"]) - self.kernel_interrupt_elapsed)  # both on the kernel's clock
        if self.interrupt is not None or self.kernel_interrupt_at is not None:
            res.interrupt_latency = round(latency, 4)
        if meta.get("abandoned_thread") and not self.p.accept_abandoned_threads and self._abandoned_alive(meta):
            return self._escalate(
                f"the interrupt did not stop the cell: the kernel abandoned its exec thread "
                f"({meta['abandoned_thread']}), which is still running the cell's code"
            )
        found = fr.from_dicts(meta.get("stack") or self.kernel_stack) or fr.parse_ipython_traceback(res.traceback)
        res.stack = _cell_stack(found, self.plan.source)
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
        if reason in ("wall_budget", "quiet_budget"):
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
        wedged = self.interrupt is not None and self.interrupt.via == "message+signal"
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
        return _cell_stack(fr.from_dicts(chosen), self.plan.source)

    def _escalate(self, why_restart: str) -> CellResult:
        """The interrupt failed (or is not allowed): take the stack, restart, restore."""
        res = self.res
        res.elapsed = round(self.clock() - self.wire.started, 4)
        if res.actions and res.actions[-1]["outcome"] is None:
            res.actions[-1]["outcome"] = "no effect: " + why_restart
        res.stack = self._stack_when_stuck()
        self._finish_outputs()
        self._restart_and_restore("restarted", res.reason or "wall_budget", why_restart)
        return res

    def _died(self, why: str | None) -> CellResult:
        res = self.res
        res.elapsed = round(self.clock() - self.wire.started, 4)
        if why is None:
            why = "the kernel process died while running the cell" + describe_exit(self.link.exit_code())
        if res.actions and res.actions[-1]["outcome"] is None:
            res.actions[-1]["outcome"] = "the kernel died before the cell stopped"
        res.reason, res.reason_text = "died", why
        self._finish_outputs()
        self._restart_and_restore("died", "died", why, dead=True)
        return res

    def _restart_and_restore(self, status: str, why: str, why_text: str, *, dead: bool = False) -> None:
        res = self.res
        started = self.clock()
        self.link.restart(dead=dead)
        restarted = self.clock()
        restored = self.p.restore()
        res.status = status
        res.state = restored.state
        res.restored, res.restore_skipped, res.checkpoint = restored.names, restored.skipped, restored.checkpoint
        outcome = "new kernel running"
        if restored.state == "restored":
            outcome += f"; restored {len(restored.names)} names from checkpoint {restored.checkpoint!r}"
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
            }
        )
        res.kernel["pid"] = self.link.info.pid


def _shows_cell(frames: list[dict] | None) -> bool:
    return any(f.is_cell for f in fr.from_dicts(frames))


def _cell_stack(frames: list[fr.Frame], source: str) -> list[dict] | None:
    """Frames from the outermost cell frame inwards, as result dicts (None: no stack)."""
    kept = fr.fill_cell_source(frames, source)
    return fr.as_dicts(kept) or None
