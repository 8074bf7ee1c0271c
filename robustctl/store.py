"""robustctl's state store: one SQLite file (WAL) holding machine states, job host lists and the audit log.

Where: ``--state PATH``, else ``$ROBUSTCTL_STATE``, else ``$XDG_STATE_HOME/robustctl/state.db``, else
``~/.local/state/robustctl/state.db`` (:func:`default_path`).

What it holds (schema version :data:`SCHEMA_VERSION`, migrations recorded in ``migrations``):

* ``machines``: robustctl's lifecycle state of each host (:class:`MachineState`: active, standby,
  suspect, evicted, returned) and, for standbys, its readiness (:class:`Readiness`: ready, bad,
  unchecked); every change appends a ``machine_history`` row (who, when, from → to, why, audit id).
  A host without a row is in its inventory state.
* ``sched_nodes``: the embedded ``inventory`` scheduler's view (drained/standby/active) of each host.
* ``job_hosts``: a job's machines in rank order once robustctl changed them (standby activation).
* ``code_changes`` and ``job_versions`` (:mod:`robustctl.jobcode.records`): every staged update and
  rollback of a job's code (who, why, when, from, to, its state) and every version a job ran after a
  (re)start, with the steps it made and when it became stable. Rows are never deleted; a change's facts
  never change, only its state.
* ``check_state``, ``check_changes``, ``host_counters``, ``sweeps``: the sweep history (each host's
  check states, their changes, per-host counters, one row per sweep; :mod:`robustctl.sweep.history`).
* ``watch_events``, ``watch_state``, ``incidents``, ``watch_waiting`` (:mod:`robustctl.watchstore`):
  ``robustctl watch``'s decisions (append-only), its per-job state (one JSON document a restarted watcher
  resumes from), and the ETTR ledger's input: incidents with the times of their phases (forward only, at
  most one open per job) and spans of waiting with no action; ``watch_progress``: the job's progress
  samples (a change of step, or a sparse keep-alive; the oldest dropped past a bound per job).
* ``audit`` + ``audit_steps``: an append-only log (deleting rows is refused by a trigger). An action
  writes its record *before* applying (status ``started``, the plan JSON included), marks each step
  ``running`` before it runs and ``done``/``noop``/``failed`` after, then the final status. A robustctl
  killed mid-apply thus leaves a record whose steps say exactly which ran, and which one was in flight.

Who writes ``suspect``: ``robustctl diagnose`` and live ``robustctl stacks`` (hang mode), through
:func:`robustctl.suspects.record_suspects`, unless ``--no-record``. They mark the hosts their report
names (diagnose: CRITICAL hosts; stacks: ``suspect_hosts``) with a one-line reason, e.g.
``diagnose L0: XID 79 ...``; they never touch an evicted or standby host. Of the two, only diagnose
sets a suspect back to ``active``, and only when that host passed every level up to the requested one
(an unreachable or unchecked host is neither marked nor cleared); ``evict`` moves it on to
``evicted``. The evict/standby commands read it: the circuit breaker counts suspect hosts as looking
bad, and ``standby activate`` may replace a suspect. The write is best effort for these two commands:
a store that cannot be written is one warning line; the report and exit code stay the diagnosis'.

The lock (:meth:`Store.lock`): an ``fcntl`` lock on the sidecar file ``<state>.lock``, held while an
action plans and applies, so two robustctl processes never act at once; the kernel drops it when the
holder dies (no stale locks). A second process waits up to ``lock_timeout_s`` and then refuses
(:class:`StoreLocked`, naming the holder's pid, host and action).

Text: whatever reaches the store (a ``--reason``, a host's finding, a job name) is kept as given, control
characters and markup included (the renderers escape it), with two exceptions: a lone surrogate (what Python
makes of bytes that are not UTF-8 on the command line or in a host's JSON) is stored as its escape
``\\udcff``, since SQLite text is UTF-8; and a field longer than :data:`MAX_TEXT` characters is cut
there with a note. The commands refuse a longer ``--reason`` outright
(:func:`robustctl.commands.actions.check_reason`); the cut bounds everything else. The path is passed
to SQLite percent-encoded, so a ``?``, ``#`` or ``%`` in ``--state`` names a file, never a URI
parameter or another file.

Errors: any SQLite failure (read-only file or file system, disk or database full, corrupt file) is a
:class:`StoreError` (a :class:`~robustctl.errors.ConfigError`, exit 78) naming the file; since the
audit record is the first write of an action, a store that cannot be written stops the action before
any scheduler step runs. A file whose permission bits forbid writing is opened read-only even by root.

Reading: whatever the file holds is checked as it is read (:class:`StoreRow`), since anyone who can
write the file can put anything in any column (SQLite keeps text in a ``REAL`` column as text). A time
must be a finite number in [:data:`TIME_MIN`, :data:`TIME_MAX`) (1970 to the year 9999, what a report
can print), a count an integer, a state one of its enum's values, a JSON column its JSON. A row that
fails is a :class:`StoreError` (exit 78) naming the file, the table, the row id and the column, never a
traceback: every reader of this module and of :mod:`robustctl.sweep.history` fails on it rather than
skip it, because each feeds a decision (the rails count evictions, a sweep dates its rows after the
newest one, lemons count failures) or a record a person trusts (``audit``, ``hosts``, ``history``).
Rows a query filters out by time (``since``) are not read, and so not checked.

The API (the one way to the file; :mod:`robustctl.watchstore`, :mod:`robustctl.playbooks.journal`,
:mod:`robustctl.jobcode.records` and :mod:`robustctl.sweep.history` keep their own tables through it):
:meth:`Store.open` makes the one connection and sets its WAL mode, ``synchronous=FULL``, foreign keys
and busy timeout once; :data:`SCHEMA` creates every table, each step naming the module that owns its
tables; :meth:`Store.transaction` is the one write transaction (a :class:`Transaction`, which refuses
transaction control, pragmas and schema changes); :meth:`Store.rows` (checked fields) and
:meth:`Store.query` read. Every text argument is bound through :func:`clean_text`; free text is cut by
:func:`store_text` where it is written. No module outside this one opens a connection, sets a pragma,
creates a table or commits.

Before an action applies anything, :meth:`Store.audit_begin` checks that its record can be written and
read back (:meth:`Store.check_audit`: ``PRAGMA quick_check`` of the tables an action writes and the
whole audit log read as ``robustctl audit`` reads it); a store that fails is a StoreError and nothing
is applied.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import fcntl
import functools
import getpass
import json
import math
import os
import re
import socket
import sqlite3
import stat
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robustctl.errors import ActionRefused, ConfigError

__all__ = [
    "ACTION_TABLES",
    "LOCK_HOLDER_BYTES",
    "MAX_JSON_DEPTH",
    "NOT_IN_A_TRANSACTION",
    "PID_MAX",
    "READ_STATEMENTS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "TIME_MAX",
    "TIME_MIN",
    "AuditRecord",
    "AuditStatus",
    "AuditStep",
    "HistoryRow",
    "MachineRecord",
    "MachineState",
    "Migration",
    "Readiness",
    "Store",
    "StoreError",
    "StoreLocked",
    "StoreRow",
    "Transaction",
    "clean_text",
    "deeper_than",
    "default_path",
    "flock_within",
    "journal_query",
    "lock_holder",
    "schema_tables",
    "store_text",
    "time_problem",
    "whoami",
]

SCHEMA_VERSION = 6
"""Version of the store's schema; :meth:`Store.open` migrates older files forward."""

MAX_TEXT = 65_536
"""Longest text stored in one field, in characters; longer text is cut there (with a note saying how
long it was). Far above any reason or finding line a person reads (``--reason`` is refused past
:data:`robustctl.commands.actions.MAX_REASON_BYTES`), it keeps a runaway message from growing the
file by megabytes per row."""


TIME_MIN = 0.0
"""Earliest time (UNIX s) a row may hold: the epoch. robustctl dates its rows with ``time.time()``, so an
earlier time was not written by it; a negative one also has no UTC date on every platform."""

TIME_MAX = 253_402_300_800.0
"""First time (UNIX s) a row may not hold: 10000-01-01T00:00:00Z. :mod:`datetime` ends with the year
9999, so every report can print a time below it; far beyond any clock a host has, it still refuses
``1e300`` and the infinities a hand-edited row may carry. Durations (a sweep's clock skew) are held to
the same bound."""

COUNT_MAX = 2**63 - 1
"""Largest count (observations, failures, step index, row id) a row may hold: SQLite's ``INTEGER``."""

PID_MAX = 2**31 - 1
"""Largest process id an audit record may hold: ``pid_t`` is a signed 32-bit integer, and
:func:`os.kill` (``audit`` looks whether the process is gone) refuses a larger one."""

LOCK_HOLDER_BYTES = 4096
"""Most bytes of a lock file read to name its holder (it holds one small JSON object)."""

