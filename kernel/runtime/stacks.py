"""Stacks from inside the process: a traceback, or another thread's live frames (needs the GIL).

Both become `frames.Frame` lists through the one user-frame filter
(`frames.user_stack`).  Cost: the frames kept, never the depth of the stack
(stock IPython spends 0.67 s formatting a traceback 200 frames deep).
"""

from __future__ import annotations

import contextlib
import gc
import linecache
import sys
import threading
import types
from collections.abc import Iterator

from ..frames import MAX_FRAMES, Frame, LabelOf, Location, is_cell_file, is_machinery, user_stack

# Deepest live stack walked: past this the outer frames are the kernel's own anyway.
MAX_WALK = 200

_gc_paused = threading.Lock()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block; one lock, so no other user turns it back on early."""
    with _gc_paused:
        enabled = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            if enabled:
                gc.enable()


def live_frame(thread_id: int | None) -> types.FrameType | None:
    """The innermost frame of a thread now; the kernel's only call of sys._current_frames.

    With the garbage collector paused: on 3.11 a collection inside
    sys._current_frames runs Python code (weakref callbacks) and hands the GIL to
    another thread while the interpreter's thread list is locked; a thread being
    started then takes the GIL and waits for that lock for good (CPython
    gh-106883; deadlocked a kernel whose cell started threads in a loop while
    its status was read).
    """
    if thread_id is None:
        return None
    with collector_paused():
        return sys._current_frames().get(thread_id)


def from_traceback(tb: types.TracebackType | None, label_of: LabelOf | None = None) -> list[Frame]:
    """The frames of a traceback a user needs, innermost last."""
    raw: list[Location] = []
    in_cell = False
    while tb is not None:
        code = tb.tb_frame.f_code
        if not is_machinery(code.co_filename):
            raw.append((code.co_filename, tb.tb_lineno or code.co_firstlineno, code.co_name))
            in_cell = in_cell or is_cell_file(code.co_filename) or bool(label_of and label_of(code.co_filename))
            if len(raw) > 2 * MAX_FRAMES:
                del raw[:MAX_FRAMES]  # keep the list short however deep the stack is
        elif in_cell:
            # The cell called into the kernel (its cooperative time.sleep): what is inside is ours, not the user's
            break
        tb = tb.tb_next
    return user_stack(raw, label_of)


def from_frame(frame: types.FrameType | None, label_of: LabelOf | None = None) -> list[Frame]:
    """The frames of a live stack (e.g. another thread's) a user needs, innermost last."""
    raw: list[Location] = []
    while frame is not None and len(raw) < MAX_WALK:
        code = frame.f_code
        raw.append((code.co_filename, frame.f_lineno or code.co_firstlineno, code.co_name))
        frame = frame.f_back
    raw.reverse()
    return user_stack(raw, label_of)


def thread_stack(thread_id: int, label_of: LabelOf | None = None) -> list[Frame]:
    """The live stack of one thread, user frames only."""
    return from_frame(live_frame(thread_id), label_of)


def innermost_frame(thread_id: int | None) -> dict | None:
    """The thread's innermost frame right now, whatever code it is (kernel and library included),
    with its source line."""
    frame = live_frame(thread_id)
    if frame is None:
        return None
    code = frame.f_code
    lineno = frame.f_lineno or 0
    return {
        "file": code.co_filename,
        "lineno": lineno,
        "function": code.co_name,
        "line": linecache.getline(code.co_filename, lineno).strip(),
    }


def blocked_at(thread_id: int | None) -> str:
    """'file:line in function' of a thread's innermost frame (where it is blocked)."""
    frame = live_frame(thread_id)
    if frame is None:
        return "unknown"
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
