"""Kernels behind a Jupyter Server or a kernel gateway: started, checked, restarted and stopped through REST.

`POST /api/kernels` starts one (or `kernel_id` adopts a running one),
`GET /api/kernels/{id}` says whether it still exists, `POST .../interrupt`
is the server's own interrupt (a SIGINT when the kernelspec says signal),
`POST .../restart` and `DELETE` restart and stop it.  Messages go over the
kernel's websocket (transport/websocket.py).  What a remote client cannot have
(the kernel's pid, its dump file, SIGUSR1, /proc) it never pretends to have.

A server that cannot be reached is not an answer: the kernel counts as alive
until the server says otherwise (404, or "dead"), and the websocket's own
reconnect bound ends a cell that waits on a link that does not come back.  A
restart waits for an unreachable server within the same bound
(transport/outage.py), then says so.
"""

from __future__ import annotations

import contextlib
import signal
import time
import typing as t
import urllib.parse

from ..errors import BadInputError, KernelStartError
from ..transport.outage import RECONNECT_WITHIN, Outage
from ..transport.websocket import WebsocketTransport
from .rest import RestClient

# A kernel's existence is asked of the server at most this often (the policy polls every 0.1 s).
ALIVE_EVERY = 1.0
# Seconds a started kernel may take to be listed as running.
START_TIMEOUT = 60.0