SHOWN_VALUE = 40
"""Characters of a bad field's ``repr`` an error line quotes (one line, whatever the field holds)."""

SHOWN_DAMAGE = 200
"""Characters of an SQLite message an error line quotes, its whitespace runs made one space: a
``quick_check`` report lists every bad cell, and the message about a damaged schema quotes the file's
own bytes (newlines included)."""

ACTION_TABLES = (
    "audit",
    "audit_steps",
    "machines",
    "machine_history",
    "sched_nodes",
    "job_hosts",
    "code_changes",
    "job_versions",
    "sqlite_sequence",
)
"""The tables an action writes (its audit record and steps, machine states, the ``inventory``
scheduler's nodes, job host lists, code changes and versions, the AUTOINCREMENT counters): the ones
:meth:`Store.check_audit` has SQLite check (``PRAGMA quick_check(TABLE)``, the table and its indexes)
before anything is applied. Small tables (rows per action, not per sweep): the check stays cheap."""


class MachineState(str, enum.Enum):
    """robustctl's lifecycle state of a machine."""

    ACTIVE = "active"
    STANDBY = "standby"
    SUSPECT = "suspect"
    EVICTED = "evicted"
    RETURNED = "returned"


class Readiness(str, enum.Enum):
    """Whether a standby passed its self-check (``robustctl standby check``)."""

    READY = "ready"
    BAD = "bad"
    UNCHECKED = "unchecked"


class AuditStatus(str, enum.Enum):
    """The final status of an audit record (the ``status`` column; read back as plain text).

    ``started``: written before the first step; a record still ``started`` is running, or its
    process died mid-apply. ``applied``: at least one step changed something and none failed.
    ``nothing-to-do``: every step found its host already in the wanted state (an idempotent rerun);
    records written before this status existed say ``applied`` for such a run. ``failed``: a step
    failed (later ones skipped) or the action was interrupted. ``refused``: a safety rail refused the
    plan; no step ran.
    """

    STARTED = "started"
    APPLIED = "applied"
    NOTHING_TO_DO = "nothing-to-do"
    FAILED = "failed"
    REFUSED = "refused"


class StoreError(ConfigError):
    """The state store cannot be opened, read or written (the message names the file)."""


class StoreLocked(ActionRefused):
    """Another robustctl holds the store's action lock past the wait time."""


def time_problem(value: object) -> str | None:
    """Why ``value`` (a field read from the store) is not a time a row may hold; None when it is one.

    A time is an ``int`` or ``float`` (never a bool, text, blob or NULL), finite, in
    [:data:`TIME_MIN`, :data:`TIME_MAX`) UNIX seconds.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "not a number" if value is not None else "missing (NULL)"
    if isinstance(value, float) and not math.isfinite(value):
        return "not a finite number"
    if not TIME_MIN <= value < TIME_MAX:  # compared before float(): an int past 1e308 has no float
        return "out of range (1970-01-01 to 9999-12-31 UTC)"
    return None


class StoreRow:
    """One row read from the store; each field is checked as it is taken.

    A field that does not hold what its column should raises :class:`StoreError` naming the file, the
    table, the row id and the column, with the value quoted (at most :data:`SHOWN_VALUE` characters of
    its ``repr``): one line, exit 78.

    Args:
        path: the store file (named in errors).
        table: the table read.
        rowid: the row's ``rowid``.
        values: the fields by column name.
    """

    __slots__ = ("path", "rowid", "table", "values")

    def __init__(self, path: Path, table: str, rowid: object, values: Mapping[str, Any]) -> None:
        self.path = path
        self.table = table
        self.rowid = rowid
        self.values = values

    def error(self, column: str, why: str) -> StoreError:
        """The StoreError for ``column`` of this row holding what it should not (``why``)."""
        shown = repr(self.values.get(column))
        if len(shown) > SHOWN_VALUE:
            shown = shown[: SHOWN_VALUE - 1] + "…"
        return StoreError(
            f"{self.path}: table {self.table}, row {self.rowid}, column {column}: {why} ({shown}); the row "
            "was changed outside robustctl or the file is damaged: repair it, or pass --state to use another file"
        )

    def time(self, column: str) -> float:
        """The field as a time (UNIX s, :func:`time_problem`). Raises StoreError."""
        value = self.values[column]
        why = time_problem(value)
        if why is not None:
            raise self.error(column, f"bad time: {why}")
        return float(value)

    def opt_time(self, column: str) -> float | None:
        """:meth:`time`, or None for NULL (a column that may be empty: an end not reached yet)."""
        return None if self.values[column] is None else self.time(column)

    def count(self, column: str, *, most: int = COUNT_MAX) -> int:
        """The field as an integer in [0, ``most``]. Raises StoreError."""
        value = self.values[column]
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(column, "not an integer")
        if not 0 <= value <= most:
            raise self.error(column, f"out of range (0 to {most})")
        return value

    def opt_count(self, column: str, *, most: int = COUNT_MAX) -> int | None:
        """:meth:`count` (in [0, ``most``]), or None for NULL."""
        return None if self.values[column] is None else self.count(column, most=most)

    def text(self, column: str) -> str:
        """The field as text (a number SQLite kept as one is written out). Raises StoreError: a blob or NULL."""
        value = self.values[column]
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise self.error(column, "not text")

    def opt_text(self, column: str) -> str | None:
        """:meth:`text`, or None for NULL."""
        return None if self.values[column] is None else self.text(column)

    def choice(self, column: str, kind: type[enum.Enum]) -> Any:
        """The field as a member of the str enum ``kind`` (a state, a readiness). Raises StoreError."""
        value = self.values[column]
        try:
            return kind(value)
        except ValueError:
            raise self.error(column, "not one of " + ", ".join(str(m.value) for m in kind)) from None

    def json(self, column: str) -> Any:
        """The field's JSON document (None for NULL). Raises StoreError: not JSON text, or nested
        deeper than :data:`MAX_JSON_DEPTH` (what reads it next, rendering included, recurses)."""
        value = self.values[column]
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(column, "not JSON text")
        try:
            doc = json.loads(value)
        except (ValueError, RecursionError):
            raise self.error(column, "not JSON") from None
        if deeper_than(doc, MAX_JSON_DEPTH):
            raise self.error(column, f"nested deeper than {MAX_JSON_DEPTH} levels")
        return doc

    def times(self, column: str) -> tuple[float, ...]:
        """The field as a JSON list of times (each checked like :meth:`time`). Raises StoreError."""
        doc = self.json(column)
        if not isinstance(doc, list):
            raise self.error(column, "not a JSON list of times")
        for t in doc:
            why = time_problem(t)
            if why is not None:
                raise self.error(column, f"bad time in the list: {why}")
        return tuple(float(t) for t in doc)


MAX_JSON_DEPTH = 100
"""Deepest nesting (objects and lists within one another) of a JSON document read from the store.
robustctl's own documents nest about ten levels; :func:`robustctl.models.strict_jsonable`, the
``when:`` evaluator and ``--json`` rendering recurse a few frames per level, so 100 levels stay far
under Python's recursion limit (1000): a hand-edited row nested deeper is a store error, not a crash."""


def deeper_than(doc: object, most: int) -> bool:
    """Whether ``doc`` (a JSON value) nests objects and lists more than ``most`` levels (``{}`` is one
    level, a scalar none). Iterative: it never recurses, however deep ``doc`` is."""
    todo: list[tuple[object, int]] = [(doc, 1)]
    while todo:
        node, level = todo.pop()
        if isinstance(node, (dict, list)):
            if level > most:
                return True
            todo.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return False


@dataclass(frozen=True)
class MachineRecord:
    """A host's row in ``machines``.

    Attributes:
        host, state, readiness, reason (of the last change), updated_at (UNIX seconds).
    """

    host: str
    state: MachineState
    readiness: Readiness
    reason: str
    updated_at: float


@dataclass(frozen=True)
class HistoryRow:
    """One state change: ``host`` went ``from_state`` → ``to_state`` at ``at`` (UNIX s)."""

    host: str
    at: float
    from_state: str | None
    to_state: str
    readiness: str | None
    reason: str
    who: str
    audit_id: int | None


@dataclass(frozen=True)
class AuditStep:
    """One step of an audited action.

    Attributes:
        index: position in the plan (0-based). description: e.g. ``"drain node017 via inventory"``.
        status: ``running`` (started, no outcome recorded: the process died or is still running),
            ``done``, ``noop`` (already in the wanted state), ``failed``.
        detail: the outcome line. started_at/finished_at: UNIX seconds (finished None while running).
    """

    index: int
    description: str
    status: str
    detail: str
    started_at: float
    finished_at: float | None


