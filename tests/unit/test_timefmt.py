"""timefmt.format_utc: every report's one time formatter; it never raises (issue 21, item 6)."""

from __future__ import annotations

import math

import pytest

from robustctl.store import TIME_MAX
from robustctl.timefmt import SHOWN_VALUE, format_utc


@pytest.mark.parametrize(
    ("t", "shown"),
    [
        (0, "1970-01-01 00:00:00"),
        (1_700_000_000.9, "2023-11-14 22:13:20"),
        (TIME_MAX - 1, "9999-12-31 23:59:59"),
    ],
)
def test_times_in_range(t: float, shown: str) -> None:
    assert format_utc(t) == shown
    assert format_utc(t, zone=True) == shown + " UTC"


@pytest.mark.parametrize(
    "t",
    [TIME_MAX, 1e300, -1e300, -1, math.nan, math.inf, -math.inf, 2**1100, "2024-01-01", b"\x00", None, True],
)
def test_anything_else_is_an_invalid_time_never_an_exception(t: object) -> None:
    out = format_utc(t)
    assert out.startswith("invalid time (") and out.endswith(")") and format_utc(t, zone=True) == out
    assert len(out) <= len("invalid time ()") + SHOWN_VALUE
