"""Property-based tests of the one threshold ladder (:func:`robustctl.thresholds.ladder`): whatever the
value and thresholds, the answer follows the reaching rule (``>=`` higher-is-worse, ``<=``
lower-is-worse, crit before warn, a None threshold never reached, NaN unknown), is monotonic in the
value, and lower-is-worse is higher-is-worse mirrored; :func:`beyond_max`/:func:`beyond_min` turn
an allowed limit into exactly ``>``/``<``. Seeded and bounded by the ``ci`` profile
(tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.models import Status
from robustctl.thresholds import beyond_max, beyond_min, ladder

pytestmark = pytest.mark.fuzz

FINITE = st.floats(allow_nan=False, allow_infinity=False, width=64)
VALUE = st.floats(allow_nan=True, allow_infinity=True)
LEVEL = st.none() | FINITE


def expected(value: float, warn: float | None, crit: float | None, higher: bool) -> Status:
    if math.isnan(value):
        return Status.UNKNOWN
    if crit is not None and (value >= crit if higher else value <= crit):
        return Status.CRITICAL
    if warn is not None and (value >= warn if higher else value <= warn):
        return Status.WARNING
    return Status.OK


@given(VALUE, LEVEL, LEVEL, st.booleans())
def test_ladder_is_the_reaching_rule(
    value: float, warn: float | None, crit: float | None, higher: bool
) -> None:
    assert ladder(value, warn=warn, crit=crit, higher_is_worse=higher) is expected(value, warn, crit, higher)


@given(FINITE, FINITE, LEVEL, LEVEL)
def test_ladder_is_monotonic_and_mirrored(a: float, b: float, warn: float | None, crit: float | None) -> None:
    lo, hi = min(a, b), max(a, b)
    assert ladder(lo, warn=warn, crit=crit).severity <= ladder(hi, warn=warn, crit=crit).severity
    mirrored = ladder(
        -a,
        warn=None if warn is None else -warn,
        crit=None if crit is None else -crit,
        higher_is_worse=False,
    )
    assert mirrored is ladder(a, warn=warn, crit=crit)


@given(FINITE, FINITE)
def test_beyond_float_limits_are_strict_comparisons(value: float, limit: float) -> None:
    assert (ladder(value, crit=beyond_max(limit)) is Status.CRITICAL) == (value > limit)
    assert (ladder(value, crit=beyond_min(limit), higher_is_worse=False) is Status.CRITICAL) == (
        value < limit
    )


@given(st.integers(-(2**53), 2**53), st.integers(0, 2**53))
def test_beyond_count_limits_are_strict_comparisons(count: int, limit: int) -> None:
    assert (ladder(count, warn=beyond_max(limit)) is Status.WARNING) == (count > limit)
    assert (ladder(count, warn=beyond_min(limit), higher_is_worse=False) is Status.WARNING) == (count < limit)
