"""Restoring a namespace: imports first, then cell sources, then data; one bad variable never stops the others."""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import time
from collections.abc import Iterator
from typing import Any

from . import pickling
from .buffers import LAYOUT, owned_sizes
from .errors import CheckpointNotFound, UntrustedCheckpoint
from .manifests import checkpoint_dir, latest_name, not_found, read_manifest
from .model import SMALL_FILE, RestoreReport, Skipped
from .prepared import PreparedMemory
from .source import RunSource
from .source import run_source as default_run_source
from .store import MANIFEST, check_trusted, check_trusted_dir, open_trusted


def restore(
    namespace: dict,
    directory: str,
    name: str | None = None,
    *,
    run_source: RunSource = default_run_source,
    memory: PreparedMemory | None = None,
) -> RestoreReport:
    """Bring checkpoint `name` (default: the latest) back into `namespace`.

    Imports first, then cell sources, then data; a variable that fails is
    reported and the others still come back.  Refuses (UntrustedCheckpoint)
    files or directories not owned by you or writable by group/others.
    `memory`: bytearrays `prepare` faulted in ahead; the restore fills those of
    the right sizes and gives back the rest, whatever happens.
    """
    started = time.perf_counter()
    try:
        name, cpath, manifest, data = _open_checkpoint(directory, name)
        report = RestoreReport(name, cpath, float(manifest.get("saved", 0.0)))
        loader = _Loader(data, namespace, run_source, memory)
        with _no_gc():
            _restore_entries(manifest["entries"], loader, report)
    finally:
        if memory is not None:
            memory.release()
    report.bytes = loader.bytes
    report.seconds = time.perf_counter() - started
    return report


def prepare(
    directory: str, name: str | None = None, *, memory: PreparedMemory | None = None, memory_limit: int = 0
) -> tuple[str, list[str], list[str]]:
    """Import the modules checkpoint `name` (default: the latest) needs, so restoring it later only binds names.

    For a spare kernel waiting to replace this one.  The same trust checks as
    restore run first; nothing is unpickled.  With `memory`, also fault in
    memory for the checkpoint's large bytearrays, at most `memory_limit` bytes,
    for `restore(..., memory=memory)` to fill.  Returns (name, imported, failed).
    """
    name, _, manifest, _ = _open_checkpoint(directory, name)
    wanted: list[str] = []
    sizes: list[int] = []
    for entry in manifest.get("entries") or []:
        if not isinstance(entry, dict) or entry.get("status") != "saved":
            continue
        if entry.get("kind") == "module" and isinstance(entry.get("module"), str):
            wanted.append(entry["module"])
        wanted.extend(m for m in entry.get("imports") or [] if isinstance(m, str))
        if entry.get("layout") == LAYOUT:
            sizes.extend(owned_sizes(entry))
    imported, failed = [], []
    for module in dict.fromkeys(wanted):
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - the restore will report it for the variable that needs it
            failed.append(module)
        else:
            imported.append(module)
    if memory is not None:
        memory.fill(sizes, memory_limit)
    return name, imported, failed


