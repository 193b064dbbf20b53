"""One cell's run under the policy: the loop that watches it, and how each outcome is reached.

Every wait is bounded, and the process is checked every POLL seconds, so a
dead or restarted kernel never leaves the caller waiting.
"""

from __future__ import annotations

import threading
import time

from .. import last_cell
from ..protocol import EVENT_INTERRUPT, EVENT_MIME, EVENT_RUNAWAY, EVENT_STARTED, EVENT_UNRESPONSIVE, KEY, REASON_MEMORY_BUDGET
from .detect import Tripwire
from .link import InterruptSent, describe
from .outcomes import Outcomes
from .outputs import OutputCollector
from .policy import CellPlan, Policy
from .result import CellResult
from .watch import STATUS_EVERY, CellWatch

# Statuses a Jupyter Server publishes itself (no parent) when its kernel died under it.
SERVER_SAYS = {
    "restarting": "the kernel died while running the cell and the server restarted it",
    "dead": "the kernel died while running the cell and the server could not restart it",
}
# Seconds between liveness checks and budget checks while a cell runs.
POLL = 0.1
# Extra seconds past interrupt_grace before the client gives up on a reply (our kernel reports at the grace).
MARGIN = 0.4
# After execute_reply, how long to wait for the cell's last outputs (its idle status).
IDLE_AFTER_REPLY = 2.0
# After an interrupt from outside, how long to watch for the kernel's shutdown_reply before calling the cell interrupted.
OUTSIDE_SETTLE = 0.5
# When the kernel enforces the budgets itself, the client trips this much later, so the kernel acts first.
KERNEL_SLACK = 0.3


