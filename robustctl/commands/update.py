"""``run_update_stage``, ``run_update_list``, ``run_rollback``: hot update and rollback of a job's code.

* **stage** resolves ``--ref`` to one commit on every host of the job (a host where the path is not a
  git work tree, the ref is missing, or it names another commit stops it: one line naming the host,
  nothing recorded), then records a ``pending`` change. A lazy change waits for the next restart
  (:func:`robustctl.jobcode.records.pending_update`), forced once ``code.update_window_s`` passed; an
  ``urgent`` one restarts the job at once (``run_restart``, whose restart applies it).
* **apply** restarts the job when its pending change is due (its window passed) or ``now`` is asked:
  the cron side of lazy updates (the restart applies the change).
* **list** shows the job's changes and versions, after folding a fresh progress reading into the
  newest version (stability), when the job has a ``progress:`` section.
* **rollback** plans → shows → (confirms) → applies: check out the last stable version other than
  the one the hosts run now (or ``--to``)
  on every host of the job, all or none (:func:`robustctl.jobcode.git.switch_work_trees`), record it
  (the rolled-back changes, pending changes cleared), then restart (``run_restart``). An audit record
  (action ``rollback``) is written before the checkout, with one step per phase.

``run_restart`` is imported when it is needed (``robustctl.commands.restart``); tests and the playbook
engine may pass their own ``restart`` callable.

Exit codes: 0 staged / listed / rolled back (or dry run, declined) · 2 refused (no stable version and no
``--to``, a dirty work tree, the store's lock) · 3 a host could not be reached, or the checkout failed
(every switched host put back) · 64 bad input (ref missing on a host, bad ref) · 78 bad inventory (no
``code:`` section, path not a git work tree) or state store.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from robustctl.commands.actions import ActionRequest, check_reason
from robustctl.errors import ActionRefused, ConfigError, UsageError
from robustctl.exit_codes import ExitCode
from robustctl.jobcode.git import (
    HostCode,
    SwitchResult,
    check_ref,
    code_hosts,
    common_commit,
    current_versions,
    inspect_hosts,
    require_clean,
    switch_work_trees,
)
from robustctl.jobcode.records import (
    ChangeState,
    CodeChange,
    JobVersion,
    changes,
    evaluate_stability,
    last_stable_version,
    mark_rollback,
    pending_update,
    record_change,
    record_version_start,
    versions,
)
from robustctl.models import SCHEMA_VERSION, to_jsonable

if TYPE_CHECKING:
    from robustctl.actions import ActionContext
    from robustctl.actions.session import ActionResult, Confirm, ShowPlan

__all__ = [
    "RestartFn",
    "RollbackOutcome",
    "RollbackPlan",
    "RollbackRequest",
    "RollbackResult",
    "UpdateApplyRequest",
    "UpdateApplyResult",
    "UpdateListRequest",
    "UpdateListResult",
    "UpdateStageRequest",
    "UpdateStageResult",
    "run_rollback",
    "run_update_apply",
    "run_update_list",
    "run_update_stage",
]

RestartFn = Callable[..., "ActionResult"]
"""``restart(job, reason, req, confirm, show) -> ActionResult``: restarts the job (default:
:func:`default_restart`, which calls ``robustctl.commands.restart.run_restart``)."""


def default_restart(
    job: str, reason: str, req: ActionRequest, confirm: Confirm | None, show: ShowPlan | None
) -> ActionResult:
    """Restart ``job`` through ``robustctl.commands.restart.run_restart`` (imported here, when needed)."""
    from robustctl.commands.restart import RestartRequest, run_restart  # type: ignore[import-not-found,unused-ignore]

    request = RestartRequest(
        job=job,
        reason=reason,
        inventory=req.inventory,
        state=req.state,
        dry_run=req.dry_run,
        lock_timeout_s=req.lock_timeout_s,
    )
    result: ActionResult = run_restart(request, confirm=confirm, show=show)
    return result


def _open(req: ActionRequest) -> ActionContext:
    from robustctl.actions import open_context

    return open_context(req.inventory, req.state)


def _job_hosts(ctx: ActionContext, job: str) -> tuple[Any, list[Any]]:
    try:
        ctx.inventory.job(job)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    return code_hosts(ctx, job)


def _inspect(ctx: ActionContext, job: str, ref: str | None) -> tuple[Any, list[Any], tuple[HostCode, ...]]:
    from robustctl.transport.pool import TransportPool

    spec, hosts = _job_hosts(ctx, job)
    pool = TransportPool()
    try:
        codes = inspect_hosts(
            pool,
            hosts,
            spec,
            ref,
            concurrency=ctx.inventory.diagnose.concurrency,
            timeout_s=ctx.inventory.diagnose.host_timeout_s,
        )
    finally:
        pool.close()
    return spec, hosts, codes


# ---- update stage -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class UpdateStageRequest(ActionRequest):
    """What ``robustctl update stage`` was asked.

    Attributes:
        job. ref: a branch, tag or commit (:func:`robustctl.jobcode.git.check_ref`). reason: why
        (required). urgent: restart the job now. Plus the session options of :class:`ActionRequest`.
    """

    job: str
    ref: str
    reason: str
    urgent: bool = False


@dataclass(frozen=True)
class UpdateStageResult:
    """The outcome of ``update stage`` (kind ``update-stage``).

    Attributes:
        job. ref. commit: the commit the ref names on every host. from_commit: the commit the job's
        hosts run (None when they disagree: ``disagreeing`` names them). hosts: the job's hosts.
        change: the recorded change (None for a dry run). restart: the restart's JSON document
        (urgent; None otherwise). restart_exit: the restart's exit code. dry_run. schema_version.
    """

    job: str
    ref: str
    commit: str
    from_commit: str | None
    disagreeing: tuple[str, ...]
    hosts: tuple[str, ...]
    change: CodeChange | None
    urgent: bool
    dry_run: bool
    restart: dict[str, Any] | None = None
    restart_exit: int = 0
    schema_version: int = SCHEMA_VERSION
    kind: str = "update-stage"

    @property
    def exit_code(self) -> ExitCode:
        """0 staged (or dry run); the restart's exit code for an urgent change."""
        return ExitCode(self.restart_exit)


