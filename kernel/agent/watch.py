"""A live view of one running cell.

The run loop (run.py) writes a `CellWatch` as it goes: the execute_request's
msg_id, the outputs so far, when the cell last spoke, what the kernel says
about it (`cancel_status`, refreshed about once a second when asked for), the
interventions.  Another thread reads it: an MCP server answering "how is
that cell doing?" while `AgentKernel.run` is busy, or a progress line.
"""

from __future__ import annotations

import threading
import time
import typing as t
from dataclasses import dataclass, field

# How often the run loop asks our kernel for its status while a watch wants it.
STATUS_EVERY = 1.0


@dataclass
class CellWatch:
    """What is known about a running cell right now (written by the run loop, read by anyone)."""

    want_status: bool = False  # ask the kernel for cancel_status about once a second
    msg_id: str = ""
    started: float = field(default_factory=time.monotonic)
    last_output: float = field(default_factory=time.monotonic)
    outputs: list[dict] = field(default_factory=list)  # the same list the result will hold
    kernel_status: dict | None = None  # the execution part of the latest cancel_status_reply
    actions: list[dict] = field(default_factory=list)
    finished: threading.Event = field(default_factory=threading.Event)
    status_at: float = 0.0

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def seconds_since_output(self) -> float:
        return time.monotonic() - self.last_output

    def current_line(self) -> str | None:
        """Where the kernel last saw the cell: "Cell In[3]:2 (time.sleep(10))", if known."""
        status = self.kernel_status or {}
        where, line = status.get("where"), status.get("line")
        if not where:
            return None
        return f"{where} ({line})" if line else t.cast(str, where)

    def summary(self) -> dict[str, t.Any]:
        """A JSON-able snapshot for someone asking how the cell is doing."""
        status = self.kernel_status or {}
        return {
            "msg_id": self.msg_id or None,
            "elapsed": round(self.elapsed(), 3),
            "seconds_since_output": round(self.seconds_since_output(), 3),
            "outputs": len(self.outputs),
            "where": self.current_line(),
            "kernel_state": status.get("state"),
            "interrupts_sent": status.get("interrupts_sent", 0),
            "status_age": round(time.monotonic() - self.status_at, 3) if self.kernel_status else None,
            "actions": [a.get("action") for a in self.actions],
            "finished": self.finished.is_set(),
        }
