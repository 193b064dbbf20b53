"""Fixtures shared by every test: our kernelspecs in a private prefix, an IPYTHONDIR of each test process's own,
and the native examples built once.

The kernelspecs under test are installed into a temporary prefix for the
session (JUPYTER_PATH points at it), so the tests never depend on, or change,
what the machine has installed.  Helpers that drive kernels live in
`cancelkernel.testing` (shared with the benchmarks and the demo); the kernel
fixtures of the integration tests are in tests/integration/conftest.py.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from types import ModuleType

import pytest

from cancelkernel.testing import private_kernelspecs, shutdown_all

NATIVE_EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "native")


@pytest.fixture(scope="session", autouse=True)
def ipython_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An IPYTHONDIR of this test process's own for every kernel it starts (tests may give theirs one).

    The kernels of parallel test processes would otherwise share the user's
    history database: under a CPU hog one waited past sqlite's lock timeout and
    IPython's history thread printed its error into a cell's output.
    """
    path = str(tmp_path_factory.mktemp("ipython"))
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("IPYTHONDIR", path)
        yield path


@pytest.fixture(scope="session", autouse=True)
def kernelspecs() -> Iterator[str]:
    with private_kernelspecs() as prefix:
        yield prefix
    shutdown_all()  # whatever a failed test left behind


@pytest.fixture(scope="session")
def native_build() -> ModuleType:
    """examples/native/native_build.py: builds Cython and C extensions against the installed package,
    as a third party does."""
    spec = importlib.util.spec_from_file_location("native_build", os.path.join(NATIVE_EXAMPLES, "native_build.py"))
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def example_dir(native_build: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> str:
    """examples/native/montecarlo.pyx built once for the session: the directory a cell puts on sys.path to import it."""
    return str(native_build.build_montecarlo(str(tmp_path_factory.mktemp("montecarlo"))))
