"""Stacks of hung cells from what a client can see: faulthandler dumps and tracebacks.

Frames are dicts {filename, lineno, name, line, label, user}, innermost last,
the same shape as our kernel's `metadata.cancelkernel.stack`.
"""

from __future__ import annotations

import re

MAX_FRAMES = 8

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[.*?\]| \"[^\"]*\")? \(most recent call first\):|^Stack \(most recent call first\):")
_FH_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<name>.*)$')
_CELL_FILE = re.compile(r"(ipykernel_\d+[/\\]\d+\.py$|^<ipython-input-|^<cell)")
_MACHINERY = re.compile(
    r"[/\\](ipykernel|IPython|tornado|zmq|jupyter_client|traitlets|asyncio|cancelkernel|debugpy|comm)[/\\]|^<frozen |[/\\]threading\.py$|[/\\]runpy\.py$"
)
_TB_CELL = re.compile(r"^(?P<label>Cell In\[\d+\]), line (?P<line>\d+)")
_TB_FILE = re.compile(r"^File (?P<file>.+?):(?P<line>\d+), in (?P<name>[^\s(]+)")
_TB_ARROW = re.compile(r"^-+>\s*\d+\s?(?P<src>.*)$")


def is_cell_file(filename: str) -> bool:
    return bool(_CELL_FILE.search(filename))


def _frame(filename: str, lineno: int, name: str, line: str = "", label: str | None = None) -> dict:
    user = is_cell_file(filename) or (not _MACHINERY.search(filename) and "site-packages" not in filename and "/lib/python" not in filename)
    return {"filename": filename, "lineno": lineno, "name": name, "line": line, "label": label or filename, "user": user}


def parse_faulthandler(text: str) -> list[dict] | None:
    """The exec thread's frames from a faulthandler dump (the last dump in `text`).

    The exec thread is the one holding the GIL ("Current thread") when it shows
    a cell, else the thread whose stack contains a cell.
    """
    threads: list[tuple[bool, list[dict]]] = []
    for raw in text.splitlines():
        head = _THREAD.match(raw)
        if head:
            threads.append((head.group(1) == "Current thread" or raw.startswith("Stack"), []))
            continue
        m = _FH_FRAME.match(raw)
        if m and threads:
            threads[-1][1].append(_frame(m.group("file"), int(m.group("line")), m.group("name")))
    if not threads:
        return None
    # A file holding several dumps: keep the last dump (it starts at the last "Current thread" block's group).
    candidates = [frames for _, frames in threads if any(is_cell_file(f["filename"]) for f in frames)]
    current = [frames for is_current, frames in threads if is_current and any(is_cell_file(f["filename"]) for f in frames)]
    chosen = (current or candidates or [threads[-1][1]])[-1]
    kept = [f for f in reversed(chosen) if f["user"] or not _MACHINERY.search(f["filename"])]
    return kept[-MAX_FRAMES:] or None


def parse_traceback(lines: list[str]) -> list[dict] | None:
    """Frames from an IPython error traceback (what a stock kernel sends when interrupted)."""
    frames: list[dict] = []
    text = _ANSI.sub("", "\n".join(lines))
    for raw in text.splitlines():
        line = raw.strip()
        m = _TB_CELL.match(line)
        if m:
            frames.append(_frame("<cell>", int(m.group("line")), "<module>", label=m.group("label")))
            frames[-1]["user"] = True
            continue
        m = _TB_FILE.match(line)
        if m:
            frames.append(_frame(m.group("file"), int(m.group("line")), m.group("name")))
            continue
        m = _TB_ARROW.match(line)
        if m and frames and not frames[-1]["line"]:
            frames[-1]["line"] = m.group("src").strip()
    frames = [f for f in frames if not _MACHINERY.search(f["filename"])]
    return frames[-MAX_FRAMES:] or None


def from_cell(frames: list[dict] | None, source: str | None = None) -> list[dict] | None:
    """Frames from the outermost cell frame inwards (the kernel and the event loop above it are noise).

    Cell frames without a source line get it from the cell's source when known.
    """
    if not frames:
        return None
    first = next((i for i, f in enumerate(frames) if is_cell_file(str(f.get("filename", ""))) or str(f.get("label", "")).startswith("Cell In[")), None)
    kept = [dict(f) for f in (frames[first:] if first is not None else frames)]
    lines = source.splitlines() if source else []
    for i, f in enumerate(kept):
        cell = is_cell_file(str(f.get("filename", ""))) or str(f.get("label", "")).startswith("Cell In[")
        if cell:
            f["user"] = True
            # Only the outermost cell frame is this cell; inner ones may be functions of earlier cells.
            if i == 0 and first is not None and not f.get("line") and isinstance(f.get("lineno"), int) and 0 < f["lineno"] <= len(lines):
                f["line"] = lines[f["lineno"] - 1].strip()
            if not f.get("label") or f.get("label") == f.get("filename"):
                f["label"] = "cell"
    return kept[-MAX_FRAMES:] or None


def format_stack(frames: list[dict] | None) -> str:
    """Plain text, innermost last, the innermost user frame marked."""
    if not frames:
        return "(no stack available)"
    innermost_user = next((i for i in range(len(frames) - 1, -1, -1) if frames[i].get("user")), None)
    out = []
    for i, f in enumerate(frames):
        where = f.get("label") or f.get("filename")
        mark = "  <-- here" if i == innermost_user else ""
        out.append(f"  {where}, line {f.get('lineno')}, in {f.get('name')}{mark}")
        if f.get("line"):
            out.append(f"      {f['line']}")
    return "\n".join(out)


def stopped_at(frames: list[dict] | None) -> str | None:
    """'label:line' of the innermost user frame."""
    if not frames:
        return None
    for f in reversed(frames):
        if f.get("user"):
            return f"{f.get('label') or f.get('filename')}:{f.get('lineno')}"
    f = frames[-1]
    return f"{f.get('label') or f.get('filename')}:{f.get('lineno')}"
