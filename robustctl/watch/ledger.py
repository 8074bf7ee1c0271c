"""The ETTR ledger of one job: its observation window cut into productive time and unproductive time
by cause, cumulative and sliding-window ETTR, and one row per incident.

Pure and deterministic: :func:`build_ledger` reads only the :class:`Timeline` it is given (progress
samples, incidents with the times of their phases, spans of waiting with no action, the window).
Times are UNIX seconds passed in; the clock is never read. The same timeline gives the same ledger.

**ETTR** (effective training time ratio) is productive time / wall time (the design glossary).
ByteRobust (arXiv 2509.16293, §7) reports it two ways, cumulatively and over a sliding window, and
its headline is "97% ETTR for a three-month training job on 9,600 GPUs" (abstract). The stored copies
of the paper reachable when this module was written hold the abstract but not §7's wording, so the
two formulas here are what we implement, not a quotation:

- **cumulative ETTR** at time ``t``: productive seconds in ``[start, t]`` / ``(t - start)``;
- **sliding-window ETTR** at ``t`` over ``W`` seconds: productive seconds in
  ``[max(start, t - W), t]`` / the length of that span (:data:`DEFAULT_SLIDING_WINDOW_S`: 24 h).

**MTTR** is failure onset → first new training step (design glossary), per incident.

**The partition.** ``[start, end]`` is cut into :class:`LedgerInterval` s, in time order, each
sharing its end with the next one's start: they cover the window exactly once (no gap, no overlap).
Each instant takes the first cause that claims it, in this order:

1. ``waiting``: a :class:`WaitingSpan`, the controller's own record that the job was down and it did
   nothing (e.g. after the hourly recovery limit). It wins over everything below: while the
   controller was not acting, no phase of an incident was under way.
2. an incident's phases (see :class:`Incident`): ``detection`` from the onset (the time of the last
   good step) to the decision; ``localization`` (stacks, diagnose, replay) to its end; ``eviction``
   (eviction and standby swap) to its end; ``restart`` to the first new step. Time between two
   phases counts to the phase that follows it (the playbook was getting that phase under way); a
   phase whose end is missing ends where the next recorded time of the incident is. Time after the
   incident's last phase with no first new step is ``waiting`` (nothing was under way).
3. ``recomputation``: the lost steps, redone after the restart. They look productive (the step
   advances) but only redo work done before the incident, so they are carved out of the time right
   after the first new step: ``max(0, last_step - checkpoint_step - 1)`` steps × the job's step
   time. The first redone step (``checkpoint_step + 1``) ends at the first new step, inside the
   restart phase, hence the ``- 1``: these are the steps *between* the checkpoint loaded and the last
   step before the incident (issue 22). The carve-out stops at the next incident's onset and at the
   window's end. Google's ml-goodput-measurement counts the same lost work at the time it first ran
   (``BadputType.WASTED_PROGRESS_FROM_DISRUPTION``); we count it when it is redone, as issue 22 asks,
   so the ledger of a past window never changes when a later incident happens.
4. ``productive``: between two consecutive progress samples whose step advanced.
5. ``unaccounted``: anything else: no step was seen advancing and nothing recorded explains it
   (before the first sample, after the last one, a stall that no incident covers). Time nobody saw
   training is never counted as productive.

**The job's step time** is :attr:`Timeline.step_time_s` when given, else the median of
(time between samples / steps advanced) over consecutive samples whose step advanced and that no
incident (onset to first new step) overlaps; with no such pair it is unknown and no recomputation is
carved out (a note says so for each incident that had lost steps).

**Bad input.** A time that is not a finite number, a step that is not an integer in
[0, :data:`MAX_STEP`], an empty or duplicate incident id, an unknown class, text over
:data:`MAX_LABEL_CHARS`, or more inputs than :data:`MAX_SAMPLES`, :data:`MAX_INCIDENTS`,
:data:`MAX_WAITING_SPANS` or :data:`MAX_EVICTED_PER_INCIDENT` raise :class:`LedgerInputError` (a
``ValueError``) naming the incident, sample or span at fault. Everything else is put in order, never
refused:

- *out of order within an incident*: its times, taken in phase order (onset, decision, localization
  start and end, eviction start and end, restart start, first new step), are each raised to the
  latest time before them (a running maximum); a note names the incident and the fields raised;
- *overlapping incidents*: incidents are taken by onset (then id); every time of an incident is
  raised to at least the end of the incident before it (the earlier one keeps the time it claimed).
  An incident ends at its first new step; one with none recorded ends at the first later sample
  whose step advanced (noted, and marked ``first_new_step_inferred``) when that comes before the
  next incident's onset, else when the next incident begins (raised to its own last time), else at
  the window's end;
- *times outside the window* are clipped to it (an incident before the window still carves its
  recomputation out of the window when that runs into it);
- *samples* are sorted by time (then step); *waiting spans* may overlap (their union counts), an
  end before its start makes the span empty (noted).
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from robustctl.config import SignalClass
from robustctl.errors import ConfigError
from robustctl.models import SCHEMA_VERSION, strict_jsonable
from robustctl.store import TIME_MAX, TIME_MIN

__all__ = [
    "DEFAULT_SLIDING_WINDOW_S",
    "LEDGER_TIME_MAX",
    "LEDGER_TIME_MIN",
    "MAX_EVICTED_PER_INCIDENT",
    "MAX_INCIDENTS",
    "MAX_LABEL_CHARS",
    "MAX_NOTES",
    "MAX_SAMPLES",
    "MAX_SERIES_POINTS",
    "MAX_STEP",
    "MAX_WAITING_SPANS",
    "UNPRODUCTIVE_CAUSES",
    "Cause",
    "EttrLedger",
    "EttrPoint",
    "Incident",
    "IncidentRow",
    "LedgerInputError",
    "LedgerInterval",
    "ProgressSample",
    "Timeline",
    "WaitingSpan",
    "build_ledger",
    "ettr_at",
    "ettr_series",
]

MAX_SAMPLES = 200_000
"""Most progress samples one ledger processes. One sample a minute for 138 days: more than the
three-month job ByteRobust reports its ETTR for (arXiv 2509.16293, abstract) at a resolution far
finer than any incident's phases; about 40 MB of samples in memory. A longer or denser history is
downsampled by the caller (more raises :class:`LedgerInputError`)."""

MAX_INCIDENTS = 10_000
"""Most incidents one ledger processes. Our choice: one incident every 15 minutes for three months is
8,640; a window with more is a crash loop, better read over a narrower window."""

MAX_WAITING_SPANS = 10_000
"""Most waiting spans one ledger processes: at most one per incident or so (the controller records
one each time it stops acting), the same bound as :data:`MAX_INCIDENTS`."""

MAX_EVICTED_PER_INCIDENT = 4_096
"""Most machines one incident may name as evicted. Our choice: a whole job of 4,096 machines of 8 GPUs
(32,768 GPUs) is over three times the 9,600-GPU job of ByteRobust, which over-evicts one parallel
group (a PP group), not the job."""

MAX_LABEL_CHARS = 1_024
"""Longest job name, incident id, playbook name, machine name or waiting reason. Host names are at
most 253 characters (RFC 1035); ids and playbook names are short; 1,024 leaves room and keeps one
ledger's text bounded."""