def run_update_stage(
    req: UpdateStageRequest,
    *,
    confirm: Confirm | None = None,
    show: ShowPlan | None = None,
    restart: RestartFn | None = None,
) -> UpdateStageResult:
    """Verify ``req.ref`` on every host of the job, record the change, restart at once when urgent.

    ``confirm``/``show`` are passed to the restart (urgent). Raises: UsageError (bad ref, reason or
    job; ref missing on a host), ConfigError (no ``code:``; not a work tree), HostError (a host could
    not be read), StoreError, StoreLocked.
    """
    check_ref(req.ref)
    check_reason(req.reason, "--reason")
    if not req.reason.strip():
        raise UsageError("--reason is required: say why the code changes (it is recorded)")
    ctx = _open(req)
    try:
        spec, hosts, codes = _inspect(ctx, req.job, req.ref)
        commit = common_commit(codes, req.ref)
        head, disagree = current_versions(codes)
        from_commit = None if disagree else head
        names = tuple(h.name for h in hosts)
        if req.dry_run:
            return UpdateStageResult(
                req.job, req.ref, commit, from_commit, disagree, names, None, req.urgent, True
            )
        ctx.lock("update-stage", req.lock_timeout_s)
        change = record_change(
            ctx.store,
            req.job,
            ref=req.ref,
            commit=commit,
            from_ref=from_commit,
            reason=req.reason,
            urgent=req.urgent,
            window_s=spec.update_window_s,
        )
    finally:
        ctx.close()
    if not req.urgent:
        return UpdateStageResult(req.job, req.ref, commit, from_commit, disagree, names, change, False, False)
    res = (restart or default_restart)(req.job, f"urgent update {req.ref}: {req.reason}", req, confirm, show)
    from robustctl.commands.base import result_json

    return UpdateStageResult(
        req.job,
        req.ref,
        commit,
        from_commit,
        disagree,
        names,
        change,
        True,
        False,
        restart=result_json(res),
        restart_exit=int(res.exit_code),
    )


# ---- update apply -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class UpdateApplyRequest(ActionRequest):
    """What ``robustctl update apply`` was asked.

    Attributes:
        job. now: apply a pending change even before its window passed (default: only a due one).
        reason: recorded with the restart ("" → the change's own). Plus the session options of
        :class:`ActionRequest`.
    """

    job: str
    now: bool = False
    reason: str = ""


