"""``run_standby_list|check|add|activate|size``: the warm-standby pool.

``add`` and ``activate`` are action sessions (plan → confirm → apply, :class:`ActionResult`);
``check`` takes the store's lock, diagnoses the standbys (L0–L1) and records each ready or bad;
``list`` and ``size`` only read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from robustctl.actions import open_context
from robustctl.actions.session import ActionSession
from robustctl.actions.standby import (
    StandbyInfo,
    check_standbys,
    list_standbys,
    observed_daily_rate,
    plan_activate,
    plan_add,
    pool_size,
)
from robustctl.commands.actions import (
    ActionRequest,
    ActionResult,
    Confirm,
    ShowPlan,
    check_reason,
    session_for,
)
from robustctl.errors import UsageError
from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION, RunReport
from robustctl.store import Readiness
from robustctl.transport.pool import TransportPool

__all__ = [
    "CheckedStandby",
    "StandbyActivateRequest",
    "StandbyAddRequest",
    "StandbyCheckRequest",
    "StandbyCheckResult",
    "StandbyListRequest",
    "StandbyListResult",
    "StandbySizeRequest",
    "StandbySizeResult",
    "run_standby_activate",
    "run_standby_add",
    "run_standby_check",
    "run_standby_list",
    "run_standby_size",
]


# --- list ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StandbyListRequest:
    """``standby list``: the inventory and the state store (None: their defaults)."""

    inventory: Path | None = None
    state: Path | None = None


@dataclass(frozen=True)
class StandbyListResult:
    """The standby pool, inventory order, each with its readiness. Exit code 0."""

    standbys: tuple[StandbyInfo, ...]
    kind: str = "standby-list"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """Always OK (0): listing is not a check."""
        return ExitCode.OK


def run_standby_list(req: StandbyListRequest) -> StandbyListResult:
    """Every standby (store, else inventory) with its readiness and the scheduler's view.

    Raises:
        ConfigError / StoreError: bad inventory, unreadable store.
    """
    with ActionSession("standby-list", inventory=req.inventory, state=req.state, lock=False) as session:
        return StandbyListResult(tuple(list_standbys(session.ctx)))


# --- check -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StandbyCheckRequest:
    """``standby check``.

    Attributes:
        hosts: the standbys to check (a host range), None: the whole pool. inventory / state /
        lock_timeout_s: as for every action (:class:`~robustctl.commands.actions.ActionRequest`;
        a self-check has no dry run).
    """

    hosts: str | None = None
    inventory: Path | None = None
    state: Path | None = None
    lock_timeout_s: float | None = None


@dataclass(frozen=True)
class CheckedStandby:
    """One standby's verdict: ``readiness`` ready or bad, and one line why (``summary``)."""

    host: str
    readiness: Readiness
    summary: str


@dataclass(frozen=True)
class StandbyCheckResult:
    """The outcome of ``standby check``.

    Attributes:
        audit_id: the audit record of the readiness changes. results: one per standby checked.
        report: the diagnose report (L0–L1). not_in_inventory: standbys of the store the inventory
        no longer has (skipped, never checked). Exit code: 0 every standby ready, 2 some bad.
    """

    audit_id: int
    results: tuple[CheckedStandby, ...]
    report: RunReport
    not_in_inventory: tuple[str, ...] = ()
    kind: str = "standby-check"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """CRITICAL (2) when a standby is bad, else OK (0)."""
        bad = any(r.readiness is not Readiness.READY for r in self.results)
        return ExitCode.CRITICAL if bad else ExitCode.OK


def run_standby_check(req: StandbyCheckRequest, *, pool: TransportPool | None = None) -> StandbyCheckResult:
    """Self-check the standbys with diagnose L0–L1 under the store's lock; record each ready or bad.

    Args:
        pool: the transports to reach the hosts (tests: one with a fake override); None: a new one,
            closed at the end.

    Raises:
        UsageError: no standby to check, or ``hosts`` names a host that is not a standby.
        ConfigError / StoreError: bad inventory, unwritable store. StoreLocked: the lock is held.
    """
    own = pool is None
    transports = TransportPool() if pool is None else pool
    try:
        with ActionSession(
            "standby-check", inventory=req.inventory, state=req.state, lock_timeout_s=req.lock_timeout_s
        ) as session:
            checked = check_standbys(session.ctx, transports, hosts=req.hosts)
    finally:
        if own:
            transports.close()
    return StandbyCheckResult(
        checked.audit_id,
        tuple(CheckedStandby(h, r, s) for h, r, s in checked.results),
        checked.report,
        checked.not_in_inventory,
    )


# --- add / activate --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class StandbyAddRequest(ActionRequest):
    """``standby add``: ``hosts`` (a host range), ``reason``, ``force``/``force_reason`` (rail
    ``not-in-a-job``), plus the session options."""

    hosts: str
    reason: str = "warm standby"
    force: bool = False
    force_reason: str | None = None


