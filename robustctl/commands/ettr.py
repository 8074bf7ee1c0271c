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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustctl.errors import UsageError
from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION, strict_jsonable
from robustctl.watch.timeline import (
    MAX_TIMELINE_INCIDENTS,
    MAX_TIMELINE_INTERVALS,
    JobEttr,
    TimelineInterval,
    bounded_timeline,
)

if TYPE_CHECKING:
    from robustctl.inventory import Inventory
    from robustctl.store import Store
    from robustctl.watch.ledger import EttrLedger, IncidentRow

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


def ettr_of_store(
    store: Store, job: str, *, now: float, window_s: float = DEFAULT_WINDOW_S, since: float | None = None
) -> EttrResult:
    """The ETTR ledger of ``job`` from an open store, over ``[since or the earliest record, now]``.

    Args:
        store: the open store.
        job: the job.
        now: the window's end, UNIX s.
        window_s: the sliding window, seconds (> 0).
        since: the window's start, UNIX s (None: the job's earliest progress sample, incident onset
            or waiting start).

    Returns:
        An :class:`EttrResult`; without records in the window (or with all of them after ``now``: a
        clock behind the watcher's), one without a ledger (exit 3).

    Raises:
        StoreError: the store cannot be read or a row holds a bad field (exit 78).
        LedgerInputError: the records cannot be read as a timeline (exit 78).
        WatchStoreInputError: ``since`` is not a time (exit 78).
    """
    from robustctl.watch.ledger import build_ledger
    from robustctl.watch.records import read_timeline

    read = read_timeline(store, job, now=now, since=since)

    def result(ledger: EttrLedger | None, message: str) -> EttrResult:
        return EttrResult(
            job, str(store.path), now, since, window_s, ledger, message,
            samples=read.samples, incidents_read=read.incidents, waiting_read=read.waiting,
        )  # fmt: skip

    if read.timeline is None:
        return result(None, read.message)
    ledger = build_ledger(read.timeline, window_s)
    message = (
        f"job {job!r}: ETTR {ledger.cumulative_ettr:.1%} over {ledger.total_s:.0f} s, "
        f"{len(ledger.incidents)} incident(s)"
    )
    return result(ledger, message)


def run_ettr(request: EttrRequest, *, clock: Callable[[], float] = time.time) -> EttrResult:
    """Compute ``request.job``'s ETTR ledger from the store (module docstring). A store file that does
    not exist holds no data (nothing is created).

    Args:
        request: the job, the inventory it is checked against, the store file, the sliding window
            and the observation window's length.
        clock: UNIX seconds, the window's end (tests pass a fake).

    Returns:
        An :class:`EttrResult`: the ledger, or none (exit 3) when the store holds no data for the job
        in the window or does not exist.

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