@dataclass(frozen=True)
class AuditRecord:
    """One action in the audit log.

    Attributes:
        id, started_at, finished_at (None until it ends), who (``user@host``), pid, action
        (``evict``, ``return``, ``standby-add``, ...), targets, reason, evidence (report file or
        ``None``), plan (the applied plan's JSON), status (an :class:`AuditStatus` value, kept as
        text so that any record stays readable), message (final outcome line), forced (rails
        overridden) and steps.
    """

    id: int
    started_at: float
    finished_at: float | None
    who: str
    pid: int
    action: str
    targets: tuple[str, ...]
    reason: str
    evidence: str | None
    plan: Mapping[str, Any] | None
    status: str
    message: str
    forced: bool
    steps: tuple[AuditStep, ...] = ()


def default_path(environ: Mapping[str, str] | None = None) -> Path:
    """``$ROBUSTCTL_STATE``, else ``$XDG_STATE_HOME/robustctl/state.db``, else ``~/.local/state/robustctl/state.db``.

    Args:
        environ: the environment read (None: :data:`os.environ`).

    Returns:
        the state file's path (``~`` expanded).

    Raises:
        StoreError: ``~`` cannot be expanded (``~nouser/x.db``, or no ``$HOME`` and no password entry).
    """
    env = os.environ if environ is None else environ
    if env.get("ROBUSTCTL_STATE"):
        try:
            return Path(env["ROBUSTCTL_STATE"]).expanduser()
        except RuntimeError as exc:  # "~nouser/...": no such user
            raise StoreError(f"$ROBUSTCTL_STATE={env['ROBUSTCTL_STATE']!r}: {exc}") from None
    try:
        base = env.get("XDG_STATE_HOME") or str(Path("~/.local/state").expanduser())
    except RuntimeError as exc:  # no $HOME and no password entry
        raise StoreError(f"no state store: {exc}; set $ROBUSTCTL_STATE or pass --state") from None
    return Path(base) / "robustctl" / "state.db"


def whoami() -> str:
    """``user@host`` of this process (uid when the user has no name)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True)
class Migration:
    """One step of the store's schema: the tables (with their indexes and triggers) of one module.

    Every table of the state file is created here, in :data:`SCHEMA`, whichever module reads and writes
    it; that module keeps its own SQL statements for its own tables and runs them through
    :meth:`Store.transaction` (writes) and :meth:`Store.rows` / :meth:`Store.query` (reads).

    Attributes:
        version: the schema version this step brings a file to (a row of ``migrations``).
        owner: the module that reads and writes these tables.
        description: the line recorded in ``migrations`` (kept as written: files hold it).
        sql: the statements, each ended by ``;`` and a newline (the last one by nothing), run in one
            transaction by :meth:`Store.open`.
    """

    version: int
    owner: str
    description: str
    sql: str

    @property
    def statements(self) -> tuple[str, ...]:
        """The step's statements, in order (as :meth:`Store.open` runs them)."""
        return tuple(stmt for stmt in self.sql.split(";\n") if stmt.strip())

    @property
    def tables(self) -> tuple[str, ...]:
        """The names of the tables the step creates."""
        return tuple(
            stmt.split()[2].split("(")[0]
            for stmt in self.statements
            if stmt.split()[:2] == ["CREATE", "TABLE"]
        )


