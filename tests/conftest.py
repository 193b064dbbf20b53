"""Shared fixtures: real kernels through jupyter_client, always shut down.

The kernelspecs under test are installed into a private prefix for the test
session (JUPYTER_PATH points at it), so the tests never depend on, or change,
what the machine has installed.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

# Generous bounds: they only stop a broken kernel from hanging the suite.
START_TIMEOUT = 60
REPLY_TIMEOUT = 30

_PREFIX = tempfile.mkdtemp(prefix="cancelkernel-test-spec-")


def _install_specs() -> None:
    from cancelkernel.install import install

    install(prefix=_PREFIX, name="cancelkernel")
    install(prefix=_PREFIX, name="cancelkernel-worker", exec_thread="worker")
    path = os.path.join(_PREFIX, "share", "jupyter")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [path, os.environ.get("JUPYTER_PATH")]))


_install_specs()

MODES = ["main", "worker"]


@contextlib.contextmanager
def running_kernel(
    mode: str | None = "main", *, kernel_name: str = "cancelkernel", extra_arguments: list[str] | None = None, env: dict | None = None
) -> Iterator[tuple[KernelManager, BlockingKernelClient]]:
    """Start a real kernel, wait until it answers, and always shut it down."""
    args = list(extra_arguments or [])
    if mode is not None and kernel_name.startswith("cancelkernel"):
        args.append(f"--CancelKernel.exec_thread={mode}")
    km = KernelManager(kernel_name=kernel_name)
    kwargs: dict[str, Any] = {"extra_arguments": args}
    if env is not None:
        kwargs["env"] = {**os.environ, **env}
    km.start_kernel(**kwargs)
    kc = km.client()
    try:
        kc.start_channels()
        kc.wait_for_ready(timeout=START_TIMEOUT)
        yield km, kc
    finally:
        with contextlib.suppress(Exception):
            kc.stop_channels()
        with contextlib.suppress(Exception):
            km.shutdown_kernel(now=True)
        if km.has_kernel:
            with contextlib.suppress(Exception):
                km.kill_kernel()


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def kernel(mode: str) -> Iterator[tuple[KernelManager, BlockingKernelClient]]:
    with running_kernel(mode) as pair:
        yield pair


def execute(kc: BlockingKernelClient, code: str, *, timeout: float = REPLY_TIMEOUT, **kwargs: Any) -> dict:
    """Run code, return its execute_reply (collecting nothing else)."""
    msg_id = kc.execute(code, **kwargs)
    return wait_reply(kc, msg_id, timeout=timeout)


def wait_reply(kc: BlockingKernelClient, msg_id: str, *, timeout: float = REPLY_TIMEOUT) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no execute_reply for {msg_id} within {timeout} s")
        msg = kc.get_shell_msg(timeout=left)
        if msg["parent_header"].get("msg_id") == msg_id:
            return msg


def outputs(kc: BlockingKernelClient, msg_id: str, *, timeout: float = REPLY_TIMEOUT) -> list[dict]:
    """iopub messages of one request, until its idle status."""
    found = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return found
        found.append(msg)
    raise TimeoutError(f"no idle status for {msg_id} within {timeout} s")


def send_execute(kc: BlockingKernelClient, code: str, *, metadata: dict | None = None, stop_on_error: bool = False) -> str:
    """Send an execute_request (with request metadata, which kc.execute cannot set); return its msg_id."""
    msg = kc.session.msg(
        "execute_request",
        {"code": code, "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False, "stop_on_error": stop_on_error},
        metadata=metadata or {},
    )
    kc.shell_channel.send(msg)
    return msg["header"]["msg_id"]


def run_cell(kc: BlockingKernelClient, code: str, *, metadata: dict | None = None, timeout: float = REPLY_TIMEOUT) -> tuple[dict, list[dict]]:
    """Execute and collect (execute_reply, the request's iopub messages)."""
    msg_id = send_execute(kc, code, metadata=metadata)
    found = outputs(kc, msg_id, timeout=timeout)
    return wait_reply(kc, msg_id, timeout=timeout), found


def drain(kc: BlockingKernelClient) -> None:
    """Drop whatever earlier requests left on every channel (late iopub, stdin requests)."""
    for channel in (kc.iopub_channel, kc.shell_channel, kc.stdin_channel, kc.control_channel):
        while True:
            try:
                channel.get_msg(timeout=0)
            except queue.Empty:
                break


def control_request(kc: BlockingKernelClient, msg_type: str, content: dict | None = None, *, timeout: float = REPLY_TIMEOUT) -> dict:
    """Send a request on the control channel and return its reply."""
    msg = kc.session.msg(msg_type, content or {})
    kc.control_channel.send(msg)
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no reply to {msg_type} within {timeout} s")
        try:
            reply = kc.control_channel.get_msg(timeout=left)
        except queue.Empty:
            raise TimeoutError(f"no reply to {msg_type} within {timeout} s") from None
        if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
            return reply


def interrupt(kc: BlockingKernelClient, target: str | None = None, *, timeout: float = REPLY_TIMEOUT) -> dict:
    """Send interrupt_request (targeted if `target`), return the interrupt_reply content."""
    return control_request(kc, "interrupt_request", {"target": target} if target else {}, timeout=timeout)["content"]


@pytest.fixture(scope="session")
def python() -> str:
    return sys.executable
