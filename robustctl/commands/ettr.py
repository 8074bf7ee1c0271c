"""``robustctl ettr`` as a library call: a job's ETTR ledger (issue 22, item 4) from the state store.

:func:`run_ettr` reads what ``robustctl watch`` recorded for the job (progress samples, incidents with
the times of their phases, spans of waiting with no action; :mod:`robustctl.watchstore`), maps them to
the ledger's :class:`~robustctl.watch.ledger.Timeline` and builds the ledger
(:func:`robustctl.watch.ledger.build_ledger`, where every rule of the partition is written down):
cumulative ETTR, sliding-window ETTR over ``window_s``, the unproductive time by cause, and one row per
incident (onset, class, playbook, MTTR, machines evicted).

**The observation window** ends now (the ``clock``). It starts ``since_s`` seconds before now when
given, else at the earliest time the store holds for the job: its first progress sample, its first
incident's onset or its first waiting span's start. Time in it that no sample shows training and no
record explains is ``unaccounted`` (never productive).

**No data is not a good ETTR**: a job the store holds nothing for in the window (no sample, no
incident, no waiting span; or a store file that does not exist) is a result with ``has_data`` false,
a message saying so, and exit 3 ("could not check"), never ETTR 1.0.

**Exit codes**: 0 a ledger was computed; 3 no data for the job; 64 a bad request (a window that is not
a positive duration within :data:`MAX_WINDOW_S`, a job the inventory does not have); 78 the store
cannot be read or holds a bad row (:class:`~robustctl.store.StoreError`), or what it holds cannot be
read as a timeline (:class:`~robustctl.watch.ledger.LedgerInputError`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustctl.errors import UsageError
from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION, strict_jsonable

if TYPE_CHECKING:
    from robustctl.inventory import Inventory
    from robustctl.store import Store
    from robustctl.watch.ledger import EttrLedger, IncidentRow, LedgerInterval

__all__ = [
    "DEFAULT_WINDOW_S",
    "MAX_TIMELINE_INCIDENTS",
    "MAX_TIMELINE_INTERVALS",
    "MAX_WINDOW_S",
    "EttrRequest",
    "EttrResult",
    "JobEttr",
    "TimelineInterval",
    "bounded_timeline",
    "ettr_of_store",
    "run_ettr",
]

DEFAULT_WINDOW_S = 86_400.0
"""Sliding window of ``robustctl ettr`` unless ``--window`` says otherwise, seconds: 24 hours, the
ledger's :data:`robustctl.watch.ledger.DEFAULT_SLIDING_WINDOW_S` (issue 22's ``--window 24h``)."""

MAX_WINDOW_S = 3650 * 86_400.0
"""Longest ``--window`` or ``--since``, seconds: ten years, the bound ``robustctl history --since``
has (longer than any training job; far from the store's time range)."""

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
class EttrRequest:
    """``robustctl ettr -i INV --job J [--window 24h] [--since 7d]``.

    Attributes:
        job: the job. inventory: the resolved inventory (None: none given; the job is then not
            checked against one). state: the store file (None: ``$ROBUSTCTL_STATE`` or the XDG
            default). window_s: the sliding window, seconds (0 < w ≤ :data:`MAX_WINDOW_S`).
        since_s: the observation window starts this many seconds before now (None: at the job's
            earliest record).
    """

    job: str
    inventory: Inventory | None = None
    state: Path | None = None
    window_s: float = DEFAULT_WINDOW_S
    since_s: float | None = None


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


@dataclass(frozen=True)
class EttrResult:
    """A job's ETTR ledger, or why there is none (the ``--json`` document, kind ``"ettr"``).

    Attributes:
        job. state: the store file read. now: the window's end, UNIX s. since: the start asked for
            (UNIX s; None: the job's earliest record). window_s: the sliding window, seconds.
        ledger: the ledger (None: no data). message: one line, what was found or why nothing was.
        samples, incidents_read, waiting_read: how many records were read.
    """

    job: str
    state: str
    now: float
    since: float | None
    window_s: float
    ledger: EttrLedger | None
    message: str
    samples: int = 0
    incidents_read: int = 0
    waiting_read: int = 0
    kind: str = "ettr"
    schema_version: int = SCHEMA_VERSION

    @property
    def has_data(self) -> bool:
        """Whether a ledger was computed."""
        return self.ledger is not None

    @property
    def exit_code(self) -> ExitCode:
        """0 a ledger; 3 no data for the job (could not check: never ETTR 1.0)."""
        return ExitCode.OK if self.ledger is not None else ExitCode.UNKNOWN

    @property
    def incidents(self) -> tuple[IncidentRow, ...]:
        """The ledger's incident rows (none without data)."""
        return self.ledger.incidents if self.ledger is not None else ()

    def breakdown(self) -> list[tuple[str, float, float]]:
        """``(cause, seconds, fraction of the window)`` for productive time, then every unproductive
        cause in the ledger's order; empty without data."""
        led = self.ledger
        if led is None:
            return []
        rows = [("productive", led.productive_s), *((c.value, s) for c, s in led.seconds)]
        return [(name, s, s / led.total_s) for name, s in rows]

    def summary(self) -> JobEttr | None:
        """The few numbers a sweep exports and the timeline its page draws, bounded by
        :data:`MAX_TIMELINE_INTERVALS` and :data:`MAX_TIMELINE_INCIDENTS` (None without data)."""
        led = self.ledger
        if led is None:
            return None
        intervals, intervals_left_out = bounded_timeline(led.intervals)
        incidents_left_out = max(0, len(led.incidents) - MAX_TIMELINE_INCIDENTS)
        return JobEttr(
            job=self.job,
            cumulative_ettr=led.cumulative_ettr,
            sliding_ettr=led.sliding_ettr,
            sliding_window_s=led.sliding_window_s,
            productive_s=led.productive_s,
            total_s=led.total_s,
            unproductive_s={c.value: s for c, s in led.seconds},
            window_start_s=led.start_s,
            window_end_s=led.end_s,
            intervals=intervals,
            intervals_left_out=intervals_left_out,
            incidents=led.incidents[incidents_left_out:],
            incidents_left_out=incidents_left_out,
        )

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document: strict JSON. The ledger's intervals are left out (``robustctl
        ettr`` shows the breakdown and the incidents; the partition can be long)."""
        led = self.ledger
        doc: dict[str, Any] = {
            "kind": self.kind,
            "schema_version": self.schema_version,
            "exit_code": int(self.exit_code),
            "job": self.job,
            "state": self.state,
            "has_data": led is not None,
            "message": self.message,
            "now": self.now,
            "since": self.since,
            "sliding_window_s": self.window_s,
            "records": {
                "samples": self.samples,
                "incidents": self.incidents_read,
                "waiting": self.waiting_read,
            },
            "window": None,
            "cumulative_ettr": None,
            "sliding_ettr": None,
            "productive_s": None,
            "unproductive_s": {},
            "breakdown": [],
            "step_time_s": None,
            "step_time_source": None,
            "incidents": [],
            "notes": [],
        }
        if led is not None:
            doc.update(
                window={"start_s": led.start_s, "end_s": led.end_s, "total_s": led.total_s},
                cumulative_ettr=led.cumulative_ettr,
                sliding_ettr=led.sliding_ettr,
                productive_s=led.productive_s,
                unproductive_s={c.value: s for c, s in led.seconds},
                breakdown=[{"cause": c, "seconds": s, "fraction": f} for c, s, f in self.breakdown()],
                step_time_s=led.step_time_s,
                step_time_source=led.step_time_source,
                incidents=[row.to_json() for row in led.incidents],
                notes=list(led.notes),
            )
        out: dict[str, Any] = strict_jsonable(doc)
        return out


def _duration(value: object, what: str) -> float:
    """``value`` as seconds in (0, :data:`MAX_WINDOW_S`], or UsageError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{what}: not a duration ({value!r:.40})")
    seconds = float(value)
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_WINDOW_S):
        raise UsageError(f"{what}: must be more than 0 and at most 3650d ({value!r:.40})")
    return seconds


