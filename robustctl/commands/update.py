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
  the one the hosts run now (or ``--to``) on every host of the job, all or none, record it (the
  rolled-back changes, pending changes cleared), then restart (``run_restart``), as a plan of the
  action session and :func:`~robustctl.actions.plan.apply_plan`, audited as every action is.

The work is in :mod:`robustctl.actions.update` and :mod:`robustctl.actions.rollback`; this module builds
the requests and calls them. ``run_restart`` is imported when it is needed (``robustctl.commands.restart``);
tests and the playbook engine may pass their own ``restart`` callable.

Exit codes: 0 staged / listed / rolled back (or dry run, declined) · 2 refused (no stable version and no
``--to``, a dirty work tree, the store's lock) · 3 a host could not be reached, or the checkout failed
(every switched host put back) · the restart's own code when the restart after a rollback failed ·
64 bad input (ref missing on a host, bad ref) · 78 bad inventory (no ``code:`` section, path not a git
work tree) or state store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from robustctl.actions.rollback import (
    RollbackConfirm,
    RollbackPlan,
    RollbackResult,
    RollbackShow,
    RollbackSpec,
    rollback,
)
from robustctl.actions.session import Outcome
from robustctl.actions.update import (
    UpdateApplyResult,
    UpdateListResult,
    UpdateStageResult,
    code_history,
    due_update,
    stage_change,
)
from robustctl.commands.actions import ActionRequest, always, check_reason, session_for
from robustctl.errors import UsageError
from robustctl.jobcode.git import check_ref
from robustctl.models import result_json

if TYPE_CHECKING:
    from robustctl.actions.session import ActionResult, ActionSession, Confirm, ShowPlan

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

RollbackOutcome = Outcome
"""How a rollback ended: the action session's :class:`~robustctl.actions.session.Outcome` (the name
kept for the callers that import it from here)."""

RestartFn = Callable[..., "ActionResult"]
"""``restart(job, reason, req, confirm, show) -> ActionResult``: restarts the job (default:
:func:`default_restart`, which calls ``robustctl.commands.restart.run_restart``)."""


def default_restart(
    job: str, reason: str, req: ActionRequest, confirm: Confirm | None, show: ShowPlan | None
) -> ActionResult:
    """Restart ``job`` through ``robustctl.commands.restart.run_restart`` (imported here, when needed)."""
    from robustctl.commands.restart import RestartRequest, run_restart

    request = RestartRequest(
        job=job,
        reason=reason,
        inventory=req.inventory,
        state=req.state,
        dry_run=req.dry_run,
        lock_timeout_s=req.lock_timeout_s,
    )
    return run_restart(request, confirm=confirm, show=show)


def _restart(
    given: RestartFn | None, req: ActionRequest, job: str, reason: str, confirm: Any, show: Any
) -> ActionResult:
    """Run the restart (``given``, else :func:`default_restart`, looked up when called)."""
    return (given or default_restart)(job, reason, req, confirm, show)


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
    with session_for(req, "update-stage", lock=False) as session:
        staged = stage_change(
            session.ctx,
            req.job,
            req.ref,
            req.reason,
            urgent=req.urgent,
            dry_run=req.dry_run,
            lock_timeout_s=req.lock_timeout_s,
        )
    found = (req.job, req.ref, staged.commit, staged.from_commit, staged.disagreeing, staged.hosts)
    if req.dry_run or not req.urgent:
        return UpdateStageResult(*found, staged.change, req.urgent, req.dry_run)
    res = _restart(restart, req, req.job, f"urgent update {req.ref}: {req.reason}", confirm, show)
    return UpdateStageResult(
        *found, staged.change, True, False, restart=result_json(res), restart_exit=int(res.exit_code)
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
    with session_for(req, "update-apply", lock=False) as session:
        due = due_update(session.ctx, req.job)
    found = (req.job, due.commit, due.change_ids, due.due, due.due_at)
    if due.commit is None or not (due.due or req.now):
        return UpdateApplyResult(*found, False, req.dry_run)
    res = _restart(restart, req, req.job, due.restart_reason(req.reason), confirm, show)
    return UpdateApplyResult(
        *found,
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


def run_update_list(req: UpdateListRequest) -> UpdateListResult:
    """The job's changes and versions, stability evaluated first from a progress reading.

    Raises: UsageError (unknown job), ConfigError (bad inventory, no ``code:``), StoreError.
    """
    request = ActionRequest(inventory=req.inventory, state=req.state)
    with session_for(request, "update-list", lock=False) as session:
        history = code_history(session.ctx, req.job, read_progress=req.read_progress)
    return UpdateListResult(
        req.job,
        history.changes,
        history.versions,
        history.pending_commit,
        history.pending_ids,
        history.forced,
        history.last_stable,
        history.progress_note,
    )


# ---- rollback -----------------------------------------------------------------------------------


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


def run_rollback(
    req: RollbackRequest,
    *,
    confirm: RollbackConfirm | None = None,
    show: RollbackShow | None = None,
    restart: RestartFn | None = None,
    restart_show: ShowPlan | None = None,
) -> RollbackResult:
    """Plan, show, confirm and apply a rollback (:func:`robustctl.actions.rollback.rollback`).

    ``confirm(plan)`` is asked before anything changes (None: nobody can confirm → UsageError unless
    ``dry_run``); a confirmed rollback restarts without asking again (``restart_show`` shows the
    restart's plan). The store's lock is held from planning through the checkout and the record, and
    released before the restart (which takes it itself).

    Raises: ActionRefused (no stable version and no ``--to``; a dirty work tree; the lock), UsageError,
    ConfigError, HostError (a host could not be read: nothing switched), StoreError.
    """
    check_reason(req.reason, "--reason")
    if req.to is not None:
        check_ref(req.to)

    def open_session(plan_confirm: Confirm | None, plan_show: ShowPlan | None) -> ActionSession:
        return session_for(req, "rollback", confirm=plan_confirm, show=plan_show)

    def restart_job(job: str, reason: str) -> ActionResult:
        return _restart(restart, req, job, reason, always, restart_show)

    spec = RollbackSpec(job=req.job, to=req.to, reason=req.reason)
    return rollback(open_session, spec, restart_job, confirm=confirm, show=show)
