"""Every copy or override of ipykernel / IPython internals, in one module.

Each function below says which upstream function it copies or relies on and
the version it was read from.  `REVIEWED` holds a hash of each upstream
original per reviewed version; tests/unit/test_upstream.py fails when the
installed original differs from every reviewed one, so an upgrade cannot
drift silently: re-read the original, port its changes here, add its hash.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import inspect
import sys
import threading
import typing as t
from warnings import warn

from IPython.core.history import HistoryManager

if t.TYPE_CHECKING:
    import sqlite3

    from jupyter_client.session import Session

# "module:Class.method" -> {version of its package: first 16 hex digits of sha256(inspect.getsource(it))}.
REVIEWED: dict[str, dict[str, str]] = {
    "ipykernel.ipkernel:IPythonKernel.do_execute": {"7.4.0": "78aa91d0af8b79f1"},  # copied: run_cell_like_stock
    # copied: run_code_like_ipython
    "IPython.core.interactiveshell:InteractiveShell.run_code": {"9.18.1": "a25cdd7bf37c7045"},
    # its private attributes: outstream_has_buffered
    "ipykernel.iostream:OutStream.__init__": {"7.4.0": "7f5e96c287471a18"},
    "ipykernel.iostream:OutStream.flush": {"7.4.0": "a98ae207fca22e14"},  # skipped when empty: CancelOutStream.flush
    "ipykernel.iostream:OutStream._flush": {"7.4.0": "bbc71cad85cf3fdd"},  # resets _flush_pending
    "ipykernel.iostream:OutStream.write": {"7.4.0": "a63d2196b6f7f3a1"},  # its _buffers keys: written_per_cell
    "ipykernel.iostream:OutStream._rotate_buffers": {
        "7.4.0": "8b988b2b4854dbf6"
    },  # wrapped: CancelOutStream._rotate_buffers
    "ipykernel.iostream:OutStream._flush_buffers": {
        "7.4.0": "c06ddc3776ec5a9b"
    },  # closes only after rotating: written_per_cell
    "ipykernel.kernelbase:Kernel._abort_queues": {"7.4.0": "a133ec2d4199abd2"},  # done early: abort_before_reply
    "ipykernel.kernelbase:Kernel._post_dummy_stop_aborting_message": {"7.4.0": "7bb316f614f66735"},
    # extended: CancelKernel.finish_metadata
    "ipykernel.kernelbase:Kernel.finish_metadata": {"7.4.0": "bda67be5df66b0ab"},
    # replaced: CancelKernel.interrupt_request
    "ipykernel.kernelbase:Kernel.interrupt_request": {"7.4.0": "77d18f4f7f9ecda7"},
    "ipykernel.kernelbase:Kernel.pre_handler_hook": {"7.4.0": "b398c28ca5a83779"},  # replaced: SIGINT stays ours
    "ipykernel.kernelbase:Kernel.post_handler_hook": {"7.4.0": "074f5f5a14014b68"},  # replaced: SIGINT re-installed
    "ipykernel.kernelapp:IPKernelApp.init_signal": {"7.4.0": "94108b7972a28c74"},  # replaced: SIGINT not ignored
    # one bind of a given port: CancelKernelApp.init_sockets
    "ipykernel.kernelapp:IPKernelApp._bind_socket": {"7.4.0": "e9075e81de4e01e8"},
    "ipykernel.kernelbase:Kernel.shell_channel_thread_main": {"7.4.0": "cb7451df829a0f42"},  # wrapped: note_received
    "ipykernel.kernelbase:Kernel._publish_status": {"7.4.0": "415eebd1179c705c"},  # wrapped: status_parent, status.py
    # its order, parent set, busy, then the handler: ControlRequests.deliver_early
    "ipykernel.kernelbase:Kernel.process_control": {"7.4.0": "2d293c89e1fbfcbf"},
    "ipykernel.kernelbase:Kernel.delete_subshell_request": {"7.4.0": "30b166ac9414ff0b"},  # wrapped: cell stopped first
    # wrapped: honour_frontend_subshell
    "ipykernel.comm.comm:BaseComm._reply_subshell_for": {"7.4.0": "6693678da2a5841c"},
    "ipykernel.kernelbase:Kernel.dispatch_shell": {"7.4.0": "7ecbeb6a2a811091"},  # concurrent: no status (comms.py)
    # held until the reply: control.py
    "ipykernel.subshell_manager:SubshellManager.get_subshell_asyncio_lock": {"7.4.0": "7f4c4fff2f54730b"},
    # Per-cell state for two cells at once (concurrent_cells.py): the classes whose state is kept per cell or counted.
    # its bookkeeping: under the lock
    "IPython.core.interactiveshell:InteractiveShell.run_cell_async": {"9.18.1": "a5b3f160f41f1dd9"},
    "IPython.core.builtin_trap:BuiltinTrap": {"9.18.1": "927d9dafeabbf761"},  # locked: SharedBuiltinTrap
    "IPython.core.display_trap:DisplayTrap": {"9.18.1": "6cce391c74809437"},  # locked: SharedDisplayTrap
    "IPython.core.displayhook:DisplayHook": {
        "9.18.1": "28323f2bd953e644",
        "9.19.1": "0956426144092549",
    },  # per cell: CellDisplayHook
    "ipykernel.displayhook:ZMQShellDisplayHook": {"7.4.0": "235050de90c39247"},  # per cell: CellDisplayHook
    "IPython.core.payload:PayloadManager": {"9.18.1": "69bf5f6121699f48"},  # per cell: CellPayloads
    # extended: CancelShell
    "IPython.core.interactiveshell:InteractiveShell.init_builtins": {"9.18.1": "cc58c2f7f49ed64c"},
    # extended: CancelShell
    "IPython.core.interactiveshell:InteractiveShell.init_displayhook": {"9.18.1": "97329916fd85e218"},
    # replaced: CancelShell
    "IPython.core.interactiveshell:InteractiveShell.init_payload": {"9.18.1": "3a03afd386bb8b2e"},
    # its _last_traceback*: per cell
    "ipykernel.zmqshell:ZMQInteractiveShell._showtraceback": {"7.4.0": "6a5da68855007d73"},
    "ipykernel.zmqshell:ZMQInteractiveShell.run_cell": {"7.4.0": "5e7ebd5584efd5e8"},  # its _last_traceback*: per cell
    # counted: CancelKernel._forward_input
    "ipykernel.ipkernel:IPythonKernel._forward_input": {"7.4.0": "013d8e7057dfe967"},
    # counted: CancelKernel._restore_input
    "ipykernel.ipkernel:IPythonKernel._restore_input": {"7.4.0": "641c1c51654e33ce"},
    # The history written outside the cache's lock: HistoryWrittenInOrder.
    "IPython.core.history:HistoryManager.writeout_cache": {"9.18.1": "21d61285487774c2"},
    "IPython.core.history:HistoryManager._writeout_input_cache": {"9.18.1": "0571ce5ee64719a7"},
    "IPython.core.history:HistoryManager._writeout_output_cache": {"9.18.1": "7147fdcd32f18730"},
    # replaced: CancelShell
    "IPython.core.interactiveshell:InteractiveShell.init_history": {"9.18.1": "e4fd1f6bce86091b"},
    # Transformed once per cell: CancelShell.transform_cell / should_run_async answer run_cell's second asking.
    "IPython.core.interactiveshell:InteractiveShell._run_cell": {"9.18.1": "eff03d35f0d5dc11"},
    "IPython.core.interactiveshell:InteractiveShell.transform_cell": {"9.18.1": "98f675c6802622e7"},
    "IPython.core.interactiveshell:InteractiveShell.should_run_async": {"9.18.1": "aaea33ec18cb838f"},
}


def source_hash(qualified: str) -> tuple[str, str]:
    """(installed version of its package, hash of its source) for a REVIEWED key."""
    module_name, _, attr_path = qualified.partition(":")
    obj: t.Any = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    if isinstance(obj, property):
        obj = obj.fget
    package = sys.modules[module_name.split(".")[0]]
    digest = hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()[:16]
    return str(getattr(package, "__version__", "?")), digest


# -- IPythonKernel.do_execute (ipykernel 7.4.0) ---------------------------------------------


async def run_cell_like_stock(
    kernel: t.Any,
    code: str,
    silent: bool,
    store_history: bool,
    user_expressions: dict | None,
    allow_stdin: bool,
    cell_meta: dict | None,
    cell_id: str | None,
    *,
    always_async: bool,
) -> dict:
    """`IPythonKernel.do_execute` of ipykernel 7.4.0, with these differences.

    - `always_async` (worker mode, subshell threads): the cell always goes
      through `run_cell_async` on the running loop, because it awaits the
      exec thread and cannot use IPython's blocking pseudo-runner.
    - No `_cancel_on_sigint` around the awaiting cell: the kernel owns SIGINT
      (runtime/signals.py) and cancels an awaiting cell's task itself.
    - It runs under the shell's bookkeeping lock (released while user code runs),
      so a subshell's cell never interleaves with it (concurrent_cells.py).
    - The reply's execution_count is this cell's own (stock reads the shared
      counter, which a cell running at the same time may have moved).
    - Whether run_cell_async takes cell_id and cell_meta is read once per function, not per cell.
    - IPython's run_cell gets this cell's transform and should_run_async answer
      instead of computing both again (`CancelShell.pre_transformed`): stock
      tokenizes, transforms and compiles every cell twice before running it.
    """

    shell = kernel.shell
    assert shell is not None
    with shell.bookkeeping.held():
        return await _run_cell_like_stock(
            kernel, shell, code, silent, store_history, user_expressions, allow_stdin, cell_meta, cell_id, always_async
        )


async def _run_cell_like_stock(
    kernel: t.Any,
    shell: t.Any,
    code: str,
    silent: bool,
    store_history: bool,
    user_expressions: dict | None,
    allow_stdin: bool,
    cell_meta: dict | None,
    cell_id: str | None,
    always_async: bool,
) -> dict:
    from ipykernel.kernelbase import _accepts_parameters

    from .concurrent_cells import cell_number

    kernel._forward_input(allow_stdin)
    reply_content: dict[str, t.Any] = {}
    accepts = _run_cell_async_accepts(shell.run_cell_async, _accepts_parameters)
    try:
        preprocessing_exc_tuple = None
        try:
            transformed_cell = shell.transform_cell(code)
        except Exception:  # noqa: BLE001 - reported by run_cell, as stock does
            transformed_cell = code
            preprocessing_exc_tuple = sys.exc_info()
        extra: dict[str, t.Any] = {}
        if accepts["cell_meta"]:
            extra["cell_meta"] = cell_meta
        if accepts["cell_id"]:
            extra["cell_id"] = cell_id
        if always_async or shell.should_run_async(
            code, transformed_cell=transformed_cell, preprocessing_exc_tuple=preprocessing_exc_tuple
        ):
            coro = shell.run_cell_async(
                code,
                store_history=store_history,
                silent=silent,
                transformed_cell=transformed_cell,
                preprocessing_exc_tuple=preprocessing_exc_tuple,
                **extra,
            )
            res = None
            try:
                res = await asyncio.ensure_future(coro)
            finally:
                shell.events.trigger("post_execute")
                if not silent:
                    shell.events.trigger("post_run_cell", res)
        else:
            done = None if preprocessing_exc_tuple is not None else transformed_cell
            res = _run_cell_once_transformed(shell, code, done, store_history=store_history, silent=silent, **extra)
    finally:
        kernel._restore_input()

    err = res.error_before_exec if res.error_before_exec is not None else res.error_in_exec
    displayhook_error = getattr(shell, "_last_traceback_during_displayhook", False)
    if res.success and not displayhook_error:
        reply_content["status"] = "ok"
    else:
        reply_content["status"] = "error"
        reply_content.update(
            {
                "traceback": getattr(shell, "_last_traceback", None) or [],
                "ename": str(type(err).__name__),
                "evalue": str(err),
            }
        )
        reply_content["engine_info"] = {"engine_uuid": kernel.ident, "engine_id": kernel.int_id, "method": "execute"}
    reply_content["execution_count"] = cell_number(res, shell)
    if "traceback" in reply_content:
        kernel.log.info("Exception in execute request:\n%s", "\n".join(reply_content["traceback"]))
    if reply_content["status"] == "ok":
        reply_content["user_expressions"] = shell.user_expressions(user_expressions or {})
    else:
        reply_content["user_expressions"] = {}
    reply_content["payload"] = shell.payload_manager.read_payload()
    shell.payload_manager.clear_payload()
    return reply_content


def _run_cell_once_transformed(shell: t.Any, code: str, transformed: str | None, **kwargs: t.Any) -> t.Any:
    """shell.run_cell(code), which transforms the cell and asks should_run_async again: the same text, the same answers.

    `transformed` is this cell's transform (None: it failed, and run_cell reports that by transforming again).
    """
    if transformed is not None:
        shell.pre_transformed = (code, transformed, False)
    try:
        return shell.run_cell(code, **kwargs)
    finally:
        shell.pre_transformed = None


_accepted: dict[t.Any, dict[str, bool]] = {}


def _run_cell_async_accepts(method: t.Any, accepts_parameters: t.Callable) -> dict[str, bool]:
    """Whether run_cell_async takes cell_id and cell_meta: read once per function (stock reads it per cell)."""
    function = getattr(method, "__func__", method)
    found = _accepted.get(function)
    if found is None:
        found = _accepted[function] = accepts_parameters(method, ["cell_id", "cell_meta"])
    return found


# -- InteractiveShell.run_code (IPython 9.18.1; 8.x is the same) ----------------------------


async def run_code_like_ipython(  # noqa: C901 - IPython's run_code in its own shape, so an upgrade ports line by line
    shell: t.Any,
    code_obj: t.Any,
    result: t.Any,
    async_: bool,
    execute: t.Callable[[t.Any, bool], t.Awaitable[None]],
    report: t.Callable[[BaseException], bool],
) -> bool:
    """`InteractiveShell.run_code` of IPython 9.18.1, except four steps.

    - `execute(code_obj, async_)` runs the code (our executor: main thread or worker),
      outside the shell's bookkeeping lock (concurrent_cells.py).
    - The executor's frames between run_code and the cell are cut from a traceback before IPython
      formats it, so it has stock's shape; formatting them (hidden as they are) cost 100+ ms the first time.
    - sys.excepthook is swapped once for all the cells running at once (a counted patch), not per cell:
      two cells swapping it each for themselves left the shell's hook installed for good.
    - `report(exc)` may show an exception its own way (a short interrupt
      report); when it returns False, IPython's traceback is shown as usual.
    Returns True when an exception occurred, as the original does.
    """
    __tracebackhide__ = "__ipython_bottom__"
    outflag = True
    import bdb

    try:
        # The shell's excepthook while user code runs, so a direct call to sys.excepthook does not trigger
        # the crash handler; installed by the first of the cells running at once, restored by the last.
        with shell.excepthook_patch.applied(), shell.bookkeeping.released():
            await execute(code_obj, async_)
    except SystemExit as e:
        if result is not None:
            result.error_in_exec = e
        shell.showtraceback(exception_only=True)
        warn("To exit: use 'exit', 'quit', or Ctrl-D.", stacklevel=1)
    except bdb.BdbQuit:
        if result is not None:
            result.error_in_exec = sys.exc_info()[1]
    except shell.custom_exceptions:
        _skip_own_frames(sys.exc_info()[1])
        etype, value, tb = sys.exc_info()
        if result is not None:
            result.error_in_exec = value
        shell.CustomTB(etype, value, tb)
    except BaseException as exc:  # noqa: BLE001 - IPython's bare except
        if result is not None:
            result.error_in_exec = exc
        if not report(exc):
            _skip_own_frames(exc)
            shell.showtraceback(running_compiled_code=True, tb_offset=0)
    else:
        outflag = False
    return outflag


def _skip_own_frames(exc: BaseException | None) -> None:
    """Unlink this package's frames that follow run_code's own in `exc`'s traceback (IPython skips run_code's)."""
    from ..frames import is_own_file

    after = exc.__traceback__ if exc is not None else None
    # Ours, and contextlib's __exit__ of our context managers around the user's code.
    while after is not None and (
        is_own_file(after.tb_frame.f_code.co_filename) or after.tb_frame.f_code.co_filename == contextlib.__file__
    ):
        after = after.tb_next
    if exc is not None and after is not None:
        exc.__traceback__ = after


# -- OutStream internals (ipykernel 7.4.0) -------------------------------------------------


def outstream_has_buffered(stream: t.Any) -> bool:
    """Whether `OutStream.flush` has anything to send (its `_flush_pending` flag, `_buffers` under `_buffer_lock`).

    Another ipykernel layout (attributes missing): always True, so flush behaves as stock.
    """
    if getattr(stream, "_flush_pending", True):
        return True
    lock = getattr(stream, "_buffer_lock", None)
    if lock is None or not hasattr(stream, "_buffers"):
        return True
    with lock:
        # Read under the lock: `_rotate_buffers` swaps the dict under it, then closes the old buffers outside it.
        return any(not buffer.closed and buffer.tell() for buffer in stream._buffers.values())


def outstream_lock(stream: t.Any) -> t.ContextManager[t.Any]:
    """The lock `OutStream` writes, rotates and reads its `_buffers` under (an RLock: taken again inside is fine)."""
    lock = getattr(stream, "_buffer_lock", None)
    return lock if lock is not None else contextlib.nullcontext()


def written_per_cell(buffers: t.Mapping[frozenset, t.Any]) -> dict[str | None, int]:
    """Characters in a dict of `OutStream._buffers`, per cell (its parent header's msg_id; None: no parent).

    `OutStream.write` appends every write to `_buffers[frozenset(parent_header.items())]`, a StringIO, under
    `_buffer_lock`; `_rotate_buffers` swaps in an empty dict under it.  Call with the lock held, or on a
    rotated-out dict before `_flush_buffers` closes its buffers.
    """
    found: dict[str | None, int] = {}
    for key, buffer in buffers.items():
        chars = 0 if buffer.closed else buffer.tell()
        if chars:
            cell = next((value for name, value in key if name == "msg_id"), None)
            found[cell] = found.get(cell, 0) + chars
    return found


# -- Kernel._abort_queues / _post_dummy_stop_aborting_message (ipykernel 7.4.0) --------------


def abort_before_reply(kernel: t.Any, subshell_id: str | None) -> bool:
    """Start stop_on_error's aborting of queued cells BEFORE the error reply leaves.

    Stock ipykernel 7 sends the reply first and only then (in `_abort_queues`)
    sets `_aborting` and queues the marker that ends it, so a cell sent the
    moment the reply arrives can be answered "aborted" although it came after
    the error.  Doing it first means only requests already queued are aborted.
    Returns True if done (then `_abort_queues` must not do it again).
    """
    if subshell_id is not None or not kernel.shell_channel_thread:
        return False  # stock's own _abort_queues handles these
    kernel._aborting = True
    queued = threading.Event()

    def post_marker() -> None:
        kernel._post_dummy_stop_aborting_message(None)
        queued.set()

    kernel.shell_channel_thread.io_loop.add_callback(post_marker)
    return queued.wait(1.0)


# -- Kernel.shell_channel_thread_main / Kernel._publish_status (ipykernel 7.4.0) --------------


def note_received(kernel: t.Any, msg: t.Any, note: t.Callable[[str], None]) -> None:
    """Tell `note` the msg_id of an execute_request reaching the shell channel thread."""
    header = (read_without_content(kernel.session, msg) or {}).get("header") or {}
    if header.get("msg_type") == "execute_request" and isinstance(header.get("msg_id"), str):
        note(header["msg_id"])


def read_without_content(session: Session | None, msg: t.Any) -> dict | None:
    """The message `msg` (its frames as received) without its content; None if it cannot be read.

    Reads it the way `Kernel.shell_channel_thread_main` does (feed_identities,
    deserialize without content), without touching the frames it then routes.
    A message it cannot read is left to the original, which logs it.
    """
    if session is None:
        return None
    try:
        _, frames = session.feed_identities(msg, copy=False)
        return t.cast(dict, session.deserialize(frames, content=False, copy=False))
    except Exception:  # noqa: BLE001 - invalid messages are the original's to report
        return None


def status_parent(kernel: t.Any, channel: str, parent: dict | None) -> dict | None:
    """The request a status is published for, found as `Kernel._publish_status` finds it."""
    return parent or kernel.get_parent(channel)


# -- BaseComm._reply_subshell_for (ipykernel 7.4.0) ------------------------------------------


def honour_frontend_subshell() -> bool:
    """Make comm messages run on the subshell the frontend chose, except replies to the kernel's own requests
    (comms.py says why).

    ipykernel routes a frontend's comm message to the subshell that last
    published on the comm; we keep that only when the message answers a
    request id the comm is waiting for.  Returns False (and changes nothing)
    when this ipykernel has no such routing.
    """
    try:
        from ipykernel.comm.comm import BaseComm, _request_id
    except ImportError:
        return False
    ipykernel_route = getattr(BaseComm, "_reply_subshell_for", None)
    if ipykernel_route is None:
        return False
    if getattr(ipykernel_route, "honours_frontend", False):
        return True

    def route(comm: t.Any, data: t.Any, frontend_choice: str | None) -> str | None:
        pending = getattr(comm, "_reply_subshell_ids", {})
        if frontend_choice is not None and _request_id(data) not in pending:
            return frontend_choice
        return t.cast("str | None", ipykernel_route(comm, data, frontend_choice))

    route.honours_frontend = True  # type: ignore[attr-defined]
    BaseComm._reply_subshell_for = route  # type: ignore[method-assign]
    return True


# -- HistoryManager.writeout_cache (IPython 9.18.1) -------------------------------------------


class HistoryWrittenInOrder(HistoryManager):
    """IPython's HistoryManager, whose writer never holds the cache's lock while sqlite commits.

    IPython's history thread writes a cell under `db_input_cache_lock`, and the
    next cell's `store_inputs` takes that lock: each cell waited for the last
    one's commit (an fsync).  Here the lock is held only to take the cached
    rows out; a second lock keeps writers one at a time, so every cell is still
    written, in order, by whichever thread writes (the history thread, a
    history lookup, the end of the session at exit).
    """

    def __init__(self, *args: t.Any, **kwargs: t.Any):
        self._writer = threading.Lock()
        super().__init__(*args, **kwargs)

    def writeout_cache(self, conn: sqlite3.Connection | None = None) -> None:
        """`HistoryManager.writeout_cache`, with the cached rows taken out under the lock and written after it."""
        if not self.enabled:
            return
        if conn is None:
            conn = self.db
        with self._writer:
            with self.db_input_cache_lock:
                inputs, self.db_input_cache = self.db_input_cache, []
            try:
                self._write_rows(conn, "history", inputs)
            except _integrity_error():
                self.new_session(conn)
                print(
                    "ERROR! Session/line number was not unique in",
                    "database. History logging moved to new session",
                    self.session_number,
                )
                try:
                    # Try writing to the new session. If this fails, don't recurse.
                    self._write_rows(conn, "history", inputs)
                except _integrity_error():
                    pass
            with self.db_output_cache_lock:
                outputs, self.db_output_cache = self.db_output_cache, []
            try:
                self._write_rows(conn, "output_history", outputs)
            except _integrity_error():
                print(
                    "!! Session/line number for output was not unique",
                    "in database. Output will not be stored.",
                )

    def _write_rows(self, conn: sqlite3.Connection, table: str, rows: list[tuple]) -> None:
        """`_writeout_input_cache` / `_writeout_output_cache` of the rows taken out (one transaction)."""
        if not rows:
            return  # the original opens and commits an empty transaction: nothing reaches the file
        values = "(?, ?, ?, ?)" if table == "history" else "(?, ?, ?)"
        with conn:
            for row in rows:
                conn.execute(f"INSERT INTO {table} VALUES {values}", (self.session_number, *row))


def _integrity_error() -> type[Exception]:
    import sqlite3

    return sqlite3.IntegrityError
