"""What `cancelkernel mcp` is told: its command line, its defaults, and the checks of every tool argument.

Durations go through the one grammar (`durations.parse_duration`), so `30`,
`1.5`, `500ms`, `2m` mean here what they mean everywhere; a refused value gets
the same message.  The flags shared with `exec` and `run` are declared once, by
the command line's `AgentParser`.
"""

from __future__ import annotations

import os
import typing as t
from dataclasses import dataclass, field

from .. import protocol
from ..agent.budgets import parse_seconds
from ..agent.errors import BadInputError
from ..cli.options import AgentParser, checkpoint_root_env
from ..sizes import SizeError, parse_size
from .access import TOKEN_ENV, is_loopback, new_token, token_problem

# An agent's cell never runs unbounded by default: ten minutes in all, two without output.
DEFAULT_WALL_BUDGET = 600.0
DEFAULT_QUIET_BUDGET = 120.0
# How long execute waits before answering `running`: below the ~60 s most agent clients allow a call.
DEFAULT_WAIT = 45.0
DEFAULT_POLL_WAIT = 30.0
MAX_WAIT = 3600.0
# Characters of output in one answer (the rest is read with get_execution(since=...)).
DEFAULT_MAX_CHARS = 20_000
MAX_CHARS = 1_000_000
# Finished executions kept for get_execution; older ones are forgotten (memory stays bounded).
KEEP_FINISHED = 100
EXEC_THREADS = protocol.EXEC_THREADS
LOOPBACK = "127.0.0.1"


@dataclass
class ServerOptions:
    """The server's defaults for every kernel it starts (each tool call may override the budgets)."""

    kernel_name: str = "cancelkernel"
    exec_thread: str | None = None
    wall_budget: float = DEFAULT_WALL_BUDGET  # 0: none
    quiet_budget: float = DEFAULT_QUIET_BUDGET  # 0: none
    interrupt_grace: float | None = None
    checkpoint: str = "off"
    checkpoint_root: str | None = None  # the root of the kernels started here (absolute); None: theirs
    log: str | None = None
    cwd: str | None = None
    server_url: str | None = None
    token: str | None = None
    http: tuple[str, int] | None = None  # (host, port) for streamable HTTP; None: stdio
    mcp_token: str | None = None  # what HTTP clients must send as `Authorization: Bearer`; None: no check
    token_generated: bool = False  # made at start: printed once on stderr, for the user to give the client
    allowed_hosts: list[str] = field(default_factory=list)  # Host values accepted besides the bound address's
    spare: bool = True  # the agent client's warm spare kernel: a restart is a swap, not a cold start
    extra_env: dict[str, str] = field(default_factory=dict)

    def agent_options(self, kernel_name: str | None = None, exec_thread: str | None = None) -> dict[str, t.Any]:
        """AgentKernel(**options) for one kernel: the server's defaults,
        a kernelspec and exec thread chosen per kernel."""
        name = kernel_name or self.kernel_name
        thread = exec_thread or (self.exec_thread if kernel_name is None else None)
        env = checkpoint_root_env(self.checkpoint_root, server_url=self.server_url, connection_file=None)
        return {
            **({"env": env} if env else {}),
            "kernel_name": name,
            "server_url": self.server_url,
            "token": self.token,
            "wall_budget": self.wall_budget or None,
            "quiet_budget": self.quiet_budget or None,
            "interrupt_grace": self.interrupt_grace,
            "checkpoint": self.checkpoint,
            "log": self.log,
            "spare": self.spare,
            "extra_arguments": kernel_arguments(name, thread, self.interrupt_grace, remote=self.server_url is not None),
        }