SCHEMA: tuple[Migration, ...] = (
    Migration(
        1,
        "robustctl.store",
        "machines, history, scheduler nodes, job hosts, audit log",
        """
        CREATE TABLE machines(
            host TEXT PRIMARY KEY, state TEXT NOT NULL, readiness TEXT NOT NULL DEFAULT 'unchecked',
            reason TEXT NOT NULL DEFAULT '', updated_at REAL NOT NULL);
        CREATE TABLE machine_history(
            id INTEGER PRIMARY KEY AUTOINCREMENT, host TEXT NOT NULL, at REAL NOT NULL, from_state TEXT,
            to_state TEXT NOT NULL, readiness TEXT, reason TEXT NOT NULL DEFAULT '', who TEXT NOT NULL,
            audit_id INTEGER);
        CREATE INDEX machine_history_state_at ON machine_history(to_state, at);
        CREATE TABLE sched_nodes(
            host TEXT PRIMARY KEY, state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', updated_at REAL NOT NULL);
        CREATE TABLE job_hosts(job TEXT NOT NULL, idx INTEGER NOT NULL, host TEXT NOT NULL,
            PRIMARY KEY(job, idx));
        CREATE TABLE audit(
            id INTEGER PRIMARY KEY AUTOINCREMENT, started_at REAL NOT NULL, finished_at REAL,
            who TEXT NOT NULL, pid INTEGER NOT NULL, action TEXT NOT NULL, targets TEXT NOT NULL,
            reason TEXT NOT NULL, evidence TEXT, plan TEXT, status TEXT NOT NULL,
            message TEXT NOT NULL DEFAULT '', forced INTEGER NOT NULL DEFAULT 0);
        CREATE INDEX audit_started ON audit(started_at);
        CREATE TABLE audit_steps(
            audit_id INTEGER NOT NULL REFERENCES audit(id), idx INTEGER NOT NULL, description TEXT NOT NULL,
            status TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '', started_at REAL NOT NULL,
            finished_at REAL, PRIMARY KEY(audit_id, idx));
        CREATE TRIGGER audit_append_only BEFORE DELETE ON audit
            BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
        CREATE TRIGGER audit_steps_append_only BEFORE DELETE ON audit_steps
            BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
        """,
    ),
    Migration(
        2,
        "robustctl.jobcode.records",
        "job code changes (hot update, rollback) and job versions",
        """
        CREATE TABLE code_changes(
            id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, kind TEXT NOT NULL, ref TEXT NOT NULL,
            commit_id TEXT NOT NULL, from_ref TEXT, reason TEXT NOT NULL, urgent INTEGER NOT NULL,
            who TEXT NOT NULL, staged_at REAL NOT NULL, due_at REAL NOT NULL, state TEXT NOT NULL,
            applied_at REAL, note TEXT NOT NULL DEFAULT '');
        CREATE INDEX code_changes_job ON code_changes(job, state);
        CREATE TABLE job_versions(
            id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, commit_id TEXT NOT NULL, ref TEXT,
            started_at REAL NOT NULL, base_step INTEGER, last_step INTEGER, last_progress_at REAL,
            stable_at REAL, change_id INTEGER);
        CREATE INDEX job_versions_job ON job_versions(job, started_at);
        CREATE TRIGGER code_changes_append_only BEFORE DELETE ON code_changes
            BEGIN SELECT RAISE(ABORT, 'code changes are append-only'); END;
        CREATE TRIGGER code_changes_facts_fixed BEFORE UPDATE OF job, kind, ref, commit_id, from_ref, reason,
            urgent, who, staged_at, due_at ON code_changes
            BEGIN SELECT RAISE(ABORT, 'a recorded code change keeps its job, refs, reason, who and when'); END;
        CREATE TRIGGER job_versions_append_only BEFORE DELETE ON job_versions
            BEGIN SELECT RAISE(ABORT, 'job versions are append-only'); END;
        CREATE TRIGGER job_versions_facts_fixed BEFORE UPDATE OF job, commit_id, ref, started_at ON job_versions
            BEGIN SELECT RAISE(ABORT, 'a recorded job version keeps its job, commit and start'); END;
        """,
    ),
    Migration(
        3,
        "robustctl.playbooks.journal",
        "playbook runs and their steps (the journal resume reads)",
        """
        CREATE TABLE playbook_runs(
            id INTEGER PRIMARY KEY AUTOINCREMENT, playbook TEXT NOT NULL, source TEXT NOT NULL,
            definition TEXT NOT NULL, job TEXT, params TEXT NOT NULL, started_at REAL NOT NULL,
            finished_at REAL, who TEXT NOT NULL, pid INTEGER NOT NULL, status TEXT NOT NULL,
            message TEXT NOT NULL DEFAULT '');
        CREATE INDEX playbook_runs_job ON playbook_runs(job, status);
        CREATE TABLE playbook_steps(
            run_id INTEGER NOT NULL REFERENCES playbook_runs(id), seq INTEGER NOT NULL, step TEXT NOT NULL,
            kind TEXT NOT NULL, attempt INTEGER NOT NULL, status TEXT NOT NULL, started_at REAL NOT NULL,
            finished_at REAL, pid INTEGER NOT NULL, audit_after INTEGER NOT NULL DEFAULT 0,
            exit_code INTEGER, result TEXT, error TEXT NOT NULL DEFAULT '', PRIMARY KEY(run_id, seq))
        """,
    ),
    Migration(
        4,
        "robustctl.sweep.history",
        "sweep history: check states, check changes, host counters, sweeps",
        # robustctl.sweep.history: one row per (host, check) now, one row per state change, one row per
        # host of counters, one row per sweep; a year of 5-minute sweeps stays small.
        """
        CREATE TABLE check_state(
            host TEXT NOT NULL, check_name TEXT NOT NULL, status TEXT NOT NULL, since REAL NOT NULL,
            last_seen REAL NOT NULL, streak INTEGER NOT NULL DEFAULT 1, detail TEXT NOT NULL DEFAULT '',
            recent_bad TEXT NOT NULL DEFAULT '[]', PRIMARY KEY(host, check_name));
        CREATE TABLE check_changes(
            id INTEGER PRIMARY KEY AUTOINCREMENT, host TEXT NOT NULL, check_name TEXT NOT NULL,
            at REAL NOT NULL, from_status TEXT, to_status TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '',
            source TEXT NOT NULL);
        CREATE INDEX check_changes_host_at ON check_changes(host, at);
        CREATE INDEX check_changes_at ON check_changes(at);
        CREATE TABLE host_counters(
            host TEXT PRIMARY KEY, seen INTEGER NOT NULL DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0,
            unknowns INTEGER NOT NULL DEFAULT 0, first_seen REAL NOT NULL, last_seen REAL NOT NULL,
            last_status TEXT NOT NULL);
        CREATE TABLE sweeps(
            id INTEGER PRIMARY KEY AUTOINCREMENT, started_at REAL NOT NULL, finished_at REAL NOT NULL,
            source TEXT NOT NULL, hosts INTEGER NOT NULL, status TEXT NOT NULL,
            clock_skew_s REAL NOT NULL DEFAULT 0);
        CREATE INDEX sweeps_started ON sweeps(started_at)
        """,
    ),
    Migration(
        5,
        "robustctl.watchstore",
        "the watcher: decision events, per-job state, incidents and waiting spans (the ETTR ledger's input)",
        # robustctl.watchstore reads and writes them. Events, incidents and waiting spans are never
        # deleted; an event never changes but for its playbook run id, set once; an incident keeps its
        # job, class and onset, and each later field, once set, keeps its value (forward only); the
        # machines evicted only grow. At most one open incident per job (a partial unique index): never
        # two recoveries for the same incident.
        """
        CREATE TABLE watch_events(
            id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, at REAL NOT NULL,
            signal_class TEXT NOT NULL, rule TEXT NOT NULL, action TEXT NOT NULL, playbook TEXT,
            reason TEXT NOT NULL DEFAULT '', evidence TEXT NOT NULL DEFAULT '{}', incident_id INTEGER,
            playbook_run_id INTEGER, who TEXT NOT NULL);
        CREATE INDEX watch_events_job_at ON watch_events(job, at);
        CREATE TRIGGER watch_events_append_only BEFORE DELETE ON watch_events
            BEGIN SELECT RAISE(ABORT, 'watch events are append-only'); END;
        CREATE TRIGGER watch_events_facts_fixed BEFORE UPDATE ON watch_events
            WHEN NEW.id IS NOT OLD.id OR NEW.job IS NOT OLD.job OR NEW.at IS NOT OLD.at
                OR NEW.signal_class IS NOT OLD.signal_class OR NEW.rule IS NOT OLD.rule
                OR NEW.action IS NOT OLD.action OR NEW.playbook IS NOT OLD.playbook
                OR NEW.reason IS NOT OLD.reason OR NEW.evidence IS NOT OLD.evidence
                OR NEW.incident_id IS NOT OLD.incident_id OR NEW.who IS NOT OLD.who
                OR (OLD.playbook_run_id IS NOT NULL AND NEW.playbook_run_id IS NOT OLD.playbook_run_id)
            BEGIN SELECT RAISE(ABORT, 'a recorded watch event never changes (its playbook run id is set once)'); END;
        CREATE TABLE watch_state(job TEXT PRIMARY KEY, doc TEXT NOT NULL, updated_at REAL NOT NULL);
        CREATE TABLE incidents(
            id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, class TEXT NOT NULL,
            onset_at REAL NOT NULL, opened_at REAL NOT NULL, decision_at REAL, localization_start_at REAL,
            localization_end_at REAL, eviction_start_at REAL, eviction_end_at REAL,
            machines_evicted TEXT NOT NULL DEFAULT '[]', restart_start_at REAL, first_new_step_at REAL,
            checkpoint_step INTEGER, last_step INTEGER, playbook TEXT, playbook_run_id INTEGER,
            closed_at REAL, close_reason TEXT);
        CREATE UNIQUE INDEX incidents_one_open ON incidents(job) WHERE closed_at IS NULL;
        CREATE INDEX incidents_job_onset ON incidents(job, onset_at);
        CREATE TRIGGER incidents_append_only BEFORE DELETE ON incidents
            BEGIN SELECT RAISE(ABORT, 'incidents are append-only'); END;
        CREATE TRIGGER incidents_facts_fixed BEFORE UPDATE OF id, job, class, onset_at, opened_at ON incidents
            WHEN NEW.id IS NOT OLD.id OR NEW.job IS NOT OLD.job OR NEW.class IS NOT OLD.class
                OR NEW.onset_at IS NOT OLD.onset_at OR NEW.opened_at IS NOT OLD.opened_at
            BEGIN SELECT RAISE(ABORT, 'a recorded incident keeps its job, class and onset'); END;
        CREATE TRIGGER incidents_forward_only BEFORE UPDATE ON incidents
            WHEN (OLD.decision_at IS NOT NULL AND NEW.decision_at IS NOT OLD.decision_at)
                OR (OLD.localization_start_at IS NOT NULL AND NEW.localization_start_at IS NOT OLD.localization_start_at)
                OR (OLD.localization_end_at IS NOT NULL AND NEW.localization_end_at IS NOT OLD.localization_end_at)
                OR (OLD.eviction_start_at IS NOT NULL AND NEW.eviction_start_at IS NOT OLD.eviction_start_at)
                OR (OLD.eviction_end_at IS NOT NULL AND NEW.eviction_end_at IS NOT OLD.eviction_end_at)
                OR (OLD.restart_start_at IS NOT NULL AND NEW.restart_start_at IS NOT OLD.restart_start_at)
                OR (OLD.first_new_step_at IS NOT NULL AND NEW.first_new_step_at IS NOT OLD.first_new_step_at)
                OR (OLD.checkpoint_step IS NOT NULL AND NEW.checkpoint_step IS NOT OLD.checkpoint_step)
                OR (OLD.last_step IS NOT NULL AND NEW.last_step IS NOT OLD.last_step)
                OR (OLD.playbook IS NOT NULL AND NEW.playbook IS NOT OLD.playbook)
                OR (OLD.playbook_run_id IS NOT NULL AND NEW.playbook_run_id IS NOT OLD.playbook_run_id)
                OR (OLD.closed_at IS NOT NULL AND NEW.closed_at IS NOT OLD.closed_at)
                OR (OLD.close_reason IS NOT NULL AND NEW.close_reason IS NOT OLD.close_reason)
            BEGIN SELECT RAISE(ABORT, 'an incident field once set is not rewritten (forward only)'); END;
        CREATE TRIGGER incidents_evicted_grow BEFORE UPDATE OF machines_evicted ON incidents
            WHEN NOT json_valid(NEW.machines_evicted) OR json_type(NEW.machines_evicted) IS NOT 'array'
                OR (json_valid(OLD.machines_evicted) AND json_type(OLD.machines_evicted) = 'array'
                    AND EXISTS (SELECT value FROM json_each(OLD.machines_evicted)
                                EXCEPT SELECT value FROM json_each(NEW.machines_evicted)))
            BEGIN SELECT RAISE(ABORT, 'machines once recorded as evicted stay recorded'); END;
        CREATE TABLE watch_waiting(
            id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, start_at REAL NOT NULL, end_at REAL,
            reason TEXT NOT NULL DEFAULT '', incident_id INTEGER);
        CREATE INDEX watch_waiting_job_start ON watch_waiting(job, start_at);
        CREATE TRIGGER watch_waiting_append_only BEFORE DELETE ON watch_waiting
            BEGIN SELECT RAISE(ABORT, 'waiting spans are append-only'); END;
        CREATE TRIGGER watch_waiting_forward_only BEFORE UPDATE ON watch_waiting
            WHEN NEW.id IS NOT OLD.id OR NEW.job IS NOT OLD.job OR NEW.start_at IS NOT OLD.start_at
                OR NEW.reason IS NOT OLD.reason OR NEW.incident_id IS NOT OLD.incident_id
                OR (OLD.end_at IS NOT NULL AND NEW.end_at IS NOT OLD.end_at)
            BEGIN SELECT RAISE(ABORT, 'a waiting span keeps its start and reason; its end is set once'); END
        """,
    ),
    Migration(
        6,
        "robustctl.watchstore",
        "the watcher's progress samples (when a job's step advanced: the ETTR ledger's productive time)",
        # robustctl.watchstore.record_progress writes them: a change of step, or a sparse keep-alive;
        # the oldest rows of a job beyond watchstore.MAX_PROGRESS_ROWS are dropped (retention), so no
        # append-only trigger here. A sample never changes once written.
        """
        CREATE TABLE watch_progress(
            id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, at REAL NOT NULL, step INTEGER NOT NULL);
        CREATE INDEX watch_progress_job_at ON watch_progress(job, at);
        CREATE TRIGGER watch_progress_fixed BEFORE UPDATE ON watch_progress
            BEGIN SELECT RAISE(ABORT, 'a progress sample never changes'); END
        """,
    ),
)
"""The store's schema, in one place: each step (:class:`Migration`) the tables of one module, by
version. :meth:`Store.open` applies the steps a file lacks, in order, each recorded in ``migrations``;
a step, once released, is never edited (files hold its tables and its description): a change of a
table is a new step."""


