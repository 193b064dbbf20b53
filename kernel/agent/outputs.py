"""Turn iopub messages into nbformat-style output dicts, as Jupyter front ends do.

The core client needs no nbformat: this is the small part of nbclient's output
handling we need (streams merged, clear_output with wait, display updates by
display_id), without nbclient's execution loop, which is what hangs when a kernel dies or is restarted.
"""

from __future__ import annotations

import typing as t

OUTPUT_TYPES = ("stream", "display_data", "execute_result", "error")
# A marker appended once when a cell's output exceeds the collector's cap.
DROPPED_NOTE = "\n[cancelkernel.agent: {n} more bytes of output dropped (max_output_bytes={cap})]\n"


class DisplayRegistry:
    """display_id -> the output dicts showing it, across cells (update_display_data may target an earlier cell)."""

    def __init__(self) -> None:
        self._by_id: dict[str, list[dict]] = {}

    def add(self, display_id: str, output: dict) -> None:
        self._by_id.setdefault(display_id, []).append(output)

    def update(self, display_id: str, data: dict, metadata: dict) -> bool:
        targets = self._by_id.get(display_id, [])
        for out in targets:
            out["data"] = data
            out["metadata"] = metadata
        return bool(targets)

    def forget(self, outputs: list[dict]) -> None:
        """Drop outputs that a clear_output removed."""
        gone = {id(o) for o in outputs}
        for key in list(self._by_id):
            self._by_id[key] = [o for o in self._by_id[key] if id(o) not in gone]
            if not self._by_id[key]:
                del self._by_id[key]


class OutputCollector:
    """The outputs of one cell, built from its iopub messages."""

    def __init__(self, registry: DisplayRegistry | None = None, *, max_output_bytes: int | None = None):
        self.outputs: list[dict] = []
        self.registry = registry if registry is not None else DisplayRegistry()
        self.max_output_bytes = max_output_bytes
        self.size = 0
        self.dropped = 0
        self._clear_pending = False

    def add(self, msg: dict) -> bool:
        """Apply one iopub message; True if it was output (resets the quiet budget)."""
        msg_type = msg["header"]["msg_type"]
        content = msg.get("content") or {}
        if msg_type == "clear_output":
            if content.get("wait"):
                self._clear_pending = True
            else:
                self._clear()
            return True
        if msg_type == "update_display_data":
            display_id = (content.get("transient") or {}).get("display_id")
            if display_id:
                self.registry.update(display_id, content.get("data", {}), content.get("metadata", {}))
            return True
        if msg_type not in OUTPUT_TYPES:
            return False
        if self._clear_pending:
            self._clear()
        self._append(msg_type, content)
        return True

    def _clear(self) -> None:
        self.registry.forget(self.outputs)
        self.outputs.clear()
        self._clear_pending = False

    def _append(self, msg_type: str, content: dict) -> None:
        if msg_type == "stream":
            text = content.get("text", "")
            text = self._capped(text)
            if not text:
                return
            last = self.outputs[-1] if self.outputs else None
            if last is not None and last["output_type"] == "stream" and last["name"] == content.get("name"):
                last["text"] += text
            else:
                self.outputs.append({"output_type": "stream", "name": content.get("name", "stdout"), "text": text})
            return
        out: dict[str, t.Any] = {"output_type": msg_type}
        if msg_type == "error":
            out.update(
                ename=content.get("ename", ""),
                evalue=content.get("evalue", ""),
                traceback=list(content.get("traceback", [])),
            )
        else:
            out["data"] = content.get("data", {})
            out["metadata"] = content.get("metadata", {})
            if msg_type == "execute_result":
                out["execution_count"] = content.get("execution_count")
        if self._over_cap(out):
            return
        self.outputs.append(out)
        display_id = (content.get("transient") or {}).get("display_id")
        if display_id and msg_type in ("display_data", "execute_result"):
            self.registry.add(display_id, out)

    def _capped(self, text: str) -> str:
        if self.max_output_bytes is None:
            self.size += len(text)
            return text
        room = self.max_output_bytes - self.size
        if room >= len(text):
            self.size += len(text)
            return text
        kept = text[: max(room, 0)]
        self.size += len(kept)
        first_drop = self.dropped == 0
        self.dropped += len(text) - len(kept)
        if first_drop:
            kept += DROPPED_NOTE.format(n="some", cap=self.max_output_bytes)
        return kept

    def _over_cap(self, out: dict) -> bool:
        if self.max_output_bytes is None:
            return False
        size = sum(len(str(v)) for v in out.get("data", {}).values()) + sum(
            len(line) for line in out.get("traceback", [])
        )
        if out["output_type"] != "error" and self.size + size > self.max_output_bytes:
            self.dropped += size
            return True
        self.size += size
        return False
