"""Property-based tests of the jobs section of the sweep's HTML page (robustctl.report.html): any ledger.

Contracts checked, for any timeline the ledger's own property tests generate (windows anywhere in
the allowed range, samples, incidents and waiting spans in any order, overlapping, outside the
window): the page renders without an exception; it has one timeline segment per interval the sweep
carried (plus one for those left out), each with the class of its cause and a width that is a finite
number in [0, 100], together exactly 100; one incident row per incident; and its size is bounded by
what it shows. The same holds when the timeline is cut to a small bound
(:func:`robustctl.commands.ettr.bounded_timeline`), whose kept intervals are the most recent, in
order, end to end, ending at the window's end.
Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.commands.ettr import EttrResult, JobEttr, bounded_timeline
from robustctl.report.html import TIMELINE_CAUSES, sweep_html
from robustctl.watch.ledger import EttrLedger, Timeline, build_ledger
from tests.unit.test_fuzz_watch_ledger import timelines
from tests.unit.test_sweep import parse_page, sweep_with_jobs, width_of

pytestmark = pytest.mark.fuzz

SEGMENT_BYTES = 200
"""Most bytes one timeline segment takes: its span, class, width and a title of a cause, two times and
a duration (about 150)."""

ROW_BYTES = 400
"""Most bytes one incident row takes with the generators' short ids, playbooks and machine names."""

JOB_BYTES = 3_000
"""Most bytes of a job's section besides its segments and rows: heading, ETTR line, legend, table
head, the line on what was left out."""


def summary(ledger: EttrLedger) -> JobEttr:
    job = EttrResult(ledger.job, "s.db", ledger.end_s, None, ledger.sliding_window_s, ledger, "").summary()
    assert job is not None
    return job


def check_page(job: JobEttr) -> None:
    """The page of a sweep with ``job``: the contracts of the module docstring."""
    empty = sweep_html(sweep_with_jobs())
    page = sweep_html(sweep_with_jobs(job))
    parsed = parse_page(page)
    segs = parsed.segments[job.job]
    omitted = 1 if job.intervals_left_out else 0
    assert len(segs) == len(job.intervals) + omitted
    classes = [c for c, _, _ in segs]
    assert classes[omitted:] == [f"seg c-{iv.cause}" for iv in job.intervals]
    assert all(iv.cause in TIMELINE_CAUSES for iv in job.intervals)
    if omitted:
        assert classes[0] == "seg c-omitted"
    widths = [width_of(style) for _, style, _ in segs]
    assert all(math.isfinite(w) and 0.0 <= w <= 100.0 for w in widths), widths
    assert math.isclose(sum(widths), 100.0, abs_tol=1e-6), sum(widths)
    assert len(parsed.rows[job.job]) == max(1, len(job.incidents))  # "none" when there is none
    assert len(page) - len(empty) <= JOB_BYTES + SEGMENT_BYTES * len(segs) + ROW_BYTES * len(job.incidents)


@given(timelines(), st.floats(1e-3, 1e7) | st.just(86_400.0))
def test_any_ledger_renders_a_bounded_timeline(timeline: Timeline, window_s: float) -> None:
    ledger = build_ledger(timeline, window_s)
    job = summary(ledger)
    assert job.intervals_left_out == 0 and len(job.intervals) == len(ledger.intervals)
    assert len(job.incidents) == len(ledger.incidents)
    check_page(job)


@given(timelines(min_incidents=1), st.integers(1, 6))
def test_a_timeline_cut_to_any_bound_keeps_the_most_recent_end_to_end(timeline: Timeline, limit: int) -> None:
    ledger = build_ledger(timeline)
    kept, left_out = bounded_timeline(ledger.intervals, limit)
    assert 1 <= len(kept) <= limit and left_out >= 0
    assert kept[-1].end_s == ledger.end_s
    assert all(a.end_s == b.start_s for a, b in itertools.pairwise(kept))
    if len(ledger.intervals) <= limit:
        assert left_out == 0 and [(iv.cause, iv.start_s, iv.end_s) for iv in kept] == [
            (iv.cause.value, iv.start_s, iv.end_s) for iv in ledger.intervals
        ]
    elif left_out == 0:  # merging alone brought it under the bound: the whole window is kept
        assert kept[0].start_s == ledger.start_s
        assert all(a.cause != b.cause for a, b in itertools.pairwise(kept))
    else:
        assert len(kept) == limit and kept[0].start_s > ledger.start_s
    check_page(dataclasses.replace(summary(ledger), intervals=kept, intervals_left_out=left_out))
