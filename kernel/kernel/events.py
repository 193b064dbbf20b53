"""The events the kernel publishes into a cell (iopub display_data, MIME protocol.EVENT_MIME).

Each is a JSON object with `event`, `execution`, `elapsed` and a one-line
`message` a human understands (also sent as text/plain).  Documented in
docs/protocol.md.
"""

from __future__ import annotations

import time

from .. import protocol
from ..frames import Frame, as_dicts, describe
from ..runtime.execution import Execution


def _base(kind: str, execution: Execution, message: str) -> dict:
    return {
        "event": kind,
        "execution": execution.msg_id,
        "elapsed": round(execution.elapsed(), 4),
        "time": time.time(),
        "message": message,
    }


def interrupt(execution: Execution) -> dict:
    state = execution.cancel
    event = _base(protocol.EVENT_INTERRUPT, execution, f"interrupt sent ({state.reason}), interrupt #{state.interrupts_sent}")
    event.update(reason=state.reason, interrupts_sent=state.interrupts_sent)
    return event


def runaway(execution: Execution, reason: str, frames: list[Frame], *, interrupting: bool) -> dict:
    budget = execution.budgets.wall if reason == protocol.REASON_WALL_BUDGET else execution.budgets.quiet
    what = "ran past its wall budget" if reason == protocol.REASON_WALL_BUDGET else "was silent past its quiet budget"
    then = "interrupting it once" if interrupting else "warning only (on_runaway=warn)"
    event = _base(protocol.EVENT_RUNAWAY, execution, f"runaway: the cell {what} of {budget:g} s at {describe(frames)}; {then}")
    event.update(reason=reason, budget=budget, action="interrupt" if interrupting else "warn", stack=as_dicts(frames))
    return event


def unresponsive(execution: Execution, frames: list[Frame], grace: float) -> dict:
    message = (
        f"interrupt did not stop the cell within {grace:g} s; it is still running at {describe(frames)}. "
        "The kernel will not interrupt it again: restart the kernel to stop it."
    )
    event = _base(protocol.EVENT_UNRESPONSIVE, execution, message)
    event.update(state=protocol.STATE_UNRESPONSIVE, stack=as_dicts(frames))
    return event


def abandoned(execution: Execution, frames: list[Frame], grace: float) -> dict:
    message = (
        f"the exec thread ignored the interrupt for {grace:g} s (blocked at {describe(frames)}); "
        "it was abandoned and replaced by a new exec thread; your variables are kept"
    )
    event = _base(protocol.EVENT_ABANDONED, execution, message)
    event.update(stack=as_dicts(frames))
    return event


def dumped(execution: Execution, frames: list[Frame], path: str) -> dict:
    message = f"stack dumped while the kernel was unresponsive (GIL held): it was at {describe(frames)}"
    event = _base(protocol.EVENT_STACK, execution, message)
    event.update(stack=as_dicts(frames), dump_file=path)
    return event
