"""What a checkpoint save or restore reports, and which names of a namespace it covers."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..words import plural

DEFAULT_NAME = "default"
DEFAULT_SIZE_LIMIT = 2 * 1024**3
SMALL_FILE = "small.pkl"

# IPython's own names in a user namespace: history, output cache, helpers.
_IPYTHON_NAMES = frozenset({"In", "Out", "_oh", "_ih", "_dh", "_sh", "get_ipython", "exit", "quit"})
_IPYTHON_PATTERN = re.compile(r"_{1,3}|_i{1,3}|_i\d+|_\d+|__\w+__")


def user_items(namespace: Mapping[str, Any], hidden: Mapping[str, Any] | None = None) -> list[tuple[str, Any]]:
    """The variables a checkpoint holds: `namespace` minus IPython's own names.

    `hidden` is IPython's `user_ns_hidden`: a name is left out while it is still
    bound to the object IPython put there (a user's own `open = ...` is kept).
    """
    missing = object()
    items = []
    for name, value in list(namespace.items()):  # a snapshot: an abandoned worker thread may still be adding names
        if not isinstance(name, str) or name in _IPYTHON_NAMES or _IPYTHON_PATTERN.fullmatch(name):
            continue
        if hidden is not None and hidden.get(name, missing) is value:
            continue
        items.append((name, value))
    return items


@dataclass
class Skipped:
    """A variable not saved, or not restored, and why."""

    name: str
    reason: str
    kind: str = "value"
    stage: str = "save"  # "save": left out of the checkpoint; "restore": saved but could not be loaded

    def as_dict(self) -> dict:
        return {"name": self.name, "reason": self.reason, "kind": self.kind, "stage": self.stage}

    def line(self) -> str:
        return f"{self.name}: {'not saved' if self.stage == 'save' else 'not restored'}: {self.reason}"


@dataclass
class Manifest:
    """What one save wrote (the JSON manifest, plus where)."""

    name: str
    path: str
    saved: float  # time.time() of the save: what `saved` means in the manifest, the reply and the list
    entries: list[dict]
    seconds: float
    bytes: int

    @property
    def saved_names(self) -> list[str]:
        return [e["name"] for e in self.entries if e.get("status") == "saved"]

    @property
    def skipped(self) -> list[Skipped]:
        return [
            Skipped(e["name"], e.get("reason", ""), e.get("kind", "value"))
            for e in self.entries
            if e.get("status") != "saved"
        ]

    def summary(self) -> str:
        head = (
            f"saved {plural(len(self.saved_names), 'name')} to checkpoint {self.name!r} "
            f"({size_text(self.bytes)}, {self.seconds:.2f} s) in {self.path}"
        )
        return _with_skipped(head, self.skipped)

    def as_dict(self) -> dict:
        """The fields of a save's checkpoint_reply (docs/protocol.md); the execute_reply metadata takes some of them."""
        saved_names = self.saved_names
        return {
            "name": self.name,
            "path": self.path,
            "saved": self.saved,
            "names": len(saved_names),
            "saved_names": saved_names,
            "skipped": [s.as_dict() for s in self.skipped],
            "bytes": self.bytes,
            "seconds": round(self.seconds, 6),
            "summary": self.summary(),
        }


@dataclass
class RestoreReport:
    """What one restore brought back, and what it could not, with reasons."""

    name: str
    path: str
    saved: float  # time.time() of the save this restore read
    restored: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    seconds: float = 0.0
    bytes: int = 0

    def summary(self) -> str:
        head = (
            f"restored {plural(len(self.restored), 'name')} from checkpoint {self.name!r} "
            f"(saved {time_text(self.saved)}, {size_text(self.bytes)}) in {self.seconds:.2f} s"
        )
        return _with_skipped(head, self.skipped)

    def as_dict(self) -> dict:
        """The fields of a restore's checkpoint_reply (docs/protocol.md)."""
        return {
            "name": self.name,
            "path": self.path,
            "saved": self.saved,
            "restored": list(self.restored),
            "skipped": [s.as_dict() for s in self.skipped],
            "bytes": self.bytes,
            "seconds": round(self.seconds, 6),
            "summary": self.summary(),
        }


def _with_skipped(head: str, skipped: list[Skipped]) -> str:
    if not skipped:
        return head
    return "\n  ".join([f"{head}; skipped {len(skipped)}:", *(s.line() for s in skipped)])


def time_text(saved: float) -> str:
    """A save's time as people read it (local time); "?" when a damaged manifest did not say."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(saved)) if saved else "?"


def size_text(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
