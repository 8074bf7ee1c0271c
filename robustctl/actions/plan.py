"""Plans of destructive actions and the one engine that applies them.

Every action (evict, return, standby add/activate, restart, stop, rollback) is *plan → render → apply*:
a planner builds a frozen :class:`Plan` (targets, ordered :class:`Step` s, the safety rails evaluated,
the reason and the evidence),
``--dry-run`` prints it (``--json``: exactly the document :func:`apply_plan` records in the audit log),
and :func:`apply_plan` runs it step by step:

1. refuse when a rail failed and the plan is not forced (:class:`~robustctl.errors.ActionRefused`,
   naming the rule and its override; the refusal is audited);
2. append the audit record (status ``started``, the plan JSON) *before* anything changes; the store
   then checks that the record reads back and the tables an action writes are sound
   (:meth:`~robustctl.store.Store.check_audit`): a store that fails stops the action, nothing applied;
3. per step: record it ``running``, run it (idempotent: a host already in the wanted state is a
   ``noop``), record ``done``/``noop``/``failed``; the first failure stops the plan;
4. record the final status: ``applied``, ``nothing-to-do`` (every step was a no-op) or ``failed``
   (:class:`~robustctl.store.AuditStatus`).

A process killed during step k leaves steps < k ``done``/``noop``, step k ``running`` and the record
``started``: exactly what ran. For tests, ``ROBUSTCTL_TEST_STEP_SLEEP_S`` (seconds) makes every step
sleep after it is recorded ``running`` and before it runs.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from robustctl.actions.hosts import job_hosts
from robustctl.ckpt.state import CheckpointSurvival
from robustctl.errors import ActionRefused, RobustctlError
from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION, to_jsonable
from robustctl.schedulers.base import Scheduler
from robustctl.store import AuditStatus, MachineState, Readiness, Store, StoreError

__all__ = [
    "ApplyResult",
    "Plan",
    "RailCheck",
    "Step",
    "StepKind",
    "StepResult",
    "StepRunner",
    "apply_json",
    "apply_plan",
    "audit_refusal",
    "plan_json",
]

STEP_SLEEP_ENV = "ROBUSTCTL_TEST_STEP_SLEEP_S"
"""Testing hook: seconds each step sleeps between being recorded ``running`` and running."""


class StepKind(str, enum.Enum):
    """What a step does."""

    DRAIN = "drain"
    """scheduler.drain(host)."""
    RESUME = "resume"
    """scheduler.resume(host)."""
    HOLD_STANDBY = "hold_standby"
    """scheduler.hold_standby(host)."""
    MARK = "mark"
    """Record the host's lifecycle state (and readiness) in the store."""
    REPLACE = "replace_host"
    """scheduler.replace_host(job, host, new_host)."""
    JOB_HOSTS = "job_hosts"
    """Record in the store that ``new_host`` took ``host``'s place in ``job``."""
    REQUEUE = "requeue"
    """scheduler.requeue(job)."""
    STOP_JOB = "stop_job"
    """End the job's process trees on its hosts: TERM, grace, KILL, verify (robustctl.actions.restart)."""
    APPLY_UPDATE = "apply_update"
    """Check the job's pending code change out on every host, all or none (robustctl.jobcode)."""
    PICK_CHECKPOINT = "pick_checkpoint"
    """Choose the checkpoint iteration the job restarts from (robustctl.actions.restart)."""
    STAGE_CHECKPOINT = "stage_checkpoint"
    """Copy the chosen iteration's shards to the hosts that load them and lack them (robustctl.ckpt.stage)."""
    LAUNCH = "launch"
    """Start the job's processes from its ``launch:`` section (robustctl.actions.restart)."""
    WAIT_RUNNING = "wait_running"
    """Wait until every rank of the job runs, or the start timeout passes (robustctl.actions.restart)."""
    CHECKOUT = "checkout"
    """Check one commit out on every host of the job, all or none (robustctl.actions.rollback)."""
    RECORD_CHANGE = "record_change"
    """Record a code change of the job in the store (robustctl.actions.rollback)."""
    RESTART_JOB = "restart_job"
    """Restart the job through its own restart action, audited on its own (robustctl.actions.rollback)."""


