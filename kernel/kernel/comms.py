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
  We publish the pair, and after any comm message's idle while a cell still
  runs we say busy again for that cell, so a server and JupyterLab's status bar
  keep showing the kernel busy.
"""

from __future__ import annotations

import typing as t

from . import upstream

COMM_MESSAGES = frozenset({"comm_open", "comm_msg", "comm_close"})

if t.TYPE_CHECKING:
    from ipykernel.ipkernel import IPythonKernel as _Kernel
else:
    _Kernel = object


class CommStatus(_Kernel):
    """busy/idle for comm messages handled beside a running cell (see the module's docstring)."""

    _parents: dict[str, dict]
    runtime: t.Any

    async def dispatch_shell(self, msg: t.Any, /, subshell_id: str | None = None, *, concurrent: bool = False) -> None:
        if not concurrent:
            await super().dispatch_shell(msg, subshell_id=subshell_id)
            return
        parent = self._comm_parent(msg)
        if parent is not None:
            self._publish_status("busy", "shell", parent)
        try:
            await super().dispatch_shell(msg, subshell_id=subshell_id, concurrent=True)
        finally:
            if parent is not None:
                self._publish_status("idle", "shell", parent)

    def _comm_parent(self, msg: t.Any) -> dict | None:
        """The message's header (for its status), if it is a comm message; None otherwise."""
        if self.session is None:
            return None
        try:
            _, frames = self.session.feed_identities(msg, copy=False)
            parent = self.session.deserialize(frames, content=False, copy=False)
        except Exception:  # noqa: BLE001 - dispatch_shell itself logs a bad message
            return None
        return parent if parent["header"].get("msg_type") in COMM_MESSAGES else None

    def _publish_status(self, status: str, channel: str, parent: dict | None = None) -> None:
        super()._publish_status(status, channel, parent)
        if status == "idle" and channel == "shell" and upstream.parent_type(self, channel, parent) in COMM_MESSAGES:
            self._busy_again()

    def _busy_again(self) -> None:
        """A comm message's idle went out while a cell runs: the kernel is still busy with that cell."""
        runtime = getattr(self, "runtime", None)
        running = runtime.core.running() if runtime is not None else []
        for execution in running:
            cell_parent = self._parents.get(execution.msg_id)
            if cell_parent is not None:
                super()._publish_status("busy", "shell", cell_parent)
                return
