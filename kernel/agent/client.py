"""AgentKernel: run cells for a program under budgets, with the policy applied and logged.

    with AgentKernel() as ak:                       # our kernel; "python3" works too
        r = ak.run("x = heavy()", wall_budget=30)
        if r.status == "interrupted":
            r = ak.retry(r, "x = heavy(fast=True)")  # a second runaway raises RunawayCellError

Policy and mechanism are apart: policy.py decides, kernel.py talks.
"""

from __future__ import annotations

import math
import os
import threading
import typing as t

from ..protocol import BUDGET_REASONS, FEATURE_BUDGETS
from .budgets import cell_budget, check_budget, check_memory_budget, parse_seconds, read_directive
from .checkpoints import MODES as CHECKPOINT_MODES
from .checkpoints import Checkpoints
from .errors import BadInputError, RunawayCellError
from .history import RuntimeHistory, cell_key
from .lifecycle import choose_lifecycle
from .link import KernelInfo, KernelLink
from .log import InterventionLog
from .outputs import DisplayRegistry
from .policy import CellPlan, Policy, Restored
from .processes import describe_exit
from .result import CellResult
from .submission import Submission
from .turn import Turn
from .watch import CellWatch


class AgentKernel:
    """One kernel, run by a program: budgets, one interrupt per cell, restart with state, a log.

    kernel_name: a kernelspec name ("cancelkernel", "cancelkernel-worker", "python3", ...).
    connection_file: connect to a running kernel on this host instead of starting one.
    server_url / token / kernel_id: a kernel behind a Jupyter Server or kernel gateway
      (token defaults to $JUPYTER_TOKEN; kernel_id adopts a running kernel instead of starting one).
    wall_budget / quiet_budget: defaults for every cell (seconds, None = none;
      wall_budget="auto" derives it from the cell's measured runtimes).
    memory_budget: default bytes a cell may grow the kernel by ("2G", "512M"; our kernel enforces it).
    checkpoint: "off" | "before-risky" | "after-ok" (needs a kernel with checkpoints).
    log: a JSONL file, one record per intervention (per cell with log_all=True).
    history: a JSON file keeping runtimes for wall_budget="auto" across sessions.
    spare: keep a warm spare kernel (started after the first cell) so a restart is a swap,
      not a cold start; costs one idle kernel's memory.  Kernels started here only.
    """

    def __init__(
        self,
        kernel_name: str = "cancelkernel",
        *,
        connection_file: str | os.PathLike | None = None,
        server_url: str | None = None,
        token: str | None = None,
        kernel_id: str | None = None,
        wall_budget: float | str | None = None,
        quiet_budget: float | None = None,
        memory_budget: int | str | None = None,
        interrupt_grace: float | None = None,
        checkpoint: str = "off",
        log: str | os.PathLike | None = None,
        log_all: bool = False,
        history: str | os.PathLike | None = None,
        auto_floor: float = 5.0,
        auto_factor: float = 3.0,
        auto_default: float = 60.0,
        risky_after: float = 1.0,
        kernel_budgets: bool = True,
        accept_abandoned_threads: bool = False,
        max_output_bytes: int | None = 10_000_000,
        extra_arguments: list[str] | None = None,
        env: dict[str, str] | None = None,
        start_timeout: float = 60.0,
        owner_restart_wait: float = 5.0,
        spare: bool = True,
    ):
        # Validate everything first: bad input starts nothing and writes nothing.
        if not isinstance(kernel_name, str) or not kernel_name:
            raise BadInputError(
                f"kernel_name must be a kernelspec name such as 'cancelkernel' or 'python3', not {kernel_name!r}"
            )
        self.wall_budget = check_budget("wall_budget", wall_budget, allow_auto=True)
        self.quiet_budget = check_budget("quiet_budget", quiet_budget)
        self.memory_budget = check_memory_budget("memory_budget", memory_budget)
        if interrupt_grace is not None:
            interrupt_grace = parse_seconds(interrupt_grace, "interrupt_grace")
        if checkpoint not in CHECKPOINT_MODES:
            raise BadInputError(f"checkpoint must be one of {', '.join(CHECKPOINT_MODES)}, not {checkpoint!r}")
        if max_output_bytes is not None and (not isinstance(max_output_bytes, int) or max_output_bytes <= 0):
            raise BadInputError(f"max_output_bytes must be a positive int or None, not {max_output_bytes!r}")
        self.checkpoint_mode = checkpoint
        self.risky_after = float(risky_after)
        self.kernel_budgets = kernel_budgets
        self.log = InterventionLog(log, log_all=log_all) if log is not None else None
        self.history = RuntimeHistory(history, floor=auto_floor, factor=auto_factor, default=auto_default)
        self.link = KernelLink(
            choose_lifecycle(
                kernel_name,
                connection_file,
                server_url,
                token,
                kernel_id,
                extra_arguments,
                env,
                owner_restart_wait,
                spare=bool(spare),
                start_timeout=start_timeout,
            ),
            start_timeout=start_timeout,
        )
        self.checkpoints = Checkpoints(self.link)
        self.policy = Policy(
            self.link,
            restore=self._restore_after_restart,
            interrupt_grace=interrupt_grace,
            accept_abandoned_threads=accept_abandoned_threads,
            max_output_bytes=max_output_bytes,
            registry=DisplayRegistry(),
        )
        self._manual = threading.Event()
        self._turn = Turn()  # one cell (or restart, or checkpoint call) at a time
        self._interrupted: set[str] = set()  # cell keys that used their one interrupt
        self._attempts: dict[str, list[CellResult]] = {}
        self._started = False
        self._busy_elsewhere = False  # a kernel connected to was running a cell another client sent

    # -- life cycle --

    def __enter__(self) -> AgentKernel:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> AgentKernel:
        """Start (or connect to) the kernel and wait until it answers."""
        if not self._started:
            self.link.start()
            self._started = True
            self._busy_elsewhere = self.link.info.busy  # said by a kernel we connected to (asked on control)
        return self

    def close(self, *, shutdown: bool | None = None) -> None:
        """Shut down a kernel started here; a connected one keeps running unless shutdown=True."""
        self._started = False
        self.link.shutdown(shutdown_connected=bool(shutdown))

    @property
    def pid(self) -> int | None:
        """The kernel's process id when known (ours say it; a stock kernel started here has one too)."""
        return self.link.pid

    @property
    def info(self) -> KernelInfo:
        return self.link.info

    @property
    def kernel_name(self) -> str:
        return self.link.kernel_name

    # -- running cells --

    def run(
        self,
        code: str,
        *,
        wall_budget: float | str | None = None,
        quiet_budget: float | None = None,
        memory_budget: int | str | None = None,
        cell_id: str | None = None,
        risky: bool | None = None,
    ) -> CellResult:
        """Run one cell under the policy.  Budgets default to the AgentKernel's; math.inf (or 0) turns one off."""
        _check_cell(code, cell_id)
        with self._turn.exclusive("run a cell"):
            return self._run(
                code, cell_id, cell_key(code, cell_id), wall_budget, quiet_budget, risky, memory=memory_budget
            )

    def submit(
        self,
        code: str,
        *,
        wall_budget: float | str | None = None,
        quiet_budget: float | None = None,
        memory_budget: int | str | None = None,
        cell_id: str | None = None,
        risky: bool | None = None,
        want_status: bool = True,
    ) -> Submission:
        """Start one cell under the policy in the background and return at once.

        The Submission's `watch` shows the cell as it runs (outputs so far,
        seconds since output, and with want_status where the kernel sees it,
        refreshed about once a second); `result()` waits for the CellResult.
        """
        _check_cell(code, cell_id)
        key = cell_key(code, cell_id)
        self._turn.claim("submit a cell")

        def go(watch: CellWatch) -> CellResult:
            try:
                return self._run(code, cell_id, key, wall_budget, quiet_budget, risky, watch, memory=memory_budget)
            finally:
                self._turn.release()

        try:
            return Submission(go, self.interrupt, want_status=want_status)
        except BaseException:
            self._turn.release()
            raise

    @property
    def busy(self) -> bool:
        """True while a cell (or a restart, or a checkpoint call) is in progress."""
        return self._turn.busy

    @property
    def running(self) -> CellWatch | None:
        """The live view of the cell running now, if one is."""
        return self._turn.watch

    def status(self) -> dict[str, t.Any]:
        """What the kernel is doing now, safe to call from any thread.

        While a cell runs this reads its watch (the run loop owns the kernel's
        sockets); while idle it asks the kernel (kernel_info on the control
        channel) whether a cell another client sent runs there
        (`execution_state`, `executions`), and our kernel for its cancel status.
        """
        info = self.link.info
        base: dict[str, t.Any] = {
            "kernel_name": self.kernel_name,
            "kernel_id": self.link.kernel_id,
            "pid": self.pid,
            "ours": info.ours,
            "exec_thread": info.exec_thread,
            "started": self._started,
        }
        watch = self._turn.watch
        if watch is not None:
            return {**base, "busy": True, "alive": True, "cell": watch.summary()}
        if not self._turn.try_claim():
            return {**base, "busy": True, "alive": True, "cell": None}
        try:
            alive = self._started and self.link.is_alive()
            said = self.link.kernel_state() if alive else None
            kernel = self.link.cancel_status(timeout=0.5) if alive and info.ours else None
        finally:
            self._turn.release()
        extra = {"abandoned_threads": kernel.get("abandoned_threads", [])} if kernel else {}
        if said is not None:  # a cell another client sent (this client runs none now)
            extra |= {"execution_state": said.execution_state, "executions": said.executions}
        return {**base, "busy": False, "alive": alive, "cell": None, **extra}

    def retry(
        self,
        result: CellResult,
        new_code: str,
        *,
        wall_budget: float | str | None = None,
        quiet_budget: float | None = None,
        memory_budget: int | str | None = None,
    ) -> CellResult:
        """Run a fixed version of a cell that failed or ran away; it counts as the same cell.

        The cell keeps the interrupt it already used: if the new code runs away
        too, the kernel is restarted and RunawayCellError raised.
        """
        if not isinstance(result, CellResult):
            raise BadInputError(f"retry needs the CellResult of the earlier attempt, not {type(result).__name__}")
        if not isinstance(new_code, str):
            raise BadInputError(f"new_code must be a str (the cell's fixed source), not {type(new_code).__name__}")
        wall = wall_budget if wall_budget is not None else result.budgets.get("wall_budget")
        quiet = quiet_budget if quiet_budget is not None else result.budgets.get("quiet_budget")
        memory = memory_budget if memory_budget is not None else result.budgets.get("memory_budget")
        with self._turn.exclusive("retry a cell"):
            key = result.cell_key or cell_key(result.source, result.cell_id)
            return self._run(new_code, result.cell_id, key, wall, quiet, True, memory=memory)

    def interrupt(self) -> None:
        """Ask for the running cell to be interrupted (thread-safe; counts as its one interrupt)."""
        self._manual.set()
        self.link.wake()  # the run loop sees it now, not at the end of its current wait

    def reset_cell(self, cell: str) -> None:
        """Give a cell (its cell_id, or its cell_key) a fresh interrupt and forget its attempts."""
        for key in (cell, f"id:{cell}"):
            self._interrupted.discard(key)
            self._attempts.pop(key, None)

    def attempts(self, cell: str) -> list[CellResult]:
        """Every result of a cell so far (by cell_id or cell_key)."""
        return list(self._attempts.get(cell) or self._attempts.get(f"id:{cell}") or [])

    def _run(
        self,
        code: str,
        cell_id: str | None,
        key: str,
        wall: t.Any,
        quiet: t.Any,
        risky: bool | None,
        watch: CellWatch | None = None,
        *,
        memory: t.Any = None,
    ) -> CellResult:
        wall_v = cell_budget("wall_budget", wall, self.wall_budget, allow_auto=True)
        quiet_v = cell_budget("quiet_budget", quiet, self.quiet_budget)
        memory_v = (
            self.memory_budget
            if memory is None
            else None
            if memory == math.inf
            else check_memory_budget("memory_budget", memory)
        )
        if not self._started:
            raise BadInputError(
                "the kernel is not started: use `with AgentKernel(...) as ak:` or call ak.start() first"
            )
        original, notes = code, list[str]()
        if not self.info.has(FEATURE_BUDGETS):
            code, wall_v, quiet_v, notes = read_directive(code, wall_v, quiet_v, self.kernel_name)
        if wall_v == "auto":
            wall_v = self.history.auto_budget(key)
        between = self._revive_if_dead()
        self._refuse_if_busy_elsewhere()
        may_interrupt = key not in self._interrupted
        if self.checkpoint_mode == "before-risky" and self._is_risky(key, risky):
            self.checkpoints.auto_save(self.checkpoint_mode, "before a risky cell")
        plan = CellPlan(
            source=code,
            cell_id=cell_id,
            cell_key=key,
            attempt=len(self._attempts.get(key, [])) + 1,
            wall_budget=t.cast("float | None", wall_v),
            quiet_budget=t.cast("float | None", quiet_v),
            memory_budget=memory_v,
            may_interrupt=may_interrupt,
        )
        notes += plan.hand_budgets_to_kernel(self.info.has(FEATURE_BUDGETS) and self.kernel_budgets, self.kernel_name)
        self._manual.clear()
        self._turn.watch = watch = watch if watch is not None else CellWatch()
        result = self.policy.run(plan, self._manual, watch)
        result.source = original
        result.notes[:0] = notes
        runaway = self._record(key, result, between)
        if runaway and not may_interrupt:
            raise RunawayCellError(key, self._attempts[key])
        return result

    def _record(self, key: str, result: CellResult, between: tuple[dict, Restored] | None) -> bool:
        """Keep a cell's result (history, attempts, log, after-ok checkpoint), warm the spare: True if it ran away."""
        if between is not None:
            action, restored = between
            result.actions.insert(0, action)
            if result.status in ("ok", "error"):
                result.state = restored.state
                result.lost_reason = restored.note if restored.missing else None
        self.history.record(key, result.elapsed, result.status)
        self._attempts.setdefault(key, []).append(result)
        runaway = result.reason in (*BUDGET_REASONS, "manual") and result.status in ("interrupted", "restarted")
        if runaway:
            self._interrupted.add(key)
        if self.checkpoint_mode == "after-ok" and result.status == "ok":
            self.checkpoints.auto_save(self.checkpoint_mode, "after a successful cell")
        if self.log is not None:
            self.log.write_result(
                result, kernel={"name": self.kernel_name, "id": self.link.kernel_id, "pid": result.kernel.get("pid")}
            )
        self.link.warm_spare()  # after the first cell, and again after a restart used it
        return runaway

    def _is_risky(self, key: str, risky: bool | None) -> bool:
        """Risky unless it completed before in under risky_after seconds (or the caller says)."""
        if risky is not None:
            return risky
        longest = self.history.longest(key)
        return longest is None or longest > self.risky_after or key in self._interrupted

    def _refuse_if_busy_elsewhere(self) -> None:
        """A kernel connected to while it ran another client's cell: refuse while it still does (asked again each time).

        The cell would wait behind that one, its budgets running out while it waits.
        """
        if not self._busy_elsewhere:
            return
        now = self.link.kernel_state()
        if now is None or not now.busy:
            self._busy_elsewhere = False
            return
        raise BadInputError(
            f"kernel {self.link.kernel_id!r} is running a cell another client sent ({now.running_text()}); a cell sent "
            "now would wait behind it while its budgets run. Wait until AgentKernel.kernel_state().busy is False, "
            "or stop that cell from the client that sent it (a kernel started here has no such cell)"
        )

    def kernel_state(self) -> KernelInfo | None:
        """What the kernel says now (kernel_info on the control channel).

        `busy` (its main shell runs a cell) and, from our kernel, `executions` (every running cell);
        None when it does not answer, or while a cell of ours runs.
        """
        if not self._started or not self._turn.try_claim():
            return None
        try:
            return self.link.kernel_state()
        finally:
            self._turn.release()

    def _revive_if_dead(self) -> tuple[dict, Restored] | None:
        """The kernel died between cells (killed from outside): restart it before running the next one."""
        if self.link.is_alive():
            return None
        why = "the kernel process was found dead before the cell started" + _exit_text(self.link)
        self.link.restart(dead=True)
        restored = self._restore_after_restart()
        outcome = f"new kernel running; state {restored.state}"
        if restored.state != "restored" and restored.note:
            outcome += f" ({restored.note})"
        action = {
            "action": "restart",
            "why": "died",
            "why_text": why,
            "via": "restart",
            "at": 0.0,
            "outcome": outcome,
            "restored": restored.names,
        }
        return action, restored

    # -- checkpoints --

    def save_checkpoint(self, name: str | None = None) -> dict[str, t.Any]:
        """Save the kernel's state now (raises CheckpointError on kernels without checkpoints)."""
        with self._turn.exclusive("save a checkpoint"):
            saved = self.checkpoints.save(name)
            self.link.checkpoint_saved(saved.get("name"))
            return saved

    def restore_checkpoint(self, name: str | None = None) -> Restored:
        """Bring back a checkpoint (the latest if no name)."""
        with self._turn.exclusive("restore a checkpoint"):
            return self.checkpoints.restore(name)

    def list_checkpoints(self) -> list[dict[str, t.Any]]:
        with self._turn.exclusive("list checkpoints"):
            return self.checkpoints.list()

    def drop_checkpoint(self, name: str) -> dict[str, t.Any]:
        with self._turn.exclusive("drop a checkpoint"):
            return self.checkpoints.drop(name)

    def restart(self) -> Restored:
        """Restart the kernel on purpose and restore the latest checkpoint (if any)."""
        with self._turn.exclusive("restart the kernel"):
            self.link.restart()
            return self._restore_after_restart()

    def _restore_after_restart(self) -> Restored:
        return self.checkpoints.restore_latest()


def _exit_text(link: KernelLink) -> str:
    return describe_exit(link.exit_code())


def _check_cell(code: object, cell_id: object) -> None:
    """What run() and submit() refuse before anything is sent."""
    if not isinstance(code, str):
        raise BadInputError(f"code must be a str (the cell's source), not {type(code).__name__}")
    if cell_id is not None and not isinstance(cell_id, str):
        raise BadInputError(f"cell_id must be a str or None, not {cell_id!r}")
