"""Test-only: CancelKernel with the checkpoint wiring of docs/checkpoints.md, until kernel.py has it.

The tests launch it with `--CancelKernelApp.kernel_class=checkpoint_wired_kernel.CheckpointWiredKernel`
(this directory on PYTHONPATH) only while `CancelKernel` has no `checkpoint_request`
of its own; once the kernel is wired, they use the real thing.  The lines below
are the ones docs/checkpoints.md asks kernel.py to add.
"""

from __future__ import annotations

import typing as t

from ipykernel.jsonutil import json_clean

from cancelkernel import checkpoint_magics, protocol
from cancelkernel.checkpoint_settings import CheckpointSettings
from cancelkernel.checkpoint_shell import handle_checkpoint_request, maybe_autosave, save_before, wants_checkpoint_before
from cancelkernel.kernel import CancelKernel


class CheckpointWiredKernel(CancelKernel):
    msg_types = [*CancelKernel.msg_types, "checkpoint_request"]

    def __init__(self, **kwargs: t.Any):
        super().__init__(**kwargs)
        self.checkpoint_settings = CheckpointSettings(parent=self)
        checkpoint_magics.register(self.shell, settings=self.checkpoint_settings)

    @property
    def kernel_info(self) -> dict:
        info = super().kernel_info
        info[protocol.KEY]["features"].append("checkpoints")
        return info

    async def checkpoint_request(self, stream: t.Any, ident: t.Any, parent: dict) -> None:
        """Save, restore, list or drop checkpoints (shell channel, so never while a cell runs)."""
        if not self.session:
            return
        reply = handle_checkpoint_request(self.shell, parent.get("content") or {})
        self.session.send(stream, "checkpoint_reply", json_clean(reply), parent, ident=ident)

    async def do_execute(  # type: ignore[override]
        self,
        code: str,
        silent: bool,
        store_history: bool = True,
        user_expressions: dict | None = None,
        allow_stdin: bool = False,
        *,
        cell_meta: dict | None = None,
        cell_id: str | None = None,
    ) -> dict:
        before = save_before(self.shell, self.checkpoint_settings) if self._checkpoint_first(code, cell_meta) else None
        reply = await super().do_execute(
            code, silent, store_history, user_expressions, allow_stdin, cell_meta=cell_meta, cell_id=cell_id
        )
        autosaved = None if silent else maybe_autosave(self.shell, self.checkpoint_settings, reply.get("status"))
        extra = getattr(self, "_execution_metadata", None)
        if extra is not None and (before or autosaved):
            extra["checkpoint"] = {"before": before, "autosave": autosaved}
        return reply

    def _checkpoint_first(self, code: str, cell_meta: dict | None) -> bool:
        """%%budget checkpoint=before or metadata cancelkernel.checkpoint = "before" (parsed by kernel.py's directives)."""
        directives = getattr(self, "_directives", None)
        if directives is None:
            return wants_checkpoint_before(cell_meta)
        try:
            return directives(code, cell_meta).checkpoint == "before"
        except ValueError:
            return False  # a bad directive: kernel.py refuses the cell itself
