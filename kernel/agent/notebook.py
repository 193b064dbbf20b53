"""Run a notebook's code cells under the policy (what `cancelkernel run` does).

nbformat is needed here only (the optional extra `cancelkernel[notebook]`).
Outputs come from our own collector (outputs.py) rather than nbclient's
execution loop, which is the code that hangs when a kernel dies.
"""

from __future__ import annotations

import os
import re
import textwrap
import typing as t
from dataclasses import dataclass, field

from .. import frames as fr
from ..protocol import KEY, REPORT_MIME
from ..words import plural
from .budgets import check_memory_budget, parse_seconds
from .errors import BadInputError, RunawayCellError
from .result import CellResult

if t.TYPE_CHECKING:
    from .client import AgentKernel

_TAG = re.compile(r"^(wall|quiet|memory)[-_]budget[=:](.+)$")


def require_nbformat() -> t.Any:
    try:
        import nbformat
    except ImportError as exc:
        raise BadInputError(
            "running notebooks needs nbformat, which is not installed; install it with "
            "`pip install 'cancelkernel[notebook]'` (or `pip install nbformat`)"
        ) from exc
    return nbformat


def load_notebook(path: str | os.PathLike) -> t.Any:
    """Read and validate a notebook; BadInputError (nothing started) if it is missing or invalid."""
    nbformat = require_nbformat()
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise BadInputError(f"notebook {path!r} does not exist")
    try:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # nbformat raises ValidationError, JSON errors, NotJSONError...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInputError(f"notebook {path!r} is not a valid Jupyter notebook (nbformat 4): {first}") from exc
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell_budgets(cell, index)  # bad budgets are reported before any kernel starts
    return nb


def cell_budgets(cell: t.Any, index: int) -> tuple[float | None, float | None, int | None]:
    """(wall, quiet, memory) from metadata.cancelkernel.{wall,quiet,memory}_budget
    or tags 'wall-budget=30', 'memory-budget=2G'."""
    wall = quiet = memory = None
    meta = (cell.get("metadata") or {}).get(KEY) or {}
    if not isinstance(meta, dict):
        raise BadInputError(f"cell {index}: metadata.{KEY} must be an object, not {meta!r}")
    if meta.get("wall_budget") is not None:
        wall = parse_seconds(meta["wall_budget"], f"cell {index} metadata {KEY}.wall_budget")
    if meta.get("quiet_budget") is not None:
        quiet = parse_seconds(meta["quiet_budget"], f"cell {index} metadata {KEY}.quiet_budget")
    if meta.get("memory_budget") is not None:
        memory = check_memory_budget(f"cell {index} metadata {KEY}.memory_budget", meta["memory_budget"]) or 0
    for tag in (cell.get("metadata") or {}).get("tags") or []:
        m = _TAG.match(str(tag).strip())
        if m and m.group(1) == "wall":
            wall = parse_seconds(m.group(2), f"cell {index} tag {tag!r}")
        elif m and m.group(1) == "quiet":
            quiet = parse_seconds(m.group(2), f"cell {index} tag {tag!r}")
        elif m:
            memory = check_memory_budget(f"cell {index} tag {tag!r}", m.group(2)) or 0
    return wall, quiet, memory


@dataclass
class NotebookRun:
    """What running a notebook gave: one result per executed code cell."""

    results: list[tuple[int, CellResult]] = field(default_factory=list)
    stopped_at: int | None = None  # index of the cell after which execution stopped

    def failed(self, *, allow_errors: bool = False) -> list[tuple[int, CellResult]]:
        bad = []
        for index, result in self.results:
            if result.status == "ok" or (allow_errors and result.status == "error"):
                continue
            bad.append((index, result))
        return bad


class CellHooks:
    """What a front end does around each cell of `run_notebook`; these defaults are `cancelkernel run`'s.

    The papermill engine subclasses it to keep papermill's bookkeeping (cell
    metadata, saves, progress bar, --log-output) and papermill's error rules.
    """

    # Seconds between `cell_running` calls while a cell runs; None: the cell runs without them.
    live_every: float | None = None

    def __init__(self, *, allow_errors: bool = False, progress: t.Callable[[str], None] | None = None):
        self.allow_errors = allow_errors
        self.progress = progress
        self._numbers: dict[int, int] = {}

    def notebook_start(self, nb: t.Any) -> None:
        code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
        self._numbers = {index: n for n, index in enumerate(code, 1)}

    def runs(self, index: int, cell: t.Any) -> bool:
        """Whether this cell is executed (blank code cells and other cells are not)."""
        return bool(cell.cell_type == "code" and cell.source.strip())

    def cell_start(self, index: int, cell: t.Any) -> None:
        """Before the cell is sent (also called for cells that do not run)."""

    def cell_running(self, index: int, cell: t.Any, outputs: list[dict]) -> None:
        """Every `live_every` seconds while the cell runs: its outputs so far (the run loop's list:
        read, never change)."""

    def cell_complete(self, index: int, cell: t.Any, result: CellResult | None) -> None:
        """After the cell's outputs and report are in `cell` (result None: the cell did not run)."""
        if result is not None and self.progress is not None:
            self.progress(f"[{self._numbers.get(index, 0)}/{len(self._numbers)}] cell {index}: {result.summary()}")

    def keep_going(self, index: int, cell: t.Any, result: CellResult) -> bool:
        """Whether the cells after this one run (allow_errors: always;
        runaways still fail the run, see NotebookRun.failed)."""
        return result.status == "ok" or self.allow_errors


