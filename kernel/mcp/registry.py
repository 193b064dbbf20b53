"""How a module-level tool function becomes a tool of one server: bound to its Sessions, shown to the SDK as written.

A tool is `async def name(sessions, <the tool's arguments>) -> Answer`.  The SDK
reads a tool's input schema, output schema and Context argument from the
function's signature and annotations, and the input schema's title from its
name; the bound function shows exactly the tool function's, without `sessions`.
"""

from __future__ import annotations

import inspect
import typing as t
from collections.abc import Awaitable, Callable, Mapping

from mcp.server.mcpserver import MCPServer

from .sessions import Sessions

ToolFunction = Callable[..., Awaitable[t.Any]]


def add_tools(
    server: MCPServer, sessions: Sessions, tools: Mapping[str, ToolFunction], descriptions: Mapping[str, str]
) -> None:
    """Each tool under its name, with its description, in the table's order (tools/list keeps it)."""
    for name, tool in tools.items():
        server.add_tool(bound(tool, sessions), name=name, description=descriptions[name])


def bound(tool: ToolFunction, sessions: Sessions) -> ToolFunction:
    """`tool` with its first argument filled in by `sessions`; its name, signature and annotations otherwise."""
    signature = inspect.signature(tool, eval_str=True)
    arguments = list(signature.parameters.values())[1:]

    async def call(**kwargs: t.Any) -> t.Any:
        return await tool(sessions, **kwargs)

    call.__name__ = call.__qualname__ = tool.__name__
    call.__module__, call.__doc__ = tool.__module__, tool.__doc__
    call.__annotations__ = {a.name: a.annotation for a in arguments} | {"return": signature.return_annotation}
    setattr(call, "__signature__", signature.replace(parameters=arguments))  # noqa: B010 - a function has no typed __signature__
    return call
