"""Property-based tests of the ``rollback`` result (:class:`robustctl.actions.rollback.RollbackResult`):
whatever the plan holds and however the rollback ended, its ``--json`` document is strict JSON with the
same keys in the same order, its ``outcome`` is the session Outcome's string, and its exit code is one
of the table's: 0 exactly for a dry run, a declined plan and an applied rollback.

Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.actions.rollback import RollbackPlan, RollbackResult
from robustctl.actions.session import Outcome
from robustctl.exit_codes import ExitCode
from robustctl.models import result_json

pytestmark = pytest.mark.fuzz

ROLLBACK_OUTCOMES = (
    Outcome.DRY_RUN,
    Outcome.DECLINED,
    Outcome.APPLIED,
    Outcome.FAILED,
    Outcome.RESTART_FAILED,
)
KEYS = ["outcome", "plan", "switch", "restart", "restart_exit", "audit_id", "message", "schema_version",
        "kind", "exit_code"]  # fmt: skip
COMMIT = st.text("0123456789abcdef", min_size=40, max_size=40)
TEXT = st.text(max_size=40)
IDS = st.lists(st.integers(1, 10**9), max_size=4).map(tuple)

PLANS = st.builds(
    RollbackPlan,
    job=TEXT,
    commit=COMMIT,
    ref=st.none() | TEXT,
    source=st.sampled_from(("--to", "last-stable")),
    stable=st.none(),
    hosts=st.lists(st.tuples(TEXT, st.none() | COMMIT), max_size=4).map(tuple),
    unchanged=st.lists(TEXT, max_size=3).map(tuple),
    rolled_back=IDS,
    pending=IDS,
    reason=TEXT,
    steps=st.tuples(TEXT, TEXT, TEXT),
)


@given(
    plan=PLANS,
    outcome=st.sampled_from(ROLLBACK_OUTCOMES),
    restart_exit=st.sampled_from([int(c) for c in ExitCode]),
    message=TEXT,
    audit_id=st.none() | st.integers(1, 2**62),
)
def test_the_rollback_document_keeps_its_shape_and_its_exit_code_follows_the_outcome(
    plan: RollbackPlan, outcome: Outcome, restart_exit: int, message: str, audit_id: int | None
) -> None:
    res = RollbackResult(outcome, plan, restart_exit=restart_exit, audit_id=audit_id, message=message)
    doc = result_json(res)
    assert list(doc) == KEYS and doc["kind"] == "rollback" and doc["plan"]["kind"] == "rollback-plan"
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc
    assert doc["outcome"] == outcome.value and doc["exit_code"] == int(res.exit_code)
    assert res.exit_code in set(ExitCode)
    ok = outcome in (Outcome.DRY_RUN, Outcome.DECLINED, Outcome.APPLIED)
    assert (res.exit_code == ExitCode.OK) is ok
    if outcome is Outcome.RESTART_FAILED and restart_exit:
        assert res.exit_code == restart_exit
