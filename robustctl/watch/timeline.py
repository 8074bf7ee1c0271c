"""A job's ETTR timeline as a sweep carries it (issue 22, item 4): a few numbers for its textfile and a
bounded partition of the window for its HTML page (:func:`bounded_timeline`), built from a ledger
(:mod:`robustctl.watch.ledger`) by :meth:`robustctl.commands.ettr.EttrResult.summary`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from robustctl.watch.ledger import IncidentRow, LedgerInterval

__all__ = [
    "MAX_TIMELINE_INCIDENTS",
    "MAX_TIMELINE_INTERVALS",
    "JobEttr",
    "TimelineInterval",
    "bounded_timeline",
]

MAX_TIMELINE_INTERVALS = 2_000
"""Most intervals of a job's ledger a sweep carries to its HTML page (and its ``--json``). A timeline
bar is at most a few thousand pixels wide: 2,000 segments already put several in one pixel, and each
is about 200 bytes of HTML, so one job's bar stays under half a megabyte however long its history
(a ledger of :data:`robustctl.watch.ledger.MAX_INCIDENTS` incidents has tens of thousands). More are
merged, then the earliest left out and counted (:func:`bounded_timeline`)."""

MAX_TIMELINE_INCIDENTS = 500
"""Most incident rows of a job a sweep carries to its HTML page (the most recent ones; the rest are
counted). Our choice: an incident every 4 hours for three months, far more than anyone reads in a
table, and a few hundred kilobytes of rows; ``robustctl ettr --json`` lists them all."""


@dataclass(frozen=True)
class TimelineInterval:
    """One stretch of a job's timeline as a sweep's page draws it.

    Attributes:
        cause: a :class:`~robustctl.watch.ledger.Cause` value (``productive``, ``detection``, ...).
        start_s, end_s: UNIX s, start ≤ end.
    """

    cause: str
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        """``end_s - start_s``, seconds."""
        return self.end_s - self.start_s


@dataclass(frozen=True)
class JobEttr:
    """A job's ETTR in a few numbers (what a sweep's textfile exports), and its timeline (what its
    HTML page draws).

    Attributes:
        job. cumulative_ettr, sliding_ettr: in [0, 1]. sliding_window_s: seconds. productive_s,
        total_s: seconds of the window. unproductive_s: seconds by cause (every cause of
        :data:`robustctl.watch.ledger.UNPRODUCTIVE_CAUSES`, zeros included).
        window_start_s, window_end_s: the ledger's window, UNIX s (None: not carried).
        intervals: the ledger's partition of the window, in time order, at most
            :data:`MAX_TIMELINE_INTERVALS` (:func:`bounded_timeline`); intervals_left_out: how many
            earlier ones (after merging) were left out, covering ``[window_start_s, intervals[0].start_s]``.
        incidents: the ledger's most recent incident rows, by onset, at most
            :data:`MAX_TIMELINE_INCIDENTS`; incidents_left_out: how many earlier rows were left out.
    """

    job: str
    cumulative_ettr: float
    sliding_ettr: float
    sliding_window_s: float
    productive_s: float
    total_s: float
    unproductive_s: Mapping[str, float] = field(default_factory=dict)
    window_start_s: float | None = None
    window_end_s: float | None = None
    intervals: tuple[TimelineInterval, ...] = ()
    intervals_left_out: int = 0
    incidents: tuple[IncidentRow, ...] = ()
    incidents_left_out: int = 0


def bounded_timeline(
    intervals: Sequence[LedgerInterval], limit: int = MAX_TIMELINE_INTERVALS
) -> tuple[tuple[TimelineInterval, ...], int]:
    """``intervals`` (a ledger's partition, in time order) as at most ``limit`` (≥ 1) timeline intervals.

    Within the limit they are kept one for one. Over it, neighbours of the same cause are merged first
    (the ledger keeps apart neighbours of different incidents); when that is still too many, the most
    recent ``limit`` are kept.

    Args:
        intervals: a ledger's partition of its window, in time order.
        limit: the most intervals kept (≥ 1).

    Returns:
        ``(kept, left_out)``: the intervals kept, in time order, and how many earlier (merged)
        intervals were left out.
    """
    out = [TimelineInterval(iv.cause.value, iv.start_s, iv.end_s) for iv in intervals]
    if len(out) <= limit:
        return tuple(out), 0
    merged: list[TimelineInterval] = []
    for iv in out:
        last = merged[-1] if merged else None
        if last is not None and last.cause == iv.cause and last.end_s == iv.start_s:
            merged[-1] = TimelineInterval(iv.cause, last.start_s, iv.end_s)
        else:
            merged.append(iv)
    left_out = max(0, len(merged) - limit)
    return tuple(merged[left_out:]), left_out
