"""The kernel's checkpoint interface, seen from the client: save, restore, list, drop.

Only used when the kernel advertises the checkpoint feature in kernel_info
(our kernel): a `checkpoint_request` on the shell channel, answered by
`checkpoint_reply`.  Stock kernels have no checkpoints: state is lost on restart.
"""

from __future__ import annotations

import os
import typing as t
import warnings

from .. import protocol
from .errors import CheckpointError
from .link import KernelInfo, KernelLink, SavedCheckpoint
from .policy import Restored

MODES = protocol.CHECKPOINT_MODES


class Checkpoints:
    """Checkpoint requests to one kernel."""

    def __init__(self, link: KernelLink, *, timeout: float = 300.0):
        self.link = link
        self.timeout = timeout
        self.saves = 0  # saves made by this client since it started
        self._warned = False

    def auto_save(self, mode: str, when: str) -> None:
        """The AgentKernel's checkpoint=mode save; a kernel without checkpoints or a failed save is warned
        about, never raised."""
        if not self.available:
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"checkpoint={mode!r}: kernel {self.link.kernel_name!r} has no checkpoint interface; "
                    "state will be lost on a restart",
                    RuntimeWarning,
                    stacklevel=4,
                )
            return
        try:
            saved = self.save(None)
            self.link.checkpoint_saved(saved.get("name"))
        except Exception as exc:  # noqa: BLE001 - a failed save must not stop the cell; it is reported
            warnings.warn(f"checkpoint save {when} failed: {exc}", RuntimeWarning, stacklevel=4)

    @property
    def available(self) -> bool:
        return self.link.info.has(protocol.FEATURE_CHECKPOINT)

    def request(self, action: str, name: str | None = None) -> dict[str, t.Any]:
        if not self.available:
            raise CheckpointError(
                f"kernel {self.link.kernel_name!r} has no checkpoint interface (it does not advertise "
                f"{protocol.FEATURE_CHECKPOINT!r} in kernel_info); use the cancelkernel kernel, "
                "or keep state in files yourself"
            )
        if name is not None and (not isinstance(name, str) or not name or "/" in name or "\\" in name or ".." in name):
            raise CheckpointError(
                f"checkpoint name must be a plain non-empty name (no path separators or '..'), not {name!r}"
            )
        content: dict[str, t.Any] = {"action": action}
        if name is not None:
            content["name"] = name
        reply = self.link.shell_request(
            protocol.CHECKPOINT_REQUEST, content, timeout=self.timeout, reply_type=protocol.CHECKPOINT_REPLY
        )
        if reply is None:
            raise CheckpointError(
                f"checkpoint {action} got no reply within {self.timeout:g} s (kernel busy, wedged or gone)"
            )
        body = reply.get("content") or {}
        if body.get("status") != "ok":
            ename = str(body.get("ename", "Error"))
            raise CheckpointError(
                f"checkpoint {action} failed in the kernel: {ename}: {body.get('evalue', body)}", ename=ename
            )
        return body

    def save(self, name: str | None = None) -> dict[str, t.Any]:
        body = _save_reply_today(self.request("save", name))
        self.saves += 1
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
        """After a restart: the latest checkpoint if there is one; never raises.

        Nothing restored is news (`missing`) when a checkpoint was saved before the restart, or when the kernel
        refused or failed to load one: the note then says which checkpoint, where it was looked for, and why.
        """
        if not self.available:
            return Restored(note=f"kernel {self.link.kernel_name!r} has no checkpoints")
        try:
            return self.restore(None)
        except CheckpointError as exc:
            saved = self.link.saved
            if saved is not None:
                return Restored(note=lost_reason(saved, self.link.info, exc), missing=True)
            return Restored(note=str(exc), missing=exc.ename != NOT_FOUND)


# The kernel's name for "no such checkpoint here" (cancelkernel.checkpoint.CheckpointNotFound).
NOT_FOUND = "CheckpointNotFound"


def lost_reason(saved: SavedCheckpoint, now: KernelInfo, error: CheckpointError) -> str:
    """Why the kernel that replaced another did not restore `saved`: which checkpoint, where it was looked for,
    and the likely cause (another directory, another host without a shared root, files gone)."""
    on = f" on host {saved.host}" if saved.host else ""
    head = f"checkpoint {saved.name!r} (saved in {saved.directory}{on}) was not restored by the new kernel"
    if now.host and now.host != saved.host:
        head += f" on host {now.host}"
    if error.ename != NOT_FOUND:
        return f"{head}: {error}"
    looked = now.checkpoint_dir
    if looked and saved.directory and os.path.normpath(looked) != os.path.normpath(saved.directory):
        if os.path.dirname(os.path.normpath(looked)) == os.path.dirname(os.path.normpath(saved.directory)):
            fix = (
                "the same root, another key: without a KERNEL_ID the key is the connection file's name, which "
                f"changed; give the kernel a {protocol.KERNEL_ID_ENV} that stays the same across restarts "
                "(Enterprise Gateway sets one), or set CheckpointSettings.directory"
            )
        else:
            fix = (
                f"another checkpoint root: give every kernel the same one ({protocol.CHECKPOINT_ROOT_ENV} or "
                "CheckpointSettings.root), on a filesystem they all mount"
            )
        return f"{head}: it looked in {looked}, another directory ({fix}; docs/checkpoints.md)"
    if saved.host and now.host and now.host != saved.host:
        shared = now.checkpoint_root or saved.directory
        return (
            f"{head}: {saved.path} is not there on {now.host}, so {shared} is not shared between {saved.host} and "
            f"{now.host} (or not mounted on {now.host}); put the checkpoint root on a filesystem every kernel host "
            "mounts (an NFS export, a ReadWriteMany volume; docs/checkpoints.md)"
        )
    return (
        f"{head}: it looked for {saved.path}, which is not there any more (removed or moved since the save, or "
        "another filesystem is mounted there now)"
    )


def _save_reply_today(body: dict[str, t.Any]) -> dict[str, t.Any]:
    """A save's reply in today's shape, whichever of our kernels sent it (docs/protocol.md, "Checkpoints").

    Our kernels before `saved` meant the time of the save everywhere sent the
    names saved as `saved`: they move to `saved_names`, their count to `names`.
    """
    names = body.get("saved")
    if not isinstance(names, list):
        return body
    today = {key: value for key, value in body.items() if key != "saved"}
    today.setdefault("saved_names", names)
    today.setdefault("names", len(names))
    return today
