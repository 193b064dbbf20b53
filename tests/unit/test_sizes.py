"""The one size grammar: what it reads, what it refuses (with one message), how sizes print."""

from __future__ import annotations

import pytest

from cancelkernel.sizes import MAX_BYTES, SizeError, format_size, parse_size


@pytest.mark.parametrize(
    ("text", "size"),
    [
        (1073741824, 2**30),
        (1.5e9, 1_500_000_000),
        ("1e9", 10**9),
        ("512", 512),
        ("512B", 512),
        ("512M", 512 * 2**20),
        ("512m", 512 * 2**20),
        ("2G", 2 * 2**30),
        (" 2 g ", 2 * 2**30),
        ("1.5GiB", 3 * 2**29),
        ("1.5Gi", 3 * 2**29),
        (".5T", 2**39),
        ("500MB", 500 * 10**6),
        ("2GB", 2 * 10**9),
        ("64K", 65536),
        ("64kb", 64000),
        ("0", 0),
    ],
)
def test_reads(text: object, size: int) -> None:
    assert parse_size(text, "memory") == size


@pytest.mark.parametrize(
    "bad",
    [True, None, "", "G", "2 gigs", "-1G", "1,5G", "2Gb/s", float("nan"), float("inf"), -1, [1], MAX_BYTES + 1, "2E"],
)
def test_refuses_with_one_message(bad: object) -> None:
    with pytest.raises(SizeError) as refused:
        parse_size(bad, "memory")
    message = str(refused.value)
    assert message.startswith(f"memory={bad!r} is not a size")
    assert "512M, 2G, 1.5GiB" in message


def test_zero_is_the_callers_choice() -> None:
    assert parse_size("0G", "memory") == 0
    with pytest.raises(SizeError, match="more than 0"):
        parse_size(0, "memory", allow_zero=False)


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (12, "12 B"),
        (2048, "2 KiB"),
        (512 * 2**20, "512 MiB"),
        (3 * 2**29, "1.5 GiB"),
        (2**40, "1 TiB"),
        (1_000_000_000, "954 MiB"),
    ],
)
def test_formats(size: int, text: str) -> None:
    assert format_size(size) == text
