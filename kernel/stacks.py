"""Readable stacks of user code: where a cell is, or where it stopped.

Only frames the user cares about: kernel machinery (this package, ipykernel,
IPython, tornado, zmq, asyncio internals) is left out, and the innermost user
frame is marked.  Formatting is linear in the frames kept, never in the depth
of the stack (stock IPython spends 0.67 s on a traceback 200 frames deep).
"""

from __future__ import annotations

import linecache
import os
import sys
import sysconfig
import types
from dataclasses import asdict, dataclass
from typing import Callable, Iterable

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_MACHINERY = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep
    for m in filter(None, (sys.modules.get(n) for n in ("ipykernel", "IPython", "tornado", "zmq", "jupyter_client", "traitlets", "comm", "debugpy")))
    if getattr(m, "__file__", None)
) + (_PACKAGE_DIR + os.sep,)
_STDLIB = tuple({os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib")})

# Frames kept in an interrupt report: the innermost ones are what a user needs.
MAX_FRAMES = 8


@dataclass
class Frame:
    """One frame of a stack, innermost last."""

    filename: str
    lineno: int
    name: str
    line: str
    label: str  # what to show instead of the file name, e.g. "Cell In[3]"
    user: bool  # code the user wrote (a cell or their own module), not stdlib or the kernel

    def location(self) -> str:
        return f"{self.filename}:{self.lineno}"


def is_machinery(filename: str) -> bool:
    """Kernel plumbing the user never wants to see."""
    return filename.startswith(_MACHINERY) or filename.startswith("<frozen ")


def is_user_file(filename: str) -> bool:
    """A cell or a file of the user's own: not stdlib, not site-packages, not the kernel."""
    if is_machinery(filename):
        return False
    if filename.startswith(_STDLIB) and "site-packages" not in filename:
        return False
    return "site-packages" not in filename and "dist-packages" not in filename


def frame_at(filename: str, lineno: int, name: str, cell_label: Callable[[str], str | None]) -> Frame:
    """One readable frame: its source line, and "Cell In[3]" for a cell's file."""
    line = linecache.getline(filename, lineno).strip()
    return Frame(filename, lineno, name, line, cell_label(filename) or filename, is_user_file(filename))


def from_locations(raw: Iterable[tuple[str, int, str]], cell_label: Callable[[str], str | None]) -> list[Frame]:
    """(file, line, function), outermost first -> the frames a user needs, innermost last.

    Kernel machinery is left out, and so is everything outside the outermost
    cell (the event loop's and the thread's plumbing).  Cost: the frames kept.
    """
    kept = [location for location in raw if not is_machinery(location[0])]
    first_cell = next((i for i, location in enumerate(kept) if cell_label(location[0])), 0)
    return [frame_at(*location, cell_label) for location in kept[first_cell:][-MAX_FRAMES:]]


def frames_from_traceback(tb: types.TracebackType | None, cell_label: Callable[[str], str | None]) -> list[Frame]:
    """The frames of a traceback a user needs, innermost last (cost: the frames kept, not the depth)."""
    raw = []
    while tb is not None:
        code = tb.tb_frame.f_code
        if not is_machinery(code.co_filename):
            raw.append((code.co_filename, tb.tb_lineno or code.co_firstlineno, code.co_name))
            if len(raw) > 2 * MAX_FRAMES:
                del raw[:MAX_FRAMES]  # keep the list short however deep the stack is
        tb = tb.tb_next
    return from_locations(raw, cell_label)


def frames_from_frame(frame: types.FrameType | None, cell_label: Callable[[str], str | None]) -> list[Frame]:
    """The frames of a live stack (e.g. another thread's) a user needs, innermost last."""
    raw = []
    while frame is not None and len(raw) < 200:
        code = frame.f_code
        raw.append((code.co_filename, frame.f_lineno or code.co_firstlineno, code.co_name))
        frame = frame.f_back
    raw.reverse()
    return from_locations(raw, cell_label)


def stopped_at(frames: Iterable[Frame]) -> str | None:
    """`file:line` of the innermost user frame (falling back to the innermost frame)."""
    frames = list(frames)
    for frame in reversed(frames):
        if frame.user:
            return frame.location()
    return frames[-1].location() if frames else None


def format_frames(frames: list[Frame], *, color: bool = True) -> list[str]:
    """One text block per frame, like IPython's but cheap; the innermost user frame marked."""
    innermost_user = next((f for f in reversed(frames) if f.user), None)
    cyan, green, bold, reset = ("\x1b[36m", "\x1b[32m", "\x1b[1m", "\x1b[0m") if color else ("",) * 4
    blocks = []
    for frame in frames:
        where = f"{frame.label}, line {frame.lineno}" if frame.label != frame.filename else f"File {frame.filename}:{frame.lineno}"
        mark = f"  {bold}<-- stopped here{reset}" if frame is innermost_user else ""
        text = f"{green}{where}{reset}, in {cyan}{frame.name}{reset}{mark}"
        if frame.line:
            text += f"\n    {frame.line}"
        blocks.append(text)
    return blocks


def as_dicts(frames: list[Frame]) -> list[dict]:
    return [asdict(f) for f in frames]


def thread_stack(thread_id: int, cell_label: Callable[[str], str | None]) -> list[Frame]:
    """The live stack of one thread (needs the GIL), user-relevant frames only."""
    frame = sys._current_frames().get(thread_id)
    return frames_from_frame(frame, cell_label)
