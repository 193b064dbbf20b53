"""Command-line options the subcommands share: the option types, and the parser of the agent commands.

Durations and sizes go through their one grammar each; `AgentParser` declares
once the flags that `cancelkernel exec`, `run` and `mcp` have in common.
"""

from __future__ import annotations

import argparse
import os
import typing as t
from collections.abc import Callable

from .. import protocol
from ..agent.errors import BadInputError
from ..durations import DurationError, parse_duration
from ..sizes import SizeError, parse_size


def duration_arg(what: str, *, allow_auto: bool = False) -> Callable[[str], float | str]:
    """An argparse `type=` for a duration flag (and 'auto' where allowed); 0 means off."""

    def parse(text: str) -> float | str:
        if allow_auto and text == "auto":
            return "auto"
        try:
            return parse_duration(text, what)
        except DurationError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def size_arg(what: str) -> Callable[[str], int]:
    """An argparse `type=` for a size flag (512M, 2G, bytes); 0 means off."""

    def parse(text: str) -> int:
        try:
            return parse_size(text, what)
        except SizeError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


class AgentParser(argparse.ArgumentParser):
    """The parser of `cancelkernel exec`, `run` and `mcp`: the flags they share, and errors that do not exit.

    A bad option raises BadInputError ("cancelkernel run: argument --jobs: ..."): the command
    prints it with a pointer to its --help and returns exit code 2, nothing started.  A shared
    flag's name, type, metavar and default are declared here once; its help is the command's
    own words for what the flag does there.
    """

    def error(self, message: str) -> t.NoReturn:
        raise BadInputError(f"{self.prog}: {message}")

    def add_budgets(
        self, wall: str, quiet: str, *, defaults: tuple[float | None, float | None] = (None, None), auto: bool = False
    ) -> None:
        """--wall-budget and --quiet-budget S (help `wall`, `quiet`); auto: the wall budget may be 'auto'."""
        self.add_argument(
            "--wall-budget",
            type=duration_arg("--wall-budget", allow_auto=auto),
            default=defaults[0],
            metavar="S",
            help=wall,
        )
        self.add_argument(
            "--quiet-budget", type=duration_arg("--quiet-budget"), default=defaults[1], metavar="S", help=quiet
        )

    def add_kernel(self, help: str) -> None:
        """--kernel NAME: the kernelspec, cancelkernel unless said."""
        self.add_argument("--kernel", default="cancelkernel", metavar="NAME", help=help)

    def add_server(self, help: str) -> None:
        """--server-url URL (help `help`) and --token T: kernels behind a Jupyter Server or a kernel gateway."""
        self.add_argument("--server-url", default=None, metavar="URL", help=help)
        self.add_argument("--token", default=None, metavar="T", help="the server's token (default: $JUPYTER_TOKEN)")

    def add_interrupt_grace(self, help: str) -> None:
        """--interrupt-grace S: how long an interrupted cell gets to stop."""
        self.add_argument(
            "--interrupt-grace", type=duration_arg("--interrupt-grace"), default=None, metavar="S", help=help
        )

    def add_checkpoint(self) -> None:
        """--checkpoint MODE: automatic checkpoints, off unless said."""
        self.add_argument(
            "--checkpoint",
            choices=protocol.CHECKPOINT_MODES,
            default="off",
            help="automatic checkpoints (default: %(default)s)",
        )

    def add_checkpoint_root(self) -> None:
        """--checkpoint-root DIR: where the kernels started here keep their checkpoints."""
        self.add_argument(
            "--checkpoint-root",
            default=None,
            metavar="DIR",
            help=(
                "the kernels started here keep their checkpoints in DIR/<kernel> (sets "
                f"${protocol.CHECKPOINT_ROOT_ENV} for them; default: theirs, else the Jupyter runtime dir)"
            ),
        )

    def add_log(self, help: str) -> None:
        """--log FILE: the intervention log."""
        self.add_argument("--log", default=None, metavar="FILE", help=help)

    def add_no_spare(self, help: str) -> None:
        """--no-spare: no warm spare kernel (`spare` is False)."""
        self.add_argument("--no-spare", dest="spare", action="store_false", help=help)


def checkpoint_root_env(root: str | None, *, server_url: str | None, connection_file: str | None) -> dict[str, str]:
    """The environment that gives the kernels started here `root` as their checkpoint root (empty: none given)."""
    if root is None:
        return {}
    if server_url is not None or connection_file is not None:
        raise BadInputError(
            "--checkpoint-root applies to kernels started here; a kernel behind a server or one already running "
            f"takes its root from its own kernelspec ({protocol.CHECKPOINT_ROOT_ENV} in its env, or "
            "`cancelkernel install --checkpoint-root`; docs/checkpoints.md)"
        )
    if not root:
        raise BadInputError("--checkpoint-root needs a directory")
    return {protocol.CHECKPOINT_ROOT_ENV: os.path.abspath(os.path.expanduser(root))}
