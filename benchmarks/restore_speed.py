#!/usr/bin/env python
"""Checkpoint restore throughput, in this process (no kernel), beside this machine's floors for filling memory.

Namespaces: SIZE MB as one bytearray (restored into new memory, and into memory
prepared ahead as a warm spare does: `checkpoint.prepare(..., memory=...)`), as
numpy arrays (if numpy is installed), and a typical data-science namespace (a
few arrays, a dict of lists, a DataFrame if pandas is installed, functions and
classes).  Each is saved once; the files stay warm in the page cache.

The floors are what this machine needs to do parts of a restore's work on SIZE
MB, with nothing of ours: fault in and write new memory (4 KB pages, huge
pages), read the warm file into new memory or into memory faulted in ahead,
CRC-32 it (what a restore checks), map the file (with and without
MAP_POPULATE).  Every run does every floor and every restore once, one after
the other (interleaved, so load on the machine, and memory the VM's host must
fault in again, hit them alike); medians are reported, with the process's CPU
seconds (what the work took of the cores, whatever else ran) and our
restores' ratio to the floor that does the same work.

    python benchmarks/restore_speed.py --size-mb 1024 --runs 5 --json benchmarks/results/restore_speed.json
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import mmap
import os
import statistics
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import environment, markdown_table, write_json

from cancelkernel import checkpoint

STEP = 4 << 20  # as the restore reads and checks a bytearray
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
THREADS = 2


# -- the floors: parts of a restore's work, with nothing of ours ------------------------


def _memory(size: int, *, huge: bool = False, faulted: bool = False) -> mmap.mmap:
    """Private anonymous memory, as malloc gives a large bytearray (MAP_SHARED would be tmpfs, not this)."""
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if huge:
        m.madvise(mmap.MADV_HUGEPAGE)
    if faulted:
        m.madvise(MADV_POPULATE_WRITE)
    return m


def _parallel(size: int, work: Callable[[int, int], None]) -> None:
    """work(start, end) over THREADS equal parts at once (the work releases the GIL)."""
    part = size // THREADS
    threads = [threading.Thread(target=work, args=(i * part, (i + 1) * part)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _write(size: int, huge: bool) -> Callable[[], None]:
    def run() -> None:
        m = _memory(size, huge=huge)
        handle = ctypes.c_char.from_buffer(m)
        address = ctypes.addressof(handle)
        _parallel(size, lambda start, end: ctypes.memset(address + start, 1, end - start))
        del handle
        m.close()

    return run


def _read(
    fd: int, size: int, *, huge: bool = False, ahead: mmap.mmap | None = None, crc: bool = False
) -> Callable[[], None]:
    """Read the file into new memory, or into `ahead` (faulted in before, not timed), 4 MB at a time,
    CRC-32 each piece."""

    def run() -> None:
        m = ahead if ahead is not None else _memory(size, huge=huge)
        view = memoryview(m)

        def part(start: int, end: int) -> None:
            check = 0
            for at in range(start, end, STEP):
                piece = view[at : min(end, at + STEP)]
                os.preadv(fd, [piece], at)
                if crc:
                    check = zlib.crc32(piece, check)

        _parallel(size, part)
        view.release()
        if m is not ahead:
            m.close()

    return run


def _readinto(path: str, size: int) -> Callable[[], None]:
    def run() -> None:
        m = _memory(size)
        with open(path, "rb", buffering=0) as f:
            f.readinto(m)
        m.close()

    return run


def _crc(ahead: mmap.mmap, size: int) -> Callable[[], None]:
    view = memoryview(ahead)

    def run() -> None:
        _parallel(size, lambda start, end: zlib.crc32(view[start:end]) and None)

    return run


def _map(fd: int, size: int, populate: bool) -> Callable[[], None]:
    def run() -> None:
        flags = mmap.MAP_PRIVATE | (mmap.MAP_POPULATE if populate else 0)
        m = mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ)
        if not populate:
            view = memoryview(m)
            sum(view[:: mmap.PAGESIZE])  # one byte of every page
            view.release()
        m.close()

    return run


def floors(path: str, fd: int, size: int) -> dict[str, Callable[[], None]]:
    ahead = _memory(size, faulted=True)  # memory faulted in ahead, as a warm spare holds it: kept for the whole run
    return {
        "fault in and write new memory, 4 KB pages": _write(size, huge=False),
        "fault in and write new memory, huge pages": _write(size, huge=True),
        "read the file into new memory, 1 thread (readinto)": _readinto(path, size),
        "read the file into new memory, 4 KB pages": _read(fd, size),
        "read the file into new memory, huge pages": _read(fd, size, huge=True),
        "read the file into memory faulted in ahead": _read(fd, size, ahead=ahead),
        "CRC-32 of memory": _crc(ahead, size),
        "read + CRC-32, new memory, huge pages": _read(fd, size, huge=True, crc=True),
        "read + CRC-32, memory faulted in ahead": _read(fd, size, ahead=ahead, crc=True),
        "map the file, touch every page": _map(fd, size, populate=False),
        "map the file, MAP_POPULATE": _map(fd, size, populate=True),
    }


PREPARED = "bytearray, memory prepared ahead"
# Our restore -> the floor that does the same work (name in floors()).
SAME_WORK = {
    "bytearray": "read + CRC-32, new memory, huge pages",
    PREPARED: "read + CRC-32, memory faulted in ahead",
}


# -- our restores ----------------------------------------------------------------------


def namespaces(size: int) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {"bytearray": {"blob": bytearray(os.urandom(1 << 20)) * (size >> 20)}}
    try:
        import numpy as np
    except ImportError:
        return found
    found["numpy"] = {f"a{i}": np.frombuffer(os.urandom(size // 4), dtype=np.float64).copy() for i in range(4)}
    science: dict[str, Any] = {
        "np": np,
        "weights": np.random.default_rng(0).normal(size=(size // 16) // 8),
        "labels": np.arange(size // 64, dtype=np.int64),
        "rows": {f"col{i}": list(range(100_000)) for i in range(10)},
        "config": {"lr": 0.1, "layers": [64, 32, 16], "name": "run-7"},
    }
    try:
        import pandas as pd

        science["pd"] = pd
        science["frame"] = pd.DataFrame(
            {"x": np.arange(1_000_000), "y": np.random.default_rng(1).normal(size=1_000_000), "k": ["a", "b"] * 500_000}
        )
    except ImportError:
        pass
    found["data science"] = science
    return found


def _restore(
    directory: str, prepared: bool, prepare_times: list[float]
) -> tuple[Callable[[], None], Callable[[], None]]:
    """(before, run): one restore into a fresh namespace; `prepared`:
    memory faulted in ahead first, in `before` (not timed)."""
    memory: Any = None

    def before() -> None:
        nonlocal memory
        if prepared:
            memory = checkpoint.PreparedMemory()
            started = time.perf_counter()
            checkpoint.prepare(directory, memory=memory, memory_limit=1 << 40)
            prepare_times.append(time.perf_counter() - started)

    def run() -> None:
        target: dict[str, Any] = {"__name__": "__main__"}
        report = checkpoint.restore(target, directory, **({"memory": memory} if prepared else {}))
        assert not report.skipped, report.summary()

    return before, run


def _timed(case: Callable[[], None], before: Callable[[], None] | None) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one call; what it leaves is freed before the next."""
    if before is not None:
        before()
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    case()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    gc.collect()
    return wall, cpu