MAX_STEP = 2**63 - 1
"""Largest training step accepted: a 64-bit signed counter, what Megatron and PyTorch keep the
iteration in; larger integers have no exact float and are refused."""

MAX_NOTES = 50
"""Most notes a ledger carries; more are summed up in one last note. One note per repaired incident
is useful; thousands would hide the ledger."""

MAX_SERIES_POINTS = 10_000
"""Most points :func:`ettr_series` computes: a point every 13 minutes over three months, finer than
a chart can show."""

DEFAULT_SLIDING_WINDOW_S = 86_400.0
"""Sliding-window length, seconds: 24 hours, the ``--window 24h`` example of issue 22; a window of a
day hides no daily pattern and still shows a bad day."""

LEDGER_TIME_MIN = TIME_MIN
"""Earliest window start, UNIX seconds (1970-01-01): the state store's own range."""

LEDGER_TIME_MAX = TIME_MAX
"""Latest window end, UNIX seconds (10000-01-01 UTC): the state store's own range. Window lengths stay
far from float overflow and keep sub-millisecond resolution."""

_SHOWN_CHARS = 80
"""Longest ``repr`` of a bad value or id quoted in an error or a note."""


class LedgerInputError(ConfigError, ValueError):
    """The timeline cannot be read as given: the message names the incident, sample or span at fault
    and why, in one line. A ``ValueError``; as a :class:`~robustctl.errors.ConfigError` it exits 78
    (the data the controller recorded is bad, like a damaged store row)."""


class Cause(str, Enum):
    """What a stretch of the window was spent on: ``productive`` or one unproductive cause (module
    docstring, "The partition")."""

    PRODUCTIVE = "productive"
    DETECTION = "detection"
    LOCALIZATION = "localization"
    EVICTION = "eviction"
    RESTART = "restart"
    RECOMPUTATION = "recomputation"
    WAITING = "waiting"
    UNACCOUNTED = "unaccounted"


UNPRODUCTIVE_CAUSES: tuple[Cause, ...] = tuple(c for c in Cause if c is not Cause.PRODUCTIVE)
"""Every unproductive cause, in the order ledgers list them."""


@dataclass(frozen=True)
class ProgressSample:
    """One reading of the job's progress.

    Attributes:
        time_s: when the step was reached (UNIX s; the heartbeat's time, else the file's mtime).
        step: the training step (iteration) reached, an integer in [0, :data:`MAX_STEP`].
    """

    time_s: float
    step: int


@dataclass(frozen=True)
class Incident:
    """One incident the controller handled, with the times of its phases (UNIX s; None: not recorded).

    Attributes:
        incident_id: unique within the timeline, 1 to :data:`MAX_LABEL_CHARS` characters.
        incident_class: the signal class (:class:`SignalClass` or its value).
        onset_s: the time of the last good step before the fault (MTTR starts here).
        decision_s: when the controller decided on a playbook (detection ends here).
        localization_start_s, localization_end_s: stacks, diagnose or replay.
        eviction_start_s, eviction_end_s: eviction and the standby swap.
        machines_evicted: names of the machines evicted (repeats counted once).
        restart_start_s: when the restart began.
        first_new_step_s: the first training step after the restart (MTTR ends here).
        checkpoint_step: the step of the checkpoint the restart loaded.
        last_step: the last step before the incident; None: the step of the last progress sample at
            or before the onset.
        playbook: the playbook run, None when none was.
    """

    incident_id: str
    incident_class: SignalClass | str
    onset_s: float
    decision_s: float | None = None
    localization_start_s: float | None = None
    localization_end_s: float | None = None
    eviction_start_s: float | None = None
    eviction_end_s: float | None = None
    machines_evicted: tuple[str, ...] = ()
    restart_start_s: float | None = None
    first_new_step_s: float | None = None
    checkpoint_step: int | None = None
    last_step: int | None = None
    playbook: str | None = None


