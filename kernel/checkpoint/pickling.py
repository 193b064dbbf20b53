"""Pickling one variable: protocol 5, large buffers written straight to the file, checksums.

- Cell-defined functions and classes are pickled as references to the
  namespace (they come back from their source first), so instances of cell
  classes unpickle without `sys.modules['__main__']` being the namespace.
- Modules inside data are pickled as imports.
- Large buffers go out of band (buffers.py): numpy arrays, array.array and
  memoryview through `PickleBuffer` (array's own reduce would copy the whole
  buffer with `tobytes()` first), and a variable that is itself bytes or a
  bytearray; they are written raw after the stream and mapped back.
- Every write is counted (per-variable size limit, total limit) and checksummed
  (CRC-32 per 64 MB chunk, so a restore checks on every core).
"""

from __future__ import annotations

import array
import contextlib
import importlib
import io
import os
import pickle
import sys
import types
import zlib
from collections.abc import Mapping
from typing import Any, BinaryIO

from . import buffers as oob
from .buffers import Damaged as Damaged
from .prepared import PreparedMemory
from .store import create_private_file, write_all

PROTOCOL = 5
# Values pickled smaller than this share one file per save (one fsync, not one per variable).
SMALL = 256 * 1024
_READ_CHUNK = 8 * 1024 * 1024


class OverLimit(Exception):
    """The pickled value grew past the per-variable size limit."""

    def __init__(self, limit: int):
        super().__init__(limit)
        self.limit = limit


class OverTotal(Exception):
    """The save as a whole grew past its total limit (autosave)."""


