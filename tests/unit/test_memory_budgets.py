"""Memory budgets as pure logic: the directive and metadata grammar, the guard's rule, the holders report,
the death record."""

from __future__ import annotations

import os
import typing as t
import weakref

import pytest

from cancelkernel import directives, last_cell, protocol
from cancelkernel.runtime.execution import Budgets, Execution
from cancelkernel.runtime.holders import biggest_names, describe_type, estimate, release_stopped_frames
from cancelkernel.runtime.memory_guard import GUARD_MIN_GROWTH, GuardSettings, MemoryGuard, derived_margin

GiB, MiB = 2**30, 2**20


def test_budget_directive_and_metadata_read_sizes() -> None:
    assert directives.parse_directive("%%budget memory=2G wall=30").memory_budget == 2 * GiB
    assert directives.parse_directive("%%budget memory=500MB").memory_budget == 500 * 10**6
    assert directives.from_metadata({"memory_budget": "1.5GiB"}).memory_budget == int(1.5 * GiB)
    assert directives.from_metadata({"memory_budget": 1024}).memory_budget == 1024
    merged = directives.merge(
        directives.CellDirectives(memory_budget=GiB), directives.from_metadata({"memory_budget": "512M"})
    )
    assert merged.memory_budget == 512 * MiB


@pytest.mark.parametrize("bad", ["2 apples", "-1G", "1e30", True])
def test_a_bad_memory_budget_is_refused_with_the_one_message(bad) -> None:
    with pytest.raises(directives.BudgetError, match="is not a size: write bytes as a number"):
        directives.from_metadata({"memory_budget": bad})
    if isinstance(bad, str) and " " not in bad:
        with pytest.raises(directives.BudgetError, match=r"memory=.* is not a size"):
            directives.parse_directive(f"%%budget memory={bad}")


def test_the_derived_margin_stays_within_5_and_25_percent_of_the_limit() -> None:
    assert derived_margin(GiB) == 200_000_000  # 5 GB/s for 40 ms
    assert derived_margin(100 * GiB) == 5 * GiB  # 5 %
    assert derived_margin(256 * MiB) == 64 * MiB  # 25 %


def _execution(memory_budget: int = 0, start: int = 100 * MiB) -> Execution:
    execution = Execution(msg_id="m", generation=1, code="x", thread_id=1, budgets=Budgets(memory=memory_budget))
    execution.memory.resident_start = start
    return execution


def test_the_guard_blames_only_a_cell_that_grew_the_kernel() -> None:
    guard = MemoryGuard(GuardSettings(enabled=True, margin=100 * MiB, data_limit=False))
    guard.view = guard.view.__class__(limit=GiB, source="cgroup v1", cgroup=None)
    grew, came_later = _execution(start=100 * MiB), _execution(start=900 * MiB)
    guard.resident, guard.charged = 900 * MiB, 950 * MiB  # past the guard at 1 GiB - 100 MiB
    assert guard.over(grew) == protocol.REASON_MEMORY_BUDGET
    assert grew.memory.kind == protocol.MEMORY_GUARD
    assert grew.memory.at_trip == 950 * MiB
    assert grew.memory.limit == GiB
    assert guard.over(came_later) is None  # grew by less than GUARD_MIN_GROWTH since it began
    assert 900 * MiB - came_later.memory.resident_start < GUARD_MIN_GROWTH
    guard.charged = 900 * MiB  # below the guard: nobody
    assert guard.over(_execution(start=0)) is None
    off = MemoryGuard(GuardSettings(enabled=False, data_limit=False))
    off.resident, off.charged = 10 * GiB, 10 * GiB
    assert off.guard_at is None
    assert off.over(_execution(start=0)) is None


def test_a_cell_budget_counts_growth_of_the_resident_set_since_the_cell_began() -> None:
    guard = MemoryGuard(GuardSettings(enabled=False, data_limit=False))
    execution = _execution(memory_budget=200 * MiB, start=100 * MiB)
    guard.resident = 300 * MiB  # grew by exactly the budget: not past it
    assert guard.over(execution) is None
    guard.resident = 301 * MiB
    assert guard.over(execution) == protocol.REASON_MEMORY_BUDGET
    assert execution.memory.kind == protocol.MEMORY_BUDGET


class Frame:
    """Duck-typed like a pandas DataFrame (memory_usage(deep=True), columns, shape)."""

    columns: t.ClassVar[list[str]] = ["a", "b"]
    shape = (1000, 2)

    def memory_usage(self, deep: bool = False) -> list[int]:
        assert deep
        return [5 * MiB, 3 * MiB]


