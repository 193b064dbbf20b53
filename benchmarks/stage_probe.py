"""Loaded into a kernel by benchmarks/stages.py (`--IPKernelApp.exec_files`): timestamps the stages of a request.

Wraps the kernel's own methods (stock's and ours alike) so each stage appends
(name, perf_counter, thread name, thread CPU time) to `STAMPS`; `take()` hands them over and
starts again.  perf_counter is CLOCK_MONOTONIC on Linux, so the stamps compare
with the client's.  A probe for measuring only: it changes no behaviour, and
costs about a microsecond per stamp.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time

STAMPS: list[tuple[str, float, str, float]] = []
_clock = time.perf_counter
_cpu = time.thread_time


def stamp(name: str) -> None:
    """(stage, wall clock, thread, the thread's CPU time so far)."""
    STAMPS.append((name, _clock(), threading.current_thread().name, _cpu()))


def take() -> list[tuple[str, float, str, float]]:
    taken = STAMPS[:]
    del STAMPS[: len(taken)]
    return taken


def _wrap(owner: object, attr: str, before: str | None, after: str | None) -> None:
    original = getattr(owner, attr)
    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def async_wrapper(*args, **kwargs):
            if before:
                stamp(before)
            try:
                return await original(*args, **kwargs)
            finally:
                if after:
                    stamp(after)

        setattr(owner, attr, async_wrapper)
        return

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if before:
            stamp(before)
        try:
            return original(*args, **kwargs)
        finally:
            if after:
                stamp(after)

    setattr(owner, attr, wrapper)


def _wrap_send(session: object) -> None:
    original = session.send  # type: ignore[attr-defined]

    def send(stream, msg_or_type, *args, **kwargs):
        kind = msg_or_type if isinstance(msg_or_type, str) else msg_or_type.get("msg_type", "?")
        if kind == "status":
            content = args[0] if args else kwargs.get("content") or {}
            kind = f"status:{content.get('execution_state')}"
        stamp(f"send {kind} <")
        try:
            return original(stream, msg_or_type, *args, **kwargs)
        finally:
            stamp(f"send {kind} >")

    session.send = send  # type: ignore[attr-defined]


def install() -> None:
    from IPython import get_ipython

    shell = get_ipython()
    kernel = shell.kernel
    cls = type(kernel)
    _wrap(cls, "shell_channel_thread_main", "shell thread: message in", "shell thread: forwarded")
    _wrap(cls, "dispatch_shell", "main: dispatch_shell <", "main: dispatch_shell >")
    _wrap(cls, "dispatch_control", "control: message in", "control: done")
    _wrap(cls, "interrupt_request", "control: interrupt_request <", "control: interrupt_request >")
    _wrap(kernel, "do_execute", "main: do_execute <", "main: do_execute >")
    _wrap(shell, "run_cell", "main: run_cell <", "main: run_cell >")
    _wrap(shell, "run_code", "main: run_code <", "main: run_code >")
    _wrap(shell, "transform_cell", None, "main: transformed")
    _wrap(shell.history_manager, "store_inputs", "main: store_inputs <", "main: store_inputs >")
    _wrap(type(shell.displayhook), "__call__", "main: displayhook <", "main: displayhook >")
    _wrap(shell, "_showtraceback", "main: traceback shown <", "main: traceback shown >")
    if hasattr(shell, "show_interrupt"):
        _wrap(shell, "show_interrupt", "main: interrupt report <", "main: interrupt report >")
    runtime = getattr(kernel, "runtime", None)
    if runtime is not None:
        owner = runtime.sigint
        _wrap(type(owner), "_on_sigint", "main: SIGINT handler <", None)
        owner.install()  # the handler was bound before the wrap
        _wrap(runtime, "begin", "main: runtime.begin <", "main: runtime.begin >")
        _wrap(runtime, "end", "main: runtime.end <", "main: runtime.end >")
        from cancelkernel.kernel import upstream

        _wrap(upstream, "abort_before_reply", "main: aborting queued <", "main: aborting queued >")
        _wrap(kernel.control_requests, "interrupt", "control: interrupt <", "control: interrupt >")
    from zmq.eventloop.zmqstream import ZMQStream

    # The shell channel thread forwards a reply through the shell stream, which sends it on a later loop pass.
    _wrap(ZMQStream, "send_multipart", "stream: send queued", None)
    _wrap(ZMQStream, "_handle_send", "stream: sending <", "stream: sent >")
    _wrap_send(kernel.session)


install()
