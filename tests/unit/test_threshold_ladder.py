"""The one threshold ladder (robustctl.thresholds.ladder) and the allowed-limit converters
(beyond_max, beyond_min): boundaries, None thresholds, None/NaN values; and the checks' boundaries
that follow from them."""

from __future__ import annotations

import math
from typing import Any

import pytest

from robustctl.checks.burn import evaluate_verify
from robustctl.checks.host import evaluate_disk, evaluate_load, evaluate_memory
from robustctl.checks.nvml import evaluate_ecc, evaluate_temperature
from robustctl.checks.peer import peer_outliers
from robustctl.models import Status
from robustctl.thresholds import Thresholds, beyond_max, beyond_min, ladder

GIB = 1 << 30


# ----------------------------------------------------------------------------- the rule
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (79.9, Status.OK),
        (80.0, Status.WARNING),  # reaching warn is at warn
        (89.99, Status.WARNING),
        (90.0, Status.CRITICAL),  # reaching crit is at crit
        (1e9, Status.CRITICAL),
        (-math.inf, Status.OK),
        (math.inf, Status.CRITICAL),
    ],
)
def test_higher_is_worse_reaching_a_threshold_is_at_its_level(value: float, expected: Status) -> None:
    assert ladder(value, warn=80.0, crit=90.0) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (10.01, Status.OK),
        (10.0, Status.WARNING),
        (5.01, Status.WARNING),
        (5.0, Status.CRITICAL),
        (0.0, Status.CRITICAL),
    ],
)
def test_lower_is_worse_reaching_a_threshold_is_at_its_level(value: float, expected: Status) -> None:
    assert ladder(value, warn=10.0, crit=5.0, higher_is_worse=False) is expected


def test_none_threshold_is_never_reached() -> None:
    assert ladder(1e300, warn=None, crit=None) is Status.OK
    assert ladder(-1e300, warn=None, crit=None, higher_is_worse=False) is Status.OK
    assert ladder(100.0, warn=None, crit=90.0) is Status.CRITICAL
    assert ladder(85.0, warn=None, crit=90.0) is Status.OK
    assert ladder(100.0, warn=80.0, crit=None) is Status.WARNING


@pytest.mark.parametrize("value", [None, math.nan])
def test_an_unknown_value_is_unknown_never_healthy(value: float | None) -> None:
    assert ladder(value, warn=80.0, crit=90.0) is Status.UNKNOWN
    assert ladder(value, warn=10.0, crit=5.0, higher_is_worse=False) is Status.UNKNOWN
    assert ladder(value) is Status.UNKNOWN  # even with every rule off


def test_crit_is_looked_at_first() -> None:
    # a misordered pair (warn above crit) still gives CRITICAL once crit is reached
    assert ladder(95.0, warn=99.0, crit=90.0) is Status.CRITICAL


# ----------------------------------------------------------------------------- allowed limits
@pytest.mark.parametrize("limit", [0, 1, 512, 10_000, 1 << 52])
def test_beyond_max_of_a_count_is_exceeding_it(limit: int) -> None:
    assert ladder(limit, crit=beyond_max(limit)) is Status.OK
    assert ladder(limit + 1, crit=beyond_max(limit)) is Status.CRITICAL


@pytest.mark.parametrize("limit", [0.9 * 99.0, 400.0, 1e-300, 3.0])
def test_beyond_min_of_a_float_floor_is_falling_below_it(limit: float) -> None:
    crit = beyond_min(limit)
    assert ladder(limit, crit=crit, higher_is_worse=False) is Status.OK
    assert ladder(math.nextafter(limit, -math.inf), crit=crit, higher_is_worse=False) is Status.CRITICAL
    assert ladder(math.nextafter(limit, math.inf), crit=beyond_max(limit)) is Status.CRITICAL
    assert ladder(limit, crit=beyond_max(limit)) is Status.OK


def test_beyond_of_an_int_floor_and_of_none() -> None:
    assert beyond_min(400) == 399 and beyond_max(400) == 401
    assert beyond_min(None) is None and beyond_max(None) is None