def schema_tables(owner: str) -> frozenset[str]:
    """The tables :data:`SCHEMA` creates for one module.

    Args:
        owner: the module's dotted name, e.g. ``"robustctl.watchstore"``.

    Returns:
        the names of its tables (empty for a module that owns none).
    """
    return frozenset(t for m in SCHEMA if m.owner == owner for t in m.tables)


NOT_IN_A_TRANSACTION = frozenset(
    {"ALTER", "ATTACH", "BEGIN", "COMMIT", "CREATE", "DETACH", "DROP", "END", "PRAGMA", "RELEASE",
     "REINDEX", "ROLLBACK", "SAVEPOINT", "VACUUM"}
)  # fmt: skip
"""First words of the statements :meth:`Transaction.execute` refuses: the transaction's own control
(begin, commit, roll back: :meth:`Store.transaction` does that), the connection's settings (pragmas:
:meth:`Store.open` sets them once), other files, and the schema (:data:`SCHEMA` is the one place
tables are made). What is left, ``SELECT``/``INSERT``/``UPDATE``/``DELETE`` (and ``WITH``, ``REPLACE``),
is what a module runs on its own tables."""


class Transaction:
    """An open write transaction of the store, given by :meth:`Store.transaction` (never made directly).

    A module runs its own statements on its own tables with :meth:`execute` and :meth:`executemany`;
    the transaction commits (or rolls back) when the ``with`` block ends. Text arguments are bound as
    :func:`clean_text` makes them (a lone surrogate as its escape: SQLite text is UTF-8), so no caller
    has to, and none can fail on them; free text is still cut by its writer (:func:`store_text`).
    """

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, args: Sequence[Any] = ()) -> sqlite3.Cursor:
        """Run one statement of the block.

        Args:
            sql: one ``SELECT``/``INSERT``/``UPDATE``/``DELETE`` statement, ``?`` for each argument.
            args: its arguments (text bound as :func:`clean_text` makes it).

        Returns:
            its cursor (``fetchone``, ``fetchall``, ``lastrowid``, ``rowcount``).

        Raises:
            ValueError: the statement is one a module may not run (:data:`NOT_IN_A_TRANSACTION`): a
                programming error, never input.
            sqlite3.Error: SQLite refused it; :meth:`Store.transaction` makes it a StoreError.
        """
        return self._conn.execute(_allowed(sql), _bind(args))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> sqlite3.Cursor:
        """Run one statement once per row of arguments (as :meth:`execute`).

        Args:
            sql: one ``INSERT``/``UPDATE``/``DELETE`` statement, ``?`` for each argument.
            rows: one sequence of arguments per run.

        Returns:
            its cursor (``rowcount``: the rows changed in all).

        Raises:
            ValueError: the statement is one a module may not run (:data:`NOT_IN_A_TRANSACTION`).
            sqlite3.Error: SQLite refused it; :meth:`Store.transaction` makes it a StoreError.
        """
        return self._conn.executemany(_allowed(sql), (_bind(r) for r in rows))


@functools.lru_cache(maxsize=512)
def _allowed(sql: str) -> str:
    """``sql`` when :class:`Transaction` may run it; else ValueError (see :data:`NOT_IN_A_TRANSACTION`).

    Remembered per statement text (robustctl's own constants: a few hundred at most), so a statement
    run once per row is judged once."""
    words = sql.split(None, 1)
    if not words or words[0].upper() in NOT_IN_A_TRANSACTION:
        raise ValueError(f"not a statement for a store transaction: {sql[:40]!r}")
    return sql


READ_STATEMENTS = ("SELECT", "WITH", "PRAGMA")
"""First words of the statements :meth:`Store.query` runs: reads (a ``PRAGMA`` only in its reading form,
without ``=``; a ``WITH`` only when no ``INSERT``/``UPDATE``/``DELETE``/``REPLACE`` follows). The
connection is in autocommit mode outside :meth:`Store.transaction`, so a write run as a query would
commit on its own: writes go through a transaction."""

_WRITE_WORD = re.compile(r"\b(INSERT|UPDATE|DELETE|REPLACE)\b")
"""A write keyword (upper case, as robustctl writes its SQL) in a ``WITH`` statement."""


@functools.lru_cache(maxsize=512)
def _read(sql: str) -> str:
    """``sql`` when :meth:`Store.query` may run it (:data:`READ_STATEMENTS`); else ValueError.

    Remembered per statement text, as :func:`_allowed` is."""
    words = sql.split(None, 1)
    first = words[0].upper() if words else ""
    if (
        first not in READ_STATEMENTS
        or (first == "PRAGMA" and "=" in sql)
        or (first == "WITH" and _WRITE_WORD.search(sql))
    ):
        raise ValueError(f"not a read for Store.query: {sql[:40]!r} (write in Store.transaction())")
    return sql


@functools.lru_cache(maxsize=512)
def _select(table: str, columns: tuple[str, ...], tail: str) -> str:
    """``SELECT rowid, COLUMNS FROM TABLE TAIL`` for :meth:`Store.rows`, remembered per shape (robustctl's
    own names and tails). Raises ValueError when ``table`` or a column is not an identifier."""
    if not all(name.isidentifier() for name in (table, *columns)):
        raise ValueError(f"not a table and column names: {table!r}, {columns!r}")
    sql = f"SELECT rowid, {', '.join(columns)} FROM {table}"  # noqa: S608 - identifiers checked above
    return sql + " " + tail if tail else sql


def _bind(args: Sequence[Any]) -> Sequence[Any]:
    """The arguments of a statement as SQLite gets them: text through :func:`clean_text`.

    ``args`` itself when no argument needs cleaning (ASCII text is always clean): the common case costs
    one pass and no copy."""
    for a in args:
        if isinstance(a, str) and not a.isascii():
            return tuple(clean_text(x) if isinstance(x, str) else x for x in args)
    return args


