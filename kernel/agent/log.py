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

from .errors import BadInputError

MAX_SOURCE = 2000


class InterventionLog:
    """Appends JSON records to a file; opened on first write, flushed after each record."""

    def __init__(self, path: str | os.PathLike, *, log_all: bool = False):
        self.path = os.fspath(path)
        self.log_all = log_all
        parent = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(parent):
            raise BadInputError(f"log file {self.path!r}: directory {parent!r} does not exist; create it or pick another path")
        if os.path.isdir(self.path):
            raise BadInputError(f"log file {self.path!r} is a directory; give a file path such as {os.path.join(self.path, 'agent.jsonl')!r}")
        self._lock = threading.Lock()

    def write(self, record: dict[str, t.Any]) -> None:
        record = {"time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds"), **record}
        line = json.dumps(record, default=str, ensure_ascii=False)
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()


def cell_fields(source: str, cell_id: str | None, cell_key: str, attempt: int) -> dict[str, t.Any]:
    """The part of a record that names the cell (source cut to a readable size)."""
    text = source if len(source) <= MAX_SOURCE else source[:MAX_SOURCE] + f"... [{len(source) - MAX_SOURCE} more characters]"
    return {"cell_id": cell_id, "cell_key": cell_key, "attempt": attempt, "source": text}


def read_log(path: str | os.PathLike) -> list[dict[str, t.Any]]:
    """All records of a log file (for tests and reports)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
