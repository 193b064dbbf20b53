"""MCP tasks without a kernel: each protocol generation's task shapes and statuses, the store, the negotiation."""

from __future__ import annotations

import typing as t

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from cancelkernel.mcp import tasks


def run_in_loop(fn: t.Callable[[], t.Any]) -> t.Any:
    async def main() -> t.Any:
        return fn()

    return anyio.run(main)


def answer(is_error: bool, why: str = "the cell finished") -> dict:
    return {"content": [], "structuredContent": {"why": why}, "isError": is_error}


def test_2025_11_25_an_error_answer_fails_the_task_and_a_cancel_is_final() -> None:
    def check() -> None:
        failed = tasks.TaskRun("t1", "execute", "stdio", modern=False)
        failed.ended(answer(True, "the cell raised ZeroDivisionError"))
        assert (failed.status, failed.status_message()) == ("failed", "the cell raised ZeroDivisionError")
        wire = failed.wire()
        assert wire["ttl"] is None
        assert wire["pollInterval"] == tasks.POLL_MS
        assert "ttlMs" not in wire
        stopped: list[str] = []
        cancelled = tasks.TaskRun("t2", "execute", "stdio", modern=False)
        cancelled.cancel()  # before the tool said what it runs: the interrupt waits for it
        assert cancelled.status == "cancelled"
        assert stopped == []
        cancelled.follow("e1 on kernel default", lambda: None, lambda: stopped.append("interrupt"), execution_id="e1")
        assert stopped == ["interrupt"]
        cancelled.ended(answer(True, "the cell was stopped on request"))
        assert cancelled.status == "cancelled"
        assert cancelled.done.is_set()
        assert cancelled.result == answer(True, "the cell was stopped on request")

    run_in_loop(check)


def test_2026_07_28_an_error_answer_completes_and_a_cancel_is_an_ack() -> None:
    def check() -> None:
        done = tasks.TaskRun("t1", "execute", "stdio", modern=True)
        done.ended(answer(True))
        detailed = done.detailed()
        assert detailed["status"] == "completed"
        assert detailed["result"] == answer(True)
        assert detailed["ttlMs"] is None
        assert detailed["pollIntervalMs"] == tasks.POLL_MS
        assert "ttl" not in detailed
        asked = tasks.TaskRun("t2", "execute", "stdio", modern=True)
        stopped: list[str] = []
        asked.follow("e2 on kernel default", lambda: None, lambda: stopped.append("interrupt"))
        asked.cancel()
        assert asked.status == "working"
        assert stopped == ["interrupt"]
        assert "tasks/cancel" in asked.status_message()
        broken = tasks.TaskRun("t3", "execute", "stdio", modern=True)
        broken.ended(error=MCPError(-32603, "boom"))
        assert broken.detailed()["error"] == {"code": -32603, "message": "boom"}

    run_in_loop(check)


def test_the_store_finds_lists_and_refuses() -> None:
    async def check() -> None:
        store = tasks.Tasks(keep=1)
        with pytest.raises(MCPError, match="not running tasks"):
            store.start("execute", "s", lambda: anyio.sleep(0), modern=False)
        async with store.running():
            gate = anyio.Event()

            async def call() -> dict:
                await gate.wait()
                return answer(False)

            first = store.start("execute", "s1", call, modern=False)
            store.start("execute", "s2", call, modern=False)
            assert store.get({"taskId": first.id}) is first
            assert len(first.id) > 20
            assert [x["taskId"] for x in store.page("s1", None)["tasks"]] == [first.id]
            for bad in ({}, {"taskId": 3}, {"taskId": "nope"}):
                with pytest.raises(MCPError) as refused:
                    store.get(bad)
                assert refused.value.code == -32602
            with pytest.raises(MCPError):
                store.page("s1", "x")
            gate.set()
            result = await first.answer()
            assert result["_meta"][tasks.RELATED_TASK] == {"taskId": first.id}
            assert first.status == "completed"

    anyio.run(check)


def test_negotiation_at_2025_11_25_only() -> None:
    legacy = tasks._with_capability({"protocolVersion": "2025-11-25", "capabilities": {}})
    assert legacy["capabilities"]["tasks"]["requests"] == {"tools": {"call": {}}}
    other = tasks._with_capability({"protocolVersion": "2025-06-18", "capabilities": {}})
    assert "tasks" not in other["capabilities"]
    listed = tasks._with_task_support({"tools": [{"name": "execute"}, {"name": "status"}, {"name": "run_notebook"}]})
    assert [x.get("execution") for x in listed["tools"]] == [
        {"taskSupport": "optional"},
        None,
        {"taskSupport": "optional"},
    ]