@dataclass(frozen=True)
class UpdateApplyResult:
    """The outcome of ``update apply`` (kind ``update-apply``).

    Attributes:
        job. commit: the newest pending change's commit (None: nothing pending). change_ids: the pending
        changes. due: the window of a lazy change has passed (ByteRobust §6.1: lazy updates are forced
        when no failure restarted the job within the window). due_at: when the oldest pending change
        falls due (UNIX s). restarted: a restart ran (it applies the change, see
        :mod:`robustctl.actions.restart`). restart / restart_exit: its JSON document and exit code.
        dry_run.
    """

    job: str
    commit: str | None
    change_ids: tuple[int, ...]
    due: bool
    due_at: float | None
    restarted: bool
    dry_run: bool
    restart: dict[str, Any] | None = None
    restart_exit: int = 0
    schema_version: int = SCHEMA_VERSION
    kind: str = "update-apply"

    @property
    def exit_code(self) -> ExitCode:
        """0 nothing pending, not due yet, or applied (dry run included); else the restart's exit code."""
        return ExitCode(self.restart_exit)


def run_update_apply(
    req: UpdateApplyRequest,
    *,
    confirm: Confirm | None = None,
    show: ShowPlan | None = None,
    restart: RestartFn | None = None,
) -> UpdateApplyResult:
    """Restart the job to apply its pending code change when that change is due (or ``now``).

    Meant for cron (``update apply --job J --yes``): a lazy change waits for the next restart, and is
    forced by the first run after its ``code.update_window_s`` passed. The restart itself checks the
    change out on every host, all or none, and marks it applied (``forced`` when it was due).

    Raises: UsageError (unknown job, bad reason), ConfigError (no ``code:`` section), StoreError; the
    restart's own errors.
    """
    check_reason(req.reason, "--reason")
    ctx = _open(req)
    try:
        _job_hosts(ctx, req.job)
        now = ctx.clock()
        commit, ids, due = pending_update(ctx.store, req.job, now)
        pend = changes(ctx.store, req.job, states=(ChangeState.PENDING,))
    finally:
        ctx.close()
    due_at = min((c.due_at for c in pend if not c.urgent), default=None)
    if commit is None or not (due or req.now):
        return UpdateApplyResult(req.job, commit, ids, due, due_at, False, req.dry_run)
    why = req.reason or (
        f"pending code update {commit[:12]} " + ("due: its update window passed" if due else "applied now")
    )
    res = (restart or default_restart)(req.job, why, req, confirm, show)
    from robustctl.commands.base import result_json

    return UpdateApplyResult(
        req.job,
        commit,
        ids,
        due,
        due_at,
        not req.dry_run,
        req.dry_run,
        restart=result_json(res),
        restart_exit=int(res.exit_code),
    )


# ---- update list --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class UpdateListRequest:
    """What ``robustctl update list`` was asked: the job, and whether to read progress first.

    Attributes:
        job. read_progress: read the progress signal and fold it into the newest version (stability).
        inventory / state: paths.
    """

    job: str
    read_progress: bool = True
    inventory: Any = None
    state: Any = None


@dataclass(frozen=True)
class UpdateListResult:
    """The job's code history (kind ``update-list``).

    Attributes:
        job. changes: every change, oldest first. versions: every version, oldest first.
        pending_commit / pending_ids / forced: :func:`~robustctl.jobcode.records.pending_update` now.
        last_stable: the version rollback goes back to (None: none). progress_note: why no progress was
        read, or what the reading said (one line). schema_version.
    """

    job: str
    changes: tuple[CodeChange, ...]
    versions: tuple[JobVersion, ...]
    pending_commit: str | None
    pending_ids: tuple[int, ...]
    forced: bool
    last_stable: JobVersion | None
    progress_note: str
    schema_version: int = SCHEMA_VERSION
    kind: str = "update-list"

    @property
    def exit_code(self) -> ExitCode:
        """Always 0: a listing."""
        return ExitCode.OK


