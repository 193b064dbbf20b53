"""Fixtures shared by every test: our kernelspecs in a private prefix, and kernels of both exec modes.

The kernelspecs under test are installed into a temporary prefix for the
session (JUPYTER_PATH points at it), so the tests never depend on, or change,
what the machine has installed.  Helpers that drive kernels live in
`cancelkernel.testing` (shared with the benchmarks and the demo).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from cancelkernel.testing import MODES, private_kernelspecs, running_kernel, shutdown_all


@pytest.fixture(scope="session", autouse=True)
def kernelspecs() -> Iterator[str]:
    with private_kernelspecs() as prefix:
        yield prefix
    shutdown_all()  # whatever a failed test left behind


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def kernel(mode: str) -> Iterator[tuple[KernelManager, BlockingKernelClient]]:
    with running_kernel(mode) as pair:
        yield pair


@pytest.fixture(scope="session")
def python() -> str:
    return sys.executable
