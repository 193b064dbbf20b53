"""The MCP server (`cancelkernel mcp`): the agent client's policy behind the Model Context Protocol.

Owns: the command line and defaults (`options`), kernels and executions by id
(`sessions`, `executions`), the tools (`tools`: cells and kernels; `notebooks`;
each a module-level function, bound to a server by `registry`), their argument
types and answer shapes (`args`, `models`, `shapes`, `outputs`), waiting with
progress and cancellation (`waiting`), MCP tasks (`tasks`), the resources
(`resources`), who may use HTTP (`access`), and the server and its transports
(`server`, `stdio`).  May import: the agent client
(`cancelkernel.agent`, its public API), the shared pure modules, the command
line's option types and shared flags (`cli.options`), the `mcp` SDK and
pydantic (the extra `cancelkernel[mcp]`).  Never the kernel side, the runtime, the native flag or
the checkpoints package (a test checks).
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """`cancelkernel mcp ...`; says how to install the SDK if it is missing."""
    if importlib.util.find_spec("mcp") is None:
        print(
            "cancelkernel mcp needs the MCP SDK, which is not installed: pip install 'cancelkernel[mcp]'",
            file=sys.stderr,
        )
        return 2
    from .server import main as serve

    return serve(argv)