def run_notebook(
    nb: t.Any,
    ak: AgentKernel,
    *,
    wall_budget: float | str | None = None,
    quiet_budget: float | None = None,
    allow_errors: bool = False,
    progress: t.Callable[[str], None] | None = None,
    hooks: CellHooks | None = None,
) -> NotebookRun:
    """Execute the code cells in order, writing outputs and reports into `nb` (in place).

    `hooks` (default: `cancelkernel run`'s, from allow_errors and progress) say
    which cells run, what happens around each, and when to stop.
    """
    hooks = hooks if hooks is not None else CellHooks(allow_errors=allow_errors, progress=progress)
    run = NotebookRun()
    hooks.notebook_start(nb)
    for index, cell in enumerate(nb.cells):
        hooks.cell_start(index, cell)
        if not hooks.runs(index, cell):
            hooks.cell_complete(index, cell, None)
            continue
        result = run_cell(cell, index, ak, wall_budget=wall_budget, quiet_budget=quiet_budget, hooks=hooks)
        run.results.append((index, result))
        hooks.cell_complete(index, cell, result)
        if not hooks.keep_going(index, cell, result):
            run.stopped_at = index
            break
    return run


def run_cell(
    cell: t.Any,
    index: int,
    ak: AgentKernel,
    *,
    wall_budget: float | str | None = None,
    quiet_budget: float | None = None,
    hooks: CellHooks | None = None,
) -> CellResult:
    """Run one code cell under the policy (its own budgets first); its outputs and any report go into `cell`."""
    nbformat = require_nbformat()
    wall, quiet, memory = cell_budgets(cell, index)
    cell_id = str(cell.get("id") or f"cell-{index}")
    wall_v = wall if wall is not None else wall_budget
    quiet_v = quiet if quiet is not None else quiet_budget
    try:
        if hooks is None or hooks.live_every is None:
            result = ak.run(
                cell.source, wall_budget=wall_v, quiet_budget=quiet_v, memory_budget=memory, cell_id=cell_id
            )
        else:
            submission = ak.submit(
                cell.source,
                wall_budget=wall_v,
                quiet_budget=quiet_v,
                memory_budget=memory,
                cell_id=cell_id,
                want_status=False,
            )
            while not submission.wait(hooks.live_every):
                hooks.cell_running(index, cell, submission.watch.outputs)
            result = submission.result()
    except RunawayCellError as exc:  # only when a notebook repeats a cell id
        result = exc.attempts[-1]
    cell.outputs = [nbformat.from_dict(o) for o in result.outputs]
    cell.execution_count = result.execution_count
    if result.status in ("interrupted", "restarted", "died"):
        cell.outputs.append(nbformat.from_dict(report_output(result)))
        cell.metadata.setdefault(KEY, {})["agent"] = _cell_meta(result)
    return result


def _cell_meta(result: CellResult) -> dict[str, t.Any]:
    return {
        "status": result.status,
        "elapsed": result.elapsed,
        "reason": result.reason,
        "state": result.state,
        "actions": result.actions,
        "stopped_at": fr.stopped_at(fr.from_dicts(result.stack), readable=True),
    }


def report_text(result: CellResult) -> str:
    """The intervention report a person reads under the cell."""
    lines = [f"cancelkernel agent: {result.status} after {result.elapsed:.2f} s"]
    if result.reason_text:
        lines.append(f"  why: {result.reason_text}")
    for action in result.actions:
        lines.append(f"  {action.get('action')}: {action.get('outcome') or '(no outcome recorded)'}")
    if result.status in ("restarted", "died"):
        restored = (
            f"{plural(len(result.restored), 'name')} restored from checkpoint {result.checkpoint!r}"
            if result.restored
            else "nothing restored"
        )
        lines.append(f"  state: {result.state} ({restored}); later cells run in a new kernel")
    elif result.status == "interrupted":
        lines.append("  state: suspect (the cell stopped part-way; its variables may be half-updated)")
    elif result.status == "error":
        lines.append(f"  error: {result.error_name}: {result.error_value}")
    if result.stack:
        lines.append("  where it was:")
        lines.extend(textwrap.indent(block, "    ") for block in fr.format_frames(fr.from_dicts(result.stack)))
    return "\n".join(lines) + "\n"


def report_output(result: CellResult) -> dict[str, t.Any]:
    return {
        "output_type": "display_data",
        "data": {"text/plain": report_text(result), REPORT_MIME: _cell_meta(result)},
        "metadata": {},
    }
