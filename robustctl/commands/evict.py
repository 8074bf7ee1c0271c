"""``run_evict`` and ``run_return``: take machines out of service and put them back.

Names: :class:`EvictRequest` here is the command's request (the planner's input plus the session's
options); the planner's own input is :class:`robustctl.actions.evict.EvictSpec`.

Exit codes (:attr:`ActionResult.exit_code`): 0 applied, nothing to do, a dry run or a declined plan ·
2 refused by a safety rail (raised as StoreLocked when another robustctl holds the lock) · 3 a
scheduler step failed (the audit record says which steps ran) · 64 bad input, or a plan that needs
confirming without ``confirm`` · 78 bad inventory, or a state store that cannot be written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from robustctl.actions.evict import EvictSpec, plan_evict, plan_return
from robustctl.commands.actions import (
    ActionRequest,
    ActionResult,
    Confirm,
    ShowPlan,
    check_reason,
    session_for,
)

__all__ = ["EvictRequest", "ReturnRequest", "default_reason", "run_evict", "run_return"]


def default_reason(action: str, report: Path | None = None) -> str:
    """The reason recorded when none is given, e.g. ``"robustctl evict (no --reason given)"``."""
    return f"robustctl {action}" + (f" from {report}" if report is not None else "") + " (no --reason given)"


@dataclass(frozen=True, kw_only=True)
class EvictRequest(ActionRequest):
    """What ``robustctl evict`` was asked (see :func:`robustctl.actions.evict.plan_evict`).

    Attributes:
        hosts: a host range (``node[001-004],node017``) or None. report: a ``diagnose``/``stacks``
            ``--json`` file or None (one of the two). job: the job whose layout defines the groups.
        over_evict: ``tp``, ``pp``, ``dp``, ``cp``, ``ep``, ``auto`` (any case) or None.
        reason: why ("" → :func:`default_reason`). force / force_reason: override the rails that allow it.
        Plus the session options of :class:`~robustctl.commands.actions.ActionRequest`.
    """

    hosts: str | None = None
    report: Path | None = None
    job: str | None = None
    over_evict: str | None = None
    reason: str = ""
    force: bool = False
    force_reason: str | None = None

    def spec(self) -> EvictSpec:
        """The planner's input: the over-eviction mode lower-cased, the default reason filled in."""
        return EvictSpec(
            hosts=self.hosts,
            report=self.report,
            job=self.job,
            over_evict=self.over_evict.lower() if self.over_evict else None,
            reason=self.reason or default_reason("evict", self.report),
            force=self.force,
            force_reason=self.force_reason,
        )


def run_evict(
    req: EvictRequest, *, confirm: Confirm | None = None, show: ShowPlan | None = None
) -> ActionResult:
    """Plan the eviction (over-eviction, rails), then confirm and apply it in one action session.

    Args:
        req: what to evict, the session options included (``dry_run``: plan only).
        confirm: asked before anything changes (None: nobody can confirm; see :mod:`robustctl.actions.session`).
        show: receives the plan before it is confirmed (None: not shown).

    Returns:
        The action's result: its plan, outcome, applied steps and audit id.

    Raises:
        UsageError: bad hosts, report, job or mode, both hosts and a report, ``--force`` without a reason,
            a reason that cannot be recorded (:func:`~robustctl.commands.actions.check_reason`), a plan
            that needs confirming without ``confirm``.
        ConfigError / StoreError: bad inventory, unwritable store. StoreLocked: the lock is held.
    """
    check_reason(req.reason, "--reason")
    check_reason(req.force_reason, "--force-reason")
    spec = req.spec()
    with session_for(req, "evict", confirm=confirm, show=show) as session:
        return session.run(lambda ctx: plan_evict(spec, ctx))


@dataclass(frozen=True, kw_only=True)
class ReturnRequest(ActionRequest):
    """What ``robustctl return`` was asked.

    Attributes:
        hosts: the hosts to put back in service (a host range). reason: why ("" → :func:`default_reason`).
        Plus the session options of :class:`~robustctl.commands.actions.ActionRequest`.
    """

    hosts: str
    reason: str = ""


def run_return(
    req: ReturnRequest, *, confirm: Confirm | None = None, show: ShowPlan | None = None
) -> ActionResult:
    """Plan resuming the hosts (scheduler) and marking them returned → active (store), then apply it.

    Args:
        req: the hosts to return and the session options (``dry_run``: plan only).
        confirm: asked before anything changes (None: nobody can confirm).
        show: receives the plan before it is confirmed (None: not shown).

    Returns:
        The action's result: its plan, outcome, applied steps and audit id.

    Raises:
        UsageError: a bad host range or unknown host, a reason that cannot be recorded; a plan that
            needs confirming without ``confirm``.
        ConfigError / StoreError: bad inventory, unwritable store. StoreLocked: the lock is held.
    """
    check_reason(req.reason, "--reason")
    reason = req.reason or default_reason("return")
    with session_for(req, "return", confirm=confirm, show=show) as session:
        return session.run(lambda ctx: plan_return(req.hosts, reason, ctx))
