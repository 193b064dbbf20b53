"""The kernel's checkpoint interface, seen from the client: save, restore, list, drop.

Only used when the kernel advertises the checkpoint feature in kernel_info
(our kernel): a `checkpoint_request` on the shell channel, answered by
`checkpoint_reply`.  Stock kernels have no checkpoints: state is lost on restart.
"""

from __future__ import annotations

import typing as t
import warnings

from .. import protocol
from .errors import CheckpointError
from .link import KernelLink
from .policy import Restored

MODES = protocol.CHECKPOINT_MODES


class Checkpoints:
    """Checkpoint requests to one kernel."""

    def __init__(self, link: KernelLink, *, timeout: float = 300.0):
        self.link = link
        self.timeout = timeout
        self.saved = 0  # saves made by this client since it started
        self._warned = False

    def auto_save(self, mode: str, when: str) -> None:
        """The AgentKernel's checkpoint=mode save; a kernel without checkpoints or a failed save is warned about, never raised."""
        if not self.available:
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"checkpoint={mode!r}: kernel {self.link.kernel_name!r} has no checkpoint interface; state will be lost on a restart",
                    RuntimeWarning,
                    stacklevel=4,
                )
            return
        try:
            self.save(None)
            self.link.checkpoint_saved()
        except Exception as exc:  # noqa: BLE001 - a failed save must not stop the cell; it is reported
            warnings.warn(f"checkpoint save {when} failed: {exc}", RuntimeWarning, stacklevel=4)

    @property
    def available(self) -> bool:
        return self.link.info.has(protocol.FEATURE_CHECKPOINT)

    def request(self, action: str, name: str | None = None) -> dict[str, t.Any]:
        if not self.available:
            raise CheckpointError(
                f"kernel {self.link.kernel_name!r} has no checkpoint interface (it does not advertise "
                f"{protocol.FEATURE_CHECKPOINT!r} in kernel_info); use the cancelkernel kernel, or keep state in files yourself"
            )
        if name is not None and (not isinstance(name, str) or not name or "/" in name or "\\" in name or ".." in name):
            raise CheckpointError(f"checkpoint name must be a plain non-empty name (no path separators or '..'), not {name!r}")
        content: dict[str, t.Any] = {"action": action}
        if name is not None:
            content["name"] = name
        reply = self.link.shell_request(protocol.CHECKPOINT_REQUEST, content, timeout=self.timeout, reply_type=protocol.CHECKPOINT_REPLY)
        if reply is None:
            raise CheckpointError(
                f"checkpoint {action} got no reply within {self.timeout:g} s (kernel busy, wedged or gone)"
            )
        body = reply.get("content") or {}
        if body.get("status") != "ok":
            raise CheckpointError(f"checkpoint {action} failed in the kernel: {body.get('ename', 'Error')}: {body.get('evalue', body)}")
        return body

    def save(self, name: str | None = None) -> dict[str, t.Any]:
        body = self.request("save", name)
        self.saved += 1
        return body

    def restore(self, name: str | None = None) -> Restored:
        body = self.request("restore", name)
        return Restored(
            state="restored",
            names=[str(n) for n in body.get("restored") or []],
            skipped=list(body.get("skipped") or []),
            checkpoint=body.get("name") or name,
        )

    def list(self) -> list[dict[str, t.Any]]:
        return list(self.request("list").get("checkpoints") or [])

    def drop(self, name: str) -> dict[str, t.Any]:
        return self.request("drop", name)

    def restore_latest(self) -> Restored:
        """After a restart: the latest checkpoint if there is one; never raises."""
        if not self.available:
            return Restored(note=f"kernel {self.link.kernel_name!r} has no checkpoints")
        try:
            return self.restore(None)
        except CheckpointError as exc:
            return Restored(note=str(exc))
