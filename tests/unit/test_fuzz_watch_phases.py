"""Property-based tests of the incident phases a recovery's journal run gives (robustctl.commands.watch).

Any journal run (steps of any kind, status and order; times anywhere; results of any shape, as a
hand-edited or truncated journal row may hold) through :func:`incident_phases`:

* it never raises, and every value is of the type :func:`robustctl.watchstore.update_incident` takes;
* each phase's start is the first start of a step of its kinds that was not skipped, and an end is
  never before its start (the end only once every such step has ended);
* machines evicted come only from ``evict`` steps that applied, each once;
* a checkpoint or last step comes only from a restart step's result, as a non-negative integer.

Seeded and bounded by the ``ci`` profile (tests/conftest.py); each case is one pure call.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.commands.watch import EVICTION_KINDS, LOCALIZATION_KINDS, RESTART_KINDS, incident_phases
from robustctl.playbooks.journal import JournalRun, JournalStep

pytestmark = pytest.mark.fuzz

KINDS = (*LOCALIZATION_KINDS, *EVICTION_KINDS, *RESTART_KINDS, "notify", "wait-for-progress")
T0 = 1_700_000_000.0

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.lists(st.text(max_size=8), max_size=4),
    st.lists(st.integers(), max_size=3),
)
results = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(
            ["kind", "status", "targets", "plan", "checkpoint_step", "ckpt_iter", "last_step", "x"]
        ),
        st.one_of(
            values,
            st.sampled_from(["apply", "plan", "applied", "nothing-to-do"]),
            st.dictionaries(st.sampled_from(["targets", "y"]), values, max_size=2),
        ),
        max_size=6,
    ),
)


@st.composite
def journal_steps(draw: st.DrawFn) -> tuple[JournalStep, ...]:
    out = []
    for seq in range(draw(st.integers(0, 8))):
        start = T0 + draw(st.floats(0, 10_000))
        finished = draw(st.one_of(st.none(), st.floats(0, 1_000).map(lambda d, s=start: s + d)))
        out.append(
            JournalStep(
                seq=seq,
                step=f"s{seq}",
                kind=draw(st.sampled_from(KINDS)),
                attempt=1,
                status=draw(st.sampled_from(["running", "done", "failed", "skipped", "interrupted"])),
                started_at=start,
                finished_at=finished,
                pid=1,
                audit_after=0,
                exit_code=None,
                result=draw(results),
                error="",
            )
        )
    return tuple(out)


def run_of(steps: tuple[JournalStep, ...]) -> JournalRun:
    return JournalRun(1, "hang", "shipped", "", "llm", {"job": "llm"}, T0, None, "t", 1, "running", "", steps)


@given(journal_steps())
def test_phases_are_within_their_steps_and_typed(steps: tuple[JournalStep, ...]) -> None:
    got: dict[str, Any] = incident_phases(run_of(steps))
    live = [x for x in steps if x.status != "skipped"]
    for kinds, start, end in (
        (LOCALIZATION_KINDS, "localization_start_at", "localization_end_at"),
        (EVICTION_KINDS, "eviction_start_at", "eviction_end_at"),
    ):
        mine = [x for x in live if x.kind in kinds]
        assert got.get(start) == (min(x.started_at for x in mine) if mine else None)
        if end in got:
            assert got[end] >= got[start]
            assert all(x.finished_at is not None and x.status != "running" for x in mine)
    restarts = [x for x in live if x.kind in RESTART_KINDS]
    assert got.get("restart_start_at") == (min(x.started_at for x in restarts) if restarts else None)
    applied: set[str] = set()
    for x in live:
        doc = x.result or {}
        if x.kind == "evict" and x.status == "done" and doc.get("kind") == "apply":
            for where in (doc.get("targets"), (doc.get("plan") or {}).get("targets")):
                if isinstance(where, list):
                    applied |= {t for t in where if isinstance(t, str)}
    machines = got.get("machines_evicted", ())
    assert len(set(machines)) == len(machines) and set(machines) <= applied
    for key in ("checkpoint_step", "last_step"):
        if key in got:
            v = got[key]
            assert restarts and type(v) is int and 0 <= v < 2**63
    assert set(got) <= {
        "localization_start_at",
        "localization_end_at",
        "eviction_start_at",
        "eviction_end_at",
        "restart_start_at",
        "machines_evicted",
        "checkpoint_step",
        "last_step",
    }
