"""Memory for a restore's large bytearrays: in huge pages, and faulted in ahead by a warm spare while it waits.

A bytearray owns its memory, so restoring one fills new memory, and on a VM
that costs more than the copy: every 4 KB page is a fault, and memory the
guest has not used lately faults in the host too (docs/checkpoints.md,
"Measured").  Two ways around it:

- a new bytearray of HUGE_MIN or more is advised into transparent huge pages
  before it is filled: one fault per 2 MB instead of 512;
- a spare kernel asked to prepare a checkpoint faults in, while it is idle, one
  bytearray per large bytearray the checkpoint holds (`PreparedMemory`); the
  restore reads into those, so it only copies and checks.

Prepared memory is memory the kernel holds (its resident set and its cgroup's
charge count it): it is given back when the restore did not use it, when the
first cell runs, or when a later prepare needs other sizes.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import sys
import threading
import typing as t
from typing import Any

from .model import size_text

# Past glibc's largest mmap threshold (32 MB): such a bytearray has a mapping of its own (the advice never lands
# on the shared heap), unmapped when it is freed.
HUGE_MIN = 32 << 20
PAGE = mmap.PAGESIZE
HUGE_PAGE = 2 << 20
# Linux 5.14's MADV_POPULATE_WRITE (Python's mmap module names it from 3.13 on only).
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 14)
UNSUPPORTED = -1  # what _advise says when it cannot ask


def new_bytearray(length: int) -> bytearray:
    """A bytearray of `length` bytes about to be overwritten whole:
    not zeroed first, starting on a page, in huge pages when large.

    Reads from the page cache into memory that starts 16 bytes into a page (as
    malloc gives it) cost twice the CPU of reads into memory that starts on a
    page (measured here: 0.26 against 0.12 s per GB), so the bytearray starts
    on the first page boundary of its allocation: deleting bytes from the front
    of a bytearray only moves where it starts.
    """
    own = _unfilled_bytearray(length + PAGE)
    del own[: -_address(own) % PAGE]
    del own[length:]
    if length >= HUGE_MIN:
        _advise(own, MADV_HUGEPAGE, HUGE_PAGE)
    return own


def fault_in(own: bytearray) -> None:
    """Have every page of `own` in memory now: one madvise where Linux can, else one write per page.

    MemoryError when the system says the memory is not there (the pages are
    then not written one by one: that would meet the OOM killer instead).
    """
    error = _advise(own, MADV_POPULATE_WRITE, PAGE)
    if error == 0:
        return
    if error not in (UNSUPPORTED, errno.EINVAL):  # EINVAL: a Linux before 5.14
        raise MemoryError(f"could not fault in {len(own)} bytes: {os.strerror(error)}")
    view = memoryview(own)
    view[::PAGE] = bytes(len(range(0, len(own), PAGE)))


class PreparedMemory:
    """Large bytearrays faulted in ahead for the restore of one checkpoint, kept by size until it takes them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, list[bytearray]] = {}
        self.note = ""  # why less than asked for was prepared (empty: all of it)

    @property
    def held(self) -> int:
        """Bytes held now."""
        with self._lock:
            return sum(size * len(kept) for size, kept in self._held.items())

    def fill(self, sizes: list[int], limit: int) -> int:
        """Hold one faulted-in bytearray for each of `sizes` of HUGE_MIN or more,
        at most `limit` bytes in all; bytes held.

        Those already held of a size asked for again are kept (nothing to do
        after a save that changed no sizes); the others are given back first.
        """
        wanted = sorted((s for s in sizes if s >= HUGE_MIN), reverse=True)
        with self._lock:
            old, self._held = self._held, {}
            room, new = limit, []
            for size in wanted:
                if old.get(size) and size <= room:
                    self._held.setdefault(size, []).append(old[size].pop())
                    room -= size
                else:
                    new.append(size)
            old.clear()  # given back before new memory is taken
            self.note = self._fill_new(new, room)
            return sum(size * len(kept) for size, kept in self._held.items())

    def _fill_new(self, sizes: list[int], room: int) -> str:
        left_out = 0
        for size in sizes:
            if size > room:
                left_out += size
                continue
            try:
                own = new_bytearray(size)
                fault_in(own)
            except MemoryError:
                left_out += size
                continue
            self._held.setdefault(size, []).append(own)
            room -= size
        if not left_out:
            return ""
        return f"{size_text(left_out)} not prepared: more than the memory the kernel may take for it"

    def take(self, length: int) -> bytearray | None:
        """A prepared bytearray of exactly `length` bytes (it stops being held here), or None."""
        with self._lock:
            kept = self._held.get(length)
            return kept.pop() if kept else None

    def release(self) -> int:
        """Give back everything held; the bytes given back."""
        with self._lock:
            freed = sum(size * len(kept) for size, kept in self._held.items())
            self._held = {}
            self.note = ""
        return freed


def _advise(own: bytearray, advice: int, align: int) -> int:
    """madvise() the whole `align`-aligned pages inside `own`'s memory:
    0, its errno, or UNSUPPORTED (no madvise, no whole page)."""
    madvise = _libc_madvise()
    if madvise is None:
        return UNSUPPORTED
    address = _address(own)
    start = -(-address // align) * align
    end = (address + len(own)) // PAGE * PAGE
    if end <= start:
        return UNSUPPORTED
    return 0 if madvise(start, end - start, advice) == 0 else ctypes.get_errno()


def _address(own: bytearray) -> int:
    """Where `own`'s bytes start in memory."""
    handle = ctypes.c_char.from_buffer(own)
    try:
        return ctypes.addressof(handle)
    finally:
        del handle  # a live export would forbid resizing the bytearray


def _libc_madvise() -> Any:
    global _madvise
    if _madvise is None:
        _madvise = False
        if sys.platform.startswith("linux"):
            try:
                found = ctypes.CDLL(None, use_errno=True).madvise
            except (OSError, AttributeError):
                return None
            found.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            found.restype = ctypes.c_int
            _madvise = found
    return _madvise or None


_madvise: Any = None


def _unfilled_bytearray(length: int) -> bytearray:
    """A bytearray of `length` bytes whose memory is not written first
    (CPython's PyByteArray_FromStringAndSize(NULL, n))."""
    global _from_string_and_size
    if _from_string_and_size is None:
        try:
            make = ctypes.pythonapi.PyByteArray_FromStringAndSize
        except AttributeError:  # not CPython: a zeroed one does as well, only slower
            return bytearray(length)
        make.restype = ctypes.py_object
        make.argtypes = [ctypes.c_char_p, ctypes.c_ssize_t]
        _from_string_and_size = make
    return t.cast(bytearray, _from_string_and_size(None, length))


_from_string_and_size: Any = None
