"""Property-based tests of the ``dcgmi diag`` parser (:func:`robustctl.analysis.dcgm.parse_dcgm_diag`):
whatever the cells of a DCGM table (metadata values, test names, results, wrapped messages), it
answers without raising, names a known layout, and its verdict is one of the states. Seeded and
bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.analysis.dcgm import evaluate, parse_dcgm_diag

pytestmark = pytest.mark.fuzz

LEFT = st.sampled_from(
    ("", "DCGM Version", "Driver Version Detected", "Warning", "Error", "Info", "software", "Memory", "pcie")
) | st.text(max_size=12)
RIGHT = st.sampled_from(
    ("Pass", "Fail", "Skip", "Warn", "Pass - GPUs: 0, 1", "Fail - GPU: 0", "GPU0: Pass", "GPU1: Fail", "4.4.2",
     "4rc", "3", "x.y")
) | st.text(max_size=20)  # fmt: skip
LINE = st.one_of(
    st.tuples(LEFT, RIGHT).map(lambda c: f"| {c[0]:<25} | {c[1]:<46}  |"),
    st.sampled_from(("|-----  Metadata  ----------+----|", "+-----  Hardware  ----+---+", "+----+----+", "")),
    st.text(max_size=30),
)


@given(st.lists(LINE, max_size=25))
def test_any_dcgm_table_parses_and_judges_without_raising(lines: list[str]) -> None:
    diag = parse_dcgm_diag("\n".join(lines))
    assert diag.layout in ("3.x", "4.x", "unknown")
    assert evaluate(diag).status is not None
