"""Two cells at once: IPython's per-cell state, made safe for the parent shell and a subshell running together.

IPython's shell was written for one cell at a time, and ipykernel 7 runs a
subshell's cells on their own thread beside the parent shell's (worker mode
also keeps the main loop free while a cell runs).  Everything one `run_cell`
touches falls in one of three kinds, and each is made safe its own way:

- **Bookkeeping** (the execution count, the history, the compile cache, the
  pre/post events, the traps' enter and exit): runs under one lock, held
  everywhere in a cell but while the user's code runs (`Bookkeeping`), so
  two cells never interleave in it.
- **Process-wide patches** every cell makes (builtins `exit`/`quit`/
  `get_ipython`, `sys.displayhook`, `sys.excepthook`, `input`/`getpass`):
  applied by the first cell in and undone by the last one out, under a lock
  (`CountedPatch`, `SharedBuiltinTrap`, `SharedDisplayTrap`).
- **What a cell's own code reaches** (the displayhook's message, result and
  prompt number, the payloads, the traceback it showed, `allow_stdin`): kept
  per cell in a context variable (`CellState`); the worker thread runs the
  cell in a copy of that context, so it sees the same state.  Outside any
  cell (a comm handler, a thread of the user's) the shell behaves as stock.

Each override names the upstream original it changes; their hashes are in
upstream.REVIEWED.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import typing as t
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ipykernel.displayhook import ZMQShellDisplayHook
from IPython.core.builtin_trap import BuiltinTrap
from IPython.core.display_trap import DisplayTrap
from IPython.core.payload import PayloadManager

log = logging.getLogger("cancelkernel")

# Seconds a cell waits for another cell's bookkeeping before it goes on without the lock (and says so).
PATIENCE = 10.0


@dataclass
class CellState:
    """What one cell's code writes into the shell, kept apart from every other cell's."""

    allow_stdin: bool = False
    exec_result: t.Any = None  # IPython's ExecutionResult of the cell (the displayhook fills in its value)
    display_msg: dict | None = None  # the execute_result message the displayhook is building
    display_active: bool = False
    last_traceback: list[str] | None = None
    traceback_during_displayhook: bool = False
    payloads: list[dict] = field(default_factory=list)
    pre_transformed: tuple | None = None  # (raw cell, transformed, should_run_async) while IPython's run_cell runs


_current: contextvars.ContextVar[CellState | None] = contextvars.ContextVar("cancelkernel_cell_state", default=None)


def current() -> CellState | None:
    """The state of the cell whose code (or bookkeeping) runs in this context; None outside any cell."""
    return _current.get()


@contextlib.contextmanager
def cell_state(*, allow_stdin: bool) -> Iterator[CellState]:
    """A fresh CellState for one execute_request, for as long as it runs."""
    state = CellState(allow_stdin=allow_stdin)
    token = _current.set(state)
    try:
        yield state
    finally:
        _current.reset(token)


class per_cell:  # lower case: it is used like `property`
    """An attribute kept in the current CellState (field `name`); outside a cell, on the instance as before."""

    def __init__(self, name: str, default: t.Any = None, *, factory: Callable[[], t.Any] | None = None):
        self.name = name
        self.default = default
        self.factory = factory  # a fresh default per instance (a list), instead of one shared `default`

    def __set_name__(self, owner: type, attr: str) -> None:
        self.fallback = f"_{owner.__name__}_{attr}_outside_cells"

    def __get__(self, obj: t.Any, owner: type | None = None) -> t.Any:
        if obj is None:
            return self
        state = _current.get()
        if state is not None:
            return getattr(state, self.name)
        if self.fallback not in obj.__dict__:
            obj.__dict__[self.fallback] = self.factory() if self.factory is not None else self.default
        return obj.__dict__[self.fallback]

    def __set__(self, obj: t.Any, value: t.Any) -> None:
        state = _current.get()
        if state is not None:
            setattr(state, self.name, value)
        else:
            obj.__dict__[self.fallback] = value


def cell_number(result: t.Any, shell: t.Any) -> int:
    """The execution count stock reports for a cell, from its own ExecutionResult (not the shared counter).

    Stock reports `shell.execution_count - 1`: the cell's number if it was stored
    in the history, else the last stored one's; with two cells at once the shared
    counter may have moved for the other cell.
    """
    number = getattr(result, "execution_count", None)
    if number is None:  # an empty cell, or outside any cell: there is only the shared counter
        return int(shell.execution_count) - 1
    info = getattr(result, "info", None)
    stored = bool(getattr(info, "store_history", False)) and not getattr(info, "silent", False)
    return int(number) if stored else int(number) - 1


# -- bookkeeping: one cell at a time, user code excepted --------------------------------------


class Bookkeeping:
    """The lock around IPython's run_cell bookkeeping: held by a cell everywhere but in its user code.

    Re-entrant (a cell may call run_cell), and given up while the user's code
    runs, so cells still run at the same time.  A cell that waits longer than
    PATIENCE for another's bookkeeping goes on without it (as stock would) and
    logs which thread held it, so a wedged hook can never deadlock the kernel.
    """

    def __init__(self, patience: float = PATIENCE):
        self._lock = threading.RLock()
        self.patience = patience
        self._holder: str | None = None

    def _acquire(self) -> bool:
        if self._lock.acquire(timeout=self.patience):
            self._holder = threading.current_thread().name
            return True
        log.warning(
            "cancelkernel: IPython's bookkeeping was held by thread %s for over %g s; this cell goes on without it",
            self._holder,
            self.patience,
        )
        return False

    def _release(self) -> None:
        # Not ours: an earlier re-acquire gave up waiting.
        with contextlib.suppress(RuntimeError):
            self._lock.release()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        got = self._acquire()
        try:
            yield
        finally:
            if got:
                self._release()

    @contextlib.contextmanager
    def released(self) -> Iterator[None]:
        """Around the user's code: another cell's bookkeeping may run meanwhile."""
        depth = 0
        while self._lock._is_owned():  # type: ignore[attr-defined]  # C RLock: owned by this thread
            self._lock.release()
            depth += 1
        try:
            yield
        finally:
            for _ in range(depth):
                if not self._acquire():
                    break


# -- process-wide patches: the first cell in applies, the last one out undoes ----------------


class CountedPatch:
    """A process-wide change every cell makes around itself, applied once for all cells running."""

    def __init__(self, apply: Callable[[], None], undo: Callable[[], None]):
        self._apply = apply
        self._undo = undo
        self._lock = threading.RLock()
        self._users = 0

    def enter(self) -> None:
        with self._lock:
            if self._users == 0:
                self._apply()
            self._users += 1

    def exit(self) -> None:
        with self._lock:
            if self._users == 1:
                self._undo()
            self._users = max(0, self._users - 1)

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        self.enter()
        try:
            yield
        finally:
            self.exit()


class _LockedTrap:
    """IPython's traps count their nesting without a lock; two threads entering at once corrupt builtins."""

    _trap_lock: threading.RLock

    def __enter__(self) -> t.Any:
        with self._trap_lock:
            return super().__enter__()  # type: ignore[misc]

    def __exit__(self, *exc: t.Any) -> t.Any:
        with self._trap_lock:
            return super().__exit__(*exc)  # type: ignore[misc]


