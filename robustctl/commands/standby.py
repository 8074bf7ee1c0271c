"""``run_standby_list|check|add|activate|size``: the warm-standby pool.

``add`` and ``activate`` are action sessions (plan → confirm → apply, :class:`ActionResult`);
``check`` takes the store's lock, diagnoses the standbys (L0–L1) and records each ready or bad;
``list`` and ``size`` only read.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from robustctl.actions.session import ActionSession
from robustctl.actions.standby import (
    MAX_HISTORY_DAYS,
    PoolSizing,
    StandbyInfo,
    check_standbys,
    list_standbys,
    plan_activate,
    plan_add,
    size_pool,
)
from robustctl.commands.actions import (
    ActionRequest,
    ActionResult,
    Confirm,
    ShowPlan,
    check_reason,
    session_for,
)
from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION, RunReport
from robustctl.store import Readiness
from robustctl.transport.pool import TransportPool

__all__ = [
    "MAX_HISTORY_DAYS",
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

    Args:
        req: the inventory and the state store (None: their defaults).

    Returns:
        The standby pool, inventory order (exit code 0).

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
        req: the standbys to check (None: the whole pool), the inventory, the store and the lock's wait.
        pool: the transports to reach the hosts (tests: one with a fake override); None: a new one,
            closed at the end.

    Returns:
        Each standby's readiness and why, the diagnose report and the audit record (exit 0 every
        standby ready, 2 some bad).

    Raises:
        UsageError: no standby to check, or ``hosts`` names a host that is not a standby.
        ConfigError / StoreError: bad inventory, unwritable store.
        StoreLocked: the lock is held.
    """
    with contextlib.ExitStack() as stack:
        transports = pool if pool is not None else stack.enter_context(contextlib.closing(TransportPool()))
        session = stack.enter_context(
            ActionSession(
                "standby-check", inventory=req.inventory, state=req.state, lock_timeout_s=req.lock_timeout_s
            )
        )
        checked = check_standbys(session.ctx, transports, hosts=req.hosts)
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

    Args:
        req: the hosts, the reason, the ``not-in-a-job`` override, and the session options.
        confirm: asked before a plan that changes something is applied (None: nobody can confirm).
        show: called with the plan once built (None: not shown).

    Returns:
        The action's outcome, its plan and, when apply ran, what it did.

    Raises:
        UsageError: bad host range or unknown host, ``force`` without a reason, a plan that needs
            confirming without ``confirm``, a reason that cannot be recorded.
        ConfigError / StoreError: bad inventory, a store that cannot be used.
        StoreLocked: the store's lock is held.
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

    Args:
        req: the host to replace, the job, the standby, requeue, the reason, the override, and the
            session options.
        confirm: asked before a plan that changes something is applied (None: nobody can confirm).
        show: called with the plan once built (None: not shown).

    Returns:
        The action's outcome, its plan and, when apply ran, what it did.

    Raises:
        UsageError: unknown job or host, ``for_host`` not in the job, ``force`` without a reason, a
            plan that needs confirming without ``confirm``, a reason that cannot be recorded.
        SchedulerError: the scheduler does not know the job.
        ConfigError / StoreError: bad inventory, a store that cannot be used.
        StoreLocked: the store's lock is held.
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
class StandbySizeResult(PoolSizing):
    """The pool size (``standbys``) and what it was computed from (:class:`PoolSizing`'s fields, then
    ``kind`` and ``schema_version``). Exit code 0."""

    kind: str = "standby-size"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """Always OK (0)."""
        return ExitCode.OK


def run_standby_size(req: StandbySizeRequest) -> StandbySizeResult:
    """The standby pool size: the smallest k with P[Binomial(machines, rate × window) ≤ k] ≥ quantile
    (:func:`robustctl.actions.standby.size_pool`, which says when the inventory and store are opened).

    Args:
        req: the machines, the failure rate (or ``from_history``), the repair window, the quantile,
            and the inventory and store paths.

    Returns:
        The pool size and what it was computed from (exit code 0).

    Raises:
        UsageError: neither or both of ``daily_failure_rate`` and ``from_history``; out-of-range values.
        ConfigError / StoreError: bad inventory, unreadable store.
    """
    s = size_pool(
        machines=req.machines,
        daily_failure_rate=req.daily_failure_rate,
        from_history=req.from_history,
        history_days=req.history_days,
        repair_window_days=req.repair_window_days,
        quantile=req.quantile,
        inventory=req.inventory,
        state=req.state,
    )
    return StandbySizeResult(**dataclasses.asdict(s))
