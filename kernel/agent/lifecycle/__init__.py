"""Lifecycles: how a kernel is started, checked, signalled, restarted and shut down.

`local` covers kernels on this machine (jupyter_client's KernelManager, or a
connection file); `server` kernels behind a Jupyter Server or a kernel
gateway (REST).  A lifecycle hands the link a transport (transport/) and
never interprets messages beyond recognising a restarted kernel.
"""

from __future__ import annotations

import os
import typing as t

from ..errors import BadInputError

if t.TYPE_CHECKING:
    from ..transport import Transport


class Lifecycle(t.Protocol):
    """What the link needs of a lifecycle (LocalLifecycle and ServerLifecycle have it)."""

    kernel_name: str
    owned: bool
    owner_restart_wait: float
    last_restart: dict[str, t.Any]  # how the last restart went (spare or not, why, when the old kernel was gone)

    @property
    def kernel_id(self) -> str: ...

    @property
    def local(self) -> bool: ...

    @property
    def manager(self) -> t.Any: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def transport(self) -> Transport | None: ...

    def start(self) -> Transport: ...

    def is_alive(self, *, for_start: bool = False) -> bool: ...

    def exit_code(self) -> int | None: ...

    def died_text(self, when: str) -> str: ...

    def verify_pid(self, pid: int | None) -> None: ...

    def signal(self, signum: int, pid: int | None = None) -> bool: ...

    def outside_interrupt(self, pid: int | None) -> str | None: ...

    def interrupt_mode(self) -> str: ...

    def restart(self, *, dead: bool, old_pid: int | None, wait_for_owner: t.Callable[[float], bool]) -> None: ...

    def shutdown(self, *, shutdown_connected: bool = False) -> None: ...

    def warm_spare(self, extra_arguments: list[str]) -> None: ...

    def prepare_spare(self, *, again: bool) -> None: ...


def choose_lifecycle(
    kernel_name: str,
    connection_file: str | os.PathLike | None,
    server_url: str | None,
    token: str | None,
    kernel_id: str | None,
    extra_arguments: list[str] | None,
    env: dict[str, str] | None,
    owner_restart_wait: float,
    spare: bool = False,
    start_timeout: float = 60.0,
) -> Lifecycle:
    """A kernel behind a server (server_url), or on this host (started here, or by connection file)."""
    if server_url is not None:
        if connection_file is not None:
            raise BadInputError("give either server_url (a remote kernel) or connection_file (a local one), not both")
        if extra_arguments or env:
            raise BadInputError(
                "extra_arguments and env apply to kernels started here; "
                "a server starts its kernels from its own kernelspecs"
            )
        from .server import ServerLifecycle

        return ServerLifecycle(
            server_url,
            token if token is not None else os.environ.get("JUPYTER_TOKEN"),
            kernel_name=None if kernel_id is not None and kernel_name == "cancelkernel" else kernel_name,
            kernel_id=kernel_id,
            owner_restart_wait=owner_restart_wait,
        )
    if token is not None or kernel_id is not None:
        raise BadInputError("token and kernel_id need server_url (the Jupyter server the kernel runs behind)")
    from .local import LocalLifecycle

    return LocalLifecycle(
        None if connection_file is not None and kernel_name == "cancelkernel" else kernel_name,
        connection_file=connection_file,
        extra_arguments=extra_arguments,
        env=env,
        owner_restart_wait=owner_restart_wait,
        spare=spare,
        start_timeout=start_timeout,
    )
