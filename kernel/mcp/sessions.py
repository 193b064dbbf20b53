"""Kernels by id, for one MCP server: started on demand, one cell at a time each, all shut down at exit.

The default kernel (id "default") starts on the first `execute` without a
kernel_id; `start_kernel` adds others ("k1", "k2", ...).  Each is an
`AgentKernel`: the policy, the watch and the checkpoints are the agent
client's, used through its public API.  Every call here blocks (a kernel
starts in seconds): the tools run them on worker threads.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import signal
import threading
import time
import typing as t

from ..agent.client import AgentKernel
from ..agent.errors import BadInputError
from ..agent.threads import start_thread
from .executions import Executions, ToolExecution
from .options import ServerOptions

if t.TYPE_CHECKING:
    from ..agent.policy import Restored

DEFAULT_ID = "default"
# Source -> cell id remembered per kernel, so the same code sent again is the same cell (bounded like the executions).
KEEP_CELLS = 1000


class Session:
    """One kernel and what runs on it."""

    def __init__(self, kernel_id: str, ak: AgentKernel, *, default: bool, exec_thread: str | None):
        self.id = kernel_id
        self.ak = ak
        self.default = default
        self.exec_thread = exec_thread
        self.started_at = time.time()
        self.current: ToolExecution | None = None
        self.last: ToolExecution | None = None
        self.cells: dict[str, str] = {}  # source hash -> the cell id of its first execution
        self.lock = threading.Lock()  # submit, restart and shutdown of this kernel, one at a time
        self.closed = False
        # (kernel_name, exec_thread) asked for; restart(restore=false) asks again
        self.requested: tuple[str | None, str | None] = (None, None)

    @property
    def running(self) -> ToolExecution | None:
        current = self.current
        return current if current is not None and not current.done else None

    def cell_id_for(self, source: str, execution_id: str) -> str:
        """The same source is the same cell (the agent client's rule), named after its first execution."""
        digest = hashlib.sha256(source.encode()).hexdigest()
        cell = self.cells.setdefault(digest, execution_id)
        while len(self.cells) > KEEP_CELLS:
            self.cells.pop(next(iter(self.cells)))
        return cell

    def busy_message(self, doing: str) -> str:
        running = self.running
        if running is None:
            return (
                f"cannot {doing}: kernel {self.id!r} is busy (a restart or a checkpoint call is in progress); "
                "try again in a moment"
            )
        watch = running.watch
        where = f", at {watch.current_line()}" if watch.current_line() else ""
        return (
            f"cannot {doing}: kernel {self.id!r} is running execution {running.id!r} "
            f"({watch.elapsed():.1f} s{where}); call get_execution(execution_id={running.id!r}, wait=30) to follow it, "
            f"interrupt(execution_id={running.id!r}) to stop it, or start_kernel() for a second kernel"
        )


class Sessions:
    """Every kernel of the server, and every execution, by id."""

    def __init__(self, options: ServerOptions):
        self.options = options
        self.executions = Executions()
        self._kernels: dict[str, Session] = {}
        self._starting: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._closed = False

    # -- kernels --

    def list(self) -> list[Session]:
        with self._lock:
            return list(self._kernels.values())

    def get(self, kernel_id: t.Any, *, start: bool = False) -> Session:
        """A running kernel by id; None means the default one (started here if `start`)."""
        if kernel_id is None:
            return self._default() if start else self.existing_default()
        if not isinstance(kernel_id, str) or not kernel_id:
            raise BadInputError(
                f"kernel_id must be an id from list_kernels (such as 'default' or 'k1'), not {kernel_id!r:.80}"
            )
        with self._lock:
            session = self._kernels.get(kernel_id)
            known = sorted(self._kernels)
        if session is None:
            if kernel_id == DEFAULT_ID:
                return self._default() if start else self.existing_default()
            raise BadInputError(
                f"no kernel {kernel_id!r}; running kernels: {', '.join(known) if known else 'none'} "
                f"(leave kernel_id out for the default kernel, or call start_kernel)"
            )
        return session

    def existing_default(self) -> Session:
        with self._lock:
            session = self._kernels.get(DEFAULT_ID)
        if session is None:
            raise BadInputError(
                "the default kernel is not running yet (the first execute starts it); "
                "or give a kernel_id from list_kernels"
            )
        return session

    def _default(self) -> Session:
        with self._lock:
            self._check_open()
            session = self._kernels.get(DEFAULT_ID)
            starting = self._starting.setdefault(DEFAULT_ID, threading.Lock())
        if session is not None:
            return session
        with starting:  # two first calls at once start one kernel
            with self._lock:
                session = self._kernels.get(DEFAULT_ID)
            return session if session is not None else self._start(DEFAULT_ID, None, None, default=True)

    def start_kernel(
        self, kernel_name: str | None = None, exec_thread: str | None = None, *, prefix: str = "k"
    ) -> Session:
        if kernel_name is not None and (not isinstance(kernel_name, str) or not kernel_name):
            raise BadInputError(
                f"kernel_name must be a kernelspec name such as 'cancelkernel' or 'python3', not {kernel_name!r:.80}"
            )
        with self._lock:
            self._check_open()
            kernel_id = f"{prefix}{next(self._ids)}"
        return self._start(kernel_id, kernel_name, exec_thread, default=False)

    def _start(self, kernel_id: str, kernel_name: str | None, exec_thread: str | None, *, default: bool) -> Session:
        ak = self._new_kernel(kernel_name, exec_thread)
        session = Session(
            kernel_id,
            ak,
            default=default,
            exec_thread=exec_thread or (self.options.exec_thread if kernel_name is None else None),
        )
        session.requested = (kernel_name, exec_thread)
        with self._lock:
            if self._closed:  # the server began to exit while this kernel started
                ak.close()
                self._check_open()
            self._kernels[kernel_id] = session
        return session

    def _new_kernel(self, kernel_name: str | None, exec_thread: str | None) -> AgentKernel:
        ak = AgentKernel(**self.options.agent_options(kernel_name, exec_thread))
        ak.start()  # KernelStartError says why it did not start
        return ak

    def restart(self, session: Session) -> Restored:
        """Restart on purpose, restoring the latest checkpoint (refused while a cell runs)."""
        with session.lock:
            if session.ak.busy:
                raise BadInputError(session.busy_message("restart the kernel"))
            return session.ak.restart()

    def replace(self, session: Session) -> Session:
        """A fresh kernel under the same id: no variables, no checkpoints (restart without restore)."""
        with session.lock:
            if session.ak.busy:
                raise BadInputError(session.busy_message("restart the kernel"))
            old, session.ak = session.ak, self._new_kernel(*session.requested)
            session.cells.clear()
        old.close()
        return session

    def shutdown(self, kernel_id: t.Any, why: str = "shutdown_kernel") -> Session:
        session = self.get(kernel_id) if kernel_id is not None else None
        if session is None:
            raise BadInputError("shutdown_kernel needs the kernel_id to shut down (see list_kernels)")
        with self._lock:
            self._kernels.pop(session.id, None)
        _close(session, why)
        return session

    def _check_open(self) -> None:
        if self._closed:
            raise BadInputError("the server is shutting down; no kernel can start")

    # -- cells --

    def execute(
        self,
        code: str,
        kernel_id: t.Any,
        *,
        wall_budget: float | None,
        quiet_budget: float | None,
        cell_id: str | None,
        retry_of: str | None,
        may_block: bool = True,
        memory_budget: int | None = None,
    ) -> ToolExecution | None:
        """Submit one cell; BadInputError (nothing run) if the kernel is busy or an argument is wrong.

        may_block=False (on the event loop): None instead of waiting for a kernel to start or for a restart to end.
        """
        earlier = self.executions.get(retry_of) if retry_of is not None else None
        if earlier is not None and kernel_id is None:
            kernel_id = earlier.kernel_id
        if not may_block:
            with self._lock:
                if (kernel_id or DEFAULT_ID) not in self._kernels:
                    return None
        session = self.get(kernel_id, start=True)
        if earlier is not None:
            wall_budget, quiet_budget, memory_budget, cell_id = _retry_of(
                earlier, session, wall_budget, quiet_budget, memory_budget
            )
        if not session.lock.acquire(blocking=may_block):
            return None
        try:
            if session.closed:
                raise BadInputError(f"kernel {session.id!r} was shut down; start another or leave kernel_id out")
            if session.ak.busy:
                raise BadInputError(session.busy_message("run the cell"))
            execution_id = self.executions.new_id()
            cell = cell_id or session.cell_id_for(code, execution_id)
            try:
                submission = session.ak.submit(
                    code,
                    wall_budget=wall_budget,
                    quiet_budget=quiet_budget,
                    memory_budget=memory_budget,
                    cell_id=cell,
                    risky=True if earlier else None,
                    want_status=False,  # on once watched
                )
            except BadInputError as exc:
                raise BadInputError(
                    session.busy_message("run the cell") if "still in progress" in str(exc) else str(exc)
                ) from None
            execution = ToolExecution(
                execution_id, session.id, submission, source=code, cell_id=cell, retry_of=retry_of
            )
            session.current = session.last = execution
            self.executions.add(execution)
        finally:
            session.lock.release()
        return execution

    def running_execution(self) -> ToolExecution:
        """The one running execution (for interrupt without an id)."""
        running = self.executions.running()
        if len(running) == 1:
            return running[0]
        if not running:
            raise BadInputError("no execution is running; nothing to interrupt")
        ids = ", ".join(f"{e.id} (kernel {e.kernel_id})" for e in running)
        raise BadInputError(f"several executions are running ({ids}); say which one: interrupt(execution_id=...)")

    # -- exit --

    def close_all(self, timeout: float = 1.5) -> None:
        """Shut every kernel down, at once; kill what has not stopped after `timeout` seconds.  Idempotent."""
        with self._lock:
            self._closed = True
            sessions, self._kernels = list(self._kernels.values()), {}
        local = self.options.server_url is None  # a remote kernel's pid is a process on another machine
        pids = [session.ak.pid if local else None for session in sessions]
        threads = [start_thread(_close, s, "the server exited", name="cancelkernel-mcp-close-kernel") for s in sessions]
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        # What a graceful shutdown left (a wedged kernel), and a kernel a restart started while the close ran.
        for session, pid in zip(sessions, pids, strict=True):
            for leftover in {pid, session.ak.pid if local else None}:
                _kill(leftover)


def _retry_of(
    earlier: ToolExecution, session: Session, wall: float | None, quiet: float | None, memory: int | None
) -> tuple[float | None, float | None, int | None, str]:
    """A fix of an earlier execution: the same cell (its one interrupt already used), the same budgets unless given."""
    if earlier.kernel_id != session.id:
        raise BadInputError(
            f"retry_of={earlier.id!r} ran on kernel {earlier.kernel_id!r}; retry it there (leave kernel_id out)"
        )
    ending = earlier.ending()
    if ending is None:
        raise BadInputError(
            f"execution {earlier.id!r} is still running; interrupt it or wait for it before sending its fix"
        )
    budgets = ending.result.budgets if ending.result is not None else {}
    # A budget that was off stays off (0); None would take the server's default instead.
    wall = wall if wall is not None else (budgets.get("wall_budget") or 0.0)
    quiet = quiet if quiet is not None else (budgets.get("quiet_budget") or 0.0)
    memory = memory if memory is not None else int(budgets.get("memory_budget") or 0)
    return wall, quiet, memory, earlier.cell_id


def _close(session: Session, why: str) -> None:
    with session.lock:
        session.closed = True
        running = session.running
        if running is not None:
            running.closed_by = why
    with contextlib.suppress(Exception):  # a kernel that fails to stop is killed by close_all
        session.ak.close()


def _kill(pid: int | None) -> None:
    """SIGKILL a kernel process of ours that is still there (its process group:
    jupyter_client starts it in a session)."""
    if pid is None or pid == os.getpid():
        return
    with contextlib.suppress(OSError):
        os.kill(pid, 0)
        with contextlib.suppress(OSError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
                return
        os.kill(pid, signal.SIGKILL)
