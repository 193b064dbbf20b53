"""The notebook tools: read_notebook, run_cell, run_notebook (nbformat, the extra cancelkernel[notebook]).

Cells run through the agent client's notebook runner (`agent.notebook.run_notebook`,
what `cancelkernel run` uses): per-cell budgets from metadata or tags, outputs
and the intervention report written into the cell.  run_cell runs one cell of
the file on a kernel of this server and writes it back; run_notebook runs the
whole file on a fresh kernel, like `cancelkernel run`.
"""

from __future__ import annotations

import os
import typing as t

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult

from ..agent.batch import output_paths
from ..agent.errors import BadInputError
from ..agent.notebook import load_notebook, require_nbformat, run_notebook
from ..words import plural
from . import args, models, options, shapes, tasks
from . import outputs as out
from .registry import ToolFunction, add_tools
from .sessions import Session, Sessions
from .waiting import run_blocking

if t.TYPE_CHECKING:
    from ..agent.notebook import NotebookRun
    from ..agent.result import CellResult
    from ..agent.watch import CellWatch
    from .options import ServerOptions

NotebookAnswer = t.Annotated[CallToolResult, models.Notebook]
RunAnswer = t.Annotated[CallToolResult, models.NotebookRun]
CELL_OUTPUT_CHARS = 2000  # per cell in read_notebook
SOURCE_CHARS = 10_000


class _Stopped(Exception):
    """The MCP client cancelled run_notebook: no further cell starts."""


def descriptions(o: ServerOptions) -> dict[str, str]:
    """Each notebook tool's description, with the server's default budgets in it."""
    return {
        "read_notebook": (
            "Read a notebook (.ipynb, relative to the server's --cwd): every cell's index, type, id, "
            f"source and outputs (each cell's output cut to {CELL_OUTPUT_CHARS} characters)."
        ),
        "run_cell": (
            "Run one code cell of a notebook (by index, as read_notebook shows) on a kernel of this server (omitted "
            "kernel_id: the default kernel, so earlier cells' variables are there if you ran them) and write its "
            "outputs back into the file. Budgets: the cell's metadata or tags (wall-budget=30) first, "
            f"then wall_budget / quiet_budget, then the server's defaults (wall {o.wall_budget:g} s, "
            f"quiet {o.quiet_budget:g} s). Waits for the cell to end; cancelling the call interrupts it."
        ),
        "run_notebook": (
            "Run a whole notebook, top to bottom, on a fresh kernel (as `cancelkernel run` does), "
            "and write the executed notebook to output_path (default NAME.executed.ipynb) with outputs and, "
            "in each cell that ran away, the intervention report. Budgets per cell as in run_cell (server defaults: "
            f"wall {o.wall_budget:g} s, quiet {o.quiet_budget:g} s). Stops at the first failing cell unless "
            "allow_errors. Returns one line per cell (status, elapsed, state, why). "
            "Cancelling the call interrupts the running cell and starts no further one."
        ),
    }


async def read_notebook(sessions: Sessions, path: args.Text) -> NotebookAnswer:
    try:
        nb = load_notebook(_path(path))
    except Exception as exc:  # noqa: BLE001 - every refusal is an isError answer
        return shapes.failure(exc, models.Notebook)
    cells = [_cell_view(index, cell) for index, cell in enumerate(nb.cells)]
    return shapes.answer(models.Notebook(path=os.path.abspath(_path(path)), cells=cells))


def _cell_view(index: int, cell: t.Any) -> models.NotebookCell:
    """One cell as read_notebook shows it: its source and (a code cell) its outputs, each cut."""
    source = str(cell.source)
    if len(source) > SOURCE_CHARS:
        source = source[:SOURCE_CHARS] + f"\n[... {len(source) - SOURCE_CHARS} more characters]"
    item: dict[str, t.Any] = {"index": index, "cell_type": cell.cell_type, "id": cell.get("id"), "source": source}
    if cell.cell_type == "code":
        view = out.window(
            out.items(list(cell.get("outputs") or [])),
            0,
            CELL_OUTPUT_CHARS,
            explicit=False,
            again=lambda at: "run_cell on it (or open the file)",
        )
        item.update(execution_count=cell.get("execution_count"), outputs=view["outputs"], truncated=view["truncated"])
    return models.NotebookCell(**item)


