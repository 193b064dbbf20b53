"""`cancelkernel exec` and `cancelkernel run`: the agent client from the command line.

Exit codes: 0 every cell ok; 1 a cell failed (error, interrupted, restarted,
died); 2 bad input (nothing was started or written); 3 the kernel could not
be started.
"""

from __future__ import annotations

import argparse
import os
import sys
import typing as t

from ..agent.errors import AgentError, BadInputError, KernelStartError
from ..agent.result import CellResult
from .options import AgentParser, checkpoint_root_env, size_arg

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_KERNEL = 0, 1, 2, 3


def _common(p: AgentParser) -> None:
    p.add_budgets(
        wall="seconds a cell may run (30, 2m; 0 = none; 'auto': from measured runtimes)",
        quiet="seconds a cell may run without output (0 = none)",
        auto=True,
    )
    p.add_argument(
        "--memory-budget", type=size_arg("--memory-budget"), default=None, metavar="SIZE",
        help="bytes a cell may grow the kernel by (512M, 2G; 0 = none; cancelkernel kernels only)",
    )  # fmt: skip
    p.add_kernel("kernelspec name (default: %(default)s; 'python3' works too)")
    p.add_argument(
        "--connection-file",
        default=None,
        metavar="FILE",
        help="use a running kernel on this host instead of starting one",
    )
    p.add_server("use a kernel behind this Jupyter Server or kernel gateway (cancelkernel[remote])")
    p.add_argument(
        "--kernel-id",
        default=None,
        metavar="ID",
        help="with --server-url: use this running kernel instead of starting one",
    )
    p.add_interrupt_grace("seconds an interrupted cell gets to stop")


def _exec_parser() -> AgentParser:
    p = AgentParser(prog="cancelkernel exec", description="Run code in a kernel under budgets and print the result.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("-c", dest="code", metavar="CODE", help="the code to run")
    src.add_argument("file", nargs="?", metavar="FILE", help="a file of code to run ('-' reads standard input)")
    _common(p)
    p.add_log("append one JSON line per intervention to FILE")
    p.add_argument("--json", action="store_true", help="print the CellResult as JSON")
    return p


def _run_parser() -> AgentParser:
    p = AgentParser(
        prog="cancelkernel run", description="Execute notebooks under the agent policy, each on its own kernel."
    )
    p.add_argument("notebooks", nargs="+", metavar="NOTEBOOK")
    p.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="OUT",
        help="the executed notebook (default: NAME.executed.ipynb); with several notebooks, a directory for them",
    )
    p.add_log("one JSON line per intervention; with several notebooks, a directory (NAME.jsonl each)")
    p.add_argument(
        "--jobs",
        type=_jobs,
        default=1,
        metavar="N",
        help="notebooks run at once, each on its own kernel (default: %(default)s)",
    )
    _common(p)
    p.add_checkpoint()
    p.add_checkpoint_root()
    p.add_argument(
        "--allow-errors",
        action="store_true",
        help="keep going after a failing cell; plain errors then do not fail the run",
    )
    p.add_no_spare("no warm spare kernel (a restart is then a cold start; saves one idle kernel's memory)")
    return p


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace | int:
    try:
        return parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except BadInputError as exc:
        print(f"{exc}\n(see `{parser.prog} --help`)", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        return int(exc.code or 0)


def _jobs(text: str) -> int:
    try:
        jobs = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--jobs takes a whole number of notebooks at a time, not {text!r}") from None
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"--jobs must be 1 or more (notebooks at a time), not {jobs}")
    return jobs


def _agent_options(args: argparse.Namespace) -> dict[str, t.Any]:
    """AgentKernel options from the flags every command shares."""
    return {
        "kernel_name": args.kernel,
        "connection_file": args.connection_file,
        "server_url": args.server_url,
        "token": args.token,
        "kernel_id": args.kernel_id,
        "wall_budget": args.wall_budget,
        "quiet_budget": args.quiet_budget,
        "memory_budget": args.memory_budget,
        "interrupt_grace": args.interrupt_grace,
    }