StepRunner = Callable[["Step", "Plan"], tuple[bool, str]]
"""Runs one step of a kind the scheduler does not handle; returns ``(changed, detail)`` and raises a
:class:`~robustctl.errors.RobustctlError` when the step failed (:func:`apply_plan`'s ``runners``)."""

_JOB_STEP_VERBS = {
    StepKind.STOP_JOB: "stop job",
    StepKind.APPLY_UPDATE: "apply the pending code update of job",
    StepKind.PICK_CHECKPOINT: "pick the checkpoint of job",
    StepKind.STAGE_CHECKPOINT: "stage the checkpoint's shards of job",
    StepKind.LAUNCH: "launch job",
    StepKind.WAIT_RUNNING: "wait until every rank runs: job",
    StepKind.CHECKOUT: "check out on every host, all or none, the code of job",
    StepKind.RECORD_CHANGE: "record the code change of job",
    StepKind.RESTART_JOB: "restart job",
}


@dataclass(frozen=True)
class Step:
    """One idempotent step of a plan.

    Attributes:
        kind: what it does. host: the host it acts on. via: the scheduler's name, or ``"store"``.
        to_state: MARK: the lifecycle state; readiness: MARK: the standby readiness (or None: kept).
        job / new_host: REPLACE, JOB_HOSTS, REQUEUE. noop: already in the wanted state when planned
        (it still runs, and is re-checked, at apply). note: why it is there, one line.
    """

    kind: StepKind
    host: str
    via: str
    to_state: MachineState | None = None
    readiness: Readiness | None = None
    job: str | None = None
    new_host: str | None = None
    noop: bool = False
    note: str = ""

    def describe(self) -> str:
        """One line, e.g. ``"drain node017 via slurm"``."""
        if self.kind is StepKind.MARK:
            ready = f" ({self.readiness.value})" if self.readiness else ""
            state = self.to_state.value if self.to_state else "?"
            return f"mark {self.host} {state}{ready} in the store"
        if self.kind is StepKind.REPLACE:
            return f"replace {self.host} by {self.new_host} in job {self.job} via {self.via}"
        if self.kind is StepKind.JOB_HOSTS:
            return f"record {self.new_host} in place of {self.host} in job {self.job} in the store"
        if self.kind is StepKind.REQUEUE:
            return f"requeue job {self.job} via {self.via}"
        if self.kind in _JOB_STEP_VERBS:
            return f"{_JOB_STEP_VERBS[self.kind]} {self.job} via {self.via}" + (
                f": {self.note}" if self.note else ""
            )
        return f"{self.kind.value.replace('_', ' ')} {self.host} via {self.via}"


@dataclass(frozen=True)
class RailCheck:
    """One safety rail evaluated on a plan.

    Attributes:
        rule: its name (``non-empty-targets``, ``max-evictions-per-hour``, ``max-cluster-fraction``,
            ``max-job-fraction``, ``circuit-breaker``, ...). passed: whether the plan is within it.
        detail: the numbers, one line. override: how to override it (or why it cannot be).
        overridable: False for rules ``--force`` cannot override (an empty target set).
    """

    rule: str
    passed: bool
    detail: str
    override: str
    overridable: bool = True


@dataclass(frozen=True)
class Plan:
    """A destructive action, fully resolved, before it runs.

    Attributes:
        action: ``evict``, ``return``, ``standby-add``, ``standby-activate``.
        targets: the hosts it acts on (machine/inventory order). steps: in execution order.
        reason: why (recorded in the scheduler and the audit log). scheduler: the back end's name.
        rails: every rail evaluated. source: the report file the targets came from, if any.
        suspects: the hosts named as bad (before over-eviction). job / over_evict / group: the job,
        the ``--over-evict`` mode and the group that was chosen (one line). forced / force_reason:
        failing rails were overridden with ``--force`` and why. notes: other observations.
        checkpoints: evict: whether each affected job's newest complete checkpoint survives
        (:func:`robustctl.ckpt.evict.evict_survival`; information, not a rail).
        schema_version, kind (``"plan"``).
    """

    action: str
    targets: tuple[str, ...]
    steps: tuple[Step, ...]
    reason: str
    scheduler: str
    rails: tuple[RailCheck, ...] = ()
    source: str | None = None
    suspects: tuple[str, ...] = ()
    job: str | None = None
    over_evict: str | None = None
    group: str | None = None
    forced: bool = False
    force_reason: str | None = None
    notes: tuple[str, ...] = ()
    checkpoints: tuple[CheckpointSurvival, ...] = ()
    schema_version: int = SCHEMA_VERSION
    kind: str = "plan"

    @property
    def failed_rails(self) -> tuple[RailCheck, ...]:
        """The rails the plan breaks."""
        return tuple(r for r in self.rails if not r.passed)

    @property
    def refused(self) -> bool:
        """True when a rail failed that is not overridden (forced only overrides overridable rules)."""
        return any(not r.overridable or not self.forced for r in self.failed_rails)

    @property
    def nothing_to_do(self) -> bool:
        """True when every step is already done (or there is none)."""
        return all(s.noop for s in self.steps)

    def refusal(self) -> ActionRefused:
        """The error naming every failing rule and its override."""
        parts = [
            f"rule {r.rule}: {r.detail}; " + (f"to override: {r.override}" if r.overridable else r.override)
            for r in self.failed_rails
        ]
        return ActionRefused(f"{self.action} refused by the safety rails: " + " | ".join(parts))


