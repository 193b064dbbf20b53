"""Checkpoints: save a notebook's user namespace, bring it back after a restart.

Pure logic on a namespace dict (no Jupyter imports):

    manifest = save(namespace, directory, "before-training")
    report = restore(namespace, directory)          # the latest checkpoint
    print(report.summary())

Per variable: modules come back as imports, functions and classes defined in
cells as their source (run again before the data, so instances of cell classes
unpickle), everything else by value with pickle protocol 5.  What cannot be
saved is listed in the manifest with the reason.  Files are owner-only and
committed atomically (checkpoint_store.py); restore refuses files anyone else
could have written, because unpickling runs code.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import re
import sys
import time
import types
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import checkpoint_pickle as cpickle
from .checkpoint_source import NoSource, RunSource, default_cell_files, is_cell_defined, source_of
from .checkpoint_source import run_source as default_run_source
from .checkpoint_store import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    BadCheckpointName,
    CheckpointError,
    CheckpointInfo,
    CheckpointNotFound,
    CheckpointTooLarge,
    CheckpointWriteError,
    CorruptCheckpoint,
    UntrustedCheckpoint,
    check_trusted,
    check_trusted_dir,
    checkpoint_dir,
    drop_checkpoint,
    ensure_private_dir,
    fsync_dir,
    latest_name,
    list_infos,
    new_data_dir,
    open_trusted,
    read_manifest,
    remove_leftovers,
    remove_stale,
    remove_tree,
    validate_name,
    write_latest,
    write_manifest,
)

__all__ = [
    "DEFAULT_NAME",
    "DEFAULT_SIZE_LIMIT",
    "BadCheckpointName",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointNotFound",
    "CheckpointTooLarge",
    "CheckpointWriteError",
    "CorruptCheckpoint",
    "Manifest",
    "RestoreReport",
    "Skipped",
    "UntrustedCheckpoint",
    "drop",
    "list_checkpoints",
    "restore",
    "save",
    "user_items",
    "validate_name",
]

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
    saved: float
    entries: list[dict]
    seconds: float
    bytes: int

    @property
    def saved_names(self) -> list[str]:
        return [e["name"] for e in self.entries if e.get("status") == "saved"]

    @property
    def skipped(self) -> list[Skipped]:
        return [Skipped(e["name"], e.get("reason", ""), e.get("kind", "value")) for e in self.entries if e.get("status") != "saved"]

    def summary(self) -> str:
        head = (
            f"saved {len(self.saved_names)} names to checkpoint {self.name!r} "
            f"({_size(self.bytes)}, {self.seconds:.2f} s) in {self.path}"
        )
        return _with_skipped(head, self.skipped)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "path": self.path,
            "saved": self.saved,
            "names": self.saved_names,
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
    saved: float
    restored: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    seconds: float = 0.0
    bytes: int = 0

    def summary(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.saved)) if self.saved else "?"
        head = (
            f"restored {len(self.restored)} names from checkpoint {self.name!r} "
            f"(saved {when}, {_size(self.bytes)}) in {self.seconds:.2f} s"
        )
        return _with_skipped(head, self.skipped)

    def as_dict(self) -> dict:
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


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


# -- save ---------------------------------------------------------------------------


def save(
    namespace: Mapping[str, Any],
    directory: str,
    name: str | None = None,
    *,
    size_limit: int = DEFAULT_SIZE_LIMIT,
    total_limit: int | None = None,
    hidden: Mapping[str, Any] | None = None,
    cell_files: Iterable[str] | None = None,
) -> Manifest:
    """Save the user variables of `namespace` as checkpoint `name` (default 'default') under `directory`.

    A variable pickling to more than `size_limit` bytes is skipped (listed with
    the reason); past `total_limit` bytes in all, the save is abandoned with
    CheckpointTooLarge.  On any error the previous checkpoint of that name is
    left as it was.
    """
    name = validate_name(DEFAULT_NAME if name is None else name)
    started = time.perf_counter()
    items = user_items(namespace, hidden)
    if total_limit is not None:
        estimate = sum(n for n in (cpickle.buffer_nbytes(v) for _, v in items) if n)
        if estimate > total_limit:
            raise CheckpointTooLarge(
                f"not saved: the namespace holds at least {_size(estimate)} of buffers, over the limit of {_size(total_limit)}"
            )
    root = ensure_private_dir(directory)
    remove_leftovers(root)
    cpath = ensure_private_dir(checkpoint_dir(root, name))
    had_previous = os.path.isfile(os.path.join(cpath, MANIFEST))
    try:
        fsync_dir(root)
        data = new_data_dir(cpath)
    except OSError as exc:
        raise _write_error(name, root, exc, had_previous) from exc
    try:
        module_name = namespace.get("__name__", "__main__")
        entries, nbytes = _write_entries(items, namespace, data, module_name, size_limit, total_limit, cell_files)
        fsync_dir(data)
        saved = time.time()
        seconds = time.perf_counter() - started
        manifest = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "name": name,
            "saved": saved,
            "saved_iso": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(saved)),
            "python": sys.version.split()[0],
            "pickle_protocol": cpickle.PROTOCOL,
            "namespace_module": module_name,
            "data": os.path.basename(data),
            "entries": entries,
            "totals": {
                "names": sum(1 for e in entries if e["status"] == "saved"),
                "skipped": sum(1 for e in entries if e["status"] != "saved"),
                "bytes": nbytes,
            },
            "seconds": round(seconds, 6),
        }
        write_manifest(cpath, manifest)
    except BaseException as exc:
        if not _committed(cpath, data):
            remove_tree(data)  # the old manifest still points at the old data: nothing else to undo
        if isinstance(exc, cpickle.OverTotal):
            raise CheckpointTooLarge(
                f"not saved: the namespace pickles to more than {_size(total_limit or 0)}, the limit for this save"
            ) from None
        if isinstance(exc, OSError) and not isinstance(exc, CheckpointError):
            raise _write_error(name, root, exc, had_previous) from exc
        raise
    remove_stale(cpath, keep=os.path.basename(data))
    try:
        write_latest(root, name, saved)
    except OSError:
        pass  # the checkpoint is committed; without the mark, "latest" falls back to the newest manifest
    return Manifest(name, cpath, saved, entries, seconds, nbytes)


def _committed(cpath: str, data: str) -> bool:
    """Whether the manifest now on disk points at `data` (an interrupt can land just after the rename)."""
    try:
        return read_manifest(cpath, trusted=False)["data"] == os.path.basename(data)
    except CheckpointError:
        return False


def _write_error(name: str, root: str, exc: OSError, had_previous: bool) -> CheckpointWriteError:
    previous = f"the previous checkpoint {name!r} is intact" if had_previous else "nothing was saved"
    return CheckpointWriteError(
        f"could not save checkpoint {name!r} in {root}: {exc.strerror or exc}; {previous}. "
        f"Free some space there, or set CheckpointSettings.directory (or size_limit) and save again."
    )


def _write_entries(
    items: list[tuple[str, Any]],
    namespace: Mapping[str, Any],
    data: str,
    module_name: str,
    size_limit: int,
    total_limit: int | None,
    cell_files: Iterable[str] | None,
) -> tuple[list[dict], int]:
    cells = list(cell_files) if cell_files is not None else default_cell_files()
    entries: list[dict] = []
    refs: dict[int, str] = {}  # cell-defined functions/classes, pickled as references to these names
    first_name: dict[int, str] = {}
    values: list[tuple[dict, Any]] = []
    for var, value in items:
        entry: dict[str, Any] = {"name": var, "type": _type_name(value)}
        entries.append(entry)
        if isinstance(value, types.ModuleType):
            entry["kind"] = "module"
            _module_entry(entry, var, value)
        elif is_cell_defined(value, module_name):
            entry["kind"] = "class" if isinstance(value, type) else "function"
            if id(value) in first_name:
                entry.update(status="saved", alias_of=first_name[id(value)], size=0)
                continue
            try:
                source, defines = source_of(value, cells)
            except NoSource as exc:
                entry.update(status="skipped", reason=f"no source: {exc}")
                continue
            entry.update(status="saved", source=source, defines=defines, size=len(source.encode()))
            refs[id(value)] = var
            first_name[id(value)] = var
        else:
            entry["kind"] = "value"
            values.append((entry, value))
    budget = cpickle.Budget(total_limit)
    nbytes = 0
    small = _SmallFile(os.path.join(data, SMALL_FILE))
    args = _PickleArgs(refs, namespace, module_name)
    try:
        for i, (entry, value) in enumerate(values):
            _write_value(entry, value, os.path.join(data, f"v{i:05d}.pkl"), size_limit, budget, args, small)
            nbytes += entry.get("size", 0) if entry["status"] == "saved" else 0
        small.finish()
    finally:
        small.close()
    return entries, nbytes


def _type_name(value: Any) -> str:
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}"


def _module_entry(entry: dict, var: str, module: types.ModuleType) -> None:
    modname = _import_name(module)
    if modname is None:
        # e.g. a module made with types.ModuleType, or loaded from a path without registering it
        entry.update(status="skipped", reason="module not importable by name (not in sys.modules); import it again")
        return
    parent, _, last = modname.rpartition(".")
    if parent:
        statement = f"from {parent} import {last}" + ("" if last == var else f" as {var}")
    else:
        statement = f"import {modname}" + ("" if modname == var else f" as {var}")
    entry.update(status="saved", module=modname, statement=statement, size=0)


def _import_name(module: types.ModuleType) -> str | None:
    """The name to import `module` by: its own, or a package path it is known by (os.path, not posixpath)."""
    own = getattr(module, "__name__", None)
    known = [key for key, mod in list(sys.modules.items()) if mod is module]
    if not known:
        return None
    if own in known and "." in own:
        return own
    dotted = sorted(key for key in known if "." in key)
    if dotted:
        return dotted[0]
    return own if own in known else known[0]


class _SmallFile:
    """The one file holding every small pickled value of a save, with offsets."""

    def __init__(self, path: str):
        self.path = path
        self.fd: int | None = None
        self.offset = 0

    def append(self, data: bytes | bytearray) -> int:
        if self.fd is None:
            self.fd = cpickle.create_private_file(self.path)
        offset = self.offset
        cpickle.write_all(self.fd, data)
        self.offset += len(data)
        return offset

    def finish(self) -> None:
        if self.fd is not None:
            os.fsync(self.fd)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


@dataclass
class _PickleArgs:
    refs: dict[int, str]
    namespace: Mapping[str, Any]
    module: str


def _write_value(
    entry: dict, value: Any, path: str, size_limit: int, budget: cpickle.Budget, args: _PickleArgs, small: _SmallFile
) -> None:
    nbytes = cpickle.buffer_nbytes(value)
    if nbytes is not None and nbytes > size_limit:
        entry.update(status="skipped", reason=_over_limit(size_limit), size=nbytes)
        return
    writer = cpickle.ValueWriter(path, size_limit, budget)
    try:
        cpickle.dump(value, writer, args.refs, args.namespace, args.module)
        writer.finish()
    except cpickle.OverLimit:
        writer.discard()
        _refund(budget, writer)
        entry.update(status="skipped", reason=_over_limit(size_limit))
        return
    except Exception as exc:  # noqa: BLE001 - any error of the value's own pickling skips that value only
        writer.discard()
        if writer.io_error is not None:
            raise writer.io_error from None  # the disk failed, not the value: abandon the save
        if isinstance(exc, cpickle.OverTotal):
            raise
        _refund(budget, writer)
        entry.update(status="skipped", reason=_unpicklable(exc))
        return
    except BaseException:
        writer.discard()
        raise
    entry.update(status="saved", size=writer.size, crc32=writer.crc)
    if writer.spilled:
        entry.update(file=os.path.basename(path), offset=0)
    else:
        entry.update(file=SMALL_FILE, offset=small.append(writer.memory))


def _refund(budget: cpickle.Budget, writer: cpickle.ValueWriter) -> None:
    if budget.left is not None:
        budget.left += writer.size


def _over_limit(limit: int) -> str:
    return (
        f"over the size limit: more than {_size(limit)} pickled; raise CheckpointSettings.size_limit "
        f"or save it yourself (e.g. to a file you can load)"
    )


def _unpicklable(exc: BaseException) -> str:
    text = f"unpicklable ({type(exc).__name__}: {exc})"
    if "__main__" in str(exc):
        text += "; it refers to a class or function that was redefined or deleted since it was made"
    return text


# -- restore ------------------------------------------------------------------------


def restore(
    namespace: dict,
    directory: str,
    name: str | None = None,
    *,
    run_source: RunSource = default_run_source,
) -> RestoreReport:
    """Bring checkpoint `name` (default: the latest) back into `namespace`.

    Imports first, then cell sources, then data; a variable that fails is
    reported and the others still come back.  Refuses (UntrustedCheckpoint)
    files or directories not owned by you or writable by group/others.
    """
    started = time.perf_counter()
    if not os.path.isdir(directory):
        raise CheckpointNotFound(f"no checkpoints in {directory} yet; save one first (%checkpoint save)")
    check_trusted_dir(directory, what="checkpoint directory", follow=True)
    if name is None:
        name = latest_name(directory)
        if name is None:
            raise CheckpointNotFound(f"no checkpoints in {directory} yet; save one first (%checkpoint save)")
    cpath = checkpoint_dir(directory, name)
    if not os.path.isfile(os.path.join(cpath, MANIFEST)):
        available = ", ".join(i.name for i in list_infos(directory)) or "none"
        raise CheckpointNotFound(f"no checkpoint named {name!r} in {directory} (available: {available})")
    check_trusted_dir(cpath, what="checkpoint directory")
    manifest = read_manifest(cpath)
    data = os.path.join(cpath, manifest["data"])
    check_trusted_dir(data, what="checkpoint data directory")
    _check_files_trusted(data)
    report = RestoreReport(name, cpath, float(manifest.get("saved", 0.0)))
    loader = _Loader(data, namespace, run_source)
    with _no_gc():
        _restore_entries(manifest["entries"], loader, report)
    report.bytes = loader.bytes
    report.seconds = time.perf_counter() - started
    return report


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
    except (NameError, cpickle.MissingName) as exc:
        if not last_try:
            return False
        report.skipped.append(Skipped(name, f"failed: {exc}", kind, stage="restore"))
    except cpickle.Damaged as exc:
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

    def __init__(self, data: str, namespace: dict, run_source: RunSource):
        self.data = data
        self.namespace = namespace
        self.run_source = run_source
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
            raise cpickle.Damaged(f"unknown kind {kind!r} in the manifest")

    def _run_definition(self, entry: dict) -> None:
        name = entry["name"]
        alias = entry.get("alias_of")
        if isinstance(alias, str):
            if alias not in self.namespace:
                raise cpickle.MissingName(alias)
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
        file, offset, size, crc = _field(entry, "file", str), _field(entry, "offset", int), _field(entry, "size", int), _field(entry, "crc32", int)
        if os.path.basename(file) != file or file.startswith("."):
            raise cpickle.Damaged(f"file name {file!r} in the manifest is not one this kernel writes")
        if file == SMALL_FILE:
            blob = self._small_file()
            if len(blob) < offset + size:
                raise cpickle.Damaged(f"{SMALL_FILE} is {len(blob)} bytes, the manifest expects at least {offset + size}: truncated")
            segment = blob[offset : offset + size]
            cpickle.check_segment(segment, crc)
            value = cpickle.load_bytes(segment, self.namespace)
        else:
            fd = self._open(file)
            with os.fdopen(fd, "rb") as f:
                cpickle.verify_file(f, offset, size, crc)
                value = cpickle.load(f, self.namespace)
        self.bytes += size
        return value

    def _open(self, file: str) -> int:
        path = os.path.join(self.data, file)
        try:
            return open_trusted(path, what="checkpoint file")
        except FileNotFoundError:
            raise cpickle.Damaged(f"its file {path} is missing") from None

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
        raise cpickle.Damaged(f"the manifest entry has no valid {key!r}")
    return value


# -- list and drop ------------------------------------------------------------------


def list_checkpoints(directory: str) -> list[CheckpointInfo]:
    """The checkpoints in `directory`, newest first, the latest one marked (reads manifests only)."""
    return list_infos(directory)


def drop(directory: str, name: str) -> str:
    """Delete checkpoint `name`; returns the path removed."""
    validate_name(name)
    return drop_checkpoint(directory, name)
