"""Fixtures of the Enterprise Gateway tests: EG from its own cached venv, on loopback and with a second host.

- `gateway_env`: EG 3.3.0's venv and launchers (cancelkernel.testing.gateway_env), built on first
  use and cached in ~/.cache/cancelkernel; when it cannot be built (no package index) the tests fail
  saying so, or skip when CANCELKERNEL_SKIP_GATEWAY=1.
- `checks`: docs/enterprise-gateway/check_gateway.py, the operator's script, whose checks the tests run.
- `loopback`: EG on 127.0.0.1 whose DistributedProcessProxy starts kernels on this machine, with the
  kernelspecs `cancelkernel_eg` (interrupt_mode "message", as docs/enterprise-gateway/distributed/
  kernel.json) and `cancelkernel_eg_signal` ("signal").
- `remote`: the same, but EG starts the kernels over SSH on a second host (a network namespace with
  its own address, PIDs, host name and sshd: cancelkernel.testing.remote_host).
- `site`: each of the two in turn (a `Site`: the gateway, and how to find a kernel's processes).
Each is made once per module and stopped after it with every kernel it started, even on failure.
The kernels read docs/enterprise-gateway/ipython_kernel_config.py (IPYTHONDIR in the kernelspec's env)
and keep their checkpoints under one shared root, CANCELKERNEL_CHECKPOINT_ROOT.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import typing as t
from collections.abc import Iterator
from types import ModuleType

import pytest
from gateway_helpers import MESSAGE, SIGNAL, Site

from cancelkernel.testing.enterprise_gateway import KernelSpecChoice, enterprise_gateway, processes_mentioning
from cancelkernel.testing.gateway_env import SKIP_VARIABLE, GatewayEnv, GatewayEnvError, gateway_env
from cancelkernel.testing.remote_host import RemoteHostError, check_can_make, remote_host

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs")
EG_DOCS = os.path.join(DOCS, "enterprise-gateway")
TEMPLATE = os.path.join(EG_DOCS, "distributed", "kernel.json")


def _not_available(what: str) -> t.NoReturn:
    if os.environ.get(SKIP_VARIABLE) == "1":
        pytest.skip(f"{what} ({SKIP_VARIABLE}=1)")
    said = what if SKIP_VARIABLE in what else f"{what}; or set {SKIP_VARIABLE}=1 to skip the Enterprise Gateway tests"
    pytest.fail(said, pytrace=False)


@pytest.fixture(scope="session")
def gateway_venv() -> GatewayEnv:
    try:
        return gateway_env()
    except GatewayEnvError as exc:
        _not_available(str(exc))


@pytest.fixture(scope="session")
def checks() -> ModuleType:
    """The operator's script, loaded as a module (as tests/conftest.py loads examples/native/native_build.py)."""
    spec = importlib.util.spec_from_file_location("check_gateway", os.path.join(EG_DOCS, "check_gateway.py"))
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are made
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def kernel_settings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The kernelspecs' env: IPYTHONDIR with the docs' ipython_kernel_config.py, and the checkpoint root."""
    ipython_dir = tmp_path_factory.mktemp("eg-ipython")
    os.makedirs(ipython_dir / "profile_default")
    shutil.copy(os.path.join(EG_DOCS, "ipython_kernel_config.py"), ipython_dir / "profile_default")
    root = tmp_path_factory.mktemp("eg-checkpoints")
    return {"IPYTHONDIR": str(ipython_dir), "CANCELKERNEL_CHECKPOINT_ROOT": str(root)}


def _kernelspecs(settings: dict[str, str]) -> list[KernelSpecChoice]:
    return [KernelSpecChoice(MESSAGE, "message", settings), KernelSpecChoice(SIGNAL, "signal", settings)]


@pytest.fixture(scope="module")
def loopback(gateway_venv: GatewayEnv, kernel_settings: dict[str, str]) -> Iterator[Site]:
    with enterprise_gateway(gateway_venv, TEMPLATE, _kernelspecs(kernel_settings)) as gateway:
        yield Site("loopback", gateway, processes_mentioning)


@pytest.fixture(scope="module", params=["loopback", "remote"])
def site(request: pytest.FixtureRequest) -> Site:
    """Each of the two, the tests grouped by it (each EG is started once per module)."""
    return t.cast(Site, request.getfixturevalue(request.param))


@pytest.fixture(scope="module")
def remote(gateway_venv: GatewayEnv, kernel_settings: dict[str, str]) -> Iterator[Site]:
    try:
        check_can_make()
    except RemoteHostError as exc:
        _not_available(f"the second host: {exc}")
    with (
        remote_host() as host,
        enterprise_gateway(
            gateway_venv,
            TEMPLATE,
            _kernelspecs(kernel_settings),
            remote_hosts=host.address,
            response_ip=host.local_address,
            home=host.home,
        ) as gateway,
    ):
        yield Site("remote", gateway, host.processes_mentioning, host)
