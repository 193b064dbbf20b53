"""The tools' argument types: a JSON schema for the client, and no validation by the SDK.

Values reach the tool as sent, so the tool's own checks (the one duration
grammar, the agent client's messages) say what is wrong, e.g. "code must be a
string (the cell's source), not int", instead of a pydantic dump.
"""

from __future__ import annotations

import typing as t

from pydantic import PlainValidator, WithJsonSchema


def _as_sent(value: t.Any) -> t.Any:
    return value


_RAW = PlainValidator(_as_sent)
_DURATION = [{"type": "number", "minimum": 0}, {"type": "string"}, {"type": "null"}]

Code = t.Annotated[str, _RAW, WithJsonSchema({"type": "string", "description": "the cell's Python source"})]
Text = t.Annotated[str, _RAW, WithJsonSchema({"type": "string"})]
OptionalText = t.Annotated[str | None, _RAW, WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "null"}]})]
Count = t.Annotated[int | None, _RAW, WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]})]
Flag = t.Annotated[bool, _RAW, WithJsonSchema({"type": "boolean"})]
WallBudget = t.Annotated[
    float | str | None,
    _RAW,
    WithJsonSchema(
        {
            "anyOf": _DURATION,
            "description": "seconds the cell may run (30, '2m'; 0 = none); omitted: the server's default",
        }
    ),
]
QuietBudget = t.Annotated[
    float | str | None,
    _RAW,
    WithJsonSchema(
        {
            "anyOf": _DURATION,
            "description": (
                "seconds the cell may run without printing anything (0 = none); omitted: the server's default"
            ),
        }
    ),
]
MemoryBudget = t.Annotated[
    int | float | str | None,
    _RAW,
    WithJsonSchema(
        {
            "anyOf": [{"type": "number", "minimum": 0}, {"type": "string"}, {"type": "null"}],
            "description": (
                "bytes the cell may grow the kernel by ('512M', '2G'; 0 = none); omitted: the server's default"
            ),
        }
    ),
]
Wait = t.Annotated[
    float | str | None,
    _RAW,
    WithJsonSchema({"anyOf": _DURATION, "description": "seconds this call waits for the cell before it answers"}),
]