@dataclass(frozen=True)
class WaitingSpan:
    """A span in which the job was down and the controller did nothing (e.g. after the hourly
    recovery limit), with why.

    Attributes:
        start_s, end_s: UNIX s. reason: one line, at most :data:`MAX_LABEL_CHARS` characters.
    """

    start_s: float
    end_s: float
    reason: str = ""


@dataclass(frozen=True)
class Timeline:
    """Everything a job's ledger is computed from.

    Attributes:
        job: the job's name. start_s, end_s: the window observed, UNIX s,
            :data:`LEDGER_TIME_MIN` ≤ start < end ≤ :data:`LEDGER_TIME_MAX`.
        samples: progress readings, any order (at most :data:`MAX_SAMPLES`).
        incidents: at most :data:`MAX_INCIDENTS`. waiting: at most :data:`MAX_WAITING_SPANS`.
        step_time_s: the job's seconds per step when known; None: measured from the samples.
    """

    job: str
    start_s: float
    end_s: float
    samples: tuple[ProgressSample, ...] = ()
    incidents: tuple[Incident, ...] = ()
    waiting: tuple[WaitingSpan, ...] = ()
    step_time_s: float | None = None


@dataclass(frozen=True)
class LedgerInterval:
    """One stretch of the window.

    Attributes:
        start_s, end_s: UNIX s, start < end. cause: what it was spent on.
        incident: the id of the incident whose phases (or waiting inside them, or recomputation) it
            belongs to; None for productive, unaccounted and waiting outside any incident.
    """

    start_s: float
    end_s: float
    cause: Cause
    incident: str | None = None

    @property
    def duration_s(self) -> float:
        """``end_s - start_s``, seconds."""
        return self.end_s - self.start_s


@dataclass(frozen=True)
class IncidentRow:
    """One incident in the ledger.

    Attributes:
        incident_id, incident_class, playbook: as recorded.
        onset_s: as recorded. decision_s: after ordering (module docstring), None when not recorded.
        first_new_step_s: after ordering, or inferred from the samples (``first_new_step_inferred``);
            None when the job has made no new step since.
        mttr_s: ``first_new_step_s - onset_s``, seconds; None without a first new step. From the
            incident's own times, not clipped to the window.
        machines_evicted: the machines evicted, each once, in recorded order.
        recomputed_steps: steps redone after the restart (module docstring); None when unknown.
        seconds: unproductive seconds inside the window by cause, every cause of
            :data:`UNPRODUCTIVE_CAUSES` in that order (zeros included).
    """

    incident_id: str
    incident_class: SignalClass
    playbook: str | None
    onset_s: float
    decision_s: float | None
    first_new_step_s: float | None
    first_new_step_inferred: bool
    mttr_s: float | None
    machines_evicted: tuple[str, ...]
    recomputed_steps: int | None
    seconds: tuple[tuple[Cause, float], ...]

    @property
    def unproductive_s(self) -> float:
        """Total unproductive seconds of this incident inside the window."""
        return math.fsum(s for _, s in self.seconds)

    def to_json(self) -> dict[str, Any]:
        """The row as plain JSON values (causes by name)."""
        return {
            "incident": self.incident_id,
            "class": self.incident_class.value,
            "playbook": self.playbook,
            "onset_s": self.onset_s,
            "decision_s": self.decision_s,
            "first_new_step_s": self.first_new_step_s,
            "first_new_step_inferred": self.first_new_step_inferred,
            "mttr_s": self.mttr_s,
            "machines_evicted": list(self.machines_evicted),
            "machines_evicted_count": len(self.machines_evicted),
            "recomputed_steps": self.recomputed_steps,
            "unproductive_s": {c.value: s for c, s in self.seconds},
            "unproductive_total_s": self.unproductive_s,
        }


@dataclass(frozen=True)
class EttrLedger:
    """A job's ETTR ledger over one window (the body of ``robustctl ettr --json``, ``kind``
    ``"ettr-ledger"``). Render-free: views format it.

    Attributes:
        job: the job. start_s, end_s: the window, UNIX s. total_s: ``end_s - start_s``.
        intervals: the partition of the window (module docstring), in time order.
        productive_s: productive seconds. seconds: unproductive seconds by cause, every cause of
            :data:`UNPRODUCTIVE_CAUSES` in that order.
        cumulative_ettr: productive_s / total_s, in [0, 1].
        sliding_window_s: the sliding window's length, seconds. sliding_ettr: ETTR over the last
            ``sliding_window_s`` of the window (all of it when shorter), in [0, 1].
        step_time_s: the job's step time used for recomputation; None when unknown.
        step_time_source: ``"given"``, ``"measured"`` or ``"unknown"``.
        incidents: one row per incident, by onset.
        notes: what was repaired or could not be counted, one line each (at most :data:`MAX_NOTES`).
    """

    job: str
    start_s: float
    end_s: float
    total_s: float
    intervals: tuple[LedgerInterval, ...]
    productive_s: float
    seconds: tuple[tuple[Cause, float], ...]
    cumulative_ettr: float
    sliding_window_s: float
    sliding_ettr: float
    step_time_s: float | None
    step_time_source: str
    incidents: tuple[IncidentRow, ...]
    notes: tuple[str, ...]
    schema_version: int = SCHEMA_VERSION
    kind: str = "ettr-ledger"

    @property
    def unproductive_s(self) -> float:
        """Total unproductive seconds (every cause)."""
        return math.fsum(s for _, s in self.seconds)

    def seconds_of(self, cause: Cause) -> float:
        """Seconds spent on ``cause`` (productive included)."""
        if cause is Cause.PRODUCTIVE:
            return self.productive_s
        return dict(self.seconds)[cause]

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document: strict JSON values (every float is finite by construction)."""
        doc = {
            "kind": self.kind,
            "schema_version": self.schema_version,
            "job": self.job,
            "window": {"start_s": self.start_s, "end_s": self.end_s, "total_s": self.total_s},
            "productive_s": self.productive_s,
            "unproductive_s": {c.value: s for c, s in self.seconds},
            "unproductive_total_s": self.unproductive_s,
            "cumulative_ettr": self.cumulative_ettr,
            "sliding_window_s": self.sliding_window_s,
            "sliding_ettr": self.sliding_ettr,
            "step_time_s": self.step_time_s,
            "step_time_source": self.step_time_source,
            "incidents": [row.to_json() for row in self.incidents],
            "intervals": [
                {"start_s": iv.start_s, "end_s": iv.end_s, "cause": iv.cause.value, "incident": iv.incident}
                for iv in self.intervals
            ],
            "notes": list(self.notes),
        }
        out: dict[str, Any] = strict_jsonable(doc)
        return out


@dataclass(frozen=True)
class EttrPoint:
    """ETTR at one time: ``cumulative`` since the window's start, ``sliding`` over the window of
    :func:`ettr_series`; None where no time has elapsed."""

    at_s: float
    cumulative: float | None
    sliding: float | None


# --------------------------------------------------------------------------------------------------
# Validation


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"


def _time(value: object, what: str) -> float:
    """``value`` as a finite float, or LedgerInputError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LedgerInputError(f"{what}: not a number ({_shown(value)})")
    try:
        out = float(value)
    except OverflowError:
        raise LedgerInputError(f"{what}: not a finite number ({_shown(value)})") from None
    if not math.isfinite(out):
        raise LedgerInputError(f"{what}: not a finite number ({_shown(value)})")
    return out