Samples = dict[str, list[tuple[float, float]]]  # label -> (wall, CPU) seconds of each run


def measure(size: int, runs: int) -> tuple[Samples, list[str], dict[str, checkpoint.Manifest], list[float]]:
    """Every floor and every restore once per run: (samples, the floors' labels, what was saved, prepare times)."""
    prepare_times: list[float] = []
    saved: dict[str, checkpoint.Manifest] = {}
    with tempfile.TemporaryDirectory(prefix="restore-speed-") as tmp:
        raw = os.path.join(tmp, "raw.bin")
        with open(raw, "wb") as f:
            f.write(os.urandom(1 << 20) * (size >> 20))
        fd = os.open(raw, os.O_RDONLY)
        cases = floors(raw, fd, size)
        floor_labels = list(cases)
        befores: dict[str, Callable[[], None]] = {}
        for label, ns in namespaces(size).items():
            directory = os.path.join(tmp, label.replace(" ", "-"))
            saved[label] = checkpoint.save({"__name__": "__main__", **ns}, directory)
            del ns
            befores[label], cases[label] = _restore(directory, False, prepare_times)
            # Not in a version before it (measured for a before/after).
            if label == "bytearray" and hasattr(checkpoint, "PreparedMemory"):
                saved[PREPARED] = saved[label]
                befores[PREPARED], cases[PREPARED] = _restore(directory, True, prepare_times)
        samples: Samples = {label: [] for label in cases}
        for run in range(runs):
            for label, case in cases.items():
                samples[label].append(_timed(case, befores.get(label)))
            print(f"run {run + 1}/{runs} done", file=sys.stderr)
        os.close(fd)
    return samples, floor_labels, saved, prepare_times


