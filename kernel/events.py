"""The events the kernel publishes into a cell (iopub display_data, MIME EVENT_MIME).

Each is a JSON object with `event`, `execution`, `elapsed` and a one-line
`message` a human understands (also sent as text/plain).  Documented in
docs/protocol.md.
"""

from __future__ import annotations

import time

from . import stacks
from .cancel import Execution


def _base(kind: str, execution: Execution, message: str) -> dict:
    return {
        "event": kind,
        "execution": execution.msg_id,
        "elapsed": round(execution.elapsed(), 4),
        "time": time.time(),
        "message": message,
    }


def _where(frames: list[stacks.Frame]) -> str:
    user = next((f for f in reversed(frames) if f.user), frames[-1] if frames else None)
    if user is None:
        return "an unknown place"
    return f"{user.label}, line {user.lineno}" + (f" ({user.line})" if user.line else "")


def interrupt(execution: Execution) -> dict:
    event = _base("interrupt", execution, f"interrupt sent ({execution.cancel_reason}), interrupt #{execution.interrupts_sent}")
    event["reason"] = execution.cancel_reason
    event["interrupts_sent"] = execution.interrupts_sent
    return event


def runaway(execution: Execution, watched: object, reason: str, frames: list[stacks.Frame], *, interrupting: bool) -> dict:
    budget = getattr(watched, reason)
    what = "ran past its wall budget" if reason == "wall_budget" else "was silent past its quiet budget"
    then = "interrupting it once" if interrupting else "warning only (on_runaway=warn)"
    message = f"runaway: the cell {what} of {budget:g} s at {_where(frames)}; {then}"
    event = _base("runaway", execution, message)
    event.update(reason=reason, budget=budget, action="interrupt" if interrupting else "warn", stack=stacks.as_dicts(frames))
    return event


def unresponsive(execution: Execution, frames: list[stacks.Frame], grace: float) -> dict:
    message = (
        f"interrupt did not stop the cell within {grace:g} s; it is still running at {_where(frames)}. "
        "The kernel will not interrupt it again: restart the kernel to stop it."
    )
    event = _base("unresponsive", execution, message)
    event.update(state="unresponsive-to-interrupt", stack=stacks.as_dicts(frames))
    return event


def abandoned(execution: Execution, frames: list[stacks.Frame], grace: float) -> dict:
    message = (
        f"the exec thread ignored the interrupt for {grace:g} s (blocked at {_where(frames)}); "
        "it was abandoned and replaced by a new exec thread; your variables are kept"
    )
    event = _base("abandoned", execution, message)
    event.update(stack=stacks.as_dicts(frames))
    return event


def dumped(execution: Execution, frames: list[stacks.Frame], path: str) -> dict:
    message = f"stack dumped while the kernel was unresponsive (GIL held): it was at {_where(frames)}"
    event = _base("stack", execution, message)
    event.update(stack=stacks.as_dicts(frames), dump_file=path)
    return event
