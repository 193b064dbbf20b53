"""The JSON Lines log: one record per intervention (and per cell with log_all=True).

Someone reading only the log must know why the agent intervened: every record
carries the reason as a code and as a sentence, what was done, and how it ended.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import threading
import typing as t

from .. import frames as fr
from .errors import BadInputError

if t.TYPE_CHECKING:
    from .result import CellResult

MAX_SOURCE = 2000


class InterventionLog:
    """Appends JSON records to a file; opened on first write, flushed after each record."""

    def __init__(self, path: str | os.PathLike, *, log_all: bool = False):
        self.path = os.fspath(path)
        self.log_all = log_all
        parent = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(parent):
            raise BadInputError(
                f"log file {self.path!r}: directory {parent!r} does not exist; create it or pick another path"
            )
        if os.path.isdir(self.path):
            raise BadInputError(
                f"log file {self.path!r} is a directory; give a file path such as "
                f"{os.path.join(self.path, 'agent.jsonl')!r}"
            )
        self._lock = threading.Lock()

    def write(self, record: dict[str, t.Any]) -> None:
        record = {"time": _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds"), **record}
        line = json.dumps(record, default=str, ensure_ascii=False)
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()

    def write_result(self, result: CellResult, *, kernel: dict[str, t.Any]) -> None:
        """One record per intervention of the cell (one for the cell itself with log_all)."""
        base = {
            "kernel": kernel,
            **cell_fields(result.source, result.cell_id, result.cell_key, result.attempt),
            "elapsed": result.elapsed,
            "budgets": result.budgets,
            "status": result.status,
            "state": result.state,
        }
        for action in result.actions:
            self.write(
                {
                    **base,
                    "why": action.get("why"),
                    "why_text": action.get("why_text"),
                    "action": action.get("action"),
                    "via": action.get("via"),
                    "outcome": action.get("outcome"),
                    "interrupt_latency": action.get("latency") if action.get("action") == "interrupt" else None,
                    "stack": result.stack,
                    "stopped_at": fr.stopped_at(fr.from_dicts(result.stack), readable=True),
                    "partial_output_bytes": result.output_size(),
                    "restored": result.restored if action.get("action") == "restart" else None,
                    "timings": result.timings if action.get("action") == "restart" else None,
                }
            )
        if not result.actions and self.log_all:
            self.write(
                {
                    **base,
                    "why": None,
                    "why_text": None,
                    "action": "none",
                    "outcome": result.status,
                    "output_bytes": result.output_size(),
                    "error": result.error_name,
                }
            )


def cell_fields(source: str, cell_id: str | None, cell_key: str, attempt: int) -> dict[str, t.Any]:
    """The part of a record that names the cell (source cut to a readable size)."""
    text = (
        source
        if len(source) <= MAX_SOURCE
        else source[:MAX_SOURCE] + f"... [{len(source) - MAX_SOURCE} more characters]"
    )
    return {"cell_id": cell_id, "cell_key": cell_key, "attempt": attempt, "source": text}


def read_log(path: str | os.PathLike) -> list[dict[str, t.Any]]:
    """All records of a log file (for tests and reports)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
