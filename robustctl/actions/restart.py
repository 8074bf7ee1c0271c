"""Restart (and stop) a training job: plan → show → apply, one audited step at a time.

A restart brings a job back on its current machines (after an eviction and a standby activation:
the new host list, :meth:`ActionContext.job_hosts`). What it does depends on the scheduler back end:

* ``inventory`` (robustctl launches the job itself, from the job's ``launch:`` section):

  1. ``stop_job``: end the job's process trees on every machine (found by ``process.match``;
     SIGTERM, ``launch.stop_grace_s``, SIGKILL, verified gone: :func:`robustctl.jobs.launch.stop_job`);
     the inventory's machines of the job that a standby replaced are stopped too, best effort (an
     evicted machine may be down: what happens there is reported, not required);
  2. ``apply_update``: the pending code change checked out on every host, all or none
     (:func:`_code_update_steps`), when the job has a ``code:`` section and one is pending;
  3. ``pick_checkpoint``: the iteration to restart from (:func:`_pick_checkpoint`: the newest complete
     one, from one read of the checkpoint directories), passed to the launch as ``{ckpt_iter}``;
  3b. ``stage_checkpoint`` (checkpoint directories local to each host, ``ckpt.shared: false``): the
     chosen iteration's shards copied onto the hosts that load them and lack them (planned from the
     same read), a warm standby
     that took an evicted machine's place (:mod:`robustctl.ckpt.stage`: from a backup peer still in
     the job, chunk by chunk through robustctl, renamed into place whole); a copy that fails fails
     the step before anything is launched;
  4. ``launch``: start the processes detached (:func:`robustctl.jobs.launch.launch_job`); a launch
     that fails on some machine stops what it started on the others, so nothing is left half-started;
  5. ``wait_running``: until every rank runs or ``launch.start_timeout_s`` passes; the step fails
     naming the ranks that did not start (they are left as they are, their logs to read).

  A job without ``launch:`` cannot be restarted here: :class:`~robustctl.errors.ConfigError` (exit 78).
* ``slurm``: ``requeue`` (``scontrol requeue``, then eligible at once), then ``wait_running`` until
  Slurm reports the job running again.
* ``kubernetes``: ``requeue`` (its pods deleted; the job's controller recreates them). The back end
  cannot tell when the new pods train, so nothing is waited for (the plan says so).

On ``slurm`` and ``kubernetes`` the job's own script chooses its checkpoint: ``--from-checkpoint``
other than ``latest-complete`` cannot take effect there and is refused (UsageError).

``stop`` is step 1 alone (the inventory back end; a scheduler's job is stopped through the scheduler).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from robustctl.actions import ActionContext
from robustctl.actions.plan import Plan, Step, StepKind, StepRunner
from robustctl.ckpt.stage import NOTHING_TO_STAGE, ShardMove
from robustctl.errors import ConfigError, HostError, InventoryError, RobustctlError, UsageError
from robustctl.inventory.hostrange import collapse
from robustctl.jobs.launch import launch_job, render_launch, stop_job, wait_running

if TYPE_CHECKING:
    from robustctl.inventory import Host, Job
    from robustctl.store import Store
    from robustctl.transport.pool import TransportPool

__all__ = [
    "FROM_LATEST",
    "FROM_NONE",
    "RestartFailed",
    "RestartSpec",
    "Want",
    "last_start",
    "parse_from_checkpoint",
    "plan_restart",
    "plan_stop",
    "restart_runners",
]

FROM_LATEST = "latest-complete"
"""``--from-checkpoint`` default: the newest iteration whose every shard is present (part of ckpt)."""
FROM_NONE = "none"
"""``--from-checkpoint none``: start without a checkpoint."""
MAX_ITERATION = 10**12
"""Largest ``--from-checkpoint ITER`` accepted (Megatron writes iterations as 7 digits; 10^12 steps
would take millennia at one step per second)."""
DEFAULT_STOP_GRACE_S = 30.0
"""SIGTERM → SIGKILL grace of ``stop`` for a job without ``launch:`` (launch.stop_grace_s's default)."""
SCHEDULER_START_TIMEOUT_S = 300.0
"""How long a Slurm restart waits for the job to run again when the job has no ``launch:`` section."""
SCHEDULER_POLL_S = 2.0
"""Seconds between two looks at the Slurm job while waiting for it to run."""

Want = str | int
"""What ``--from-checkpoint`` asked: :data:`FROM_LATEST`, :data:`FROM_NONE` or an iteration."""


class RestartFailed(RobustctlError):
    """A restart step failed on some machine (the message says where and what is left); exit 3."""


def parse_from_checkpoint(text: str) -> Want:
    """``--from-checkpoint`` parsed: ``latest-complete``, ``none`` or an iteration (0 … 10^12).

    Args:
        text: the flag's value (case and surrounding blanks ignored).

    Returns:
        :data:`FROM_LATEST`, :data:`FROM_NONE`, or the iteration as an int.

    Raises:
        UsageError: anything else (the message lists what is accepted).
    """
    value = text.strip().lower()
    if value in (FROM_LATEST, FROM_NONE):
        return value
    if re.fullmatch(r"\d{1,13}", value) and int(value) <= MAX_ITERATION:
        return int(value)
    raise UsageError(
        f"--from-checkpoint {text[:40]!r}: expected latest-complete, none, or an iteration number "
        f"(0 to {MAX_ITERATION})"
    )


@dataclass(frozen=True)
class RestartSpec:
    """The planner's input.

    Attributes:
        job: the inventory job. want: see :data:`Want`. reason: recorded in the audit log.
    """

    job: str
    want: Want = FROM_LATEST
    reason: str = ""


# ------------------------------------------------------------------------------------------- hooks
def _code_update_steps(ctx: ActionContext, job: Job, hosts: Sequence[Host]) -> tuple[Step, ...]:
    """The step that applies ``job``'s pending code change on ``hosts`` before the launch.

    A job with a ``code:`` section and a pending change (``update stage``; the newest one wins,
    :func:`robustctl.jobcode.records.pending_update`) gets one ``apply_update`` step: check its commit
    out on every host, all or none (:func:`robustctl.jobcode.git.switch_code`), then mark the change
    applied (``forced`` when its window had passed). Nothing pending, or no ``code:`` section: no step.

    Args:
        ctx: the action context (its store holds the pending changes).
        job: the job to restart.
        hosts: its current machines, rank order.

    Returns:
        The ``apply_update`` step, or no step.
    """
    if job.code is None:
        return ()
    from robustctl.jobcode.records import pending_update

    commit, ids, forced = pending_update(ctx.store, job.name, ctx.clock())
    if commit is None:
        return ()
    why = "its update window has passed" if forced else "staged"
    return (
        Step(
            StepKind.APPLY_UPDATE,
            job.name,
            _via(hosts),
            job=job.name,
            note=f"check out {commit[:12]} on {len(hosts)} host(s), all or none "
            f"(change(s) {', '.join(map(str, ids))}: {why})",
        ),
    )


def _record_version(
    ctx: ActionContext,
    job: Job,
    hosts: Sequence[Host],
    base_step: int | None,
    pool: TransportPool,
    started: float,
) -> str:
    """Record the commit the job now runs (``job_versions``: the start its stability is counted from).

    ``started`` (UNIX s) is when the launch began, before any new process ran: every progress entry
    the new processes write is at or after it, and every entry of the run that was stopped before it.
    (A start time taken once the ranks run would drop the new run's first steps, and its first reading
    after that could become both the base and the last step of the version: never stable.)

    Args:
        ctx: the action context (inventory, store, clock).
        job: the restarted job (nothing is recorded without a ``code:`` section).
        hosts: its machines, rank order, whose work trees are read.
        base_step: the checkpoint iteration the job restarted from (None: none).
        pool: the transports to the hosts.
        started: when the launch began, UNIX s.

    Returns:
        A tail for the step's detail (``"; runs COMMIT"``, empty without a ``code:`` section); a work
        tree that cannot be read, or hosts that disagree, are said there (the restart itself
        succeeded) and nothing is recorded.
    """
    if job.code is None:
        return ""
    from robustctl.jobcode.git import current_versions, inspect_hosts
    from robustctl.jobcode.records import record_version_start

    try:
        codes = inspect_hosts(pool, hosts, job.code, timeout_s=ctx.inventory.diagnose.host_timeout_s)
        commit, disagree = current_versions(codes)
        if commit is None or disagree:
            return f"; version not recorded (work trees disagree or unreadable: {', '.join(disagree) or '?'})"
        record_version_start(ctx.store, job.name, commit, started_at=started, base_step=base_step)
    except RobustctlError as exc:
        return f"; version not recorded ({exc})"
    return f"; runs {commit[:12]}"


START_KINDS = (StepKind.LAUNCH.value, StepKind.REQUEUE.value)
"""The restart steps that start the job's new processes (the inventory's launch, a scheduler's requeue)."""
LAST_START_SCAN = 200
"""How many of the newest ``restart`` audit records :func:`last_start` looks through."""


def last_start(store: Store, job: str) -> float | None:
    """When robustctl last started ``job``'s processes (UNIX s), from the audit log; None: never.

    The start of the newest ``restart`` of ``job`` whose launch (inventory) or requeue (Slurm,
    Kubernetes) step finished ``done``: every progress entry older than it was written by a run that
    had been stopped by then. Looks through the newest :data:`LAST_START_SCAN` ``restart`` records
    (restarts of other jobs included).

    Args:
        store: the state store whose audit log is read.
        job: the job's name.

    Returns:
        The launch or requeue step's start, UNIX s; None when none finished ``done`` in those records.

    Raises:
        StoreError: the audit log cannot be read.
    """
    import json

    rows = store.query(
        "SELECT id, plan FROM audit WHERE action='restart' AND plan IS NOT NULL ORDER BY id DESC LIMIT ?",
        [LAST_START_SCAN],
    )
    for audit_id, text in rows:
        try:
            plan = json.loads(text)
        except ValueError:
            continue
        if not isinstance(plan, dict) or plan.get("job") != job or not isinstance(plan.get("steps"), list):
            continue
        idx = {
            i for i, st in enumerate(plan["steps"]) if isinstance(st, dict) and st.get("kind") in START_KINDS
        }
        if not idx:
            continue
        done = store.query(
            "SELECT idx, started_at FROM audit_steps WHERE audit_id=? AND status='done' ORDER BY idx DESC",
            [audit_id],
        )
        for i, at in done:
            if i in idx and at is not None:
                return float(at)
    return None


@dataclass(frozen=True)
class _Pick:
    """The checkpoint a restart loads: ``iteration`` (None: none), ``why`` (one line), and ``moves``,
    the shard copies that put it on the hosts that load it (local directories only, else empty)."""

    iteration: int | None
    why: str
    moves: tuple[ShardMove, ...] = ()


def _pick_checkpoint(ctx: ActionContext, job: Job, hosts: Sequence[Host], want: Want) -> _Pick:
    """The checkpoint iteration to restart ``job`` from, why, and the shard copies it needs.

    ``none``: no checkpoint. A job with a ``ckpt:`` section: its directories read once on ``hosts``
    (:func:`robustctl.ckpt.read_checkpoints`), the iteration picked from them
    (:func:`robustctl.ckpt.pick_restart_iteration`: ``latest-complete``, the newest iteration every
    rank's shard of which is present and readable there, the tracker file never trusted alone; an
    iteration: that one, if complete) and, with directories local to each host, the copies that put
    each shard on the host that loads it (:func:`robustctl.ckpt.stage.plan_staging`). Without a
    ``ckpt:`` section nothing can be checked: an asked-for iteration is passed as it is,
    ``latest-complete`` gives no iteration ("job has no ckpt section").

    Args:
        ctx: the action context.
        job: the job to restart.
        hosts: its current machines, rank order.
        want: what ``--from-checkpoint`` asked (:data:`Want`).

    Returns:
        The iteration (None: start without one), one line on why, and the shard copies to stage.

    Raises:
        CheckpointError (exit 2) / CheckpointUnknown (exit 3): no complete iteration (or not the one
            asked for), with or without hosts that could not be read; the restart is then refused
            before anything stops (``--from-checkpoint none`` starts without one).
    """
    if want == FROM_NONE:
        return _Pick(None, "no checkpoint (--from-checkpoint none)")
    if job.ckpt is None:
        if isinstance(want, int):
            return _Pick(want, f"iteration {want}, as asked (job has no ckpt section: not checked)")
        return _Pick(None, "job has no ckpt section")
    from robustctl.ckpt import pick_restart_iteration, read_checkpoints
    from robustctl.ckpt.stage import plan_staging
    from robustctl.inventory.topology import Topology

    names = [h.name for h in hosts]
    state = read_checkpoints(ctx.inventory, job.name, names)
    pick = pick_restart_iteration(state, want)
    why = pick.note or f"iteration {pick.iteration}"
    if pick.iteration is None or job.ckpt.shared:
        return _Pick(pick.iteration, why)
    topo = Topology(job.layout) if job.ckpt.shards == "mp_rank" else None
    return _Pick(pick.iteration, why, plan_staging(state, pick.iteration, names, job.ranks_per_host, topo))


PICKED_PREFIX = "iteration "
"""How the ``pick_checkpoint`` step's result detail begins when it picked one: ``iteration N: why``
(read back by :func:`picked_iteration`)."""


def picked_iteration(apply_doc: object) -> int | None:
    """The checkpoint iteration a restart's apply document says it loaded, or None.

    Args:
        apply_doc: the JSON document of a restart (``kind`` ``apply``: ``plan.steps`` and ``results``
            index-aligned), as the playbook journal keeps it.

    Returns:
        N from the ``pick_checkpoint`` step's ``iteration N: …`` detail; None when the document is not
        one, no step picked, or the job started from nothing.
    """
    if not isinstance(apply_doc, dict):
        return None
    plan, results = apply_doc.get("plan"), apply_doc.get("results")
    steps = plan.get("steps") if isinstance(plan, dict) else None
    if not isinstance(steps, list) or not isinstance(results, list):
        return None
    for step, res in zip(steps, results, strict=False):
        if not isinstance(step, dict) or step.get("kind") != "pick_checkpoint" or not isinstance(res, dict):
            continue
        detail = res.get("detail")
        if isinstance(detail, str) and detail.startswith(PICKED_PREFIX):
            digits = detail[len(PICKED_PREFIX) :].split(":", 1)[0]
            if digits.isdigit() and len(digits) <= 19:
                value = int(digits)
                return value if value < 2**63 else None
    return None


# ------------------------------------------------------------------------------------------ planning
def _job_hosts(ctx: ActionContext, name: str) -> tuple[Job, list[Host], str | None]:
    """The job, its current machines (rank order) as inventory hosts, and the fallback note."""
    try:
        job = ctx.inventory.job(name)
    except InventoryError as exc:
        raise UsageError(str(exc)) from None
    found = ctx.job_hosts(name)
    try:
        hosts = [ctx.inventory.by_name(h) for h in found.hosts]
    except InventoryError as exc:
        raise ConfigError(f"job {name}: {exc}") from None
    if not hosts:
        raise UsageError(f"job {name} has no hosts ({found.source.value}): nothing to restart")
    expected = job.layout.world_size // job.ranks_per_host
    if len(hosts) != expected:
        raise ConfigError(
            f"job {name}: {len(hosts)} host(s) ({found.source.value}) but its layout needs {expected} "
            f"({job.layout.world_size} ranks, {job.ranks_per_host} per host)"
        )
    return job, hosts, found.note()


def _via(hosts: Sequence[Host]) -> str:
    return "+".join(sorted({h.transport for h in hosts}))


def _want_text(want: Want) -> str:
    return str(want) if isinstance(want, int) else want


def _need_launch(ctx: ActionContext, job: Job) -> None:
    if job.launch is None:
        raise ConfigError(
            f"{ctx.inventory.source}: jobs.{job.name}: no launch: section; the inventory back end can "
            f"only restart a job it knows how to start (add jobs.{job.name}.launch: command, per, ...)"
        )


def _former_hosts(job: Job, hosts: Sequence[Host]) -> list[Host]:
    """The inventory's hosts of ``job`` that are no longer among its current ``hosts`` (replaced by a
    standby): the stop also ends what may still run there, best effort.

    Args:
        job: the inventory job.
        hosts: its current machines.

    Returns:
        The inventory's hosts of the job not among ``hosts``, inventory order.
    """
    current = {h.name for h in hosts}
    return [h for h in job.hosts if h.name not in current]


def _stop_step(job: Job, hosts: Sequence[Host], grace_s: float) -> Step:
    names = collapse([h.name for h in hosts])
    former = _former_hosts(job, hosts)
    also = f"; also, best effort, former host(s) {collapse([h.name for h in former])}" if former else ""
    return Step(
        StepKind.STOP_JOB,
        job.name,
        _via(hosts),
        job=job.name,
        note=f"{len(hosts)} host(s) {names}: SIGTERM, {grace_s:g} s grace, SIGKILL, verify gone{also}",
    )


def plan_restart(spec: RestartSpec, ctx: ActionContext) -> Plan:
    """The restart plan of ``spec.job`` on ``ctx``'s back end (module docstring).

    Args:
        spec: the job, the checkpoint asked for and the reason.
        ctx: the action context.

    Returns:
        The restart plan (targets: the job's current machines).

    Raises:
        UsageError: unknown job, no hosts, ``--from-checkpoint`` that cannot take effect on the back end.
        ConfigError: the inventory back end and a job without ``launch:`` (or ``process:``), a host
            that is not in the inventory, a host list that does not match the layout.
    """
    kind = ctx.scheduler.name
    if kind != "inventory":
        return _plan_requeue(spec, ctx)
    job, hosts, note = _job_hosts(ctx, spec.job)
    _need_launch(ctx, job)
    assert job.launch is not None
    launch = job.launch
    notes = [note] if note else []
    picked = _pick_checkpoint(ctx, job, hosts, spec.want)
    procs = render_launch(job, hosts, picked.iteration)  # a template that cannot be filled fails here
    via = _via(hosts)
    steps = [_stop_step(job, hosts, launch.stop_grace_s), *_code_update_steps(ctx, job, hosts)]
    steps.append(
        Step(
            StepKind.PICK_CHECKPOINT,
            job.name,
            "robustctl",
            job=job.name,
            note=f"--from-checkpoint {_want_text(spec.want)}; now: {picked.why}",
        )
    )
    if job.ckpt is not None and not job.ckpt.shared and spec.want != FROM_NONE:
        moves = picked.moves
        what = "; ".join(m.line() for m in moves[:4]) or NOTHING_TO_STAGE
        if len(moves) > 4:
            what += f"; and {len(moves) - 4} more"
        steps.append(
            Step(
                StepKind.STAGE_CHECKPOINT,
                job.name,
                "robustctl",
                job=job.name,
                note=f"onto the hosts that load them (local checkpoint directories); now: {what}",
            )
        )
    steps.append(
        Step(
            StepKind.LAUNCH,
            job.name,
            via,
            job=job.name,
            note=f"{len(procs)} process(es), one per {launch.per}, on {len(hosts)} host(s); "
            f"MASTER_ADDR {procs[0].env['MASTER_ADDR']}:{launch.master_port}; logs {procs[0].log}, ...",
        )
    )
    steps.append(
        Step(
            StepKind.WAIT_RUNNING,
            job.name,
            via,
            job=job.name,
            note=f"all {job.layout.world_size} rank(s) within {launch.start_timeout_s:g} s",
        )
    )
    return Plan(
        action="restart",
        targets=tuple(h.name for h in hosts),
        steps=tuple(steps),
        reason=spec.reason,
        scheduler=kind,
        job=job.name,
        notes=tuple(notes),
    )


def _plan_requeue(spec: RestartSpec, ctx: ActionContext) -> Plan:
    kind = ctx.scheduler.name
    if spec.want != FROM_LATEST:
        raise UsageError(
            f"--from-checkpoint {_want_text(spec.want)} cannot take effect on scheduler.kind {kind}: the "
            "job's own script chooses its checkpoint when the scheduler restarts it (leave the option out)"
        )
    try:
        job = ctx.inventory.job(spec.job)
    except InventoryError as exc:
        raise UsageError(str(exc)) from None
    found = ctx.job_hosts(spec.job)
    steps = [Step(StepKind.REQUEUE, job.name, kind, job=job.name)]
    notes = [n for n in (found.note(),) if n]
    if kind == "slurm":
        timeout = job.launch.start_timeout_s if job.launch is not None else SCHEDULER_START_TIMEOUT_S
        steps.append(
            Step(StepKind.WAIT_RUNNING, job.name, kind, job=job.name, note=f"RUNNING within {timeout:g} s")
        )
    else:
        notes.append(f"scheduler {kind} cannot tell when the recreated pods train: not waited for")
    return Plan(
        action="restart",
        targets=found.hosts,
        steps=tuple(steps),
        reason=spec.reason,
        scheduler=kind,
        job=job.name,
        notes=tuple(notes),
    )


def plan_stop(spec: RestartSpec, ctx: ActionContext) -> Plan:
    """The stop plan of ``spec.job``: one ``stop_job`` step (the inventory back end only).

    Args:
        spec: the job and the reason (``want`` is not used).
        ctx: the action context.

    Returns:
        The stop plan (targets: the job's current machines).

    Raises:
        UsageError: unknown job.
        ConfigError: another back end (stop the job through the scheduler), a job without
            ``process:``.
    """
    kind = ctx.scheduler.name
    if kind != "inventory":
        raise ConfigError(
            f"scheduler.kind is {kind}: stop the job through the scheduler (scancel / delete its pods); "
            "robustctl stop ends the processes of jobs the inventory back end launches"
        )
    job, hosts, note = _job_hosts(ctx, spec.job)
    if job.process is None:
        raise ConfigError(
            f"{ctx.inventory.source}: jobs.{job.name}: no process: section; stop finds the job's processes by "
            "process.match (add process: {match: REGEX})"
        )
    grace = _grace(job)
    return Plan(
        action="stop",
        targets=tuple(h.name for h in hosts),
        steps=(_stop_step(job, hosts, grace),),
        reason=spec.reason,
        scheduler=kind,
        job=job.name,
        notes=(note,) if note else (),
    )


# ------------------------------------------------------------------------------------------- apply
class _Runners:
    """The restart/stop step runners of one apply, and what they share: the checkpoint ``pick``
    chose (the ``{ckpt_iter}`` of ``launch``) and when ``launch`` began (the version's start)."""

    def __init__(
        self, ctx: ActionContext, spec: RestartSpec, pool: TransportPool, sleep: Callable[[float], None]
    ) -> None:
        self.ctx, self.spec, self.pool, self.sleep = ctx, spec, pool, sleep
        self.chosen: _Pick | None = None
        self.launched_at: float | None = None

    def iteration(self) -> int | None:
        """The iteration ``pick`` chose (None: not picked, or none)."""
        return self.chosen.iteration if self.chosen is not None else None

    def current(self) -> tuple[Job, list[Host]]:
        """The job and its machines now (re-read at each step: an earlier step may have changed them)."""
        job, hosts, _ = _job_hosts(self.ctx, self.spec.job)
        return job, hosts

    def stop(self, step: Step, plan: Plan) -> tuple[bool, str]:
        """``stop_job``: the job's machines must stop; the machines a standby replaced, best effort."""
        job, hosts = self.current()
        former = _former_hosts(job, hosts)
        results = stop_job(
            job, [*hosts, *former], self.pool, grace_s=_grace(job), diagnose=self.ctx.inventory.diagnose
        )
        mine, old = results[: len(hosts)], results[len(hosts) :]
        detail = "; ".join(r.line() for r in mine)
        if old:  # best effort: an evicted machine may be down, which must not block the restart
            detail += "; former host(s): " + "; ".join(r.line() for r in old)
        if not all(r.ok for r in mine):
            bad = [r.host for r in mine if not r.ok]
            raise RestartFailed(f"could not verify job {job.name} stopped on {', '.join(bad)}: {detail}")
        return any(r.found or r.killed for r in results), detail

    def pick(self, step: Step, plan: Plan) -> tuple[bool, str]:
        """``pick_checkpoint``: choose the iteration now (the directories read again)."""
        job, hosts = self.current()
        picked = self.chosen = _pick_checkpoint(self.ctx, job, hosts, self.spec.want)
        if picked.iteration is None:
            return False, f"no checkpoint: {picked.why}"
        return False, f"{PICKED_PREFIX}{picked.iteration}: {picked.why}"

    def stage(self, step: Step, plan: Plan) -> tuple[bool, str]:
        """``stage_checkpoint``: copy the picked iteration's shards onto the hosts that lack them."""
        job, _ = self.current()
        from robustctl.ckpt.stage import StagingError, stage_shards

        moves = self.chosen.moves if self.chosen is not None else ()
        if job.ckpt is None or not moves:
            return False, NOTHING_TO_STAGE
        try:
            report = stage_shards(moves, job.ckpt, self.ctx.inventory.by_name, self.pool)
        except (StagingError, HostError) as exc:
            raise RestartFailed(f"checkpoint iteration {self.iteration()} not staged: {exc}") from exc
        return True, report.line()

    def update(self, step: Step, plan: Plan) -> tuple[bool, str]:
        """``apply_update``: the pending change checked out on every host, all or none, marked applied."""
        job, hosts = self.current()
        from robustctl.jobcode.git import switch_code
        from robustctl.jobcode.records import mark_applied, pending_update

        commit, ids, forced = pending_update(self.ctx.store, job.name, self.ctx.clock())
        if commit is None:
            return False, "no pending code change (applied or cleared since the plan)"
        result = switch_code(self.ctx, job.name, [h.name for h in hosts], commit, pool=self.pool)
        if not result.ok:
            raise RestartFailed(f"code update {commit[:12]} not applied: {result.message}")
        mark_applied(self.ctx.store, job.name, ids, forced=forced, note="applied by restart")
        return True, result.message

    def launch(self, step: Step, plan: Plan) -> tuple[bool, str]:
        """``launch``: start every process; a launch that fails somewhere stops what it started."""
        job, hosts = self.current()
        diagnose = self.ctx.inventory.diagnose
        self.launched_at = self.ctx.clock()
        results = launch_job(job, hosts, self.pool, ckpt_iter=self.iteration(), diagnose=diagnose)
        detail = "; ".join(r.line() for r in results)
        if not all(r.ok for r in results):
            undo = stop_job(job, hosts, self.pool, grace_s=_grace(job), diagnose=diagnose)
            undone = "; ".join(r.line() for r in undo)
            raise RestartFailed(f"launch failed: {detail}; what started was stopped again: {undone}")
        return True, detail

    def wait(self, step: Step, plan: Plan) -> tuple[bool, str]:
        """``wait_running``: every rank runs (or Slurm says RUNNING); then the version is recorded."""
        job, hosts = self.current()
        if plan.scheduler == "slurm":
            return _wait_slurm(self.ctx, job, self.sleep)
        assert job.launch is not None
        report = wait_running(
            job,
            hosts,
            self.pool,
            timeout_s=job.launch.start_timeout_s,
            diagnose=self.ctx.inventory.diagnose,
            sleep=self.sleep,
        )
        if not report.ok:
            raise RestartFailed(report.line())
        started = self.launched_at if self.launched_at is not None else self.ctx.clock()
        return False, report.line() + _record_version(
            self.ctx, job, hosts, self.iteration(), self.pool, started
        )


def _grace(job: Job) -> float:
    """SIGTERM → SIGKILL grace of ``job``'s processes (``launch.stop_grace_s``, else the default)."""
    return job.launch.stop_grace_s if job.launch is not None else DEFAULT_STOP_GRACE_S


def restart_runners(
    ctx: ActionContext,
    spec: RestartSpec,
    pool: TransportPool,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[StepKind, StepRunner]:
    """The runners of the restart/stop steps for :func:`~robustctl.actions.plan.apply_plan`.

    They share one state: the iteration ``pick_checkpoint`` chose is the ``{ckpt_iter}`` of ``launch``.
    Each raises :class:`RestartFailed` (one line per machine that failed) when its step failed.

    Args:
        ctx: the action context.
        spec: the restart's job and checkpoint asked for.
        pool: the transports to the job's hosts.
        sleep: how the waits sleep, seconds (tests pass a fake).

    Returns:
        The runner of each restart/stop step kind (stop, update, pick, stage, launch, wait).
    """
    run = _Runners(ctx, spec, pool, sleep)
    return {
        StepKind.STOP_JOB: run.stop,
        StepKind.APPLY_UPDATE: run.update,
        StepKind.PICK_CHECKPOINT: run.pick,
        StepKind.STAGE_CHECKPOINT: run.stage,
        StepKind.LAUNCH: run.launch,
        StepKind.WAIT_RUNNING: run.wait,
    }


def _wait_slurm(ctx: ActionContext, job: Job, sleep: Callable[[float], None]) -> tuple[bool, str]:
    """Poll the Slurm job until it runs (``scontrol show job``) or the start timeout passes."""
    timeout = job.launch.start_timeout_s if job.launch is not None else SCHEDULER_START_TIMEOUT_S
    look = getattr(ctx.scheduler, "job", None)
    if not callable(look):
        raise RestartFailed(f"scheduler {ctx.scheduler.name} cannot report the job's state")
    t0 = time.monotonic()
    while True:
        info = look(job.name)
        waited = time.monotonic() - t0
        if getattr(info, "running", False):
            return False, f"Slurm job {getattr(info, 'job_id', job.name)} {info.state} after {waited:.1f} s"
        if getattr(info, "finished", False):
            raise RestartFailed(
                f"Slurm job {getattr(info, 'job_id', job.name)} is {info.state}: it did not run"
            )
        if waited + SCHEDULER_POLL_S > timeout:
            raise RestartFailed(
                f"Slurm job {getattr(info, 'job_id', job.name)} still {info.state} after {waited:.1f} s "
                f"(reason {getattr(info, 'reason', '?')})"
            )
        sleep(SCHEDULER_POLL_S)
