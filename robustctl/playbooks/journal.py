"""The playbook journal in the state store: one row per run, one per step attempt.

A run (``playbook_runs``) keeps the playbook's text as it was started (``resume`` runs that, not a file
edited since), its parameters, who, pid and status: ``running`` (started, not finished: still running,
or its process died), ``done``, ``failed``. A step attempt (``playbook_steps``) is written ``running``
*before* the library call and ``done``/``failed``/``skipped`` *after* it, with its exit code and its
JSON document (cut at :data:`MAX_RESULT_BYTES`), plus the last audit record id at its start
(``audit_after``): the audit records a destructive step wrote are those after it, from its pid.

One run at a time per job: :func:`job_lock` takes an ``fcntl`` lock on ``<state>.playbook-<job>.lock``
for the whole run (released by the kernel when the process dies), and :func:`begin_run` refuses a job
that has an unfinished run in the journal (resume it instead).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from robustctl.errors import ActionRefused
from robustctl.models import strict_jsonable
from robustctl.playbooks import MAX_RUN_ID
from robustctl.store import (
    AuditRecord,
    Store,
    StoreError,
    StoreLocked,
    journal_connection,
    journal_query,
    journal_text,
)

__all__ = [
    "MAX_RESULT_BYTES",
    "MAX_RUN_ID",
    "JournalRun",
    "JournalStep",
    "RunStatus",
    "begin_run",
    "finish_run",
    "job_lock",
    "run_record",
    "runs",
    "step_audits",
    "step_end",
    "step_start",
]

MAX_RESULT_BYTES = 1024 * 1024
"""Largest step result kept in the journal, bytes of JSON (1 MiB: a diagnose report of ~500 hosts).
A larger document is kept as its summary (``kind``, ``exit_code``, list lengths, the host lists), with
``truncated: true``; later ``when:`` conditions read that."""

KEEP_WHEN_CUT = ("suspects", "suspect_hosts", "over_eviction", "over_evict", "targets", "unknown", "machines")
"""Keys of a document kept whole when it is cut: the host lists the shipped playbooks read."""


class RunStatus:
    """A run's status: ``running`` (or died), ``done``, ``failed``."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class JournalStep:
    """One attempt of one step.

    Attributes:
        seq: order in the run (0-based). step / kind / attempt (1-based). status: ``running``, ``done``,
        ``failed``, ``skipped``. started_at / finished_at (UNIX s). pid: the process that ran it.
        audit_after: the last audit id when it started. exit_code, result (its JSON document), error.
    """

    seq: int
    step: str
    kind: str
    attempt: int
    status: str
    started_at: float
    finished_at: float | None
    pid: int
    audit_after: int
    exit_code: int | None
    result: Mapping[str, Any] | None
    error: str


@dataclass(frozen=True)
class JournalRun:
    """One run: id, playbook, source (file), definition (its text), job, params, started_at,
    finished_at, who, pid, status, message, steps (every attempt, in order)."""

    id: int
    playbook: str
    source: str
    definition: str
    job: str | None
    params: Mapping[str, str]
    started_at: float
    finished_at: float | None
    who: str
    pid: int
    status: str
    message: str
    steps: tuple[JournalStep, ...] = ()


