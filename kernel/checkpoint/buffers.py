"""Large buffers out of band: written after a value's pickle, checked on every core, mapped back copy-on-write.

A value file of layout 2 is `[pickle stream][pad][buffer 0][pad][buffer 1]...`.
Buffers of at least OOB_MIN bytes (numpy arrays, array.array, memoryview, and a
variable that is itself a bytearray) leave the stream: the pickler hands them
over (protocol 5 `buffer_callback`) and they are written raw, page-aligned.
The stream and each buffer are checksummed in CHUNK-sized pieces, so a restore
checks them on all cores at once (zlib.crc32 releases the GIL) before anything
is unpickled.  On restore the file is mapped copy-on-write: arrays come back as
views of the map (nothing is copied; a page is copied the first time it is
written); a bytearray is read straight into its own unzeroed memory (prepared.py:
huge pages, or memory a warm spare faulted in ahead), a chunk per core, each
checked as it arrives; array.array is copied out of the map once.
"""

from __future__ import annotations

import concurrent.futures
import mmap
import os
import pickle
import typing as t
import zlib
from collections.abc import Callable
from typing import Any

from .prepared import PreparedMemory, new_bytearray

OOB_MIN = 1 << 20
CHUNK = 64 << 20
STEP = 4 << 20  # a bytearray is read and checked this much at a time (fits the cache)
ALIGN = 4096
LAYOUT = 2


class Damaged(Exception):
    """A variable's bytes are not what was saved (size or checksum differ)."""


# What every checksum check says when the bytes differ.
CHANGED = "its bytes do not match the checksum recorded when it was saved: the file was changed or damaged"


class ChunkedCrc:
    """CRC-32 of a byte stream, one per CHUNK bytes (the last chunk may be shorter)."""

    def __init__(self) -> None:
        self._done: list[int] = []
        self._crc = 0
        self._fill = 0

    def update(self, view: memoryview) -> None:
        while view:
            take = min(len(view), CHUNK - self._fill)
            self._crc = zlib.crc32(view[:take], self._crc)
            self._fill += take
            view = view[take:]
            if self._fill == CHUNK:
                self._done.append(self._crc)
                self._crc, self._fill = 0, 0

    def chunks(self) -> list[int]:
        return [*self._done, self._crc] if self._fill or not self._done else list(self._done)


def padding(offset: int) -> int:
    """Bytes of zeros that bring `offset` to the next ALIGN boundary."""
    return -offset % ALIGN


def out_of_band(buffers: list[pickle.PickleBuffer]) -> Callable[[pickle.PickleBuffer], bool]:
    """The pickler's buffer_callback: large buffers are kept in `buffers` (out of band),
    small ones stay in the stream."""

    def keep(buffer: pickle.PickleBuffer) -> bool:
        if buffer.raw().nbytes < OOB_MIN:
            return True
        buffers.append(buffer)
        return False

    return keep


def verify(view: memoryview, chunks: list[int]) -> None:
    """Check every CHUNK of `view` against its CRC-32, in parallel when there are several; Damaged if one differs."""
    _check_coverage(len(view), chunks)
    _check_crcs(_per_chunk(lambda i: zlib.crc32(view[i * CHUNK : (i + 1) * CHUNK]), len(chunks)), chunks)


