"""Property-based tests of the test-bed jobs' fault specs and loss spelling (issue 22 section 5).

* Whatever text a fault spec holds (the fault file is re-read while the job runs, and a rank reading
  it survives only a ValueError), ``parse_faults`` either returns faults that keep the grammar's
  invariants or raises a ValueError of one line naming the spec; a fault with ``step=N:steps=K``
  is active at steps N … N+K-1 exactly.
* Whatever float a loss is, the heartbeat's ``loss`` is strict JSON that ``float()`` reads back to it
  (NaN to a NaN), in both jobs, and the log's spelling reads back to it within its 7 digits.

Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.jobs import heartbeat

pytestmark = [pytest.mark.fuzz, pytest.mark.external]  # minimegatron imports torch

mm = pytest.importorskip("tests.jobs.minimegatron", reason="minimegatron needs torch")

LONG = "x" * 500  # a spec part longer than any error may quote
KEYS = ("rank", "ranks", "step", "steps", "factor", "mode", "signal", "error", "when", LONG)
PLACES = (*mm.HANG_PLACES, *mm.NAN_PLACES, "cuda", "gpu", "", LONG)
VALUES = st.one_of(
    st.integers(-3, 30).map(str),
    st.floats().map(repr),
    st.sampled_from(["KILL", "busy", "ecc", "assert", "1,2", "1,,2", "", " 4 ", "1e999", "9" * 5000, LONG]),
    st.text(max_size=6),
)
SPEC = st.builds(
    lambda kind, where, pairs: ":".join([kind, *([where] if where is not None else []), *pairs]),
    st.sampled_from([*mm.FAULT_KINDS, "explode", "", LONG]),
    st.one_of(st.none(), st.sampled_from(PLACES)),
    st.lists(st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), VALUES), max_size=4),
)
TEXT = st.one_of(st.lists(SPEC, max_size=3).map(";".join), st.text(max_size=40))


def strict_loads(text: str) -> Any:
    def refuse(token: str) -> None:
        raise ValueError(token)

    return json.loads(text, parse_constant=refuse)


@given(TEXT)
def test_any_spec_text_parses_or_is_one_value_error(text: str) -> None:
    try:
        faults = mm.parse_faults(text)
    except ValueError as exc:
        msg = str(exc)
        assert msg.startswith("fault ") and len(msg.splitlines()) == 1 and len(msg) < 400, msg
        return
    for f in faults:
        assert f.kind in mm.FAULT_KINDS and math.isfinite(f.factor)
        if f.kind == "hang":
            assert f.where in mm.HANG_PLACES
        if f.kind == "nan":
            assert f.where in mm.NAN_PLACES
        if f.kind == "spike":
            assert f.step is not None and f.steps is not None and f.steps >= 1 and f.factor > 0
        if f.kind == "crash":
            assert f.where in (None, "cuda") and (f.error in mm.CUDA_ERRORS) == (f.where == "cuda")
        if f.steps is not None:
            assert f.step is not None and f.steps >= 1
            rank = min(f.ranks) if f.ranks else 0
            for s in (f.step - 1, f.step, f.step + f.steps - 1, f.step + f.steps):
                assert f.applies(rank, s) == (f.step <= s < f.step + f.steps)


@given(st.floats())
def test_any_loss_is_strict_json_and_reads_back(loss: float) -> None:
    for job in (mm, heartbeat):
        value = strict_loads(json.dumps({"loss": job.loss_json(loss)}, allow_nan=False))["loss"]
        back = float(value)
        assert back == loss or (math.isnan(back) and math.isnan(loss))
    shown = mm.format_loss(loss)
    assert shown == shown.strip() and " " not in shown
    if math.isfinite(loss):
        assert float(shown) == pytest.approx(loss, rel=1e-6, abs=0.0)
    else:
        assert shown == str(loss) and shown in ("nan", "inf", "-inf")