def _opt_time(value: object, what: str) -> float | None:
    return None if value is None else _time(value, what)


def _step(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LedgerInputError(f"{what}: not an integer step ({_shown(value)})")
    if not 0 <= value <= MAX_STEP:
        raise LedgerInputError(f"{what}: step out of range 0..{MAX_STEP} ({_shown(value)})")
    return value


def _label(value: object, what: str, *, empty: bool = False) -> str:
    if not isinstance(value, str):
        raise LedgerInputError(f"{what}: not text ({_shown(value)})")
    if not value and not empty:
        raise LedgerInputError(f"{what}: empty")
    if len(value) > MAX_LABEL_CHARS:
        raise LedgerInputError(f"{what}: {len(value)} characters, at most {MAX_LABEL_CHARS}")
    return value


def _count(items: object, limit: int, what: str, constant: str) -> Sequence[Any]:
    if not isinstance(items, (tuple, list)):
        raise LedgerInputError(f"{what}: not a sequence ({_shown(items)})")
    if len(items) > limit:
        raise LedgerInputError(
            f"{len(items)} {what} given, at most {limit} are processed ({constant}): "
            "downsample or narrow the window"
        )
    return items


_PHASE_FIELDS = (
    "onset_s",
    "decision_s",
    "localization_start_s",
    "localization_end_s",
    "eviction_start_s",
    "eviction_end_s",
    "restart_start_s",
    "first_new_step_s",
)
"""An incident's times in phase order; index 0 is the onset, 7 the first new step."""

_PHASES = (
    (Cause.DETECTION, 0, 1),
    (Cause.LOCALIZATION, 2, 3),
    (Cause.EVICTION, 4, 5),
    (Cause.RESTART, 6, 7),
)
"""Each phase's cause and the indices of its start and end in :data:`_PHASE_FIELDS`."""


@dataclass(frozen=True)
class _Checked:
    """An incident validated and put in order (module docstring)."""

    incident: Incident
    name: str  # "incident 'ID'", for messages
    klass: SignalClass
    times: tuple[float | None, ...]  # _PHASE_FIELDS order, running maximum applied
    machines: tuple[str, ...]
    checkpoint_step: int | None
    last_step: int | None

    @property
    def onset(self) -> float:
        """The recorded onset (always present: checked)."""
        onset = self.times[0]
        assert onset is not None
        return onset


def _check_incident(inc: object, index: int, notes: list[str]) -> _Checked:
    if not isinstance(inc, Incident):
        raise LedgerInputError(f"incident #{index}: not an Incident ({_shown(inc)})")
    ident = _label(inc.incident_id, f"incident #{index}: id")
    name = f"incident {_shown(ident)}"
    try:
        klass = SignalClass(inc.incident_class)
        if klass is SignalClass.UNKNOWN:
            raise ValueError(klass)
    except ValueError:
        known = ", ".join(c.value for c in SignalClass if c is not SignalClass.UNKNOWN)
        raise LedgerInputError(
            f"{name}: unknown class {_shown(inc.incident_class)} (known: {known})"
        ) from None
    if inc.playbook is not None:
        _label(inc.playbook, f"{name}: playbook")
    machines_in = _count(
        inc.machines_evicted,
        MAX_EVICTED_PER_INCIDENT,
        f"machines evicted by {name}",
        "MAX_EVICTED_PER_INCIDENT",
    )
    machines: dict[str, None] = {}  # insertion-ordered, each name once
    for m in machines_in:
        machines[_label(m, f"{name}: machine evicted")] = None
    raw = [_opt_time(getattr(inc, f), f"{name}: {f}") for f in _PHASE_FIELDS]
    if raw[0] is None:
        raise LedgerInputError(f"{name}: onset_s: missing")
    ordered: list[float | None] = []
    raised: list[str] = []
    latest = -math.inf
    for field_name, value in zip(_PHASE_FIELDS, raw, strict=True):
        if value is None:
            ordered.append(None)
            continue
        if value < latest:
            raised.append(field_name)
            value = latest
        latest = value
        ordered.append(value)
    if raised:
        notes.append(f"{name}: {', '.join(raised)} before an earlier phase's time, raised to it")
    checkpoint = (
        None if inc.checkpoint_step is None else _step(inc.checkpoint_step, f"{name}: checkpoint_step")
    )
    last = None if inc.last_step is None else _step(inc.last_step, f"{name}: last_step")
    return _Checked(inc, name, klass, tuple(ordered), tuple(machines), checkpoint, last)


# --------------------------------------------------------------------------------------------------
# The ledger


@dataclass(frozen=True)
class _Claim:
    start: float
    end: float
    cause: Cause
    incident: str | None


def _layer(claims: list[_Claim], lo: float, hi: float) -> list[_Claim]:
    """``claims`` clipped to [lo, hi], empty ones dropped, sorted, made disjoint (a later claim starts
    where the one before ends)."""
    out: list[_Claim] = []
    for c in sorted(claims, key=lambda c: (c.start, c.end)):
        start, end = max(c.start, lo), min(c.end, hi)
        if out and start < out[-1].end:
            start = out[-1].end
        if end > start:
            out.append(_Claim(start, end, c.cause, c.incident))
    return out


def _union(claims: list[_Claim], lo: float, hi: float) -> list[_Claim]:
    """``claims`` (one cause, no incident) clipped to [lo, hi] and merged where they touch or overlap."""
    out: list[_Claim] = []
    for c in sorted(claims, key=lambda c: (c.start, c.end)):
        start, end = max(c.start, lo), min(c.end, hi)
        if end <= start:
            continue
        if out and start <= out[-1].end:
            if end > out[-1].end:
                out[-1] = _Claim(out[-1].start, end, c.cause, c.incident)
            continue
        out.append(_Claim(start, end, c.cause, c.incident))
    return out


def _measured_step_time(progress: _Progress, spans: list[tuple[float, float]]) -> float | None:
    """Median seconds per step over consecutive samples whose step advanced and that no incident span
    (onset to first new step, or onward) overlaps; None with no such pair."""
    merged: list[tuple[float, float]] = []
    for s, e in sorted(spans):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    ends = [e for _, e in merged]
    times, steps = progress.times, progress.steps
    per_step: list[float] = []
    for k in range(1, len(times)):
        a, b = times[k - 1], times[k]
        ds = steps[k] - steps[k - 1]
        if b <= a or ds <= 0:
            continue
        j = bisect.bisect_right(ends, a)
        if j < len(merged) and merged[j][0] < b:
            continue
        per_step.append((b - a) / ds)
    return statistics.median(per_step) if per_step else None


def _window(timeline: Timeline, sliding_window_s: float) -> tuple[str, float, float, float, float | None]:
    """The timeline's checked job name, window start and end, sliding window and given step time."""
    if not isinstance(timeline, Timeline):
        raise LedgerInputError(f"not a Timeline ({_shown(timeline)})")
    job = _label(timeline.job, "job")
    start = _time(timeline.start_s, f"job {_shown(job)}: window start_s")
    end = _time(timeline.end_s, f"job {_shown(job)}: window end_s")
    if not LEDGER_TIME_MIN <= start < end <= LEDGER_TIME_MAX:
        raise LedgerInputError(
            f"job {_shown(job)}: window [{start!r}, {end!r}] is not a non-empty span within "
            f"[{LEDGER_TIME_MIN!r}, {LEDGER_TIME_MAX!r}] UNIX seconds"
        )
    window_s = _time(sliding_window_s, "sliding_window_s")
    if window_s <= 0:
        raise LedgerInputError(f"sliding_window_s: must be > 0 ({window_s!r})")
    given_step_time = _opt_time(timeline.step_time_s, "step_time_s")
    if given_step_time is not None and given_step_time <= 0:
        raise LedgerInputError(f"step_time_s: must be > 0 ({given_step_time!r})")
    return job, start, end, window_s, given_step_time


def _step_time(
    given: float | None, checked: list[_Checked], fns: list[float | None], progress: _Progress
) -> tuple[float | None, str]:
    """The job's seconds per step and where it came from: ``given``, else ``measured`` outside every
    incident's span (onset to first new step, or onward), else ``unknown``."""
    if given is not None:
        return given, "given"
    spans = [(c.onset, math.inf if f is None else f) for c, f in zip(checked, fns, strict=True)]
    step_time = _measured_step_time(progress, spans)
    return step_time, "measured" if step_time is not None else "unknown"


def _incident_rows(
    checked: list[_Checked],
    fns: list[float | None],
    inferred: list[bool],
    recomputed: list[int | None],
    intervals: tuple[LedgerInterval, ...],
) -> tuple[IncidentRow, ...]:
    """One row per incident: its times, MTTR, machines, recomputed steps and its seconds by cause."""
    by_incident: dict[str, dict[Cause, list[float]]] = {c.incident.incident_id: {} for c in checked}
    for iv in intervals:
        if iv.incident is not None:
            by_incident[iv.incident].setdefault(iv.cause, []).append(iv.duration_s)
    rows = []
    for c, f, was_inferred, n in zip(checked, fns, inferred, recomputed, strict=True):
        ident = c.incident.incident_id
        onset = c.onset
        rows.append(
            IncidentRow(
                incident_id=ident,
                incident_class=c.klass,
                playbook=c.incident.playbook,
                onset_s=onset,
                decision_s=c.times[1],
                first_new_step_s=f,
                first_new_step_inferred=was_inferred,
                mttr_s=None if f is None else f - onset,
                machines_evicted=c.machines,
                recomputed_steps=n,
                seconds=tuple(
                    (cause, math.fsum(by_incident[ident].get(cause, []))) for cause in UNPRODUCTIVE_CAUSES
                ),
            )
        )
    return tuple(rows)


def _capped(notes: list[str]) -> tuple[str, ...]:
    """The notes, at most :data:`MAX_NOTES` (the last one then counts those left out)."""
    if len(notes) > MAX_NOTES:
        notes = [*notes[: MAX_NOTES - 1], f"… and {len(notes) - MAX_NOTES + 1} more notes"]
    return tuple(notes)


def build_ledger(timeline: Timeline, sliding_window_s: float = DEFAULT_SLIDING_WINDOW_S) -> EttrLedger:
    """Compute a job's ETTR ledger from its timeline (module docstring for every rule).

    Args:
        timeline: the window, samples, incidents and waiting spans.
        sliding_window_s: the sliding window's length, seconds (finite, > 0).

    Returns:
        The ledger: a partition of ``[start_s, end_s]``, cumulative and sliding ETTR, a row per
        incident, notes on what was repaired.

    Raises:
        LedgerInputError: (a ``ValueError``) a bad window, time, step, id, class or text, or more
            inputs than the module's bounds; the message names the item at fault.
    """
    job, start, end, window_s, given_step_time = _window(timeline, sliding_window_s)
    notes: list[str] = []
    progress = _read_samples(timeline.samples)
    checked = _read_incidents(timeline.incidents, notes)
    waiting = _read_waiting(timeline.waiting, notes)
    fns, inferred = _first_new_steps(checked, progress, notes)
    step_time, step_source = _step_time(given_step_time, checked, fns, progress)
    phases, eff_onsets, eff_fns = _incident_phases(checked, fns, start, end, notes)
    recomputed, recomputation = _recomputation(
        checked, fns, eff_onsets, eff_fns, progress, step_time, end, notes
    )
    intervals = _partition(
        start,
        end,
        [
            _union(waiting, start, end),
            _layer(phases, start, end),
            _layer(recomputation, start, end),
            _union(progress.productive, start, end),
        ],
    )
    by_cause: dict[Cause, list[float]] = {c: [] for c in Cause}
    for iv in intervals:
        by_cause[iv.cause].append(iv.duration_s)
    productive_s = math.fsum(by_cause[Cause.PRODUCTIVE])
    total = end - start
    rows = _incident_rows(checked, fns, inferred, recomputed, intervals)
    sliding = _ProductiveIndex(intervals).ratio(max(start, end - window_s), end)
    return EttrLedger(
        job=job,
        start_s=start,
        end_s=end,
        total_s=total,
        intervals=intervals,
        productive_s=productive_s,
        seconds=tuple((cause, math.fsum(by_cause[cause])) for cause in UNPRODUCTIVE_CAUSES),
        cumulative_ettr=_ratio(productive_s, total),
        sliding_window_s=window_s,
        sliding_ettr=0.0 if sliding is None else sliding,  # never None: end - window_s < end
        step_time_s=step_time,
        step_time_source=step_source,
        incidents=rows,
        notes=_capped(notes),
    )


@dataclass(frozen=True)
class _Progress:
    """The samples sorted by (time, step), and what they say."""

    times: list[float]
    steps: list[int]
    productive: list[_Claim]  # consecutive samples whose step advanced
    advance_times: list[float]  # the later time of each such pair, ascending

    def step_at(self, t: float) -> int | None:
        """The step of the last sample at or before ``t`` (the highest at that time); None if none."""
        j = bisect.bisect_right(self.times, t) - 1
        return self.steps[j] if j >= 0 else None


def _read_samples(items: object) -> _Progress:
    samples = _count(items, MAX_SAMPLES, "progress samples", "MAX_SAMPLES")
    pairs: list[tuple[float, int]] = []
    for i, sample in enumerate(samples):
        if not isinstance(sample, ProgressSample):
            raise LedgerInputError(f"progress sample #{i}: not a ProgressSample ({_shown(sample)})")
        time_s = _time(sample.time_s, f"progress sample #{i}: time_s")
        pairs.append((time_s, _step(sample.step, f"progress sample #{i}: step")))
    pairs.sort()
    times = [t for t, _ in pairs]
    steps = [s for _, s in pairs]
    productive: list[_Claim] = []
    advance_times: list[float] = []
    for k in range(1, len(pairs)):
        if times[k] > times[k - 1] and steps[k] > steps[k - 1]:
            productive.append(_Claim(times[k - 1], times[k], Cause.PRODUCTIVE, None))
            advance_times.append(times[k])
    return _Progress(times, steps, productive, advance_times)


def _read_incidents(items: object, notes: list[str]) -> list[_Checked]:
    """The incidents checked, each put in order, then sorted by onset (then id)."""
    incidents = _count(items, MAX_INCIDENTS, "incidents", "MAX_INCIDENTS")
    checked = [_check_incident(inc, i, notes) for i, inc in enumerate(incidents)]
    seen: set[str] = set()
    for c in checked:
        if c.incident.incident_id in seen:
            raise LedgerInputError(f"{c.name}: id given twice")
        seen.add(c.incident.incident_id)
    checked.sort(key=lambda c: (c.onset, c.incident.incident_id))
    return checked


def _read_waiting(items: object, notes: list[str]) -> list[_Claim]:
    spans = _count(items, MAX_WAITING_SPANS, "waiting spans", "MAX_WAITING_SPANS")
    out: list[_Claim] = []
    for i, span in enumerate(spans):
        if not isinstance(span, WaitingSpan):
            raise LedgerInputError(f"waiting span #{i}: not a WaitingSpan ({_shown(span)})")
        s = _time(span.start_s, f"waiting span #{i}: start_s")
        e = _time(span.end_s, f"waiting span #{i}: end_s")
        _label(span.reason, f"waiting span #{i}: reason", empty=True)
        if e < s:
            notes.append(f"waiting span #{i}: end_s before start_s, counted as empty")
            continue
        out.append(_Claim(s, e, Cause.WAITING, None))
    return out


def _first_new_steps(
    checked: list[_Checked], progress: _Progress, notes: list[str]
) -> tuple[list[float | None], list[bool]]:
    """Each incident's first new step: recorded, else the first time after its last recorded time at
    which the step advanced, when that is no later than the next incident's onset; else None."""
    fns: list[float | None] = []
    inferred: list[bool] = []
    for p, c in enumerate(checked):
        if c.times[7] is not None:
            fns.append(c.times[7])
            inferred.append(False)
            continue
        last_time = max(t for t in c.times if t is not None)
        j = bisect.bisect_right(progress.advance_times, last_time)
        nxt = checked[p + 1].onset if p + 1 < len(checked) else None
        if j < len(progress.advance_times) and (nxt is None or progress.advance_times[j] <= nxt):
            at = progress.advance_times[j]
            fns.append(at)
            inferred.append(True)
            notes.append(f"{c.name}: no first new step recorded; the step advanced at {at!r}, taken as it")
        else:
            fns.append(None)
            inferred.append(False)
    return fns, inferred


def _incident_phases(
    checked: list[_Checked], fns: list[float | None], start: float, end: float, notes: list[str]
) -> tuple[list[_Claim], list[float], list[float | None]]:
    """Each incident's phases (module docstring), its times clipped to the window and raised to the
    end of the incident before it.

    Args:
        checked: the incidents checked, sorted by onset (:func:`_read_incidents`).
        fns: each incident's first new step, UNIX s, in ``checked``'s order (None: none;
            :func:`_first_new_steps`).
        start: the window's start, UNIX s.
        end: the window's end, UNIX s.
        notes: the ledger's notes; a note is appended for each incident whose times are raised.

    Returns:
        The phase claims, and each incident's effective onset and first new step (None: none).
    """
    claims: list[_Claim] = []
    eff_onsets: list[float] = []
    eff_fns: list[float | None] = []
    cursor = start
    for p, c in enumerate(checked):
        ident = c.incident.incident_id
        floor = cursor

        def eff(value: float, floor: float = floor) -> float:
            return max(min(max(value, start), end), floor)

        if p > 0 and min(max(c.onset, start), end) < cursor:
            notes.append(
                f"{c.name}: begins before the incident before it ended; its times raised to {cursor!r}"
            )
        vals: list[float | None] = [None if t is None else eff(t) for t in c.times]
        first_new = fns[p]
        if first_new is not None:
            vals[7] = eff(first_new)
        onset = eff(c.onset)
        if vals[7] is not None:
            inc_end = vals[7]
        elif p + 1 < len(checked):
            inc_end = max(max(v for v in vals if v is not None), eff(checked[p + 1].onset))
        else:
            inc_end = end
        eff_onsets.append(onset)
        eff_fns.append(vals[7])
        t = onset
        for k, (cause, si, ei) in enumerate(_PHASES):
            if k > 0 and vals[si] is None and vals[ei] is None:
                continue
            phase_end = vals[ei]
            if phase_end is None:
                later = [v for v in vals[ei + 1 :] if v is not None]
                phase_end = later[0] if later else inc_end
            phase_end = min(phase_end, inc_end)
            if phase_end > t:
                claims.append(_Claim(t, phase_end, cause, ident))
                t = phase_end
        if inc_end > t:
            claims.append(_Claim(t, inc_end, Cause.WAITING, ident))
        cursor = inc_end
    return claims, eff_onsets, eff_fns


def _recomputation(
    checked: list[_Checked],
    fns: list[float | None],
    eff_onsets: list[float],
    eff_fns: list[float | None],
    progress: _Progress,
    step_time: float | None,
    end: float,
    notes: list[str],
) -> tuple[list[int | None], list[_Claim]]:
    """Steps each incident made the job redo (None: unknown), and the time carved out for them after
    its first new step, up to the next incident's effective onset and the window's end."""
    recomputed: list[int | None] = []
    claims: list[_Claim] = []
    for p, c in enumerate(checked):
        last = c.last_step if c.last_step is not None else progress.step_at(c.onset)
        n: int | None = None
        if c.checkpoint_step is not None:
            if last is None:
                notes.append(
                    f"{c.name}: no last step recorded or sampled before the onset: recomputation not counted"
                )
            elif c.checkpoint_step > last:
                notes.append(
                    f"{c.name}: checkpoint step {c.checkpoint_step} after the last step {last}: nothing redone"
                )
                n = 0
            else:
                n = max(0, last - c.checkpoint_step - 1)
        recomputed.append(n)
        first_new, eff_first_new = fns[p], eff_fns[p]
        if not n or first_new is None or eff_first_new is None:
            continue
        if step_time is None:
            notes.append(
                f"{c.name}: {n} steps redone but the job's step time is unknown: recomputation not counted"
            )
            continue
        cap = eff_onsets[p + 1] if p + 1 < len(checked) else end
        rec_end = min(first_new + n * step_time, cap, end)
        if rec_end > eff_first_new:
            claims.append(_Claim(eff_first_new, rec_end, Cause.RECOMPUTATION, c.incident.incident_id))
    return recomputed, claims


def _partition(start: float, end: float, layers: list[list[_Claim]]) -> tuple[LedgerInterval, ...]:
    """Cut [start, end] at every claim's ends; each piece takes the first layer that covers it
    (``unaccounted`` when none does); neighbours with the same cause and incident are merged. Each
    layer is sorted and disjoint. An incident's id is carried by the pieces of its phases (whatever
    cause wins there) and of its recomputation."""
    points = {start, end}
    for layer in layers:
        for c in layer:
            points.add(c.start)
            points.add(c.end)
    cuts = sorted(points)
    pointers = [0] * len(layers)
    phase_layer = 1
    out: list[LedgerInterval] = []
    for a, b in itertools.pairwise(cuts):
        cover: list[_Claim | None] = []
        for li, layer in enumerate(layers):
            i = pointers[li]
            while i < len(layer) and layer[i].end <= a:
                i += 1
            pointers[li] = i
            cover.append(layer[i] if i < len(layer) and layer[i].start <= a else None)
        winner = next((c for c in cover if c is not None), None)
        cause = winner.cause if winner is not None else Cause.UNACCOUNTED
        incident = None
        if cover[phase_layer] is not None:
            incident = cover[phase_layer].incident  # type: ignore[union-attr]
        elif winner is not None and winner.cause is Cause.RECOMPUTATION:
            incident = winner.incident
        if out and out[-1].cause is cause and out[-1].incident == incident and out[-1].end_s == a:
            out[-1] = LedgerInterval(out[-1].start_s, b, cause, incident)
        else:
            out.append(LedgerInterval(a, b, cause, incident))
    return tuple(out)


def _ratio(part: float, whole: float) -> float:
    """``part / whole`` kept in [0, 1] (float sums may stray by an ulp)."""
    return min(1.0, max(0.0, part / whole))


class _ProductiveIndex:
    """Productive seconds before any time, by bisection over the intervals' starts."""

    def __init__(self, intervals: Sequence[LedgerInterval]) -> None:
        self.intervals = intervals
        self.starts = [iv.start_s for iv in intervals]
        self.before: list[float] = []
        total = 0.0
        for iv in intervals:
            self.before.append(total)
            if iv.cause is Cause.PRODUCTIVE:
                total += iv.duration_s

    def until(self, t: float) -> float:
        """Productive seconds from the window's start to ``t``."""
        i = bisect.bisect_right(self.starts, t) - 1
        if i < 0:
            return 0.0
        iv = self.intervals[i]
        inside = min(t, iv.end_s) - iv.start_s if iv.cause is Cause.PRODUCTIVE else 0.0
        return self.before[i] + inside

    def ratio(self, lo: float, hi: float) -> float | None:
        """ETTR over [lo, hi]; None when it is empty."""
        if hi <= lo:
            return None
        return _ratio(self.until(hi) - self.until(lo), hi - lo)


def _at_window(ledger: EttrLedger, at_s: float, window_s: float | None) -> tuple[float, float | None]:
    at = _time(at_s, "at_s")
    if window_s is not None:
        window_s = _time(window_s, "window_s")
        if window_s <= 0:
            raise LedgerInputError(f"window_s: must be > 0 ({window_s!r})")
    return min(max(at, ledger.start_s), ledger.end_s), window_s


def ettr_at(ledger: EttrLedger, at_s: float, window_s: float | None = None) -> float | None:
    """ETTR at ``at_s`` (clipped to the window): cumulative since the window's start, or over the last
    ``window_s`` seconds (sliding; the span starts no earlier than the window).

    Args:
        ledger: the ledger.
        at_s: the time, UNIX s (clipped to the ledger's window).
        window_s: the sliding window, seconds (> 0; None: cumulative since the window's start).

    Returns:
        A ratio in [0, 1]; None when no time has elapsed (``at_s`` at or before the window's start).

    Raises:
        LedgerInputError: ``at_s`` or ``window_s`` not finite, or ``window_s`` ≤ 0.
    """
    at, window = _at_window(ledger, at_s, window_s)
    lo = ledger.start_s if window is None else max(ledger.start_s, at - window)
    return _ProductiveIndex(ledger.intervals).ratio(lo, at)


def ettr_series(ledger: EttrLedger, window_s: float, points: int) -> tuple[EttrPoint, ...]:
    """Cumulative and sliding ETTR at ``points`` times evenly spaced over the window, the last at its
    end (a chart's data, like ByteRobust's ETTR curves).

    Args:
        ledger: the ledger.
        window_s: the sliding window, seconds (> 0).
        points: how many, 1 to :data:`MAX_SERIES_POINTS`.

    Returns:
        The points, in time order, the last at the window's end (:class:`EttrPoint`).

    Raises:
        LedgerInputError: ``window_s`` not finite or ≤ 0; ``points`` out of range.
    """
    _, window = _at_window(ledger, ledger.end_s, window_s)
    assert window is not None
    if isinstance(points, bool) or not isinstance(points, int) or not 1 <= points <= MAX_SERIES_POINTS:
        raise LedgerInputError(f"points: an integer from 1 to {MAX_SERIES_POINTS} ({_shown(points)})")
    index = _ProductiveIndex(ledger.intervals)
    out = []
    for i in range(1, points + 1):
        at = ledger.end_s if i == points else ledger.start_s + ledger.total_s * i / points
        out.append(
            EttrPoint(at, index.ratio(ledger.start_s, at), index.ratio(max(ledger.start_s, at - window), at))
        )
    return tuple(out)
