"""Stopping an abandoned exec thread that gets back to Python code.

A worker abandoned while blocked in C keeps its pending interrupt, which
fires when the C call returns.  A cell may catch it and carry on (a loop
around `except BaseException`): that thread must not go on running the cell.
From the moment the interrupt is made in that thread, every line of the
user's code in it raises again, so no handler can keep it going; the runtime's
own frames are left alone, so the thread unwinds into the worker loop and ends.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from ..frames import is_user_file


class AbandonedThreadStopped(KeyboardInterrupt):
    """Raised on every line of user code in an abandoned exec thread until it has unwound."""


def _stopper(frame: types.FrameType, event: str, arg: Any) -> Any:
    if not is_user_file(frame.f_code.co_filename):
        return None  # the runtime and the standard library unwind as usual
    if event == "line":
        raise AbandonedThreadStopped("this exec thread was abandoned after an interrupt; its cell is stopped here")
    return _stopper


def stop_this_thread() -> None:
    """Trace the calling thread so that its user code cannot run another line."""
    sys.settrace(_stopper)
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            frame.f_trace = _stopper
            frame.f_trace_lines = True
        frame = frame.f_back
