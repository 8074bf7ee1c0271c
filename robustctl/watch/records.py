"""What ``robustctl watch`` recorded for a job, read back as the ledger's timeline (issue 22, item 4).

:func:`read_timeline` reads the job's progress samples, incidents (with the times of their phases) and
spans of waiting with no action from the store (:mod:`robustctl.watchstore`) and maps them to a
:class:`~robustctl.watch.ledger.Timeline` over ``[since or the earliest record, now]``, or says why there
is none. Text from the store is cut to the ledger's :data:`~robustctl.watch.ledger.MAX_LABEL_CHARS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from robustctl.watch.ledger import MAX_LABEL_CHARS, Incident, ProgressSample, Timeline, WaitingSpan

if TYPE_CHECKING:
    from robustctl.store import Store
    from robustctl.watchstore import IncidentRecord

__all__ = ["StoreTimeline", "label", "read_timeline"]


@dataclass(frozen=True)
class StoreTimeline:
    """A job's records read from the store.

    Attributes:
        timeline: the ledger's input (None: no data in the window). message: why there is none (empty
            with a timeline). samples, incidents, waiting: how many records of each kind were read.
    """

    timeline: Timeline | None
    message: str
    samples: int
    incidents: int
    waiting: int


def label(text: str) -> str:
    """Store text cut to the ledger's :data:`~robustctl.watch.ledger.MAX_LABEL_CHARS` (the store keeps
    up to :data:`robustctl.store.MAX_TEXT`; a reason or a name is display only in the ledger).

    Args:
        text: a name or reason from the store.

    Returns:
        ``text``, or its first characters ending with ``…``.
    """
    return text if len(text) <= MAX_LABEL_CHARS else text[: MAX_LABEL_CHARS - 1] + "…"


def _incident(i: IncidentRecord) -> Incident:
    """A stored incident as the ledger's :class:`~robustctl.watch.ledger.Incident`."""
    return Incident(
        incident_id=str(i.id),
        incident_class=i.incident_class,
        onset_s=i.onset_at,
        decision_s=i.decision_at,
        localization_start_s=i.localization_start_at,
        localization_end_s=i.localization_end_at,
        eviction_start_s=i.eviction_start_at,
        eviction_end_s=i.eviction_end_at,
        machines_evicted=tuple(label(m) for m in i.machines_evicted),
        restart_start_s=i.restart_start_at,
        first_new_step_s=i.first_new_step_at,
        checkpoint_step=i.checkpoint_step,
        last_step=i.last_step,
        playbook=None if i.playbook is None else label(i.playbook),
    )


def read_timeline(store: Store, job: str, *, now: float, since: float | None) -> StoreTimeline:
    """The job's timeline from an open store, over ``[since or the earliest record, now]``.

    Args:
        store: the open store.
        job: the job.
        now: the window's end, UNIX s.
        since: the window's start, UNIX s (None: the job's earliest progress sample, incident onset
            or waiting start).

    Returns:
        A :class:`StoreTimeline`; without records in the window (or with all of them after ``now``: a
        clock behind the watcher's), one without a timeline and a message saying so.

    Raises:
        StoreError: the store cannot be read or a row holds a bad field (exit 78).
        WatchStoreInputError: ``since`` is not a time (exit 78).
    """
    from robustctl.watchstore import incidents, progress_samples, waiting

    path = str(store.path)
    samples = progress_samples(store, job, since)
    found = incidents(store, job, since)
    spans = waiting(store, job, since)
    counts = {"samples": len(samples), "incidents": len(found), "waiting": len(spans)}
    firsts = [
        *(s.at for s in samples[:1]),
        *(i.onset_at for i in found[:1]),
        *(w.start_at for w in spans[:1]),
    ]
    if not firsts:
        where = "" if since is None else " since the window's start"
        return StoreTimeline(
            None,
            f"no ETTR data for job {job!r} in {path}{where}: no progress sample, incident or waiting "
            "span recorded (is robustctl watch running for it?)",
            **counts,
        )
    start = since if since is not None else min(firsts)
    if start >= now:
        return StoreTimeline(
            None,
            f"no ETTR data for job {job!r} in {path} before now: its records begin at {start!r}, "
            f"after this clock's {now!r} (a clock behind the watcher's?)",
            **counts,
        )
    timeline = Timeline(
        job=job,
        start_s=start,
        end_s=now,
        samples=tuple(ProgressSample(s.at, s.step) for s in samples),
        incidents=tuple(_incident(i) for i in found),
        waiting=tuple(
            WaitingSpan(w.start_at, now if w.end_at is None else w.end_at, label(w.reason)) for w in spans
        ),
    )
    return StoreTimeline(timeline, "", **counts)
