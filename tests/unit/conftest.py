"""Fixtures of the unit tests: both implementations of the native flag."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import ModuleType

import pytest

from cancelkernel.native import _fallback


@pytest.fixture(params=["native", "fallback"])
def flag(request: pytest.FixtureRequest) -> Iterator[ModuleType]:
    """The compiled flag and the pure-Python one, each left idle before and after the test."""
    module = importlib.import_module("cancelkernel.native._flag") if request.param == "native" else _fallback
    module.end(module.running_gen())
    yield module
    module.end(module.running_gen())
