"""Unit tests: the one duration grammar, and the budget and timeout directives (pure parsing, no kernel)."""

from __future__ import annotations

import pytest

from cancelkernel import directives as budgets
from cancelkernel import protocol
from cancelkernel.directives import BudgetError
from cancelkernel.durations import MAX_SECONDS, DurationError, parse_duration, refusal
from cancelkernel.runtime.execution import Budgets


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 30.0),
        ("30s", 30.0),
        ("30sec", 30.0),
        ("1.5m", 90.0),
        ("2min", 120.0),
        ("2h", 7200.0),
        ("500ms", 0.5),
        ("0", 0.0),
        (12, 12.0),
        (0.25, 0.25),
        ("1e1", 10.0),
        (".5", 0.5),
        (" 7 s ", 7.0),
        ("3S", 3.0),
    ],
)
def test_durations(text, seconds):
    assert parse_duration(text, "wall") == seconds


@pytest.mark.parametrize(
    "text",
    [
        "-1",
        "abc",
        "10 parsecs",
        "nan",
        "inf",
        "",
        "1e400",
        True,
        None,
        [3],
        float("inf"),
        float("nan"),
        -0.5,
        10**400,
        MAX_SECONDS * 2,
    ],
)
def test_bad_durations_say_what_to_write(text):
    with pytest.raises(DurationError) as info:
        parse_duration(text, "wall")
    assert str(info.value) == refusal(text, "wall")  # one message for everything refused
    assert "wall" in str(info.value)
    assert "30s" in str(info.value)


def test_zero_only_where_allowed():
    assert parse_duration(0, "grace") == 0.0
    with pytest.raises(DurationError, match="more than 0"):
        parse_duration("0s", "timeout", allow_zero=False)


def test_the_largest_duration_is_allowed():
    assert parse_duration(MAX_SECONDS, "wall") == MAX_SECONDS


def test_budget_errors_are_duration_errors():
    with pytest.raises(DurationError):
        budgets.parse_directive("%%budget wall=soon")


@pytest.mark.parametrize("value", [1e12, 1e308, "1e12", 10**20])
def test_a_budget_too_large_to_arm_is_refused(value):
    with pytest.raises(BudgetError, match="up to 365 days"):
        budgets.from_metadata({"wall_budget": value})


def test_budget_line():
    d = budgets.parse_directive("%%budget wall=30 quiet=10s checkpoint=before")
    assert (d.wall_budget, d.quiet_budget, d.checkpoint) == (30.0, 10.0, "before")


def test_timeout_line():
    assert budgets.parse_directive("%%timeout 2m").timeout == 120.0


@pytest.mark.parametrize(
    "line",
    [
        "%%budget wall",
        "%%budget wall=-3",
        "%%budget speed=3",
        "%%budget checkpoint=after",
        "%%timeout",
        "%%timeout 1 2",
        "%%timeout 0",
    ],
)
def test_bad_lines(line):
    with pytest.raises(BudgetError):
        budgets.parse_directive(line)


def test_first_directive_line_only_at_the_top():
    assert budgets.first_directive_line("\n  %%budget wall=1\nx=1") == "%%budget wall=1"
    assert budgets.first_directive_line("x = 1\n%%budget wall=1") is None
    assert budgets.first_directive_line("%%time\nx=1") is None


def test_metadata_and_merge_order():
    meta = budgets.from_metadata({"wall_budget": 5, "quiet_budget": "2s"})
    magic = budgets.parse_directive("%%budget wall=7")
    merged = budgets.merge(budgets.CellDirectives(wall_budget=100, quiet_budget=100), meta, magic)
    assert (merged.wall_budget, merged.quiet_budget) == (7.0, 2.0)


def test_a_cells_directives_layer_defaults_metadata_and_its_first_line():
    defaults = budgets.CellDirectives(wall_budget=100, quiet_budget=100, memory_budget=10)
    wanted = budgets.for_cell("%%budget wall=7\nx = 1", {"wall_budget": 5, "quiet_budget": "2s"}, defaults)
    assert (wanted.wall_budget, wanted.quiet_budget, wanted.memory_budget) == (7.0, 2.0, 10)
    assert budgets.for_cell("x = 1", None, defaults) == defaults


def test_a_cells_budgets_say_whether_a_page_counts_anything_down() -> None:
    assert not Budgets().limited
    assert not Budgets(timeout=5.0).limited  # a deadline, not a budget
    assert Budgets(wall=1.0).limited
    assert Budgets(quiet=1.0).limited
    assert Budgets(memory=1).limited
    assert Budgets(wall=2.0).for_reason(protocol.REASON_WALL_BUDGET) == 2.0
    assert Budgets(wall=2.0).for_reason(protocol.REASON_REQUEST) == 0.0


@pytest.mark.parametrize("meta", [{"wall_budget": -1}, {"quiet_budget": "soon"}, {"checkpoint": "later"}, "wall=3"])
def test_bad_metadata(meta):
    with pytest.raises(BudgetError):
        budgets.from_metadata(meta)


def test_strip_keeps_line_numbers():
    lines = ["%%budget wall=1\n", "x = 1\n", "y = 2\n"]
    assert budgets.strip_directive(lines) == ["\n", "x = 1\n", "y = 2\n"]
    assert budgets.strip_directive(["x = 1\n"]) == ["x = 1\n"]