class MissingName(Exception):
    """A pickle refers to a namespace name that is not (yet) defined."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"it refers to {self.name!r}, which is not defined in the namespace"


# -- reducers (their module path is part of the checkpoint format: keep the names) -----

# Where these reducers lived before the package was split; checkpoints saved then name it.
LEGACY_MODULE = "cancelkernel.checkpoint_pickle"


def _namespace_ref(name: str) -> Any:
    """Placeholder resolved by `Unpickler.find_class`; reached only by a plain `pickle.load`."""
    raise pickle.UnpicklingError(
        f"{name!r} is a name of a notebook namespace; load this file with cancelkernel.checkpoint.restore"
    )


def _array_from_buffer(typecode: str, data: Any) -> array.array:
    result = array.array(typecode)
    result.frombytes(data)
    return result


def _bytearray_from_buffer(data: Any) -> bytearray:
    return data if type(data) is bytearray else bytearray(data)  # the loader already read it into its own bytearray


class _Whole:
    """A variable that is itself a large bytearray: pickled through PickleBuffer so it can leave the stream."""

    def __init__(self, value: bytearray):
        self.value = value


def _memoryview_from_buffer(data: Any, fmt: str, shape: tuple[int, ...], readonly: bool) -> memoryview:
    view = memoryview(data)
    # Formats cast() cannot rebuild come back as plain bytes.
    with contextlib.suppress(TypeError, ValueError):
        view = view.cast("B").cast(fmt, shape) if shape else view  # type: ignore[call-overload]  # fmt comes from the saved view
    return view.toreadonly() if readonly else view


class Pickler(pickle.Pickler):
    """pickle.Pickler with namespace references, module imports and buffer reducers.

    `refs` maps id() of the cell-defined functions and classes (saved as source)
    to their names; they, and what is nested in them (`Outer.Inner`), are
    pickled as references that the Unpickler resolves in the namespace.
    """

    def __init__(
        self, file: Any, refs: dict[int, str], namespace: Mapping[str, Any], module: str, buffer_callback: Any = None
    ):
        super().__init__(file, protocol=PROTOCOL, buffer_callback=buffer_callback)
        self._refs = refs
        self._namespace = namespace
        self._module = module
        self.modules: set[str] = set()  # modules of the objects pickled: what a restore will import
        self.whole: pickle.PickleBuffer | None = None  # the buffer of a bytearray variable (see _Whole)

    def reducer_override(self, obj: Any) -> Any:
        # Not called for exact bytes/str/int/list/dict/... (the C pickler's fast path), so it costs nothing there.
        name = self._refs.get(id(obj))
        if name is not None:
            return _namespace_ref, (name,)
        cls = type(obj)
        self.modules.add(cls.__module__)
        if cls is _Whole:
            self.whole = pickle.PickleBuffer(obj.value)
            return _bytearray_from_buffer, (self.whole,)
        if cls is array.array:
            return _array_from_buffer, (obj.typecode, pickle.PickleBuffer(obj))
        if cls is memoryview:
            if obj.c_contiguous:
                return _memoryview_from_buffer, (pickle.PickleBuffer(obj), obj.format, obj.shape, obj.readonly)
            return _memoryview_from_buffer, (obj.tobytes(), obj.format, obj.shape, obj.readonly)
        if isinstance(obj, types.ModuleType) and sys.modules.get(obj.__name__) is obj:
            return importlib.import_module, (obj.__name__,)
        if isinstance(obj, (type, types.FunctionType)) and getattr(obj, "__module__", None) == self._module:
            path = self._nested_path(obj)
            if path is not None:
                return _namespace_ref, (path,)
        return NotImplemented

    def _nested_path(self, obj: Any) -> str | None:
        """'Outer.Inner' for a class or function defined inside a saved cell class."""
        qualname = getattr(obj, "__qualname__", "")
        head, _, rest = qualname.partition(".")
        if not rest or "<locals>" in qualname:
            return None
        owner = self._namespace.get(head)
        owner_name = self._refs.get(id(owner))
        if owner_name is None:
            return None
        found: Any = owner
        for part in rest.split("."):
            found = getattr(found, part, None)
        return f"{owner_name}.{rest}" if found is obj else None


class Unpickler(pickle.Unpickler):
    """Resolves namespace references (and the namespace's own module name) in `namespace`."""

    def __init__(self, file: Any, namespace: dict, buffers: Any = None):
        super().__init__(file, buffers=buffers)
        self._namespace = namespace
        self._module = namespace.get("__name__", "__main__")

    def find_class(self, module: str, name: str) -> Any:
        if module == LEGACY_MODULE:
            module = __name__
        if module == __name__ and name == "_namespace_ref":
            return self._lookup
        if module == self._module:
            return self._lookup(name)
        return super().find_class(module, name)

    def _lookup(self, path: str) -> Any:
        head, *rest = path.split(".")
        try:
            value = self._namespace[head]
        except KeyError:
            raise MissingName(head) from None
        for part in rest:
            value = getattr(value, part)
        return value


# -- writing ------------------------------------------------------------------------


class Budget:
    """Bytes a save may still write in total (None: no limit)."""

    def __init__(self, total: int | None):
        self.left = total


class ValueWriter:
    """File-like sink for one pickled value: counts, checksums, enforces limits.

    Small pickles stay in memory (they go into the shared small-values file);
    past `SMALL` bytes the value spills into its own file at `path`.
    """

    def __init__(self, path: str, limit: int, budget: Budget):
        self.path = path
        self.limit = limit
        self.budget = budget
        self.size = 0
        self.checksums = oob.ChunkedCrc()  # of the region being written: the stream, then each buffer
        self.stream = 0  # bytes of pickle stream; buffers follow it in the file
        self.stream_chunks: list[int] = []
        self.spans: list[dict] = []  # offset, size, chunks (and copy) of each out-of-band buffer
        self.memory = bytearray()
        self.fd: int | None = None
        self.spilled = False  # True once the value has its own file
        self.io_error: OSError | None = None

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        n = view.nbytes
        if self.size + n > self.limit:
            raise OverLimit(self.limit)
        if self.budget.left is not None:
            if n > self.budget.left:
                raise OverTotal()
            self.budget.left -= n
        self.checksums.update(view)
        try:
            if self.fd is None and len(self.memory) + n <= SMALL:
                self.memory += view
            else:
                write_all(self._spill() if self.fd is None else self.fd, view)
        except OSError as exc:
            self.io_error = exc  # a disk problem: the caller aborts the whole save
            raise
        self.size += n
        return n

    @property
    def crc(self) -> int:
        """CRC-32 of a value small enough for the shared file (one chunk)."""
        return self.checksums.chunks()[0]

    def end_stream(self) -> None:
        self.stream, self.stream_chunks = self.size, self.checksums.chunks()

    def add_buffers(self, buffers: list[pickle.PickleBuffer], owned: set[int]) -> None:
        """After the stream: each out-of-band buffer, page-aligned and checksummed on its own, in the value's own file.

        `owned`: id()s of buffers that come back as memory of their own (a bytearray variable),
        not as a view of the map.
        """
        for buffer in buffers:
            if self.fd is None:
                self._spill()
            self.checksums = oob.ChunkedCrc()
            self.write(bytes(oob.padding(self.size)))  # zeros between regions: not covered by a checksum
            start, self.checksums = self.size, oob.ChunkedCrc()
            raw = buffer.raw()
            self.write(raw)
            span = {"offset": start, "size": self.size - start, "chunks": self.checksums.chunks()}
            if id(buffer) in owned:
                span["copy"] = True
            self.spans.append(span)

    def _spill(self) -> int:
        """From memory to the value's own file (past SMALL bytes, or for out-of-band buffers); its fd."""
        self.fd = fd = create_private_file(self.path)
        self.spilled = True
        write_all(fd, self.memory)
        self.memory = bytearray()
        return fd

    def finish(self) -> None:
        """Make the spilled file durable."""
        if self.fd is not None:
            try:
                os.fsync(self.fd)
            except OSError as exc:
                self.io_error = exc
                raise
            finally:
                os.close(self.fd)
                self.fd = None

    def discard(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.spilled:
            with contextlib.suppress(OSError):
                os.unlink(self.path)


def dump(value: Any, writer: ValueWriter, refs: dict[int, str], namespace: Mapping[str, Any], module: str) -> list[str]:
    """Pickle `value` into `writer`, large buffers after the stream;
    the modules its pickle refers to (for a restore to import ahead)."""
    buffers: list[pickle.PickleBuffer] = []
    pickler = Pickler(writer, refs, namespace, module, buffer_callback=oob.out_of_band(buffers))
    # Bytes stay in the stream: read straight into their object
    whole = type(value) is bytearray and len(value) >= oob.OOB_MIN
    pickler.dump(_Whole(value) if whole else value)
    writer.end_stream()
    if buffers:
        writer.add_buffers(buffers, {id(pickler.whole)} if pickler.whole is not None else set())
    return sorted(m for m in pickler.modules if m not in ("builtins", module, __name__) and m in sys.modules)


# -- reading ------------------------------------------------------------------------


def verify_file(f: BinaryIO, offset: int, size: int, crc: int) -> None:
    """Check size and CRC-32 of `size` bytes at `offset` before unpickling them."""
    f.seek(0, io.SEEK_END)
    end = f.tell()
    if end < offset + size:
        raise Damaged(f"its file is {end} bytes, the manifest expects at least {offset + size}: truncated")
    f.seek(offset)
    buf = bytearray(min(_READ_CHUNK, max(size, 1)))
    view = memoryview(buf)
    left, got = size, 0
    while left:
        n = f.readinto(view[: min(left, len(buf))])  # type: ignore[attr-defined]
        if not n:
            raise Damaged("its file ended early: truncated")
        got = zlib.crc32(view[:n], got)
        left -= n
    if got != crc:
        raise Damaged(oob.CHANGED)
    f.seek(offset)


def load(f: BinaryIO, namespace: dict) -> Any:
    return Unpickler(f, namespace).load()


def load_file(fd: int, entry: dict, namespace: dict, memory: PreparedMemory | None = None) -> Any:
    """A value's own file, layout 2 (buffers.py); fd is closed.  `memory`: bytearrays faulted in ahead (prepared.py)."""
    return oob.load(fd, entry, lambda file, buffers: Unpickler(file, namespace, buffers), memory)


def load_bytes(data: bytes, namespace: dict) -> Any:
    return Unpickler(io.BytesIO(data), namespace).load()


def check_segment(data: bytes, crc: int) -> None:
    if zlib.crc32(data) != crc:
        raise Damaged(oob.CHANGED)


def buffer_nbytes(value: Any) -> int | None:
    """Size of a buffer-like value without pickling it (None if not buffer-like)."""
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if isinstance(value, (memoryview, array.array)):
        return memoryview(value).nbytes
    nbytes = getattr(type(value), "nbytes", None)  # numpy arrays and friends
    if nbytes is not None:
        try:
            n = value.nbytes
            return n if isinstance(n, int) else None
        except Exception:  # noqa: BLE001 - a foreign property may raise anything
            return None
    return None