def plan_json(plan: Plan) -> dict[str, Any]:
    """The plan as the JSON document ``--dry-run --json`` prints and the audit log records."""
    out: dict[str, Any] = to_jsonable(plan)
    for step, obj in zip(out["steps"], plan.steps, strict=True):
        step["description"] = obj.describe()
    return out


@dataclass(frozen=True)
class StepResult:
    """What one step did: ``status`` ``done``, ``noop``, ``failed`` or ``skipped`` (after a failure)."""

    index: int
    description: str
    status: str
    detail: str


@dataclass(frozen=True)
class ApplyResult:
    """The outcome of :func:`apply_plan` (the ``--json`` document of an applied action).

    Attributes:
        plan: what was applied. audit_id: its audit record. status (the audit record's too):
        ``applied`` (a step changed something, none failed), ``nothing-to-do`` (every step a noop),
        ``failed`` (a step failed; later ones skipped).
        results: one per step. message: one line. schema_version, kind (``"apply"``).
    """

    plan: Plan
    audit_id: int
    status: str
    results: tuple[StepResult, ...]
    message: str
    schema_version: int = SCHEMA_VERSION
    kind: str = "apply"

    @property
    def exit_code(self) -> ExitCode:
        """OK (0) when applied or nothing to do, UNKNOWN (3) when a step failed."""
        return ExitCode.UNKNOWN if self.status == "failed" else ExitCode.OK


def apply_json(result: ApplyResult) -> dict[str, Any]:
    """The applied action as the ``--json`` document: the result with the plan as :func:`plan_json` prints it."""
    out: dict[str, Any] = to_jsonable(result)
    out["plan"] = plan_json(result.plan)
    return out


def _run_step(
    step: Step,
    plan: Plan,
    scheduler: Scheduler,
    store: Store,
    audit_id: int,
    runners: Mapping[StepKind, StepRunner],
) -> tuple[bool, str]:
    """Run one step; return (changed, detail)."""
    if step.kind in runners:
        return runners[step.kind](step, plan)
    if step.kind in _JOB_STEP_VERBS:
        raise RobustctlError(
            f"no runner for step kind {step.kind.value} (the action that planned it runs it)"
        )
    if step.kind is StepKind.DRAIN:
        r = scheduler.drain([step.host], plan.reason)[0]
    elif step.kind is StepKind.RESUME:
        r = scheduler.resume([step.host], plan.reason)[0]
    elif step.kind is StepKind.HOLD_STANDBY:
        r = scheduler.hold_standby([step.host], plan.reason)[0]
    elif step.kind is StepKind.REPLACE:
        assert step.job is not None and step.new_host is not None
        r = scheduler.replace_host(step.job, step.host, step.new_host)
    elif step.kind is StepKind.REQUEUE:
        assert step.job is not None
        r = scheduler.requeue(step.job)
    elif step.kind is StepKind.JOB_HOSTS:
        assert step.job is not None and step.new_host is not None
        hosts = list(job_hosts(step.job, scheduler=scheduler, store=store).hosts)
        if step.host in hosts:
            hosts[hosts.index(step.host)] = step.new_host
        elif step.new_host not in hosts:
            raise RobustctlError(f"{step.host} is not in job {step.job}")
        if store.job_hosts(step.job) == hosts:
            return False, f"{step.new_host} already recorded in place of {step.host}"
        store.set_job_hosts(step.job, hosts)
        return True, f"job {step.job}: {step.host} → {step.new_host}"
    else:
        assert step.to_state is not None
        changed = store.set_state(
            step.host, step.to_state, plan.reason, readiness=step.readiness, audit_id=audit_id
        )
        return changed, (f"now {step.to_state.value}" if changed else f"already {step.to_state.value}")
    return r.changed, r.detail


