"""Property-based tests of the ETTR ledger (robustctl.watch.ledger): any timeline.

Contracts checked, for any window, samples, incidents (phases in any order, overlapping, outside the
window, missing) and waiting spans: the intervals partition the window exactly (the first starts at
its start, each ends where the next starts, the last ends at its end, none empty); 0 ≤ ETTR ≤ 1,
cumulative and sliding, at the end and along a series; the unproductive causes sum to total −
productive; each incident's seconds are within the ledger's; the ledger does not depend on the order
of its inputs; the JSON document is strict. A time that is not a finite number, in any field, raises
:class:`~robustctl.watch.ledger.LedgerInputError` naming the incident, sample or span and the field;
nothing else is ever raised, whatever the values.
Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.config import WATCH_CLASSES, SignalClass
from robustctl.watch.ledger import (
    LEDGER_TIME_MAX,
    UNPRODUCTIVE_CAUSES,
    Cause,
    EttrLedger,
    Incident,
    LedgerInputError,
    ProgressSample,
    Timeline,
    WaitingSpan,
    build_ledger,
    ettr_at,
    ettr_series,
)

pytestmark = pytest.mark.fuzz

PHASE_FIELDS = (
    "onset_s",
    "decision_s",
    "localization_start_s",
    "localization_end_s",
    "eviction_start_s",
    "eviction_end_s",
    "restart_start_s",
    "first_new_step_s",
)
NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
IDS = st.text(alphabet="abcdefghij-_0123456789", min_size=1, max_size=8)
STEPS = st.integers(0, 300)


@st.composite
def timelines(draw: st.DrawFn, min_incidents: int = 0) -> Timeline:
    """A valid timeline: a window anywhere in the allowed range, and samples, incidents and waiting
    spans whose times fall before, inside and after it (far outside too), in any order."""
    start = draw(st.one_of(st.just(0.0), st.floats(0.0, 2e9), st.just(LEDGER_TIME_MAX - 1e6)))
    length = draw(st.one_of(st.floats(1e-3, 1e6), st.sampled_from([1.0, 3600.0, 259_200.0])))
    end = min(start + length, LEDGER_TIME_MAX)
    if end <= start:
        end = math.nextafter(start, math.inf)
    span = end - start
    time = st.one_of(
        st.floats(start - span / 2, end + span / 2),
        st.sampled_from([start, end, -1e300, 1e300]),
    )
    # Samples: a regular run (mostly advancing, with restarts) or anything.
    if draw(st.booleans()):
        n = draw(st.integers(0, 20))
        times = sorted(draw(st.lists(time, min_size=n, max_size=n)))
        step, samples = 0, []
        for t in times:
            step = draw(st.one_of(st.just(step + 1), st.just(step), st.integers(0, step + 3)))
            samples.append(ProgressSample(t, step))
        samples = draw(st.permutations(samples))
    else:
        samples = draw(st.lists(st.builds(ProgressSample, time, STEPS), max_size=12))
    ids = draw(st.lists(IDS, min_size=min_incidents, max_size=4, unique=True))
    incidents = []
    for ident in ids:
        times_of = {f: draw(st.none() | time) for f in PHASE_FIELDS[1:]}
        incidents.append(
            Incident(
                ident,
                draw(
                    st.sampled_from([c for c in SignalClass if c is not SignalClass.UNKNOWN])
                    | st.sampled_from(list(WATCH_CLASSES))
                ),
                onset_s=draw(time),
                machines_evicted=tuple(
                    draw(st.lists(st.sampled_from(["node01", "node02", "node03"]), max_size=4))
                ),
                checkpoint_step=draw(st.none() | STEPS),
                last_step=draw(st.none() | STEPS),
                playbook=draw(st.none() | st.sampled_from(["job-failed", "hang", "gpu-lost"])),
                **times_of,
            )
        )
    waiting = draw(st.lists(st.builds(WaitingSpan, time, time, st.text(max_size=10)), max_size=3))
    step_time = draw(st.none() | st.floats(1e-3, 1e4) | st.just(1e300))
    return Timeline("job", start, end, tuple(samples), tuple(incidents), tuple(waiting), step_time)


WINDOWS = st.floats(1e-3, 1e7) | st.just(86_400.0)


def tolerance(ledger: EttrLedger) -> float:
    """What float rounding may move a sum of interval lengths by: an ulp of the window's end per
    interval, a few times over."""
    return 4 * (len(ledger.intervals) + 2) * math.ulp(ledger.end_s)


def check_invariants(ledger: EttrLedger, timeline: Timeline) -> None:
    ivs = ledger.intervals
    # A partition: first at the start, each ends where the next begins, last at the end, none empty.
    assert ivs and ivs[0].start_s == timeline.start_s and ivs[-1].end_s == timeline.end_s
    for a, b in itertools.pairwise(ivs):
        assert a.end_s == b.start_s
        assert (a.cause, a.incident) != (b.cause, b.incident)  # neighbours alike are merged
    assert all(iv.start_s < iv.end_s for iv in ivs)
    tol = tolerance(ledger)
    total = timeline.end_s - timeline.start_s
    assert ledger.total_s == total
    assert math.isclose(math.fsum(iv.duration_s for iv in ivs), total, rel_tol=0, abs_tol=tol)
    # ETTR in [0, 1]; causes sum to total - productive.
    assert 0.0 <= ledger.cumulative_ettr <= 1.0 and 0.0 <= ledger.sliding_ettr <= 1.0
    assert math.isclose(
        ledger.cumulative_ettr, ledger.productive_s / total, rel_tol=1e-9, abs_tol=tol / total
    )
    assert [c for c, _ in ledger.seconds] == list(UNPRODUCTIVE_CAUSES)
    assert all(s >= 0 for _, s in ledger.seconds)
    assert math.isclose(ledger.unproductive_s, total - ledger.productive_s, rel_tol=0, abs_tol=tol)
    # Productive time only where samples were seen advancing.
    sample_times = [s.time_s for s in timeline.samples]
    for iv in ivs:
        if iv.cause is Cause.PRODUCTIVE:
            assert min(sample_times) <= iv.start_s and iv.end_s <= max(sample_times)
            assert iv.incident is None
    if not timeline.incidents and not timeline.waiting:
        assert {iv.cause for iv in ivs} <= {Cause.PRODUCTIVE, Cause.UNACCOUNTED}
    # Incidents: one row each, by onset; ids in intervals are theirs; seconds within the ledger's.
    rows = {r.incident_id: r for r in ledger.incidents}
    assert sorted(rows) == sorted(i.incident_id for i in timeline.incidents)
    assert [r.onset_s for r in ledger.incidents] == sorted(r.onset_s for r in ledger.incidents)
    assert {iv.incident for iv in ivs} - {None} <= set(rows)
    for cause in UNPRODUCTIVE_CAUSES:
        per_incident = math.fsum(dict(r.seconds)[cause] for r in ledger.incidents)
        assert per_incident <= ledger.seconds_of(cause) + tol
    for r in ledger.incidents:
        assert all(s >= 0 for _, s in r.seconds)
        assert (r.mttr_s is None) == (r.first_new_step_s is None)
        assert r.mttr_s is None or r.mttr_s >= 0
        assert len(set(r.machines_evicted)) == len(r.machines_evicted)
        assert r.recomputed_steps is None or r.recomputed_steps >= 0
    # Strict JSON.
    doc = ledger.to_json()
    assert json.loads(json.dumps(doc, allow_nan=False))["kind"] == "ettr-ledger"


@given(timelines(), WINDOWS)
def test_any_timeline_partitions_the_window(timeline: Timeline, window_s: float) -> None:
    ledger = build_ledger(timeline, sliding_window_s=window_s)
    check_invariants(ledger, timeline)
    assert ledger.sliding_window_s == window_s
    if window_s >= ledger.total_s:
        assert math.isclose(ledger.sliding_ettr, ledger.cumulative_ettr, rel_tol=1e-9, abs_tol=1e-9)


@given(timelines(), WINDOWS, st.integers(1, 20))
def test_ettr_along_the_window_stays_in_0_1(timeline: Timeline, window_s: float, points: int) -> None:
    ledger = build_ledger(timeline)
    series = ettr_series(ledger, window_s, points)
    assert len(series) == points and series[-1].at_s == ledger.end_s
    for p in series:
        assert p.cumulative is not None and 0.0 <= p.cumulative <= 1.0
        assert p.sliding is not None and 0.0 <= p.sliding <= 1.0
    assert math.isclose(series[-1].cumulative or 0.0, ledger.cumulative_ettr, rel_tol=1e-9, abs_tol=1e-9)
    assert ettr_at(ledger, ledger.start_s) is None
    mid = ettr_at(ledger, (ledger.start_s + ledger.end_s) / 2, window_s)
    assert mid is None or 0.0 <= mid <= 1.0


@given(timelines(), st.randoms(use_true_random=False))
def test_the_order_of_the_inputs_does_not_matter(timeline: Timeline, rnd: Any) -> None:
    shuffled = dataclasses.replace(
        timeline,
        samples=tuple(rnd.sample(timeline.samples, len(timeline.samples))),
        incidents=tuple(rnd.sample(timeline.incidents, len(timeline.incidents))),
        waiting=tuple(rnd.sample(timeline.waiting, len(timeline.waiting))),
    )
    a, b = build_ledger(timeline), build_ledger(shuffled)
    assert a.intervals == b.intervals and a.incidents == b.incidents
    assert len(a.notes) == len(b.notes)  # the same repairs (a waiting span is named by its position)
    assert (a.step_time_s, a.productive_s, a.seconds) == (b.step_time_s, b.productive_s, b.seconds)


@given(timelines(min_incidents=1), st.data())
def test_a_non_finite_time_names_the_incident_and_field(timeline: Timeline, data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(timeline.incidents) - 1))
    field = data.draw(st.sampled_from(PHASE_FIELDS))
    bad = data.draw(NON_FINITE)
    incidents = list(timeline.incidents)
    incidents[index] = dataclasses.replace(incidents[index], **{field: bad})
    target = incidents[index].incident_id
    with pytest.raises(LedgerInputError) as err:
        build_ledger(dataclasses.replace(timeline, incidents=tuple(incidents)))
    # Every other incident is valid: the one changed is named, with the field.
    assert str(err.value).startswith(f"incident {target!r}: {field}: not a finite number")
    assert isinstance(err.value, ValueError)


@given(timelines(), st.data())
def test_a_non_finite_sample_or_span_time_names_it(timeline: Timeline, data: st.DataObject) -> None:
    samples, waiting = list(timeline.samples), list(timeline.waiting)
    where = data.draw(
        st.sampled_from(["sample", "span"] if waiting and samples else ["sample"] if samples else ["none"])
    )
    bad = data.draw(NON_FINITE)
    if where == "none":
        timeline = dataclasses.replace(timeline, samples=(ProgressSample(bad, 1),))
        expected = "progress sample #0: time_s"
    elif where == "sample":
        i = data.draw(st.integers(0, len(samples) - 1))
        samples[i] = ProgressSample(bad, samples[i].step)
        timeline = dataclasses.replace(timeline, samples=tuple(samples))
        expected = "progress sample #"
    else:
        i = data.draw(st.integers(0, len(waiting) - 1))
        waiting[i] = dataclasses.replace(waiting[i], end_s=bad)
        timeline = dataclasses.replace(timeline, waiting=tuple(waiting))
        expected = "waiting span #"
    with pytest.raises(LedgerInputError, match=expected):
        build_ledger(timeline)


ANY_NUMBER = st.one_of(
    st.floats(),
    st.integers(-(2**70), 2**70),
    st.none(),
    st.booleans(),
    st.text(max_size=4),
)


@given(
    timelines(),
    st.sampled_from(["window", "incident", "sample", "span", "step_time"]),
    ANY_NUMBER,
    st.data(),
)
def test_any_value_anywhere_is_a_ledger_or_a_ledger_input_error(
    timeline: Timeline, where: str, value: Any, data: st.DataObject
) -> None:
    """Whatever value (any float, huge integers, None, a bool, text) lands in any time or step field:
    a ledger that keeps every invariant, or LedgerInputError; never another exception."""
    if where == "window":
        timeline = dataclasses.replace(timeline, **{data.draw(st.sampled_from(["start_s", "end_s"])): value})
    elif where == "incident" and timeline.incidents:
        field = data.draw(st.sampled_from([*PHASE_FIELDS, "checkpoint_step", "last_step"]))
        incidents = list(timeline.incidents)
        incidents[0] = dataclasses.replace(incidents[0], **{field: value})
        timeline = dataclasses.replace(timeline, incidents=tuple(incidents))
    elif where == "sample":
        field = data.draw(st.sampled_from(["time_s", "step"]))
        sample = dataclasses.replace(ProgressSample(timeline.start_s, 0), **{field: value})
        timeline = dataclasses.replace(timeline, samples=(*timeline.samples, sample))
    elif where == "span":
        timeline = dataclasses.replace(
            timeline, waiting=(*timeline.waiting, WaitingSpan(timeline.start_s, value))
        )
    elif where == "step_time":
        timeline = dataclasses.replace(timeline, step_time_s=value)
    try:
        ledger = build_ledger(timeline)
    except LedgerInputError as err:
        assert "\n" not in str(err)
        return
    check_invariants(ledger, timeline)
