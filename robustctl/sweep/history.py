"""Sweep history in the state store: state changes per (host, check) plus per-host counters.

Compact by design: a sweep that finds a host as it was last time writes no row per check, only
updates ``check_state.last_seen``/``streak`` and the host's counters. What is kept:

* ``check_state``: one row per (host, check): the status now, ``since`` (start of the current run of
  that status), ``streak`` (consecutive observations of it), the detail line of the worst result, and
  ``recent_bad``: the times of the last :data:`RECENT_BAD` CRITICAL observations (what the flap rule of
  :mod:`robustctl.sweep.policy` counts).
* ``check_changes``: one row per change of a check's status (from → to, at, detail cut at
  :data:`MAX_DETAIL` characters, source ``sweep`` or ``diagnose``). The host's own verdict is the pseudo
  check :data:`HOST_CHECK`: its changes into ``critical`` are the host's *failures* (lemons count them).
  A sweep records the verdict after the debounce policy (:func:`robustctl.sweep.policy.record_sweep`):
  ``critical`` only when the policy names the host (a confirmed finding), ``warning`` while its
  CRITICAL findings are pending (a NIC that flapped once, a GPU hot for a minute); a ``diagnose`` run
  records its own verdict (it names suspects directly). So a failure is a named host, never a flap.
* ``host_counters``: observations, failures, unknown outcomes, first and last seen, last status.
* ``sweeps``: one row per sweep (start, end, hosts, status, clock skew).

Size: 2,000 hosts × 15 checks is 30,000 ``check_state`` rows whatever the number of sweeps; a year
of 5-minute sweeps adds 105,120 ``sweeps`` rows and one ``check_changes`` row per state change
(``bench/`` measures the file and the ``history`` query on such a year). Rows older than the
retention (``sweep.retention_days``) are deleted by :func:`prune`.

Time: every row takes the store's clock. A clock that went backwards since the last recorded sweep
(NTP step, a VM restored from a snapshot) must not put new rows before old ones: the sweep is
recorded at the last recorded time instead, and :attr:`Recorded.clock_skew_s` says by how much the
clock was behind (the caller prints one warning line).

Storage: the four tables are created by the store's schema (:data:`robustctl.store.SCHEMA`, version 4);
this module keeps its own statements for them and runs them through the store's API only
(:meth:`~robustctl.store.Store.transaction` to write, :meth:`~robustctl.store.Store.rows` to read).

Reading: every field is checked as it is read (:class:`robustctl.store.StoreRow`): a time must be a
finite number in [:data:`robustctl.store.TIME_MIN`, :data:`robustctl.store.TIME_MAX`), a count an
integer, ``recent_bad`` a JSON list of times. A row that fails (text in ``at``, ``1e300`` in
``last_seen``) stops the reader with a :class:`~robustctl.store.StoreError` naming the table, the row
id and the column (exit 78): ``history``, ``lemons`` and a sweep would otherwise show, count or date
new rows after a time nobody recorded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from robustctl.models import Outcome, Status

if TYPE_CHECKING:
    from pathlib import Path

    from robustctl.models import HostReport, RunReport
    from robustctl.store import Store, StoreRow, Transaction

__all__ = [
    "HOST_CHECK",
    "MAX_DETAIL",
    "RECENT_BAD",
    "CheckChange",
    "CheckState",
    "HostCounters",
    "HostHistory",
    "Observation",
    "Recorded",
    "SweepRow",
    "host_history",
    "last_sweeps",
    "observations_of",
    "prune",
    "record",
    "record_report",
]

HOST_CHECK = "(host)"
"""The pseudo check holding a host's own verdict: a diagnose run's (the worst of its checks and its
outcome), or a sweep's after the debounce policy (critical only when named, see the module docstring)."""
MAX_DETAIL = 200
"""Longest detail line kept per change or state, in characters (one human line; the full report is
the command's ``--json``)."""
_FEW = 64
"""Up to this many hosts, state and counter reads look each host up by its key; more read the table once."""
RECENT_BAD = 16
"""CRITICAL observation times kept per (host, check) for the flap rule (``sweep.flap_count`` ≤ 16)."""


@dataclass(frozen=True)
class Observation:
    """One check of one host as one run saw it: the worst of its results and that result's line."""

    host: str
    check: str
    status: Status
    detail: str


@dataclass(frozen=True)
class CheckState:
    """A row of ``check_state``: ``status`` since ``since`` (UNIX s), ``streak`` observations in a row."""

    host: str
    check: str
    status: str
    since: float
    last_seen: float
    streak: int
    detail: str
    recent_bad: tuple[float, ...]


