"""The ETTR ledger (robustctl.watch.ledger), on timelines worked out by hand.

Every expected interval below is written out from the rules of the module docstring: one crash with
every phase, two incidents, a waiting span, recomputation (carved out, capped, unknown), the window's
edges, out-of-order and overlapping input, and the errors that name what is at fault.
"""

from __future__ import annotations

import json

import pytest

from robustctl.config import SignalClass
from robustctl.errors import ConfigError
from robustctl.exit_codes import ExitCode
from robustctl.watch import ledger as ledger_mod
from robustctl.watch.ledger import (
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

P = Cause.PRODUCTIVE
DET = Cause.DETECTION
LOC = Cause.LOCALIZATION
EVI = Cause.EVICTION
RST = Cause.RESTART
REC = Cause.RECOMPUTATION
WAIT = Cause.WAITING
UNACC = Cause.UNACCOUNTED


def run(t0: float, t1: float, step0: int, every: float = 10.0) -> tuple[ProgressSample, ...]:
    """Samples every ``every`` seconds from t0 to t1 inclusive, one step each, from ``step0``."""
    n = round((t1 - t0) / every)
    return tuple(ProgressSample(t0 + k * every, step0 + k) for k in range(n + 1))


def spans(ledger: EttrLedger) -> list[tuple[float, float, Cause, str | None]]:
    return [(iv.start_s, iv.end_s, iv.cause, iv.incident) for iv in ledger.intervals]


def by_cause(row_or_ledger: object) -> dict[Cause, float]:
    return dict(row_or_ledger.seconds)  # type: ignore[attr-defined]


CRASH = Incident(
    "i1",
    "crash",
    onset_s=300.0,
    decision_s=320.0,
    localization_start_s=325.0,
    localization_end_s=360.0,
    eviction_start_s=370.0,
    eviction_end_s=400.0,
    machines_evicted=("node03", "node04", "node03"),
    restart_start_s=405.0,
    first_new_step_s=450.0,
    checkpoint_step=20,
    playbook="job-failed",
)
"""Steps 0..30 every 10 s up to t=300 (onset: the last good step, 30); checkpoint 20 loaded; the
first new step (21) at 450."""
CRASH_SAMPLES = run(0.0, 300.0, 0) + run(450.0, 1000.0, 21)


def test_one_crash_with_every_phase() -> None:
    ledger = build_ledger(Timeline("pretrain", 0.0, 1000.0, CRASH_SAMPLES, (CRASH,)))
    # Gaps between phases (320→325, 360→370, 400→405) count to the phase that follows them.
    # Recomputation: steps 21..30 were lost; 21 ends at the first new step (inside restart), the
    # other 9 × 10 s (the measured step time) are carved out after it.
    assert spans(ledger) == [
        (0.0, 300.0, P, None),
        (300.0, 320.0, DET, "i1"),
        (320.0, 360.0, LOC, "i1"),
        (360.0, 400.0, EVI, "i1"),
        (400.0, 450.0, RST, "i1"),
        (450.0, 540.0, REC, "i1"),
        (540.0, 1000.0, P, None),
    ]
    assert ledger.productive_s == 760.0
    assert ledger.cumulative_ettr == pytest.approx(0.76)
    assert ledger.sliding_ettr == pytest.approx(0.76)  # the 24 h window holds the whole 1000 s
    assert ledger.step_time_s == 10.0 and ledger.step_time_source == "measured"
    assert by_cause(ledger) == {DET: 20.0, LOC: 40.0, EVI: 40.0, RST: 50.0, REC: 90.0, WAIT: 0.0, UNACC: 0.0}
    assert ledger.notes == ()
    (row,) = ledger.incidents
    assert row.incident_class is SignalClass.CRASH and row.playbook == "job-failed"
    assert row.onset_s == 300.0 and row.decision_s == 320.0 and row.first_new_step_s == 450.0
    assert row.mttr_s == 150.0 and not row.first_new_step_inferred
    assert row.machines_evicted == ("node03", "node04")  # each machine once
    assert row.recomputed_steps == 9
    assert by_cause(row) == {DET: 20.0, LOC: 40.0, EVI: 40.0, RST: 50.0, REC: 90.0, WAIT: 0.0, UNACC: 0.0}
    assert row.unproductive_s == 240.0


def test_json_document() -> None:
    doc = build_ledger(
        Timeline("pretrain", 0.0, 1000.0, CRASH_SAMPLES, (CRASH,)), sliding_window_s=500.0
    ).to_json()
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc
    assert doc["kind"] == "ettr-ledger" and doc["schema_version"] == 1 and doc["job"] == "pretrain"
    assert doc["window"] == {"start_s": 0.0, "end_s": 1000.0, "total_s": 1000.0}
    assert doc["unproductive_s"] == {
        "detection": 20.0,
        "localization": 40.0,
        "eviction": 40.0,
        "restart": 50.0,
        "recomputation": 90.0,
        "waiting": 0.0,
        "unaccounted": 0.0,
    }
    assert doc["unproductive_total_s"] == 240.0
    # The last 500 s: [500, 1000): recomputation 500→540, productive 540→1000.
    assert doc["sliding_window_s"] == 500.0 and doc["sliding_ettr"] == pytest.approx(460 / 500)
    (row,) = doc["incidents"]
    assert row["incident"] == "i1" and row["class"] == "crash" and row["mttr_s"] == 150.0
    assert row["machines_evicted"] == ["node03", "node04"] and row["machines_evicted_count"] == 2
    assert row["unproductive_s"]["recomputation"] == 90.0
    assert doc["intervals"][1] == {"start_s": 300.0, "end_s": 320.0, "cause": "detection", "incident": "i1"}
    assert list(doc["unproductive_s"]) == [c.value for c in UNPRODUCTIVE_CAUSES]
    assert doc["step_time_s"] == 10.0 and doc["step_time_source"] == "measured" and doc["notes"] == []


def test_two_incidents() -> None:
    # A crash (no localization, no eviction) then a hang with localization and eviction; step time
    # given (5 s a step, half the sample spacing: two steps per sample).
    samples = (
        tuple(ProgressSample(float(t), t // 5) for t in range(0, 201, 10))  # steps 0..40
        + tuple(ProgressSample(float(t), 31 + (t - 260) // 5) for t in range(260, 601, 10))  # 31..99
        + tuple(ProgressSample(float(t), 91 + (t - 760) // 5) for t in range(760, 1201, 10))
    )
    crash = Incident(
        "c", SignalClass.CRASH, 200.0, decision_s=210.0, restart_start_s=215.0, first_new_step_s=260.0,
        checkpoint_step=30, playbook="job-failed",
    )  # fmt: skip
    hang = Incident(
        "h", "hang", 600.0, decision_s=700.0, localization_start_s=700.0, localization_end_s=720.0,
        eviction_start_s=720.0, eviction_end_s=740.0, machines_evicted=("node07",), first_new_step_s=760.0,
        checkpoint_step=90, last_step=99, playbook="hang",
    )  # fmt: skip
    ledger = build_ledger(Timeline("j", 0.0, 1200.0, samples, (hang, crash), step_time_s=5.0))
    # crash: lost 31..40, 31 ends at the first new step, 9 × 5 s = 45 s after it.
    # hang: lost 91..99, 8 × 5 s = 40 s after 760. Restart of the hang: eviction end → first new step.
    assert spans(ledger) == [
        (0.0, 200.0, P, None),
        (200.0, 210.0, DET, "c"),
        (210.0, 260.0, RST, "c"),
        (260.0, 305.0, REC, "c"),
        (305.0, 600.0, P, None),
        (600.0, 700.0, DET, "h"),
        (700.0, 720.0, LOC, "h"),
        (720.0, 740.0, EVI, "h"),
        (740.0, 760.0, RST, "h"),
        (760.0, 800.0, REC, "h"),
        (800.0, 1200.0, P, None),
    ]
    assert [r.incident_id for r in ledger.incidents] == ["c", "h"]  # by onset, whatever the input order
    crash_row, hang_row = ledger.incidents
    assert crash_row.mttr_s == 60.0 and crash_row.recomputed_steps == 9 and crash_row.machines_evicted == ()
    assert (
        hang_row.mttr_s == 160.0
        and hang_row.recomputed_steps == 8
        and hang_row.machines_evicted == ("node07",)
    )
    assert crash_row.unproductive_s == 105.0 and hang_row.unproductive_s == 200.0
    assert ledger.productive_s == 895.0
    assert ledger.cumulative_ettr == pytest.approx(895 / 1200)
    assert ledger.step_time_source == "given"
    # Sliding ETTR over the last 300 s: only productive; over 600 s: [600,1200) holds 400 s productive.
    assert ettr_at(ledger, 1200.0, 300.0) == 1.0
    assert ettr_at(ledger, 1200.0, 600.0) == pytest.approx(400 / 600)
    assert ettr_at(ledger, 600.0) == pytest.approx((200 + 295) / 600)  # cumulative at t=600


def test_waiting_span_wins_over_the_phases_it_covers() -> None:
    # The hourly limit was reached: the controller saw a crash at 100, decided at 110 to do nothing,
    # and recorded waiting from 110 until it acted again at 400 (localization 400→420, restart, first
    # new step 500). Without the waiting span, 110→400 would count to localization.
    samples = run(0.0, 100.0, 0) + run(500.0, 600.0, 5)
    inc = Incident(
        "w", "crash", 100.0, decision_s=110.0, localization_start_s=400.0, localization_end_s=420.0,
        restart_start_s=430.0, first_new_step_s=500.0,
    )  # fmt: skip
    waiting = (WaitingSpan(110.0, 400.0, "3 recoveries in the last hour (max_per_hour)"),)
    ledger = build_ledger(Timeline("j", 0.0, 600.0, samples, (inc,), waiting))
    assert spans(ledger) == [
        (0.0, 100.0, P, None),
        (100.0, 110.0, DET, "w"),
        (110.0, 400.0, WAIT, "w"),
        (400.0, 420.0, LOC, "w"),
        (420.0, 500.0, RST, "w"),
        (500.0, 600.0, P, None),
    ]
    (row,) = ledger.incidents
    assert by_cause(row)[WAIT] == 290.0 and row.mttr_s == 400.0
    assert row.recomputed_steps is None  # no checkpoint step recorded: nothing known to be redone


def test_waiting_outside_any_incident_and_overlapping_spans() -> None:
    # Two overlapping waiting spans (their union counts once), over time the job was not seen training.
    samples = run(0.0, 100.0, 0) + run(300.0, 400.0, 5)  # 10 at 100, 5 at 300: not advancing
    waiting = (WaitingSpan(150.0, 250.0), WaitingSpan(120.0, 200.0, "paused"), WaitingSpan(90.0, 80.0))
    ledger = build_ledger(Timeline("j", 0.0, 400.0, samples, (), waiting))
    assert spans(ledger) == [
        (0.0, 100.0, P, None),
        (100.0, 120.0, UNACC, None),
        (120.0, 250.0, WAIT, None),
        (250.0, 300.0, UNACC, None),
        (300.0, 400.0, P, None),
    ]
    assert ledger.notes == ("waiting span #2: end_s before start_s, counted as empty",)


def test_an_incident_left_open_ends_with_waiting_or_the_window() -> None:
    # Eviction finished at 160 and nothing else happened: the job is down, nothing under way.
    samples = run(0.0, 100.0, 0)
    inc = Incident(
        "open", "host-critical", 100.0, decision_s=120.0, eviction_start_s=130.0, eviction_end_s=160.0
    )
    ledger = build_ledger(Timeline("j", 0.0, 300.0, samples, (inc,)))
    assert spans(ledger) == [
        (0.0, 100.0, P, None),
        (100.0, 120.0, DET, "open"),
        (120.0, 160.0, EVI, "open"),
        (160.0, 300.0, WAIT, "open"),
    ]
    assert ledger.incidents[0].mttr_s is None and ledger.incidents[0].first_new_step_s is None
    # Still localizing at the window's end: localization runs to it.
    inc = Incident("loc", "hang", 100.0, decision_s=150.0, localization_start_s=160.0)
    ledger = build_ledger(Timeline("j", 0.0, 300.0, samples, (inc,)))
    assert spans(ledger)[1:] == [(100.0, 150.0, DET, "loc"), (150.0, 300.0, LOC, "loc")]
    # Only the onset: detection runs to the window's end.
    inc = Incident("det", "nan-loss", 100.0)
    ledger = build_ledger(Timeline("j", 0.0, 300.0, samples, (inc,)))
    assert spans(ledger)[1:] == [(100.0, 300.0, DET, "det")]


def test_missing_decision_ends_detection_at_the_next_recorded_time() -> None:
    samples = run(0.0, 100.0, 0) + run(200.0, 300.0, 11)
    inc = Incident("d", "crash", 100.0, restart_start_s=150.0, first_new_step_s=200.0)
    ledger = build_ledger(Timeline("j", 0.0, 300.0, samples, (inc,)))
    assert spans(ledger) == [
        (0.0, 100.0, P, None),
        (100.0, 150.0, DET, "d"),
        (150.0, 200.0, RST, "d"),
        (200.0, 300.0, P, None),
    ]


def test_recomputation_capped_by_the_next_incident_and_the_window() -> None:
    # 50 steps lost at 10 s a step = 490 s after the first new step at 200: the next incident's onset
    # (400) ends the carve-out; the second one's 490 s are cut by the window's end (700).
    samples = run(0.0, 100.0, 40) + run(200.0, 400.0, 1) + run(500.0, 700.0, 1)
    first = Incident("a", "crash", 100.0, decision_s=110.0, first_new_step_s=200.0, checkpoint_step=0)
    second = Incident(
        "b", "crash", 400.0, decision_s=410.0, first_new_step_s=500.0, checkpoint_step=0, last_step=50
    )
    ledger = build_ledger(Timeline("j", 0.0, 700.0, samples, (first, second), step_time_s=10.0))
    assert spans(ledger) == [
        (0.0, 100.0, P, None),
        (100.0, 110.0, DET, "a"),
        (110.0, 200.0, RST, "a"),
        (200.0, 400.0, REC, "a"),
        (400.0, 410.0, DET, "b"),
        (410.0, 500.0, RST, "b"),
        (500.0, 700.0, REC, "b"),
    ]
    assert ledger.incidents[0].recomputed_steps == 49  # last step 50 from the sample at the onset
    assert ledger.productive_s == 100.0


def test_recomputation_that_cannot_be_counted_is_noted() -> None:
    # No step time can be measured (no advancing pair of samples), so none is carved out.
    samples = (ProgressSample(100.0, 30), ProgressSample(200.0, 21))
    inc = Incident("x", "crash", 100.0, first_new_step_s=200.0, checkpoint_step=20)
    ledger = build_ledger(Timeline("j", 0.0, 300.0, samples, (inc,)))
    assert ledger.step_time_s is None and ledger.step_time_source == "unknown"
    assert REC not in {iv.cause for iv in ledger.intervals}
    assert ledger.incidents[0].recomputed_steps == 9
    assert ledger.notes == (
        "incident 'x': 9 steps redone but the job's step time is unknown: recomputation not counted",
    )
    # A checkpoint after the last step: nothing redone.
    inc = Incident("y", "crash", 100.0, first_new_step_s=200.0, checkpoint_step=40, last_step=30)
    ledger = build_ledger(Timeline("j", 0.0, 300.0, samples, (inc,), step_time_s=1.0))
    assert ledger.incidents[0].recomputed_steps == 0
    assert ledger.notes == ("incident 'y': checkpoint step 40 after the last step 30: nothing redone",)
    # No last step recorded and no sample at or before the onset.
    inc = Incident("z", "crash", 50.0, first_new_step_s=200.0, checkpoint_step=20)
    ledger = build_ledger(Timeline("j", 0.0, 300.0, samples, (inc,), step_time_s=1.0))
    assert ledger.incidents[0].recomputed_steps is None
    assert "no last step recorded or sampled" in ledger.notes[0]


def test_step_time_is_measured_outside_incidents() -> None:
    # 2 s a step before the incident, and a pair of samples across it that advanced 5 steps in 100 s
    # (20 s a step): that pair overlaps the incident and is not used.
    samples = (*run(0.0, 40.0, 0, every=2.0), ProgressSample(140.0, 25), ProgressSample(142.0, 26))
    inc = Incident("i", "hang", 40.0, first_new_step_s=140.0)
    ledger = build_ledger(Timeline("j", 0.0, 142.0, samples, (inc,)))
    assert ledger.step_time_s == 2.0


def test_window_edges() -> None:
    # The incident began before the window and its recomputation runs into it; samples outside the
    # window count only for their part inside; time after the last sample is unaccounted; an incident
    # after the window's end takes nothing.
    samples = run(900.0, 950.0, 0) + run(1030.0, 1100.0, 3)  # 5 at 950, 3 at 1030: not advancing
    before = Incident(
        "early", "crash", 900.0, decision_s=920.0, first_new_step_s=990.0, checkpoint_step=0, last_step=4
    )
    after = Incident("late", "crash", 2000.0)
    ledger = build_ledger(Timeline("j", 1000.0, 1200.0, samples, (after, before), step_time_s=10.0))
    # early: 3 steps redone after 990 = 30 s, up to 1020; samples 900..950 stop before the window;
    # 1020→1030 has no sample pair; 1030→1100 productive; 1100→1200 unaccounted.
    assert spans(ledger) == [
        (1000.0, 1020.0, REC, "early"),
        (1020.0, 1030.0, UNACC, None),
        (1030.0, 1100.0, P, None),
        (1100.0, 1200.0, UNACC, None),
    ]
    early, late = ledger.incidents
    assert early.mttr_s == 90.0 and by_cause(early)[REC] == 20.0 and by_cause(early)[DET] == 0.0
    assert late.unproductive_s == 0.0 and late.mttr_s is None
    assert ledger.cumulative_ettr == pytest.approx(70 / 200)
    assert ettr_at(ledger, 1000.0) is None  # nothing elapsed yet
    assert ettr_at(ledger, 5000.0) == ledger.cumulative_ettr  # clipped to the window's end


def test_no_samples_nothing_is_productive() -> None:
    ledger = build_ledger(Timeline("j", 0.0, 10.0))
    assert spans(ledger) == [(0.0, 10.0, UNACC, None)]
    assert ledger.cumulative_ettr == 0.0 and ledger.sliding_ettr == 0.0


def test_out_of_order_times_are_raised_and_noted() -> None:
    samples = run(0.0, 100.0, 0) + run(200.0, 300.0, 11)
    # decision before the onset, eviction end before its start, first new step before the restart.
    inc = Incident(
        "o", "crash", 100.0, decision_s=90.0, eviction_start_s=150.0, eviction_end_s=140.0,
        restart_start_s=200.0, first_new_step_s=180.0,
    )  # fmt: skip
    ledger = build_ledger(Timeline("j", 0.0, 300.0, samples, (inc,)))
    # decision → 100 (empty detection); eviction end → 150; first new step → 200.
    assert spans(ledger) == [
        (0.0, 100.0, P, None),
        (100.0, 150.0, EVI, "o"),
        (150.0, 200.0, RST, "o"),
        (200.0, 300.0, P, None),
    ]
    assert ledger.notes == (
        "incident 'o': decision_s, eviction_end_s, first_new_step_s before an earlier phase's time, raised to it",
    )
    assert ledger.incidents[0].mttr_s == 100.0 and ledger.incidents[0].decision_s == 100.0


def test_overlapping_incidents_the_earlier_keeps_its_time() -> None:
    # The restart of "a" failed before a new step: "b" was recorded with an onset inside "a".
    samples = run(0.0, 100.0, 0) + run(400.0, 500.0, 5)
    a = Incident("a", "crash", 100.0, decision_s=110.0, restart_start_s=120.0, first_new_step_s=200.0)
    b = Incident("b", "crash", 150.0, decision_s=250.0, restart_start_s=300.0, first_new_step_s=400.0)
    ledger = build_ledger(Timeline("j", 0.0, 500.0, samples, (b, a)))
    assert spans(ledger) == [
        (0.0, 100.0, P, None),
        (100.0, 110.0, DET, "a"),
        (110.0, 200.0, RST, "a"),
        (200.0, 250.0, DET, "b"),
        (250.0, 400.0, RST, "b"),
        (400.0, 500.0, P, None),
    ]
    assert ledger.notes == (
        "incident 'b': begins before the incident before it ended; its times raised to 200.0",
    )
    assert ledger.incidents[1].mttr_s == 250.0  # from its own onset


def test_first_new_step_inferred_from_the_samples() -> None:
    # No first new step recorded: the step advanced again at 260 (250 → 260).
    samples = run(0.0, 100.0, 0) + run(250.0, 300.0, 5)
    inc = Incident("f", "fail-slow", 100.0, decision_s=150.0, restart_start_s=200.0)
    ledger = build_ledger(Timeline("j", 0.0, 300.0, samples, (inc,)))
    assert spans(ledger) == [
        (0.0, 100.0, P, None),
        (100.0, 150.0, DET, "f"),
        (150.0, 260.0, RST, "f"),
        (260.0, 300.0, P, None),
    ]
    (row,) = ledger.incidents
    assert row.first_new_step_inferred and row.first_new_step_s == 260.0 and row.mttr_s == 160.0
    assert ledger.notes == (
        "incident 'f': no first new step recorded; the step advanced at 260.0, taken as it",
    )


def test_a_stall_no_incident_explains_is_unaccounted() -> None:
    # Step 10 at 100, 200 and 300, 11 at 400: the pair 300→400 advanced (all of it counts).
    samples = (*run(0.0, 100.0, 0), ProgressSample(200.0, 10), *run(300.0, 500.0, 10))
    ledger = build_ledger(Timeline("j", 0.0, 500.0, samples))
    assert spans(ledger) == [(0.0, 100.0, P, None), (100.0, 300.0, UNACC, None), (300.0, 500.0, P, None)]
    assert ledger.cumulative_ettr == 0.6


def test_sliding_series() -> None:
    # Productive 0→500, an incident 500→600 (detection), productive 600→1000.
    samples = run(0.0, 500.0, 0) + run(600.0, 1000.0, 51)
    inc = Incident("s", "hang", 500.0, first_new_step_s=600.0)
    ledger = build_ledger(Timeline("j", 0.0, 1000.0, samples, (inc,)), sliding_window_s=200.0)
    assert ledger.sliding_ettr == 1.0 and ledger.cumulative_ettr == pytest.approx(0.9)
    points = ettr_series(ledger, 200.0, 10)
    assert [p.at_s for p in points] == [100.0 * k for k in range(1, 11)]
    assert [p.sliding for p in points] == pytest.approx([1, 1, 1, 1, 1, 0.5, 0.5, 1, 1, 1])
    assert points[5].cumulative == pytest.approx(500 / 600)
    assert points[-1].cumulative == pytest.approx(ledger.cumulative_ettr)
    with pytest.raises(LedgerInputError, match="points"):
        ettr_series(ledger, 200.0, 0)
    with pytest.raises(LedgerInputError, match="window_s"):
        ettr_series(ledger, 0.0, 10)
    with pytest.raises(LedgerInputError, match="at_s"):
        ettr_at(ledger, float("nan"))


@pytest.mark.parametrize(
    ("timeline", "message"),
    [
        (
            Timeline("j", 0.0, 10.0, incidents=(Incident("bad", "crash", float("nan")),)),
            r"incident 'bad': onset_s: not a finite number",
        ),
        (
            Timeline("j", 0.0, 10.0, incidents=(Incident("bad", "crash", 1.0, decision_s=float("inf")),)),
            r"incident 'bad': decision_s: not a finite",
        ),
        (
            Timeline("j", 0.0, 10.0, incidents=(Incident("bad", "crash", 1.0, first_new_step_s="3"),)),
            r"incident 'bad': first_new_step_s: not a number",
        ),  # type: ignore[arg-type]
        (
            Timeline("j", 0.0, 10.0, incidents=(Incident("bad", "crash", 10**400),)),
            r"incident 'bad': onset_s: not a finite",
        ),
        (
            Timeline("j", 0.0, 10.0, incidents=(Incident("bad", "meltdown", 1.0),)),
            r"incident 'bad': unknown class 'meltdown'",
        ),
        (Timeline("j", 0.0, 10.0, incidents=(Incident("", "crash", 1.0),)), r"incident #0: id: empty"),
        (
            Timeline("j", 0.0, 10.0, incidents=(Incident("d", "crash", 1.0), Incident("d", "hang", 2.0))),
            r"incident 'd': id given twice",
        ),
        (
            Timeline("j", 0.0, 10.0, incidents=(Incident("s", "crash", 1.0, checkpoint_step=-1),)),
            r"incident 's': checkpoint_step: step out of range",
        ),
        (
            Timeline("j", 0.0, 10.0, incidents=(Incident("s", "crash", 1.0, last_step=True),)),
            r"incident 's': last_step: not an integer",
        ),  # type: ignore[arg-type]
        (
            Timeline("j", 0.0, 10.0, incidents=(Incident("m", "crash", 1.0, machines_evicted=("",)),)),
            r"incident 'm': machine evicted: empty",
        ),
        (
            Timeline("j", 0.0, 10.0, incidents=(Incident("p", "crash", 1.0, playbook="x" * 2000),)),
            r"incident 'p': playbook: 2000 characters",
        ),
        (
            Timeline("j", 0.0, 10.0, samples=(ProgressSample(1.0, 1), ProgressSample(float("nan"), 2))),
            r"progress sample #1: time_s",
        ),
        (
            Timeline("j", 0.0, 10.0, samples=(ProgressSample(1.0, 2**63),)),
            r"progress sample #0: step: step out of range",
        ),
        (Timeline("j", 0.0, 10.0, waiting=(WaitingSpan(1.0, float("-inf")),)), r"waiting span #0: end_s"),
        (Timeline("j", 5.0, 5.0), r"job 'j': window \[5.0, 5.0\] is not a non-empty span"),
        (Timeline("j", -1.0, 5.0), r"is not a non-empty span"),
        (Timeline("j", 0.0, float("inf")), r"job 'j': window end_s: not a finite number"),
        (Timeline("j", 0.0, 10.0, step_time_s=0.0), r"step_time_s: must be > 0"),
        (Timeline("", 0.0, 10.0), r"job: empty"),
    ],
)
def test_bad_input_names_what_is_at_fault(timeline: Timeline, message: str) -> None:
    with pytest.raises(LedgerInputError, match=message) as err:
        build_ledger(timeline)
    assert isinstance(err.value, ValueError) and isinstance(err.value, ConfigError)
    assert err.value.exit_code == ExitCode.CONFIG
    assert "\n" not in str(err.value)


def test_bad_sliding_window() -> None:
    with pytest.raises(LedgerInputError, match="sliding_window_s"):
        build_ledger(Timeline("j", 0.0, 10.0), sliding_window_s=-1.0)


def test_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ledger_mod, "MAX_INCIDENTS", 2)
    monkeypatch.setattr(ledger_mod, "MAX_SAMPLES", 3)
    monkeypatch.setattr(ledger_mod, "MAX_WAITING_SPANS", 1)
    monkeypatch.setattr(ledger_mod, "MAX_EVICTED_PER_INCIDENT", 1)
    incidents = tuple(Incident(f"i{k}", "crash", float(k)) for k in range(3))
    with pytest.raises(
        LedgerInputError, match=r"3 incidents given, at most 2 are processed \(MAX_INCIDENTS\)"
    ):
        build_ledger(Timeline("j", 0.0, 10.0, incidents=incidents))
    with pytest.raises(LedgerInputError, match=r"4 progress samples given, at most 3 .*MAX_SAMPLES"):
        build_ledger(Timeline("j", 0.0, 10.0, samples=run(0.0, 3.0, 0, every=1.0)))
    with pytest.raises(LedgerInputError, match=r"2 waiting spans given.*MAX_WAITING_SPANS"):
        build_ledger(Timeline("j", 0.0, 10.0, waiting=(WaitingSpan(1.0, 2.0), WaitingSpan(3.0, 4.0))))
    with pytest.raises(
        LedgerInputError, match=r"2 machines evicted by incident 'e' given.*MAX_EVICTED_PER_INCIDENT"
    ):
        build_ledger(
            Timeline("j", 0.0, 10.0, incidents=(Incident("e", "crash", 1.0, machines_evicted=("a", "b")),))
        )
    # At the bounds: processed.
    assert len(build_ledger(Timeline("j", 0.0, 10.0, incidents=incidents[:2])).incidents) == 2


def test_notes_are_bounded() -> None:
    samples = run(0.0, 10.0, 0, every=1.0)
    incidents = tuple(
        Incident(f"i{k:03d}", "crash", 1000.0 + k, decision_s=999.0 + k)
        for k in range(ledger_mod.MAX_NOTES + 10)
    )
    ledger = build_ledger(Timeline("j", 0.0, 2000.0, samples, incidents))
    assert len(ledger.notes) == ledger_mod.MAX_NOTES
    assert ledger.notes[-1] == "… and 11 more notes"


def test_same_ledger_whatever_the_input_order() -> None:
    timeline = Timeline("pretrain", 0.0, 1000.0, CRASH_SAMPLES, (CRASH,))
    reordered = Timeline("pretrain", 0.0, 1000.0, tuple(reversed(CRASH_SAMPLES)), (CRASH,))
    assert build_ledger(timeline) == build_ledger(reordered) == build_ledger(timeline)
