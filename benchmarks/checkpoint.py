#!/usr/bin/env python
"""Checkpoint throughput, and the time from a wedged kernel to a new one with its state back.

1. Save and restore, through a real kernel and `checkpoint_request`, of
   namespaces of 10 MB, 100 MB and 1 GB, in two shapes:
   - "buffers": bytes, bytearray and array('d') objects only (the goal:
     save >= 300 MB/s, restore >= 500 MB/s);
   - "mixed": 90 % such buffers, 10 % many small objects (a list of dicts and
     200 small variables).
   Save is timed in the kernel that holds the data; the kernel is then killed
   and restarted, and restore is timed in the new process (page cache warm, as
   right after a restart).  MB/s = pickled bytes / seconds the kernel reports.
2. Wedge to restored, 100 MB by default: a cell stuck in `sum(range(10**12))`
   (holding the GIL, so no interrupt can stop it) is given up on:
   `km.restart_kernel(now=True)` (SIGKILL + start), `wait_for_ready`, then a
   restore request; timed until the new kernel is idle with the state back.
   Goal: <= 3 s.

    python benchmarks/checkpoint.py                       # 10MB,100MB,1GB + wedge
    python benchmarks/checkpoint.py --sizes 10MB --wedge-size 10MB --repeat 1   # quick
    python benchmarks/checkpoint.py --json benchmarks/results/checkpoint.json

Checkpoints go to a temporary directory (--dir, default under /work if it
exists, else the system temp dir), removed at the end; disk space is checked
first.  Every kernel is shut down, also on errors and Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from cancelkernel.kernelspec import install
from cancelkernel.testing import checkpoint_request, restart, running_kernel, wait_idle, wait_reply

HERE = os.path.dirname(os.path.abspath(__file__))
GOAL_SAVE = 300.0  # MB/s, large buffers
GOAL_RESTORE = 500.0  # MB/s, large buffers
GOAL_WEDGE = 3.0  # seconds, 100 MB
TIMEOUT = 600.0
MB = 1_000_000


def parse_size(text: str) -> int:
    text = text.strip().upper().replace(" ", "")
    for suffix, scale in (("GB", 1_000_000_000), ("MB", MB), ("KB", 1000), ("G", 1_000_000_000), ("M", MB)):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * scale)
    return int(float(text) * MB)  # a bare number is MB


def label(n: int) -> str:
    return f"{n / 1e9:g} GB" if n >= 1e9 else f"{n / MB:g} MB"


# -- kernels --------------------------------------------------------------------------


def _kernel_setup(prefix: str) -> str:
    """Install a kernelspec into `prefix` (on JUPYTER_PATH); return its name."""
    install(prefix=prefix, name="cancelkernel-bench")
    path = os.path.join(prefix, "share", "jupyter")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [path, os.environ.get("JUPYTER_PATH")]))
    return "cancelkernel-bench"


@contextlib.contextmanager
def kernel(name: str, mode: str, runtime: str) -> Iterator[tuple[KernelManager, BlockingKernelClient]]:
    with running_kernel(mode, kernel_name=name, env={"JUPYTER_RUNTIME_DIR": runtime}) as pair:
        yield pair


def run_cell(kc: BlockingKernelClient, code: str) -> dict:
    msg_id = kc.execute(code)
    reply = wait_reply(kc, msg_id, TIMEOUT)["content"]
    wait_idle(kc, msg_id, TIMEOUT)
    if reply["status"] != "ok":
        raise RuntimeError(f"cell failed: {reply.get('ename')}: {reply.get('evalue')}\n{code}")
    return reply


def checkpoint(kc: BlockingKernelClient, action: str, name: str) -> dict:
    """A checkpoint_request that must succeed; its reply once the kernel is idle again."""
    content = checkpoint_request(kc, action, name, timeout=TIMEOUT)
    if content["status"] != "ok":
        raise RuntimeError(f"checkpoint {action} failed: {content.get('ename')}: {content.get('evalue')}")
    return content


# -- namespaces --------------------------------------------------------------------------


def namespace_code(total: int, shape: str) -> str:
    """A cell that builds a namespace of about `total` pickled bytes, then removes its helpers."""
    buffers = total if shape == "buffers" else int(total * 0.9)
    small = total - buffers
    return f"""