def cap_result(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` as the journal keeps it and ``steps.ID`` shows it: the step's ``--json`` document, whole
    when its JSON is at most :data:`MAX_RESULT_BYTES`, else a summary (see :data:`MAX_RESULT_BYTES`).

    Strict JSON, as ``--json`` prints it: a non-finite float from a host is the string ``"NaN"``,
    ``"Infinity"`` or ``"-Infinity"`` (:func:`robustctl.models.strict_jsonable`), here, in the
    journal's rows and in what a later ``when:`` reads, so a run ends the same whether it goes on
    in this process or after ``resume`` reads the journal back.
    """
    strict: dict[str, Any] = strict_jsonable(doc)
    text = json.dumps(strict, default=str, allow_nan=False)
    if len(text.encode("utf-8", "surrogatepass")) <= MAX_RESULT_BYTES:
        out: dict[str, Any] = json.loads(text)
        return out
    small: dict[str, Any] = {"truncated": True, "bytes": len(text)}
    for k, v in strict.items():
        if isinstance(v, (str, int, float, bool)) or v is None:
            small[k] = v if not isinstance(v, str) else v[:1000]
        elif k in KEEP_WHEN_CUT and isinstance(v, list) and len(v) <= 10_000:
            small[k] = [str(x)[:256] for x in v]
        elif isinstance(v, (list, dict)):
            small[k + "_count"] = len(v)
    return small


def _last_audit_id(store: Store) -> int:
    rows = journal_query(store, "SELECT MAX(id) FROM audit")
    return int(rows[0][0] or 0)


def begin_run(
    store: Store, playbook: str, source: str, definition: str, job: str | None, params: Mapping[str, str]
) -> int:
    """Record a new run (``running``) and return its id.

    Raises:
        ActionRefused: ``job`` has an unfinished run in the journal (the message names it and says to
            resume it). StoreError.
    """
    with journal_connection(store)() as c:
        if job is not None:
            row = c.execute(
                "SELECT id, playbook FROM playbook_runs WHERE job=? AND status=? ORDER BY id LIMIT 1",
                (journal_text(job), RunStatus.RUNNING),
            ).fetchone()
            if row is not None:
                raise ActionRefused(
                    f"job {job} has an unfinished playbook run {row[0]} ({row[1]}): finish it with "
                    f"'robustctl playbook resume {row[0]}' before starting another"
                )
        cur = c.execute(
            "INSERT INTO playbook_runs(playbook, source, definition, job, params, started_at, who, pid, status) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                journal_text(playbook),
                journal_text(source),
                definition,
                journal_text(job) if job is not None else None,
                json.dumps(dict(params)),
                store.clock(),
                store.who,
                os.getpid(),
                RunStatus.RUNNING,
            ),
        )
        return int(cur.lastrowid or 0)


def claim_run(store: Store, run_id: int) -> None:
    """Record that this process (pid) now carries run ``run_id`` on (``resume``). Raises StoreError."""
    with journal_connection(store)() as c:
        c.execute("UPDATE playbook_runs SET pid=? WHERE id=?", (os.getpid(), run_id))


def finish_run(store: Store, run_id: int, status: str, message: str) -> None:
    """Record the run's final status (``done`` / ``failed``) and message. Raises StoreError."""
    with journal_connection(store)() as c:
        c.execute(
            "UPDATE playbook_runs SET status=?, message=?, finished_at=? WHERE id=?",
            (status, journal_text(message), store.clock(), run_id),
        )


def step_start(store: Store, run_id: int, step: str, kind: str, attempt: int) -> int:
    """Record an attempt of ``step`` as ``running`` (before it runs); return its ``seq``. Raises StoreError."""
    audit_after = _last_audit_id(store)
    with journal_connection(store)() as c:
        row = c.execute("SELECT MAX(seq) FROM playbook_steps WHERE run_id=?", (run_id,)).fetchone()
        seq = int(row[0]) + 1 if row and row[0] is not None else 0
        c.execute(
            "INSERT INTO playbook_steps(run_id, seq, step, kind, attempt, status, started_at, pid, audit_after) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, seq, step, kind, attempt, "running", store.clock(), os.getpid(), audit_after),
        )
    return seq


def step_end(
    store: Store,
    run_id: int,
    seq: int,
    status: str,
    *,
    exit_code: int | None = None,
    result: Mapping[str, Any] | None = None,
    error: str = "",
) -> None:
    """Record an attempt's outcome (``done``, ``failed``, ``skipped``). Raises StoreError."""
    body = json.dumps(cap_result(result), allow_nan=False) if result is not None else None
    with journal_connection(store)() as c:
        c.execute(
            "UPDATE playbook_steps SET status=?, exit_code=?, result=?, error=?, finished_at=? "
            "WHERE run_id=? AND seq=?",
            (status, exit_code, body, journal_text(error), store.clock(), run_id, seq),
        )


def step_skipped(store: Store, run_id: int, step: str, kind: str, why: str) -> None:
    """Record that ``step`` was skipped (its ``when:`` was false), in one write."""
    seq = step_start(store, run_id, step, kind, 1)
    step_end(store, run_id, seq, "skipped", error=why)


def run_record(store: Store, run_id: int) -> JournalRun | None:
    """Run ``run_id`` with its steps, or None (also for an id outside 1..:data:`MAX_RUN_ID`)."""
    if not 1 <= run_id <= MAX_RUN_ID:
        return None
    rows = journal_query(
        store,
        "SELECT id, playbook, source, definition, job, params, started_at, finished_at, who, pid, status, message "
        "FROM playbook_runs WHERE id=?",
        [run_id],
    )
    if not rows:
        return None
    srows = journal_query(
        store,
        "SELECT seq, step, kind, attempt, status, started_at, finished_at, pid, audit_after, exit_code, result, "
        "error FROM playbook_steps WHERE run_id=? ORDER BY seq",
        [run_id],
    )
    return _run(rows[0], tuple(_step(s) for s in srows))


def runs(store: Store, *, job: str | None = None, limit: int = 50) -> list[JournalRun]:
    """The newest runs (without steps), newest first, optionally of one job."""
    sql = (
        "SELECT id, playbook, source, definition, job, params, started_at, finished_at, who, pid, status, message "
        "FROM playbook_runs"
    )
    args: list[Any] = []
    if job is not None:
        sql += " WHERE job=?"
        args.append(job)
    return [_run(r, ()) for r in journal_query(store, sql + " ORDER BY id DESC LIMIT ?", [*args, limit])]


def step_audits(store: Store, step: JournalStep, actions: tuple[str, ...]) -> list[AuditRecord]:
    """The audit records ``step`` wrote: after its ``audit_after``, from its pid, of one of ``actions``."""
    ids = journal_query(
        store,
        "SELECT id FROM audit WHERE id>? AND pid=? ORDER BY id",
        [step.audit_after, step.pid],
    )
    out: list[AuditRecord] = []
    for (aid,) in ids:
        for rec in store.audit(audit_id=int(aid)):
            if rec.action in actions and rec.started_at >= step.started_at - 1:
                out.append(rec)
    return out


@contextlib.contextmanager
def job_lock(store: Store, job: str, *, timeout_s: float = 0.0) -> Iterator[None]:
    """Hold the per-job playbook lock for a ``with`` block.

    Raises:
        StoreLocked: another process runs a playbook on ``job`` (exit 2). StoreError: no lock file.
    """
    digest = hashlib.sha256(job.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    path = store.path.with_name(f"{store.path.name}.playbook-{digest}.lock")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StoreError(f"{path}: cannot create the playbook lock file: {exc.strerror}") from None
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise StoreError(f"{path}: cannot lock: {exc.strerror}") from None
                if time.monotonic() >= deadline:
                    raise StoreLocked(
                        f"another robustctl is running a playbook on job {job} (lock {path}); "
                        "wait for it to finish"
                    ) from None
                time.sleep(0.1)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _run(r: tuple[Any, ...], steps: tuple[JournalStep, ...]) -> JournalRun:
    try:
        params = json.loads(r[5])
    except ValueError:
        params = {}
    return JournalRun(
        id=int(r[0]),
        playbook=str(r[1]),
        source=str(r[2]),
        definition=str(r[3]),
        job=r[4],
        params={str(k): str(v) for k, v in params.items()} if isinstance(params, dict) else {},
        started_at=float(r[6]),
        finished_at=r[7],
        who=str(r[8]),
        pid=int(r[9]),
        status=str(r[10]),
        message=str(r[11]),
        steps=steps,
    )


def _step(s: tuple[Any, ...]) -> JournalStep:
    result = None
    if s[10]:
        try:
            loaded = json.loads(s[10])
            result = loaded if isinstance(loaded, dict) else None
        except ValueError:
            result = None
    return JournalStep(
        seq=int(s[0]),
        step=str(s[1]),
        kind=str(s[2]),
        attempt=int(s[3]),
        status=str(s[4]),
        started_at=float(s[5]),
        finished_at=s[6],
        pid=int(s[7]),
        audit_after=int(s[8]),
        exit_code=s[9],
        result=result,
        error=str(s[11]),
    )
