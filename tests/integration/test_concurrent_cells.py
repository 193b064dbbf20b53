"""Two cells at once (the parent shell and a subshell), both exec modes: IPython's per-cell state stays each cell's own.

IPython's shell keeps per-cell state on shared objects (kernel/concurrent_cells.py
lists what and how each is made safe).  These tests run many short cells on the
parent shell and a subshell at the same time, so that their bookkeeping collides
often, and check what stock got wrong: a cell ending in `KeyError: 'exit'`
(builtins half swapped), an execute_result sent twice or into the other cell,
two stored cells with one number, and patches (builtins, sys.displayhook,
sys.excepthook, input) left in place or lost after the cells.
"""

from __future__ import annotations

import random

import pytest

from cancelkernel.testing import MODES, control_request, create_subshell, execute, running_kernel, send_execute

PAIRS = 150

# Inside a cell, the patches every cell makes are in place, once, and the originals they undo are not ours.
CHECK_PATCHES = """
import builtins, sys
_sh = get_ipython()
_k = _sh.kernel
_state = {
    "exit hidden": "exit" not in builtins.__dict__ and "quit" not in builtins.__dict__,
    "get_ipython": builtins.__dict__.get("get_ipython") == _sh.get_ipython,
    "exit saved": type(_sh.builtin_trap._orig_builtins.get("exit")).__name__ == "Quitter",
    "builtin trap level": _sh.builtin_trap._nested_level == 1,
    "display trap level": _sh.display_trap._nested_level == 1,
    "displayhook": sys.displayhook is _sh.displayhook and _sh.display_trap.old_hook is not _sh.displayhook,
    "excepthook": sys.excepthook == _sh.excepthook and _sh._saved_excepthook != _sh.excepthook,
    "input": builtins.input == _k.raw_input and _k._sys_raw_input != _k.raw_input,
}
[name for name, ok in _state.items() if not ok]
"""


def _collect(kc, msg_ids: set[str]) -> tuple[dict[str, dict], dict[str, list[dict]]]:
    """Every reply of `msg_ids`, and every iopub message of theirs up to each one's idle."""
    replies: dict[str, dict] = {}
    iopub: dict[str, list[dict]] = {m: [] for m in msg_ids}
    idle: set[str] = set()
    while set(replies) != msg_ids or idle != msg_ids:
        if set(replies) != msg_ids:
            msg = kc.get_shell_msg(timeout=30)
            parent = msg["parent_header"].get("msg_id")
            if parent in msg_ids:
                assert parent not in replies, f"two replies for {parent}"
                replies[parent] = msg
            continue
        msg = kc.get_iopub_msg(timeout=30)
        parent = msg["parent_header"].get("msg_id")
        if parent not in msg_ids:
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            idle.add(parent)
        else:
            iopub[parent].append(msg)
    return replies, iopub


@pytest.mark.parametrize("mode", MODES)
def test_cells_on_two_shells_keep_their_own_state(mode: str) -> None:
    """300 cells, two at a time (parent shell + subshell): own value, own number,
    one execute_result each; patches intact."""
    rng = random.Random(20261201)
    with running_kernel(mode) as (_, kc):
        subshell = create_subshell(kc)
        expected: dict[str, int] = {}
        stored: dict[str, bool] = {}
        for i in range(PAIRS):
            sent = set()
            for j, shell in enumerate((None, subshell)):
                value = 2 * i + j
                store = rng.random() < 0.5
                # A value to display, and on some cells a magic (its own builtin trap) and an error (a traceback).
                code = [f"{value}"]
                if rng.random() < 0.2:
                    code.insert(0, "%lsmagic")
                msg_id = send_execute(kc, "\n".join(code), subshell_id=shell, store_history=store)
                expected[msg_id], stored[msg_id] = value, store
                sent.add(msg_id)
            replies, iopub = _collect(kc, sent)
            for msg_id in sent:
                content = replies[msg_id]["content"]
                assert content["status"] == "ok", (
                    f"cell {expected[msg_id]}: {content.get('ename')}: {content.get('evalue')}"
                )
                results = [m for m in iopub[msg_id] if m["msg_type"] == "execute_result"]
                assert len(results) == 1, f"cell {expected[msg_id]} got {len(results)} execute_results"
                data = results[0]["content"]
                assert data["data"]["text/plain"] == str(expected[msg_id]), (
                    f"cell {expected[msg_id]} showed another cell's value"
                )
                assert data["execution_count"] == content["execution_count"], (
                    data["execution_count"],
                    content["execution_count"],
                )
                if stored[msg_id]:
                    stored[msg_id] = content["execution_count"]
        numbers = [n for n in stored.values() if n is not False]
        assert len(numbers) == len(set(numbers)), "two stored cells got one execution count"
        broken = execute(kc, CHECK_PATCHES, user_expressions={"broken": "_"})["content"]
        assert broken["status"] == "ok", broken
        assert broken["user_expressions"]["broken"]["data"]["text/plain"] == "[]", broken["user_expressions"]


def test_subshell_cells_beside_a_long_parent_cell_keep_patches_in_place() -> None:
    """While a parent cell runs, many subshell cells start and end: the parent cell still sees every patch in place."""
    with running_kernel("main") as (_, kc):
        subshell = create_subshell(kc)
        wait_for_go = "import time\nwhile not globals().get('_go_on'):\n    time.sleep(0.01)\n"
        parent = send_execute(kc, wait_for_go + CHECK_PATCHES, subshell_id=None, store_history=True)
        for i in range(100):
            msg_id = send_execute(kc, f"{i}", subshell_id=subshell, store_history=True)
            replies, _ = _collect(kc, {msg_id})
            assert replies[msg_id]["content"]["status"] == "ok", replies[msg_id]["content"]
        done = send_execute(kc, "_go_on = True", subshell_id=subshell, store_history=False)
        replies, iopub = _collect(kc, {parent, done})
        assert replies[parent]["content"]["status"] == "ok", replies[parent]["content"]
        shown = [m["content"]["data"]["text/plain"] for m in iopub[parent] if m["msg_type"] == "execute_result"]
        assert shown == ["[]"], shown
        control_request(kc, "delete_subshell_request", {"subshell_id": subshell})
