"""Measured runtimes per cell, and the `wall_budget="auto"` they give.

auto budget = max(floor, factor x the longest successful run of the cell),
or `default` for a cell never seen to succeed.  Persisted as a small JSON file
(written atomically) when a path is given.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
import typing as t

from .errors import BadInputError

VERSION = 1
KEEP_RUNS = 20


def cell_key(source: str, cell_id: str | None) -> str:
    """The identity of a cell for budgets and the one-interrupt rule: its id, else its source."""
    if cell_id is not None:
        return f"id:{cell_id}"
    return "src:" + hashlib.sha256(source.encode()).hexdigest()[:16]


class RuntimeHistory:
    """Successful runtimes per cell key; the auto wall budget."""

    def __init__(
        self, path: str | os.PathLike | None = None, *, floor: float = 5.0, factor: float = 3.0, default: float = 60.0
    ):
        for name, value in (("auto_floor", floor), ("auto_factor", factor), ("auto_default", default)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise BadInputError(f"{name} must be a positive number, not {value!r}")
        self.path = os.fspath(path) if path is not None else None
        self.floor, self.factor, self.default = float(floor), float(factor), float(default)
        self.cells: dict[str, dict[str, t.Any]] = {}
        if self.path is not None:
            self._load()

    def _load(self) -> None:
        assert self.path is not None
        if not os.path.exists(self.path):
            parent = os.path.dirname(os.path.abspath(self.path))
            if not os.path.isdir(parent):
                raise BadInputError(
                    f"history file {self.path!r}: directory {parent!r} does not exist; create it or pick another path"
                )
            return
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as exc:
            raise BadInputError(
                f"history file {self.path!r} is not readable JSON ({exc}); delete it to start a new history"
            ) from exc
        if not isinstance(data, dict) or not isinstance(data.get("cells"), dict):
            raise BadInputError(
                f"history file {self.path!r} is not a cancelkernel runtime history; delete it or pick another path"
            )
        self.cells = data["cells"]

    def longest(self, key: str) -> float | None:
        entry = self.cells.get(key)
        return float(entry["max_ok"]) if entry and entry.get("max_ok") is not None else None

    def auto_budget(self, key: str) -> float:
        longest = self.longest(key)
        if longest is None:
            return self.default
        return max(self.floor, self.factor * longest)

    def record(self, key: str, elapsed: float, status: str) -> None:
        """Remember one run; only successful runs count towards the budget."""
        entry = self.cells.setdefault(key, {"runs": [], "max_ok": None})
        entry["runs"] = [
            *entry["runs"],
            {"elapsed": round(elapsed, 4), "status": status, "time": round(time.time(), 3)},
        ][-KEEP_RUNS:]
        if status == "ok":
            entry["max_ok"] = max(elapsed, entry.get("max_ok") or 0.0)
        self.save()

    def save(self) -> None:
        if self.path is None:
            return
        directory = os.path.dirname(os.path.abspath(self.path))
        fd, tmp = tempfile.mkstemp(prefix=".history-", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"version": VERSION, "cells": self.cells}, f, indent=1)
            os.replace(tmp, self.path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