class Store:
    """An open state store. Use :meth:`open`; close with :meth:`close` or a ``with`` block.

    Args:
        path: the SQLite file.
        conn: its one connection, made and set up by :meth:`open`.
        clock: UNIX seconds (tests pass a fake).
        who: ``user@host`` recorded in history and audit rows (None: :func:`whoami`).
    """

    def __init__(
        self,
        path: Path,
        conn: sqlite3.Connection,
        *,
        clock: Callable[[], float] = time.time,
        who: str | None = None,
    ) -> None:
        self.path = path
        self._conn = conn
        self.clock = clock
        self.who = who or whoami()
        self._lock_fd: int | None = None

    # --- opening ---------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: Path | None = None,
        *,
        clock: Callable[[], float] = time.time,
        who: str | None = None,
        busy_timeout_s: float = 30.0,
    ) -> Store:
        """Open (creating it and its directory when missing) and migrate the store at ``path``.

        Args:
            path: the file; ``None``: :func:`default_path`.
            clock: UNIX seconds (tests pass a fake).
            who: ``user@host`` recorded in history and audit rows (None: :func:`whoami`).
            busy_timeout_s: how long one SQLite statement waits for another writer.

        Returns:
            the open store, its schema at :data:`SCHEMA_VERSION`.

        Raises:
            StoreError: the path exists but is not a regular file (``/dev/null``, a FIFO, a
                directory), the file or directory cannot be created or written, is not a robustctl
                store, or comes from a newer robustctl (schema version above :data:`SCHEMA_VERSION`).
        """
        p = Path(path) if path is not None else default_path()
        try:
            mode = p.stat().st_mode
        except FileNotFoundError:
            mode = None
        except OSError as exc:
            raise StoreError(_describe(p, exc)) from None
        if mode is not None and not stat.S_ISREG(mode):
            # /dev/null, a FIFO, a directory: SQLite would create "<path>-journal"/"-wal" beside it.
            raise StoreError(f"{p}: not a regular file (the state store must be a file, e.g. state.db)")
        read_only = mode is not None and not (mode & 0o222)
        try:
            if not read_only:
                p.parent.mkdir(parents=True, exist_ok=True)
            uri = _uri(p) + ("?mode=ro" if read_only else "")
            conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout_s, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(_describe(p, exc)) from None
        store = cls(p, conn, clock=clock, who=who)
        try:
            store._setup(read_only)
        except (sqlite3.Error, UnicodeDecodeError) as exc:  # a damaged file: its bytes in SQLite's message
            conn.close()
            raise StoreError(_describe(p, exc)) from None
        return store

    def _setup(self, read_only: bool) -> None:
        c = self._conn
        if not read_only:
            c.execute("PRAGMA journal_mode=WAL")
            c.execute("PRAGMA synchronous=FULL")
        c.execute("PRAGMA foreign_keys=ON")
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        version = 0
        if "migrations" in tables:
            row = c.execute("SELECT MAX(version) FROM migrations").fetchone()
            version = int(row[0] or 0)
        elif tables - {"sqlite_sequence"}:
            raise sqlite3.DatabaseError("not a robustctl state store (unknown tables)")
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"schema version {version} is newer than this robustctl's {SCHEMA_VERSION}: upgrade robustctl"
            )
        if version == SCHEMA_VERSION:
            return
        if read_only:
            raise sqlite3.OperationalError("attempt to write a readonly database")
        with self.transaction():  # the schema is the store's own: run on its connection
            c.execute(
                "CREATE TABLE IF NOT EXISTS migrations("
                "version INTEGER PRIMARY KEY, applied_at REAL NOT NULL, description TEXT NOT NULL)"
            )
            for step in SCHEMA[version:]:
                for stmt in step.statements:
                    c.execute(stmt)
                c.execute(
                    "INSERT INTO migrations(version, applied_at, description) VALUES (?, ?, ?)",
                    (step.version, self.clock(), step.description),
                )

    def close(self) -> None:
        """Release the lock (if held) and close the connection."""
        self.unlock()
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """One write transaction (``BEGIN IMMEDIATE``): the one way anything writes the store, the store's
        own methods and the modules that keep their own tables in it (:data:`SCHEMA` names them)
        alike. It commits when the block ends and rolls back when the block raises; the connection's
        settings (WAL, ``synchronous=FULL``, foreign keys, the busy timeout) were set once by :meth:`open`.

        Yields:
            the :class:`Transaction`: run the block's statements with its ``execute``/``executemany``;
            reads inside the block (:meth:`rows`, :meth:`query`) see its writes.

        Raises:
            StoreError: SQLite failed (a read-only or full file, a constraint or trigger refused a
                write, a damaged page); the message names the file. Nothing of the block is kept.
        """
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            raise StoreError(_describe(self.path, exc)) from None
        try:
            yield Transaction(self._conn)
            self._conn.execute("COMMIT")
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")
            raise StoreError(_describe(self.path, exc)) from None
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")
            raise

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Every row of one read statement.

        Args:
            sql: a read (:data:`READ_STATEMENTS`), ``?`` for each argument.
            args: its arguments; text as :func:`clean_text` makes it, so a key with a lone surrogate
                finds the row written with it.

        Returns:
            the rows, as tuples of the columns' values (unchecked: :meth:`rows` checks them).

        Raises:
            ValueError: not a read (:data:`READ_STATEMENTS`): a programming error, never input.
            StoreError: the store cannot be read (a damaged page: undecodable text included).
        """
        try:
            return list(self._conn.execute(_read(sql), _bind(args)).fetchall())
        except (sqlite3.Error, UnicodeDecodeError) as exc:  # a damaged page: undecodable text
            raise StoreError(_describe(self.path, exc)) from None

    def rows(
        self, table: str, columns: Sequence[str], tail: str = "", args: Sequence[Any] = ()
    ) -> list[StoreRow]:
        """``SELECT rowid, COLUMNS FROM TABLE TAIL``, each row's fields checked as they are taken.

        Args:
            table: the table (robustctl's own name, never input).
            columns: the columns read (robustctl's own names).
            tail: the ``WHERE``/``ORDER BY``/``LIMIT`` part, with ``?`` for ``args``.
            args: the arguments of ``tail`` (text as :func:`clean_text` makes it).

        Returns:
            one :class:`StoreRow` per row, in the order of ``tail``.

        Raises:
            ValueError: ``table`` or a column is not an identifier (a programming error).
            StoreError: the store cannot be read.
        """
        sql = _select(table, tuple(columns), tail)
        return [
            StoreRow(self.path, table, r[0], dict(zip(columns, r[1:], strict=True)))
            for r in self.query(sql, args)
        ]

    @property
    def schema_version(self) -> int:
        """The file's schema version."""
        return int(self.query("SELECT MAX(version) FROM migrations")[0][0] or 0)

    # --- the action lock -------------------------------------------------------------------------

    @property
    def lock_path(self) -> Path:
        """The sidecar file the action lock is taken on."""
        return self.path.with_name(self.path.name + ".lock")

    def lock(self, action: str, *, timeout_s: float = 30.0, poll_s: float = 0.1) -> None:
        """Take the action lock, waiting up to ``timeout_s``; re-entrant within this Store.

        Args:
            action: the action taking it (written into the lock file for a waiting process's message).
            timeout_s: how long to wait for another holder, seconds.
            poll_s: how often to try again while waiting, seconds.

        Raises:
            StoreLocked: another process holds it past ``timeout_s`` (the message names it and says
                to retry or raise ``--lock-timeout``).
            StoreError: the lock file cannot be created.
        """
        if self._lock_fd is not None:
            return
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"{self.lock_path}: cannot create the lock file: {exc.strerror}") from None
        try:
            taken = flock_within(fd, self.lock_path, timeout_s, poll_s)
        except StoreError:
            os.close(fd)
            raise
        if not taken:
            holder = _read_holder(fd)
            os.close(fd)
            raise StoreLocked(
                f"another robustctl is acting on {self.path} ({holder}); waited {timeout_s:g} s. "
                "Retry when it finishes, or pass a longer --lock-timeout"
            )
        holder = json.dumps({"pid": os.getpid(), "who": self.who, "action": action, "since": self.clock()})
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.encode(), 0)
        self._lock_fd = fd

    def unlock(self) -> None:
        """Release the action lock (no-op when not held)."""
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._lock_fd, 0)
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    @property
    def locked(self) -> bool:
        """Whether this Store holds the action lock."""
        return self._lock_fd is not None

    # --- machines --------------------------------------------------------------------------------

    def machine(self, host: str) -> MachineRecord | None:
        """The host's row, or None when robustctl never changed it (it is in its inventory state)."""
        rows = self.rows("machines", _MACHINE_COLUMNS, "WHERE host=?", [host])
        return _machine(rows[0]) if rows else None

    def machines(self, states: Iterable[MachineState] | None = None) -> list[MachineRecord]:
        """Every recorded host (optionally only those in ``states``), by name."""
        out = [_machine(r) for r in self.rows("machines", _MACHINE_COLUMNS, "ORDER BY host")]
        if states is not None:
            wanted = set(states)
            out = [m for m in out if m.state in wanted]
        return out

    def set_state(
        self,
        host: str,
        state: MachineState,
        reason: str,
        *,
        readiness: Readiness | None = None,
        audit_id: int | None = None,
    ) -> bool:
        """Record ``host`` in ``state`` (and ``readiness`` when given) with a history row.

        Args:
            host: the machine.
            state: its new state.
            reason: why (one line; cut at :data:`MAX_TEXT`).
            readiness: its new readiness (None: kept).
            audit_id: the audit record of the action that changes it (None: none).

        Returns:
            False (and writes nothing) when the host already is in that state and readiness.

        Raises:
            StoreError: the store cannot be written.
        """
        with self.transaction() as c:
            row = c.execute("SELECT state, readiness FROM machines WHERE host=?", (host,)).fetchone()
            old_state, old_ready = (row[0], row[1]) if row else (None, Readiness.UNCHECKED.value)
            new_ready = readiness.value if readiness is not None else old_ready
            if old_state == state.value and new_ready == old_ready:
                return False
            self._write_state(c, host, old_state, state, new_ready, reason, audit_id)
        return True

    def transition(
        self,
        host: str,
        state: MachineState,
        reason: str,
        *,
        allowed_from: Iterable[MachineState],
        absent: MachineState = MachineState.ACTIVE,
        audit_id: int | None = None,
    ) -> tuple[MachineState, bool]:
        """Record ``host`` in ``state`` only if it now is in one of ``allowed_from`` (read and write in one
        transaction, so a concurrent ``evict`` is never overwritten). Readiness is kept.

        Args:
            host: the machine.
            state: its new state.
            reason: why (one line; cut at :data:`MAX_TEXT`).
            allowed_from: the states it may be changed from.
            absent: the state of a host without a row (its inventory state).
            audit_id: the audit record of the action that changes it (None: none).

        Returns:
            ``(state before, changed)``: ``changed`` is False (nothing written) when the host was not in
            ``allowed_from`` or already in ``state``.

        Raises:
            StoreError: the store cannot be written.
        """
        allowed = {s.value for s in allowed_from}
        with self.transaction() as c:
            row = c.execute("SELECT state, readiness FROM machines WHERE host=?", (host,)).fetchone()
            old_state, old_ready = (row[0], row[1]) if row else (None, Readiness.UNCHECKED.value)
            before = MachineState(old_state) if old_state is not None else absent
            if before.value not in allowed or before is state:
                return before, False
            self._write_state(c, host, old_state, state, old_ready, reason, audit_id)
        return before, True

    def _write_state(
        self,
        c: Transaction,
        host: str,
        old_state: str | None,
        state: MachineState,
        readiness: str,
        reason: str,
        audit_id: int | None,
    ) -> None:
        now = self.clock()
        c.execute(
            "INSERT INTO machines(host, state, readiness, reason, updated_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(host) DO UPDATE SET state=excluded.state, readiness=excluded.readiness, "
            "reason=excluded.reason, updated_at=excluded.updated_at",
            (host, state.value, readiness, store_text(reason), now),
        )
        c.execute(
            "INSERT INTO machine_history(host, at, from_state, to_state, readiness, reason, who, audit_id) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                host,
                now,
                old_state,
                state.value,
                readiness,
                store_text(reason),
                self.who,
                audit_id,
            ),
        )

    def history(self, host: str | None = None, *, since: float | None = None) -> list[HistoryRow]:
        """State changes, oldest first, optionally of one host and/or since a UNIX time.

        Args:
            host: only this machine's (None: every machine's).
            since: only those at or after this UNIX time (None: all).

        Returns:
            the changes, oldest first.

        Raises:
            StoreError: the store cannot be read, or a row read holds a bad field (:class:`StoreRow`).
        """
        cond: list[str] = []
        args: list[Any] = []
        if host is not None:
            cond.append("host=?")
            args.append(host)
        if since is not None:
            cond.append("at>=?")
            args.append(since)
        where = ("WHERE " + " AND ".join(cond) + " ") if cond else ""
        return [
            HistoryRow(
                host=r.text("host"),
                at=r.time("at"),
                from_state=r.opt_text("from_state"),
                to_state=r.text("to_state"),
                readiness=r.opt_text("readiness"),
                reason=r.text("reason"),
                who=r.text("who"),
                audit_id=r.opt_count("audit_id"),
            )
            for r in self.rows("machine_history", _HISTORY_COLUMNS, where + "ORDER BY id", args)
        ]

    def evictions_since(self, since: float) -> list[HistoryRow]:
        """Every transition into ``evicted`` at or after ``since`` (UNIX s), oldest first."""
        return [h for h in self.history(since=since) if h.to_state == MachineState.EVICTED.value]

    def first_record_at(self) -> float | None:
        """When the store recorded its first state change (the start of its eviction history).

        Returns:
            its UNIX time; None when no change is recorded.

        Raises:
            StoreError: the store cannot be read, or the earliest ``at`` is not a time (NULL and
                negative times sort first).
        """
        rows = self.rows("machine_history", ["at"], "ORDER BY at LIMIT 1")
        return rows[0].time("at") if rows else None

    # --- the embedded scheduler's node states ----------------------------------------------------

    def sched_state(self, host: str) -> str | None:
        """The ``inventory`` scheduler's state of ``host`` (None: never set)."""
        rows = self.query("SELECT state FROM sched_nodes WHERE host=?", [host])
        return str(rows[0][0]) if rows else None

    def set_sched_state(self, host: str, state: str, reason: str) -> None:
        """Set the ``inventory`` scheduler's state of ``host``. Raises StoreError."""
        with self.transaction() as c:
            c.execute(
                "INSERT INTO sched_nodes(host, state, reason, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(host) DO UPDATE SET state=excluded.state, reason=excluded.reason, "
                "updated_at=excluded.updated_at",
                (host, store_text(state), store_text(reason), self.clock()),
            )

    # --- job host lists --------------------------------------------------------------------------

    def job_hosts(self, job: str) -> list[str] | None:
        """The job's machines in rank order as robustctl last set them (None: never set)."""
        rows = self.query("SELECT host FROM job_hosts WHERE job=? ORDER BY idx", [job])
        return [str(r[0]) for r in rows] or None

    def set_job_hosts(self, job: str, hosts: Sequence[str]) -> None:
        """Replace the job's host list. Raises StoreError."""
        with self.transaction() as c:
            c.execute("DELETE FROM job_hosts WHERE job=?", (job,))
            c.executemany(
                "INSERT INTO job_hosts(job, idx, host) VALUES (?, ?, ?)",
                [(job, i, h) for i, h in enumerate(hosts)],
            )

    # --- audit -----------------------------------------------------------------------------------

    def audit_begin(
        self,
        action: str,
        targets: Sequence[str],
        reason: str,
        *,
        plan: Mapping[str, Any] | None = None,
        evidence: str | None = None,
        forced: bool = False,
        status: str = "started",
        message: str = "",
    ) -> int:
        """Append an audit record (before anything is applied) and return its id.

        A record of an action about to apply (status ``started``) is then checked
        (:meth:`check_audit`): the action goes ahead only on a store that can hold its record.

        Args:
            action: the action (``evict``, ``return``, ...).
            targets: the machines it acts on.
            reason: why (cut at :data:`MAX_TEXT`).
            plan: the plan's JSON document (None: none).
            evidence: the report file it acts on (None: none).
            forced: whether the rails were overridden.
            status: the record's status (an :class:`AuditStatus` value; ``started`` is checked).
            message: its outcome line.

        Returns:
            the record's id.

        Raises:
            StoreError: the store cannot be written, or fails the check (the record is then marked
                ``failed``, "not applied", as far as the store allows).
        """
        with self.transaction() as c:
            cur = c.execute(
                "INSERT INTO audit(started_at, who, pid, action, targets, reason, evidence, plan, status, message, "
                "forced) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    self.clock(),
                    self.who,
                    os.getpid(),
                    store_text(action),
                    json.dumps(list(targets)),
                    store_text(reason),
                    store_text(evidence) if evidence is not None else None,
                    json.dumps(plan, sort_keys=True) if plan is not None else None,
                    store_text(status),
                    store_text(message),
                    int(forced),
                ),
            )
            audit_id = int(cur.lastrowid or 0)
        if status == AuditStatus.STARTED.value:
            try:
                self.check_audit(audit_id)
            except StoreError as exc:
                raise self._refuse_unverified(audit_id, exc) from None
        return audit_id

    def audit_step_start(self, audit_id: int, index: int, description: str) -> None:
        """Record step ``index`` as ``running`` before it runs. Raises StoreError."""
        with self.transaction() as c:
            c.execute(
                "INSERT INTO audit_steps(audit_id, idx, description, status, started_at) VALUES (?, ?, ?, ?, ?)",
                (audit_id, index, store_text(description), "running", self.clock()),
            )

    def audit_step_end(self, audit_id: int, index: int, status: str, detail: str) -> None:
        """Record step ``index``'s outcome (``done``, ``noop``, ``failed``). Raises StoreError."""
        with self.transaction() as c:
            c.execute(
                "UPDATE audit_steps SET status=?, detail=?, finished_at=? WHERE audit_id=? AND idx=?",
                (store_text(status), store_text(detail), self.clock(), audit_id, index),
            )

    def audit_finish(self, audit_id: int, status: str, message: str) -> None:
        """Record the action's final status (an :class:`AuditStatus` value). Raises StoreError."""
        with self.transaction() as c:
            c.execute(
                "UPDATE audit SET status=?, message=?, finished_at=? WHERE id=?",
                (store_text(status), store_text(message), self.clock(), audit_id),
            )

    def audit(self, *, since: float | None = None, audit_id: int | None = None) -> list[AuditRecord]:
        """Audit records, oldest first, with their steps; optionally since a UNIX time or one id.

        Args:
            since: only those started at or after this UNIX time (None: all).
            audit_id: only this record (wins over ``since``).

        Returns:
            the records, each with its steps.

        Raises:
            StoreError: the store cannot be read, or a record read holds a bad field (a time out of
                range, text in a number column, a plan that is not JSON: :class:`StoreRow`).
        """
        tail: str = ""
        args: list[float] = []
        if audit_id is not None:
            tail, args = "WHERE id=? ", [audit_id]
        elif since is not None:
            tail, args = "WHERE started_at>=? ", [since]
        rows = self.rows("audit", _AUDIT_COLUMNS, tail + "ORDER BY id", args)
        steps: dict[int, list[AuditStep]] = {}
        if rows:
            first = rows[0].count("id")
            for s in self.rows(
                "audit_steps", _STEP_COLUMNS, "WHERE audit_id>=? ORDER BY audit_id, idx", [first]
            ):
                steps.setdefault(s.count("audit_id"), []).append(_audit_step(s))
        return [_audit_record(r, steps.get(r.count("id"), ())) for r in rows]

    def last_audit_id(self) -> int:
        """The id of the newest audit record.

        Returns:
            its id; 0 when the log is empty.

        Raises:
            StoreError: the store cannot be read.
        """
        return int(self.query("SELECT MAX(id) FROM audit")[0][0] or 0)

    def audit_ids(self, *, after: int, pid: int) -> list[int]:
        """The audit records one process wrote after a given record (what one playbook step wrote:
        :func:`robustctl.playbooks.journal.step_audits`).

        Args:
            after: the last audit id before them (records with a greater id are taken).
            pid: the process that wrote them.

        Returns:
            their ids, oldest first.

        Raises:
            StoreError: the store cannot be read.
        """
        return [
            int(r[0])
            for r in self.query("SELECT id FROM audit WHERE id>? AND pid=? ORDER BY id", [after, pid])
        ]

    def check_audit(self, audit_id: int) -> None:
        """Check that the store can hold an action's audit record: SQLite finds no damage in the tables
        an action writes (``PRAGMA quick_check`` of each of :data:`ACTION_TABLES` and its indexes), and
        the whole audit log reads back as ``robustctl audit`` reads it, record ``audit_id`` included.

        Cost: the action tables and the audit log are read once (rows per action, not per sweep).

        Args:
            audit_id: the record just written.

        Raises:
            StoreError: damage found, a record unreadable, or ``audit_id`` missing; the message names
                the file and what failed.
        """
        present = {str(r[0]) for r in self.query("SELECT name FROM sqlite_master WHERE type='table'")}
        for table in ACTION_TABLES:
            if table not in present:
                continue
            found = [str(r[0]) for r in self.query(f"PRAGMA quick_check({table})")]
            if found != ["ok"]:
                damage = _flat(" ".join(found))
                raise StoreError(
                    f"{self.path}: SQLite finds the table {table} damaged ({damage}); "
                    "repair the file (sqlite3 .recover) or pass --state to use another file"
                )
        if audit_id not in {r.id for r in self.audit()}:
            raise StoreError(f"{self.path}: audit record {audit_id} was written but cannot be read back")

    def _refuse_unverified(self, audit_id: int, exc: StoreError) -> StoreError:
        """Mark record ``audit_id`` failed (best effort: the store is damaged) and return the error that
        stops the action."""
        with contextlib.suppress(StoreError):
            self.audit_finish(
                audit_id, AuditStatus.FAILED.value, f"not applied: the state store failed its check: {exc}"
            )
        return StoreError(f"{exc} (nothing was applied)")