def exec_main(argv: list[str] | None = None) -> int:
    """`cancelkernel exec [-c CODE | FILE] [--wall-budget S] [--quiet-budget S] [--kernel NAME] [--json]`."""
    args = _parse(_exec_parser(), argv)
    if isinstance(args, int):
        return args
    try:
        from ..agent.client import AgentKernel

        code = args.code if args.code is not None else _read_code(args.file)
        # One cell: a spare would start after it, for nothing
        ak = AgentKernel(log=args.log, spare=False, **_agent_options(args))
    except AgentError as exc:
        print(f"cancelkernel exec: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with ak:
            result = ak.run(code)
    except KernelStartError as exc:
        print(f"cancelkernel exec: {exc}", file=sys.stderr)
        return EXIT_KERNEL
    except AgentError as exc:
        print(f"cancelkernel exec: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(result.to_json(indent=1))
    else:
        print_result(result)
    return EXIT_OK if result.status == "ok" else EXIT_FAILED


def _read_code(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    if not os.path.isfile(path):
        raise BadInputError(f"{path!r} does not exist (give a file of code, '-' for standard input, or -c CODE)")
    with open(path, encoding="utf-8") as f:
        return f.read()


def print_result(result: CellResult, out: t.TextIO | None = None, err: t.TextIO | None = None) -> None:
    """Outputs as a terminal shows them, then a one-line report on stderr when the client intervened."""
    out = out or sys.stdout
    err = err or sys.stderr
    for o in result.outputs:
        kind = o.get("output_type")
        if kind == "stream":
            (err if o.get("name") == "stderr" else out).write(o.get("text", ""))
        elif kind in ("execute_result", "display_data"):
            text = o.get("data", {}).get("text/plain")
            if text is not None:
                out.write(text if text.endswith("\n") else text + "\n")
        elif kind == "error":
            err.write("\n".join(o.get("traceback") or [f"{o.get('ename')}: {o.get('evalue')}"]) + "\n")
    out.flush()
    if result.status != "ok":
        from ..agent.notebook import report_text

        err.write(report_text(result) if result.intervened else f"cancelkernel: {result.summary()}\n")
        err.flush()


def run_main(argv: list[str] | None = None) -> int:
    """`cancelkernel run NOTEBOOK... [-o OUT] [--jobs N] [--server-url URL]
    [budgets, --log, --checkpoint, --allow-errors]`."""
    args = _parse(_run_parser(), argv)
    if isinstance(args, int):
        return args
    from ..agent.batch import run_notebooks, summary_table

    several = len(args.notebooks) > 1
    try:
        from ..agent.client import AgentKernel

        root = checkpoint_root_env(
            args.checkpoint_root, server_url=args.server_url, connection_file=args.connection_file
        )
        options = {**_agent_options(args), **({"env": root} if root else {})}
        # Checks every option before anything starts
        AgentKernel(checkpoint=args.checkpoint, spare=args.spare, **options)
        outcomes = run_notebooks(
            args.notebooks,
            jobs=args.jobs,
            output=args.output,
            log=args.log,
            allow_errors=args.allow_errors,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
            checkpoint=args.checkpoint,
            spare=args.spare,
            **options,
        )
    except BadInputError as exc:
        print(f"cancelkernel run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if several:
        print(summary_table(outcomes), file=sys.stderr)
    else:
        outcome = outcomes[0]
        failed = outcome.run.failed(allow_errors=args.allow_errors)
        summary = f"{outcome.cells} cells run, {len(failed)} failed; wrote {outcome.output}"
        if outcome.run.stopped_at is not None:
            summary += f" (stopped after cell {outcome.run.stopped_at}; use --allow-errors to keep going)"
        print(f"cancelkernel run: {summary}", file=sys.stderr)
    if all(o.status == "not-started" for o in outcomes):
        return EXIT_KERNEL
    return EXIT_FAILED if any(o.status != "ok" for o in outcomes) else EXIT_OK


__all__ = ["exec_main", "print_result", "run_main"]
