"""``robustctl watch``'s state in the store: its decisions, its per-job state, its incidents and waiting
spans, and the one-watcher-per-job lock (issue 22, items 1, 3 and 4).

A foundation module: it imports :mod:`robustctl.store` only (the tables are created by the store's
schema, :data:`robustctl.store.SCHEMA` versions 5 and 6). It keeps its own statements for its own
tables and runs them through the store's API only (:meth:`~robustctl.store.Store.transaction` to write,
:meth:`~robustctl.store.Store.rows` to read; text as :func:`~robustctl.store.store_text` keeps it). The
controller's pure cores (:mod:`robustctl.watch`) never import it; the command that wires them up reads
and writes through it.

**Decision events** (table ``watch_events``): every decision the watcher makes, including "saw X, did
nothing because Y": the job, when (UNIX s), the signal class (:data:`EVENT_CLASSES`), the rule that
fired, the action (:class:`WatchAction`: ``run``, ``advise``, ``skip``, ``stop``), the playbook, why,
the evidence (a JSON object: the values, the log line, the hosts), the incident it belongs to and the
playbook run it started (``playbook_runs.id`` of the journal). Append-only; an event never changes,
except that its playbook run id may be set once (:func:`set_event_run`: the run's id is known only
once the journal has begun it).

**State** (table ``watch_state``): per job one JSON object, the rules' serializable state (fail-slow
detector state, last recovery times, cool-down until, paused-because reason) with when it was written.
:func:`put_state` replaces it in one transaction (a watcher killed mid-write leaves the old document or
the new one, never a mix); a document over :data:`MAX_STATE_BYTES` is refused.

**Incidents** (table ``incidents``): the ETTR ledger's input, one row per incident with the fields of
:class:`robustctl.watch.ledger.Incident` (``*_at`` here, ``*_s`` there): onset, class, decision,
localization start and end, eviction start and end, machines evicted, restart start, first new step,
the checkpoint step loaded and the last step before the incident, the playbook and its run id; and
``closed_at``/``close_reason``. Forward only (triggers in the schema): the job, class and onset never
change, every other field once set keeps its value, the machines evicted only grow; rows are never
deleted. At most one incident per job is open (``closed_at`` NULL; a partial unique index): "never two
recoveries for the same incident" (issue 22, item 1). **Waiting spans** (table ``watch_waiting``):
spans in which the job was down and the watcher did nothing (after the hourly limit), with why; the
end is set once.

**Progress samples** (table ``watch_progress``, schema version 6): when the job's step advanced, the
ETTR ledger's productive time (:class:`robustctl.watch.ledger.ProgressSample`). :func:`record_progress`
stores a reading only when it says something new (the rule is in its docstring: a change of step, or a
keep-alive at most every :data:`PROGRESS_KEEPALIVE_S`), so a watcher evaluating every few seconds
writes a row per step change, not per evaluation; past :data:`MAX_PROGRESS_ROWS` rows of a job, its
oldest are dropped. :func:`progress_samples` reads them back, checked.

**Reading**: every row is checked as it is read (:class:`~robustctl.store.StoreRow`): times finite and
in the store's range, ids and steps non-negative integers, the class and action one of theirs, JSON
documents of the right shape, finite, bounded in depth. A row that fails is a
:class:`~robustctl.store.StoreError` (exit 78) naming the file, the table, the row id and the column.

**Writing**: bad input from the caller (a time that is not one, an unknown class or action, a document
that is not a JSON object of finite values or is too large) raises :class:`WatchStoreInputError`
(exit 78) naming the job and field; a rule of the tables refused (a second open incident, a phase
time rewritten) raises :class:`IncidentRefused` (exit 2) naming the incident.

**The lock** (:func:`watch_lock`): one watcher per job and store, an ``fcntl`` lock on a sidecar file
beside the store, as :mod:`robustctl.sweep.lock` does for sweeps; a second watcher fails at once with
:class:`WatchBusy` (exit 3) naming the holder's pid. The kernel drops the lock when its holder dies.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import math
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robustctl.config import WATCH_CLASSES
from robustctl.errors import ActionRefused, ConfigError, RobustctlError
from robustctl.exit_codes import ExitCode
from robustctl.pidlock import held_lock
from robustctl.store import (
    MAX_JSON_DEPTH,
    MAX_TEXT,
    Store,
    StoreError,
    StoreRow,
    store_text,
    time_problem,
)

__all__ = [
    "DEFAULT_EVENTS_LIMIT",
    "EVENT_CLASSES",
    "INCIDENT_CLASSES",
    "MAX_EVENTS_LIMIT",
    "MAX_EVICTED_PER_INCIDENT",
    "MAX_INCIDENTS_READ",
    "MAX_PROGRESS_ROWS",
    "MAX_STATE_BYTES",
    "MAX_WAITING_READ",
    "PHASE_FIELDS",
    "PROGRESS_KEEPALIVE_S",
    "IncidentRecord",
    "IncidentRefused",
    "ProgressRecord",
    "WaitingRecord",
    "WatchAction",
    "WatchBusy",
    "WatchEvent",
    "WatchStoreInputError",
    "current_incident",
    "end_waiting",
    "events",
    "get_state",
    "incidents",
    "lock_path",
    "open_incident",
    "open_waiting",
    "progress_samples",
    "put_state",
    "record_event",
    "record_progress",
    "set_event_run",
    "update_incident",
    "waiting",
    "watch_lock",
]

INCIDENT_CLASSES = WATCH_CLASSES
"""The signal classes an incident may have: those ``robustctl watch`` tells apart."""

EVENT_CLASSES = (*INCIDENT_CLASSES, "unknown")
"""The signal classes a decision event may name: an incident's, and ``unknown`` (a source that could
not be read: issue 22, item 2, "a source that cannot be read is unknown, never healthy")."""

MAX_STATE_BYTES = 65_536
"""Largest state document :func:`put_state` keeps, in bytes of its UTF-8 JSON text. Our choice: the
rules' state (a fail-slow detector's window of step times, a few recovery times, a cool-down) is a few
KiB; 64 KiB leaves room for a window of thousands of samples and keeps a document read every period
cheap. It is also the store's text bound (:data:`robustctl.store.MAX_TEXT`), in characters."""

