"""Property-based tests of the in-job agent (robustctl.agent): whatever a training script hands
``agent.step`` (any step, loss, tokens and extra fields: NaN and infinities, integers past any
parser's range, odd strings with lone surrogates, nested containers, objects), it never raises and
always leaves a heartbeat that strict ``json.loads`` reads, within the reader's size bound, whose
``loss`` is the JSON spelling of the last float loss. Seeded and bounded by the ``ci`` profile
(tests/conftest.py).
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import robustctl.agent
from robustctl.agent import HEARTBEAT_MAX_BYTES
from robustctl.agent.jsonsafe import NON_FINITE_JSON

pytestmark = pytest.mark.fuzz


class Odd:
    """An object whose float fails and whose repr is 20 KB (a raising repr: tests/unit/test_agent.py)."""

    def __repr__(self) -> str:
        return "<odd " + "x" * 20_000 + ">"

    def __float__(self) -> float:
        raise RuntimeError("no float")


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
    | st.just("\ud800x")
    | st.just(Odd())
    | st.binary(max_size=8)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=4)
    ),
    max_leaves=20,
)
PARAMETERS = {"self", "step", "loss", "tokens", "step_s", "phase"}
"""``Agent.step``'s own parameter names (Python refuses them as extra keywords before the agent runs)."""
EXTRA = st.dictionaries(
    st.text(min_size=1, max_size=12).filter(lambda k: k not in PARAMETERS), VALUES, max_size=5
)
CALL = st.tuples(SCALARS, SCALARS, SCALARS, EXTRA, st.floats(0, 5))


def strict(text: str) -> Any:
    def refuse(token: str) -> None:
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


@given(calls=st.lists(CALL, min_size=1, max_size=6))
def test_any_step_values_leave_a_strict_json_heartbeat(
    calls: list[tuple[Any, Any, Any, dict[str, Any], float]],
) -> None:
    now = [0.0]
    with tempfile.TemporaryDirectory() as d:
        agent = robustctl.agent.start(
            d, rank=1, world_size=2, torch=False, stacks_on_sigusr1=False, flusher=False, clock=lambda: now[0]
        )
        try:
            for step, loss, tokens, extra, dt in calls:
                now[0] += dt
                agent.step(step, loss, tokens, **extra)
        finally:
            agent.close()
        path = Path(d) / "rank00001.json"
        assert path.stat().st_size <= HEARTBEAT_MAX_BYTES
        doc = strict(path.read_text())
        assert isinstance(doc, dict) and doc["rank"] == 1 and doc["phase"] == "train"
        assert agent.errors == 0
        last = calls[-1][1]
        if isinstance(last, float):
            assert doc["loss"] == (last if math.isfinite(last) else NON_FINITE_JSON[repr(last)])
        for event in (Path(d) / "events").glob("*.json"):
            assert strict(event.read_text())["kind"] == "nan"
