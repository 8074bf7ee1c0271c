"""Roll a job's code back: plan → show → confirm → apply, through the one action executor.

A rollback checks out the last version of the job that ran stably other than the one its hosts run now
(or ``--to REF``) on every host, all or none, records it, and restarts the job. It is two things:

* the :class:`RollbackPlan`, the document a person sees (``show``), confirms (``confirm``) and finds in
  the ``rollback`` result: the commit, where it came from, each host's current ``HEAD``, the changes it
  takes away and the pending ones it clears, one line per step;
* an :class:`~robustctl.actions.plan.Plan` (action ``rollback``) of three steps, run by the action
  session and :func:`~robustctl.actions.plan.apply_plan` like every other action, with the same audit
  record (begun before anything changes, each step begun and ended, then finished):

  0. ``checkout``: the commit on every host, all or none (:func:`robustctl.jobcode.git.switch_code`:
     a host that fails puts every switched host back, and the step fails: nothing switched, nothing
     recorded, no restart);
  1. ``record_change``: a ``rollback`` change recorded ``applied``, the changes it takes away marked
     ``rolled-back`` and the pending ones ``superseded`` (:func:`robustctl.jobcode.records.mark_rollback`);
  2. ``restart_job``: the store's lock released, then the caller's restart (``robustctl restart``, an
     action of its own with its own audit record). The restart takes the lock itself: it is another
     action session on the same store, and a lock held here would make it wait for this one until its
     ``lock_timeout_s`` passed and refuse. A restart that exits 0 records the version's start
     (stability counts from it); one that exits otherwise fails the step (outcome ``restart-failed``).

Errors a step meets that are not "the step failed" (a host that cannot be read, a dirty work tree found
at apply time, a store that cannot be written, the restart's own errors such as StoreLocked) are raised
to the caller, as the command raises them, after the audit record has recorded the step ``failed``.

Outcomes are the session's (:class:`~robustctl.actions.session.Outcome`): ``dry-run``, ``declined``,
``applied``, ``failed`` (the checkout) and ``restart-failed``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from robustctl.actions.plan import Plan, Step, StepKind, StepRunner
from robustctl.actions.session import ActionResult, ActionSession, Confirm, Outcome, ShowPlan
from robustctl.errors import ActionRefused, RobustctlError
from robustctl.exit_codes import ExitCode
from robustctl.jobcode.git import (
    HostCode,
    SwitchResult,
    check_ref,
    common_commit,
    current_versions,
    inspect_job,
    job_code_hosts,
    require_clean,
    switch_code,
)
from robustctl.jobcode.records import (
    ChangeState,
    CodeChange,
    JobVersion,
    changes,
    last_stable_version,
    mark_rollback,
    record_change,
    record_version_start,
)
from robustctl.models import SCHEMA_VERSION, result_json, to_jsonable

if TYPE_CHECKING:
    from robustctl.actions import ActionContext

__all__ = [
    "PlannedRollback",
    "RestartCall",
    "RollbackConfirm",
    "RollbackPlan",
    "RollbackResult",
    "RollbackRun",
    "RollbackShow",
    "RollbackSpec",
    "plan_rollback",
    "rollback",
    "rollback_runners",
]

RestartCall = Callable[[str, str], Any]
"""``restart(job, reason) -> result``: restarts the job as an action of its own (it takes the store's
lock itself); the result has an ``exit_code`` (and, for the audit line, an ``outcome``)."""


@dataclass(frozen=True)
class RollbackSpec:
    """The planner's input.

    Attributes:
        job: the inventory job. to: a checked ref to go back to (None: the last stable version).
        reason: why ("" → a default naming the job and the commit).
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
        outcome: :class:`~robustctl.actions.session.Outcome` (``dry-run``, ``declined``, ``applied``,
        ``failed``, ``restart-failed``). plan. switch: the checkout's per-host result (None unless it
        ran). restart: the restart's JSON document (None unless it ran). restart_exit. audit_id.
        message: one line. schema_version.
    """

    outcome: Outcome
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
        if self.outcome is Outcome.FAILED:
            return ExitCode.UNKNOWN
        if self.outcome is Outcome.RESTART_FAILED:
            return ExitCode(self.restart_exit or ExitCode.UNKNOWN)
        return ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document: the fields, plus ``exit_code``."""
        doc: dict[str, Any] = to_jsonable(self)
        doc["exit_code"] = int(self.exit_code)
        return doc


RollbackConfirm = Callable[[RollbackPlan], bool]
"""Asked with the rollback's plan before anything changes; True applies it."""
RollbackShow = Callable[[RollbackPlan], None]
"""Called with the rollback's plan once built (dry runs too)."""