def _open_checkpoint(directory: str, name: str | None) -> tuple[str, str, dict, str]:
    """Find checkpoint `name` (default: the latest), check it is trusted, read its manifest:
    (name, path, manifest, data dir)."""
    if not os.path.isdir(directory):
        raise CheckpointNotFound(f"no checkpoints in {directory} yet; save one first (%checkpoint save)")
    check_trusted_dir(directory, what="checkpoint directory", follow=True)
    if name is None:
        name = latest_name(directory)
        if name is None:
            raise CheckpointNotFound(f"no checkpoints in {directory} yet; save one first (%checkpoint save)")
    cpath = checkpoint_dir(directory, name)
    if not os.path.isfile(os.path.join(cpath, MANIFEST)):
        raise not_found(directory, name)
    check_trusted_dir(cpath, what="checkpoint directory")
    manifest = read_manifest(cpath)
    data = os.path.join(cpath, manifest["data"])
    check_trusted_dir(data, what="checkpoint data directory")
    _check_files_trusted(data)
    return name, cpath, manifest, data


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """Unpickling millions of containers triggers the cyclic GC over the growing heap again and again (4x slower)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _restore_entries(entries: list, loader: _Loader, report: RestoreReport) -> None:
    pending: list[dict] = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            report.skipped.append(Skipped("?", "damaged manifest entry", stage="restore"))
        elif entry.get("status") != "saved":
            report.skipped.append(Skipped(entry["name"], str(entry.get("reason", "")), str(entry.get("kind", "value"))))
        elif entry.get("kind") == "module":
            _apply(loader, entry, report)
        else:
            pending.append(entry)
    # Sources before values; then again whatever needed a name that came later (a base class, a decorator's argument).
    pending.sort(key=lambda e: e.get("kind") == "value")
    while pending:
        retry = [e for e in pending if not _apply(loader, e, report, last_try=False)]
        if len(retry) == len(pending):
            for entry in retry:
                _apply(loader, entry, report)
            break
        pending = retry
    loader.close()


def _check_files_trusted(data: str) -> None:
    """Every file of the data directory, before anything is unpickled (each is checked again when opened)."""
    for entry in os.listdir(data):
        path = os.path.join(data, entry)
        check_trusted(path, os.lstat(path), what="checkpoint file")


def _apply(loader: _Loader, entry: dict, report: RestoreReport, *, last_try: bool = True) -> bool:
    """Restore one entry; False if it should be tried again after the others."""
    name, kind = entry["name"], str(entry.get("kind", "value"))
    try:
        loader.apply(entry)
    except (NameError, pickling.MissingName) as exc:
        if not last_try:
            return False
        report.skipped.append(Skipped(name, f"failed: {exc}", kind, stage="restore"))
    except pickling.Damaged as exc:
        report.skipped.append(Skipped(name, f"damaged: {exc}", kind, stage="restore"))
    except UntrustedCheckpoint:
        raise
    except Exception as exc:  # noqa: BLE001 - one bad variable must not stop the others
        report.skipped.append(Skipped(name, f"failed: {type(exc).__name__}: {exc}", kind, stage="restore"))
    else:
        report.restored.append(name)
    return True


class _Loader:
    """Turns manifest entries back into namespace bindings."""

    def __init__(self, data: str, namespace: dict, run_source: RunSource, memory: PreparedMemory | None = None):
        self.data = data
        self.namespace = namespace
        self.run_source = run_source
        self.memory = memory
        self.bytes = 0
        self._small: bytes | None = None

    def apply(self, entry: dict) -> None:
        kind = entry.get("kind")
        name = entry["name"]
        if kind == "module":
            self.namespace[name] = importlib.import_module(_field(entry, "module", str))
        elif kind in ("function", "class"):
            self._run_definition(entry)
        elif kind == "value":
            self.namespace[name] = self._load_value(entry)
        else:
            raise pickling.Damaged(f"unknown kind {kind!r} in the manifest")

    def _run_definition(self, entry: dict) -> None:
        name = entry["name"]
        alias = entry.get("alias_of")
        if isinstance(alias, str):
            if alias not in self.namespace:
                raise pickling.MissingName(alias)
            self.namespace[name] = self.namespace[alias]
            return
        source, defines = _field(entry, "source", str), _field(entry, "defines", str)
        missing = object()
        before = self.namespace.get(defines, missing)
        self.run_source(source, name, self.namespace)
        self.namespace[name] = self.namespace[defines]
        if defines != name:  # e.g. `g = f`: the source also binds f, which was not what this entry saved
            if before is missing:
                del self.namespace[defines]
            else:
                self.namespace[defines] = before

    def _load_value(self, entry: dict) -> Any:
        file, offset, size = _field(entry, "file", str), _field(entry, "offset", int), _field(entry, "size", int)
        if os.path.basename(file) != file or file.startswith("."):
            raise pickling.Damaged(f"file name {file!r} in the manifest is not one this kernel writes")
        crc = _field(entry, "crc32", int) if entry.get("layout") != LAYOUT else 0
        if file == SMALL_FILE:
            blob = self._small_file()
            if len(blob) < offset + size:
                raise pickling.Damaged(
                    f"{SMALL_FILE} is {len(blob)} bytes, the manifest expects at least {offset + size}: truncated"
                )
            segment = blob[offset : offset + size]
            pickling.check_segment(segment, crc)
            value = pickling.load_bytes(segment, self.namespace)
        elif entry.get("layout") == LAYOUT:
            value = pickling.load_file(self._open(file), entry, self.namespace, self.memory)
        else:  # a value file saved before layout 2: one checksum, buffers in the stream
            fd = self._open(file)
            with os.fdopen(fd, "rb") as f:
                pickling.verify_file(f, offset, size, crc)
                value = pickling.load(f, self.namespace)
        self.bytes += size
        return value

    def _open(self, file: str) -> int:
        path = os.path.join(self.data, file)
        try:
            return open_trusted(path, what="checkpoint file")
        except FileNotFoundError:
            raise pickling.Damaged(f"its file {path} is missing") from None

    def _small_file(self) -> bytes:
        if self._small is None:
            with os.fdopen(self._open(SMALL_FILE), "rb") as f:
                self._small = f.read()
        return self._small

    def close(self) -> None:
        self._small = None


def _field(entry: dict, key: str, kind: type) -> Any:
    value = entry.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise pickling.Damaged(f"the manifest entry has no valid {key!r}")
    return value
