"""Checkpoints of an IPython shell's user namespace: the kernel's side of the feature.

The kernel owns one `ShellCheckpoints` for its shell and hands it to (see docs/checkpoints.md):

- `handle_checkpoint_request(checkpoints, content)`: the reply content of a
  `checkpoint_request` on the shell channel;
- `save_before(checkpoints)`: before a cell marked risky;
- `maybe_autosave(checkpoints, reply_status)`: after each cell;
- the `%checkpoint` magic (magics.py).
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from ..words import plural
from . import manifests
from .errors import CheckpointNotFound, CheckpointStoreError, CheckpointTooLarge
from .manifests import CheckpointInfo
from .model import Manifest, RestoreReport, size_text, time_text
from .prepared import PreparedMemory
from .restore import prepare as prepare_restore
from .restore import restore as restore_namespace
from .save import save as save_namespace
from .settings import CheckpointSettings
from .source import default_cell_files

# Names of the checkpoints the kernel saves by itself.
AUTOSAVE_NAME = "autosave"
BEFORE_NAME = "before"

ACTIONS = ("save", "restore", "list", "drop", "prepare")


class ShellCheckpoints:
    """save / restore / list / drop / prepare for one shell's user namespace, in one directory.

    `room`: bytes the kernel may still take before its memory guard acts (None:
    unknown); a prepare faults in at most half of it.
    """

    def __init__(
        self,
        shell: Any,
        settings: CheckpointSettings,
        directory_getter: Callable[[], str] | None = None,
        room: Callable[[], int | None] | None = None,
    ):
        self.shell = shell
        self.settings = settings
        self.directory_getter = directory_getter  # None: settings.resolve_directory
        self.room = room
        # restore_on_start, until the first cell or a restore
        self.start_restore_pending = settings.restore_on_start != "off"
        self.memory = PreparedMemory()  # what a prepare faulted in for the next restore

    @property
    def directory(self) -> str:
        return (self.directory_getter or self.settings.resolve_directory)()

    def save(self, name: str | None = None, *, total_limit: int | None = None) -> Manifest:
        return save_namespace(
            self.shell.user_ns,
            self.directory,
            name,
            size_limit=self.settings.size_limit,
            total_limit=total_limit,
            hidden=self.shell.user_ns_hidden,
            cell_files=self._cell_files(),
        )

    def restore(self, name: str | None = None) -> RestoreReport:
        self.start_restore_pending = False  # a client restored on its own: the kernel does not do it again
        return restore_namespace(self.shell.user_ns, self.directory, name, memory=self.memory)

    def prepare(self, name: str | None = None) -> tuple[str, list[str], list[str]]:
        return prepare_restore(self.directory, name, memory=self.memory, memory_limit=self.memory_limit())

    def memory_limit(self) -> int:
        """What a prepare may fault in: prepare_memory, and never more than half the room left below
        the memory guard."""
        room = self.room() if self.room is not None else None
        return self.settings.prepare_memory if room is None else min(self.settings.prepare_memory, room // 2)

    def release_prepared(self) -> int:
        """Give back what a prepare faulted in (a cell runs: no restore is coming); the bytes given back."""
        return self.memory.release()

    def list_checkpoints(self) -> list[CheckpointInfo]:
        return manifests.list_checkpoints(self.directory)

    def drop(self, name: str) -> str:
        return manifests.drop(self.directory, name)

    def _cell_files(self) -> list[str]:
        """Cells' linecache names, newest first (IPython maps each to its execution count)."""
        numbered = getattr(getattr(self.shell, "compile", None), "_filename_map", None) or {}
        cells = [
            f
            for f, _ in sorted(
                numbered.items(), key=lambda item: item[1] if isinstance(item[1], int) else 0, reverse=True
            )
        ]
        return cells + default_cell_files()


# -- the checkpoint_request message ----------------------------------------------------


def handle_checkpoint_request(binding: ShellCheckpoints, content: Mapping[str, Any] | None) -> dict:
    """Reply content for a shell-channel `checkpoint_request` (fields in docs/checkpoints.md)."""
    content = content if isinstance(content, Mapping) else {}
    action = content.get("action")
    name = content.get("name")
    base: dict[str, Any] = {"action": action, "name": name}
    if action not in ACTIONS:
        return _error(
            base, "ValueError", f"checkpoint_request 'action' must be one of {', '.join(ACTIONS)}, not {action!r}"
        )
    if name is not None and not isinstance(name, str):
        return _error(
            base, "ValueError", f"checkpoint_request 'name' must be a string or absent, not {type(name).__name__}"
        )
    if action == "drop" and not name:
        return _error(
            base, "ValueError", "checkpoint_request action 'drop' needs the 'name' of the checkpoint to delete"
        )
    reply: dict[str, Any] = {
        "status": "ok",
        **base,
        "restored": [],
        "skipped": [],
        "checkpoints": [],
        "path": None,
        "directory": None,
        "summary": "",
    }
    try:
        reply["directory"] = binding.directory
        if action == "save":
            reply.update(binding.save(name).as_dict())
        elif action == "restore":
            reply.update(binding.restore(name).as_dict())
        elif action == "list":
            infos = binding.list_checkpoints()
            reply["checkpoints"] = [i.as_dict() for i in infos]
            reply["latest"] = next((i.name for i in infos if i.latest), None)
            reply["summary"] = format_list(infos, reply["directory"])
        elif action == "prepare":
            reply["name"], reply["imported"], failed = binding.prepare(name)
            reply["prepared"] = binding.memory.held
            reply["summary"] = prepare_summary(
                reply["name"], reply["imported"], failed, reply["prepared"], binding.memory.note
            )
        else:
            reply["path"] = binding.drop(name)  # type: ignore[arg-type]
            reply["summary"] = f"dropped checkpoint {name!r}"
    except CheckpointStoreError as exc:
        return _error(base, type(exc).__name__, str(exc))
    except Exception as exc:  # noqa: BLE001 - the reply must say what went wrong, whatever it was
        return _error(base, type(exc).__name__, str(exc), traceback.format_exception(type(exc), exc, exc.__traceback__))
    return reply


