"""Unit tests: the one busy/idle rule (kernel/status.py), on real executions and requests, no kernel; and the
main shell's state that kernel_info_reply's execution_state reports."""

from __future__ import annotations

from cancelkernel.kernel.status import BusyIdle, MainShellState
from cancelkernel.runtime.execution import Execution


def request(msg_type: str, msg_id: str = "r") -> dict:
    return {"header": {"msg_type": msg_type, "msg_id": msg_id}}


def rule_with(running: list[Execution], parents: dict[str, dict]) -> BusyIdle:
    return BusyIdle(lambda: running, parents)


def test_no_status_for_our_own_control_requests() -> None:
    rule = rule_with([], {})
    assert rule.statuses("busy", "control", request("cancel_status_request")) == []
    assert rule.statuses("idle", "control", request("cancel_status_request")) == []
    interrupt = request("interrupt_request")
    assert rule.statuses("idle", "control", interrupt) == [("idle", "control", interrupt)]


def test_a_comms_idle_beside_a_running_cell_is_followed_by_busy_for_that_cell() -> None:
    cell = request("execute_request", "cell")
    execution = Execution(msg_id="cell", generation=1, code="x", thread_id=1)
    rule = rule_with([execution], {"cell": cell})
    comm = request("comm_msg")
    assert rule.statuses("busy", "shell", comm) == [("busy", "shell", comm)]
    assert rule.statuses("idle", "shell", comm) == [("idle", "shell", comm), ("busy", "shell", cell)]
    assert rule.statuses("idle", "shell", cell) == [("idle", "shell", cell)]  # not a comm message's idle


def test_a_comms_idle_with_no_cell_running_is_just_idle() -> None:
    comm = request("comm_open")
    assert rule_with([], {}).statuses("idle", "shell", comm) == [("idle", "shell", comm)]
    gone = Execution(msg_id="ended", generation=2, code="x", thread_id=1)  # its request already dropped
    assert rule_with([gone], {}).statuses("idle", "shell", comm) == [("idle", "shell", comm)]


def test_execution_state_is_the_main_shells_last_status() -> None:
    state = MainShellState()
    assert state.execution_state() == "idle"  # a kernel that answers has started
    state.published("starting", "shell", None)
    assert state.execution_state() == "idle"
    cell = request("execute_request", "cell")
    state.published("busy", "shell", cell)
    assert state.execution_state() == "busy"
    state.published("busy", "control", request("kernel_info_request"))  # on control: not the main shell
    state.published("idle", "control", request("kernel_info_request"))
    in_subshell = {"header": {"msg_type": "execute_request", "msg_id": "s", "subshell_id": "sub1"}}
    state.published("idle", "shell", in_subshell)  # a subshell's cell ending: not the main shell
    assert state.execution_state() == "busy"
    state.published("idle", "shell", cell)
    assert state.execution_state() == "idle"


def test_a_kernel_info_answered_by_the_main_shell_does_not_make_it_busy() -> None:
    state = MainShellState()
    state.published("busy", "shell", request("kernel_info_request"))
    assert state.execution_state() == "idle"  # answering it: nothing else runs on the main shell
    state.published("busy", "shell", request("complete_request"))
    assert state.execution_state() == "busy"