DEFAULT_EVENTS_LIMIT = 1_000
"""Events :func:`events` returns unless told otherwise (the newest): a screenful of ``watch --history``
many times over; a watcher deciding once a minute makes 1,440 a day at most."""

MAX_EVENTS_LIMIT = 100_000
"""Most events one :func:`events` call returns. Our choice: 69 days of one decision a minute; each
event's evidence is bounded by :data:`robustctl.store.MAX_TEXT`, so a read stays bounded."""

MAX_INCIDENTS_READ = 10_000
"""Most incidents :func:`incidents` returns (the newest): the ETTR ledger processes at most as many
(:data:`robustctl.watch.ledger.MAX_INCIDENTS`, the same reasoning: a window with more is a crash loop)."""

MAX_WAITING_READ = 10_000
"""Most waiting spans :func:`waiting` returns (the newest): the ledger's
:data:`robustctl.watch.ledger.MAX_WAITING_SPANS`."""

MAX_EVICTED_PER_INCIDENT = 4_096
"""Most machines one incident records as evicted: the ledger's
:data:`robustctl.watch.ledger.MAX_EVICTED_PER_INCIDENT` (a whole job of 4,096 machines)."""

MAX_PROGRESS_ROWS = 200_000
"""Most progress samples the store keeps per job; past it the oldest (by time) are dropped. The ETTR
ledger processes at most as many (:data:`robustctl.watch.ledger.MAX_SAMPLES`: one sample a minute for
138 days, more than the three-month job of ByteRobust, arXiv 2509.16293); at a few dozen bytes a row,
a job's samples stay under about 10 MB of the store."""

PROGRESS_KEEPALIVE_S = 600.0
"""Longest time :func:`record_progress` lets pass without a row while the step does not change,
seconds: a reading of an unchanged step at least this long after the job's newest row is kept (a
keep-alive: the job was seen at that step then), any other unchanged reading is not. Ten minutes is
the most issue 22 lets ``stall_after_s`` default to, so a stall long enough to be a hang has at least
one keep-alive inside it; a stalled job adds at most six rows an hour."""

LOCK_NAME_CHARS = 100
"""Longest job part of a lock file's name (percent-encoded); a longer one is replaced by its SHA-256
(64 hex digits) so that the name stays under the 255-byte limit of a file name on Linux."""

PHASE_FIELDS = (
    "decision_at",
    "localization_start_at",
    "localization_end_at",
    "eviction_start_at",
    "eviction_end_at",
    "restart_start_at",
    "first_new_step_at",
    "closed_at",
)
"""The time fields of an incident :func:`update_incident` may set, in phase order."""

_ONCE_FIELDS = (*PHASE_FIELDS, "checkpoint_step", "last_step", "playbook", "playbook_run_id", "close_reason")
"""Every field of an incident that is set once (forward only)."""


class WatchAction(str, enum.Enum):
    """What the watcher did about a signal: ``run`` a playbook, only ``advise`` (``--advise``: decided
    and recorded, nothing acted on), ``skip`` (saw it, did nothing, the reason says why: a cool-down, a
    playbook already running), ``stop`` (stopped acting: the hourly limit, the job ended)."""

    RUN = "run"
    ADVISE = "advise"
    SKIP = "skip"
    STOP = "stop"


class WatchStoreInputError(ConfigError, ValueError):
    """What the caller asked to store cannot be stored as given (a time that is not one, an unknown
    class or action, a document that is not a JSON object of finite values, or too large); the message
    names the job and field. A ``ValueError``; exits 78."""


class IncidentRefused(ActionRefused):
    """A rule of the incident tables refused a write: a second open incident for a job, a field once
    set rewritten, an incident that does not exist or is closed. Exits 2 (refused)."""


class WatchBusy(RobustctlError):
    """Another watcher holds the job's lock (exit 3: this one could not watch); names its pid."""

    exit_code = ExitCode.UNKNOWN


@dataclass(frozen=True)
class WatchEvent:
    """One decision of the watcher (a ``watch_events`` row).

    Attributes:
        id. job. at: UNIX s. signal_class: one of :data:`EVENT_CLASSES`. rule: the rule that fired
        (e.g. ``hang.stall``). action: :class:`WatchAction`. playbook: the playbook run or advised
        (None: none). reason: one line, why. evidence: a JSON object (the values, the log line, the
        hosts). incident_id: the incident it belongs to (None: none). playbook_run_id: the journal's
        run it started (None: none). who: ``user@host`` of the watcher.
    """

    id: int
    job: str
    at: float
    signal_class: str
    rule: str
    action: WatchAction
    playbook: str | None
    reason: str
    evidence: Mapping[str, Any]
    incident_id: int | None
    playbook_run_id: int | None
    who: str