def audit_refusal(plan: Plan, store: Store) -> int | None:
    """Record the refusal of ``plan`` in the audit log (status ``refused``, no step); return its id.

    Best effort: a store that cannot be written returns None (the refusal stands either way).

    Args:
        plan: the refused plan.
        store: the store whose audit log records it.

    Returns:
        The audit record's id, or None when the store could not be written.
    """
    try:
        return store.audit_begin(
            plan.action,
            plan.targets,
            plan.reason,
            plan=plan_json(plan),
            evidence=plan.source,
            status=AuditStatus.REFUSED.value,
            message=str(plan.refusal()),
        )
    except StoreError:
        return None


def apply_plan(
    plan: Plan, scheduler: Scheduler, store: Store, *, runners: Mapping[StepKind, StepRunner] | None = None
) -> ApplyResult:
    """Apply ``plan`` step by step with an audit record (see the module docstring).

    ``runners`` run the steps of the kinds they name (the job steps of ``restart``: stop, pick the
    checkpoint, launch, wait running); every other step goes to the scheduler or the store.

    Args:
        plan: the plan to apply.
        scheduler: the back end that runs the scheduler steps (drain, resume, replace, requeue, ...).
        store: the state store: the audit record, and the steps that mark hosts or record job hosts.
        runners: the runners of the step kinds they name (None: none).

    Returns:
        What each step did and the final status (the audit record's), ``failed`` when a step failed.

    Raises:
        ActionRefused: a rail failed and the plan is not forced (audited as ``refused``).
        StoreError: the store cannot be written; raised before any step when it is the audit record
            (or the record does not read back: :meth:`~robustctl.store.Store.check_audit`), else after
            recording what ran as far as the store allows.
    """
    doc = plan_json(plan)
    if plan.refused:
        audit_refusal(plan, store)
        raise plan.refusal()
    audit_id = store.audit_begin(
        plan.action, plan.targets, plan.reason, plan=doc, evidence=plan.source, forced=plan.forced
    )
    sleep_s = float(os.environ.get(STEP_SLEEP_ENV) or 0)
    results: list[StepResult] = []
    failed: str | None = None
    try:
        for i, step in enumerate(plan.steps):
            desc = step.describe()
            if failed is not None:
                results.append(StepResult(i, desc, "skipped", "an earlier step failed"))
                continue
            store.audit_step_start(audit_id, i, desc)
            if sleep_s > 0:
                time.sleep(sleep_s)
            try:
                changed, detail = _run_step(step, plan, scheduler, store, audit_id, runners or {})
            except RobustctlError as exc:  # SchedulerError, StoreError, a job that changed under us
                failed = f"step {i} ({desc}) failed: {exc}"
                store.audit_step_end(audit_id, i, "failed", str(exc))
                results.append(StepResult(i, desc, "failed", str(exc)))
                continue
            status = "done" if changed else "noop"
            store.audit_step_end(audit_id, i, status, detail)
            results.append(StepResult(i, desc, status, detail))
    except BaseException as exc:
        try:
            store.audit_finish(
                audit_id, AuditStatus.FAILED.value, f"interrupted: {type(exc).__name__}: {exc}"
            )
        except StoreError:
            pass
        raise
    done = sum(r.status == "done" for r in results)
    if failed is not None:
        status, message = (
            AuditStatus.FAILED.value,
            failed + f"; {done} step(s) done before it, the rest skipped",
        )
    elif done == 0:
        status, message = AuditStatus.NOTHING_TO_DO.value, "every step was already done"
    else:
        status, message = (
            AuditStatus.APPLIED.value,
            f"{done} step(s) done, {len(results) - done} already done",
        )
    store.audit_finish(audit_id, status, message)
    return ApplyResult(plan, audit_id, status, tuple(results), message)