@dataclass(frozen=True)
class CheckChange:
    """A row of ``check_changes``: ``check`` of ``host`` went ``from_status`` → ``to_status`` at ``at``."""

    host: str
    check: str
    at: float
    from_status: str | None
    to_status: str
    detail: str
    source: str


@dataclass(frozen=True)
class HostCounters:
    """A row of ``host_counters``: observations (``seen``), failures (changes of the host's verdict into
    CRITICAL: named by the sweep policy, or critical in a diagnose run), unknown outcomes, first/last
    seen (UNIX s) and the last verdict."""

    host: str
    seen: int
    failures: int
    unknowns: int
    first_seen: float
    last_seen: float
    last_status: str


@dataclass(frozen=True)
class SweepRow:
    """A row of ``sweeps``: when, how long, how many hosts, the worst status, the clock skew found."""

    id: int
    started_at: float
    finished_at: float
    source: str
    hosts: int
    status: str
    clock_skew_s: float

    @property
    def duration_s(self) -> float:
        """Wall seconds of the sweep."""
        return max(0.0, self.finished_at - self.started_at)


@dataclass(frozen=True)
class Recorded:
    """What :func:`record` wrote.

    Attributes:
        at: the time the observations were recorded at (UNIX s). changes: state changes written.
        clock_skew_s: how far the clock was behind the last recorded time (0: it was not).
        sweep_id: the ``sweeps`` row (None for a diagnose run).
    """

    at: float
    changes: tuple[CheckChange, ...]
    clock_skew_s: float = 0.0
    sweep_id: int | None = None


@dataclass(frozen=True)
class HostHistory:
    """One host's history: its counters (None: never seen), its checks now, its changes since a time."""

    host: str
    counters: HostCounters | None
    checks: tuple[CheckState, ...]
    changes: tuple[CheckChange, ...]


