"""The store's record of a job's code: changes (staged updates, rollbacks) and versions (what ran).

**Code changes** (table ``code_changes``): one row per ``update stage`` or ``rollback``: the job, the
ref as given and the commit it named on every host, the version it replaces (``from_ref``), why, who,
when, whether urgent, and its state (:class:`ChangeState`):

* ``pending``: staged, waiting for the job's next restart (lazy update); ``due_at`` = staged + the job's
  ``code.update_window_s``: past it, :func:`pending_update` says the update is *forced*;
* ``applied`` (at a restart, or the rollback itself), ``forced`` (applied because its window had
  passed), ``superseded`` (a newer change was applied in its place, or a rollback cleared it),
  ``rolled-back`` (it had been applied, and a rollback took it away).

A change's facts never change once written (a trigger refuses it), only its state; no row is ever
deleted.

**Job versions** (table ``job_versions``): one row per (re)start of the job on a commit: when it
started, the first and last step seen after the start, when progress was last seen, and
``stable_at``: when it became stable (:func:`evaluate_stability`). :func:`last_stable_version` is what
``rollback`` goes back to.

**Reading**: every row of the job is checked as it is read (:class:`~robustctl.store.StoreRow`): times
finite and in the store's range (1970 to the year 9999), steps, ids and the urgent flag non-negative
integers, the state a :class:`ChangeState`. A row changed outside robustctl so that it fails is a
:class:`~robustctl.store.StoreError` (exit 78) naming the file, table, row and column: ``update list``,
``update apply``, ``rollback`` and a restart's update and stability steps stop on it rather than
decide from it.

**Storage**: the two tables are created by the store's schema (:data:`robustctl.store.SCHEMA`, version
2); this module keeps its own statements for them and runs them through the store's API only
(:meth:`~robustctl.store.Store.transaction` to write, :meth:`~robustctl.store.Store.rows` to read).
The store binds every text argument as :func:`~robustctl.store.clean_text` makes it (a job name or ref
with bytes that are not UTF-8 is kept as its escape); free text (a reason, a note) is cut by
:func:`~robustctl.store.store_text`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from robustctl.config import CodeSpec
from robustctl.jobcode.progress import ProgressReading
from robustctl.store import Store, StoreRow, store_text

__all__ = [
    "ChangeState",
    "CodeChange",
    "JobVersion",
    "changes",
    "evaluate_stability",
    "last_stable_version",
    "mark_applied",
    "mark_rollback",
    "pending_update",
    "record_change",
    "record_version_start",
    "stable_verdict",
    "versions",
]


class ChangeState(str, enum.Enum):
    """The state of a code change (see the module docstring)."""

    PENDING = "pending"
    APPLIED = "applied"
    FORCED = "forced"
    SUPERSEDED = "superseded"
    ROLLED_BACK = "rolled-back"


@dataclass(frozen=True)
class CodeChange:
    """One row of ``code_changes``.

    Attributes:
        id. job. kind: ``update`` or ``rollback``. ref: as given. commit: the commit it named on every
        host. from_ref: the commit the job ran when it was staged (None: unknown, or hosts disagreed).
        reason. urgent. who (``user@host``). staged_at / due_at / applied_at: UNIX seconds. state.
        note: one line on the last state change.
    """

    id: int
    job: str
    kind: str
    ref: str
    commit: str
    from_ref: str | None
    reason: str
    urgent: bool
    who: str
    staged_at: float
    due_at: float
    state: ChangeState
    applied_at: float | None
    note: str


@dataclass(frozen=True)
class JobVersion:
    """One row of ``job_versions``: the job (re)started on ``commit`` at ``started_at``.

    Attributes:
        id. job. commit. ref: the ref it was known by (None: unknown). started_at: UNIX s.
        base_step: the first step seen after the start (or the checkpoint iteration the restart
        resumed from). last_step / last_progress_at: the latest progress seen after the start.
        stable_at: when it became stable (None: not yet). change_id: the change that started it.
    """

    id: int
    job: str
    commit: str
    ref: str | None
    started_at: float
    base_step: int | None
    last_step: int | None
    last_progress_at: float | None
    stable_at: float | None
    change_id: int | None

    @property
    def steps_seen(self) -> int:
        """Steps made since the start (0 until two steps were seen)."""
        if self.base_step is None or self.last_step is None:
            return 0
        return max(0, self.last_step - self.base_step)


_CHANGE_COLUMNS = (
    "id", "job", "kind", "ref", "commit_id", "from_ref", "reason", "urgent", "who", "staged_at", "due_at",
    "state", "applied_at", "note",
)  # fmt: skip
_VERSION_COLUMNS = (
    "id", "job", "commit_id", "ref", "started_at", "base_step", "last_step", "last_progress_at", "stable_at",
    "change_id",
)  # fmt: skip


def _change(r: StoreRow) -> CodeChange:
    """A ``code_changes`` row, each field checked (:class:`StoreRow`). Raises StoreError."""
    return CodeChange(
        id=r.count("id"),
        job=r.text("job"),
        kind=r.text("kind"),
        ref=r.text("ref"),
        commit=r.text("commit_id"),
        from_ref=r.opt_text("from_ref"),
        reason=r.text("reason"),
        urgent=bool(r.count("urgent")),
        who=r.text("who"),
        staged_at=r.time("staged_at"),
        due_at=r.time("due_at"),
        state=r.choice("state", ChangeState),
        applied_at=r.opt_time("applied_at"),
        note=r.text("note"),
    )


def _version(r: StoreRow) -> JobVersion:
    """A ``job_versions`` row, each field checked (:class:`StoreRow`; steps are counts, as
    :data:`robustctl.jobcode.progress.MAX_STEP` keeps them when written). Raises StoreError."""
    return JobVersion(
        id=r.count("id"),
        job=r.text("job"),
        commit=r.text("commit_id"),
        ref=r.opt_text("ref"),
        started_at=r.time("started_at"),
        base_step=r.opt_count("base_step"),
        last_step=r.opt_count("last_step"),
        last_progress_at=r.opt_time("last_progress_at"),
        stable_at=r.opt_time("stable_at"),
        change_id=r.opt_count("change_id"),
    )


def record_change(
    store: Store,
    job: str,
    *,
    ref: str,
    commit: str,
    from_ref: str | None,
    reason: str,
    urgent: bool = False,
    window_s: float = 86_400.0,
    kind: str = "update",
    state: ChangeState = ChangeState.PENDING,
    note: str = "",
) -> CodeChange:
    """Append a code change (staged now, due ``window_s`` later) and return it. Raises StoreError."""
    now = store.clock()
    applied_at = None if state is ChangeState.PENDING else now
    with store.transaction() as c:
        cur = c.execute(
            "INSERT INTO code_changes(job, kind, ref, commit_id, from_ref, reason, urgent, who, staged_at, "
            "due_at, state, applied_at, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                job,
                kind,
                ref,
                commit,
                from_ref,
                store_text(reason),
                int(urgent),
                store.who,
                now,
                now + window_s,
                state.value,
                applied_at,
                store_text(note),
            ),
        )
        change_id = int(cur.lastrowid or 0)
    return changes(store, job, ids=(change_id,))[0]


def changes(
    store: Store,
    job: str,
    *,
    states: Iterable[ChangeState] | None = None,
    ids: Iterable[int] | None = None,
) -> list[CodeChange]:
    """The job's code changes, oldest first (optionally only in ``states`` or with ``ids``).

    Every change of the job is read and checked before the filter (a decision reads them all).

    Args:
        store: the open store.
        job: the job.
        states: only changes in these states (None: all).
        ids: only changes with these ids (None: all).

    Returns:
        the changes, oldest first.

    Raises:
        StoreError: the store cannot be read, or a row of the job holds a bad field (a time out of
            range, text in a count, an unknown state: :class:`~robustctl.store.StoreRow`).
    """
    rows = [_change(r) for r in store.rows("code_changes", _CHANGE_COLUMNS, "WHERE job=? ORDER BY id", [job])]
    if states is not None:
        wanted = set(states)
        rows = [r for r in rows if r.state in wanted]
    if ids is not None:
        keep = set(ids)
        rows = [r for r in rows if r.id in keep]
    return rows


def pending_update(store: Store, job: str, now: float) -> tuple[str | None, tuple[int, ...], bool]:
    """What the job's next restart must apply.

    Args:
        store: the open store.
        job: the job.
        now: the time the windows are judged at, UNIX s.

    Returns:
        ``(commit, change ids, forced)``: ``commit`` is the commit of the newest pending change (the
        full id resolved and checked on every host when it was staged; None when nothing is pending),
        ``change ids`` every pending change of the job (oldest first: the older ones are superseded
        when the newest is applied), ``forced`` True when a pending, non-urgent change's window
        (``code.update_window_s`` at staging) has passed at ``now``: the update is due even without a
        failure, and its state becomes ``forced``.
    """
    pend = changes(store, job, states=(ChangeState.PENDING,))
    if not pend:
        return None, (), False
    forced = any(not c.urgent and c.due_at <= now for c in pend)
    return pend[-1].commit, tuple(c.id for c in pend), forced


def mark_applied(store: Store, job: str, change_ids: Iterable[int], *, forced: bool, note: str = "") -> None:
    """After a restart checked out the newest of ``change_ids`` (:func:`pending_update`): mark it
    ``applied`` (``forced`` when its window had passed) and the older ones ``superseded``.

    Only ``pending`` changes of ``job`` are touched. Raises StoreError.
    """
    ids = sorted(set(change_ids))
    if not ids:
        return
    now = store.clock()
    newest = ids[-1]
    with store.transaction() as c:
        for i in ids:
            state = (
                (ChangeState.FORCED if forced else ChangeState.APPLIED)
                if i == newest
                else ChangeState.SUPERSEDED
            )
            c.execute(
                "UPDATE code_changes SET state=?, applied_at=?, note=? WHERE id=? AND job=? AND state='pending'",
                (state.value, now, store_text(note or f"{state.value} at a restart"), i, job),
            )


def mark_rollback(store: Store, job: str, rolled_back: Iterable[int], note: str) -> tuple[int, ...]:
    """A rollback: mark ``rolled_back`` (applied/forced changes) ``rolled-back`` and every pending change
    of the job ``superseded`` (the restart after a rollback must not bring them back). Returns the ids
    of the pending changes cleared. Raises StoreError."""
    pend = tuple(c.id for c in changes(store, job, states=(ChangeState.PENDING,)))
    with store.transaction() as c:
        for i in rolled_back:
            c.execute(
                "UPDATE code_changes SET state='rolled-back', note=? WHERE id=? AND job=? "
                "AND state IN ('applied', 'forced')",
                (store_text(note), i, job),
            )
        for i in pend:
            c.execute(
                "UPDATE code_changes SET state='superseded', note=? WHERE id=? AND state='pending'",
                (store_text(f"cleared by a rollback: {note}"), i),
            )
    return pend


def versions(store: Store, job: str) -> list[JobVersion]:
    """The job's versions, oldest start first.

    Args:
        store: the open store.
        job: the job.

    Returns:
        its versions, oldest start first.

    Raises:
        StoreError: the store cannot be read, or a row of the job holds a bad field
            (:class:`~robustctl.store.StoreRow`).
    """
    return [
        _version(r)
        for r in store.rows("job_versions", _VERSION_COLUMNS, "WHERE job=? ORDER BY started_at, id", [job])
    ]


def record_version_start(
    store: Store,
    job: str,
    commit: str,
    *,
    started_at: float,
    ref: str | None = None,
    base_step: int | None = None,
    change_id: int | None = None,
) -> JobVersion:
    """Record that ``job`` (re)started on ``commit`` at ``started_at`` (UNIX s).

    Idempotent: when the job's newest version is this commit started at or after ``started_at``, it is
    returned unchanged (the restart and a rollback may both record the same start).

    Args:
        store: the open store.
        job: the job.
        commit: the commit it runs.
        started_at: when it started, UNIX s.
        ref: the ref the commit was known by (None: unknown).
        base_step: the step the restart resumed from (the checkpoint iteration), when known; else the
            first step the progress signal shows after the start.
        change_id: the code change the start applied (None: none).

    Returns:
        the version as recorded (the newest one when this start was recorded already).

    Raises:
        StoreError: the store cannot be read or written.
    """
    latest = versions(store, job)
    if latest and latest[-1].commit == commit and latest[-1].started_at >= started_at:
        return latest[-1]
    with store.transaction() as c:
        cur = c.execute(
            "INSERT INTO job_versions(job, commit_id, ref, started_at, base_step, change_id) VALUES (?, ?, ?, ?, ?, ?)",
            (job, commit, ref, started_at, base_step, change_id),
        )
        vid = int(cur.lastrowid or 0)
    return next(v for v in versions(store, job) if v.id == vid)


def stable_verdict(
    version: JobVersion, spec: CodeSpec, step: int | None, progress_at: float | None
) -> tuple[int | None, int | None, float | None, float | None]:
    """The version's (base_step, last_step, last_progress_at, stable_at) after a new progress point.

    Pure. ``step``/``progress_at``: the job's step and its time from a reading restricted to entries
    made at or after ``version.started_at`` (:meth:`ProgressReading.since`). A version is stable once
    ``last_progress_at - started_at >= stable_after_s`` (it was still making steps that long after the
    restart) or ``last_step - base_step >= stable_after_steps``; once stable it stays stable.
    """
    base, last, at, stable = version.base_step, version.last_step, version.last_progress_at, version.stable_at
    if step is not None and progress_at is not None and progress_at >= version.started_at:
        if base is None:
            base = step
        if last is None or step >= last:
            last = step
        if at is None or progress_at > at:
            at = progress_at
    if stable is None and at is not None and last is not None and base is not None:
        by_time = spec.stable_after_s is not None and at - version.started_at >= spec.stable_after_s
        by_steps = spec.stable_after_steps is not None and last - base >= spec.stable_after_steps
        if by_time or by_steps:
            stable = at
    return base, last, at, stable


def evaluate_stability(
    store: Store, job: str, spec: CodeSpec, reading: ProgressReading | None
) -> JobVersion | None:
    """Fold a progress reading into the job's newest version and mark it stable when it qualifies
    (:func:`stable_verdict`). Call after a wait for progress and from ``update list``.

    An incomplete reading (a host could not be read) records steps but never makes a version stable:
    a host that cannot be read may be the one that stopped.

    Returns the newest version as now recorded (None: the job has no version recorded). Raises StoreError.
    """
    vs = versions(store, job)
    if not vs:
        return None
    v = vs[-1]
    step = at = None
    if reading is not None:
        recent = reading.since(v.started_at)
        step, at = recent.step, recent.at
    base, last, last_at, stable = stable_verdict(v, spec, step, at)
    if reading is not None and not reading.complete and v.stable_at is None:
        stable = None
    if (base, last, last_at, stable) == (v.base_step, v.last_step, v.last_progress_at, v.stable_at):
        return v
    with store.transaction() as c:
        c.execute(
            "UPDATE job_versions SET base_step=?, last_step=?, last_progress_at=?, stable_at=? WHERE id=?",
            (base, last, last_at, stable, v.id),
        )
    return next(x for x in versions(store, job) if x.id == v.id)


def last_stable_version(store: Store, job: str, *, other_than: str | None = None) -> JobVersion | None:
    """The newest version of ``job`` that became stable (None: none did).

    ``other_than``: a commit to pass over (a rollback's target is never the commit the job runs now:
    a version that ran stably and then failed is rolled back from, not to).
    """
    stable = [v for v in versions(store, job) if v.stable_at is not None and v.commit != other_than]
    return stable[-1] if stable else None
