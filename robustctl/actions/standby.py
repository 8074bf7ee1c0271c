"""Warm standbys: a self-checked pool of machines that replace evicted ones, and its size.

* ``add``: hold hosts out of scheduling as standbys (scheduler ``hold_standby``) and record them
  ``standby``/``unchecked`` in the store (:func:`plan_add`).
* ``check``: run robustctl's own ``diagnose`` levels 0–1 (quick checks, verified burn) on the standbys
  and record each ``ready`` (OK or not applicable) or ``bad`` (anything else: a fault, a warning, or
  "could not check": never ready unchecked) (:func:`check_standbys`).
* ``activate``: put a ready standby in the place of an evicted (or suspect) host of a job: scheduler
  ``replace_host``, the store's job host list, ``resume`` the standby, mark it active
  (:func:`plan_activate`).
* ``size``: the pool that covers the P99 of machine failures within one repair window
  (:func:`pool_size`): the smallest ``k`` with ``P[Binomial(machines, p) ≤ k] ≥ 0.99``, ``p`` = daily
  failure rate × repair-window days. ByteRobust (arXiv 2509.16293) Table 5 gives 2, 2, 3, 4 spares for
  128, 256, 512, 1,024 machines at a daily machine failure rate near 0.12% with a one-day window; this
  convention reproduces all four (tested). :func:`observed_daily_rate` derives the rate from the
  store's own eviction history instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from robustctl.actions import ActionContext, open_context
from robustctl.actions.evict import current_state
from robustctl.actions.hosts import JobHostsSource
from robustctl.actions.plan import Plan, RailCheck, Step, StepKind
from robustctl.actions.rails import FORCE_HINT, non_empty
from robustctl.diagnose import DiagnoseSpec, run_levels
from robustctl.errors import InventoryError, UsageError
from robustctl.models import RunReport, Status
from robustctl.schedulers.base import NodeState
from robustctl.store import AuditStatus, MachineState, Readiness
from robustctl.transport.pool import TransportPool

__all__ = [
    "MAX_HISTORY_DAYS",
    "MAX_POOL_MACHINES",
    "PoolSizing",
    "StandbyCheck",
    "StandbyInfo",
    "binomial_cdf",
    "check_standbys",
    "list_standbys",
    "observed_daily_rate",
    "plan_activate",
    "plan_add",
    "pool_size",
    "size_pool",
]


# --- sizing -----------------------------------------------------------------------------------------


def binomial_cdf(k: int, n: int, p: float) -> float:
    """``P[X ≤ k]`` for ``X ~ Binomial(n, p)``, summed in log space (``math.lgamma``) so n in the
    hundreds of thousands neither overflows nor underflows.

    Args:
        k: the most successes counted (below 0: the probability is 0).
        n: the trials.
        p: the probability of one success.

    Returns:
        The probability, within [0, 1].

    Raises:
        ValueError: ``n < 0`` or ``p`` outside [0, 1].
    """
    if n < 0 or not 0.0 <= p <= 1.0:
        raise ValueError(f"binomial_cdf: need n >= 0 and 0 <= p <= 1, got n={n}, p={p}")
    if k < 0:
        return 0.0
    if k >= n or p == 0.0:
        return 1.0
    if p == 1.0:
        return 0.0
    lp, lq = math.log(p), math.log1p(-p)
    total = 0.0
    for i in range(k + 1):
        log_pmf = math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
        total += math.exp(log_pmf)
    return min(1.0, total)


MAX_POOL_MACHINES = 1_000_000
"""Most machines ``standby size`` sizes a pool for: a million machines is beyond any training cluster
built, and keeps the one pass over the binomial under a second or two (the pass is O(pool size))."""


def pool_size(
    machines: int, daily_failure_rate: float, *, window_days: float = 1.0, quantile: float = 0.99
) -> int:
    """Standby machines covering the ``quantile`` of failures among ``machines`` within ``window_days``.

    The smallest ``k`` with ``binomial_cdf(k, machines, daily_failure_rate × window_days) ≥ quantile``;
    ``pool_size(1024, 0.0012) == 4`` (ByteRobust Table 5: 2, 2, 3, 4 for 128 … 1,024 machines).

    Args:
        machines: the machines the pool covers (0 … :data:`MAX_POOL_MACHINES`).
        daily_failure_rate: failures per machine per day.
        window_days: the repair window, days (how long a failed machine is out).
        quantile: the probability the pool covers the failures of one window, in (0, 1).

    Returns:
        The standby machines ``k`` (0 when the rate is 0, ``machines`` when a failure is certain).

    Raises:
        UsageError: machines outside 0-:data:`MAX_POOL_MACHINES`, a rate outside [0, 1] per window, a
            quantile outside (0, 1).
    """
    if not 0 <= machines <= MAX_POOL_MACHINES:
        raise UsageError(f"--machines must be within 0-{MAX_POOL_MACHINES:,}, got {machines}")
    p = daily_failure_rate * window_days
    if not 0.0 <= p <= 1.0:
        raise UsageError(f"failure probability per window {p:g} (rate × window days) must be within 0-1")
    if not 0.0 < quantile < 1.0:
        raise UsageError(f"quantile must be within (0, 1), got {quantile}")
    if p == 0.0:
        return 0
    if p == 1.0:
        return machines
    # One cumulative pass over the pmf (the same log-space terms as binomial_cdf): O(k), not O(k²).
    lp, lq, ln = math.log(p), math.log1p(-p), math.lgamma(machines + 1)
    total = 0.0
    for k in range(machines + 1):
        total += math.exp(
            ln - math.lgamma(k + 1) - math.lgamma(machines - k + 1) + k * lp + (machines - k) * lq
        )
        if total >= quantile - 1e-12:
            return k
    return machines


def observed_daily_rate(ctx: ActionContext, machines: int, days: float) -> tuple[float, int, float]:
    """The daily machine failure rate the store's history shows: evictions / (machines × days observed).

    The observed span is ``days`` back from now, or less when the store's history starts later (at
    least one hour, so a fresh store does not divide by zero).

    Args:
        ctx: the action context (its store's eviction history and clock).
        machines: the machines the evictions are spread over.
        days: how far back the history is read, days.

    Returns:
        ``(rate, evictions, span_days)``: failures per machine per day, the evictions counted, and
        the days observed.

    Raises:
        UsageError: ``machines`` < 1 or ``days`` <= 0.
    """
    if machines < 1 or days <= 0:
        raise UsageError(f"need machines >= 1 and days > 0 (got {machines}, {days})")
    now = ctx.clock()
    since = now - days * 86400.0
    first = ctx.store.first_record_at()
    start = max(since, first) if first is not None else since
    span_days = max((now - start) / 86400.0, 1.0 / 24.0)
    n = len(ctx.store.evictions_since(since))
    return n / (machines * span_days), n, span_days


MAX_HISTORY_DAYS = 3650.0
"""Longest ``--history-days`` (ten years: longer than any store's history; bounds the query window)."""

DEFAULT_REPAIR_WINDOW_DAYS = 1.0
"""The repair window when neither the request nor an inventory gives one (ByteRobust Table 5: one day)."""
DEFAULT_QUANTILE = 0.99
"""The quantile of failures covered when neither the request nor an inventory gives one (ByteRobust
Table 5 sizes the pool at the P99)."""


@dataclass(frozen=True)
class PoolSizing:
    """A standby pool size and what it was computed from (``standby size``).

    Attributes:
        machines, daily_failure_rate, repair_window_days, quantile: the inputs after layering.
        observed_evictions: with ``from_history``, the evictions counted (else None). standbys: k.
    """

    machines: int
    daily_failure_rate: float
    repair_window_days: float
    quantile: float
    observed_evictions: int | None
    standbys: int


def size_pool(
    *,
    machines: int | None,
    daily_failure_rate: float | None,
    from_history: bool,
    history_days: float,
    repair_window_days: float | None,
    quantile: float | None,
    inventory: Path | None,
    state: Path | None,
) -> PoolSizing:
    """The standby pool size: the smallest k with P[Binomial(machines, rate × window) ≤ k] ≥ quantile.

    Opens the inventory and the store only when needed (``from_history``, no ``machines``, or an
    explicit ``inventory`` whose policy gives the window and quantile); else the defaults
    (:data:`DEFAULT_REPAIR_WINDOW_DAYS`, :data:`DEFAULT_QUANTILE`) fill what was not given.

    Args:
        machines: machines the pool covers (None: the inventory's hosts).
        daily_failure_rate: failures per machine per day (None: not given; then ``from_history``).
        from_history: take the rate the store's evictions show over ``history_days`` (one of the two).
        history_days: the days of eviction history the rate is read from.
        repair_window_days: days a failed machine is out (None: the inventory's policy).
        quantile: the probability the pool covers the failures of a window (None: the inventory's policy).
        inventory: the inventory path (None: the default).
        state: the state store path (None: the default).

    Returns:
        The :class:`PoolSizing`.

    Raises:
        UsageError: neither or both of ``daily_failure_rate`` and ``from_history``; out-of-range values.
        ConfigError / StoreError: bad inventory, unreadable store.
    """
    if (daily_failure_rate is None) == (not from_history):
        raise UsageError("give --daily-failure-rate RATE or --from-history (one of them)")
    if not 0 < history_days <= MAX_HISTORY_DAYS:  # also refuses NaN
        raise UsageError(f"--history-days must be within (0, {MAX_HISTORY_DAYS}], got {history_days}")
    rate, evictions = daily_failure_rate, None
    window, q = repair_window_days, quantile
    if from_history or machines is None or inventory is not None:
        ctx = open_context(inventory, state)
        try:
            n = machines if machines is not None else len(ctx.inventory.hosts)
            window = window or ctx.policy.standby_repair_window_days
            q = q or ctx.policy.standby_quantile
            if from_history:
                rate, evictions, _ = observed_daily_rate(ctx, n, history_days)
        finally:
            ctx.close()
    else:
        n = machines
    window = window or DEFAULT_REPAIR_WINDOW_DAYS
    q = q or DEFAULT_QUANTILE
    assert rate is not None
    return PoolSizing(n, rate, window, q, evictions, pool_size(n, rate, window_days=window, quantile=q))


# --- the pool ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StandbyInfo:
    """One standby of the pool.

    Attributes:
        host, readiness (``ready``/``bad``/``unchecked``), scheduler_state (the back end's view),
        reason (of the last change), updated_at (UNIX s, None when only the inventory says standby).
    """

    host: str
    readiness: Readiness
    scheduler_state: NodeState
    reason: str
    updated_at: float | None


def list_standbys(ctx: ActionContext) -> list[StandbyInfo]:
    """Every host in state ``standby`` (store, else inventory), inventory order."""
    names = [h.name for h in ctx.inventory.hosts if current_state(ctx, h.name) is MachineState.STANDBY]
    extra = [m.host for m in ctx.store.machines([MachineState.STANDBY]) if m.host not in names]
    names += extra
    sched = ctx.scheduler.state(names) if names else {}
    out: list[StandbyInfo] = []
    for name in names:
        rec = ctx.store.machine(name)
        out.append(
            StandbyInfo(
                host=name,
                readiness=rec.readiness if rec else Readiness.UNCHECKED,
                scheduler_state=sched.get(name, NodeState.UNKNOWN),
                reason=rec.reason if rec else "inventory",
                updated_at=rec.updated_at if rec else None,
            )
        )
    return out


def _job_of(ctx: ActionContext, host: str) -> str | None:
    """The inventory job the scheduler runs on ``host`` now: a job it cannot find (not submitted,
    finished) runs nowhere, whatever robustctl's record or the inventory list for it.

    Args:
        ctx: the action context.
        host: the host's name.

    Returns:
        The job's name, or None when no job the scheduler runs holds ``host``.
    """
    for job in ctx.inventory.jobs:
        current = ctx.job_hosts(job)
        if current.source is JobHostsSource.SCHEDULER and host in current.hosts:
            return job
    return None


def plan_add(
    hosts: str, reason: str, ctx: ActionContext, *, force: bool = False, force_reason: str | None = None
) -> Plan:
    """Plan adding ``hosts`` to the pool: ``hold_standby`` (scheduler), ``mark standby unchecked`` (store).

    Rail ``not-in-a-job``: a host that runs a job (is in a job's current host list) is refused unless forced.

    Args:
        hosts: a host or range (``spare1``, ``'spare[1-4]'``).
        reason: why (recorded in the scheduler and the audit log).
        ctx: the action context.
        force: override the ``not-in-a-job`` rail.
        force_reason: why it is forced (required with ``force``; recorded in the audit log).

    Returns:
        The plan (``plan.refused`` when a target runs a job and it is not forced).

    Raises:
        UsageError: bad host range or unknown host; ``--force`` without a reason.
    """
    if force and not (force_reason or "").strip():
        raise UsageError('--force needs --force-reason "why"')
    targets = tuple(ctx.resolve_hosts(hosts))
    sched = ctx.scheduler.state(list(targets)) if targets else {}
    steps: list[Step] = []
    busy: list[str] = []
    for host in targets:
        job = _job_of(ctx, host)
        if job is not None:
            busy.append(f"{host} (job {job})")
        already = current_state(ctx, host) is MachineState.STANDBY
        steps.append(
            Step(StepKind.HOLD_STANDBY, host, ctx.scheduler.name, noop=sched.get(host) is NodeState.STANDBY)
        )
        steps.append(
            Step(
                StepKind.MARK,
                host,
                "store",
                to_state=MachineState.STANDBY,
                readiness=Readiness.UNCHECKED,
                noop=already,
            )
        )
    rails = [non_empty(targets, repr(hosts))]
    if targets:
        rails.append(
            RailCheck(
                "not-in-a-job",
                not busy,
                ("runs a job: " + ", ".join(busy)) if busy else "no target runs a job",
                f"evict it first (robustctl evict), or {FORCE_HINT}",
            )
        )
    return Plan(
        action="standby-add",
        targets=targets,
        steps=tuple(steps),
        reason=reason,
        scheduler=ctx.scheduler.name,
        rails=tuple(rails),
        forced=force,
        force_reason=force_reason if force else None,
    )


@dataclass(frozen=True)
class StandbyCheck:
    """The outcome of ``standby check``.

    Attributes:
        results: ``(host, readiness, one line)`` per standby checked. report: the diagnose report.
        audit_id: the audit record of the readiness changes. not_in_inventory: standbys the store
        holds but the inventory no longer has (not checked: there is no address to reach them).
    """

    results: tuple[tuple[str, Readiness, str], ...]
    report: RunReport
    audit_id: int
    not_in_inventory: tuple[str, ...] = ()


_READY = {Status.OK, Status.NOT_APPLICABLE}


def check_standbys(ctx: ActionContext, pool: TransportPool, *, hosts: str | None = None) -> StandbyCheck:
    """Diagnose (L0–L1, every level) the standbys (or ``hosts``) and record each ready or bad.

    Standbys the store holds but the inventory no longer has are skipped (there is no address to
    reach them) and listed in ``not_in_inventory``.

    Args:
        ctx: the action context (the store's lock held: the readiness changes are written).
        pool: the transports that run the checks on the hosts.
        hosts: a host or range of standbys to check (None: every standby in the inventory).

    Returns:
        Each host's readiness and one line, the diagnose report, and the audit record.

    Raises:
        UsageError: no standby to check (the message names store-only standbys, if any), or
            ``hosts`` names a host that is not a standby.
        StoreError: the store cannot be written.
    """
    by_name = {h.name: h for h in ctx.inventory.hosts}
    pool_hosts = [s.host for s in list_standbys(ctx)]
    gone = tuple(n for n in pool_hosts if n not in by_name)
    names = ctx.resolve_hosts(hosts) if hosts is not None else [n for n in pool_hosts if n in by_name]
    not_standby = [n for n in names if n not in pool_hosts]
    if not_standby:
        raise UsageError(
            f"{not_standby[0]} is not a standby (add it with: robustctl standby add {not_standby[0]})"
        )
    if not names:
        raise UsageError(
            "no standby to check (add some with: robustctl standby add HOSTS)"
            + (f"; not in the inventory, so not checked: {', '.join(gone)}" if gone else "")
        )
    request = DiagnoseSpec(
        hosts=tuple(by_name[n] for n in names),
        settings=ctx.inventory.diagnose,
        thresholds=ctx.inventory.thresholds,
        max_level=1,
        all_levels=True,
    )
    report = run_levels(request, pool)
    audit_id = ctx.store.audit_begin("standby-check", names, "self-check: diagnose L0-L1")
    results: list[tuple[str, Readiness, str]] = []
    changes = 0
    for i, hr in enumerate(report.hosts):
        ready = Readiness.READY if hr.status in _READY else Readiness.BAD
        worst = [c.summary for c in hr.checks if c.status not in _READY and c.status is not Status.SKIPPED]
        line = hr.error or ("; ".join(worst[:3]) if worst else "passed L0-L1")
        ctx.store.audit_step_start(audit_id, i, f"mark {hr.host} {ready.value}")
        changed = ctx.store.set_state(
            hr.host, MachineState.STANDBY, f"standby check: {line}", readiness=ready, audit_id=audit_id
        )
        changes += changed
        ctx.store.audit_step_end(audit_id, i, "done" if changed else "noop", f"{hr.status.value}: {line}")
        results.append((hr.host, ready, line))
    n_ready = sum(r is Readiness.READY for _, r, _ in results)
    status = AuditStatus.APPLIED if changes else AuditStatus.NOTHING_TO_DO
    ctx.store.audit_finish(audit_id, status.value, f"{n_ready} ready, {len(results) - n_ready} bad")
    return StandbyCheck(tuple(results), report, audit_id, gone if hosts is None else ())


def _replaced_rail(ctx: ActionContext, for_host: str) -> RailCheck:
    """``replaced-host-out``: the host a standby replaces must be evicted or suspect (not overridable)."""
    state = current_state(ctx, for_host)
    return RailCheck(
        "replaced-host-out",
        state in (MachineState.EVICTED, MachineState.SUSPECT),
        f"{for_host} is {state.value}",
        f"cannot be overridden: evict it first (robustctl evict {for_host} --reason ...)",
        overridable=False,
    )


def _choose_standby(
    ctx: ActionContext, pool: list[StandbyInfo], standby: str | None, notes: list[str]
) -> tuple[StandbyInfo | None, RailCheck]:
    """The standby to swap in (``standby``, else the first ready one that is no lemon when
    ``sweep.lemon_no_standby`` is set) and its ``ready-standby`` rail.

    Args:
        ctx: the action context.
        pool: the standbys (:func:`list_standbys`), inventory order.
        standby: the standby asked for (None: the first ready one).
        notes: the plan's notes; a line is appended when lemons were passed over.

    Returns:
        ``(chosen, rail)``: the standby (None: no ready one) and its ``ready-standby`` rail.

    Raises:
        UsageError: ``standby`` is not in the pool.
    """
    ready = [s for s in pool if s.readiness is Readiness.READY]
    if standby is None and ctx.inventory.sweep.lemon_no_standby:
        lemons = _lemons(ctx)
        if lemons & {s.host for s in ready}:
            notes.append("lemons not picked (sweep.lemon_no_standby): " + ", ".join(sorted(lemons)))
        ready = [s for s in ready if s.host not in lemons]
    if standby is not None:
        chosen = next((s for s in pool if s.host == standby), None)
        if chosen is None:
            raise UsageError(f"{standby} is not a standby (robustctl standby list)")
        return chosen, RailCheck(
            "ready-standby",
            chosen.readiness is Readiness.READY,
            f"{standby} is {chosen.readiness.value}",
            f"run robustctl standby check {standby}, or {FORCE_HINT}",
        )
    first = ready[0] if ready else None
    return first, RailCheck(
        "ready-standby",
        first is not None,
        f"{len(ready)} ready of {len(pool)} standby(s)",
        "cannot be overridden: add standbys (robustctl standby add) and check them (robustctl standby check)",
        overridable=False,
    )


def _activate_steps(
    ctx: ActionContext, job: str, for_host: str, chosen: StandbyInfo | None, requeue: bool, notes: list[str]
) -> tuple[tuple[str, ...], list[Step]]:
    """The targets and steps of swapping ``chosen`` in for ``for_host`` (none without a standby)."""
    if chosen is None:
        return (for_host,), []
    new = chosen.host
    steps = [
        Step(StepKind.REPLACE, for_host, ctx.scheduler.name, job=job, new_host=new),
        Step(StepKind.JOB_HOSTS, for_host, "store", job=job, new_host=new),
        Step(StepKind.RESUME, new, ctx.scheduler.name),
        Step(StepKind.MARK, new, "store", to_state=MachineState.ACTIVE),
    ]
    if requeue:
        steps.append(Step(StepKind.REQUEUE, job, ctx.scheduler.name, job=job))
    else:
        notes.append(f"job {job} is not requeued (pass --requeue, or restart it yourself)")
    return (for_host, new), steps


def plan_activate(
    ctx: ActionContext,
    *,
    for_host: str,
    job: str,
    standby: str | None = None,
    reason: str = "",
    requeue: bool = False,
    force: bool = False,
    force_reason: str | None = None,
) -> Plan:
    """Plan swapping a ready standby in for ``for_host`` (evicted or suspect) in ``job``.

    Picks ``standby``, else the first ready standby in inventory order (not a lemon when
    ``sweep.lemon_no_standby`` is set, :mod:`robustctl.sweep.lemons`). Steps: ``replace_host``
    (scheduler), the store's job host list, ``resume`` the standby (scheduler), mark it active; then
    ``requeue`` the job when asked. Rails: ``replaced-host-out`` (``for_host`` must be evicted or
    suspect: not overridable), ``ready-standby`` (a standby exists; a chosen one that is not ready
    needs ``--force``).

    Args:
        ctx: the action context.
        for_host: the job's machine the standby replaces.
        job: the inventory job.
        standby: the standby to swap in (None: the first ready one).
        reason: why (empty: ``replace FOR_HOST in job JOB``).
        requeue: requeue the job once the standby is in.
        force: override the overridable rails (a chosen standby that is not ready).
        force_reason: why it is forced (required with ``force``; recorded in the audit log).

    Returns:
        The plan (``plan.refused`` when a rail failed that ``--force`` did not override).

    Raises:
        UsageError: unknown job or host, ``for_host`` not in the job, ``--force`` without a reason.
        SchedulerError: the scheduler cannot say the job's hosts (activation changes the scheduler's
            job, so it takes the scheduler's view only).
    """
    if force and not (force_reason or "").strip():
        raise UsageError('--force needs --force-reason "why"')
    try:
        ctx.inventory.by_name(for_host)
        if standby is not None:
            ctx.inventory.by_name(standby)
    except InventoryError as exc:
        raise UsageError(str(exc)) from None
    hosts = ctx.job_hosts(job).require_scheduler()  # it changes the scheduler's job: its view only
    pool = list_standbys(ctx)
    notes: list[str] = []
    if for_host not in hosts:
        raise UsageError(f"{for_host} is not in job {job} (its hosts: {', '.join(hosts)})")
    replaced = _replaced_rail(ctx, for_host)
    chosen, ready = _choose_standby(ctx, pool, standby, notes)
    targets, steps = _activate_steps(ctx, job, for_host, chosen, requeue, notes)
    return Plan(
        action="standby-activate",
        targets=targets,
        steps=tuple(steps),
        reason=reason or f"replace {for_host} in job {job}",
        scheduler=ctx.scheduler.name,
        rails=(replaced, ready),
        job=job,
        forced=force,
        force_reason=force_reason if force else None,
        notes=tuple(notes),
    )


def _lemons(ctx: ActionContext) -> set[str]:
    """The hosts :func:`robustctl.sweep.lemons.find_lemons` names with the inventory's ``sweep:`` rules."""
    from robustctl.sweep.lemons import find_lemons

    sw = ctx.inventory.sweep
    since = ctx.store.clock() - sw.lemon_days * 86_400
    found = find_lemons(ctx.store, since=since, min_failures=sw.lemon_failures, min_returns=sw.lemon_returns)
    return {lm.host for lm in found}
