"""The sentences a cell's result carries that take more than a line to build.

After a memory trip: what the kernel measured, what held the memory, and what to do.
"""

from __future__ import annotations

from ..sizes import format_size


def memory_text(memory: dict) -> str:
    """What an agent reads after a memory trip: what was measured, what holds it, what to do."""

    def size(key: str) -> str:
        value = memory.get(key)
        return format_size(value) if isinstance(value, (int, float)) else "?"

    if memory.get("kind") == "guard":
        text = (
            f"the kernel's memory reached {size('at_trip')} of its limit of {size('limit')}, close to being killed; "
            "the kernel interrupted the cell"
        )
    else:
        text = (
            f"the cell grew the kernel from {size('start')} to {size('at_trip')}, "
            f"past its memory budget of {size('budget')}; the kernel interrupted it"
        )
    if isinstance(memory.get("after"), int):
        text += f"; {size('after')} once it stopped"
    released = memory.get("released") or []
    if released:
        biggest = released[0]
        held = f"{biggest.get('name')} ({biggest.get('type')}, {format_size(biggest.get('bytes') or 0)})"
        text += f". It was held by the cell's locals, which the kernel let go: {held}"
    holders = memory.get("holders") or []
    if holders:
        biggest = holders[0]
        text += (
            f". The biggest: {biggest.get('name')} ({biggest.get('type')}, {format_size(biggest.get('bytes') or 0)}); "
            f"free it with `del {biggest.get('name')}`, or process the data in chunks"
        )
    elif released:
        text += "; process the data in chunks"
    else:
        text += (
            ". No name of the namespace holds much: the memory was in the cell's own locals; process the data in chunks"
        )
    return text
