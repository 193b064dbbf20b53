"""A pytest plugin that declares `--cov` (unset), which ipykernel's subshell tests read;
pytest-cov is not needed for them."""

from __future__ import annotations

import typing as t


def pytest_addoption(parser: t.Any) -> None:
    parser.addoption(
        "--cov", action="append", default=None, help="declared for ipykernel's tests; coverage is not measured here"
    )
