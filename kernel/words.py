"""Words our sentences share: a count with its noun, singular or plural as the count says."""

from __future__ import annotations

# Nouns whose plural is not the noun plus "s".
IRREGULAR = {"child": "children", "process": "processes", "dependency": "dependencies"}


def plural(count: int, noun: str) -> str:
    """'1 name', '2 names', '0 names': the count, then the noun in the form the count needs."""
    return f"{count} {noun if count == 1 else IRREGULAR.get(noun, noun + 's')}"
