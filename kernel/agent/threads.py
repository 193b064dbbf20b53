"""Threads of the agent client's own, which leave no event loop behind.

jupyter_client's blocking calls (KernelManager.start_kernel, shutdown_kernel,
...) run through jupyter_core's run_sync, which makes an asyncio loop for each
thread that calls them and never closes it: three file descriptors per
thread, for as long as the process lives.  A spare kernel's start, a retired
kernel's reaping and a submitted cell each run on a thread of their own; a
notebook of `run_notebooks` and an MCP tool call run on pool threads.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import typing as t

T = t.TypeVar("T")


def close_this_threads_loop() -> None:
    """Close the event loop set for the calling thread, if any and idle (never the main thread's)."""
    if threading.current_thread() is threading.main_thread():
        return
    try:
        loop = asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:  # none was set for this thread
        return
    if not loop.is_running() and not loop.is_closed():
        loop.close()
    asyncio.set_event_loop(None)


def leaving_no_loop(fn: t.Callable[..., T]) -> t.Callable[..., T]:
    """fn, which closes the calling thread's event loop when it returns (for pool threads: a notebook, an MCP tool)."""

    @functools.wraps(fn)
    def call(*args: t.Any, **kwargs: t.Any) -> T:
        try:
            return fn(*args, **kwargs)
        finally:
            close_this_threads_loop()

    return call


def start_thread(target: t.Callable[..., object], *args: object, name: str) -> threading.Thread:
    """A daemon thread running target(*args), whose event loop (if a blocking call made one) is closed when it ends."""

    def run() -> None:
        try:
            target(*args)
        finally:
            close_this_threads_loop()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread
