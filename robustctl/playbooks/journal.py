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

Reading: every journal row read is checked (:class:`~robustctl.store.StoreRow`): times finite and in the
store's range (1970 to the year 9999), ids, pids, attempts and sequence numbers non-negative integers (a
pid at most :data:`~robustctl.store.PID_MAX`, an exit code at most :data:`EXIT_STATUS_MAX`), the
parameters a JSON object of text values, a step's result a JSON object nesting at most
:data:`MAX_RESULT_DEPTH` levels (read back as strict JSON, as :func:`cap_result` wrote it). A row
changed outside robustctl so that it fails is a :class:`~robustctl.store.StoreError` (exit 78) naming
the file, table, row and column: ``playbook resume`` (and ``playbook run``'s check for an unfinished
run of the job) stops on it rather than go on from it.

Storage: the two tables are created by the store's schema (:data:`robustctl.store.SCHEMA`, version 3);
this module keeps its own statements for them and runs them through the store's API only
(:meth:`~robustctl.store.Store.transaction` to write, :meth:`~robustctl.store.Store.rows` to read);
the audit log it points into is read through the store's methods (:meth:`~robustctl.store.Store.audit`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from robustctl.errors import ActionRefused
from robustctl.models import strict_jsonable
from robustctl.pidlock import held_lock
from robustctl.playbooks import MAX_RUN_ID
from robustctl.store import (
    COUNT_MAX,
    MAX_JSON_DEPTH,
    PID_MAX,
    AuditRecord,
    Store,
    StoreLocked,
    StoreRow,
    deeper_than,
    store_text,
)

