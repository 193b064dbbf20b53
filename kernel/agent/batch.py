"""Many notebooks at once: each on its own kernel (local or behind a server), with its own output and log.

    results = run_notebooks(["a.ipynb", "b.ipynb"], jobs=4, output_dir="out", wall_budget=600)

Concurrency is the standard library's thread pool: each notebook's AgentKernel
is used by one thread only.  Progress lines carry the notebook's name; the
summary is one row per notebook.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
import typing as t
from dataclasses import dataclass, field

from .errors import AgentError, BadInputError, KernelStartError
from .notebook import NotebookRun, load_notebook, require_nbformat, run_notebook
from .threads import leaving_no_loop


@dataclass
class NotebookOutcome:
    """What running one notebook gave."""

    notebook: str
    output: str
    log: str | None
    status: str = "ok"  # ok | failed | not-started
    cells: int = 0
    interventions: int = 0
    seconds: float = 0.0
    error: str | None = None
    run: NotebookRun = field(default_factory=NotebookRun)

    def row(self) -> list[str]:
        return [
            os.path.basename(self.notebook),
            str(self.cells),
            str(self.interventions),
            self.status,
            f"{self.seconds:.1f} s",
        ]


def output_paths(notebooks: list[str], output: str | None, log: str | None) -> list[tuple[str, str | None]]:
    """(output notebook, log) per notebook; with several notebooks, output and log name directories."""
    if len(notebooks) == 1:
        out = output or _default_output(notebooks[0])
        for what, path in (("output", out), ("log", log)):
            directory = os.path.dirname(os.path.abspath(path)) if path else None
            if directory and not os.path.isdir(directory):
                raise BadInputError(f"{what} directory {directory!r} does not exist")
        return [(out, log)]
    for what, path in (("-o/--output", output), ("--log", log)):
        if path is not None and os.path.exists(path) and not os.path.isdir(path):
            raise BadInputError(
                f"{what} {path!r} is a file; with several notebooks it names a directory (one file per notebook)"
            )
    stems = [os.path.splitext(os.path.basename(n))[0] for n in notebooks]
    if len(set(stems)) != len(stems):
        raise BadInputError("two notebooks have the same name; their outputs and logs would overwrite each other")
    paths = []
    for notebook, stem in zip(notebooks, stems, strict=True):
        out = os.path.join(output, f"{stem}.ipynb") if output else _default_output(notebook)
        paths.append((out, os.path.join(log, f"{stem}.jsonl") if log else None))
    return paths


def _default_output(path: str) -> str:
    stem = path[:-6] if path.endswith(".ipynb") else path
    return stem + ".executed.ipynb"


def run_notebooks(
    notebooks: list[str],
    *,
    jobs: int = 1,
    output: str | None = None,
    log: str | None = None,
    allow_errors: bool = False,
    progress: t.Callable[[str], None] | None = None,
    **agent_options: t.Any,
) -> list[NotebookOutcome]:
    """Run notebooks, `jobs` at a time, each on its own kernel; one outcome per notebook, in the order given.

    Bad input (a missing notebook, a bad budget tag, jobs < 1) raises BadInputError before anything starts.
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise BadInputError(f"jobs must be a whole number of notebooks at a time, 1 or more, not {jobs!r}")
    if not notebooks:
        raise BadInputError("no notebooks to run")
    loaded = [load_notebook(path) for path in notebooks]  # every notebook is checked before any kernel starts
    paths = output_paths(notebooks, output, log)
    for directory in {os.path.dirname(os.path.abspath(p)) for pair in paths for p in pair if p}:
        os.makedirs(directory, exist_ok=True)
    say = _Progress(progress, notebooks)
    outcomes = [NotebookOutcome(n, out, lg) for n, (out, lg) in zip(notebooks, paths, strict=True)]
    with concurrent.futures.ThreadPoolExecutor(
        max_workers=min(jobs, len(notebooks)), thread_name_prefix="cancelkernel-run"
    ) as pool:
        futures = [
            pool.submit(leaving_no_loop(_run_one), outcome, nb, allow_errors, say, agent_options)
            for outcome, nb in zip(outcomes, loaded, strict=True)
        ]
        for future in futures:
            future.result()
    return outcomes


def _run_one(outcome: NotebookOutcome, nb: t.Any, allow_errors: bool, say: _Progress, options: dict) -> None:
    from .client import AgentKernel

    nbformat = require_nbformat()
    started = time.monotonic()
    name = outcome.notebook
    try:
        with AgentKernel(log=outcome.log, **options) as ak:
            say(
                name,
                f"started on kernel {ak.kernel_name!r}"
                if say.several
                else f"cancelkernel run: {name} on kernel {ak.kernel_name!r}",
            )
            outcome.run = run_notebook(nb, ak, allow_errors=allow_errors, progress=lambda line: say(name, line))
    except KernelStartError as exc:
        outcome.status, outcome.error = "not-started", str(exc)
        say(name, f"kernel did not start: {exc}")
    except AgentError as exc:
        outcome.status, outcome.error = "failed", str(exc)
        say(name, f"failed: {exc}")
    finally:
        outcome.seconds = time.monotonic() - started
        results = [r for _, r in outcome.run.results]
        outcome.cells = len(results)
        outcome.interventions = sum(1 for r in results if r.intervened)
        if outcome.status == "ok" and outcome.run.failed(allow_errors=allow_errors):
            outcome.status = "failed"
        if results:
            nbformat.write(nb, outcome.output)
        if say.several:
            say(
                name,
                f"{outcome.status}: {outcome.cells} cells, {outcome.interventions} interventions, "
                f"{outcome.seconds:.1f} s; wrote {outcome.output}",
            )


class _Progress:
    """Progress lines, one at a time; prefixed by the notebook when several run at once."""

    def __init__(self, progress: t.Callable[[str], None] | None, notebooks: list[str]):
        self.progress = progress
        self.several = len(notebooks) > 1
        self.width = max(len(os.path.basename(n)) for n in notebooks)
        self.lock = threading.Lock()

    def __call__(self, notebook: str, line: str) -> None:
        if self.progress is not None:
            with self.lock:
                self.progress(f"[{os.path.basename(notebook):<{self.width}}] {line}" if self.several else line)


def summary_table(outcomes: list[NotebookOutcome]) -> str:
    """Plain-text table: notebook, cells, interventions, status, time."""
    headers = ["notebook", "cells", "interventions", "status", "time"]
    rows = [o.row() for o in outcomes]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)
