"""`cancelkernel mcp`: the server, its transports (stdio: stdio.py; streamable HTTP), and a clean exit.

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

import anyio
from mcp.server.mcpserver import MCPServer

from .. import __version__
from ..agent.errors import BadInputError
from . import access, notebooks, resources, stdio, tasks, tools
from .options import ServerOptions, parse_args
from .sessions import Sessions

INSTRUCTIONS = (
    "Runs Python cells in Jupyter kernels that can always be stopped. execute runs a cell under budgets (a runaway is "
    "interrupted once, with its stack; one that cannot be interrupted is ended by a restart that restores the last "
    "checkpoint) and answers `running` with an execution_id if it takes longer than the call's wait: follow it with "
    "get_execution, stop it with interrupt. Every answer says why, in a sentence, and what to do next."
)


def build(options: ServerOptions) -> tuple[MCPServer, Sessions]:
    """The MCP server with every tool and resource, tasks (both protocol generations), and the kernels it will own."""
    sessions = Sessions(options)
    running = tasks.Tasks()

    @contextlib.asynccontextmanager
    async def lifespan(server: MCPServer) -> t.AsyncIterator[dict[str, t.Any]]:
        async with running.running():  # tasks outlive the request that made them
            yield {}

    server: MCPServer = MCPServer(
        "cancelkernel",
        instructions=INSTRUCTIONS,
        version=__version__,
        log_level="WARNING",
        lifespan=lifespan,
        middleware=[tasks.LegacyTasks(running)],
        extensions=[tasks.TasksExtension(running)],
    )
    tools.register(server, sessions)
    notebooks.register(server, sessions)
    resources.register(server, sessions)
    return server, sessions


def main(argv: list[str] | None = None) -> int:
    """`cancelkernel mcp [--http [HOST:]PORT] [options]`; exit code 2 for bad options (nothing started)."""
    options = _parsed(list(sys.argv[1:] if argv is None else argv))
    if isinstance(options, int):
        return options
    if options.cwd:
        os.chdir(options.cwd)  # the kernels start here, and relative notebook paths mean what the agent sees
    scratch = None
    if options.log is None:  # the log is a resource either way; without --log it lives as long as the server
        scratch = tempfile.mkdtemp(prefix="cancelkernel-mcp-")
        options.log = os.path.join(scratch, "interventions.jsonl")
    try:
        serve(*build(options))
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


def _parsed(argv: list[str]) -> ServerOptions | int:
    """The options, or the exit code: 2 after saying what is wrong, 0 after --help."""
    try:
        return parse_args(argv)
    except BadInputError as exc:
        print(f"{exc}\n(see `cancelkernel mcp --help`)", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)


def serve(server: MCPServer, sessions: Sessions) -> None:
    """Serve until the transport ends, a signal or an error; every kernel is shut down before this returns."""
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
        if sessions.options.http is not None:
            serve_http(server, sessions.options)
        else:
            anyio.run(stdio.serve, server)
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        serving[0] = False
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the close short
        sessions.close_all()
        if closing.ident is not None:
            closing.join(5.0)


def serve_http(server: MCPServer, options: ServerOptions) -> None:
    """Streamable HTTP on the options' host:port (port 0: a free one), behind the token and the Host check.

    The address (and a token made here) goes to stderr once it listens.
    """
    import uvicorn

    assert options.http is not None
    host, port = options.http
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
    app: t.Any = server.streamable_http_app(
        host=host, transport_security=access.transport_security(host, options.allowed_hosts)
    )
    if options.mcp_token is not None:
        app = access.BearerGate(app, options.mcp_token)
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2, lifespan="on")
    for line in _http_lines(options, f"http://{shown}:{bound}{access.MCP_PATH}"):
        print(f"cancelkernel mcp: {line}", file=sys.stderr)
    sys.stderr.flush()
    with contextlib.closing(sock):
        anyio.run(uvicorn.Server(config).serve, [sock])


def _http_lines(options: ServerOptions, url: str) -> list[str]:
    """What the user reads at start: the URL, the header a client must send (a token made here, once), the warnings."""
    host = options.http[0] if options.http else ""
    lines = []
    if options.mcp_token is None:
        lines.append(
            "WARNING: --no-mcp-token: no token is asked, so every process and user on this machine that reaches the "
            "port can run code as you"
        )
    elif options.token_generated:
        lines.append(f"clients must send the header   Authorization: Bearer {options.mcp_token}")
        lines.append(
            f"(a new token at every start; set ${access.TOKEN_ENV} or --mcp-token to keep one; docs/mcp.md shows "
            "how clients send it)"
        )
    else:
        lines.append(
            f"clients must send the header   Authorization: Bearer <the token of --mcp-token / ${access.TOKEN_ENV}>"
        )
    hosts = access.allowed_hosts(host, options.allowed_hosts)
    if not access.is_loopback(host):
        lines.append(
            f"WARNING: listening on {host}, not loopback: whoever reaches the port and has the token runs code as you, "
            "and plain HTTP carries the token in clear (prefer an SSH tunnel or a TLS proxy)"
        )
        lines.append(f"accepted Host headers: {', '.join(hosts)} (add the names clients use with --allow-host)")
    return [*lines, f"streamable HTTP on {url}"]  # last: the line that says it listens