class ServerLifecycle:
    """One kernel on a server, owned (started here) or adopted (`kernel_id`)."""

    local = False  # its process is not on this host as far as the client knows
    manager = None  # no KernelManager of ours

    def __init__(
        self,
        server_url: str,
        token: str | None,
        *,
        kernel_name: str | None = None,
        kernel_id: str | None = None,
        owner_restart_wait: float = 5.0,
    ):
        self.rest = RestClient(server_url, token)
        self.server_url = self.rest.base
        self.token = token
        self.kernel_name = kernel_name or ""
        self.owned = kernel_id is None
        self._kernel_id = kernel_id or ""
        self.owner_restart_wait = owner_restart_wait
        self.transport: WebsocketTransport | None = None
        self.gone: str | None = None  # why the server no longer has the kernel, once known
        self.unreachable: str | None = None  # why the server did not answer the last question, if it did not
        self.reconnect_within = RECONNECT_WITHIN
        self._checked_at = 0.0
        self._alive = True
        self._interrupt_mode = "signal"
        self.last_restart: dict[str, t.Any] = {}

    @property
    def kernel_id(self) -> str:
        return self._kernel_id

    @property
    def pid(self) -> int | None:
        return None

    # -- start / adopt --

    def start(self) -> WebsocketTransport:
        self.rest.check_server()
        if self.owned:
            self._check_kernelspec()
            answer = self.rest.call(
                "POST", "/api/kernels", {"name": self.kernel_name}, expect=(200, 201), timeout=START_TIMEOUT
            )
            self._kernel_id = str(answer["id"])
        else:
            if not isinstance(self._kernel_id, str) or not self._kernel_id.strip():
                raise BadInputError(
                    f"kernel_id must be the id of a running kernel on the server, not {self._kernel_id!r}"
                )
            status, answer = self.rest.request("GET", self._kernel_path())
            if status == 404:
                raise BadInputError(
                    f"the server at {self.server_url} has no kernel {self._kernel_id!r} (see GET /api/kernels)"
                )
            if status != 200:
                self.rest.call("GET", self._kernel_path())  # raises the clear error for that status
            self.kernel_name = self.kernel_name or str(answer.get("name", ""))
        self._interrupt_mode = self._spec_interrupt_mode()
        return self._open_transport()

    def _open_transport(self) -> WebsocketTransport:
        """A new websocket to the kernel (closing the old one)."""
        if self.transport is not None:
            self.transport.close()
        self.transport = WebsocketTransport(
            self.rest.websocket_url(f"{self._kernel_path()}/channels"),
            self.token,
            reconnect_within=self.reconnect_within,
        )
        return self.transport

    def _kernel_path(self) -> str:
        return f"/api/kernels/{urllib.parse.quote(self._kernel_id, safe='')}"

    def _check_kernelspec(self) -> None:
        specs = self.rest.call("GET", "/api/kernelspecs")
        names = sorted((specs or {}).get("kernelspecs", {}))
        if self.kernel_name not in names:
            raise KernelStartError(
                f"the server at {self.server_url} has no kernelspec {self.kernel_name!r}; it has: "
                f"{', '.join(names) or 'none'}"
            )

    def _spec_interrupt_mode(self) -> str:
        try:
            status, spec = self.rest.request("GET", f"/api/kernelspecs/{urllib.parse.quote(self.kernel_name, safe='')}")
        except OSError:
            return "signal"
        if status != 200 or not isinstance(spec, dict):
            return "signal"
        return str((spec.get("spec") or {}).get("interrupt_mode") or "signal")

    # -- liveness and "signals" --

    def is_alive(self, *, for_start: bool = False) -> bool:
        """Does the server still have the kernel?  Asked at most every ALIVE_EVERY seconds;
        while the server cannot be reached, the last answer stands."""
        if self._known_gone():
            return False
        now = time.monotonic()
        if for_start or now - self._checked_at < ALIVE_EVERY:
            return self._alive
        self._checked_at = now
        answer = self._ask()
        if answer is not None:
            self._alive = answer
        return self._alive

    def _known_gone(self) -> bool:
        """Gone for good: the server said so, or the websocket found no kernel on reconnecting (404)."""
        transport = self.transport
        if self.gone is None and transport is not None and transport.gone is not None:
            self.gone, self._alive = transport.gone, False
        return self.gone is not None

    def _ask(self) -> bool | None:
        """GET the kernel: whether the server has it (and it is not dead); None when the server cannot be reached."""
        if self._known_gone():
            return False
        try:
            status, answer = self.rest.request("GET", self._kernel_path(), timeout=10)
        except OSError as exc:
            self.unreachable = f"the server at {self.server_url} does not answer ({getattr(exc, 'reason', exc)})"
            return None
        self.unreachable = None
        if status == 404:
            self.gone = "the server no longer has the kernel (it was deleted or culled, or the server restarted)"
        elif status == 200 and isinstance(answer, dict) and answer.get("execution_state") == "dead":
            self.gone = "the server says the kernel is dead"
        return self.gone is None

    def _exists(self, doing: str) -> bool:
        """Whether the server has the kernel, waiting for an unreachable server within reconnect_within seconds."""
        outage = Outage(time.monotonic(), self.reconnect_within)
        while (answer := self._ask()) is None:
            now = time.monotonic()
            outage.failed(self.unreachable or "", now)
            if outage.over(now):
                raise KernelStartError(
                    f"cannot {doing}: the server at {self.server_url} did not answer within "
                    f"{outage.within:g} s ({outage.text(now)}); the server or the network is down. "
                    "The next call tries again"
                )
            time.sleep(outage.wait(now))
        self._checked_at, self._alive = time.monotonic(), answer
        return answer

    def exit_code(self) -> int | None:
        return None  # the process is the server's

    def died_text(self, when: str) -> str:
        return f"kernel {self.kernel_name!r} on {self.server_url} died {when}" + (f": {self.gone}" if self.gone else "")

    def verify_pid(self, pid: int | None) -> None:
        """A pid the kernel advertises means nothing on this host: never used."""

    def signal(self, signum: int, pid: int | None = None) -> bool:
        """SIGINT is the server's interrupt (POST .../interrupt); no other signal crosses a server."""
        if signum != signal.SIGINT:
            return False
        try:
            status, _ = self.rest.request("POST", f"{self._kernel_path()}/interrupt", timeout=10)
        except OSError:
            return False
        return status in (200, 204)

    def outside_interrupt(self, pid: int | None) -> str | None:
        """Interrupt without the control channel: the server's own REST interrupt (a SIGINT with our kernelspec)."""
        return "rest" if self.signal(signal.SIGINT) else None

    def interrupt_mode(self) -> str:
        return self._interrupt_mode

    # -- restart / shutdown --

    def restart(self, *, dead: bool, old_pid: int | None, wait_for_owner: t.Callable[[float], bool]) -> None:
        """POST .../restart (same kernel id), then a new websocket; a kernel the server lost is started anew.

        The new websocket is for Enterprise Gateway: its restarted kernel is a new
        process (a new pod) with new ports, which a websocket opened before does not reach.

        dead: the kernel died; a server restarts it by itself, so first wait for that new kernel.
        """
        self._checked_at = 0.0
        self.last_restart = {"spare": False}
        if dead and self._exists("restart the kernel") and wait_for_owner(self.owner_restart_wait):
            return
        if self._exists("restart the kernel"):
            try:
                status, answer = self.rest.request("POST", f"{self._kernel_path()}/restart", timeout=START_TIMEOUT)
            except OSError as exc:
                raise KernelStartError(
                    f"the server at {self.server_url} stopped answering while it restarted kernel {self._kernel_id} "
                    f"({getattr(exc, 'reason', exc)}); the next call tries again"
                ) from exc
            if status == 200:
                self._open_transport()
                return
            if not self._gone_within(5.0):  # a 500 while the server is still deleting it, say
                raise KernelStartError(f"the server could not restart kernel {self._kernel_id}: {status} {answer}")
        if not self.kernel_name:
            raise KernelStartError(
                f"kernel {self._kernel_id} is gone from {self.server_url} and its kernelspec is unknown; "
                "start a new one"
            )
        answer = self.rest.call(
            "POST", "/api/kernels", {"name": self.kernel_name}, expect=(200, 201), timeout=START_TIMEOUT
        )
        self._kernel_id, self.owned, self.gone, self._alive = str(answer["id"]), True, None, True
        self.unreachable = None
        self._open_transport()

    def warm_spare(self, extra_arguments: list[str]) -> None:
        """No spare behind a server: its kernels are the server's to start."""

    def prepare_spare(self, *, again: bool) -> None:
        """No spare behind a server."""

    def _gone_within(self, seconds: float) -> bool:
        """Whether the server stops having the kernel within `seconds` (asked every 0.2 s)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._checked_at = 0.0
            if not self.is_alive():
                return True
            time.sleep(0.2)
        return False

    def shutdown(self, *, shutdown_connected: bool = False) -> None:
        """Close the websocket; delete a kernel started here (an adopted one only if asked).  Never raises."""
        transport, self.transport = self.transport, None
        if transport is not None:
            transport.close()
        if self._kernel_id and (self.owned or shutdown_connected) and self.gone is None:
            with contextlib.suppress(OSError):
                self.rest.request("DELETE", self._kernel_path(), timeout=30)