class CellRun(Outcomes):
    """The state of one cell's run (one object per run keeps the loop readable)."""

    def __init__(self, policy: Policy, plan: CellPlan, manual: threading.Event, watch: CellWatch | None = None):
        self.p = policy
        self.watch = watch if watch is not None else CellWatch()
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
            budgets={"wall_budget": plan.wall_budget, "quiet_budget": plan.quiet_budget, "memory_budget": plan.memory_budget},
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
        self.death_baseline: dict | None = None  # OOM kill counts when the cell began (a local kernel)

    # -- the loop --

    def go(self) -> CellResult:
        self.dump_since = time.time()
        pid = self.link.pid
        if self.link.local and pid:
            self.death_baseline = last_cell.baseline(pid)
        self.msg_id = self.link.execute(self.plan.source, cell_id=self.plan.cell_id, metadata=self.plan.kernel_metadata)
        self.wire.start()
        watch = self.watch
        watch.msg_id, watch.started, watch.last_output = self.msg_id, self.wire.started, self.wire.started
        watch.outputs, watch.actions = self.collector.outputs, self.res.actions  # the lists the result will hold
        last_alive = -1.0
        while True:
            now = self.clock()
            if self.reply is not None and (self.idle or now - (self.reply_at or now) > IDLE_AFTER_REPLY):
                if self._stopped_from_outside() and now - (self.reply_at or now) < OUTSIDE_SETTLE:
                    pass  # an interrupt we did not send may be the server shutting the kernel down: look a moment longer
                else:
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
            if self.reply is None and self.trip is None:
                self._refresh_status(now)
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

    def _refresh_status(self, now: float) -> None:
        """For someone watching: what our kernel says about the cell, about once a second."""
        watch = self.watch
        if not watch.want_status or not self.link.info.ours or now - watch.status_at < STATUS_EVERY:
            return
        watch.status_at = now
        status = self.link.cancel_status(timeout=0.2)
        running = [e for e in (status or {}).get("executions") or [] if e.get("msg_id") == self.msg_id]
        if running:
            watch.kernel_status = running[0]

    def _stopped_from_outside(self) -> bool:
        """The cell was interrupted, but not by this client or by its budgets (a server's shutdown interrupts first)."""
        meta = ((self.reply or {}).get("metadata") or {}).get("cancelkernel") or {}
        return self.interrupt is None and bool(meta.get("interrupted")) and meta.get("reason") in ("signal", "request")

    def _handle(self, channel: str, msg: dict) -> str | None:
        """Apply one message; a sentence if it shows the kernel was restarted or shut down under us."""
        parent = (msg.get("parent_header") or {}).get("msg_id")
        msg_type = msg.get("msg_type") or msg["header"]["msg_type"]
        if channel == "iopub" and msg_type == "shutdown_reply":
            return "the kernel was shut down while the cell ran (its server deleted or culled it, or another client stopped it)"
        if channel == "shell":
            if parent == self.msg_id and msg_type == "execute_reply" and self.reply is None:
                self.reply, self.reply_at = msg, self.clock()
                if ((msg.get("metadata") or {}).get(KEY) or {}).get("checkpoint"):
                    self.link.checkpoint_saved()  # the kernel saved around the cell (before / autosave)
            return None
        if channel != "iopub":
            return None
        if msg_type == "status":
            state = msg["content"].get("execution_state")
            if state == "starting" and msg["header"].get("session") != self.link.session_id:
                return "the kernel was restarted by its owner while the cell ran (a new kernel announced itself)"
            if state in SERVER_SAYS and not parent:
                return SERVER_SAYS[state]
            if parent == self.msg_id and state == "idle":
                self.idle = True
            return None
        if parent != self.msg_id:
            return None
        if msg_type == "execute_input" and self.res.execution_count is None:
            self.res.execution_count = (msg.get("content") or {}).get("execution_count")  # a wedged cell has no reply to say it
        event = kernel_event(msg.get("content") or {})
        if self.collector.add(msg) and event is None:
            self.wire.output_seen()  # the kernel's own events are not the cell speaking
            self.watch.last_output = self.wire.last_output
        if isinstance(event, dict):
            self._kernel_event(event)
        return None

    def _kernel_event(self, event: dict) -> None:
        kind = event.get("event")
        if kind == EVENT_STARTED:
            return  # the budgets a front end counts down: this client knows them already
        self.res.events.append(event)
        if kind == EVENT_INTERRUPT or (kind == EVENT_RUNAWAY and event.get("action") == "interrupt"):
            self.kernel_interrupted = True
            if self.kernel_interrupt_at is None:
                self.kernel_interrupt_at = self.clock()
                if isinstance(event.get("elapsed"), (int, float)):
                    self.kernel_interrupt_elapsed = float(event["elapsed"])
            if kind == EVENT_RUNAWAY and event.get("reason") == REASON_MEMORY_BUDGET and self.trip is None:
                self._kernel_tripped(REASON_MEMORY_BUDGET, str(event.get("message") or "the kernel's memory budget tripped"))
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
        if not self.interrupt.wedged:
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

    def _kernel_tripped(self, reason: str, why: str) -> None:
        """A budget only the kernel measures (memory) tripped and the kernel interrupted: the policy's one interrupt,
        escalated to a restart if the cell still runs a grace period later."""
        self.trip = reason
        self.res.reason, self.res.reason_text = reason, why
        self.interrupt = InterruptSent(self.kernel_interrupt_at or self.clock(), "kernel")
        self.escalate_at = self.interrupt.sent_at + self.p.grace() + MARGIN
        self.res.actions.append(
            {"action": "interrupt", "why": reason, "why_text": why, "via": "kernel",
             "at": round(self.interrupt.sent_at - self.wire.started, 4), "outcome": None}
        )  # fmt: skip

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
        if self.interrupt.wedged:
            return f"the kernel did not answer the interrupt on its control channel (one C call holds the GIL) and the cell did not stop within {waited:.1f} s"
        if self.interrupt.via == "none":
            return "the kernel could not be interrupted (no control channel answer and no signal path)"
        return f"the interrupt did not stop the cell within {waited:.1f} s (it was swallowed or ignored)"


def kernel_event(content: dict) -> dict | None:
    """Our kernel's event in an iopub message: in `transient` (it is never saved into a notebook), or in `data` (older kernels)."""
    for part in (content.get("transient"), content.get("data")):
        event = part.get(EVENT_MIME) if isinstance(part, dict) else None
        if isinstance(event, dict):
            return event
    return None