def _check_coverage(length: int, chunks: list[int]) -> None:
    if len(chunks) != max(1, -(-length // CHUNK)):
        raise Damaged("the manifest's checksums do not cover its bytes")


def _check_crcs(found: list[int], chunks: list[int]) -> None:
    if found != chunks:
        raise Damaged(CHANGED)


def _per_chunk(work: Callable[[int], int], count: int) -> list[int]:
    """work(0) ... work(count - 1), on every core when there are several (the work releases the GIL)."""
    workers = min(count, os.cpu_count() or 1, 8)
    if workers <= 1:
        return [work(i) for i in range(count)]
    with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="cancelkernel-chunk") as pool:
        return list(pool.map(work, range(count)))


def load(fd: int, entry: dict, unpickler: Callable[..., pickle.Unpickler], memory: PreparedMemory | None = None) -> Any:
    """Load one layout-2 value file (fd is closed): check every region, then unpickle with the buffers.

    `memory`: bytearrays faulted in ahead, taken for the bytearrays of their size.
    """
    try:
        size, stream, stream_chunks, spans = _layout(entry)
        actual = os.fstat(fd).st_size
        if actual < size or size == 0:
            raise Damaged(f"its file is {actual} bytes, the manifest expects {size}: truncated")
        mapping = mmap.mmap(fd, size, access=mmap.ACCESS_COPY)
        view = memoryview(mapping)
        verify(view[:stream], stream_chunks)
        buffers: list[Any] = []
        for offset, length, copy, chunks in spans:
            if copy:  # a bytearray owns its memory: read it there directly, checked as it comes in
                buffers.append(read_verified(fd, offset, length, chunks, memory))
            else:
                verify(view[offset : offset + length], chunks)
                buffers.append(view[offset : offset + length])
        with os.fdopen(os.dup(fd), "rb") as f:  # the stream (large bytes in it are read straight into their object)
            return unpickler(f, buffers=buffers).load()
    finally:
        os.close(fd)


def read_verified(
    fd: int, offset: int, length: int, chunks: list[int], memory: PreparedMemory | None = None
) -> bytearray:
    """`length` bytes of the file at `offset` as a new bytearray, each CHUNK read and checked on its own core;
    Damaged if one differs.

    The bytearray is one `memory` prepared ahead, else new memory not zeroed
    first (it is about to be overwritten whole), whose pages are first touched
    by the reads, on every core at once: on this kind of machine filling new
    memory is much of what a restore of a large bytearray costs.
    """
    _check_coverage(length, chunks)
    own = (memory.take(length) if memory is not None else None) or new_bytearray(length)
    view = memoryview(own)

    def one(i: int) -> int:
        start, end = i * CHUNK, min(length, (i + 1) * CHUNK)
        crc = 0
        for at in range(start, end, STEP):  # checked while the bytes just read are still in the cache
            piece = view[at : min(end, at + STEP)]
            _read_at(fd, piece, offset + at)
            crc = zlib.crc32(piece, crc)
        return crc

    _check_crcs(_per_chunk(one, len(chunks)), chunks)
    return own


def _read_at(fd: int, into: memoryview, offset: int) -> None:
    got = 0
    while got < len(into):
        n = os.preadv(fd, [into[got:]], offset + got)
        if n <= 0:
            raise Damaged("its file ended early: truncated")
        got += n


def owned_sizes(entry: dict) -> list[int]:
    """Sizes of the buffers a restore of this layout-2 entry reads into memory of their own (bytearrays);
    [] if none or malformed."""
    try:
        return [length for _, length, copy, _ in _layout(entry)[3] if copy]
    except Damaged:
        return []


def _layout(entry: dict) -> tuple[int, int, list[int], list[tuple[int, int, bool, list[int]]]]:
    size, stream, chunks, spans = entry.get("size"), entry.get("stream"), entry.get("chunks"), entry.get("buffers")
    if (
        not (isinstance(size, int) and isinstance(stream, int) and _crcs(chunks) and isinstance(spans, list))
        or not 0 <= stream <= size
    ):
        raise Damaged("the manifest entry has no valid layout (size, stream, chunks, buffers)")
    checked = []
    for span in spans:
        ok = isinstance(span, dict) and all(isinstance(span.get(k), int) and span[k] >= 0 for k in ("offset", "size"))
        if not ok or span["offset"] + span["size"] > size or not _crcs(span.get("chunks")):
            raise Damaged(f"the manifest names a buffer {span!r} outside its file")
        checked.append((span["offset"], span["size"], bool(span.get("copy")), span["chunks"]))
    return size, stream, t.cast("list[int]", chunks), checked


def _crcs(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(c, int) for c in value)