@dataclass(frozen=True)
class PlannedRollback:
    """A planned rollback: the document and the plan the executor runs.

    Attributes:
        doc: the :class:`RollbackPlan` (shown, confirmed, returned). plan: the three-step
        :class:`~robustctl.actions.plan.Plan` (action ``rollback``). codes: every host's work tree as
        read with the target resolved (what a failed checkout puts back).
    """

    doc: RollbackPlan
    plan: Plan
    codes: tuple[HostCode, ...]


# ------------------------------------------------------------------------------------------ planning
@dataclass(frozen=True)
class _Target:
    """The commit a rollback goes to, as read on the hosts."""

    stable: JobVersion | None
    codes: tuple[HostCode, ...]
    commit: str
    head: str | None


def _first_ref(ctx: ActionContext, spec: RollbackSpec) -> tuple[JobVersion | None, str]:
    """``--to`` (checked), else the last stable version.

    Args:
        ctx: the action context (its store holds the versions).
        spec: what was asked (the job, ``--to``).

    Returns:
        ``(stable, ref)``: the stable version (None with ``--to``) and the ref to resolve on the hosts.

    Raises:
        ActionRefused: no ``--to`` and no version of the job has run stably.
        UsageError: ``--to`` is not a ref robustctl accepts; without ``--to`` or a stable version, a
            job not in the inventory (said before the refusal).
        ConfigError: without ``--to`` or a stable version, a job without a ``code:`` section.
    """
    if spec.to is not None:
        return None, check_ref(spec.to)
    stable = last_stable_version(ctx.store, spec.job)
    if stable is None:
        job_code_hosts(ctx, spec.job)  # an unknown job or no code: section says so first
        raise ActionRefused(
            f"rollback refused: no version of job {spec.job} has run stably yet (robustctl update list "
            f"--job {spec.job}); pass --to REF to name the version"
        )
    return stable, stable.commit


def _read(ctx: ActionContext, job: str, stable: JobVersion | None, ref: str) -> _Target:
    """Resolve ``ref`` on every host of ``job`` (one commit everywhere) and read their HEADs."""
    _, _, codes = inspect_job(ctx, job, ref)
    commit = common_commit(codes, ref)
    return _Target(stable, codes, commit, current_versions(codes)[0])


def _target(ctx: ActionContext, spec: RollbackSpec) -> _Target:
    """The rollback's target, read on every host, work trees clean.

    The job may already run the last stable version: it ran stably and then failed (ByteRobust §4.2
    rolls back from a version, never to the one that just failed), so the stable one before it.

    Args:
        ctx: the action context.
        spec: what was asked (the job, ``--to``).

    Returns:
        The stable version gone to (None with ``--to``), the hosts' work trees, the target commit and
        the commit the hosts run now.

    Raises:
        ActionRefused: no stable version; only the running one; a dirty work tree.
        UsageError / ConfigError / HostError: see :func:`robustctl.jobcode.git.common_commit`.
    """
    stable, ref = _first_ref(ctx, spec)
    found = _read(ctx, spec.job, stable, ref)
    if stable is not None and found.commit == found.head:
        earlier = last_stable_version(ctx.store, spec.job, other_than=found.head)
        if earlier is None:
            raise ActionRefused(
                f"rollback refused: job {spec.job} already runs {found.commit[:12]}, the only version that "
                f"has run stably (robustctl update list --job {spec.job}); pass --to REF to name the version"
            )
        found = _read(ctx, spec.job, earlier, earlier.commit)
    require_clean(found.codes)
    return found


def _rolled_back(ctx: ActionContext, job: str, target: _Target) -> tuple[int, ...]:
    """The applied changes the rollback takes away: those applied since the stable version started
    (the ones on ``--to``'s commit kept), or with ``--to`` the ones that put the running commit there.

    Args:
        ctx: the action context (its store holds the changes).
        job: the job rolled back.
        target: the rollback's target as read on the hosts.

    Returns:
        The ids of the changes rolled back, oldest first.
    """
    applied = changes(ctx.store, job, states=(ChangeState.APPLIED, ChangeState.FORCED))
    if target.stable is not None:
        since = target.stable.started_at
        return tuple(
            c.id
            for c in applied
            if c.applied_at is not None and c.applied_at >= since and c.commit != target.commit
        )
    return tuple(c.id for c in applied if c.commit == target.head and c.commit != target.commit)


def _record_what(gone: tuple[int, ...], pending: tuple[int, ...]) -> str:
    """What the record step changes besides the new change, e.g. `` (changes 3 rolled back)``."""
    return (f" (changes {', '.join(map(str, gone))} rolled back)" if gone else "") + (
        f"; clear pending change(s) {', '.join(map(str, pending))}" if pending else ""
    )


