"""The `cancelkernel` command: install, uninstall, kernel, demo, exec, run, mcp."""

from __future__ import annotations

import argparse
import os
import sys

from .. import protocol
from .options import duration_arg


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cancelkernel",
        description="A Jupyter kernel for Python whose cells can always be stopped.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("install", help="install the kernelspec (default name 'cancelkernel')")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="install for the current user only")
    where.add_argument("--sys-prefix", action="store_true", help=f"install into this environment ({sys.prefix})")
    where.add_argument("--prefix", metavar="DIR", help="install into DIR/share/jupyter/kernels")
    p.add_argument("--name", default="cancelkernel", help="kernelspec name (default: %(default)s)")
    p.add_argument("--display-name", default=None, help="name shown in Jupyter (default: 'Python 3 (cancelkernel)')")
    p.add_argument(
        "--exec-thread",
        choices=protocol.EXEC_THREADS,
        default="main",
        help="where user code runs (default: %(default)s)",
    )
    p.add_argument(
        "--interrupt-mode",
        choices=protocol.INTERRUPT_MODES,
        default=None,
        help=(
            "how Jupyter interrupts the kernel: SIGINT to its process group (the default: fastest, "
            "reaches GIL-held loops) or interrupt_request"
        ),
    )
    grace = duration_arg("--interrupt-grace")
    p.add_argument(
        "--interrupt-grace",
        type=grace,
        default=None,
        metavar="SECONDS",
        help="seconds an interrupted cell gets to stop (30, 1.5, 2m)",
    )
    p.add_argument(
        "--checkpoint-root",
        default=None,
        metavar="DIR",
        help=(
            "where the kernels keep their checkpoints, DIR/<kernel>: a path every host a kernel may be restarted "
            f"on sees (default: ${protocol.CHECKPOINT_ROOT_ENV}, else the Jupyter runtime dir; docs/checkpoints.md)"
        ),
    )

    p = sub.add_parser("uninstall", help="remove an installed kernelspec")
    p.add_argument("--name", default="cancelkernel", help="kernelspec name (default: %(default)s)")

    sub.add_parser("kernel", help="run the kernel (what kernel.json runs); takes ipykernel's options", add_help=False)

    sub.add_parser(
        "exec",
        help="run code under the agent policy and print the result (see `cancelkernel exec --help`)",
        add_help=False,
    )
    sub.add_parser(
        "run", help="execute a notebook under the agent policy (see `cancelkernel run --help`)", add_help=False
    )
    sub.add_parser(
        "mcp",
        help="serve the agent policy over MCP, stdio or streamable HTTP (see `cancelkernel mcp --help`)",
        add_help=False,
    )

    p = sub.add_parser("demo", help="start the kernel, interrupt a few runaway cells, show that state survives")
    p.add_argument(
        "--exec-thread",
        choices=[*protocol.EXEC_THREADS, "both"],
        default="both",
        help="which mode(s) to show (default: %(default)s)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "kernel":
        from ..kernel.app import launch

        launch(argv[1:])
        return 0
    # The agent commands parse their own options.
    if argv and argv[0] == "exec":
        from .agent_commands import exec_main

        return exec_main(argv[1:])
    if argv and argv[0] == "run":
        from .agent_commands import run_main

        return run_main(argv[1:])
    if argv and argv[0] == "mcp":
        from ..mcp import main as mcp_main

        return mcp_main(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "install":
        return _install(args)
    if args.command == "uninstall":
        return _uninstall(args)
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(modes=list(protocol.EXEC_THREADS) if args.exec_thread == "both" else [args.exec_thread])
    parser.error(f"unknown command {args.command!r}")
    return 2


def _install(args: argparse.Namespace) -> int:
    from ..kernelspec import DEFAULT_DISPLAY_NAME, InstallError, install

    prefix = sys.prefix if args.sys_prefix else args.prefix
    display_name = args.display_name or DEFAULT_DISPLAY_NAME
    if args.display_name is None and args.exec_thread != "main":
        display_name = f"Python 3 (cancelkernel, {args.exec_thread} thread)"
    try:
        path = install(
            name=args.name,
            display_name=display_name,
            user=args.user,
            prefix=prefix,
            exec_thread=args.exec_thread,
            interrupt_grace=args.interrupt_grace,
            interrupt_mode=args.interrupt_mode,
            checkpoint_root=args.checkpoint_root,
        )
    except InstallError as exc:
        print(f"cancelkernel install: {exc}", file=sys.stderr)
        return 1
    print(f"Installed kernelspec {args.name!r} in {path}")
    if prefix and os.path.abspath(prefix) != os.path.abspath(sys.prefix):
        shared = os.path.join(prefix, "share", "jupyter")
        if not os.environ.get("JUPYTER_PATH", "").startswith(shared):
            print(f"  (add {shared} to JUPYTER_PATH so Jupyter finds it)")
    return 0


def _uninstall(args: argparse.Namespace) -> int:
    from ..kernelspec import InstallError, uninstall

    try:
        path = uninstall(name=args.name)
    except InstallError as exc:
        print(f"cancelkernel uninstall: {exc}", file=sys.stderr)
        return 1
    print(f"Removed kernelspec {args.name!r} from {path}")
    return 0
