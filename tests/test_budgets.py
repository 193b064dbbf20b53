"""Unit tests: budget and timeout directives (pure parsing, no kernel)."""

from __future__ import annotations

import pytest

from cancelkernel import budgets
from cancelkernel.budgets import BudgetError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 30.0), ("30s", 30.0), ("1.5m", 90.0), ("2h", 7200.0), ("0", 0.0), (12, 12.0), (0.25, 0.25), ("1e1", 10.0)],
)
def test_durations(text, seconds):
    assert budgets.parse_duration(text, "wall") == seconds


@pytest.mark.parametrize("text", ["-1", "abc", "10 parsecs", "nan", "inf", "", True, None, [3]])
def test_bad_durations_say_what_to_write(text):
    with pytest.raises(BudgetError) as info:
        budgets.parse_duration(text, "wall")
    assert "wall" in str(info.value)


def test_budget_line():
    d = budgets.parse_directive("%%budget wall=30 quiet=10s checkpoint=before")
    assert (d.wall_budget, d.quiet_budget, d.checkpoint) == (30.0, 10.0, "before")


def test_timeout_line():
    assert budgets.parse_directive("%%timeout 2m").timeout == 120.0


@pytest.mark.parametrize(
    "line",
    ["%%budget wall", "%%budget wall=-3", "%%budget speed=3", "%%budget checkpoint=after", "%%timeout", "%%timeout 1 2", "%%timeout 0"],
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


@pytest.mark.parametrize("meta", [{"wall_budget": -1}, {"quiet_budget": "soon"}, {"checkpoint": "later"}, "wall=3"])
def test_bad_metadata(meta):
    with pytest.raises(BudgetError):
        budgets.from_metadata(meta)


def test_strip_keeps_line_numbers():
    lines = ["%%budget wall=1\n", "x = 1\n", "y = 2\n"]
    assert budgets.strip_directive(lines) == ["\n", "x = 1\n", "y = 2\n"]
    assert budgets.strip_directive(["x = 1\n"]) == ["x = 1\n"]
