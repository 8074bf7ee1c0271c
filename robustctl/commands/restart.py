"""``run_restart`` and ``run_stop``: bring a training job back on its current machines, or stop it.

Names: :class:`RestartRequest` is the command's request (the planner's input plus the session's
options); the planner's own input is :class:`robustctl.actions.restart.RestartSpec`. What a restart
does on each scheduler back end: :mod:`robustctl.actions.restart`.

Exit codes (:attr:`ActionResult.exit_code`): 0 applied, a dry run or a declined plan · 2 another
robustctl holds the lock (StoreLocked) · 3 a step failed (a machine unreachable, processes that would
not die, ranks that did not start: the audit record says which steps ran) · 64 bad input
(``--from-checkpoint``, an unknown job, a plan that needs confirming without ``confirm``) · 78 bad
inventory: on the inventory back end, a job without ``launch:`` (restart) or ``process:`` (stop).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from robustctl.actions.restart import (
    RestartSpec,
    parse_from_checkpoint,
    plan_restart,
    plan_stop,
    restart_runners,
)
from robustctl.commands.actions import (
    ActionRequest,
    ActionResult,
    Confirm,
    ShowPlan,
    check_reason,
    session_for,
)
from robustctl.commands.evict import default_reason

__all__ = ["RestartRequest", "StopRequest", "run_restart", "run_stop"]


@dataclass(frozen=True, kw_only=True)
class RestartRequest(ActionRequest):
    """What ``robustctl restart`` was asked.

    Attributes:
        job: the inventory job. from_checkpoint: ``latest-complete`` (default), ``none`` or an
            iteration number. reason: why ("" → ``"robustctl restart (no --reason given)"``).
        Plus the session options of :class:`~robustctl.commands.actions.ActionRequest`.
    """

    job: str
    from_checkpoint: str = "latest-complete"
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class StopRequest(ActionRequest):
    """What ``robustctl stop`` was asked: the job, and why ("" → the default reason)."""

    job: str
    reason: str = ""


def run_restart(
    req: RestartRequest, *, confirm: Confirm | None = None, show: ShowPlan | None = None
) -> ActionResult:
    """Plan the restart (stop → code updates → checkpoint → launch → wait running, or the scheduler's
    requeue), then confirm and apply it in one action session.

    Args:
        req: the job, the checkpoint to start from, and the session options (``dry_run``: plan only).
        confirm: asked before anything changes (None: nobody can confirm; see :mod:`robustctl.actions.session`).
        show: receives the plan before it is confirmed (None: not shown).

    Returns:
        The action's result: its plan, outcome, applied steps and audit id.

    Raises:
        UsageError: a bad ``--from-checkpoint`` or reason, an unknown job, an option the back end cannot
            honour, a plan that needs confirming without ``confirm``.
        ConfigError / StoreError: a job without ``launch:`` on the inventory back end, bad inventory,
            unwritable store. StoreLocked: the lock is held.
    """
    check_reason(req.reason, "--reason")
    spec = RestartSpec(
        job=req.job,
        want=parse_from_checkpoint(req.from_checkpoint),
        reason=req.reason or default_reason("restart"),
    )
    return _run(req, "restart", spec, confirm, show)


def run_stop(
    req: StopRequest, *, confirm: Confirm | None = None, show: ShowPlan | None = None
) -> ActionResult:
    """Plan stopping the job's processes (TERM, grace, KILL, verified gone), then confirm and apply it.

    Args:
        req: the job and the session options (``dry_run``: plan only).
        confirm: asked before anything changes (None: nobody can confirm).
        show: receives the plan before it is confirmed (None: not shown).

    Returns:
        The action's result: its plan, outcome, applied steps and audit id.

    Raises:
        UsageError: a bad reason, an unknown job, a plan that needs confirming without ``confirm``.
        ConfigError / StoreError: another back end than inventory, a job without ``process:``, bad
            inventory, unwritable store. StoreLocked: the lock is held.
    """
    check_reason(req.reason, "--reason")
    spec = RestartSpec(job=req.job, reason=req.reason or default_reason("stop"))
    return _run(req, "stop", spec, confirm, show)


def _run(
    req: ActionRequest, action: str, spec: RestartSpec, confirm: Confirm | None, show: ShowPlan | None
) -> ActionResult:
    from robustctl.transport.pool import TransportPool

    planner = plan_restart if action == "restart" else plan_stop
    with session_for(req, action, confirm=confirm, show=show) as session:
        with contextlib.closing(TransportPool()) as pool:
            runners = restart_runners(session.ctx, spec, pool)
            return session.run(lambda ctx: planner(spec, ctx), runners=runners)
