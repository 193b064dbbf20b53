"""What holds the memory: the biggest names of a namespace, with type and size, estimated cheaply.

Sizes are what an object says of itself where it can (numpy's `nbytes`,
pandas' `memory_usage(deep=True)`, the length of bytes/bytearray/str/
memoryview), else `sys.getsizeof`.  A container is estimated from a sample
of at most SAMPLE items (one level deep), scaled by its length: a list of a
million floats costs the same as a list of a hundred.  The whole walk stops
after `time_limit` seconds (names not reached are not reported), so a huge
namespace never delays the report by more than that (benchmarks/memory.py
measures it).  Objects reachable from two names are counted under each.

After a memory trip the locals of the stopped cell's function frames are
reported and released (`release_stopped_frames`): the interrupt's traceback
keeps every frame alive, so without that a list grown inside a function
would stay held after the cell stopped, where no `del` can reach it.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import time
import types
import typing as t

from ..frames import is_cell_file
from ..sizes import format_size
from .stacks import collector_paused

SAMPLE = 64
# Sizes below this are not worth a line in the report.
SMALL = 1 << 20


def _own_size(value: object) -> int | None:
    """Bytes an object reports of itself (arrays and frames), None when it does not."""
    usage = getattr(value, "memory_usage", None)
    if callable(usage) and (hasattr(value, "columns") or type(value).__name__ == "Series"):
        try:
            total = usage(deep=True)  # pandas: per column for a DataFrame, one number for a Series
            return (
                int(total.sum())
                if hasattr(total, "sum")
                else int(sum(total))
                if isinstance(total, (list, tuple))
                else int(total)
            )
        except Exception:  # noqa: BLE001 - a foreign object's method: fall back to getsizeof
            return None
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int) and not isinstance(nbytes, bool):
        return nbytes
    return None


def estimate(value: object, depth: int = 1) -> int:
    """Bytes held by `value`, estimated (see the module docstring)."""
    own = _own_size(value)
    if own is not None:
        return own
    try:
        size = sys.getsizeof(value)
    except Exception:  # noqa: BLE001 - a broken __sizeof__
        return 0
    if depth <= 0 or isinstance(value, (str, bytes, bytearray, memoryview)):
        return size
    items: t.Iterable[object]
    if isinstance(value, dict):
        length = len(value)
        items = itertools.chain.from_iterable(itertools.islice(value.items(), SAMPLE))
        sampled = min(length, SAMPLE) * 2
        length *= 2
    elif isinstance(value, (list, tuple, set, frozenset)):
        length = len(value)
        items = itertools.islice(value, SAMPLE)
        sampled = min(length, SAMPLE)
    else:
        return size
    if not sampled:
        return size
    try:
        inner = sum(estimate(item, depth - 1) for item in items)
    except RuntimeError:  # changed size while sampled (another thread)
        return size
    return size + int(inner * length / sampled)


def describe_type(value: object) -> str:
    """'list of 41 bytearray', 'ndarray float64 (1000, 1000)', 'DataFrame 10000x3', 'bytes'."""
    name = type(value).__name__
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if name == "DataFrame" and isinstance(shape, tuple) and len(shape) == 2:
        return f"DataFrame {shape[0]}x{shape[1]}"
    if isinstance(shape, tuple) and dtype is not None:
        return f"{name} {dtype} {shape}"
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        sample = list(itertools.islice(value.values() if isinstance(value, dict) else value, SAMPLE))
        kinds = {type(item).__name__ for item in sample}
        what = kinds.pop() if len(kinds) == 1 else "items"
        return f"{name} of {len(value)} {what}"
    return name


def biggest_names(namespace: dict[str, object], *, count: int = 5, time_limit: float = 0.05) -> list[dict]:
    """The `count` biggest names of `namespace` (at least SMALL bytes each): name, type, bytes, text.

    With the collector paused: what the walk allocates would otherwise start a full collection, which in a
    namespace of big containers costs seconds (5.4 s measured for 1,000 lists of 1e5 floats).
    """
    with collector_paused():
        return _biggest(namespace, count, time_limit)


def _biggest(namespace: dict[str, object], count: int, time_limit: float) -> list[dict]:
    deadline = time.monotonic() + time_limit
    found: list[tuple[int, str, object]] = []
    for name, value in list(namespace.items()):
        if name.startswith("_") or type(value).__name__ in ("module", "function", "type", "builtin_function_or_method"):
            continue
        found.append((estimate(value), name, value))
        if time.monotonic() > deadline:
            break
    found.sort(key=lambda item: item[0], reverse=True)
    return [
        {
            "name": name,
            "type": describe_type(value),
            "bytes": size,
            "text": f"{name} ({describe_type(value)}, {format_size(size)})",
        }
        for size, name, value in found[:count]
        if size >= SMALL
    ]


def release_stopped_frames(tb: types.TracebackType | None, *, count: int = 5, time_limit: float = 0.05) -> list[dict]:
    """The biggest locals of the function frames a stopped cell unwound,
    then those frames cleared so their memory comes back.

    Only frames from the cell's own code inward, and never a module-level frame
    (its locals are the user's namespace).  Names read "l in grow()".
    """
    frames: list[types.FrameType] = []
    in_cell = False
    while tb is not None:
        frame = tb.tb_frame
        in_cell = in_cell or is_cell_file(frame.f_code.co_filename)
        if in_cell and frame.f_locals is not frame.f_globals:
            frames.append(frame)
        tb = tb.tb_next
    found: list[dict] = []
    with collector_paused():
        for frame in frames:
            where = f"{frame.f_code.co_name}()"
            for holder in _biggest(dict(frame.f_locals), count, time_limit):
                name = f"{holder['name']} in {where}"
                found.append(
                    {**holder, "name": name, "text": f"{name} ({holder['type']}, {format_size(holder['bytes'])})"}
                )
    for frame in frames:
        # A frame still running (a generator suspended elsewhere) keeps its locals
        with contextlib.suppress(RuntimeError):
            frame.clear()
            frame.f_locals  # noqa: B018 - up to 3.12 the locals dict keeps its values until read again after clear()
    found.sort(key=lambda holder: holder["bytes"], reverse=True)
    return found[:count]