def report(size: int, samples: Samples, floor_labels: list[str], saved: dict[str, checkpoint.Manifest]) -> None:
    """The floors' table, then ours with the ratio to the floor that does the same work."""
    median = {label: statistics.median(wall for wall, _ in got) for label, got in samples.items()}
    cpu = {label: statistics.median(c for _, c in got) for label, got in samples.items()}
    best = {label: min(wall for wall, _ in got) for label, got in samples.items()}
    floor_rows = [
        [label, f"{median[label]:.3f} s", f"{best[label]:.3f} s", _rate(size, median[label]), f"{cpu[label]:.2f} s"]
        for label in floor_labels
    ]
    print(markdown_table(["floor (nothing of ours)", "median", "best", "rate (median)", "CPU (median)"], floor_rows))
    rows = []
    for label, manifest in saved.items():
        floor = SAME_WORK.get(label)
        ratio = f"{median[label] / median[floor]:.2f}x / {cpu[label] / cpu[floor]:.2f}x {floor}" if floor else ""
        times = [f"{manifest.seconds:.3f} s", f"{median[label]:.3f} s", f"{best[label]:.3f} s"]
        rows.append([label, f"{manifest.bytes / 1e6:.0f} MB", *times, _rate(manifest.bytes, median[label])])
        rows[-1] += [f"{cpu[label]:.2f} s", ratio]
    header = ["namespace", "checkpoint", "save", "restore (median)", "(best)", "rate (median)", "CPU (median)"]
    print()
    print(markdown_table([*header, "vs floor (wall / CPU)"], rows))


def _rate(nbytes: int, seconds: float) -> str:
    return f"{nbytes / seconds / 1e9:.2f} GB/s"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size-mb", type=int, default=1024, help="size of the large buffers and of the floors (MB)")
    p.add_argument("--runs", type=int, default=5, help="runs, each of every floor and every restore once")
    p.add_argument("--json", default=None, metavar="FILE", help="write every sample here")
    args = p.parse_args(argv)
    size = args.size_mb << 20
    samples, floor_labels, saved, prepare_times = measure(size, args.runs)
    report(size, samples, floor_labels, saved)
    if prepare_times:
        print(
            "\nprepare (memory faulted in ahead, as a spare does while idle): "
            f"median {statistics.median(prepare_times):.3f} s"
        )
    if args.json:
        found = {label: [{"wall": w, "cpu": c} for w, c in got] for label, got in samples.items()}
        bytes_saved = {label: m.bytes for label, m in saved.items()}
        out = {"environment": environment(), "args": vars(args), "prepare": prepare_times, "samples": found}
        write_json(args.json, {**out, "bytes": bytes_saved})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
