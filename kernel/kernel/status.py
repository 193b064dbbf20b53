"""The busy/idle the kernel publishes: one rule, for what a server and JupyterLab show.

Every status ipykernel (or comms.py) publishes passes `BusyIdle.statuses`
(CancelKernel._publish_status), which says what goes out instead:

- nothing around our own control requests (`cancel_status_request`): Jupyter
  Server takes an idle whose parent is not in its list of untracked requests as
  the kernel's state, so polling the status would make a busy kernel look idle
  (docs/design.md, "Decisions": the server's view of busy/idle);
- after a comm message's idle while a cell still runs, busy again for that
  cell: widgets answered beside it, and the kernel is still busy (comms.py).

`MainShellState` remembers what went out for the main shell: kernel_info_reply's
`execution_state` (the JEP pre-proposal, jupyter/enhancement-proposals#132), so a
client that connects to a running kernel learns whether a cell runs.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import protocol
from ..runtime.execution import Execution
from .comms import COMM_MESSAGES

# Control requests of ours that must not move the kernel's busy/idle state as a server sees it.
OWN_CONTROL_REQUESTS = frozenset({protocol.CANCEL_STATUS_REQUEST})

# Answered by the main shell while nothing else runs there: its own busy is not the kernel's.
KERNEL_INFO_REQUEST = "kernel_info_request"

# One status to publish: (execution_state, channel, parent request).
Status = tuple[str, str, "dict | None"]


class BusyIdle:
    """Which statuses go out for one the kernel is asked to publish."""

    def __init__(self, running: Callable[[], list[Execution]], parents: dict[str, dict]):
        self._running = running  # the executions running now, parent shell first
        self._parents = parents  # an execution's msg_id -> its execute_request

    def statuses(self, status: str, channel: str, parent: dict | None) -> list[Status]:
        """What to publish for `status` on `channel` about `parent` (the request it is for)."""
        msg_type = _msg_type(parent)
        if channel == "control" and msg_type in OWN_CONTROL_REQUESTS:
            return []
        out: list[Status] = [(status, channel, parent)]
        if status == "idle" and channel == "shell" and msg_type in COMM_MESSAGES:
            cell = self._running_cell()
            if cell is not None:
                out.append(("busy", "shell", cell))
        return out

    def _running_cell(self) -> dict | None:
        """The request of a cell still running (the parent shell's first), if any."""
        for execution in self._running():
            parent = self._parents.get(execution.msg_id)
            if parent is not None:
                return parent
        return None


def _msg_type(parent: dict | None) -> str | None:
    header = parent.get("header") if isinstance(parent, dict) else None
    return header.get("msg_type") if isinstance(header, dict) else None


class MainShellState:
    """The main shell's execution state as it last published it ("busy" or "idle"), for kernel_info_reply."""

    def __init__(self) -> None:
        # Started: a kernel that answers kernel_info takes execute requests, so "starting" is never reported.
        self._state = protocol.KERNEL_IDLE
        self._about: str | None = None  # the request type of the last status

    def published(self, status: str, channel: str, parent: dict | None) -> None:
        """A status went out on IOPub: the main shell's (shell channel, no subshell_id) is remembered."""
        if channel != "shell" or status not in (protocol.KERNEL_BUSY, protocol.KERNEL_IDLE) or _subshell_id(parent):
            return
        self._state, self._about = status, _msg_type(parent)

    def execution_state(self) -> str:
        """busy while the main shell handles a request (a cell running, above all), else idle.

        A kernel_info_request the main shell answers is not counted: while it answers one, nothing else runs there.
        """
        if self._state == protocol.KERNEL_BUSY and self._about == KERNEL_INFO_REQUEST:
            return protocol.KERNEL_IDLE
        return self._state


def _subshell_id(parent: dict | None) -> str | None:
    header = parent.get("header") if isinstance(parent, dict) else None
    return header.get("subshell_id") if isinstance(header, dict) else None
