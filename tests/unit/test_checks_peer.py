"""The peer-relative rule (robustctl.checks.peer)."""

from __future__ import annotations

import math

import pytest

from robustctl.checks.peer import peer_outliers


def test_flags_value_below_ratio_of_median() -> None:
    values = {"a": 100.0, "b": 98.0, "c": 101.0, "d": 60.0, "e": 99.0}
    assert peer_outliers(values, 0.9) == {"d": (60.0, 99.0)}


def test_boundary_is_strict() -> None:
    # median 100; 90 is exactly 0.9x and is not an outlier, 89.9 is.
    assert peer_outliers({"a": 100.0, "b": 100.0, "c": 90.0}, 0.9) == {}
    assert peer_outliers({"a": 100.0, "b": 100.0, "c": 89.9}, 0.9) == {"c": (89.9, 100.0)}


def test_too_few_peers_names_nobody() -> None:
    assert peer_outliers({"a": 100.0, "b": 1.0}, 0.9) == {}
    assert peer_outliers({"a": 1.0}, 0.9) == {}
    assert peer_outliers({"a": 100.0, "b": 1.0}, 0.9, min_peers=2) == {"b": (1.0, 50.5)}


def test_non_finite_values_ignored_and_do_not_count_as_peers() -> None:
    values = {"a": 100.0, "b": math.nan, "c": 10.0}
    assert peer_outliers(values, 0.9) == {}
    values["d"] = 100.0
    assert peer_outliers(values, 0.9) == {"c": (10.0, 100.0)}


def test_several_outliers_sorted_slowest_first() -> None:
    values = {"a": 100.0, "b": 100.0, "c": 100.0, "d": 50.0, "e": 20.0}
    out = peer_outliers(values, 0.9)
    assert list(out) == ["e", "d"]


def test_zero_median_names_nobody() -> None:
    assert peer_outliers({"a": 0.0, "b": 0.0, "c": 0.0}, 0.9) == {}


@pytest.mark.parametrize(("ratio", "min_peers"), [(0.0, 3), (1.5, 3), (0.9, 1)])
def test_bad_arguments_raise(ratio: float, min_peers: int) -> None:
    with pytest.raises(ValueError):
        peer_outliers({"a": 1.0}, ratio, min_peers)
