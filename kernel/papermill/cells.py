"""Papermill's side of each cell: its bookkeeping, its output echo and its error rules.

`PapermillHooks` plugs into the agent's notebook runner (agent/notebook.py)
and does what papermill's own nbclient engine does around a cell:
`nb_man.cell_start` / `cell_exception` / `cell_complete` (cell metadata, a
save after each cell, the progress bar), autosaves of a long cell's partial
outputs, and `--log-output` / `--stdout-file` / `--stderr-file` as outputs
arrive.  The error rules are nbclient's (allow_errors, allow_error_names,
force_raise_errors, the `raises-exception` tag), and a cell the agent had to
restart, or whose kernel died, gets an error output so that papermill's
final check raises PapermillExecutionError naming it.
"""

from __future__ import annotations

import logging
import typing as t

from ..agent.notebook import CellHooks, report_text
from ..agent.result import CellResult
from ..protocol import BUDGET_REASONS
from ..words import plural

# Outputs of a running cell are echoed and autosaved this often (seconds).
LIVE_EVERY = 0.25
# nbclient's tag for a cell whose error does not stop the notebook.
RAISES_EXCEPTION = "raises-exception"
# The error output's name for each way a cell ends without finishing (nbclient's names where they mean the same).
RESTART_ENAME = {"died": "DeadKernelError", "restarted": "CellTimeoutError", "interrupted": "CellTimeoutError"}


class ErrorRules:
    """When a failed cell stops the notebook: nbclient's options, and the agent's state after a restart."""

    def __init__(
        self,
        *,
        allow_errors: bool = False,
        allow_error_names: t.Iterable[str] = (),
        force_raise_errors: bool = False,
    ):
        self.allow_errors = bool(allow_errors)
        self.allow_error_names = set(allow_error_names or ())
        self.force_raise_errors = bool(force_raise_errors)

    def keeps_going(self, cell: t.Any, result: CellResult) -> bool:
        """Whether the cells after this one run (papermill still raises at the end for any error output)."""
        if result.status == "ok":
            return True
        if self.force_raise_errors:
            return False
        if result.status in ("restarted", "died"):
            # A new kernel with the checkpoint brought back can run the rest; an empty one cannot, unless told to.
            return self.allow_errors or result.state == "restored"
        tags = (cell.get("metadata") or {}).get("tags") or []
        return self.allow_errors or result.error_name in self.allow_error_names or RAISES_EXCEPTION in tags


def error_output(result: CellResult) -> dict[str, t.Any]:
    """The error output papermill's final check finds, for a cell that did not finish with an error of its own."""
    ename = RESTART_ENAME.get(result.status, "CellExecutionError")
    if result.status == "interrupted" and result.reason not in BUDGET_REASONS:
        ename = "KeyboardInterrupt"
    evalue = result.reason_text or f"the cell ended {result.status}"
    if result.status in ("restarted", "died"):
        restored = (
            f" ({plural(len(result.restored), 'name')} from checkpoint {result.checkpoint!r})"
            if result.restored
            else ""
        )
        evalue += f"; the kernel was restarted, state {result.state}{restored}"
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"]}