# ----------------------------------------------------------------------------- checks' boundaries
def _disk(free_pct: float) -> dict[str, Any]:
    total = 1000 * GIB
    return {
        "disks": [
            {
                "mount": "/",
                "read_only": False,
                "total_bytes": total,
                "free_bytes": int(total * free_pct / 100),
                "free_pct": free_pct,
                "inodes_free_pct": 90.0,
                "error": None,
            }
        ]
    }


@pytest.mark.parametrize(
    ("free_pct", "expected"), [(10.5, Status.OK), (10.0, Status.WARNING), (5.0, Status.CRITICAL)]
)
def test_disk_free_percent_at_a_threshold_is_at_its_level(free_pct: float, expected: Status) -> None:
    assert [r.status for r in evaluate_disk(_disk(free_pct), Thresholds())] == [expected]


def test_memory_and_load_at_a_threshold_are_at_its_level() -> None:
    def mem(pct: float) -> dict[str, Any]:
        total = 64 * GIB
        return {
            "memory": {"total_bytes": total, "available_bytes": int(total * pct / 100), "available_pct": pct}
        }

    assert evaluate_memory(mem(10.0), Thresholds())[0].status is Status.WARNING
    assert evaluate_memory(mem(5.0), Thresholds())[0].status is Status.CRITICAL
    # the least healthy total is still healthy; one byte less is a missing DIMM
    th = Thresholds(memory_min_total_gib=64)
    assert evaluate_memory(mem(50.0), th)[0].status is Status.OK
    short = {"memory": {"total_bytes": 64 * GIB - 1, "available_bytes": GIB * 32, "available_pct": 50.0}}
    assert evaluate_memory(short, th)[0].status is Status.CRITICAL

    def load(per_cpu: float, blocked: int) -> dict[str, Any]:
        return {
            "load": {"load5": per_cpu * 8, "cpu_count": 8, "load5_per_cpu": per_cpu, "procs_blocked": blocked}
        }

    assert evaluate_load(load(8.0, 0), Thresholds())[0].status is Status.WARNING
    assert evaluate_load(load(7.99, 31), Thresholds())[0].status is Status.OK
    assert evaluate_load(load(0.5, 32), Thresholds())[0].status is Status.WARNING


def _gpu(**kw: Any) -> dict[str, Any]:
    return {"available": True, "count": 1, "gpus": [{"index": 0, "accessible": True, **kw}]}


def test_counter_max_thresholds_allow_the_max_itself() -> None:
    th = Thresholds()  # ecc_corrected_volatile_max 10000, ecc_uncorrected_volatile_max 0
    at_max = _gpu(ecc_volatile_uncorrected=0, ecc_volatile_corrected=10_000)
    assert [r.status for r in evaluate_ecc(at_max, th)] == [Status.OK]
    past = _gpu(ecc_volatile_uncorrected=1, ecc_volatile_corrected=10_001)
    assert sorted(r.status.value for r in evaluate_ecc(past, th)) == ["critical", "warning"]


def test_temperature_at_its_limits() -> None:
    th = Thresholds()  # warn 85, crit 90
    assert evaluate_temperature(_gpu(temperature_c=84), th)[0].status is Status.OK
    assert evaluate_temperature(_gpu(temperature_c=85), th)[0].status is Status.WARNING
    assert evaluate_temperature(_gpu(temperature_c=90), th)[0].status is Status.CRITICAL
    assert (
        evaluate_temperature(_gpu(temperature_c=80, temperature_slowdown_c=80), th)[0].status
        is Status.CRITICAL
    )


def test_burn_mismatch_max_and_peer_floor_stay_strict() -> None:
    dev = {"kind": "cpu", "name": "cpu", "checked": 10, "mismatches": 1}
    data = {"available": True, "devices": [dev]}
    assert evaluate_verify(data, Thresholds(burn_max_mismatches=1))[0].status is Status.OK
    assert evaluate_verify(data, Thresholds(burn_max_mismatches=0))[0].status is Status.CRITICAL
    assert peer_outliers({"a": 100.0, "b": 100.0, "c": 90.0}, 0.9) == {}