def _document(ctx: ActionContext, spec: RollbackSpec, target: _Target) -> RollbackPlan:
    """The :class:`RollbackPlan` of ``target``."""
    gone = _rolled_back(ctx, spec.job, target)
    pending = tuple(c.id for c in changes(ctx.store, spec.job, states=(ChangeState.PENDING,)))
    commit, codes = target.commit, target.codes
    unchanged = tuple(c.host for c in codes if c.head == commit)
    reason = spec.reason or f"robustctl rollback of job {spec.job} to {commit[:12]} (no --reason given)"
    steps = (
        f"check out {commit[:12]} on {len(codes) - len(unchanged)} host(s) of job {spec.job}, all or none "
        f"({len(unchanged)} already on it)",
        "record the rollback in the store" + _record_what(gone, pending),
        f"restart job {spec.job}",
    )
    stable = target.stable
    return RollbackPlan(
        spec.job,
        commit,
        (stable.ref or stable.commit) if stable is not None else spec.to,
        "last-stable" if stable is not None else "--to",
        stable,
        tuple((c.host, c.head) for c in codes),
        unchanged,
        gone,
        pending,
        reason,
        steps,
    )


def _action_plan(ctx: ActionContext, doc: RollbackPlan) -> Plan:
    """The three steps the executor runs for ``doc`` (see the module docstring)."""
    job, short = doc.job, doc.commit[:12]
    switched = len(doc.hosts) - len(doc.unchanged)
    steps = (
        Step(
            StepKind.CHECKOUT,
            job,
            "git",
            job=job,
            note=f"{short} on {switched} host(s) ({len(doc.unchanged)} already on it)",
        ),
        Step(
            StepKind.RECORD_CHANGE,
            job,
            "store",
            job=job,
            note=f"rollback to {short}" + _record_what(doc.rolled_back, doc.pending),
        ),
        Step(
            StepKind.RESTART_JOB,
            job,
            "robustctl",
            job=job,
            note="its own restart action (it takes the store's lock itself)",
        ),
    )
    return Plan(
        action="rollback",
        targets=tuple(h for h, _ in doc.hosts),
        steps=steps,
        reason=doc.reason,
        scheduler=ctx.scheduler.name,
        job=job,
        notes=(f"{doc.source}: {doc.ref or doc.commit} = {doc.commit}",),
    )


def plan_rollback(ctx: ActionContext, spec: RollbackSpec) -> PlannedRollback:
    """Resolve the target on every host and build the plan (reads only).

    Args:
        ctx: the open action context (the store's lock taken unless dry run).
        spec: what was asked.

    Returns:
        The document and the executor's plan (:class:`PlannedRollback`).

    Raises:
        ActionRefused: no stable version and no ``--to``; only the running version ran stably; a
            dirty work tree.
        UsageError / ConfigError / HostError: see :func:`robustctl.jobcode.git.common_commit`.
    """
    target = _target(ctx, spec)
    doc = _document(ctx, spec, target)
    return PlannedRollback(doc, _action_plan(ctx, doc), target.codes)


# --------------------------------------------------------------------------------------------- apply
class _StepFailed(RobustctlError):
    """A rollback step failed (its audit step says why); raised to :func:`apply_plan`, never further."""


@dataclass
class RollbackRun:
    """What the rollback's steps share while they run, read back once apply has finished.

    Attributes:
        switch: the checkout's result. change: the recorded change. restart: the restart's result.
        error: an error a step met that the caller must see (raised once the audit record is written).
    """

    switch: SwitchResult | None = None
    change: CodeChange | None = None
    restart: Any = None
    error: RobustctlError | None = None


def _carrying(run: RollbackRun, fn: StepRunner) -> StepRunner:
    """``fn``, with an error other than :class:`_StepFailed` kept in ``run.error`` and the step failed."""

    def runner(step: Step, plan: Plan) -> tuple[bool, str]:
        try:
            return fn(step, plan)
        except _StepFailed:
            raise
        except RobustctlError as exc:
            run.error = exc
            raise _StepFailed(f"{type(exc).__name__}: {exc}") from exc

    return runner