@dataclass(frozen=True)
class IncidentRecord:
    """One incident (an ``incidents`` row); times are UNIX s, None where not recorded yet.

    Attributes:
        id. job. incident_class: one of :data:`INCIDENT_CLASSES`. onset_at: the last good step before
        the fault. opened_at: when the watcher recorded it. decision_at, localization_start_at,
        localization_end_at, eviction_start_at, eviction_end_at, restart_start_at,
        first_new_step_at: the phases (:class:`robustctl.watch.ledger.Incident`). machines_evicted:
        names, in the order recorded. checkpoint_step: the step of the checkpoint loaded. last_step:
        the last step before the incident. playbook, playbook_run_id: the recovery run. closed_at,
        close_reason: when and why the watcher closed it (None: open).
    """

    id: int
    job: str
    incident_class: str
    onset_at: float
    opened_at: float
    decision_at: float | None
    localization_start_at: float | None
    localization_end_at: float | None
    eviction_start_at: float | None
    eviction_end_at: float | None
    machines_evicted: tuple[str, ...]
    restart_start_at: float | None
    first_new_step_at: float | None
    checkpoint_step: int | None
    last_step: int | None
    playbook: str | None
    playbook_run_id: int | None
    closed_at: float | None
    close_reason: str | None

    @property
    def is_open(self) -> bool:
        """Whether the incident is still open (not closed)."""
        return self.closed_at is None


@dataclass(frozen=True)
class WaitingRecord:
    """A span in which the job was down and the watcher did nothing (a ``watch_waiting`` row).

    Attributes:
        id. job. start_at, end_at: UNIX s (end None: still waiting). reason: one line. incident_id:
        the incident it belongs to (None: none).
    """

    id: int
    job: str
    start_at: float
    end_at: float | None
    reason: str
    incident_id: int | None


@dataclass(frozen=True)
class ProgressRecord:
    """A progress sample of a job (a ``watch_progress`` row).

    Attributes:
        id. job. at: when the step was reached, UNIX s (the heartbeat's time, else the file's mtime).
        step: the training step, a non-negative integer.
    """

    id: int
    job: str
    at: float
    step: int


# --- checks of what is written ------------------------------------------------------------------


def _check_time(job: str, field: str, value: object) -> float:
    why = time_problem(value)
    if why is None and isinstance(value, (int, float)):
        return float(value)
    raise WatchStoreInputError(f"job {job!r}: {field} is not a time ({why}): {value!r:.40}")