__all__ = [
    "EXIT_STATUS_MAX",
    "MAX_RESULT_BYTES",
    "MAX_RESULT_DEPTH",
    "MAX_RUN_ID",
    "JournalRun",
    "JournalStep",
    "RunStatus",
    "begin_run",
    "deeper_than",
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

MAX_RESULT_DEPTH = MAX_JSON_DEPTH
"""Deepest nesting (objects and lists within one another) of a step result the journal keeps and reads
back. robustctl's command documents nest about ten levels; :func:`robustctl.models.strict_jsonable`, the
``when:`` evaluator and ``--json`` recurse a few frames per level, so 100 levels stay far below Python's
recursion limit (1000) wherever a result goes. A deeper document is kept as its summary (as a larger
one is), and one read back is a store error: only a hand-edited row holds it."""

EXIT_STATUS_MAX = 255
"""Largest exit code a step attempt's row may hold: a process exit status is 0 to 255 (every code of
:class:`robustctl.exit_codes.ExitCode` fits); a larger one read back is a hand-edited row."""

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
    when its JSON is at most :data:`MAX_RESULT_BYTES` and it nests at most :data:`MAX_RESULT_DEPTH`
    levels, else a summary (see :data:`MAX_RESULT_BYTES`).

    Strict JSON, as ``--json`` prints it: a non-finite float from a host is the string ``"NaN"``,
    ``"Infinity"`` or ``"-Infinity"`` (:func:`robustctl.models.strict_jsonable`), here, in the
    journal's rows and in what a later ``when:`` reads, so a run ends the same whether it goes on
    in this process or after ``resume`` reads the journal back.
    """
    strict: dict[str, Any] = strict_jsonable(doc)
    text = json.dumps(strict, default=str, allow_nan=False)
    if len(text.encode("utf-8", "surrogatepass")) <= MAX_RESULT_BYTES and not deeper_than(
        strict, MAX_RESULT_DEPTH
    ):
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


def begin_run(
    store: Store, playbook: str, source: str, definition: str, job: str | None, params: Mapping[str, str]
) -> int:
    """Record a new run (``running``) and return its id.

    Args:
        store: the open store.
        playbook: the playbook's name.
        source: the file it was read from.
        definition: its text as it was started (``resume`` runs that).
        job: the job it runs on (None: none).
        params: its parameters.

    Returns:
        the run's id.

    Raises:
        ActionRefused: ``job`` has an unfinished run in the journal (the message names it and says to
            resume it).
        StoreError: the store cannot be read or written.
    """
    with store.transaction() as c:
        if job is not None:
            found = store.rows(
                "playbook_runs",
                ("id", "playbook"),
                "WHERE job=? AND status=? ORDER BY id LIMIT 1",
                [store_text(job), RunStatus.RUNNING],
            )
            if found:
                rid, name = found[0].count("id"), found[0].text("playbook")
                raise ActionRefused(
                    f"job {job} has an unfinished playbook run {rid} ({name}): finish it with "
                    f"'robustctl playbook resume {rid}' before starting another"
                )
        cur = c.execute(
            "INSERT INTO playbook_runs(playbook, source, definition, job, params, started_at, who, pid, status) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                store_text(playbook),
                store_text(source),
                definition,
                store_text(job) if job is not None else None,
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
    with store.transaction() as c:
        c.execute("UPDATE playbook_runs SET pid=? WHERE id=?", (os.getpid(), run_id))


def finish_run(store: Store, run_id: int, status: str, message: str) -> None:
    """Record the run's final status (``done`` / ``failed``) and message. Raises StoreError."""
    with store.transaction() as c:
        c.execute(
            "UPDATE playbook_runs SET status=?, message=?, finished_at=? WHERE id=?",
            (status, store_text(message), store.clock(), run_id),
        )


def step_start(store: Store, run_id: int, step: str, kind: str, attempt: int) -> int:
    """Record an attempt of ``step`` as ``running`` (before it runs); return its ``seq``.

    Args:
        store: the open store.
        run_id: the run.
        step: the step's id.
        kind: the step's kind.
        attempt: the attempt's number (1-based).

    Returns:
        the attempt's ``seq`` in the run (0-based).

    Raises:
        StoreError: the store cannot be written, or the run's last ``seq`` is not an integer below
            :data:`~robustctl.store.COUNT_MAX` (the next one must fit).
    """
    audit_after = store.last_audit_id()
    with store.transaction() as c:
        # text and blobs sort after numbers: a hand-edited seq is the one read, and refused
        last = store.rows("playbook_steps", ("seq",), "WHERE run_id=? ORDER BY seq DESC LIMIT 1", [run_id])
        seq = last[0].count("seq", most=COUNT_MAX - 1) + 1 if last else 0
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
    with store.transaction() as c:
        c.execute(
            "UPDATE playbook_steps SET status=?, exit_code=?, result=?, error=?, finished_at=? "
            "WHERE run_id=? AND seq=?",
            (status, exit_code, body, store_text(error), store.clock(), run_id, seq),
        )


def step_skipped(store: Store, run_id: int, step: str, kind: str, why: str) -> None:
    """Record that ``step`` was skipped (its ``when:`` was false), in one write."""
    seq = step_start(store, run_id, step, kind, 1)
    step_end(store, run_id, seq, "skipped", error=why)


def run_record(store: Store, run_id: int) -> JournalRun | None:
    """Run ``run_id`` with its steps, or None (also for an id outside 1..:data:`MAX_RUN_ID`).

    Args:
        store: the open store.
        run_id: the run.

    Returns:
        the run with every step attempt in order; None when there is no such run.

    Raises:
        StoreError: the store cannot be read, or the run's row or one of its steps' holds a bad field
            (the message names the table, row and column).
    """
    if not 1 <= run_id <= MAX_RUN_ID:
        return None
    rows = store.rows("playbook_runs", _RUN_COLUMNS, "WHERE id=?", [run_id])
    if not rows:
        return None
    steps = store.rows("playbook_steps", _STEP_COLUMNS, "WHERE run_id=? ORDER BY seq", [run_id])
    return _run(rows[0], tuple(_step(s) for s in steps))


def runs(store: Store, *, job: str | None = None, limit: int = 50) -> list[JournalRun]:
    """The newest runs (without steps), newest first, optionally of one job.

    Args:
        store: the open store.
        job: only this job's (None: every run).
        limit: at most this many.

    Returns:
        the runs, newest first.

    Raises:
        StoreError: the store cannot be read, or a run read holds a bad field.
    """
    where, args = ("WHERE job=? ", [job]) if job is not None else ("", [])
    return [
        _run(r, ())
        for r in store.rows("playbook_runs", _RUN_COLUMNS, where + "ORDER BY id DESC LIMIT ?", [*args, limit])
    ]


def step_audits(store: Store, step: JournalStep, actions: tuple[str, ...]) -> list[AuditRecord]:
    """The audit records ``step`` wrote: after its ``audit_after``, from its pid, of one of ``actions``."""
    out: list[AuditRecord] = []
    for aid in store.audit_ids(after=step.audit_after, pid=step.pid):
        for rec in store.audit(audit_id=aid):
            if rec.action in actions and rec.started_at >= step.started_at - 1:
                out.append(rec)
    return out


@contextlib.contextmanager
def job_lock(store: Store, job: str, *, timeout_s: float = 0.0) -> Iterator[None]:
    """Hold the per-job playbook lock for a ``with`` block.

    Args:
        store: the open store (the lock file lies beside it).
        job: the job.
        timeout_s: how long to wait for another holder, seconds (0: fail at once).

    Yields:
        nothing; the lock is held while the block runs.

    Raises:
        StoreLocked: another process runs a playbook on ``job`` (exit 2).
        StoreError: the lock file cannot be created or locked.
    """
    digest = hashlib.sha256(job.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    path = store.path.with_name(f"{store.path.name}.playbook-{digest}.lock")

    def busy(holder: str) -> StoreLocked:
        return StoreLocked(
            f"another robustctl is running a playbook on job {job} ({holder}; lock {path}); "
            "wait for it to finish"
        )

    with held_lock(path, what="playbook lock file", busy=busy, facts={"job": job}, timeout_s=timeout_s):
        yield


_RUN_COLUMNS = (
    "id", "playbook", "source", "definition", "job", "params", "started_at", "finished_at", "who", "pid",
    "status", "message",
)  # fmt: skip
_STEP_COLUMNS = (
    "seq", "step", "kind", "attempt", "status", "started_at", "finished_at", "pid", "audit_after",
    "exit_code", "result", "error",
)  # fmt: skip


def _run(r: StoreRow, steps: tuple[JournalStep, ...]) -> JournalRun:
    """A ``playbook_runs`` row, each field checked. Raises StoreError."""
    params = r.json("params")
    if not isinstance(params, dict) or not all(isinstance(v, str) for v in params.values()):
        raise r.error("params", "not a JSON object of parameter values (text)")
    return JournalRun(
        id=r.count("id"),
        playbook=r.text("playbook"),
        source=r.text("source"),
        definition=r.text("definition"),
        job=r.opt_text("job"),
        params=params,
        started_at=r.time("started_at"),
        finished_at=r.opt_time("finished_at"),
        who=r.text("who"),
        pid=r.count("pid", most=PID_MAX),
        status=r.text("status"),
        message=r.text("message"),
        steps=steps,
    )


def _step(r: StoreRow) -> JournalStep:
    """A ``playbook_steps`` row, each field checked; its result read back as strict JSON.

    Raises StoreError."""
    result = r.json("result") if r.values["result"] != "" else None  # '': no result, as NULL
    if result is not None and not isinstance(result, dict):
        raise r.error("result", "not a JSON object")
    if deeper_than(result, MAX_RESULT_DEPTH):
        raise r.error("result", f"nested deeper than {MAX_RESULT_DEPTH} levels")
    return JournalStep(
        seq=r.count("seq"),
        step=r.text("step"),
        kind=r.text("kind"),
        attempt=r.count("attempt"),
        status=r.text("status"),
        started_at=r.time("started_at"),
        finished_at=r.opt_time("finished_at"),
        pid=r.count("pid", most=PID_MAX),
        audit_after=r.count("audit_after"),
        exit_code=r.opt_count("exit_code", most=EXIT_STATUS_MAX),
        result=strict_jsonable(result) if result is not None else None,
        error=r.text("error"),
    )
