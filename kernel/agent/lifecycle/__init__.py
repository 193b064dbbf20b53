"""Lifecycles: how a kernel is started, checked, signalled, restarted and shut down.

`local` covers kernels on this machine (jupyter_client's KernelManager, or a
connection file); `server` kernels behind a Jupyter Server or a kernel
gateway (REST).  A lifecycle hands the link a transport (transport/) and
never interprets messages beyond recognising a restarted kernel.
"""

from __future__ import annotations

import typing as t

if t.TYPE_CHECKING:
    from ..transport import Transport


class Lifecycle(t.Protocol):
    """What the link needs of a lifecycle (LocalLifecycle and ServerLifecycle have it)."""

    kernel_name: str
    owned: bool
    owner_restart_wait: float

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
