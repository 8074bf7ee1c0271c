"""Property-based tests of the burn's published-peak lookup (robustctl.checks.burn).

Whatever a device calls itself and whatever it measured, ``burn.tflops`` keeps its old OK summary
as the prefix, gives a peak only for a card in the table (under any case or spacing of a listed
name), and never changes the verdict. Seeded and bounded by the ``ci`` profile (tests/conftest.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.checks.burn import PUBLISHED_PEAKS, evaluate_tflops, published_peak
from robustctl.models import Status
from robustctl.thresholds import Thresholds

pytestmark = pytest.mark.fuzz

LISTED = [n for card in PUBLISHED_PEAKS for n in card.names]


@st.composite
def respelled(draw: st.DrawFn) -> str:
    """A listed name with random letter case, doubled blanks and maybe its "NVIDIA " dropped."""
    name = draw(st.sampled_from(LISTED))
    words = name.split()
    if draw(st.booleans()):
        words = words[1:]
    cased = ["".join(c.upper() if draw(st.booleans()) else c.lower() for c in w) for w in words]
    return draw(st.sampled_from([" ", "  ", "\t"])).join(cased)


NAMES = respelled() | st.text(max_size=30)
DTYPES = st.sampled_from(["bfloat16", "float16", "float32", "float64", "tf32"]) | st.text(max_size=8)


def one_device(name: str, dtype: str, tflops: float) -> dict[str, Any]:
    dev = {"index": 0, "name": name, "kind": "cuda", "dtype": dtype, "size": 4096, "tflops": tflops}
    return {"available": True, "dtype": dtype, "size": 4096, "cuda_available": True, "devices": [dev]}


@given(name=NAMES, dtype=DTYPES, tflops=st.floats(0.001, 5000.0))
def test_the_peak_adds_to_the_summary_and_changes_no_verdict(name: str, dtype: str, tflops: float) -> None:
    (r,) = evaluate_tflops(one_device(name, dtype, tflops), Thresholds())
    assert r.status is Status.OK
    assert r.summary.startswith(f"1 device(s), min {tflops:.3g} TFLOP/s ({dtype}, N=4096)")
    found = published_peak(name, dtype)
    if found is None:
        assert r.evidence["peak_tflops"] is None and r.evidence["peak_fraction"] is None
        assert r.summary == f"1 device(s), min {tflops:.3g} TFLOP/s ({dtype}, N=4096)"
    else:
        assert r.evidence["peak_tflops"] == found[1]
        assert r.evidence["peak_fraction"] == round(tflops / found[1], 4)
        assert r.summary.endswith(f"of the {found[0].card}'s published {found[1]:.0f} dense")


@given(name=respelled(), dtype=st.sampled_from(["bfloat16", "float16", "float32", "tf32"]))
def test_a_listed_name_is_found_however_it_is_spelled(name: str, dtype: str) -> None:
    assert published_peak(name, dtype) is not None