def run_update_list(req: UpdateListRequest) -> UpdateListResult:
    """The job's changes and versions, stability evaluated first from a progress reading.

    Raises: UsageError (unknown job), ConfigError (bad inventory, no ``code:``), StoreError.
    """
    from robustctl.jobcode.progress import read_progress
    from robustctl.transport.pool import TransportPool

    ctx = _open(ActionRequest(inventory=req.inventory, state=req.state))
    try:
        spec, hosts = _job_hosts(ctx, req.job)
        job = ctx.inventory.job(req.job)
        note = "progress not read (--no-progress)"
        if req.read_progress and job.progress is None:
            note = "the job has no progress: section; stability cannot be evaluated"
        elif req.read_progress and job.progress is not None:
            pool = TransportPool()
            try:
                reading = read_progress(pool, req.job, hosts, job.progress, clock=ctx.clock)
            finally:
                pool.close()
            evaluate_stability(ctx.store, req.job, spec, reading)
            note = f"progress: step {reading.step} on {len(reading.entries)} rank(s)" + (
                f"; unreadable: {'; '.join(reading.errors[:3])}" if reading.errors else ""
            )
        commit, ids, forced = pending_update(ctx.store, req.job, ctx.clock())
        return UpdateListResult(
            req.job,
            tuple(changes(ctx.store, req.job)),
            tuple(versions(ctx.store, req.job)),
            commit,
            ids,
            forced,
            last_stable_version(ctx.store, req.job),
            note,
        )
    finally:
        ctx.close()


# ---- rollback -----------------------------------------------------------------------------------


class RollbackOutcome(str, enum.Enum):
    """How a rollback ended."""

    DRY_RUN = "dry-run"
    DECLINED = "declined"
    APPLIED = "applied"
    FAILED = "failed"
    RESTART_FAILED = "restart-failed"


@dataclass(frozen=True, kw_only=True)
class RollbackRequest(ActionRequest):
    """What ``robustctl rollback`` was asked.

    Attributes:
        job. to: a ref to go back to (None: the last stable version). reason: why ("" → a default).
        Plus the session options of :class:`ActionRequest` (``dry_run``: plan only).
    """

    job: str
    to: str | None = None
    reason: str = ""


@dataclass(frozen=True)
class RollbackPlan:
    """What a rollback will do (kind ``rollback-plan``).

    Attributes:
        job. commit: the commit to check out. ref: as asked (``--to``) or the stable version's ref.
        source: ``--to`` or ``last-stable``. stable: the stable version (None with ``--to``).
        hosts: per host, (name, current HEAD). unchanged: hosts already on ``commit``.
        rolled_back: ids of the applied changes it takes away. pending: ids of pending changes it
        clears. reason. steps: descriptions, in order. schema_version.
    """

    job: str
    commit: str
    ref: str | None
    source: str
    stable: JobVersion | None
    hosts: tuple[tuple[str, str | None], ...]
    unchanged: tuple[str, ...]
    rolled_back: tuple[int, ...]
    pending: tuple[int, ...]
    reason: str
    steps: tuple[str, ...]
    schema_version: int = SCHEMA_VERSION
    kind: str = "rollback-plan"


