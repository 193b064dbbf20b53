"""A cell's outputs as an agent reads them: text items, image blocks, and a window on a long transcript.

Every output (a stream, a result, an error, an image's alt text) is one item
with its text; the items laid end to end are the execution's transcript, and
`since` is a character offset into it.  An answer carries at most `limit`
characters: from the start, the head and the tail with the middle left out;
from an explicit `since`, the next `limit` characters.  Either way a note says
exactly which call reads what was left out.
"""

from __future__ import annotations

import base64
import json
import re
import typing as t

from mcp.types import ImageContent

from ..protocol import EVENT_MIME, NOTE_CLASS

IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/webp", "image/svg+xml")
TEXT_MIMES = ("text/plain", "text/markdown", "application/json", "text/html", "text/latex")
MAX_IMAGES = 8
MAX_IMAGE_BYTES = 4_000_000  # base64 characters of one image in an answer
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def items(outputs: list[dict]) -> list[dict[str, t.Any]]:
    """nbformat-style outputs -> items {type, text, ...}; images keep their data under "_image" (not sent as JSON)."""
    found = []
    for out in list(outputs):  # the run loop may append while we read
        kind = out.get("output_type")
        if kind == "stream":
            found.append({"type": "stream", "name": out.get("name", "stdout"), "text": str(out.get("text", ""))})
        elif kind == "error":
            traceback = "\n".join(strip_ansi(str(line)) for line in out.get("traceback") or [])
            text = traceback or f"{out.get('ename')}: {out.get('evalue')}"
            found.append({"type": "error", "ename": out.get("ename"), "evalue": out.get("evalue"), "text": _line(text)})
        elif kind in ("execute_result", "display_data"):
            found.append(_data_item(kind, dict(out.get("data") or {})))
    return found


def _data_item(kind: str, data: dict[str, t.Any]) -> dict[str, t.Any]:
    mimes = sorted(data)
    if EVENT_MIME in data or NOTE_CLASS in str(data.get("text/html", "")):
        # The kernel's note about the cell (older kernels put the event itself in data).
        plain = data.get("text/plain")
        return {
            "type": "event",
            "mime": mimes,
            "text": _line(str(plain) if plain else json.dumps(data.get(EVENT_MIME), default=str)),
        }
    image = next((m for m in IMAGE_MIMES if m in data), None)
    if image is not None:
        raw = data[image]
        encoded = base64.b64encode(raw.encode()).decode() if image == "image/svg+xml" else str(raw).replace("\n", "")
        alt = str(data.get("text/plain") or "")
        return {
            "type": "image",
            "mime": mimes,
            "_image_mime": image,
            "text": _line(f"[{image} image, {len(encoded) * 3 // 4} bytes] {alt}".rstrip()),
            "_image": encoded,
        }
    for mime in TEXT_MIMES:
        if mime in data:
            value = data[mime]
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            return {"type": "result" if kind == "execute_result" else "display", "mime": mimes, "text": _line(text)}
    return {"type": "display", "mime": mimes, "text": _line(f"[output of type {', '.join(mimes) or 'none'}]")}


def _line(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def window(
    found: list[dict[str, t.Any]],
    since: int,
    limit: int,
    *,
    explicit: bool,
    again: t.Callable[[int], str],
) -> dict[str, t.Any]:
    """The items (cut) inside the answer's window, image blocks for the images in it, and the truncation note.

    again(since) -> the call that reads from `since`, for the note.
    """
    starts, total = [], 0
    for item in found:
        starts.append(total)
        total += len(item["text"])
    since = min(since, total)
    if explicit or since > 0:
        spans = [(since, min(total, since + limit))]
    elif total > limit:
        spans = [(0, limit // 2), (total - (limit - limit // 2), total)]
    else:
        spans = [(0, total)]
    kept: list[dict[str, t.Any]] = []
    images: list[ImageContent] = []
    for item, start in zip(found, starts, strict=True):
        end = start + len(item["text"])
        for lo, hi in spans:
            if end <= lo or start >= hi:
                continue
            part = {k: v for k, v in item.items() if not k.startswith("_")}
            part["start"] = max(start, lo)
            part["text"] = item["text"][max(0, lo - start) : hi - start]
            if "_image" in item and start >= lo:
                part["content_index"], part["note"] = _image_block(item, images, start)
            kept.append(part)
    truncated = None
    if len(spans) == 2:
        lo, hi = spans[0][1], spans[1][0]
        truncated = {
            "omitted_from": lo,
            "omitted_to": hi,
            "note": (
                f"{hi - lo} characters of output were left out (characters {lo} to {hi}); call {again(lo)} to read them"
            ),
        }
        next_since = total
    else:
        next_since = spans[0][1]
        if next_since < total:
            truncated = {
                "omitted_from": next_since,
                "omitted_to": total,
                "note": (
                    f"the output goes on for {total - next_since} more characters; "
                    f"call {again(next_since)} to read them"
                ),
            }
    return {"outputs": kept, "images": images, "output_chars": total, "next_since": next_since, "truncated": truncated}


def _image_block(item: dict[str, t.Any], images: list[ImageContent], start: int) -> tuple[int | None, str | None]:
    """Add the item's image to the answer: its index in the content, or None and why it was not sent."""
    encoded = item["_image"]
    if len(images) >= MAX_IMAGES:
        return None, f"image not sent: at most {MAX_IMAGES} images per answer; get_execution(since={start}) sends it"
    if len(encoded) > MAX_IMAGE_BYTES:
        return None, f"image not sent: larger than {MAX_IMAGE_BYTES // 1_000_000} MB encoded"
    images.append(ImageContent(type="image", data=encoded, mime_type=item["_image_mime"]))
    return len(images), None  # content[0] is the JSON text; the images follow it