def kernel_arguments(kernel_name: str, exec_thread: str | None, grace: float | None, *, remote: bool) -> list[str]:
    """Launch arguments for our kernel: where user code runs, and the same interrupt grace as the client's."""
    ours = kernel_name.startswith("cancelkernel")
    if exec_thread is not None:
        if exec_thread not in EXEC_THREADS:
            raise BadInputError(f"exec_thread must be one of {', '.join(EXEC_THREADS)}, not {exec_thread!r}")
        if not ours:
            raise BadInputError(f"exec_thread applies to the cancelkernel kernels only, not to {kernel_name!r}")
        if remote:
            raise BadInputError(
                "exec_thread cannot be passed to a kernel started through a server; "
                "choose the kernelspec instead ('cancelkernel' runs cells on the main thread, "
                "'cancelkernel-worker' on a worker)"
            )
    if not ours or remote:
        return []
    args = [f"--CancelKernel.exec_thread={exec_thread}"] if exec_thread else []
    if grace is not None:
        args.append(f"--CancelKernel.interrupt_grace={grace:g}")
    return args


# -- tool arguments ----------------------------------------------------------------------


def budget(name: str, value: t.Any) -> float | None:
    """A per-call budget: None takes the server's default, 0 turns it off, else seconds (the one grammar)."""
    if value is None:
        return None
    return parse_seconds(value, name, hint="; or leave it out for the server's default")


def memory_budget(value: t.Any) -> int | None:
    """A per-call memory budget: None takes the server's default, 0 turns it off, else bytes (the one size grammar)."""
    if value is None:
        return None
    try:
        return parse_size(value, "memory_budget")
    except SizeError as exc:
        raise BadInputError(f"{exc}; or leave it out for the server's default") from None


def wait_seconds(value: t.Any, default: float) -> float:
    """How long a call may wait for a cell: the default, or 0 .. MAX_WAIT seconds."""
    if value is None:
        return default
    seconds = parse_seconds(value, "wait")
    if seconds > MAX_WAIT:
        raise BadInputError(f"wait={value!r} is more than {MAX_WAIT:g} s; wait less and call get_execution again")
    return seconds


def code_text(value: t.Any) -> str:
    if not isinstance(value, str):
        raise BadInputError(f"code must be a string (the cell's source), not {type(value).__name__} {value!r:.80}")
    return value