async def run_cell(
    sessions: Sessions,
    path: args.Text,
    index: args.Count,
    ctx: Context,
    kernel_id: args.OptionalText = None,
    wall_budget: args.WallBudget = None,
    quiet_budget: args.QuietBudget = None,
) -> RunAnswer:
    try:
        file = _path(path)
        nb = load_notebook(file)
        at = options.offset("index", index, -1)
        if not 0 <= at < len(nb.cells) or nb.cells[at].cell_type != "code":
            raise BadInputError(
                f"index {index!r} is not a code cell of {file!r} (it has {plural(len(nb.cells), 'cell')}; "
                "read_notebook lists them)"
            )
        wall, quiet = options.budget("wall_budget", wall_budget), options.budget("quiet_budget", quiet_budget)
        run = _OneCell(sessions, nb, at, file, options.optional_text("kernel_id", kernel_id))
    except Exception as exc:  # noqa: BLE001 - every refusal is an isError answer
        return shapes.failure(exc, models.NotebookRun)
    label = f"cell {at} of {os.path.basename(file)}"
    try:
        ran = await run_blocking(
            _as_task(ctx, label, run.watch, run.cancel),
            label,
            lambda: run.go(wall, quiet),
            watch=run.watch,
            on_cancel=run.cancel,
        )
    except Exception as exc:  # noqa: BLE001 - every refusal is an isError answer
        return shapes.failure(exc, models.NotebookRun)
    if not ran.results:
        return shapes.answer(
            models.NotebookRun(path=file, cells=[], status="ok", message=f"cell {at} is empty; nothing ran")
        )
    return _ran_cell(file, at, t.cast(Session, run.session), ran.results[0][1])


def _ran_cell(file: str, at: int, session: Session, result: CellResult) -> CallToolResult:
    """run_cell's answer: the cell's outputs and result, and the line run_notebook would give it."""
    view = out.window(
        out.items(result.outputs),
        0,
        options.DEFAULT_MAX_CHARS,
        explicit=False,
        again=lambda _: f"read_notebook({file!r})",
    )
    images = view.pop("images")
    cell = models.ExecutionModel(kernel_id=session.id, **view, **shapes.result_fields(result))
    return shapes.answer(
        models.NotebookRun(
            path=file,
            output_path=file,
            status="ok" if result.status == "ok" else "failed",
            cells=[shapes.cell_summary(at, result)],
            cell=cell,
            message=f"cell {at}: {result.summary()}; outputs written to {file}",
        ),
        is_error=result.status in shapes.FAILED,
        images=images,
    )


async def run_notebook_tool(
    sessions: Sessions,
    path: args.Text,
    ctx: Context,
    output_path: args.OptionalText = None,
    wall_budget: args.WallBudget = None,
    quiet_budget: args.QuietBudget = None,
    allow_errors: args.Flag = False,
    kernel_name: args.OptionalText = None,
) -> RunAnswer:
    try:
        file = _path(path)
        nb = load_notebook(file)
        target = options.optional_text("output_path", output_path)
        destination = output_paths([file], _path(target) if target else None, None)[0][0]
        wall, quiet = options.budget("wall_budget", wall_budget), options.budget("quiet_budget", quiet_budget)
        if not isinstance(allow_errors, bool):
            raise BadInputError(f"allow_errors must be true or false, not {allow_errors!r:.40}")
        run = _WholeRun(sessions, nb, options.optional_text("kernel_name", kernel_name), destination)
    except Exception as exc:  # noqa: BLE001 - every refusal is an isError answer
        return shapes.failure(exc, models.NotebookRun)
    label = os.path.basename(file)
    try:
        ran = await run_blocking(
            _as_task(ctx, label, run.watch, run.cancel),
            label,
            lambda: run.go(wall, quiet, allow_errors),
            watch=run.watch,
            on_cancel=run.cancel,
        )
    except Exception as exc:  # noqa: BLE001 - every refusal is an isError answer
        return shapes.failure(exc, models.NotebookRun)
    failed = ran.failed(allow_errors=allow_errors)
    cells = [shapes.cell_summary(i, r) for i, r in ran.results]
    message = f"{plural(len(cells), 'cell')} run, {len(failed)} failed; wrote {destination}"
    if ran.stopped_at is not None:
        message += f" (stopped after cell {ran.stopped_at}; allow_errors=true keeps going)"
    return shapes.answer(
        models.NotebookRun(
            path=file,
            output_path=destination,
            status="failed" if failed else "ok",
            cells=cells,
            stopped_after=ran.stopped_at,
            message=message,
        ),
        is_error=bool(failed),
    )