def _check_count(job: str, field: str, value: object, most: int = 2**63 - 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise WatchStoreInputError(f"job {job!r}: {field} is not an integer in [0, {most}]: {value!r:.40}")
    return value


def _json_text(job: str, field: str, doc: object) -> str:
    """``doc`` (a JSON object) as strict JSON text, ASCII (every other character, a lone surrogate
    included, as its ``\\uXXXX`` escape: it reads back as it was given, and SQLite text is UTF-8). Raises WatchStoreInputError: not an object of
    JSON values, a non-finite number, or nested deeper than :data:`robustctl.store.MAX_JSON_DEPTH`."""
    if not isinstance(doc, Mapping):
        raise WatchStoreInputError(f"job {job!r}: {field} is not a JSON object ({type(doc).__name__})")
    if not _shallow(doc):
        raise WatchStoreInputError(f"job {job!r}: {field} is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.dumps(doc, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise WatchStoreInputError(f"job {job!r}: {field} is not strict JSON ({exc})") from None


def _shallow(doc: object) -> bool:
    """Whether ``doc`` nests at most :data:`robustctl.store.MAX_JSON_DEPTH` levels of mappings, lists
    and tuples (what the store's reader accepts: :func:`robustctl.store.deeper_than`). Iterative: a
    deeper one is refused before anything recurses into it."""
    todo: list[tuple[object, int]] = [(doc, 1)]
    while todo:
        node, level = todo.pop()
        if isinstance(node, (Mapping, list, tuple)):
            if level > MAX_JSON_DEPTH:
                return False
            children = node.values() if isinstance(node, Mapping) else node
            todo.extend((child, level + 1) for child in children)
    return True


def _finite(doc: object) -> bool:
    """Whether every number in the JSON value ``doc`` is finite (``json.loads`` reads ``NaN``,
    ``Infinity`` and ``1e999`` as non-finite floats, which strict JSON output cannot carry)."""
    todo = [doc]
    while todo:
        node = todo.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return False
        if isinstance(node, dict):
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return True


def _evidence_text(job: str, evidence: Mapping[str, Any]) -> str:
    """The evidence as JSON text, within :data:`robustctl.store.MAX_TEXT` characters: a longer document
    is kept as ``{"cut": true, "chars": N, "head": "<its first characters>"}`` (a decision is always
    recorded; what cannot be kept whole is kept in part, and says so)."""
    text = _json_text(job, "evidence", evidence)
    if len(text) <= MAX_TEXT:
        return text
    head = text[: MAX_TEXT // 2]
    return json.dumps({"cut": True, "chars": len(text), "head": head})


def _class(job: str, value: str, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise WatchStoreInputError(
            f"job {job!r}: signal class {value!r:.40} is not one of {', '.join(allowed)}"
        )
    return value


def _opt_text(value: str | None) -> str | None:
    return None if value is None else store_text(value)


# --- checks of what is read ---------------------------------------------------------------------


def _object(r: StoreRow, column: str) -> dict[str, Any]:
    doc = r.json(column)
    if not isinstance(doc, dict):
        raise r.error(column, "not a JSON object")
    if not _finite(doc):
        raise r.error(column, "holds a number that is not finite")
    return doc


def _choice_text(r: StoreRow, column: str, allowed: Sequence[str]) -> str:
    value = r.text(column)
    if value not in allowed:
        raise r.error(column, "not one of " + ", ".join(allowed))
    return value


def _names(r: StoreRow, column: str) -> tuple[str, ...]:
    doc = r.json(column)
    if not isinstance(doc, list) or not all(isinstance(n, str) for n in doc):
        raise r.error(column, "not a JSON list of machine names")
    if len(doc) > MAX_EVICTED_PER_INCIDENT:
        raise r.error(column, f"more than {MAX_EVICTED_PER_INCIDENT} machines")
    return tuple(doc)


_EVENT_COLUMNS = (
    "id", "job", "at", "signal_class", "rule", "action", "playbook", "reason", "evidence", "incident_id",
    "playbook_run_id", "who",
)  # fmt: skip
_INCIDENT_COLUMNS = (
    "id", "job", "class", "onset_at", "opened_at", "decision_at", "localization_start_at",
    "localization_end_at", "eviction_start_at", "eviction_end_at", "machines_evicted", "restart_start_at",
    "first_new_step_at", "checkpoint_step", "last_step", "playbook", "playbook_run_id", "closed_at",
    "close_reason",
)  # fmt: skip
_WAITING_COLUMNS = ("id", "job", "start_at", "end_at", "reason", "incident_id")
_PROGRESS_COLUMNS = ("id", "job", "at", "step")


def _event(r: StoreRow) -> WatchEvent:
    """A ``watch_events`` row, each field checked. Raises StoreError."""
    return WatchEvent(
        id=r.count("id"),
        job=r.text("job"),
        at=r.time("at"),
        signal_class=_choice_text(r, "signal_class", EVENT_CLASSES),
        rule=r.text("rule"),
        action=r.choice("action", WatchAction),
        playbook=r.opt_text("playbook"),
        reason=r.text("reason"),
        evidence=_object(r, "evidence"),
        incident_id=r.opt_count("incident_id"),
        playbook_run_id=r.opt_count("playbook_run_id"),
        who=r.text("who"),
    )


def _incident(r: StoreRow) -> IncidentRecord:
    """An ``incidents`` row, each field checked. Raises StoreError."""
    return IncidentRecord(
        id=r.count("id"),
        job=r.text("job"),
        incident_class=_choice_text(r, "class", INCIDENT_CLASSES),
        onset_at=r.time("onset_at"),
        opened_at=r.time("opened_at"),
        decision_at=r.opt_time("decision_at"),
        localization_start_at=r.opt_time("localization_start_at"),
        localization_end_at=r.opt_time("localization_end_at"),
        eviction_start_at=r.opt_time("eviction_start_at"),
        eviction_end_at=r.opt_time("eviction_end_at"),
        machines_evicted=_names(r, "machines_evicted"),
        restart_start_at=r.opt_time("restart_start_at"),
        first_new_step_at=r.opt_time("first_new_step_at"),
        checkpoint_step=r.opt_count("checkpoint_step"),
        last_step=r.opt_count("last_step"),
        playbook=r.opt_text("playbook"),
        playbook_run_id=r.opt_count("playbook_run_id"),
        closed_at=r.opt_time("closed_at"),
        close_reason=r.opt_text("close_reason"),
    )


def _waiting(r: StoreRow) -> WaitingRecord:
    """A ``watch_waiting`` row, each field checked. Raises StoreError."""
    return WaitingRecord(
        id=r.count("id"),
        job=r.text("job"),
        start_at=r.time("start_at"),
        end_at=r.opt_time("end_at"),
        reason=r.text("reason"),
        incident_id=r.opt_count("incident_id"),
    )


# --- decision events ----------------------------------------------------------------------------


def record_event(
    store: Store,
    job: str,
    *,
    at: float,
    signal_class: str,
    rule: str,
    action: WatchAction,
    reason: str,
    playbook: str | None = None,
    evidence: Mapping[str, Any] | None = None,
    incident_id: int | None = None,
    playbook_run_id: int | None = None,
) -> int:
    """Append one decision of the watcher and return its id.

    A ``skip`` the same as the job's newest event (class, rule, action, playbook, reason, incident)
    is not appended again: a watcher that evaluates every 30 s through a 10-minute cool-down leaves one
    line saying so, not twenty; the newest event's id is returned. Any other decision is appended.

    Args:
        store: the open store.
        job: the job.
        at: when the decision was made, UNIX s.
        signal_class: one of :data:`EVENT_CLASSES`.
        rule: the rule that fired.
        action: what the watcher did.
        reason: why (text fields are cut at :data:`robustctl.store.MAX_TEXT`).
        playbook: the playbook run or advised (None: none).
        evidence: a JSON object of finite values (None: ``{}``); kept whole up to
            :data:`robustctl.store.MAX_TEXT` characters of JSON, past that its head only, marked
            ``"cut": true``.
        incident_id: the incident it belongs to (None: none).
        playbook_run_id: the playbook run it started (None: none, or not known yet).

    Returns:
        the event's id (the newest event's, for a repeated ``skip``).

    Raises:
        WatchStoreInputError: ``at`` not a time, an unknown class, evidence not a JSON object of
            finite values, an id not a non-negative integer.
        StoreError: the store cannot be written.
    """
    at = _check_time(job, "at", at)
    _class(job, signal_class, EVENT_CLASSES)
    action = WatchAction(action)
    text = _evidence_text(job, evidence if evidence is not None else {})
    for field, value in (("incident_id", incident_id), ("playbook_run_id", playbook_run_id)):
        if value is not None:
            _check_count(job, field, value)
    with store.transaction() as c:
        if action is WatchAction.SKIP:
            newest = c.execute(
                "SELECT id, signal_class, rule, action, playbook, reason, incident_id FROM watch_events "
                "WHERE job=? ORDER BY id DESC LIMIT 1",
                (store_text(job),),
            ).fetchone()
            same = (
                signal_class,
                store_text(rule),
                action.value,
                _opt_text(playbook),
                store_text(reason),
                incident_id,
            )
            if newest is not None and tuple(newest[1:]) == same:
                return int(newest[0])
        cur = c.execute(
            "INSERT INTO watch_events(job, at, signal_class, rule, action, playbook, reason, evidence, "
            "incident_id, playbook_run_id, who) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                store_text(job),
                at,
                signal_class,
                store_text(rule),
                action.value,
                _opt_text(playbook),
                store_text(reason),
                text,
                incident_id,
                playbook_run_id,
                store.who,
            ),
        )
        return int(cur.lastrowid or 0)


def set_event_run(store: Store, event_id: int, playbook_run_id: int) -> None:
    """Record the playbook run an event started (once: the same id again is a no-op).

    Args:
        store: the open store.
        event_id: the event.
        playbook_run_id: the run it started (``playbook_runs.id``).

    Raises:
        IncidentRefused: no such event, or it already names another run.
        StoreError: the store cannot be written.
    """
    _check_count(f"event {event_id}", "playbook_run_id", playbook_run_id)
    with store.transaction() as c:
        row = c.execute("SELECT playbook_run_id FROM watch_events WHERE id=?", (event_id,)).fetchone()
        if row is None:
            raise IncidentRefused(f"{store.path}: no watch event {event_id}")
        if row[0] is not None and row[0] != playbook_run_id:
            raise IncidentRefused(
                f"{store.path}: watch event {event_id} already names playbook run {row[0]!r:.40}; "
                f"not rewritten to {playbook_run_id}"
            )
        c.execute("UPDATE watch_events SET playbook_run_id=? WHERE id=?", (playbook_run_id, event_id))


def events(
    store: Store, job: str, since: float | None = None, limit: int = DEFAULT_EVENTS_LIMIT
) -> list[WatchEvent]:
    """The job's newest ``limit`` events at or after ``since`` (UNIX s; None: all), oldest first.

    Args:
        store: the open store.
        job: the job.
        since: the window's start, UNIX s (None: all).
        limit: at most this many (the newest).

    Returns:
        the events, oldest first.

    Raises:
        WatchStoreInputError: ``limit`` not in [1, :data:`MAX_EVENTS_LIMIT`], ``since`` not a time.
        StoreError: the store cannot be read, or a row read holds a bad field (it names the row).
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_EVENTS_LIMIT:
        raise WatchStoreInputError(f"job {job!r}: limit {limit!r:.40} is not in [1, {MAX_EVENTS_LIMIT}]")
    where = "WHERE job=?"
    args: list[Any] = [job]
    if since is not None:
        where, args = where + " AND at>=?", [job, _check_time(job, "since", since)]
    rows = store.rows("watch_events", _EVENT_COLUMNS, where + " ORDER BY id DESC LIMIT ?", [*args, limit])
    return [_event(r) for r in reversed(rows)]


# --- per-job state ------------------------------------------------------------------------------


def get_state(store: Store, job: str) -> dict[str, Any] | None:
    """The job's state document as last put (None: never put).

    Args:
        store: the open store.
        job: the job.

    Returns:
        the document; None when none was ever put.

    Raises:
        StoreError: the store cannot be read, or the row holds a bad field: a document that is not a
            JSON object of finite values, larger than :data:`MAX_STATE_BYTES`, or a bad time.
    """
    rows = store.rows("watch_state", ("job", "doc", "updated_at"), "WHERE job=?", [job])
    if not rows:
        return None
    r = rows[0]
    r.time("updated_at")
    raw = r.values["doc"]
    if isinstance(raw, str) and len(raw.encode("utf-8", "surrogatepass")) > MAX_STATE_BYTES:
        raise r.error("doc", f"larger than {MAX_STATE_BYTES} bytes")
    return _object(r, "doc")


def put_state(store: Store, job: str, doc: Mapping[str, Any], *, at: float) -> None:
    """Replace the job's state document (one transaction: the old one or the new one, never a mix).

    Args:
        store: the open store.
        job: the job.
        doc: a JSON object of finite values, at most :data:`MAX_STATE_BYTES` bytes as JSON.
        at: when it was written, UNIX s.

    Raises:
        WatchStoreInputError: not a JSON object of finite values, too large, or ``at`` not a time.
        StoreError: the store cannot be written.
    """
    at = _check_time(job, "at", at)
    text = _json_text(job, "state", doc)
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_STATE_BYTES:
        raise WatchStoreInputError(
            f"job {job!r}: state document of {size} bytes is larger than {MAX_STATE_BYTES} (MAX_STATE_BYTES)"
        )
    with store.transaction() as c:
        c.execute(
            "INSERT INTO watch_state(job, doc, updated_at) VALUES (?, ?, ?) ON CONFLICT(job) DO UPDATE "
            "SET doc=excluded.doc, updated_at=excluded.updated_at",
            (store_text(job), text, at),
        )


# --- incidents ----------------------------------------------------------------------------------


def open_incident(
    store: Store,
    job: str,
    *,
    incident_class: str,
    onset_at: float,
    opened_at: float,
    last_step: int | None = None,
) -> IncidentRecord:
    """Open an incident of ``job`` and return it.

    Args:
        store: the open store.
        job: the job.
        incident_class: one of :data:`INCIDENT_CLASSES`.
        onset_at: the time of the last good step before the fault, UNIX s.
        opened_at: now, UNIX s.
        last_step: the last step before it (None: unknown).

    Returns:
        the incident as stored.

    Raises:
        IncidentRefused: the job already has an open incident (the message names it): never two
            recoveries for the same incident.
        WatchStoreInputError: a time that is not one, an unknown class, a step not an integer.
        StoreError: the store cannot be written, or the open incident read back holds a bad field.
    """
    onset_at = _check_time(job, "onset_at", onset_at)
    opened_at = _check_time(job, "opened_at", opened_at)
    _class(job, incident_class, INCIDENT_CLASSES)
    if last_step is not None:
        _check_count(job, "last_step", last_step)
    name = store_text(job)
    try:
        with store.transaction() as c:
            cur = c.execute(
                "INSERT INTO incidents(job, class, onset_at, opened_at, last_step) VALUES (?, ?, ?, ?, ?)",
                (name, incident_class, onset_at, opened_at, last_step),
            )
            incident_id = int(cur.lastrowid or 0)
    except StoreError as exc:
        if "UNIQUE constraint failed: incidents.job" not in str(exc):
            raise
        held = current_incident(store, job)
        shown = f"incident {held.id} ({held.incident_class}, onset {held.onset_at:.3f})" if held else "one"
        raise IncidentRefused(
            f"{store.path}: job {job!r} already has an open incident, {shown}; close it before opening "
            "another (never two recoveries for the same incident)"
        ) from None
    return _incident_by_id(store, incident_id)


def current_incident(store: Store, job: str) -> IncidentRecord | None:
    """The job's open incident (at most one), or None.

    Args:
        store: the open store.
        job: the job.

    Returns:
        the open incident; None when the job has none.

    Raises:
        StoreError: the store cannot be read, or the row holds a bad field.
    """
    rows = store.rows("incidents", _INCIDENT_COLUMNS, "WHERE job=? AND closed_at IS NULL", [job])
    return _incident(rows[0]) if rows else None


def _incident_by_id(store: Store, incident_id: int) -> IncidentRecord:
    rows = store.rows("incidents", _INCIDENT_COLUMNS, "WHERE id=?", [incident_id])
    if not rows:
        raise IncidentRefused(f"{store.path}: no incident {incident_id}")
    return _incident(rows[0])


def update_incident(
    store: Store,
    incident_id: int,
    *,
    machines_evicted: Sequence[str] = (),
    **fields: Any,
) -> IncidentRecord:
    """Set fields of an incident not set yet, and return it as stored.

    Forward only: a field once set keeps its value (setting it again to the same value is a no-op);
    ``machines_evicted`` are added to those recorded (each once, in order).

    Args:
        store: the open store.
        incident_id: the incident.
        machines_evicted: machines to add.
        **fields: any of :data:`PHASE_FIELDS` (UNIX s), ``checkpoint_step``, ``last_step`` (steps),
            ``playbook``, ``close_reason`` (text), ``playbook_run_id``; None values are ignored.
            Setting ``closed_at`` closes the incident.

    Returns:
        the incident as stored after the update.

    Raises:
        TypeError: a field that is not one of these.
        IncidentRefused: no such incident, a field already set to another value (the message names
            it and both values), or machines added to a closed incident.
        WatchStoreInputError: a time that is not one, a step or id not a non-negative integer, more
            than :data:`MAX_EVICTED_PER_INCIDENT` machines.
        StoreError: the store cannot be written, or the row holds a bad field.
    """
    unknown = sorted(set(fields) - set(_ONCE_FIELDS))
    if unknown:
        raise TypeError(f"update_incident: not incident fields: {', '.join(unknown)}")
    where = f"incident {incident_id}"
    values: dict[str, Any] = {}
    for field, value in fields.items():
        if value is None:
            continue
        if field in PHASE_FIELDS:
            values[field] = _check_time(where, field, value)
        elif field in ("checkpoint_step", "last_step", "playbook_run_id"):
            values[field] = _check_count(where, field, value)
        elif isinstance(value, str):
            values[field] = store_text(value)
        else:
            raise WatchStoreInputError(f"{where}: {field} is not text: {value!r:.40}")
    added = [store_text(m) for m in machines_evicted]
    with store.transaction() as c:
        rows = c.execute(
            f"SELECT {', '.join(_ONCE_FIELDS)}, machines_evicted FROM incidents WHERE id=?",  # noqa: S608 - own names
            (incident_id,),
        ).fetchall()
        if not rows:
            raise IncidentRefused(f"{store.path}: no incident {incident_id}")
        old = dict(zip((*_ONCE_FIELDS, "machines_evicted"), rows[0], strict=True))
        for field, value in values.items():
            if old[field] is not None and old[field] != value:
                raise IncidentRefused(
                    f"{store.path}: {where}: {field} is already {old[field]!r:.40}; not rewritten to "
                    f"{value!r:.40} (an incident's fields go forward only)"
                )
        sets = {f: v for f, v in values.items() if old[f] is None}
        if added:
            try:
                have = json.loads(old["machines_evicted"])
            except (TypeError, ValueError, RecursionError):
                have = None
            if not isinstance(have, list) or not all(isinstance(m, str) for m in have):
                raise StoreError(
                    f"{store.path}: table incidents, row {incident_id}, column machines_evicted: not a JSON "
                    "list of machine names; the row was changed outside robustctl or the file is damaged"
                )
            grown = list(dict.fromkeys([*have, *added]))
            if len(grown) != len(have):
                if old["closed_at"] is not None:
                    raise IncidentRefused(f"{store.path}: {where} is closed; no machines added")
                if len(grown) > MAX_EVICTED_PER_INCIDENT:
                    raise WatchStoreInputError(
                        f"{where}: more than {MAX_EVICTED_PER_INCIDENT} machines evicted ({len(grown)})"
                    )
                sets["machines_evicted"] = json.dumps(grown)
        if sets:
            assign = ", ".join(f"{f}=?" for f in sets)
            c.execute(f"UPDATE incidents SET {assign} WHERE id=?", (*sets.values(), incident_id))  # noqa: S608
    return _incident_by_id(store, incident_id)


def incidents(
    store: Store, job: str, since: float | None = None, *, limit: int = MAX_INCIDENTS_READ
) -> list[IncidentRecord]:
    """The job's incidents by onset (then id), at most ``limit`` (the newest by onset).

    With ``since`` (UNIX s): those whose onset is at or after it, or still open, or closed at or after
    it: every incident a ledger window starting at ``since`` has phases in. (An earlier incident's
    recomputation may still run into the window after it closed: a caller that wants it reads from an
    earlier ``since``.)

    Args:
        store: the open store.
        job: the job.
        since: the window's start, UNIX s (None: all).
        limit: at most this many (the newest by onset).

    Returns:
        the incidents by onset, then id.

    Raises:
        WatchStoreInputError: ``limit`` not in [1, :data:`MAX_INCIDENTS_READ`], ``since`` not a time.
        StoreError: the store cannot be read, or a row read holds a bad field (it names the row).
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_INCIDENTS_READ:
        raise WatchStoreInputError(f"job {job!r}: limit {limit!r:.40} is not in [1, {MAX_INCIDENTS_READ}]")
    where = "WHERE job=?"
    args: list[Any] = [job]
    if since is not None:
        t = _check_time(job, "since", since)
        where, args = where + " AND (closed_at IS NULL OR closed_at>=? OR onset_at>=?)", [job, t, t]
    rows = store.rows(
        "incidents", _INCIDENT_COLUMNS, where + " ORDER BY onset_at DESC, id DESC LIMIT ?", [*args, limit]
    )
    return [_incident(r) for r in reversed(rows)]


# --- waiting spans ------------------------------------------------------------------------------


def open_waiting(
    store: Store, job: str, *, start_at: float, reason: str, incident_id: int | None = None
) -> int:
    """Begin a span of waiting with no action (e.g. the hourly limit reached) and return its id.

    Args:
        store: the open store.
        job: the job.
        start_at: when the waiting began, UNIX s.
        reason: why nothing is done (cut at :data:`robustctl.store.MAX_TEXT`).
        incident_id: the incident it belongs to (None: none).

    Returns:
        the span's id.

    Raises:
        WatchStoreInputError: ``start_at`` not a time, ``incident_id`` not a non-negative integer.
        StoreError: the store cannot be written.
    """
    start_at = _check_time(job, "start_at", start_at)
    if incident_id is not None:
        _check_count(job, "incident_id", incident_id)
    with store.transaction() as c:
        cur = c.execute(
            "INSERT INTO watch_waiting(job, start_at, reason, incident_id) VALUES (?, ?, ?, ?)",
            (store_text(job), start_at, store_text(reason), incident_id),
        )
        return int(cur.lastrowid or 0)


def end_waiting(store: Store, waiting_id: int, *, end_at: float) -> None:
    """End a waiting span (once: the same end again is a no-op).

    Args:
        store: the open store.
        waiting_id: the span.
        end_at: when it ended, UNIX s.

    Raises:
        IncidentRefused: no such span, or it already ended at another time.
        WatchStoreInputError: ``end_at`` not a time.
        StoreError: the store cannot be written.
    """
    end_at = _check_time(f"waiting span {waiting_id}", "end_at", end_at)
    with store.transaction() as c:
        row = c.execute("SELECT end_at FROM watch_waiting WHERE id=?", (waiting_id,)).fetchone()
        if row is None:
            raise IncidentRefused(f"{store.path}: no waiting span {waiting_id}")
        if row[0] is not None and row[0] != end_at:
            raise IncidentRefused(
                f"{store.path}: waiting span {waiting_id} already ended at {row[0]!r:.40}; not rewritten"
            )
        c.execute("UPDATE watch_waiting SET end_at=? WHERE id=?", (end_at, waiting_id))


def waiting(
    store: Store, job: str, since: float | None = None, *, limit: int = MAX_WAITING_READ
) -> list[WaitingRecord]:
    """The job's waiting spans by start (then id): with ``since``, those not ended before it. At most
    ``limit`` (the newest).

    Args:
        store: the open store.
        job: the job.
        since: the window's start, UNIX s (None: all).
        limit: at most this many (the newest).

    Returns:
        the spans by start, then id.

    Raises:
        WatchStoreInputError: ``limit`` not in [1, :data:`MAX_WAITING_READ`], ``since`` not a time.
        StoreError: the store cannot be read, or a row read holds a bad field.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_WAITING_READ:
        raise WatchStoreInputError(f"job {job!r}: limit {limit!r:.40} is not in [1, {MAX_WAITING_READ}]")
    where = "WHERE job=?"
    args: list[Any] = [job]
    if since is not None:
        t = _check_time(job, "since", since)
        where, args = where + " AND (end_at IS NULL OR end_at>=?)", [job, t]
    rows = store.rows(
        "watch_waiting", _WAITING_COLUMNS, where + " ORDER BY start_at DESC, id DESC LIMIT ?", [*args, limit]
    )
    return [_waiting(r) for r in reversed(rows)]


# --- progress samples ---------------------------------------------------------------------------


def record_progress(store: Store, job: str, *, at: float, step: int) -> bool:
    """Record that ``job`` was at ``step`` at ``at``; return whether a row was written.

    The rule (idempotent: the same reading twice writes one row): a reading is kept when the job has
    no sample yet, when its step differs from the step of the job's newest sample (by time, then id),
    or, for an unchanged step, when ``at`` is at least :data:`PROGRESS_KEEPALIVE_S` after that
    newest sample's time (a sparse keep-alive). Any other reading (the same step, seen again within
    the keep-alive, or at an earlier time; a reading already stored, same time and step) writes
    nothing. After a write, the job's oldest rows past
    :data:`MAX_PROGRESS_ROWS` are dropped, in the same transaction.

    Args:
        store: the open store.
        job: the job.
        at: when the step was reached, UNIX s (the heartbeat's time, else the file's mtime).
        step: the training step, an integer in [0, 2**63 - 1].

    Returns:
        whether a row was written.

    Raises:
        WatchStoreInputError: ``at`` not a time, ``step`` not a non-negative integer.
        StoreError: the store cannot be written.
    """
    at = _check_time(job, "at", at)
    step = _check_count(job, "step", step)
    name = store_text(job)
    with store.transaction() as c:
        newest = c.execute(
            "SELECT at, step FROM watch_progress WHERE job=? ORDER BY at DESC, id DESC LIMIT 1", (name,)
        ).fetchone()
        if newest is not None and newest[1] == step:
            last = newest[0]  # a damaged row's time (not a number) does not hold a reading back
            if isinstance(last, (int, float)) and at - float(last) < PROGRESS_KEEPALIVE_S:
                return False
        if c.execute(
            "SELECT 1 FROM watch_progress WHERE job=? AND at=? AND step=? LIMIT 1", (name, at, step)
        ).fetchone():
            return False
        c.execute("INSERT INTO watch_progress(job, at, step) VALUES (?, ?, ?)", (name, at, step))
        (count,) = c.execute("SELECT COUNT(*) FROM watch_progress WHERE job=?", (name,)).fetchone()
        if count > MAX_PROGRESS_ROWS:
            c.execute(
                "DELETE FROM watch_progress WHERE id IN (SELECT id FROM watch_progress WHERE job=? "
                "ORDER BY at, id LIMIT ?)",
                (name, count - MAX_PROGRESS_ROWS),
            )
    return True


def progress_samples(
    store: Store, job: str, since: float | None = None, *, limit: int = MAX_PROGRESS_ROWS
) -> list[ProgressRecord]:
    """The job's progress samples by time (then id), at most ``limit`` (the newest).

    With ``since`` (UNIX s): those at or after it, and the newest one before it (so that a step that
    advanced across ``since`` is counted by a ledger window starting there), all within ``limit``.

    Args:
        store: the open store.
        job: the job.
        since: the window's start, UNIX s (None: all).
        limit: at most this many (the newest).

    Returns:
        the samples by time, then id.

    Raises:
        WatchStoreInputError: ``limit`` not in [1, :data:`MAX_PROGRESS_ROWS`], ``since`` not a time.
        StoreError: the store cannot be read, or a row read holds a bad field (it names the row).
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PROGRESS_ROWS:
        raise WatchStoreInputError(f"job {job!r}: limit {limit!r:.40} is not in [1, {MAX_PROGRESS_ROWS}]")
    order = " ORDER BY at DESC, id DESC LIMIT ?"
    if since is None:
        rows = store.rows("watch_progress", _PROGRESS_COLUMNS, "WHERE job=?" + order, [job, limit])
    else:
        t = _check_time(job, "since", since)
        rows = store.rows(
            "watch_progress", _PROGRESS_COLUMNS, "WHERE job=? AND at>=?" + order, [job, t, limit]
        )
        if len(rows) < limit:
            rows += store.rows(
                "watch_progress", _PROGRESS_COLUMNS, "WHERE job=? AND at<?" + order, [job, t, 1]
            )
    return [_progress(r) for r in reversed(rows)]


def _progress(r: StoreRow) -> ProgressRecord:
    """A ``watch_progress`` row, each field checked. Raises StoreError."""
    return ProgressRecord(id=r.count("id"), job=r.text("job"), at=r.time("at"), step=r.count("step"))


# --- the one-watcher-per-job lock ---------------------------------------------------------------


def lock_path(state: Path, job: str) -> Path:
    """The lock file of ``job``'s watcher for the store at ``state``: ``<state>.watch-<job>.lock``, the
    job name percent-encoded (its SHA-256 when longer than :data:`LOCK_NAME_CHARS`)."""
    part = urllib.parse.quote(job.encode("utf-8", "surrogatepass"), safe="-_.")
    if len(part) > LOCK_NAME_CHARS or part in ("", ".", ".."):
        part = hashlib.sha256(job.encode("utf-8", "surrogatepass")).hexdigest()
    return state.with_name(f"{state.name}.watch-{part}.lock")


@contextlib.contextmanager
def watch_lock(state: Path, job: str) -> Iterator[Path]:
    """Hold the watcher lock of ``job`` (for the store at ``state``) for the ``with`` block; yields the
    lock file's path. Not waited for: a second watcher fails at once.

    Args:
        state: the store's file (the lock file lies beside it).
        job: the job.

    Yields:
        the lock file's path, while the lock is held.

    Raises:
        WatchBusy: another process holds it (the message names its pid, the job and how long).
        StoreError: the lock file cannot be created (the store's directory is missing or read-only).
    """
    path = lock_path(state, job)
    with held_lock(
        path,
        what="watch lock",
        busy=lambda holder: WatchBusy(
            f"another watcher of job {job!r} is running ({holder}); this one exits. Lock: {path}"
        ),
        facts={"job": job},
    ) as held:
        yield held
