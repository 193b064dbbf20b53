"""Comm (widget) messages that arrive while a cell runs: where they run, and the busy/idle they owe.

Two rules, both found by driving ipywidgets in JupyterLab (tests/browser):

- **Route.** JupyterLab 4.4+ sends a comm message with the `subshell_id` it
  chose, so that widgets answer while a cell runs.  ipykernel 7.4 overrides that
  choice with the shell that last published on the comm (`_reply_subshell_for`),
  usually the parent shell whose cell made the widget, which is busy: the
  observer ran only after the cell.  We keep ipykernel's routing for a reply to
  a request the kernel sent (its id is pending) and otherwise honour the
  frontend's choice (`upstream.honour_frontend_subshell`).
- **Status.** A comm message that reaches a shell whose cell is running (worker
  mode, an awaiting cell) is dispatched "concurrently" with no busy/idle at all;
  ipywidgets then waits forever for that idle and never syncs the widget again.
  We publish the pair (`CommStatus`), and after any comm message's idle while a
  cell still runs we say busy again for that cell (status.py), so a server and
  JupyterLab's status bar keep showing the kernel busy.
"""

from __future__ import annotations

import typing as t
from collections.abc import Awaitable, Callable

from . import upstream

if t.TYPE_CHECKING:
    from jupyter_client.session import Session

COMM_MESSAGES = frozenset({"comm_open", "comm_msg", "comm_close"})

# Publishes a status (execution_state, channel, parent): the kernel's own, which applies the one rule (status.py).
PublishStatus = Callable[[str, str, "dict | None"], None]


class CommStatus:
    """busy/idle for comm messages dispatched beside a running cell (see the module's docstring)."""

    def __init__(self, session: Session | None, publish_status: PublishStatus):
        self._session = session
        self._publish_status = publish_status

    async def dispatch(self, msg: t.Any, dispatch: Callable[[], Awaitable[None]], *, concurrent: bool) -> None:
        """Run ipykernel's `dispatch` of `msg`; a comm message dispatched concurrently gets its busy/idle around it."""
        parent = self._comm_parent(msg) if concurrent else None
        if parent is None:
            await dispatch()
            return
        self._publish_status("busy", "shell", parent)
        try:
            await dispatch()
        finally:
            self._publish_status("idle", "shell", parent)

    def _comm_parent(self, msg: t.Any) -> dict | None:
        """The message without its content (the parent of its status), if it is a comm message; None otherwise."""
        parent = upstream.read_without_content(self._session, msg)
        return parent if parent is not None and parent.get("header", {}).get("msg_type") in COMM_MESSAGES else None