def _as_task(
    ctx: Context, label: str, watch: t.Callable[[], CellWatch | None], cancel: t.Callable[[], None]
) -> Context | None:
    """The context to report progress on: none for a task, whose tasks/get shows the cell and tasks/cancel stops it."""
    task = tasks.current()
    if task is None:
        return ctx
    task.follow(label, watch, cancel)
    return None


# The function's own name is the input schema's title ("run_notebook_toolArguments"); the tool is run_notebook.
TOOLS: dict[str, ToolFunction] = {
    "read_notebook": read_notebook,
    "run_cell": run_cell,
    "run_notebook": run_notebook_tool,
}


def register(server: MCPServer, sessions: Sessions) -> None:
    """Add the notebook tools to `server`."""
    add_tools(server, sessions, TOOLS, descriptions(sessions.options))


class _OneCell:
    """One run_cell on a kernel of this server, on one thread: the cell runs and its outputs go back into the file."""

    def __init__(self, sessions: Sessions, nb: t.Any, index: int, file: str, kernel_id: str | None):
        self.sessions, self.nb, self.index, self.file, self.kernel_id = sessions, nb, index, file, kernel_id
        self.session: Session | None = None

    def go(self, wall: float | None, quiet: float | None) -> NotebookRun:
        session = self.session = self.sessions.get(self.kernel_id, start=True)
        if session.ak.busy:
            raise BadInputError(session.busy_message("run the cell"))
        nbformat = require_nbformat()
        one = nbformat.v4.new_notebook(metadata=self.nb.metadata)
        one.cells = [self.nb.cells[self.index]]  # the same cell object: the runner writes its outputs into `nb`
        ran = run_notebook(one, session.ak, wall_budget=wall, quiet_budget=quiet, allow_errors=True)
        nbformat.write(self.nb, self.file)
        return ran

    def watch(self) -> CellWatch | None:
        return self.session.ak.running if self.session is not None else None

    def cancel(self) -> None:
        if self.session is not None:
            self.session.ak.interrupt()


class _WholeRun:
    """One run_notebook on its own kernel, on one thread: start, run the cells, write, shut down
    (also when cancelled)."""

    def __init__(self, sessions: Sessions, nb: t.Any, kernel_name: str | None, destination: str):
        self.sessions, self.nb, self.kernel_name, self.destination = sessions, nb, kernel_name, destination
        self.session: Session | None = None
        self.stopped = False

    def go(self, wall: float | None, quiet: float | None, allow_errors: bool) -> NotebookRun:
        self.session = self.sessions.start_kernel(self.kernel_name, prefix="nb")
        try:
            if self.stopped:
                raise _Stopped("cancelled before the first cell")
            return run_notebook(
                self.nb,
                self.session.ak,
                wall_budget=wall,
                quiet_budget=quiet,
                allow_errors=allow_errors,
                progress=self._next,
            )
        finally:
            require_nbformat().write(self.nb, self.destination)
            self.sessions.shutdown(self.session.id, "run_notebook finished")

    def _next(self, line: str) -> None:
        if self.stopped:  # after the cell the cancellation interrupted: no further one
            raise _Stopped(line)

    def watch(self) -> CellWatch | None:
        return self.session.ak.running if self.session is not None else None

    def cancel(self) -> None:
        self.stopped = True
        if self.session is not None:
            self.session.ak.interrupt()


def _path(value: t.Any) -> str:
    if not isinstance(value, str) or not value:
        raise BadInputError(f"path must be the notebook's file path (a string), not {value!r:.80}")
    return os.path.abspath(os.path.expanduser(value))
