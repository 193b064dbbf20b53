"""The one frame model: where a cell is, or where it stopped, as the user wants to see it.

Every stack the project shows goes through here, whatever it came from: a
traceback, another thread's live frames, a faulthandler dump, or the text of
an IPython traceback sent by a stock kernel.  The same rules apply to all:

- kernel machinery (this package, ipykernel, IPython, tornado, zmq, ...) is
  left out, and so is everything outside the outermost cell (the event loop's
  and the thread's plumbing);
- at most MAX_FRAMES frames are kept, the innermost ones;
- a frame is `user` when it is a cell or a file of the user's own (not the
  standard library, not an installed package); the innermost user frame is
  where the cell "stopped".

Pure: no Jupyter, and it never imports the kernel, so the client can use it.
Frames travel as dicts (`Frame.as_dict` / `Frame.from_dict`), the shape of
execute_reply `metadata.cancelkernel.stack` (docs/protocol.md).
"""

from __future__ import annotations

import functools
import linecache
import os
import re
import sysconfig
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

# Frames kept in a report: the innermost ones are what a user needs.
MAX_FRAMES = 8

LabelOf = Callable[[str], "str | None"]
Location = tuple[str, int, str]  # (filename, lineno, function)

_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_PLUMBING = re.compile(
    r"[/\\](ipykernel|IPython|tornado|zmq|jupyter_client|jupyter_core|traitlets|comm|debugpy|cancelkernel)[/\\]"
)
_CELL_FILE = re.compile(r"(ipykernel_\d+[/\\]\d+\.py$|^<ipython-input-|^<cell|^<checkpoint )")
_LIBRARY_DIR = re.compile(
    r"[/\\](site-packages|dist-packages)[/\\]|[/\\]lib[/\\]python\d+(\.\d+)?t?[/\\]|[/\\]Lib[/\\]"
)
_STDLIB = tuple({os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib")})


# A stack names few distinct files, many times over (a recursion 200 deep is one file): classify each once.
@functools.lru_cache(maxsize=4096)
def is_machinery(filename: str) -> bool:
    """Kernel plumbing the user never wants to see."""
    return filename.startswith(_OWN_DIR) or filename.startswith("<frozen ") or bool(_PLUMBING.search(filename))


def is_own_file(filename: str) -> bool:
    """A module of this package."""
    return filename.startswith(_OWN_DIR)


@functools.lru_cache(maxsize=4096)
def is_cell_file(filename: str) -> bool:
    """The code of a notebook cell (IPython's per-cell file names), or of a re-run definition."""
    return bool(_CELL_FILE.search(filename))


def is_user_file(filename: str) -> bool:
    """A cell or a file of the user's own: not the standard library, not an installed package, not the kernel."""
    if is_cell_file(filename):
        return True
    if is_machinery(filename) or filename.startswith(_STDLIB):
        return False
    return not _LIBRARY_DIR.search(filename)


@dataclass
class Frame:
    """One frame of a stack, innermost last."""

    filename: str
    lineno: int
    name: str
    line: str = ""
    label: str = ""  # what to show instead of the file name, e.g. "Cell In[3]"
    user: bool = field(default=False)

    def __post_init__(self) -> None:
        self.label = self.label or self.filename

    @classmethod
    def at(cls, location: Location, label_of: LabelOf | None = None) -> Frame:
        """A readable frame for (file, line, function): its source line, its label, whether it is the user's."""
        filename, lineno, name = location
        label = (label_of(filename) if label_of is not None else None) or filename
        return cls(filename, lineno, name, linecache.getline(filename, lineno).strip(), label, is_user_file(filename))

    @classmethod
    def from_dict(cls, data: dict) -> Frame:
        lineno = data.get("lineno")
        return cls(
            filename=str(data.get("filename", "")),
            lineno=lineno if isinstance(lineno, int) else 0,
            name=str(data.get("name", "")),
            line=str(data.get("line") or ""),
            label=str(data.get("label") or ""),
            user=bool(data.get("user")),
        )

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def is_cell(self) -> bool:
        return is_cell_file(self.filename) or self.label.startswith("Cell In[")

    def location(self) -> str:
        """`file:line`, what execute_reply metadata.stopped_at holds."""
        return f"{self.filename}:{self.lineno}"

    def where(self) -> str:
        """`label:line`, for people ("Cell In[3]:2")."""
        return f"{self.label}:{self.lineno}"


def user_stack(locations: Iterable[Location], label_of: LabelOf | None = None) -> list[Frame]:
    """(file, line, function), outermost first -> the frames a user needs, innermost last.

    Cost: the frames kept, never the depth of the stack.
    """
    kept = [location for location in locations if not is_machinery(location[0])]
    first_cell = next(
        (
            i
            for i, (filename, _, _) in enumerate(kept)
            if is_cell_file(filename) or (label_of is not None and label_of(filename))
        ),
        0,
    )
    return [Frame.at(location, label_of) for location in kept[first_cell:][-MAX_FRAMES:]]


def innermost_user(frames: list[Frame]) -> Frame | None:
    """The frame where the cell is (or stopped): the innermost user frame, else the innermost one."""
    for frame in reversed(frames):
        if frame.user:
            return frame
    return frames[-1] if frames else None


def stopped_at(frames: list[Frame], *, readable: bool = False) -> str | None:
    """`file:line` of the innermost user frame (`label:line` if readable, e.g. "Cell In[3]:2")."""
    frame = innermost_user(frames)
    if frame is None:
        return None
    return frame.where() if readable else frame.location()


def describe(frames: list[Frame]) -> str:
    """'Cell In[3], line 2 (time.sleep(10))': one phrase for a sentence."""
    frame = innermost_user(frames)
    if frame is None:
        return "an unknown place"
    return f"{frame.label}, line {frame.lineno}" + (f" ({frame.line})" if frame.line else "")


def format_frames(frames: list[Frame], *, color: bool = False) -> list[str]:
    """One text block per frame, like IPython's but cheap; the innermost user frame marked."""
    mark_at = innermost_user(frames)
    green, cyan, bold, reset = ("\x1b[32m", "\x1b[36m", "\x1b[1m", "\x1b[0m") if color else ("",) * 4
    blocks = []
    for frame in frames:
        where = (
            f"{frame.label}, line {frame.lineno}"
            if frame.label != frame.filename
            else f"File {frame.filename}:{frame.lineno}"
        )
        mark = f"  {bold}<-- stopped here{reset}" if frame is mark_at and frame.user else ""
        text = f"{green}{where}{reset}, in {cyan}{frame.name}{reset}{mark}"
        if frame.line:
            text += f"\n    {frame.line}"
        blocks.append(text)
    return blocks


def fill_cell_source(frames: list[Frame], source: str | None, label: str = "cell") -> list[Frame]:
    """Frames from the outermost cell frame inwards, the cell's own line filled in from its source.

    Only the outermost cell frame is this cell; inner cell frames may be
    functions of earlier cells, so their lines are not guessed.  A cell frame
    that has no label yet (a faulthandler dump names files only) gets `label`
    ("Cell In[4]", as the kernel labels it) if it is this cell, else "cell".
    """
    first = next((i for i, f in enumerate(frames) if f.is_cell), None)
    kept = list(frames[first:] if first is not None else frames)
    lines = source.splitlines() if source else []
    for i, frame in enumerate(kept):
        if frame.is_cell:
            frame.user = True
            if frame.label == frame.filename:
                frame.label = label if i == 0 and first is not None else "cell"
            if i == 0 and first is not None and not frame.line and 0 < frame.lineno <= len(lines):
                frame.line = lines[frame.lineno - 1].strip()
    return kept[-MAX_FRAMES:]


# -- faulthandler dumps ----------------------------------------------------------------

_FH_THREAD = re.compile(
    r'^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[(.*?)\]| "([^"]*)")? \(most recent call first\):\s*$'
)
_FH_STACK = re.compile(r"^Stack \(most recent call first\):\s*$")
_FH_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


@dataclass
class DumpedThread:
    """One thread of a faulthandler dump."""

    ident: int  # the thread's ident (threading.get_ident() of that thread); 0 when not given
    name: str  # the thread's name, when faulthandler printed one (3.12+)
    current: bool  # "Current thread": the thread that held the GIL when the dump was taken
    locations: list[Location]  # outermost first

    def shows_cell(self) -> bool:
        return any(is_cell_file(filename) for filename, _, _ in self.locations)


def parse_faulthandler(text: str) -> list[DumpedThread]:
    """faulthandler's text -> its threads, in file order (a file may hold several dumps)."""
    threads: list[DumpedThread] = []
    current: DumpedThread | None = None
    for raw in text.splitlines():
        head = _FH_THREAD.match(raw)
        if head or _FH_STACK.match(raw):
            name = (head.group(3) or head.group(4) or "") if head else ""
            current = DumpedThread(
                int(head.group(2), 16) if head else 0, name, head is None or head.group(1) == "Current thread", []
            )
            threads.append(current)
            continue
        frame = _FH_FRAME.match(raw)
        if frame and current is not None:
            # faulthandler writes the newest first
            current.locations.insert(0, (frame.group(1), int(frame.group(2)), frame.group(3)))
        elif not raw.strip():
            current = None
    return threads


def dumped_stack(text: str, thread_id: int | None = None, label_of: LabelOf | None = None) -> list[Frame]:
    """The user frames of one thread of a dump: `thread_id`, else the thread that runs a cell.

    Without an id (a client reading a kernel's dump) the pick is: the thread
    that held the GIL if it shows a cell, else the last thread that shows one,
    else the last thread dumped.
    """
    threads = parse_faulthandler(text)
    if thread_id is not None:
        chosen = [t for t in threads if t.ident == thread_id][-1:]
    else:
        cells = [t for t in threads if t.shows_cell()]
        chosen = [t for t in cells if t.current][-1:] or cells[-1:] or threads[-1:]
    return user_stack(chosen[0].locations, label_of) if chosen else []


# -- IPython tracebacks (what a stock kernel sends when interrupted) ----------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_TB_CELL = re.compile(r"^(?P<label>Cell In\[\d+\]), line (?P<line>\d+)")
_TB_FILE = re.compile(r"^File (?P<file>.+?):(?P<line>\d+), in (?P<name>[^\s(]+)")
_TB_ARROW = re.compile(r"^-+>\s*\d+\s?(?P<src>.*)$")


def parse_ipython_traceback(lines: list[str]) -> list[Frame]:
    """The frames of an IPython error traceback (the `traceback` of an error reply)."""
    frames: list[Frame] = []
    for raw in _ANSI.sub("", "\n".join(lines)).splitlines():
        text = raw.strip()
        cell = _TB_CELL.match(text)
        if cell:
            frames.append(Frame("<cell>", int(cell.group("line")), "<module>", label=cell.group("label"), user=True))
            continue
        found = _TB_FILE.match(text)
        if found:
            filename = found.group("file")
            frames.append(Frame(filename, int(found.group("line")), found.group("name"), user=is_user_file(filename)))
            continue
        arrow = _TB_ARROW.match(text)
        if arrow and frames and not frames[-1].line:
            frames[-1].line = arrow.group("src").strip()
    return [f for f in frames if not is_machinery(f.filename)][-MAX_FRAMES:]


def as_dicts(frames: Iterable[Frame]) -> list[dict]:
    return [f.as_dict() for f in frames]


def from_dicts(frames: Iterable[dict] | None) -> list[Frame]:
    return [Frame.from_dict(f) for f in frames or [] if isinstance(f, dict)]