def rollback_runners(
    ctx: ActionContext, planned: PlannedRollback, restart: RestartCall, run: RollbackRun
) -> dict[StepKind, StepRunner]:
    """The runners of the rollback's steps for :func:`~robustctl.actions.plan.apply_plan`.

    Args:
        ctx: the session's context.
        planned: from :func:`plan_rollback`.
        restart: see :data:`RestartCall`.
        run: filled in as the steps run.

    Returns:
        One runner per step kind (``checkout``, ``record_change``, ``restart_job``); each records what
        it did in ``run`` and fails its step by raising.
    """
    doc = planned.doc
    names = [h for h, _ in doc.hosts]

    def checkout(step: Step, plan: Plan) -> tuple[bool, str]:
        result = run.switch = switch_code(ctx, doc.job, names, doc.commit, codes=planned.codes)
        if not result.ok:
            raise _StepFailed(result.message)
        return True, result.message

    def record(step: Step, plan: Plan) -> tuple[bool, str]:
        change = run.change = record_change(
            ctx.store,
            doc.job,
            ref=doc.ref or doc.commit,
            commit=doc.commit,
            from_ref=current_versions(planned.codes)[0],
            reason=doc.reason,
            kind="rollback",
            state=ChangeState.APPLIED,
            note=f"rollback ({doc.source})",
        )
        mark_rollback(ctx.store, doc.job, doc.rolled_back, f"rolled back by change {change.id}: {doc.reason}")
        return True, f"change {change.id} recorded"

    def restart_job(step: Step, plan: Plan) -> tuple[bool, str]:
        started = ctx.store.clock()
        ctx.store.unlock()  # the restart is an action session of its own: it takes the lock itself
        res = run.restart = restart(doc.job, doc.reason)
        rc = int(res.exit_code)
        if rc != 0:
            raise _StepFailed(f"restart exited {rc}")
        change_id = run.change.id if run.change is not None else None
        record_version_start(
            ctx.store, doc.job, doc.commit, started_at=started, ref=doc.ref, change_id=change_id
        )
        return True, f"restart: {getattr(res, 'outcome', 'ok')}"

    return {
        StepKind.CHECKOUT: _carrying(run, checkout),
        StepKind.RECORD_CHANGE: _carrying(run, record),
        StepKind.RESTART_JOB: _carrying(run, restart_job),
    }


def _result(doc: RollbackPlan, done: ActionResult, run: RollbackRun) -> RollbackResult:
    """The :class:`RollbackResult` of the session's ``done``."""
    if done.applied is None:  # dry run or declined
        what = "dry run" if done.outcome is Outcome.DRY_RUN else "declined"
        return RollbackResult(done.outcome, doc, message=f"{what}: nothing changed")
    if run.restart is None:
        message = run.switch.message if run.switch is not None else done.applied.message
        return RollbackResult(Outcome.FAILED, doc, run.switch, audit_id=done.audit_id, message=message)
    rc, short = int(run.restart.exit_code), doc.commit[:12]
    if done.outcome is Outcome.APPLIED:
        outcome, message = Outcome.APPLIED, f"job {doc.job} rolled back to {short} and restarted"
    else:
        outcome = Outcome.RESTART_FAILED
        message = f"job {doc.job} checked out {short} on every host, but the restart failed (exit {rc})"
    return RollbackResult(
        outcome,
        doc,
        run.switch,
        restart=result_json(run.restart),
        restart_exit=rc,
        audit_id=done.audit_id,
        message=message,
    )


def rollback(
    open_session: Callable[[Confirm | None, ShowPlan | None], ActionSession],
    spec: RollbackSpec,
    restart: RestartCall,
    *,
    confirm: RollbackConfirm | None = None,
    show: RollbackShow | None = None,
) -> RollbackResult:
    """Plan, show, confirm and apply a rollback in one action session (see the module docstring).

    Args:
        open_session: builds the ``rollback`` session from the plan hooks it is given (the caller's
            inventory, state, dry run and lock wait).
        spec: what was asked.
        restart: see :data:`RestartCall`.
        confirm: the confirmation hook, given the :class:`RollbackPlan` (None: nobody can confirm, a
            UsageError unless dry run).
        show: the display hook, given the :class:`RollbackPlan` once built (None: not shown).

    Returns:
        The :class:`RollbackResult`.

    Raises:
        ActionRefused: see :func:`plan_rollback`.
        StoreLocked: the store's lock is held by another process.
        UsageError / ConfigError / StoreError: as planning or a step met them.
        HostError: a host could not be read (nothing switched).
        RobustctlError: the restart's own errors, as ``restart`` raised them.
    """
    planned: list[PlannedRollback] = []

    def plan_show(plan: Plan) -> None:
        if show is not None:
            show(planned[0].doc)

    def plan_confirm(plan: Plan) -> bool:
        return confirm is not None and confirm(planned[0].doc)

    with open_session(None if confirm is None else plan_confirm, plan_show) as session:
        planned.append(plan_rollback(session.ctx, spec))
        run = RollbackRun()
        runners = rollback_runners(session.ctx, planned[0], restart, run)
        done = session.settle(planned[0].plan, runners=runners)
        if run.error is not None:
            raise run.error
        return _result(planned[0].doc, done, run)
