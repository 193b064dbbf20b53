"""What the kernel says about executions: reply metadata and the cancel status, pure functions of the state.

`reply_metadata(execution, reply)` is execute_reply `metadata.cancelkernel`;
`cancel_status(...)` is the content of cancel_status_reply; `running_executions`
is kernel_info_reply's `cancelkernel.executions`.  Fields: docs/protocol.md.
"""

from __future__ import annotations

import typing as t

from .. import protocol
from ..frames import Frame, as_dicts, innermost_user, stopped_at
from ..runtime.execution import Execution, StackRecord
from .events import memory_record

INTERRUPT_ENAMES = ("KeyboardInterrupt", "CancelledError")


def reply_metadata(execution: Execution, reply: dict, exec_thread: str) -> dict:
    """execute_reply metadata.cancelkernel for a finished execution (and its reply content)."""
    report = execution.report
    interrupted, reason = _interrupted(execution, reply)
    frames = report.frames if report is not None else []
    taken = execution.dump or execution.stack
    if interrupted and not frames and taken is not None:
        frames = taken.frames  # no traceback reached the shell (the worker was abandoned): the stack the kernel took
    metadata: dict[str, t.Any] = {
        "msg_id": execution.msg_id,
        "interrupted": interrupted,
        "reason": reason,
        "cancel_requested": execution.cancelled,
        "elapsed": round(execution.elapsed(), 6),
        "stopped_at": stopped_at(frames) if frames else None,
        "stack": as_dicts(frames) if frames else None,
        "interrupts_sent": execution.cancel.interrupts_sent,
        # Seconds from the start to the first interrupt (the kernel's clock):
        # elapsed minus this is how long stopping took.
        "interrupted_after": round(execution.cancel.time - execution.started, 6)
        if execution.cancel.time is not None
        else None,
        "abandoned_thread": execution.abandoned_thread,
        "exec_thread": exec_thread,
        "budgets": {
            "wall_budget": execution.budgets.wall,
            "quiet_budget": execution.budgets.quiet,
            "timeout": execution.budgets.timeout,
            "memory_budget": execution.budgets.memory or None,
        },
    }
    if execution.dump is not None:
        metadata["stack_source"] = execution.dump.source
        if not metadata["stack"]:
            metadata["stack"] = as_dicts(execution.dump.frames)
            metadata["stopped_at"] = stopped_at(execution.dump.frames)
    if execution.watch.tripped:
        metadata["tripped"] = execution.watch.tripped
    if execution.memory.kind is not None:
        metadata["memory"] = memory_record(execution)
    if execution.watch.unresponsive:
        metadata["unresponsive"] = True
        metadata["unresponsive_why"] = execution.watch.unresponsive_why
    if execution.dump is not None and execution.watch.starved:
        # faulthandler's stack and the watchdog kept from running: one C call held the GIL this long.
        metadata["gil_held"] = round(execution.watch.starved, 3)
    if execution.checkpoint:
        metadata["checkpoint"] = {
            "before": execution.checkpoint.get("before"),
            "autosave": execution.checkpoint.get("autosave"),
        }
    return metadata


def _interrupted(execution: Execution, reply: dict) -> tuple[bool, str | None]:
    """Whether the cell ended interrupted (by a cancel, or its deadline), and why."""
    errored = reply.get("status") == "error"
    if execution.cancelled and errored and (execution.report is not None or reply.get("ename") in INTERRUPT_ENAMES):
        return True, execution.cancel.reason
    if errored and reply.get("ename") == "DeadlineExceeded":
        return True, protocol.REASON_DEADLINE
    return False, None


def refused_metadata(msg_id: str) -> dict:
    """A cell that was not run (a bad budget)."""
    return {"msg_id": msg_id, "interrupted": False, "reason": None, "refused": True}


def cancelled_before_start_metadata(msg_id: str, exec_thread: str) -> dict:
    """A cell an interrupt named before it started: it never ran."""
    return {
        "msg_id": msg_id,
        "interrupted": True,
        "reason": protocol.REASON_REQUEST,
        "before_start": True,
        "cancel_requested": True,
        "elapsed": 0.0,
        "stopped_at": None,
        "stack": None,
        "interrupts_sent": 1,
        "abandoned_thread": None,
        "exec_thread": exec_thread,
    }


def execution_state(execution: Execution) -> str:
    if execution.watch.unresponsive:
        return protocol.STATE_UNRESPONSIVE
    if execution.cancelled:
        return protocol.STATE_CANCELLING
    return protocol.STATE_RUNNING


def running_executions(running: list[Execution]) -> list[dict]:
    """kernel_info_reply cancelkernel.executions: each cell running now, its shell, for how long, in which state."""
    return [
        {
            "msg_id": e.msg_id,
            "subshell_id": e.subshell_id,
            "elapsed": round(e.elapsed(), 4),
            "state": execution_state(e),
        }
        for e in running
    ]


def stack_record(execution: Execution, record: StackRecord) -> dict:
    return {
        "execution": execution.msg_id,
        "why": record.why,
        "elapsed": round(record.elapsed, 4),
        "frames": as_dicts(record.frames),
        "stopped_at": stopped_at(record.frames),
    }


def execution_status(execution: Execution, stack: list[Frame] | None = None, innermost: dict | None = None) -> dict:
    """One running execution in cancel_status_reply; `where`/`line` say where its live stack is now,
    `innermost` its thread's top frame."""
    # No cell frame yet (a worker still picking the cell up): the thread is not in the cell, say nothing.
    here = innermost_user(stack) if stack and any(f.is_cell for f in stack) else None
    return {
        "msg_id": execution.msg_id,
        "subshell_id": execution.subshell_id,
        "first_line": execution.first_line,
        "elapsed": round(execution.elapsed(), 4),
        "seconds_since_output": round(execution.watch.seconds_since_output(), 4),
        "wall_budget": execution.budgets.wall,
        "quiet_budget": execution.budgets.quiet,
        "memory_budget": execution.budgets.memory or None,
        "memory_start": execution.memory.resident_start,
        "interrupts_sent": execution.cancel.interrupts_sent,
        "cancel_reason": execution.cancel.reason,
        "state": execution_state(execution),
        "where": here.where() if here is not None else None,
        "line": (here.line or None) if here is not None else None,
        "innermost": innermost,
        "stack": as_dicts(stack or []),
    }


def cancel_status(
    running: list[Execution],
    *,
    stacks: dict[str, list[Frame]],
    innermost: dict[str, dict | None] | None = None,
    exec_thread: str,
    native_flag: bool,
    interrupt_grace: float,
    dump_file: str | None,
    last_stack: dict | None,
    abandoned_threads: list[dict],
    memory: dict | None = None,
) -> dict:
    """cancel_status_reply content."""
    tops = innermost or {}
    return {
        "status": "ok",
        "exec_thread": exec_thread,
        "native_flag": native_flag,
        "interrupt_grace": interrupt_grace,
        # The parent shell's, else the first.
        "execution": execution_status(running[0], stacks.get(running[0].msg_id), tops.get(running[0].msg_id))
        if running
        else None,
        "executions": [execution_status(e, stacks.get(e.msg_id), tops.get(e.msg_id)) for e in running],
        "last_stack": last_stack,
        "dump_file": dump_file,
        "abandoned_threads": abandoned_threads,
        "memory": memory,
    }