def run_standby_add(
    req: StandbyAddRequest, *, confirm: Confirm | None = None, show: ShowPlan | None = None
) -> ActionResult:
    """Plan holding the hosts out of scheduling as unchecked standbys, then confirm and apply it.

    Raises:
        UsageError: bad host range or unknown host, ``force`` without a reason, a plan that needs
            confirming without ``confirm``, a reason that cannot be recorded. ConfigError / StoreError.
            StoreLocked.
    """
    check_reason(req.reason, "--reason")
    check_reason(req.force_reason, "--force-reason")
    with session_for(req, "standby-add", confirm=confirm, show=show) as session:
        return session.run(
            lambda ctx: plan_add(req.hosts, req.reason, ctx, force=req.force, force_reason=req.force_reason)
        )


@dataclass(frozen=True, kw_only=True)
class StandbyActivateRequest(ActionRequest):
    """``standby activate``: swap a standby in for ``for_host`` in ``job``.

    Attributes:
        for_host: the evicted (or suspect) host to replace. job: the job whose host list changes.
        standby: the standby to use (None: the first ready one). requeue: requeue the job afterwards.
        reason: why ("": ``replace HOST in job JOB``). force / force_reason: use a standby that is not
        ready. Plus the session options.
    """

    for_host: str
    job: str
    standby: str | None = None
    requeue: bool = False
    reason: str = ""
    force: bool = False
    force_reason: str | None = None


def run_standby_activate(
    req: StandbyActivateRequest, *, confirm: Confirm | None = None, show: ShowPlan | None = None
) -> ActionResult:
    """Plan the swap (scheduler, the store's job host list, resume, mark active), then confirm and apply.

    Raises:
        UsageError: unknown job or host, ``for_host`` not in the job, ``force`` without a reason, a
            plan that needs confirming without ``confirm``. SchedulerError: the scheduler does not know
            the job. A reason that cannot be recorded. ConfigError / StoreError. StoreLocked.
    """
    check_reason(req.reason, "--reason")
    check_reason(req.force_reason, "--force-reason")
    with session_for(req, "standby-activate", confirm=confirm, show=show) as session:
        return session.run(
            lambda ctx: plan_activate(
                ctx,
                for_host=req.for_host,
                job=req.job,
                standby=req.standby,
                reason=req.reason,
                requeue=req.requeue,
                force=req.force,
                force_reason=req.force_reason,
            )
        )


# --- size ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StandbySizeRequest:
    """``standby size``.

    Attributes:
        machines: machines the pool covers (None: the inventory's hosts). daily_failure_rate:
            failures per machine per day, or ``from_history``: the rate the store's evictions show over
            ``history_days`` (one of the two). repair_window_days / quantile: None: the inventory's
            policy (1 day, 0.99; ByteRobust Table 5). inventory / state: paths (None: defaults).
    """

    machines: int | None = None
    daily_failure_rate: float | None = None
    from_history: bool = False
    history_days: float = 30.0
    repair_window_days: float | None = None
    quantile: float | None = None
    inventory: Path | None = None
    state: Path | None = None


@dataclass(frozen=True)
class StandbySizeResult:
    """The pool size (``standbys``) and what it was computed from. Exit code 0.

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
    kind: str = "standby-size"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """Always OK (0)."""
        return ExitCode.OK


MAX_HISTORY_DAYS = 3650.0
"""Longest ``--history-days`` (ten years: longer than any store's history; bounds the query window)."""


def run_standby_size(req: StandbySizeRequest) -> StandbySizeResult:
    """The standby pool size: the smallest k with P[Binomial(machines, rate × window) ≤ k] ≥ quantile.

    Opens the inventory and the store only when needed (``from_history``, no ``machines``, or an
    explicit ``inventory`` whose policy gives the window and quantile).

    Raises:
        UsageError: neither or both of ``daily_failure_rate`` and ``from_history``; out-of-range values.
        ConfigError / StoreError: bad inventory, unreadable store.
    """
    if (req.daily_failure_rate is None) == (not req.from_history):
        raise UsageError("give --daily-failure-rate RATE or --from-history (one of them)")
    if not 0 < req.history_days <= MAX_HISTORY_DAYS:  # also refuses NaN
        raise UsageError(f"--history-days must be within (0, {MAX_HISTORY_DAYS}], got {req.history_days}")
    rate = req.daily_failure_rate
    evictions: int | None = None
    window, quantile = req.repair_window_days, req.quantile
    if req.from_history or req.machines is None or req.inventory is not None:
        ctx = open_context(req.inventory, req.state)
        try:
            n = req.machines if req.machines is not None else len(ctx.inventory.hosts)
            window = window or ctx.policy.standby_repair_window_days
            quantile = quantile or ctx.policy.standby_quantile
            if req.from_history:
                rate, evictions, _ = observed_daily_rate(ctx, n, req.history_days)
        finally:
            ctx.close()
    else:
        assert req.machines is not None
        n = req.machines
    window = window or 1.0
    quantile = quantile or 0.99
    assert rate is not None
    k = pool_size(n, rate, window_days=window, quantile=quantile)
    return StandbySizeResult(n, rate, window, quantile, evictions, k)
