"""Fixtures of the integration tests: a real kernel of each exec mode, fresh for one test or shared by a module.

- `mode`: each exec mode of our kernel ("main", "worker").
- `kernel`: (km, kc) of a kernel of `mode`; `kc`: its client.  Fresh for each
  test and stopped after it, even on failure.
- `@pytest.mark.kernel_options(*extra_arguments, setup=..., shared=...,
  own_ipython_dir=...)` on a test, a class or a module (`pytestmark`) says
  which kernel: its command-line arguments, a cell it runs once it answers,
  one IPYTHONDIR of its own (a history nobody else writes), and `shared`: one
  kernel per mode for the whole module, replaced if a test left it unhealthy,
  drained of earlier tests' messages before each test.  The closest marker
  wins whole (a test's marker replaces its module's, it does not add to it).

Helpers the tests call are in helpers.py; `cancelkernel.testing` has the
kernels, messages and waits the benchmarks and the demo use too.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from cancelkernel.testing import MODES, drain, execute, running_kernel

Pair = tuple[KernelManager, BlockingKernelClient]


@dataclasses.dataclass(frozen=True)
class KernelOptions:
    """Which kernel the `kernel` fixture starts (from the closest `kernel_options` marker)."""

    extra_arguments: tuple[str, ...] = ()
    setup: str = ""  # a cell run once the kernel answers (the imports the tests need)
    shared: bool = False  # one kernel per mode for the module's tests, instead of one per test
    # An IPYTHONDIR of its own: its history is its own, and its exit waits on no other kernel's lock
    own_ipython_dir: bool = False


def options_of(node: pytest.Item | pytest.Collector) -> KernelOptions:
    marker = node.get_closest_marker("kernel_options")
    return KernelOptions(tuple(marker.args), **marker.kwargs) if marker is not None else KernelOptions()


@contextlib.contextmanager
def started(mode: str, options: KernelOptions, scratch: pytest.TempPathFactory) -> Iterator[Pair]:
    """A kernel of `mode` as `options` say, always shut down."""
    env = {"IPYTHONDIR": str(scratch.mktemp("ipython"))} if options.own_ipython_dir else None
    with running_kernel(mode, extra_arguments=list(options.extra_arguments), env=env) as (km, kc):
        if options.setup:
            assert execute(kc, options.setup)["content"]["status"] == "ok"
        yield km, kc


class KernelPool:
    """The shared kernels of one module: one per (mode, options), started on first use,
    replaced if a test left it unhealthy."""

    def __init__(self, scratch: pytest.TempPathFactory) -> None:
        self._scratch = scratch
        self._stack = contextlib.ExitStack()
        self._kernels: dict[
            tuple[str, KernelOptions], tuple[KernelManager, BlockingKernelClient, contextlib.ExitStack]
        ] = {}

    def get(self, mode: str, options: KernelOptions) -> Pair:
        entry = self._kernels.get((mode, options))
        if entry is not None and not self._healthy(entry[0], entry[1]):
            entry[2].close()
            entry = None
        if entry is None:
            stack = contextlib.ExitStack()
            self._stack.callback(stack.close)
            km, kc = stack.enter_context(started(mode, options, self._scratch))
            entry = self._kernels[(mode, options)] = (km, kc, stack)
        km, kc, _ = entry
        drain(kc)  # leftovers of the previous test (stdin requests, late iopub) must not confuse this one
        return km, kc

    @staticmethod
    def _healthy(km: KernelManager, kc: BlockingKernelClient) -> bool:
        try:  # store_history=False: the check is neither a cell of the history nor an execution count
            return bool(
                km.is_alive() and execute(kc, "1", timeout=10, store_history=False)["content"]["status"] == "ok"
            )
        except Exception:  # noqa: BLE001 - any failure means "start a fresh one"
            return False

    def close(self) -> None:
        self._stack.close()


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def kernel_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelPool]:
    pool = KernelPool(tmp_path_factory)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def kernel(
    mode: str, request: pytest.FixtureRequest, kernel_pool: KernelPool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pair]:
    """(km, kc) of a kernel of `mode`: the test's own, or the module's shared one (the `kernel_options` marker)."""
    options = options_of(request.node)
    if options.shared:
        yield kernel_pool.get(mode, options)
        return
    with started(mode, options, tmp_path_factory) as pair:
        yield pair


@pytest.fixture
def kc(kernel: Pair) -> BlockingKernelClient:
    return kernel[1]