def optional_text(name: str, value: t.Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise BadInputError(f"{name} must be a non-empty string or left out, not {value!r:.80}")
    return value


def offset(name: str, value: t.Any, default: int, *, most: int | None = None) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadInputError(f"{name} must be a whole number, 0 or more, not {value!r:.80}")
    if most is not None and value > most:
        raise BadInputError(f"{name}={value} is more than {most}")
    return value


# -- the command line --------------------------------------------------------------------


def parser() -> AgentParser:
    p = AgentParser(
        prog="cancelkernel mcp",
        description="An MCP server that runs notebook cells for agents under the cancelkernel policy "
        "(budgets, one targeted interrupt, restart with state, a log).",
    )
    p.add_argument(
        "--http",
        default=None,
        metavar="[HOST:]PORT",
        help=f"serve streamable HTTP on HOST:PORT (default host {LOOPBACK}; port 0 picks one) instead of stdio; "
        "clients must send a bearer token (below)",
    )
    p.add_argument(
        "--mcp-token",
        default=None,
        metavar="TOKEN",
        help=f"with --http: the token clients must send as `Authorization: Bearer TOKEN` (default: ${TOKEN_ENV}, "
        "else one made at start and printed on stderr); the variable keeps it out of the process list",
    )
    p.add_argument(
        "--no-mcp-token",
        dest="no_mcp_token",
        action="store_true",
        help="with --http on a loopback address only: no token (any process on this machine may then run code as you)",
    )
    p.add_argument(
        "--allow-host",
        dest="allowed_hosts",
        action="append",
        default=[],
        metavar="NAME[:PORT]",
        help="with --http: a Host name clients use to reach the server (e.g. the machine's name behind 0.0.0.0); "
        "the Host/Origin check refuses others (repeatable; default: the bound address, or the loopback names)",
    )
    p.add_kernel("kernelspec of the kernels it starts (default: %(default)s; 'python3' works, with less)")
    p.add_argument(
        "--exec-thread",
        choices=EXEC_THREADS,
        default=None,
        help="our kernel: run cells on the main thread or a worker thread",
    )
    p.add_budgets(
        wall="default seconds a cell may run (default: %(default)g; 0 = none)",
        quiet="default seconds a cell may run without output (default: %(default)g; 0 = none)",
        defaults=(DEFAULT_WALL_BUDGET, DEFAULT_QUIET_BUDGET),
    )
    p.add_interrupt_grace("seconds an interrupted cell gets to stop before the restart")
    p.add_checkpoint()
    p.add_checkpoint_root()
    p.add_log(
        "append one JSON line per intervention to FILE (default: a file removed at exit); "
        "also the resource cancelkernel://log"
    )
    p.add_argument(
        "--cwd", default=None, metavar="DIR", help="working directory of the kernels (and of relative notebook paths)"
    )
    p.add_server("start the kernels behind this Jupyter Server or kernel gateway (cancelkernel[remote])")
    p.add_no_spare(
        "no warm spare kernel per kernel (saves one idle kernel's memory each; a restart is then a cold start)"
    )
    return p


def parse_args(argv: list[str]) -> ServerOptions:
    """ServerOptions from the command line; BadInputError (nothing started) for bad input."""
    args = parser().parse_args(argv)
    if args.cwd is not None and not os.path.isdir(args.cwd):
        raise BadInputError(f"--cwd {args.cwd!r} is not a directory")
    if args.log is not None:
        parent = os.path.dirname(os.path.abspath(args.log))
        if not os.path.isdir(parent):
            raise BadInputError(f"--log {args.log!r}: directory {parent!r} does not exist")
    options = ServerOptions(
        kernel_name=args.kernel,
        exec_thread=args.exec_thread,
        wall_budget=t.cast(float, args.wall_budget),
        quiet_budget=t.cast(float, args.quiet_budget),
        interrupt_grace=t.cast("float | None", args.interrupt_grace),
        checkpoint=args.checkpoint,
        checkpoint_root=os.path.abspath(os.path.expanduser(args.checkpoint_root)) if args.checkpoint_root else None,
        log=os.path.abspath(args.log) if args.log else None,
        cwd=os.path.abspath(args.cwd) if args.cwd else None,
        server_url=args.server_url,
        token=args.token,
        http=http_address(args.http) if args.http is not None else None,
        spare=args.spare,
        allowed_hosts=list(args.allowed_hosts),
    )
    options.mcp_token, options.token_generated = http_token(options.http, args.mcp_token, args.no_mcp_token)
    if options.allowed_hosts and options.http is None:
        raise BadInputError("--allow-host applies to --http only")
    options.agent_options()  # exec thread and kernel checked before anything starts
    return options


def http_token(http: tuple[str, int] | None, given: str | None, none: bool) -> tuple[str | None, bool]:
    """The bearer token HTTP clients must send, and whether it was made here; BadInputError for a misuse."""
    if http is None:
        if given is not None or none:
            raise BadInputError("--mcp-token and --no-mcp-token apply to --http only (stdio has no HTTP to guard)")
        return None, False
    if none:
        if given is not None:
            raise BadInputError("give either --mcp-token or --no-mcp-token, not both")
        if not is_loopback(http[0]):
            raise BadInputError(
                f"--no-mcp-token is refused on {http[0]}, which is not a loopback address: anyone who reaches the port "
                "would run code as you. Keep the token (the default), or bind 127.0.0.1"
            )
        return None, False
    token = given if given is not None else os.environ.get(TOKEN_ENV) or None
    if token is None:
        return new_token(), True
    problem = token_problem(token)
    if problem is not None:
        source = "--mcp-token" if given is not None else f"${TOKEN_ENV}"
        raise BadInputError(f"{source} cannot be used as a bearer token: {problem}")
    return token, False


def http_address(text: str) -> tuple[str, int]:
    """'8000' -> (127.0.0.1, 8000); 'HOST:PORT' and '[::1]:PORT' as written."""
    host, _, port_text = text.rpartition(":")
    host = host.strip("[]") or LOOPBACK
    try:
        port = int(port_text)
    except ValueError:
        raise BadInputError(f"--http takes [HOST:]PORT (e.g. 8000 or 127.0.0.1:8000), not {text!r}") from None
    if not 0 <= port <= 65535:
        raise BadInputError(f"--http port must be 0..65535 (0 picks a free one), not {port}")
    return host, port
