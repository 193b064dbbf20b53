"""Saving a namespace: imports by name, cell definitions by source, data by value (pickle protocol 5)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from . import pickling
from .buffers import LAYOUT
from .errors import CheckpointStoreError, CheckpointTooLarge, CheckpointWriteError
from .manifests import checkpoint_dir, read_manifest, remove_leftovers, remove_stale, write_latest, write_manifest
from .model import DEFAULT_NAME, DEFAULT_SIZE_LIMIT, SMALL_FILE, Manifest, size_text, user_items
from .source import NoSource, default_cell_files, is_cell_defined, source_of
from .store import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    ensure_private_dir,
    fsync_dir,
    new_data_dir,
    remove_tree,
    validate_name,
)


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
        estimate = sum(n for n in (pickling.buffer_nbytes(v) for _, v in items) if n)
        if estimate > total_limit:
            raise CheckpointTooLarge(
                f"not saved: the namespace holds at least {size_text(estimate)} of buffers, "
                f"over the limit of {size_text(total_limit)}"
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
            "pickle_protocol": pickling.PROTOCOL,
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
        if isinstance(exc, pickling.OverTotal):
            raise CheckpointTooLarge(
                f"not saved: the namespace pickles to more than {size_text(total_limit or 0)}, the limit for this save"
            ) from None
        if isinstance(exc, OSError) and not isinstance(exc, CheckpointStoreError):
            raise _write_error(name, root, exc, had_previous) from exc
        raise
    remove_stale(cpath, keep=os.path.basename(data))
    # The checkpoint is committed; without the mark, "latest" falls back to the newest manifest.
    with contextlib.suppress(OSError):
        write_latest(root, name, saved)
    return Manifest(name, cpath, saved, entries, seconds, nbytes)


def _committed(cpath: str, data: str) -> bool:
    """Whether the manifest now on disk points at `data` (an interrupt can land just after the rename)."""
    try:
        return bool(read_manifest(cpath, trusted=False)["data"] == os.path.basename(data))
    except CheckpointStoreError:
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
    budget = pickling.Budget(total_limit)
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
    own: str | None = getattr(module, "__name__", None)
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
            self.fd = pickling.create_private_file(self.path)
        offset = self.offset
        pickling.write_all(self.fd, data)
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
    entry: dict, value: Any, path: str, size_limit: int, budget: pickling.Budget, args: _PickleArgs, small: _SmallFile
) -> None:
    nbytes = pickling.buffer_nbytes(value)
    if nbytes is not None and nbytes > size_limit:
        entry.update(status="skipped", reason=_over_limit(size_limit), size=nbytes)
        return
    writer = pickling.ValueWriter(path, size_limit, budget)
    try:
        imports = pickling.dump(value, writer, args.refs, args.namespace, args.module)
        writer.finish()
    except pickling.OverLimit:
        writer.discard()
        _refund(budget, writer)
        entry.update(status="skipped", reason=_over_limit(size_limit))
        return
    except Exception as exc:  # any error of the value's own pickling skips that value only
        writer.discard()
        if writer.io_error is not None:
            raise writer.io_error from None  # the disk failed, not the value: abandon the save
        if isinstance(exc, pickling.OverTotal):
            raise
        _refund(budget, writer)
        entry.update(status="skipped", reason=_unpicklable(exc))
        return
    except BaseException:
        writer.discard()
        raise
    entry.update(status="saved", size=writer.size)
    if imports:
        entry["imports"] = imports
    if writer.spilled:
        # Its own file: buffers out of band, a checksum per chunk (checkpoint/buffers.py).
        entry.update(
            file=os.path.basename(path),
            offset=0,
            layout=LAYOUT,
            stream=writer.stream,
            chunks=writer.stream_chunks,
            buffers=writer.spans,
        )
    else:
        entry.update(file=SMALL_FILE, offset=small.append(writer.memory), crc32=writer.crc)


def _refund(budget: pickling.Budget, writer: pickling.ValueWriter) -> None:
    if budget.left is not None:
        budget.left += writer.size


def _over_limit(limit: int) -> str:
    return (
        f"over the size limit: more than {size_text(limit)} pickled; raise CheckpointSettings.size_limit "
        f"or save it yourself (e.g. to a file you can load)"
    )


def _unpicklable(exc: BaseException) -> str:
    text = f"unpicklable ({type(exc).__name__}: {exc})"
    if "__main__" in str(exc):
        text += "; it refers to a class or function that was redefined or deleted since it was made"
    return text