def journal_query(store: Store, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Old name of :meth:`Store.query`, kept for its callers: use ``store.query(sql, args)``.

    Args:
        store: the open store.
        sql: a read (:data:`READ_STATEMENTS`).
        args: its arguments.

    Returns:
        the rows, as :meth:`Store.query` returns them.
    """
    return store.query(sql, args)


def _uri(path: Path) -> str:
    """The SQLite URI of ``path``: ``file:`` and the absolute path percent-encoded (``?``, ``#``, ``%``
    in a file name stay part of the name; https://www.sqlite.org/uri.html)."""
    return "file:" + urllib.parse.quote(os.fsencode(path.absolute()), safe="/")


def clean_text(text: str) -> str:
    """``text`` as the store keys rows by it (a host, a job name): each lone surrogate (undecodable
    bytes carried by ``surrogateescape``) as its ``\\uXXXX`` escape, since SQLite text
    is UTF-8; any other text unchanged, of any length (a key is never cut, or two keys could become one).
    Every text argument of a statement goes through it (:class:`Transaction`, :meth:`Store.query`), so
    no writer calls it for its key columns."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def store_text(text: str) -> str:
    """``text`` as the store keeps free text (a reason, a note, a message): :func:`clean_text`, then cut
    at :data:`MAX_TEXT` characters with ``... [cut: N characters]`` appended, N the cleaned length.
    Writers of their own tables in the store use it for such columns, as :class:`Store` does."""
    text = clean_text(text)
    if len(text) > MAX_TEXT:
        return text[:MAX_TEXT] + f"... [cut: {len(text)} characters]"
    return text


_MACHINE_COLUMNS = ("host", "state", "readiness", "reason", "updated_at")
_HISTORY_COLUMNS = ("host", "at", "from_state", "to_state", "readiness", "reason", "who", "audit_id")
_AUDIT_COLUMNS = (
    "id", "started_at", "finished_at", "who", "pid", "action", "targets", "reason", "evidence", "plan",
    "status", "message", "forced",
)  # fmt: skip
_STEP_COLUMNS = ("audit_id", "idx", "description", "status", "detail", "started_at", "finished_at")


def _machine(r: StoreRow) -> MachineRecord:
    return MachineRecord(
        r.text("host"),
        r.choice("state", MachineState),
        r.choice("readiness", Readiness),
        r.text("reason"),
        r.time("updated_at"),
    )


def _audit_record(r: StoreRow, steps: Sequence[AuditStep]) -> AuditRecord:
    targets = r.json("targets")
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise r.error("targets", "not a JSON list of host names")
    plan = r.json("plan") if r.values["plan"] != "" else None  # '': no plan, as NULL
    if plan is not None and not isinstance(plan, dict):
        raise r.error("plan", "not a JSON object")
    return AuditRecord(
        id=r.count("id"),
        started_at=r.time("started_at"),
        finished_at=r.opt_time("finished_at"),
        who=r.text("who"),
        pid=r.count("pid", most=PID_MAX),
        action=r.text("action"),
        targets=tuple(targets),
        reason=r.text("reason"),
        evidence=r.opt_text("evidence"),
        plan=plan,
        status=r.text("status"),
        message=r.text("message"),
        forced=bool(r.count("forced")),
        steps=tuple(steps),
    )


def _audit_step(r: StoreRow) -> AuditStep:
    return AuditStep(
        r.count("idx"),
        r.text("description"),
        r.text("status"),
        r.text("detail"),
        r.time("started_at"),
        r.opt_time("finished_at"),
    )


def flock_within(fd: int, path: Path, timeout_s: float, poll_s: float) -> bool:
    """Take an exclusive ``fcntl`` lock on ``fd``, trying again every ``poll_s`` for ``timeout_s``.

    The one locking loop of the house: the store's action lock and :func:`robustctl.pidlock.held_lock`
    (sweep, watch and playbook locks) both take their lock here.

    Args:
        fd: an open descriptor of the lock file.
        path: the lock file, for messages.
        timeout_s: how long to wait for another holder, seconds (0: one try).
        poll_s: seconds between tries.

    Returns:
        True when the lock is taken; False when another process still held it at the deadline.

    Raises:
        StoreError: the lock cannot be taken for another reason (e.g. the file system refuses locks).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise StoreError(f"{path}: cannot lock: {exc.strerror}") from None
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_s)


def lock_holder(fd: int) -> dict[str, Any]:
    """What a lock's holder wrote into its lock file: one small JSON object (at most
    :data:`LOCK_HOLDER_BYTES` read); empty when the file is empty, unreadable or not an object.

    Args:
        fd: an open descriptor of the lock file.

    Returns:
        The object's fields, unchecked: callers validate what they show.
    """
    try:
        data = json.loads(os.pread(fd, LOCK_HOLDER_BYTES, 0).decode() or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_holder(fd: int) -> str:
    data = lock_holder(fd)
    if not data:
        return "holder unknown"
    since = data.get("since")
    ago = ""
    if isinstance(since, (int, float)) and not isinstance(since, bool) and abs(since) < 1e12:
        ago = f", for {time.time() - float(since):.0f} s"
    return f"pid {data.get('pid')} of {data.get('who')}, {data.get('action')}{ago}"


def _flat(text: str) -> str:
    """``text`` on one line (each run of whitespace, newlines included, one space), cut at
    :data:`SHOWN_DAMAGE` characters."""
    line = " ".join(text.split())
    return line if len(line) <= SHOWN_DAMAGE else line[: SHOWN_DAMAGE - 1] + "…"


def _describe(path: Path, exc: BaseException) -> str:
    text = _flat(str(exc))
    low = text.lower()
    if "readonly" in low or "read-only" in low or isinstance(exc, PermissionError):
        hint = "the state store is read-only; fix its permissions or pass --state to use another file"
    elif "full" in low or getattr(exc, "errno", None) == errno.ENOSPC:
        hint = "the state store's disk or database is full; free space or pass --state"
    elif "not a database" in low or "not a robustctl" in low or "malformed" in low:
        hint = "not a robustctl state store; pass --state to use another file"
    elif "unable to open" in low:
        hint = "cannot open the state store; check the directory exists and is writable, or pass --state"
    else:
        hint = "state store error"
    return f"{path}: {hint} ({text})"
