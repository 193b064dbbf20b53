"""One cell's run under the policy: the loop that watches it, its one interrupt, and how the run ends
(replied: ok, error or interrupted; escalated to a restart; or died).

Every wait is bounded, and the process is checked every POLL seconds, so a
dead or restarted kernel never leaves the caller waiting.
"""

from __future__ import annotations

import signal
import threading
import time

from .. import frames as fr
from .. import last_cell
from ..pids import process_running
from ..protocol import (
    EVENT_INTERRUPT,
    EVENT_MIME,
    EVENT_RUNAWAY,
    EVENT_STARTED,
    EVENT_UNRESPONSIVE,
    KEY,
    REASON_MEMORY_BUDGET,
    REASON_SHUTDOWN,
    Status,
)
from ..words import plural
from .link import InterruptSent, describe
from .outputs import OutputCollector
from .policy import CellPlan, Policy
from .processes import describe_exit
from .result import CellResult
from .texts import memory_text
from .tripwire import Tripwire
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
# After an interrupt from outside, how long to watch for the kernel's shutdown_reply before calling
# the cell interrupted.
OUTSIDE_SETTLE = 0.5
# When the kernel enforces the budgets itself, the client trips this much later, so the kernel acts first.
KERNEL_SLACK = 0.3


class CellRun:
    """The state of one cell's run (one object per run keeps the loop readable)."""

    def __init__(self, policy: Policy, plan: CellPlan, manual: threading.Event, watch: CellWatch | None = None):
        self.policy = policy
        self.watch = watch if watch is not None else CellWatch()
        self.link = policy.link
        self.plan = plan
        self.manual = manual
        self.clock = policy.clock
        self.collector = OutputCollector(policy.registry, max_output_bytes=policy.max_output_bytes)
        self.tripwire = Tripwire(
            plan.wall_budget,
            plan.quiet_budget,
            clock=self.clock,
            busy=True,
            slack=KERNEL_SLACK if plan.kernel_enforces else 0.0,
        )
        self.result = CellResult(
            status="ok",
            source=plan.source,
            cell_id=plan.cell_id,
            cell_key=plan.cell_key,
            attempt=plan.attempt,
            budgets={
                "wall_budget": plan.wall_budget,
                "quiet_budget": plan.quiet_budget,
                "memory_budget": plan.memory_budget,
            },
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
        self._send()
        last_alive = -1.0
        while True:
            now = self.clock()
            if self._settled(now):
                return self._replied()
            if now - last_alive >= POLL:
                last_alive = now
                if not self.link.is_alive():
                    return self._died(None)
            ended = self._apply_policy(now)
            if ended is not None:
                return ended
            for channel, msg in self.link.poll(self._timeout(now)):
                died = self._handle(channel, msg)
                if died is not None:
                    return self._died(died)

    def _send(self) -> None:
        """Note what a death would be judged against, send the cell, and start its clocks and its watch."""
        self.dump_since = time.time()
        pid = self.link.pid
        if self.link.local and pid:
            self.death_baseline = last_cell.baseline(pid)
        self.msg_id = self.link.execute(self.plan.source, cell_id=self.plan.cell_id, metadata=self.plan.kernel_metadata)
        self.tripwire.start()
        watch = self.watch
        watch.msg_id, watch.started, watch.last_output = self.msg_id, self.tripwire.started, self.tripwire.started
        watch.outputs, watch.actions = self.collector.outputs, self.result.actions  # the lists the result will hold

    def _settled(self, now: float) -> bool:
        """The reply came, and the cell's last outputs with it (its idle status, or IDLE_AFTER_REPLY later)."""
        if self.reply is None:
            return False
        since_reply = now - (self.reply_at or now)
        if not self.idle and since_reply <= IDLE_AFTER_REPLY:
            return False
        # An interrupt we did not send may be the server shutting the kernel down: look a moment longer.
        return not (self._stopped_from_outside() and since_reply < OUTSIDE_SETTLE)

    def _apply_policy(self, now: float) -> CellResult | None:
        """Before the reply: trip on a budget or the caller's interrupt, escalate when due;
        the result if the run ends here."""
        if self.reply is not None:
            return None
        if self.trip is None and self.plan.kernel_enforces and not self.probed:
            self._probe_when_due(now)
        if self.trip is None:
            self._check_trip(now)
            if self.trip is not None and self.escalate_at is None:
                return self._escalate("the cell already used its one interrupt, so it is not interrupted again")
        if self.escalate_at is not None and now >= self.escalate_at:
            return self._escalate(self._no_reply_text())
        if self.trip is None:
            self._refresh_status(now)
        return None

    def _check_trip(self, now: float) -> None:
        """The caller's interrupt (AgentKernel.interrupt) or a budget the tripwire says is over."""
        if self.manual.is_set():
            self.manual.clear()
            self.tripwire.tripped, self.tripwire.tripped_at = "manual", now
            self._tripped("manual")
            return
        reason = self.tripwire.check()
        if reason is not None:
            self._tripped(reason)

    def _probe_when_due(self, now: float) -> None:
        """At the budget itself, one status request: no answer means the GIL is held and the kernel's
        own watchdog cannot act, so the client interrupts now instead of after its slack."""
        reason = self.tripwire.due()
        if reason is None:
            return
        self.probed = True
        if self.kernel_interrupted or self.link.cancel_status(timeout=0.2) is not None:
            return
        self.tripwire.tripped, self.tripwire.tripped_at = reason, now
        self._tripped(reason, wedged=True)

    def _timeout(self, now: float) -> float:
        waits = [POLL]
        if self.plan.kernel_enforces and not self.probed and self.reply is None:
            due = self.tripwire.due_in()
            if due is not None:
                waits.append(due + 0.005)
        nxt = self.tripwire.next_check_in()
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

    # -- the kernel's messages --

    def _handle(self, channel: str, msg: dict) -> str | None:
        """Apply one message; a sentence if it shows the kernel was restarted or shut down under us."""
        parent = (msg.get("parent_header") or {}).get("msg_id")
        msg_type = msg.get("msg_type") or msg["header"]["msg_type"]
        if channel == "shell":
            if parent == self.msg_id and msg_type == "execute_reply" and self.reply is None:
                self._take_reply(msg)
            return None
        if channel != "iopub":
            return None
        if msg_type == "shutdown_reply":
            return (
                "the kernel was shut down while the cell ran (its server deleted or culled it, "
                "the server stopped, or another client stopped it)"
            )
        if msg_type == "status":
            return self._kernel_status(msg, parent)
        if parent == self.msg_id:
            self._cell_message(msg, msg_type)
        return None

    def _take_reply(self, msg: dict) -> None:
        """The cell's execute_reply (its last outputs may still follow, up to its idle status)."""
        self.reply, self.reply_at = msg, self.clock()
        saves = ((msg.get("metadata") or {}).get(KEY) or {}).get("checkpoint")
        if saves:
            self.link.checkpoint_saved(latest_saved(saves))  # the kernel saved around the cell (before / autosave)

    def _kernel_status(self, msg: dict, parent: str | None) -> str | None:
        """A status message: the cell's idle, or a sentence when the kernel was restarted or died under the cell."""
        state = msg["content"].get("execution_state")
        if state == "starting" and msg["header"].get("session") != self.link.session_id:
            return "the kernel was restarted by its owner while the cell ran (a new kernel announced itself)"
        if state in SERVER_SAYS and not parent:
            return SERVER_SAYS[state]
        if parent == self.msg_id and state == "idle":
            self.idle = True
        return None

    def _cell_message(self, msg: dict, msg_type: str) -> None:
        """An iopub message of this cell: its execution count, an output (the quiet clock), or our kernel's event."""
        if msg_type == "execute_input" and self.result.execution_count is None:
            # A wedged cell has no reply to say it
            self.result.execution_count = (msg.get("content") or {}).get("execution_count")
        event = kernel_event(msg.get("content") or {})
        if self.collector.add(msg) and event is None:
            self.tripwire.output_seen()  # the kernel's own events are not the cell speaking
            self.watch.last_output = self.tripwire.last_output
        if isinstance(event, dict):
            self._kernel_event(event)

    def _kernel_event(self, event: dict) -> None:
        kind = event.get("event")
        if kind == EVENT_STARTED:
            return  # the budgets a front end counts down: this client knows them already
        self.result.events.append(event)
        if kind == EVENT_INTERRUPT or (kind == EVENT_RUNAWAY and event.get("action") == "interrupt"):
            self.kernel_interrupted = True
            if self.kernel_interrupt_at is None:
                self.kernel_interrupt_at = self.clock()
                if isinstance(event.get("elapsed"), (int, float)):
                    self.kernel_interrupt_elapsed = float(event["elapsed"])
            if kind == EVENT_RUNAWAY and event.get("reason") == REASON_MEMORY_BUDGET and self.trip is None:
                self._kernel_tripped(
                    REASON_MEMORY_BUDGET, str(event.get("message") or "the kernel's memory budget tripped")
                )
        elif kind == EVENT_UNRESPONSIVE and self.escalate_at is not None:
            # The kernel says its grace passed with the cell still running: no reason to wait longer.
            self.escalate_at = min(self.escalate_at, self.clock())
        if isinstance(event.get("stack"), list) and event["stack"]:
            self.kernel_stack = event["stack"]

    # -- a trip: interrupt once --

    def _tripped(self, reason: str, *, wedged: bool = False) -> None:
        self.trip = reason
        why = self.tripwire.why(reason)
        self.result.reason, self.result.reason_text = reason, why
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
        wait = self.policy.grace() + self.link.link_delay()  # the reply crosses the link too
        if not self.interrupt.wedged:
            wait += MARGIN  # our kernel reports an unstopped cell at its grace; give the report time to arrive
        self.escalate_at = self.interrupt.sent_at + wait
        self.result.actions.append(
            {
                "action": "interrupt",
                "why": reason,
                "why_text": why,
                "via": self.interrupt.via,
                "at": round(self.interrupt.sent_at - self.tripwire.started, 4),
                "outcome": None,
            }
        )

    def _kernel_tripped(self, reason: str, why: str) -> None:
        """A budget only the kernel measures (memory) tripped and the kernel interrupted: the policy's one interrupt,
        escalated to a restart if the cell still runs a grace period later."""
        self.trip = reason
        self.result.reason, self.result.reason_text = reason, why
        self.interrupt = InterruptSent(self.kernel_interrupt_at or self.clock(), "kernel")
        self.escalate_at = self.interrupt.sent_at + self.policy.grace() + MARGIN + self.link.link_delay()
        self.result.actions.append(
            {"action": "interrupt", "why": reason, "why_text": why, "via": "kernel",
             "at": round(self.interrupt.sent_at - self.tripwire.started, 4), "outcome": None}
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
            return (
                "the kernel did not answer the interrupt on its control channel (one C call holds the GIL) and the "
                f"cell did not stop within {waited:.1f} s"
            )
        if self.interrupt.via == "none":
            return "the kernel could not be interrupted (no control channel answer and no signal path)"
        return f"the interrupt did not stop the cell within {waited:.1f} s (it was swallowed or ignored)"

    # -- the endings: replied, escalated to a restart, or died --

    def _replied(self) -> CellResult:
        """The kernel replied: ok or error, or interrupted (by this client, by the kernel's budgets,
        or from outside)."""
        reply = self.reply
        assert reply is not None
        content = reply.get("content") or {}
        meta = (reply.get("metadata") or {}).get("cancelkernel") or {}
        self._read_reply(content)
        self._finish_outputs()
        if meta.get("interrupted") and meta.get("reason") == REASON_SHUTDOWN:
            # Someone shut the kernel down under the cell (its server deleted or culled it): it is gone.
            return self._died(
                "the kernel was shut down while the cell ran (its server deleted or culled it, "
                "the server stopped, or another client stopped it)"
            )
        kernel_stopped = bool(meta.get("interrupted")) and meta.get("reason") != "deadline"
        if self.interrupt is None and not kernel_stopped:
            self.result.status = "ok" if content.get("status") == "ok" else "error"
            self.result.state = "intact"
            return self.result
        return self._interrupted(content.get("status"), meta, kernel_stopped)

    def _read_reply(self, content: dict) -> None:
        """What every reply tells: when it came, the execution count, the error."""
        result = self.result
        result.elapsed = round((self.reply_at or self.clock()) - self.tripwire.started, 4)
        result.execution_count = content.get("execution_count")
        status = content.get("status")
        if status == "error":
            result.error_name, result.error_value = content.get("ename"), content.get("evalue")
            result.traceback = list(content.get("traceback") or [])
        elif status == "aborted":
            result.error_name, result.error_value = "Aborted", "the kernel aborted the request without running it"

    def _interrupted(self, status: str | None, meta: dict, kernel_stopped: bool) -> CellResult:
        """The reply to an interrupted cell: why, how soon it stopped, where;
        a restart if its abandoned thread still runs."""
        result = self.result
        if self.interrupt is None:
            self._kernel_reason(meta)
        elif meta.get("reason") == REASON_MEMORY_BUDGET:
            result.memory, result.reason_text = meta.get("memory"), memory_text(meta.get("memory") or {})
        latency = self._interrupt_latency(meta, kernel_stopped)
        if meta.get("abandoned_thread") and not self.policy.accept_abandoned_threads and self._abandoned_alive(meta):
            return self._escalate(
                f"the interrupt did not stop the cell: the kernel abandoned its exec thread "
                f"({meta['abandoned_thread']}), which is still running the cell's code"
            )
        found = fr.from_dicts(meta.get("stack") or self.kernel_stack) or fr.parse_ipython_traceback(result.traceback)
        result.stack = _cell_stack(found, self.plan.source, result.execution_count)
        outcome = self._interrupt_outcome(status, kernel_stopped, latency)
        if result.actions:
            result.actions[-1]["outcome"] = outcome
            result.actions[-1]["latency"] = result.interrupt_latency
        return result

    def _interrupt_latency(self, meta: dict, kernel_stopped: bool) -> float:
        """Seconds from the interrupt to the reply (on the kernel's clock when the kernel interrupted);
        kept in the result when known."""
        sent = self.interrupt.sent_at if self.interrupt else (self.kernel_interrupt_at or self.tripwire.started)
        latency = (self.reply_at or self.clock()) - sent
        kernel_sent = (
            meta.get("interrupted_after")
            if isinstance(meta.get("interrupted_after"), (int, float))
            else self.kernel_interrupt_elapsed
        )
        if self.interrupt is None and kernel_sent is not None and isinstance(meta.get("elapsed"), (int, float)):
            latency = max(0.0, float(meta["elapsed"]) - float(kernel_sent))  # both on the kernel's clock
        if (
            self.interrupt is not None
            or self.kernel_interrupt_at is not None
            or (kernel_stopped and kernel_sent is not None)
        ):
            self.result.interrupt_latency = round(latency, 4)
        return latency

    def _interrupt_outcome(self, status: str | None, kernel_stopped: bool, latency: float) -> str:
        """The result's status and state after an interrupt, and what the interrupt did, in words."""
        result = self.result
        if status == "ok" and not kernel_stopped:
            result.status, result.state = "ok", "intact"
            return "the cell finished on its own before the interrupt took effect"
        result.status, result.state = "interrupted", "suspect"
        took = f"{latency * 1000:.0f} ms" if latency < 1 else f"{latency:.2f} s"
        outcome = f"the cell stopped {took} after the interrupt"
        where = fr.stopped_at(fr.from_dicts(result.stack), readable=True)
        if where:
            outcome += f", at {where}"
        return outcome

    def _kernel_reason(self, meta: dict) -> None:
        """The kernel stopped the cell on its own (its budgets) or someone else interrupted it."""
        result, reason = self.result, meta.get("reason")
        if reason == REASON_MEMORY_BUDGET:
            result.reason, result.memory = reason, meta.get("memory")
            result.reason_text = memory_text(meta.get("memory") or {})
            via = "kernel"
        elif reason in ("wall_budget", "quiet_budget"):
            budget = (meta.get("budgets") or {}).get(reason) or result.budgets.get(reason)
            what = (
                "ran past its wall budget"
                if reason == "wall_budget"
                else "printed nothing for longer than its quiet budget"
            )
            result.reason = reason
            result.reason_text = (
                f"the cell {what} of {budget:g} s; the kernel interrupted it"
                if budget
                else f"the kernel stopped the cell ({reason})"
            )
            via = "kernel"
        else:
            result.reason = "manual"
            result.reason_text = (
                f"an interrupt from outside this client stopped the cell ({reason or 'unknown source'})"
            )
            via = "external"
        result.actions.append(
            {
                "action": "interrupt",
                "why": result.reason,
                "why_text": result.reason_text,
                "via": via,
                "at": None,
                "outcome": None,
            }
        )

    def _forget_running_record(self) -> None:
        """This client is about to kill the kernel on purpose: stop it first, then drop its record,
        so the next kernel reports no death."""
        path, pid = self.link.info.running_record, self.link.pid
        if not (self.link.local and path and pid):
            return
        if self.link.signal(signal.SIGKILL):
            deadline = time.monotonic() + 2.0
            while process_running(pid) and time.monotonic() < deadline:
                time.sleep(0.01)
        last_cell.remove(path)

    def _death(self) -> dict | None:
        """Why a local kernel died, with evidence: its running-cell record,
        else the OOM counts taken when the cell began."""
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
        self.result.outputs = self.collector.outputs
        self.result.output_bytes_dropped = self.collector.dropped

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
            signalled = self.link.signal(signal.SIGUSR1)
            if signalled:
                time.sleep(0.1)
                candidates.append(fr.as_dicts(fr.dumped_stack(self.link.read_dump(self.dump_since))))
        chosen = next((c for c in candidates if _shows_cell(c)), None) or next((c for c in candidates if c), None)
        if not chosen and not self.link.local:
            self.result.notes.append(
                "no stack of the hung cell: the kernel is remote, and its stack dump file and SIGUSR1 are on the "
                "server's machine"
            )
        return _cell_stack(fr.from_dicts(chosen), self.plan.source, self.result.execution_count)

    def _escalate(self, why_restart: str) -> CellResult:
        """The interrupt failed (or is not allowed): take the stack, restart, restore."""
        result = self.result
        result.elapsed = round(self.clock() - self.tripwire.started, 4)
        if result.actions and result.actions[-1]["outcome"] is None:
            result.actions[-1]["outcome"] = "no effect: " + why_restart
        decided = time.monotonic()
        result.stack = self._stack_when_stuck()
        self._finish_outputs()
        self._forget_running_record()
        self._restart_and_restore("restarted", result.reason or "wall_budget", why_restart, decided=decided)
        return result

    def _died(self, why: str | None) -> CellResult:
        result = self.result
        result.elapsed = round(self.clock() - self.tripwire.started, 4)
        if why is None and not self.link.local:
            why = self.link.lifecycle.died_text("while running the cell")  # what the server said, no exit code
        if why is None:
            code = self.link.exit_code()
            why = "the kernel process died while running the cell" + describe_exit(code)
            death = self._death()  # read (and dropped) whatever the exit: the next kernel must not report it again
            # Only a kill can be the OOM killer's: an exit code of its own needs no evidence.
            if death is not None and (code is None or code == -signal.SIGKILL):
                result.cause = death["cause"]
                why += (
                    f": {death['message']} ({death['evidence']})"
                    if death["cause"] == last_cell.CAUSE_OOM
                    else f" ({death['evidence']})"
                )
        if result.actions and result.actions[-1]["outcome"] is None:
            result.actions[-1]["outcome"] = "the kernel died before the cell stopped"
        result.reason, result.reason_text = "died", why
        decided = time.monotonic()
        self._finish_outputs()
        self._restart_and_restore("died", "died", why, dead=True, decided=decided)
        return result

    def _restart_and_restore(
        self, status: Status, why: str, why_text: str, *, decided: float, dead: bool = False
    ) -> None:
        result = self.result
        started = self.clock()
        restarting = time.monotonic()
        how = self.link.restart(dead=dead)
        restarted = self.clock()
        restored = self.policy.restore()
        done = time.monotonic()
        # Seconds since the policy decided to restart, one step at a time (README "Recovery").
        result.timings = {
            "stack_taken": round(restarting - decided, 4),
            "old_kernel_gone": round(how["old_gone"] - decided, 4) if "old_gone" in how else None,
            "new_kernel_ready": round(how["ready"] - decided, 4),
            "restored": round(done - decided, 4),
            "spare": bool(how.get("spare")),
        }
        if how.get("note"):
            result.notes.append(str(how["note"]))
        result.status = status
        result.state = restored.state
        result.restored, result.restore_skipped, result.checkpoint = (
            restored.names,
            restored.skipped,
            restored.checkpoint,
        )
        result.lost_reason = restored.note if restored.missing else None
        outcome = "new kernel running"
        if restored.state == "restored":
            outcome += f"; restored {plural(len(restored.names), 'name')} from checkpoint {restored.checkpoint!r}"
            if restored.skipped:
                outcome += f", skipped {len(restored.skipped)}"
        else:
            outcome += "; state lost" + (f" ({restored.note})" if restored.note else "")
        result.actions.append(
            {
                "action": "restart",
                "why": why,
                "why_text": why_text,
                "via": "restart",
                "at": round(started - self.tripwire.started, 4),
                "outcome": outcome,
                "took": round(self.clock() - started, 4),
                "restart_took": round(restarted - started, 4),
                "restore_took": round(self.clock() - restarted, 4),
                "spare": bool(how.get("spare")),
            }
        )
        result.kernel["pid"] = self.link.info.pid


def latest_saved(saves: object) -> str | None:
    """The checkpoint a kernel saved last around a cell (execute_reply metadata cancelkernel.checkpoint), if any."""
    if not isinstance(saves, dict):
        return None
    for when in ("autosave", "before"):  # autosave runs after the cell, so it is the later one
        save = saves.get(when)
        if isinstance(save, dict) and save.get("status") == "ok" and isinstance(save.get("name"), str):
            return str(save["name"])
    return None


def kernel_event(content: dict) -> dict | None:
    """Our kernel's event in an iopub message: in `transient` (it is never saved into a notebook),
    or in `data` (older kernels)."""
    for part in (content.get("transient"), content.get("data")):
        event = part.get(EVENT_MIME) if isinstance(part, dict) else None
        if isinstance(event, dict):
            return event
    return None


def _shows_cell(frames: list[dict] | None) -> bool:
    return any(f.is_cell for f in fr.from_dicts(frames))


def _cell_stack(frames: list[fr.Frame], source: str, count: int | None) -> list[dict] | None:
    """Frames from the outermost cell frame inwards, as result dicts (None: no stack);
    `count`: the cell's execution count."""
    kept = fr.fill_cell_source(frames, source, f"Cell In[{count}]" if count else "cell")
    return fr.as_dicts(kept) or None
