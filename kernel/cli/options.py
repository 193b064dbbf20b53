"""Command-line option types shared by every subcommand (durations and sizes through their one grammar each)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

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
