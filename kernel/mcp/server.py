"""`cancelkernel mcp`: the server, its transports (stdio, streamable HTTP), and a clean exit.

Whatever ends the server (stdin closed, SIGTERM, SIGHUP, Ctrl-C, an error),
every kernel it started is shut down before the process exits: the close
starts in the signal handler itself, so it runs while the event loop winds
down, and is waited for at the end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import typing as t

from mcp.server.mcpserver import MCPServer

from .. import __version__
from ..agent.errors import BadInputError
from . import notebooks, resources, tools
from .options import ServerOptions, is_loopback, parse_args
from .sessions import Sessions

INSTRUCTIONS = (
    "Runs Python cells in Jupyter kernels that can always be stopped. execute runs a cell under budgets (a runaway is "
    "interrupted once, with its stack; one that cannot be interrupted is ended by a restart that restores the last "
    "checkpoint) and answers `running` with an execution_id if it takes longer than the call's wait: follow it with "
    "get_execution, stop it with interrupt. Every answer says why, in a sentence, and what to do next."
)


def build(options: ServerOptions) -> tuple[MCPServer, Sessions]:
    """The MCP server with every tool and resource, and the kernels it will own."""
    sessions = Sessions(options)
    server: MCPServer = MCPServer("cancelkernel", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")
    tools.register(server, sessions)
    notebooks.register(server, sessions)
    resources.register(server, sessions)
    return server, sessions


def main(argv: list[str] | None = None) -> int:
    """`cancelkernel mcp [--http [HOST:]PORT] [options]`; exit code 2 for bad options (nothing started)."""
    try:
        options = parse_args(list(sys.argv[1:] if argv is None else argv))
    except BadInputError as exc:
        print(f"{exc}\n(see `cancelkernel mcp --help`)", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    if options.cwd:
        os.chdir(options.cwd)  # the kernels start here, and relative notebook paths mean what the agent sees
    scratch = None
    if options.log is None:  # the log is a resource either way; without --log it lives as long as the server
        scratch = tempfile.mkdtemp(prefix="cancelkernel-mcp-")
        options.log = os.path.join(scratch, "interventions.jsonl")
    server, sessions = build(options)
    closing = threading.Thread(target=sessions.close_all, name="cancelkernel-mcp-close", daemon=True)
    serving = [True]

    def terminate(signum: int, frame: t.Any) -> None:
        if not serving[0]:
            return  # the close below is under way: let it finish (an exception here would cut it short)
        if closing.ident is None:
            closing.start()  # the kernels go down while the event loop winds down
        raise SystemExit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, terminate)
    try:
        if options.http is not None:
            serve_http(server, *options.http)
        else:
            server.run("stdio")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        serving[0] = False
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the close short
        sessions.close_all()
        if closing.ident is not None:
            closing.join(5.0)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


def serve_http(server: MCPServer, host: str, port: int) -> None:
    """Streamable HTTP on host:port (port 0: a free one); the address goes to stderr once it listens."""
    import anyio
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)  # from now on a client that connects waits in the backlog, never gets a refusal
    except OSError as exc:
        sock.close()
        raise SystemExit(f"cancelkernel mcp: cannot listen on {host}:{port}: {exc}") from None
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    if not is_loopback(host):
        print(f"cancelkernel mcp: WARNING: listening on {host}, not loopback: anyone who reaches it can run code as this user", file=sys.stderr)
    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2, lifespan="on")
    print(f"cancelkernel mcp: streamable HTTP on http://{shown}:{bound}/mcp", file=sys.stderr, flush=True)
    with contextlib.closing(sock):
        anyio.run(uvicorn.Server(config).serve, [sock])