class OutputEcho:
    """--log-output and --stdout-file / --stderr-file: each output once, streams as their text grows."""

    def __init__(
        self, logger: logging.Logger, *, log_output: bool, stdout_file: t.Any = None, stderr_file: t.Any = None
    ):
        self.logger = logger
        self.log_output = log_output
        self.files = {"stdout": stdout_file, "stderr": stderr_file}
        self._seen: list[int] = []  # per output position: characters of a stream echoed, 1 for an echoed display

    @property
    def wanted(self) -> bool:
        return self.log_output or any(self.files.values())

    def reset(self) -> None:
        self._seen = []

    def echo(self, outputs: list[dict]) -> None:
        snapshot = list(outputs)  # the run loop appends to the list meanwhile
        if len(snapshot) < len(self._seen):  # a clear_output: start over
            self._seen = []
        self._seen.extend([0] * (len(snapshot) - len(self._seen)))
        for i, out in enumerate(snapshot):
            kind = out.get("output_type")
            if kind == "stream":
                text = str(out.get("text", ""))
                if len(text) < self._seen[i]:
                    self._seen[i] = 0
                if len(text) > self._seen[i]:
                    self._stream(str(out.get("name")), text[self._seen[i] :])
                    self._seen[i] = len(text)
            elif kind in ("display_data", "execute_result") and not self._seen[i]:
                self._seen[i] = 1
                plain = (out.get("data") or {}).get("text/plain")
                if self.log_output and plain is not None:
                    self.logger.info("".join(plain))

    def _stream(self, name: str, text: str) -> None:
        if self.log_output:
            # As papermill's nbclient engine does: stderr goes to the logger's warnings.
            (self.logger.warning if name == "stderr" else self.logger.info)(text)
        target = self.files.get(name)
        if target is not None:
            target.write(text)
            target.flush()


class PapermillHooks(CellHooks):
    """The agent's notebook runner, with papermill's bookkeeping and error rules around each cell."""

    def __init__(
        self,
        nb_man: t.Any,
        *,
        rules: ErrorRules,
        echo: OutputEcho,
        logger: logging.Logger,
        skip_tag: str = "skip-execution",
    ):
        super().__init__()
        self.nb_man = nb_man
        self.rules = rules
        self.echo = echo
        self.logger = logger
        self.skip_tag = skip_tag
        self._keep_going = True
        autosaves = bool(getattr(nb_man, "output_path", None)) and bool(getattr(nb_man, "autosave_cell_every", 0))
        self.live_every = LIVE_EVERY if (echo.wanted or autosaves) else None

    def runs(self, index: int, cell: t.Any) -> bool:
        return super().runs(index, cell) and self.skip_tag not in ((cell.get("metadata") or {}).get("tags") or [])

    def cell_start(self, index: int, cell: t.Any) -> None:
        self.echo.reset()
        self.nb_man.cell_start(cell, index)

    def cell_running(self, index: int, cell: t.Any, outputs: list[dict]) -> None:
        self.echo.echo(outputs)
        if self._autosave_due():
            import nbformat

            cell.outputs = [nbformat.from_dict(o) for o in list(outputs)]
            self.nb_man.autosave_cell()

    def _autosave_due(self) -> bool:
        every = getattr(self.nb_man, "autosave_cell_every", 0)
        if not every or not getattr(self.nb_man, "output_path", None):
            return False
        return bool((self.nb_man.now() - self.nb_man.last_save_time).total_seconds() >= every)

    def cell_complete(self, index: int, cell: t.Any, result: CellResult | None) -> None:
        try:
            if result is not None:
                self._finish(index, cell, result)
        finally:
            self.nb_man.cell_complete(cell, index)

    def _finish(self, index: int, cell: t.Any, result: CellResult) -> None:
        import nbformat

        self.echo.echo(result.outputs)
        own_error = any(o.get("output_type") == "error" for o in cell.outputs)
        if result.status in ("restarted", "died") or (result.status != "ok" and not own_error):
            cell.outputs.append(nbformat.from_dict(error_output(result)))
        if result.intervened or result.status in ("interrupted", "restarted", "died"):
            self.logger.warning(f"cancelkernel: cell {index + 1}: {report_text(result).rstrip()}")
        for note in result.notes:
            self.logger.info(f"cancelkernel: cell {index + 1}: {note}")
        self._keep_going = self.rules.keeps_going(cell, result)
        if result.status != "ok" and (not self._keep_going or result.status in ("restarted", "died")):
            self.nb_man.cell_exception(cell, cell_index=index)

    def keep_going(self, index: int, cell: t.Any, result: CellResult) -> bool:
        return self._keep_going
