#!/usr/bin/env python
"""Checkpoint restore throughput, in this process (no kernel): warm files, one namespace at a time.

Namespaces: SIZE MB as one bytearray, as numpy arrays (if numpy is installed), and
a typical data-science namespace (a few arrays, a dict of lists, a DataFrame if
pandas is installed, functions and classes).  Each is saved once, then restored
RUNS times into a fresh namespace (the files are warm in the page cache after the
save); the best and the median are reported, with GB/s of checkpoint bytes read.
The floor printed first is what this machine needs just to fault in SIZE MB of new
memory and read a warm file into it: a restore that creates its objects cannot beat it.

    python benchmarks/restore_speed.py --size-mb 1024 --runs 5
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import environment, markdown_table, write_json  # noqa: E402

from cancelkernel import checkpoint  # noqa: E402


def _floor(path: str, size: int, runs: int) -> float:
    """Seconds to read `path` (warm) into freshly allocated, never-touched memory, best of `runs`."""
    new = ctypes.pythonapi.PyByteArray_FromStringAndSize  # uninitialised, as the unpickler allocates
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_ssize_t]
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        buf = new(None, size)
        with open(path, "rb", buffering=0) as f:
            f.readinto(buf)
        best = min(best, time.perf_counter() - started)
        del buf
    return best


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
        science["frame"] = pd.DataFrame({"x": np.arange(1_000_000), "y": np.random.default_rng(1).normal(size=1_000_000), "k": ["a", "b"] * 500_000})
    except ImportError:
        pass
    found["data science"] = science
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size-mb", type=int, default=1024)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--json", default=None, metavar="FILE")
    args = p.parse_args(argv)
    size = args.size_mb << 20
    rows, samples = [], []
    with tempfile.TemporaryDirectory(prefix="restore-speed-") as tmp:
        raw = os.path.join(tmp, "raw.bin")
        with open(raw, "wb") as f:
            f.write(os.urandom(1 << 20) * (size >> 20))
        floor = _floor(raw, size, args.runs)
        os.unlink(raw)
        print(f"floor: {args.size_mb} MB into new memory in {floor:.3f} s = {size / floor / 1e9:.2f} GB/s", file=sys.stderr)
        for label, ns in namespaces(size).items():
            directory = os.path.join(tmp, label.replace(" ", "-"))
            manifest = checkpoint.save({"__name__": "__main__", **ns}, directory)
            del ns
            gc.collect()
            times = []
            for _ in range(args.runs):
                target: dict[str, Any] = {"__name__": "__main__"}
                started = time.perf_counter()
                report = checkpoint.restore(target, directory)
                times.append(time.perf_counter() - started)
                assert not report.skipped, report.summary()
                del target
                gc.collect()
            best, median = min(times), statistics.median(times)
            rows.append([label, f"{manifest.bytes / 1e6:.0f} MB", f"{manifest.seconds:.3f} s", f"{best:.3f} s", f"{median:.3f} s",
                         f"{manifest.bytes / best / 1e9:.2f} GB/s"])
            samples.append({"namespace": label, "bytes": manifest.bytes, "save": manifest.seconds, "restore": times})
            print(f"  {label}: restore best {best:.3f} s", file=sys.stderr)
    print(markdown_table(["namespace", "checkpoint", "save", "restore (best)", "restore (median)", "rate (best)"], rows))
    print(f"\nfloor (fault in and read {args.size_mb} MB of new memory): {floor:.3f} s = {size / floor / 1e9:.2f} GB/s")
    if args.json:
        write_json(args.json, {"environment": environment(), "args": vars(args), "floor": floor, "samples": samples})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
