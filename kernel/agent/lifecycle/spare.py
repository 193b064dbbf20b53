"""A warm spare kernel: started in the background, kept idle, swapped in when a restart is needed.

Starting a kernel process is most of a restart (about 0.8 s here); a spare
started ahead of time turns the restart into kill + swap.  The spare is
launched exactly as the kernel it would replace (kernelspec, arguments,
environment, working directory), so it is the same kernel, only younger.
It costs one idle kernel's memory (53 MB RSS for ours, measured) while it waits.
"""

from __future__ import annotations

import contextlib
import threading
import typing as t

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from ... import protocol
from ...pids import forget_reused_group, kill_child_group
from ..threads import start_thread

Launch = t.Callable[[], "tuple[KernelManager, BlockingKernelClient]"]


class SpareKernel:
    """One kernel being started (or ready) in the background, not yet used by anyone."""

    def __init__(self, launch: Launch, *, ready_timeout: float):
        self._launch = launch
        self.ready_timeout = ready_timeout
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._given = False  # taken or discarded: a launch that finishes late is stopped, not kept
        self.km: KernelManager | None = None
        self.client: BlockingKernelClient | None = None
        self.error: str | None = None
        # A checkpoint_request to send once the spare is ready (and again after each save)
        self._prepare: dict | None = None
        self._thread = start_thread(self._start, name="cancelkernel-spare")

    def _start(self) -> None:
        km: KernelManager | None = None
        client: BlockingKernelClient | None = None
        try:
            km, client = self._launch()
            client.wait_for_ready(timeout=self.ready_timeout)
        except Exception as exc:  # noqa: BLE001 - reported by take(): the restart then goes cold, with a note
            self.error = f"{type(exc).__name__}: {exc}".strip()
            _release(client, km)
        else:
            with self._lock:
                if self._given:
                    _release(client, km)
                else:
                    self.km, self.client = km, client
                    if self._prepare is not None:
                        _send(client, self._prepare)
        finally:
            self._done.set()

    @property
    def ready(self) -> bool:
        return self._done.is_set() and self.km is not None

    def alive(self) -> bool:
        km = self.km
        with contextlib.suppress(Exception):
            return km is not None and bool(km.is_alive())
        return False

    def take(self, wait: float) -> tuple[KernelManager, BlockingKernelClient] | None:
        """The spare, if it is (or within `wait` seconds becomes) ready and is still alive; it stops being a spare.

        A spare still starting is waited for: it is ahead of a cold start that would begin now.
        """
        self._done.wait(wait)
        with self._lock:
            self._given = True
            km, client = self.km, self.client
            self.km = self.client = None
        if km is None or client is None:
            if self.error is None:
                self.error = f"it was not ready within {wait:g} s"
            return None
        with contextlib.suppress(Exception):
            if km.is_alive():
                return km, client
        self.error = "it had died while it waited"
        _release(client, km)
        return None

    def discard(self) -> None:
        """Stop the spare (waiting for a launch in progress, so no process is left behind)."""
        with self._lock:
            self._given = True
            km, client = self.km, self.client
            self.km = self.client = None
        _release(client, km)
        self._thread.join(self.ready_timeout + 10)

    @property
    def prepare_requested(self) -> bool:
        return self._prepare is not None

    def request_prepare(self, content: dict) -> None:
        """Have the idle spare import a checkpoint's modules: now if it is ready, else as soon as it is
        (never waits for the answer)."""
        with self._lock:
            self._prepare = content
            if self.client is not None and not self._given:
                _send(self.client, content)


def _send(client: BlockingKernelClient, content: dict) -> None:
    client.shell_channel.send(client.session.msg(protocol.CHECKPOINT_REQUEST, content))


def _release(client: BlockingKernelClient | None, km: KernelManager | None) -> None:
    if client is not None:
        with contextlib.suppress(Exception):
            client.stop_channels()
    if km is not None:
        retire(km)


def stop_kernel(km: KernelManager) -> None:
    """Shut the kernel down (killing it if it does not go); never raises."""
    forget_reused_group(km)
    with contextlib.suppress(Exception):
        km.shutdown_kernel(now=not km.is_alive())
    if km.has_kernel:
        with contextlib.suppress(Exception):
            km.kill_kernel()  # type: ignore[attr-defined]  # jupyter_client's run_sync wrapper


def kill_group(km: KernelManager) -> None:
    """SIGKILL the kernel and what it started (its process group), at once: it is being replaced."""
    provisioner = km.provisioner
    process = getattr(provisioner, "process", None)
    if process is None:  # a provisioner of another kind: its own kill
        with contextlib.suppress(Exception):
            km.kill_kernel()  # type: ignore[attr-defined]  # jupyter_client's run_sync wrapper
        return
    kill_child_group(process, getattr(provisioner, "pgid", None))


def retire(km: KernelManager) -> None:
    """Reap a replaced kernel and remove its connection file (off the restart's critical path)."""
    stop_kernel(km)
    with contextlib.suppress(Exception):
        km.cleanup_resources()