def _label(text: str) -> str:
    """Store text cut to the ledger's :data:`~robustctl.watch.ledger.MAX_LABEL_CHARS` (the store keeps
    up to :data:`robustctl.store.MAX_TEXT`; a reason or a name is display only in the ledger)."""
    from robustctl.watch.ledger import MAX_LABEL_CHARS

    return text if len(text) <= MAX_LABEL_CHARS else text[: MAX_LABEL_CHARS - 1] + "…"


def ettr_of_store(
    store: Store, job: str, *, now: float, window_s: float = DEFAULT_WINDOW_S, since: float | None = None
) -> EttrResult:
    """The ETTR ledger of ``job`` from an open store, over ``[since or the earliest record, now]``.

    Args:
        store: the open store. job: the job. now: the window's end, UNIX s.
        window_s: the sliding window, seconds (> 0). since: the window's start, UNIX s (None: the
            job's earliest progress sample, incident onset or waiting start).

    Returns:
        An :class:`EttrResult`; without records in the window (or with all of them after ``now``: a
        clock behind the watcher's), one without a ledger (exit 3).

    Raises:
        StoreError: the store cannot be read or a row holds a bad field (exit 78).
        LedgerInputError: the records cannot be read as a timeline (exit 78).
        WatchStoreInputError: ``since`` is not a time (exit 78).
    """
    from robustctl.watch.ledger import Incident, ProgressSample, Timeline, WaitingSpan, build_ledger
    from robustctl.watchstore import incidents, progress_samples, waiting

    path = str(store.path)
    samples = progress_samples(store, job, since)
    found = incidents(store, job, since)
    spans = waiting(store, job, since)

    def result(ledger: EttrLedger | None, message: str) -> EttrResult:
        return EttrResult(
            job, path, now, since, window_s, ledger, message,
            samples=len(samples), incidents_read=len(found), waiting_read=len(spans),
        )  # fmt: skip

    firsts = [
        *(s.at for s in samples[:1]),
        *(i.onset_at for i in found[:1]),
        *(w.start_at for w in spans[:1]),
    ]
    if not firsts:
        where = "" if since is None else " since the window's start"
        return result(
            None,
            f"no ETTR data for job {job!r} in {path}{where}: no progress sample, incident or waiting "
            "span recorded (is robustctl watch running for it?)",
        )
    start = since if since is not None else min(firsts)
    if start >= now:
        return result(
            None,
            f"no ETTR data for job {job!r} in {path} before now: its records begin at {start!r}, "
            f"after this clock's {now!r} (a clock behind the watcher's?)",
        )
    timeline = Timeline(
        job=job,
        start_s=start,
        end_s=now,
        samples=tuple(ProgressSample(s.at, s.step) for s in samples),
        incidents=tuple(
            Incident(
                incident_id=str(i.id),
                incident_class=i.incident_class,
                onset_s=i.onset_at,
                decision_s=i.decision_at,
                localization_start_s=i.localization_start_at,
                localization_end_s=i.localization_end_at,
                eviction_start_s=i.eviction_start_at,
                eviction_end_s=i.eviction_end_at,
                machines_evicted=tuple(_label(m) for m in i.machines_evicted),
                restart_start_s=i.restart_start_at,
                first_new_step_s=i.first_new_step_at,
                checkpoint_step=i.checkpoint_step,
                last_step=i.last_step,
                playbook=None if i.playbook is None else _label(i.playbook),
            )
            for i in found
        ),
        waiting=tuple(
            WaitingSpan(w.start_at, now if w.end_at is None else w.end_at, _label(w.reason)) for w in spans
        ),
    )
    ledger = build_ledger(timeline, window_s)
    message = (
        f"job {job!r}: ETTR {ledger.cumulative_ettr:.1%} over {ledger.total_s:.0f} s, "
        f"{len(ledger.incidents)} incident(s)"
    )
    return result(ledger, message)