import os, array, pickle
_block = os.urandom(1 << 24)  # repeated: random data, built fast
def _fill(n):
    return (_block * (n // len(_block) + 1))[:n]
_part = {buffers} // 3
buf_bytes = _fill(_part)
buf_bytearray = bytearray(_fill(_part))
buf_array = array.array("d")
buf_array.frombytes(_fill(_part - _part % 8))
if {small}:
    _record = lambda i: {{"id": i, "name": f"item-{{i}}", "value": i * 0.5, "tags": ["a", "b"], "ok": i % 2 == 0}}
    _each = len(pickle.dumps([_record(i) for i in range(1000)], protocol=5)) / 1000
    records = [_record(i) for i in range(int({small} * 0.95 / _each))]
    for _i in range(200):
        globals()[f"v_{{_i}}"] = (_i, f"value {{_i}}", [_i] * 5)
    del _record, _each, _i
del _block, _fill, _part
"""


VERIFY = """
_n = len(buf_bytes) + len(buf_bytearray) + len(buf_array) * buf_array.itemsize
assert _n > 0, _n
"""


# -- measurements ------------------------------------------------------------------------


def throughput(name: str, mode: str, runtime: str, size: int, shape: str) -> dict:
    with kernel(name, mode, runtime) as (km, kc):
        run_cell(kc, namespace_code(size, shape))
        t = time.perf_counter()
        saved = checkpoint(kc, "save", "bench")
        save_wall = time.perf_counter() - t
        restart(km, kc)
        t = time.perf_counter()
        restored = checkpoint(kc, "restore", "bench")
        restore_wall = time.perf_counter() - t
        run_cell(kc, VERIFY)
        if restored["skipped"]:
            raise RuntimeError(f"restore skipped {restored['skipped']}")
        checkpoint(kc, "drop", "bench")
    nbytes = saved["bytes"]
    return {
        "size": size,
        "shape": shape,
        "mode": mode,
        "bytes": nbytes,
        "names": saved["names"],
        "save_seconds": saved["seconds"],
        "save_wall": save_wall,
        "save_mbps": nbytes / MB / saved["seconds"],
        "restore_seconds": restored["seconds"],
        "restore_wall": restore_wall,
        "restore_mbps": restored["bytes"] / MB / restored["seconds"],
    }


def wedge(name: str, mode: str, runtime: str, size: int) -> dict:
    with kernel(name, mode, runtime) as (km, kc):
        run_cell(kc, namespace_code(size, "mixed"))
        saved = checkpoint(kc, "save", "wedge")
        # Flushed before the GIL is taken: once sum() runs, not even the iopub thread gets to send.
        msg_id = kc.execute("import sys; print('wedging', flush=True); sum(range(10**12))")
        deadline = time.monotonic() + 30
        while True:
            msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
            if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
                break
        time.sleep(0.5)
        t0 = time.perf_counter()  # "kernel wedged": from here the clock runs
        km.restart_kernel(now=True)
        t1 = time.perf_counter()
        kc.wait_for_ready(timeout=60)
        t2 = time.perf_counter()
        restored = checkpoint(kc, "restore", "wedge")  # returns once the kernel is idle again
        t3 = time.perf_counter()
        run_cell(kc, VERIFY)
        checkpoint(kc, "drop", "wedge")
    return {
        "size": size,
        "mode": mode,
        "bytes": saved["bytes"],
        "names": len(restored["restored"]),
        "kill_restart": t1 - t0,
        "ready": t2 - t1,
        "restore": t3 - t2,
        "total": t3 - t0,
    }


# -- output -------------------------------------------------------------------------------


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths, strict=False)) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *(line(r) for r in rows)])


def median_of(samples: list[dict], keys: list[str]) -> dict:
    out = dict(samples[0])
    for key in keys:
        out[key] = statistics.median(s[key] for s in samples)
    out["samples"] = samples
    return out


def environment(directory: str) -> dict:
    usage = shutil.disk_usage(directory)
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "directory": directory,
        "disk_free_bytes": usage.free,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sizes", default="10MB,100MB,1GB", help="comma-separated namespace sizes (default 10MB,100MB,1GB)")
    p.add_argument("--shapes", default="buffers,mixed", help="comma-separated, from buffers,mixed (default both)")
    p.add_argument("--modes", default="main", help="exec threads, comma-separated from main,worker (default main)")
    p.add_argument(
        "--wedge-size", default="100MB", help="namespace size for wedge-to-restored (default 100MB; 0 skips it)"
    )
    p.add_argument("--repeat", type=int, default=3, help="samples per case, the median is shown (default 3)")
    p.add_argument(
        "--dir", default=None, help="where the temporary checkpoints go (default: under /work, else the temp dir)"
    )
    p.add_argument("--json", metavar="FILE", help="write every sample and the environment here")
    return p


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    opts = p.parse_args(argv)
    sizes = [parse_size(s) for s in opts.sizes.split(",") if s.strip()]
    shapes = [s for s in opts.shapes.split(",") if s]
    modes = [m for m in opts.modes.split(",") if m]
    wedge_size = parse_size(opts.wedge_size)
    if bad := [s for s in shapes if s not in ("buffers", "mixed")] + [m for m in modes if m not in ("main", "worker")]:
        p.error(f"unknown shape or mode: {', '.join(bad)}")
    base = opts.dir or ("/work" if os.path.isdir("/work") else tempfile.gettempdir())
    subprocess.run(["df", "-h", base], check=False)
    need = 2 * max([*sizes, wedge_size]) + 500 * MB
    if shutil.disk_usage(base).free < need:
        print(
            f"not enough free space in {base}: need about {label(need)}; pass --dir or smaller --sizes", file=sys.stderr
        )
        return 2
    scratch = tempfile.mkdtemp(prefix="cancelkernel-checkpoint-bench-", dir=base)
    results: dict[str, Any] = {"environment": environment(base), "throughput": [], "wedge": [], "errors": []}
    try:
        name = _kernel_setup(os.path.join(scratch, "prefix"))
        runtime = os.path.join(scratch, "runtime")
        for mode in modes:
            for size in sizes:
                for shape in shapes:
                    _measure_throughput(results, name, mode, runtime, size, shape, opts.repeat)
            if wedge_size:
                _measure_wedge(results, name, mode, runtime, wedge_size, opts.repeat)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print_tables(results, opts.repeat)
    if opts.json:
        os.makedirs(os.path.dirname(os.path.abspath(opts.json)), exist_ok=True)
        with open(opts.json, "w") as f:
            json.dump(results, f, indent=1)
        print(f"\nwrote {opts.json}")
    return 1 if results["errors"] else 0


def _measure_throughput(
    results: dict[str, Any], name: str, mode: str, runtime: str, size: int, shape: str, repeat: int
) -> None:
    """`repeat` save/restore samples of one case: their median row, or the error (the other cases go on)."""
    try:
        samples = [throughput(name, mode, runtime, size, shape) for _ in range(repeat)]
    except Exception as exc:  # noqa: BLE001 - one failed case must not lose the others
        results["errors"].append(f"{mode} {label(size)} {shape}: {type(exc).__name__}: {exc}")
        print(results["errors"][-1], file=sys.stderr)
        return
    row = median_of(samples, ["save_mbps", "restore_mbps", "save_seconds", "restore_seconds"])
    results["throughput"].append(row)
    print(
        f"{mode} {label(size)} {shape}: save {row['save_mbps']:.0f} MB/s, restore {row['restore_mbps']:.0f} MB/s",
        file=sys.stderr,
    )


def _measure_wedge(results: dict[str, Any], name: str, mode: str, runtime: str, size: int, repeat: int) -> None:
    """`repeat` wedge-to-restored samples: their median row, or the error (the other cases go on)."""
    try:
        samples = [wedge(name, mode, runtime, size) for _ in range(repeat)]
    except Exception as exc:  # noqa: BLE001 - one failed case must not lose the others
        results["errors"].append(f"{mode} wedge {label(size)}: {type(exc).__name__}: {exc}")
        print(results["errors"][-1], file=sys.stderr)
        return
    row = median_of(samples, ["kill_restart", "ready", "restore", "total"])
    results["wedge"].append(row)
    print(f"{mode} wedge {label(size)}: {row['total']:.2f} s", file=sys.stderr)


def print_tables(results: dict[str, Any], repeat: int) -> None:
    """Throughput and wedge-to-restored, as tables, with the goals; then the cases that failed."""
    print()
    print(f"Checkpoint save / restore through a real kernel (median of {repeat}; page cache warm)\n")
    rows = []
    for r in results["throughput"]:
        goal = ""
        if r["shape"] == "buffers":
            passed = r["save_mbps"] >= GOAL_SAVE and r["restore_mbps"] >= GOAL_RESTORE
            goal = "yes" if passed else "NO"
        rows.append(
            [
                r["mode"], label(r["size"]), r["shape"], f"{r['bytes'] / MB:.0f}", str(r["names"]),
                f"{r['save_seconds']:.3f}", f"{r['save_mbps']:.0f}",
                f"{r['restore_seconds']:.3f}", f"{r['restore_mbps']:.0f}", goal,
            ]
        )  # fmt: skip
    headers = [
        "mode",
        "size",
        "shape",
        "MB",
        "names",
        "save s",
        "save MB/s",
        "restore s",
        "restore MB/s",
        f"goal {GOAL_SAVE:.0f}/{GOAL_RESTORE:.0f}",
    ]
    print(table(headers, rows))
    if results["wedge"]:
        print(
            "\nWedged (sum(range(10**12)) holding the GIL) -> new kernel idle with state restored "
            f"(median of {repeat})\n"
        )
        rows = [
            [
                r["mode"], label(r["size"]), f"{r['kill_restart']:.2f}", f"{r['ready']:.2f}", f"{r['restore']:.2f}",
                f"{r['total']:.2f}", "yes" if r["total"] <= GOAL_WEDGE else "NO",
            ]
            for r in results["wedge"]
        ]  # fmt: skip
        print(
            table(
                ["mode", "size", "kill+start s", "ready s", "restore s", "total s", f"goal <= {GOAL_WEDGE:g} s"], rows
            )
        )
    for error in results["errors"]:
        print(f"FAILED: {error}")


if __name__ == "__main__":
    sys.exit(main())