class Array:
    """Duck-typed like a numpy array (nbytes, shape, dtype)."""

    nbytes = 8 * MiB
    shape = (1024, 1024)
    dtype = "float64"


def test_holders_report_the_biggest_names_with_type_and_size() -> None:
    namespace = {
        "held": [bytearray(MiB) for _ in range(10)],
        "frame": Frame(),
        "array": Array(),
        "text": "x" * (3 * MiB),
        "small": [1, 2, 3],
        "_hidden": bytearray(20 * MiB),
        "os": os,
    }
    found = biggest_names(namespace)
    assert {h["name"] for h in found} == {"held", "array", "frame", "text"}
    assert [h["bytes"] for h in found] == sorted((h["bytes"] for h in found), reverse=True)
    assert found[0]["name"] == "held"
    by_name = {h["name"]: h for h in found}
    assert by_name["held"]["type"] == "list of 10 bytearray"
    assert abs(by_name["held"]["bytes"] - 10 * MiB) < 64 * 1024
    assert by_name["array"]["type"] == "Array float64 (1024, 1024)"
    assert by_name["array"]["bytes"] == 8 * MiB
    assert "small" not in by_name
    assert "_hidden" not in by_name
    assert "os" not in by_name
    assert estimate(Frame()) == 8 * MiB
    assert "frame" in by_name
    assert by_name["frame"]["bytes"] == 8 * MiB
    assert by_name["held"]["text"] == "held (list of 10 bytearray, 10 MiB)"


def test_a_big_container_is_estimated_from_a_sample() -> None:
    big = [bytearray(1000) for _ in range(100_000)]
    size = estimate(big)
    assert 0.9 * 100_000 * 1000 < size < 1.2 * 100_000 * 1057  # bytearray header included
    assert describe_type({"a": 1, "b": 2}) == "dict of 2 int"


def test_the_locals_of_a_stopped_cells_functions_are_named_then_let_go() -> None:
    """Only frames from the cell inward; never the namespace of a module-level frame."""
    namespace: dict = {"kept": bytearray(2 * 2**20)}
    cell = (
        "def inner():\n    local = [Chunk(2**20) for _ in range(3)]\n    seen.append(weakref.ref(local[0]))\n"
        "    raise KeyboardInterrupt\ninner()"
    )
    seen: list = []
    namespace.update(weakref=weakref, seen=seen, Chunk=type("Chunk", (bytearray,), {}))
    try:
        exec(compile(cell, "<cell 1>", "exec"), namespace)
    except KeyboardInterrupt as exc:
        stopped = exc
    released = release_stopped_frames(stopped.__traceback__)
    assert [h["name"] for h in released] == ["local in inner()"], released
    assert released[0]["type"] == "list of 3 Chunk"
    assert released[0]["bytes"] >= 3 * 2**20
    assert seen[0]() is None  # the traceback no longer keeps it alive
    # The module-level frame's namespace is the user's
    assert "kept" in namespace
    assert len(namespace["kept"]) == 2 * 2**20


def test_a_death_is_oom_only_with_a_count_that_rose(tmp_path) -> None:
    events = tmp_path / "memory.events"
    events.write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    record = last_cell.new_record(
        where="Cell In[7], line 3 (l.append(x))", elapsed=2.5, charged=int(0.98 * GiB), limit=GiB,
        cgroup=str(tmp_path), cgroup_version=2, cgroup_oom_kills=0, machine_oom_kills=None,
    )  # fmt: skip
    death = last_cell.death_of(record)
    assert death["cause"] == last_cell.CAUSE_OOM
    assert "rose from 0 to 1" in death["evidence"]
    assert death["message"] == (
        "was killed by the out-of-memory killer (last seen at 0.98 of 1 GiB) while running Cell In[7], "
        "line 3 (l.append(x)), 2.5 s into it"
    )
    record["cgroup_oom_kills"] = 1  # no kill since the record: no claim
    assert last_cell.death_of(record)["cause"] == last_cell.CAUSE_UNKNOWN


def test_a_record_is_the_previous_kernels_only_once_its_process_is_gone(tmp_path) -> None:
    path = str(tmp_path / "running.json")
    last_cell.write(path, last_cell.new_record(where="here"))  # our own pid: alive
    assert last_cell.previous_kernel(path) is None
    assert os.path.exists(path)
    last_cell.write(path, {**last_cell.new_record(where="here"), "pid": 2**22 + 12345})  # no such process
    previous = last_cell.previous_kernel(path)
    assert previous is not None
    assert previous["cause"] == last_cell.CAUSE_UNKNOWN
    assert not os.path.exists(path)