def run_ettr(request: EttrRequest, *, clock: Callable[[], float] = time.time) -> EttrResult:
    """Compute ``request.job``'s ETTR ledger from the store (module docstring). A store file that does
    not exist holds no data (nothing is created).

    Raises:
        UsageError: a window or since that is not a positive duration within :data:`MAX_WINDOW_S`, an
            empty or overlong job name, or a job the given inventory does not have (exit 64).
        StoreError / LedgerInputError: the store cannot be read, or holds what cannot be a ledger
            (exit 78).
    """
    from robustctl.commands.options import state_path
    from robustctl.store import Store
    from robustctl.watch.ledger import MAX_LABEL_CHARS

    if not request.job or len(request.job) > MAX_LABEL_CHARS:
        raise UsageError(f"--job: a job name of 1 to {MAX_LABEL_CHARS} characters ({request.job!r:.40})")
    window_s = _duration(request.window_s, "--window")
    since_s = None if request.since_s is None else _duration(request.since_s, "--since")
    inv = request.inventory
    if inv is not None and request.job not in inv.jobs:
        known = ", ".join(sorted(inv.jobs)[:10]) or "none"
        raise UsageError(f"--job {request.job!r:.80}: not a job of {inv.source} (its jobs: {known})")
    path = state_path(request.state)
    now = clock()
    since = None if since_s is None else max(0.0, now - since_s)
    if not path.exists():
        return EttrResult(
            request.job, str(path), now, since, window_s, None,
            f"no ETTR data for job {request.job!r}: the state store {path} does not exist "
            "(is robustctl watch running for it?)",
        )  # fmt: skip
    with Store.open(path, clock=clock) as store:
        return ettr_of_store(store, request.job, now=now, window_s=window_s, since=since)