@dataclass(frozen=True)
class RollbackResult:
    """The outcome of a rollback (kind ``rollback``).

    Attributes:
        outcome: :class:`RollbackOutcome`. plan. switch: the checkout's per-host result (None unless it
        ran). restart: the restart's JSON document (None unless it ran). restart_exit. audit_id.
        message: one line. schema_version.
    """

    outcome: RollbackOutcome
    plan: RollbackPlan
    switch: SwitchResult | None = None
    restart: dict[str, Any] | None = None
    restart_exit: int = 0
    audit_id: int | None = None
    message: str = ""
    schema_version: int = SCHEMA_VERSION
    kind: str = "rollback"

    @property
    def exit_code(self) -> ExitCode:
        """0 applied, dry run or declined; 3 the checkout failed; the restart's code when it failed."""
        if self.outcome is RollbackOutcome.FAILED:
            return ExitCode.UNKNOWN
        if self.outcome is RollbackOutcome.RESTART_FAILED:
            return ExitCode(self.restart_exit or ExitCode.UNKNOWN)
        return ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document: the fields, plus ``exit_code``."""
        doc: dict[str, Any] = to_jsonable(self)
        doc["exit_code"] = int(self.exit_code)
        return doc


RollbackConfirm = Callable[[RollbackPlan], bool]
RollbackShow = Callable[[RollbackPlan], None]


def plan_rollback(
    ctx: ActionContext, req: RollbackRequest
) -> tuple[RollbackPlan, tuple[HostCode, ...], list[Any], Any]:
    """Resolve the target on every host and build the plan (reads only).

    Raises: ActionRefused (no stable version and no ``--to``; a dirty work tree), UsageError /
    ConfigError / HostError (see :func:`robustctl.jobcode.git.common_commit`).
    """
    stable = None
    if req.to is not None:
        ref = check_ref(req.to)
        source = "--to"
    else:
        stable = last_stable_version(ctx.store, req.job)
        if stable is None:
            _job_hosts(ctx, req.job)  # an unknown job or no code: section says so first
            raise ActionRefused(
                f"rollback refused: no version of job {req.job} has run stably yet (robustctl update list "
                f"--job {req.job}); pass --to REF to name the version"
            )
        ref = stable.commit
        source = "last-stable"
    spec, hosts, codes = _inspect(ctx, req.job, ref)
    commit = common_commit(codes, ref)
    head, _ = current_versions(codes)
    if stable is not None and commit == head:
        # The job already runs the last stable version: it ran stably and then failed (ByteRobust
        # §4.2 rolls back from a version, never to the one that just failed); the one before it.
        earlier = last_stable_version(ctx.store, req.job, other_than=head)
        if earlier is None:
            raise ActionRefused(
                f"rollback refused: job {req.job} already runs {commit[:12]}, the only version that has run "
                f"stably (robustctl update list --job {req.job}); pass --to REF to name the version"
            )
        stable, ref = earlier, earlier.commit
        spec, hosts, codes = _inspect(ctx, req.job, ref)
        commit = common_commit(codes, ref)
        head, _ = current_versions(codes)
    require_clean(codes)
    if stable is not None:
        gone = [
            c.id
            for c in changes(ctx.store, req.job, states=(ChangeState.APPLIED, ChangeState.FORCED))
            if c.applied_at is not None and c.applied_at >= stable.started_at and c.commit != commit
        ]
    else:
        gone = [
            c.id
            for c in changes(ctx.store, req.job, states=(ChangeState.APPLIED, ChangeState.FORCED))
            if c.commit == head and c.commit != commit
        ]
    pending = tuple(c.id for c in changes(ctx.store, req.job, states=(ChangeState.PENDING,)))
    unchanged = tuple(c.host for c in codes if c.head == commit)
    n = len(codes) - len(unchanged)
    reason = req.reason or f"robustctl rollback of job {req.job} to {commit[:12]} (no --reason given)"
    steps = (
        f"check out {commit[:12]} on {n} host(s) of job {req.job}, all or none ({len(unchanged)} already on it)",
        "record the rollback in the store"
        + (f" (changes {', '.join(map(str, gone))} rolled back)" if gone else "")
        + (f"; clear pending change(s) {', '.join(map(str, pending))}" if pending else ""),
        f"restart job {req.job}",
    )
    plan = RollbackPlan(
        req.job,
        commit,
        (stable.ref or stable.commit) if stable is not None else req.to,
        source,
        stable,
        tuple((c.host, c.head) for c in codes),
        unchanged,
        tuple(gone),
        pending,
        reason,
        steps,
    )
    return plan, codes, hosts, spec


def run_rollback(
    req: RollbackRequest,
    *,
    confirm: RollbackConfirm | None = None,
    show: RollbackShow | None = None,
    restart: RestartFn | None = None,
    restart_show: ShowPlan | None = None,
) -> RollbackResult:
    """Plan, show, confirm and apply a rollback (see the module docstring).

    ``confirm(plan)`` is asked before anything changes (None: nobody can confirm → UsageError unless
    ``dry_run``); a confirmed rollback restarts without asking again (``restart_show`` shows the
    restart's plan). The store's lock is held from planning through the checkout and the record, and
    released before the restart (which takes it itself).

    Raises: ActionRefused (no stable version and no ``--to``; a dirty work tree; the lock), UsageError,
    ConfigError, HostError (a host could not be read: nothing switched), StoreError.
    """
    from robustctl.actions.session import NO_CONFIRMATION, always
    from robustctl.transport.pool import TransportPool

    check_reason(req.reason, "--reason")
    if req.to is not None:
        check_ref(req.to)
    ctx = _open(req)
    try:
        if not req.dry_run:
            ctx.lock("rollback", req.lock_timeout_s)
        plan, codes, hosts, spec = plan_rollback(ctx, req)
        if show is not None:
            show(plan)
        if req.dry_run:
            return RollbackResult(RollbackOutcome.DRY_RUN, plan, message="dry run: nothing changed")
        if confirm is None:
            raise UsageError(NO_CONFIRMATION)
        if not confirm(plan):
            return RollbackResult(RollbackOutcome.DECLINED, plan, message="declined: nothing changed")
        store = ctx.store
        targets = [h for h, _ in plan.hosts]
        audit_id = store.audit_begin("rollback", targets, plan.reason, plan=to_jsonable(plan))
        store.audit_step_start(audit_id, 0, plan.steps[0])
        pool = TransportPool()
        try:
            switched = switch_work_trees(
                pool,
                hosts,
                spec,
                plan.commit,
                codes=codes,
                concurrency=ctx.inventory.diagnose.concurrency,
                timeout_s=ctx.inventory.diagnose.host_timeout_s,
            )
        except BaseException as exc:
            store.audit_step_end(audit_id, 0, "failed", f"{type(exc).__name__}: {exc}")
            store.audit_finish(audit_id, "failed", f"interrupted: {type(exc).__name__}: {exc}")
            raise
        finally:
            pool.close()
        if not switched.ok:
            store.audit_step_end(audit_id, 0, "failed", switched.message)
            store.audit_finish(audit_id, "failed", switched.message + "; the rest skipped")
            return RollbackResult(
                RollbackOutcome.FAILED, plan, switched, audit_id=audit_id, message=switched.message
            )
        store.audit_step_end(audit_id, 0, "done", switched.message)
        store.audit_step_start(audit_id, 1, plan.steps[1])
        change = record_change(
            store,
            req.job,
            ref=plan.ref or plan.commit,
            commit=plan.commit,
            from_ref=current_versions(codes)[0],
            reason=plan.reason,
            kind="rollback",
            state=ChangeState.APPLIED,
            note=f"rollback ({plan.source})",
        )
        mark_rollback(store, req.job, plan.rolled_back, f"rolled back by change {change.id}: {plan.reason}")
        store.audit_step_end(audit_id, 1, "done", f"change {change.id} recorded")
        started = store.clock()
        store.audit_step_start(audit_id, 2, plan.steps[2])
        ctx.store.unlock()
    except BaseException:
        ctx.close()
        raise
    try:
        res = (restart or default_restart)(req.job, plan.reason, req, always, restart_show)
    except BaseException as exc:
        store.audit_step_end(audit_id, 2, "failed", f"{type(exc).__name__}: {exc}")
        store.audit_finish(audit_id, "failed", f"checked out {plan.commit[:12]}; the restart failed: {exc}")
        ctx.close()
        raise
    from robustctl.commands.base import result_json

    rc = int(res.exit_code)
    try:
        if rc == 0:
            record_version_start(
                store, req.job, plan.commit, started_at=started, ref=plan.ref, change_id=change.id
            )
            store.audit_step_end(audit_id, 2, "done", f"restart: {getattr(res, 'outcome', 'ok')}")
            store.audit_finish(audit_id, "applied", f"job {req.job} on {plan.commit[:12]} and restarted")
            outcome, msg = (
                RollbackOutcome.APPLIED,
                f"job {req.job} rolled back to {plan.commit[:12]} and restarted",
            )
        else:
            store.audit_step_end(audit_id, 2, "failed", f"restart exited {rc}")
            store.audit_finish(
                audit_id, "failed", f"checked out {plan.commit[:12]}; the restart failed (exit {rc})"
            )
            outcome, msg = (
                RollbackOutcome.RESTART_FAILED,
                (
                    f"job {req.job} checked out {plan.commit[:12]} on every host, but the restart failed (exit {rc})"
                ),
            )
    finally:
        ctx.close()
    return RollbackResult(
        outcome, plan, switched, restart=result_json(res), restart_exit=rc, audit_id=audit_id, message=msg
    )