def prepare_summary(name: str, imported: list[str], failed: list[str], prepared: int, note: str) -> str:
    """What a prepare did, in one line."""
    said = f"imported {plural(len(imported), 'module')} checkpoint {name!r} needs"
    if failed:
        said += f"; could not import {', '.join(failed)}"
    if prepared:
        said += f"; {size_text(prepared)} of memory faulted in for its bytearrays"
    return f"{said}; {note}" if note else said


def _error(base: dict, ename: str, evalue: str, tb: list[str] | None = None) -> dict:
    return {"status": "error", **base, "ename": ename, "evalue": evalue, "traceback": tb or []}


def format_list(infos: list[CheckpointInfo], directory: str) -> str:
    """The `%checkpoint list` table."""
    if not infos:
        return f"no checkpoints in {directory}"
    width = max(4, *(len(i.name) for i in infos))
    lines = [f"  {'name':<{width}}  {'saved':<19}  {'names':>5}  {'skipped':>7}  {'size':>9}"]
    for i in infos:
        mark = "*" if i.latest else " "
        lines.append(
            f"{mark} {i.name:<{width}}  {time_text(i.saved):<19}  {i.names:>5}  {i.skipped:>7}  {size_text(i.bytes):>9}"
        )
        if i.problem:
            lines.append(f"    ! {i.problem}")
    lines.append(f"(* latest; in {directory})")
    return "\n".join(lines)


# -- the kernel's hooks around do_execute ------------------------------------------------


def save_before(checkpoints: ShellCheckpoints) -> dict:
    """Save checkpoint 'before' ahead of a risky cell; on failure warn on stderr (the cell still runs).

    Called from CancelKernel.do_execute.  Returns what happened, for the reply metadata.
    """
    try:
        manifest = checkpoints.save(BEFORE_NAME)
    except CheckpointStoreError as exc:
        print(f"checkpoint before this cell failed, the cell runs without one: {exc}", file=sys.stderr)
        return {"name": BEFORE_NAME, "status": "error", "ename": type(exc).__name__, "evalue": str(exc)}
    return _metadata(manifest)


def restore_on_start(checkpoints: ShellCheckpoints) -> None:
    """Before the first cell of a (re)started kernel: restore what restore_on_start names, and say so in the cell.

    Called from CancelKernel.do_execute.  No checkpoint yet is not news; a
    checkpoint that cannot be loaded (not trusted, damaged) is (on stderr), and the cell still runs.
    """
    said = _restore_on_start(checkpoints)
    if said is not None:
        print(said, file=sys.stdout if said.startswith("restore_on_start: restored") else sys.stderr, flush=True)


def _restore_on_start(checkpoints: ShellCheckpoints) -> str | None:
    if not checkpoints.start_restore_pending:
        return None
    checkpoints.start_restore_pending = False
    wanted = checkpoints.settings.restore_on_start
    try:
        report = checkpoints.restore(None if wanted == "latest" else wanted)
    except CheckpointNotFound:
        if wanted == "latest":
            return None
        return f"restore_on_start: no checkpoint named {wanted!r} in {checkpoints.directory}; the kernel starts empty"
    except CheckpointStoreError as exc:
        return f"restore_on_start: nothing restored, {type(exc).__name__}: {exc}"
    return f"restore_on_start: {report.summary()}"


def maybe_autosave(checkpoints: ShellCheckpoints, reply_status: str | None) -> dict | None:
    """Save checkpoint 'autosave' after a successful cell, if autosave is on (None when it did nothing).

    Called from CancelKernel.do_execute.  A namespace over `autosave_limit` is
    skipped quietly; any other failure is a one-line warning on stderr.
    """
    settings = checkpoints.settings
    if not settings.autosave or reply_status != "ok":
        return None
    try:
        manifest = checkpoints.save(AUTOSAVE_NAME, total_limit=settings.autosave_limit)
    except CheckpointTooLarge as exc:
        return {"name": AUTOSAVE_NAME, "status": "skipped", "reason": str(exc)}
    except CheckpointStoreError as exc:
        print(f"autosave failed: {exc}", file=sys.stderr)
        return {"name": AUTOSAVE_NAME, "status": "error", "ename": type(exc).__name__, "evalue": str(exc)}
    return _metadata(manifest)


# What execute_reply metadata keeps of a save's reply fields: how many names, not which, so each reply stays small.
_METADATA_FIELDS = ("name", "names", "skipped", "bytes", "seconds")


def _metadata(manifest: Manifest) -> dict:
    saved = manifest.as_dict()
    return {"status": "ok", **{key: saved[key] for key in _METADATA_FIELDS}}