class SharedBuiltinTrap(_LockedTrap, BuiltinTrap):
    """BuiltinTrap (IPython 9.18.1) with enter/exit under a lock: `exit`, `quit`, `get_ipython` stay consistent."""

    def __init__(self, shell: t.Any = None):
        self._trap_lock = threading.RLock()
        super().__init__(shell=shell)


class SharedDisplayTrap(_LockedTrap, DisplayTrap):
    """DisplayTrap (IPython 9.18.1) with enter/exit under a lock: sys.displayhook stays ours while any cell runs."""

    def __init__(self, hook: t.Any = None):
        self._trap_lock = threading.RLock()
        super().__init__(hook=hook)


# -- what a cell's own code reaches: per cell ----------------------------------------------------


class CellDisplayHook(ZMQShellDisplayHook):
    """ipykernel's displayhook (7.4.0) with its per-call state kept per cell.

    Stock keeps the message being built, the ExecutionResult to fill and the
    prompt number on the one hook object: two cells displaying at once sent one
    message twice and lost the other, and the value went to the wrong cell.
    """

    msg = per_cell("display_msg")
    exec_result = per_cell("exec_result")
    _is_active = per_cell("display_active", False)

    @property
    def is_active(self) -> bool:
        """Stock's, read from the cell's state at once: IPython's output tee asks it on every write to a stream."""
        state = _current.get()
        return state.display_active if state is not None else bool(self._is_active)

    @property
    def prompt_count(self) -> int:
        """The number of the cell being displayed (stock: the shell's count - 1, whichever cell moved it last)."""
        state = _current.get()
        return cell_number(state.exec_result if state is not None else None, self.shell)

    def quiet(self) -> bool:
        """A trailing ';' silences the value: of this cell's code (stock reads the latest stored cell's)."""
        state = _current.get()
        info = getattr(state.exec_result, "info", None) if state is not None else None
        code = getattr(info, "transformed_cell", None) or getattr(info, "raw_cell", None)
        if not code:
            return bool(super().quiet())
        return bool(self.semicolon_at_end_of_expression(code))


class CellPayloads(PayloadManager):
    """IPython's PayloadManager with the payloads of each cell kept apart (a pager call lands in its own reply)."""

    _payload = per_cell("payloads", factory=list)