def _cut(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_DETAIL else line[: MAX_DETAIL - 1] + "…"


def observations_of(report: HostReport) -> list[Observation]:
    """A host report as observations: one per check name (the worst result, its summary and device),
    plus :data:`HOST_CHECK`. A host that could not be checked yields only :data:`HOST_CHECK` (UNKNOWN,
    its error): checks that did not run are not observed, so they keep their last state."""
    worst: dict[str, tuple[Status, str]] = {}
    for c in report.checks:
        if c.status is Status.SKIPPED:
            continue
        line = f"{c.device}: {c.summary}" if c.device else c.summary
        cur = worst.get(c.name)
        if cur is None or c.status.severity > cur[0].severity:
            worst[c.name] = (c.status, line)
    host_line = report.error or next(
        (line for s, line in worst.values() if s is report.status), report.status.value
    )
    out = [Observation(report.host, HOST_CHECK, report.status, host_line)]
    if report.outcome is Outcome.OK or worst:
        out += [Observation(report.host, name, s, line) for name, (s, line) in sorted(worst.items())]
    return out


def _last_time(store: Store) -> float:
    # The newest sweep row holds the latest time: record() never writes a time before the last one.
    # (By id through the primary key: MAX(finished_at) would scan a year's 105,120 rows each sweep.)
    # Each time is checked (StoreRow): a hand-edited 1e300 would otherwise date every later row there.
    # The greatest last_seen is the row read: text sorts after every number, so it is the one found.
    last = 0.0
    for r in store.rows("sweeps", ["finished_at"], "ORDER BY id DESC LIMIT 1"):
        last = r.time("finished_at")
    for r in store.rows("host_counters", ["last_seen"], "ORDER BY last_seen DESC LIMIT 1"):
        last = max(last, r.time("last_seen"))
    return last


def record(
    store: Store,
    observations: Iterable[Observation],
    *,
    source: str,
    started_at: float | None = None,
    sweep: bool = True,
    hosts_swept: int | None = None,
    host_verdict: Callable[[float, list[Observation]], list[Observation]] | None = None,
) -> Recorded:
    """Record one run's observations (one transaction).

    Args:
        store: the open store (its clock dates the rows).
        observations: per (host, check); a host's :data:`HOST_CHECK` observation counts it as seen.
        source: ``"sweep"`` or ``"diagnose"``.
        started_at: when the run started (UNIX s; default now).
        sweep: also write a ``sweeps`` row.
        hosts_swept: the host count of the ``sweeps`` row when ``observations`` carry only the hosts
            whose checks may have changed (a replay of a simulated history, ``bench/sweep_history.py``:
            the hosts left out keep their rows as they are, and the row's status is the worst of
            the observations passed); None: the hosts observed.
        host_verdict: called inside the transaction, after the checks' rows are written, with the
            time ``at`` and the :data:`HOST_CHECK` observations; returns the host observations to
            record instead (the sweep's debounced verdicts, :func:`robustctl.sweep.policy.record_sweep`).
            None: the host observations as given.

    Returns:
        :class:`Recorded`; ``clock_skew_s`` > 0 when the clock went backwards (rows are then written at
        the last recorded time, so the history stays in order).

    Raises:
        StoreError: the store cannot be written.
    """
    obs = list(observations)
    at, start, skew = _record_times(store, started_at)
    with store.transaction() as c:
        writer = _Writer(store, c, at, source)
        if host_verdict is None:
            for o in obs:
                writer.write(o)
        else:
            obs = _write_with_verdict(writer, obs, host_verdict)
        sweep_id = _write_sweep(c, obs, start, at, source, hosts_swept, skew) if sweep else None
    return Recorded(at, tuple(writer.changes), skew, sweep_id)


def _record_times(store: Store, started_at: float | None) -> tuple[float, float, float]:
    """``(at, start, skew)`` of a run recorded now: ``at`` the store's clock, or the last recorded time
    when the clock is behind it (by ``skew`` s); ``start`` the run's start, at most ``at``."""
    now = store.clock()
    last = _last_time(store)
    skew = max(0.0, last - now)
    at = max(now, last)
    start = min(at, started_at if started_at is not None and started_at <= at else at)
    return at, start, skew


class _Writer:
    """Writes observations at one time ``at`` in one open transaction; keeps the changes it wrote."""

    def __init__(self, store: Store, tx: Transaction, at: float, source: str) -> None:
        self.store, self.tx, self.at, self.source = store, tx, at, source
        self.changes: list[CheckChange] = []

    def write(self, o: Observation) -> None:
        """Write ``o``'s ``check_state`` row (and a ``check_changes`` row when its status changed);
        for :data:`HOST_CHECK`, the host's counters too."""
        before = self._write_check(o)
        if o.check == HOST_CHECK:
            self._count_host(o, before)

    def _write_check(self, o: Observation) -> str | None:
        """Write the check's state (and change); return its status before (None: never seen)."""
        at, c = self.at, self.tx
        detail = _cut(o.detail)
        found = self.store.rows(
            "check_state", ["status", "recent_bad"], "WHERE host=? AND check_name=?", [o.host, o.check]
        )
        before = found[0].text("status") if found else None
        bad = list(found[0].times("recent_bad")) if found else []
        if o.status is Status.CRITICAL:
            bad = [*bad, at][-RECENT_BAD:]
        if before is not None and before == o.status.value:
            c.execute(
                "UPDATE check_state SET last_seen=?, streak=streak+1, detail=?, recent_bad=? "
                "WHERE host=? AND check_name=?",
                (at, detail, json.dumps(bad), o.host, o.check),
            )
            return before
        self.changes.append(CheckChange(o.host, o.check, at, before, o.status.value, detail, self.source))
        c.execute(
            "INSERT INTO check_state(host, check_name, status, since, last_seen, streak, detail, recent_bad) "
            "VALUES (?, ?, ?, ?, ?, 1, ?, ?) ON CONFLICT(host, check_name) DO UPDATE SET "
            "status=excluded.status, since=excluded.since, last_seen=excluded.last_seen, streak=1, "
            "detail=excluded.detail, recent_bad=excluded.recent_bad",
            (o.host, o.check, o.status.value, at, at, detail, json.dumps(bad)),
        )
        c.execute(
            "INSERT INTO check_changes(host, check_name, at, from_status, to_status, detail, source) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (o.host, o.check, at, before, o.status.value, detail, self.source),
        )
        return before

    def _count_host(self, o: Observation, before: str | None) -> None:
        """Count a host observation in ``host_counters`` (a failure: a change into CRITICAL)."""
        failed = int(o.status is Status.CRITICAL and before != Status.CRITICAL.value)
        self.tx.execute(
            "INSERT INTO host_counters(host, seen, failures, unknowns, first_seen, last_seen, last_status) "
            "VALUES (?, 1, ?, ?, ?, ?, ?) ON CONFLICT(host) DO UPDATE SET seen=seen+1, "
            "failures=failures+excluded.failures, unknowns=unknowns+excluded.unknowns, "
            "last_seen=excluded.last_seen, last_status=excluded.last_status",
            (o.host, failed, int(o.status is Status.UNKNOWN), self.at, self.at, o.status.value),
        )


def _write_with_verdict(
    writer: _Writer,
    obs: list[Observation],
    host_verdict: Callable[[float, list[Observation]], list[Observation]],
) -> list[Observation]:
    """Write the checks first (the verdict reads their states: this transaction's rows), then the host
    observations ``host_verdict`` returns; the observations as recorded."""
    for o in obs:
        if o.check != HOST_CHECK:
            writer.write(o)
    recorded = [
        *(o for o in obs if o.check != HOST_CHECK),
        *host_verdict(writer.at, [o for o in obs if o.check == HOST_CHECK]),
    ]
    for o in recorded:
        if o.check == HOST_CHECK:
            writer.write(o)
    return recorded


def _write_sweep(
    c: Transaction,
    obs: list[Observation],
    start: float,
    at: float,
    source: str,
    hosts_swept: int | None,
    skew: float,
) -> int:
    """Write the run's ``sweeps`` row (its hosts: the :data:`HOST_CHECK` observations, or ``hosts_swept``;
    its status the worst of theirs) and return its id."""
    hosts = [o for o in obs if o.check == HOST_CHECK]
    worst = Status.worst(o.status for o in hosts).value
    cur = c.execute(
        "INSERT INTO sweeps(started_at, finished_at, source, hosts, status, clock_skew_s) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (start, at, source, len(hosts) if hosts_swept is None else hosts_swept, worst, skew),
    )
    return int(cur.lastrowid or 0)


def record_report(path: Path | None, report: RunReport, *, source: str) -> str | None:
    """Record a diagnose report's hosts in the history of the store at ``path`` (None: the default),
    best effort: returns the error line when the store cannot be opened or written, else None."""
    from robustctl.store import Store, StoreError, default_path

    try:
        with Store.open(path if path is not None else default_path()) as store:
            record(store, [o for h in report.hosts for o in observations_of(h)], source=source, sweep=False)
    except (StoreError, OSError) as exc:
        return str(exc)
    return None


def prune(store: Store, before: float) -> int:
    """Delete changes and sweeps (by start) older than ``before`` (UNIX s); returns the rows deleted.

    ``check_state`` and ``host_counters`` (the present) are kept. Raises StoreError."""
    with store.transaction() as c:
        n = c.execute("DELETE FROM check_changes WHERE at<?", (before,)).rowcount
        n += c.execute("DELETE FROM sweeps WHERE started_at<?", (before,)).rowcount  # indexed
    return int(n)


_STATE_COLUMNS = ("host", "check_name", "status", "since", "last_seen", "streak", "detail", "recent_bad")
_CHANGE_COLUMNS = ("host", "check_name", "at", "from_status", "to_status", "detail", "source")
_COUNTER_COLUMNS = ("host", "seen", "failures", "unknowns", "first_seen", "last_seen", "last_status")
_SWEEP_COLUMNS = ("id", "started_at", "finished_at", "source", "hosts", "status", "clock_skew_s")


def _state(r: StoreRow) -> CheckState:
    return CheckState(
        r.text("host"),
        r.text("check_name"),
        r.text("status"),
        r.time("since"),
        r.time("last_seen"),
        r.count("streak"),
        r.text("detail"),
        r.times("recent_bad"),
    )


def _by_host(
    store: Store, table: str, columns: tuple[str, ...], hosts: Iterable[str] | None
) -> list[StoreRow]:
    """The rows of ``table`` of ``hosts`` (None: all): up to :data:`_FEW` hosts by key, else one scan."""
    wanted = set(hosts) if hosts is not None else None
    if wanted is not None and len(wanted) <= _FEW:
        return [r for h in sorted(wanted) for r in store.rows(table, columns, "WHERE host=?", [h])]
    rows = store.rows(table, columns)
    return [r for r in rows if wanted is None or r.values["host"] in wanted]


def check_states(store: Store, hosts: Iterable[str] | None = None) -> dict[tuple[str, str], CheckState]:
    """``check_state`` rows keyed by (host, check), of ``hosts`` (None: all).

    Args:
        store: the open store.
        hosts: the hosts whose rows are read (None: every host's).

    Returns:
        the states by ``(host, check)``.

    Raises:
        StoreError: the store cannot be read, or a row read holds a bad field (a time out of range,
            text in a number column: :class:`~robustctl.store.StoreRow`).
    """
    states = [_state(r) for r in _by_host(store, "check_state", _STATE_COLUMNS, hosts)]
    return {(s.host, s.check): s for s in states}


def _change(r: StoreRow) -> CheckChange:
    return CheckChange(
        r.text("host"),
        r.text("check_name"),
        r.time("at"),
        r.opt_text("from_status"),
        r.text("to_status"),
        r.text("detail"),
        r.text("source"),
    )


def changes(
    store: Store, *, host: str | None = None, since: float | None = None, limit: int = 10_000
) -> list[CheckChange]:
    """State changes, oldest first, of ``host`` (None: all) at or after ``since``; the newest
    ``limit`` of them.

    Args:
        store: the open store.
        host: only this host's (None: every host's).
        since: only those at or after this UNIX time (None: all).
        limit: at most this many (the newest).

    Returns:
        the changes, oldest first.

    Raises:
        StoreError: the store cannot be read, or a row read holds a bad field.
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
    rows = store.rows("check_changes", _CHANGE_COLUMNS, where + "ORDER BY id DESC LIMIT ?", [*args, limit])
    return [_change(r) for r in reversed(rows)]


def counters(store: Store, hosts: Iterable[str] | None = None) -> dict[str, HostCounters]:
    """``host_counters`` rows by host (None: all).

    Args:
        store: the open store.
        hosts: the hosts whose rows are read (None: every host's).

    Returns:
        the counters by host (a host never seen has none).

    Raises:
        StoreError: the store cannot be read, or a row read holds a bad field.
    """
    out: dict[str, HostCounters] = {}
    for r in _by_host(store, "host_counters", _COUNTER_COLUMNS, hosts):
        c = HostCounters(
            r.text("host"),
            r.count("seen"),
            r.count("failures"),
            r.count("unknowns"),
            r.time("first_seen"),
            r.time("last_seen"),
            r.text("last_status"),
        )
        out[c.host] = c
    return out


def host_history(store: Store, host: str, *, since: float | None = None, limit: int = 10_000) -> HostHistory:
    """``host``'s counters, current check states and changes since ``since``.

    Args:
        store: the open store.
        host: the host.
        since: its changes at or after this UNIX time (None: all).
        limit: at most this many changes (the newest).

    Returns:
        its history (the host's own verdict first among its checks).

    Raises:
        StoreError: the store cannot be read, or a row read holds a bad field.
    """
    states = sorted(check_states(store, [host]).values(), key=lambda s: (s.check != HOST_CHECK, s.check))
    return HostHistory(
        host,
        counters(store, [host]).get(host),
        tuple(states),
        tuple(changes(store, host=host, since=since, limit=limit)),
    )


def last_sweeps(store: Store, n: int = 1) -> list[SweepRow]:
    """The newest ``n`` sweeps, newest first.

    Args:
        store: the open store.
        n: how many.

    Returns:
        the ``sweeps`` rows of source ``sweep``, newest first.

    Raises:
        StoreError: the store cannot be read, or a row read holds a bad field.
    """
    return [
        SweepRow(
            r.count("id"),
            r.time("started_at"),
            r.time("finished_at"),
            r.text("source"),
            r.count("hosts"),
            r.text("status"),
            r.time("clock_skew_s"),  # a duration, held to the same range
        )
        for r in store.rows("sweeps", _SWEEP_COLUMNS, "WHERE source='sweep' ORDER BY id DESC LIMIT ?", [n])
    ]


def failures_since(store: Store, since: float) -> dict[str, list[CheckChange]]:
    """Each host's failures (changes of :data:`HOST_CHECK` into CRITICAL: named by a sweep's policy or
    critical in a diagnose run) at or after ``since``.

    Args:
        store: the open store.
        since: the UNIX time they are counted from.

    Returns:
        each failing host's failures, oldest first.

    Raises:
        StoreError: the store cannot be read, or a row read holds a bad field.
    """
    rows = store.rows(
        "check_changes",
        _CHANGE_COLUMNS,
        "WHERE check_name=? AND to_status=? AND at>=? ORDER BY id",
        [HOST_CHECK, Status.CRITICAL.value, since],
    )
    out: dict[str, list[CheckChange]] = {}
    for r in rows:
        ch = _change(r)
        out.setdefault(ch.host, []).append(ch)
    return out


def status_map(states: Mapping[tuple[str, str], CheckState]) -> dict[str, dict[str, str]]:
    """``{host: {check: status}}`` of ``check_state`` rows (the HTML grid and the textfile)."""
    out: dict[str, dict[str, str]] = {}
    for (host, check), st in states.items():
        out.setdefault(host, {})[check] = st.status
    return out
