"""One action session: open the context → take the store's lock (unless dry run) → plan → show →
confirm → apply → audit.

Every destructive command (evict, return, standby add, standby activate, restart, stop, rollback) runs
through :class:`ActionSession`, and ``standby check`` uses its open-and-lock half::

    with ActionSession("evict", inventory=path, dry_run=False, confirm=always) as session:
        result = session.run(lambda ctx: plan_evict(spec, ctx))

The library never prints or prompts. Two hooks let a front end take part:

* ``show(plan)``: called with the plan once it is built, before anything is decided (the CLI renders
  it on stderr, so that a person sees the plan before being asked);
* ``confirm(plan) -> bool``: asked before a plan that changes something is applied (not for a dry run,
  a refused plan, or a plan with nothing to do). The CLI passes a terminal prompt, ``--yes`` passes
  :func:`always`; ``confirm=None`` means nobody can confirm, and such a plan is a
  :class:`~robustctl.errors.UsageError` (exit 64) after ``show``, with nothing applied or audited.

Outcomes (:class:`Outcome`) and what is written:

* ``dry-run``: the plan, nothing written, no lock taken;
* ``refused``: a safety rail failed and was not overridden. Audited as ``refused`` unless dry run;
  the result carries the refusal (rule and override); exit 2;
* ``declined``: ``confirm`` said no; nothing written; exit 0;
* ``applied`` / ``nothing-to-do`` / ``failed``: :func:`~robustctl.actions.plan.apply_plan` ran
  (its audit record says which steps ran); exit 0, 0, 3.
* ``restart-failed``: a rollback only (:mod:`robustctl.actions.rollback`): the code was switched and
  recorded, and the restart it ran failed; the restart's exit code.

Errors raised (not outcomes): UsageError (bad input, nobody to confirm), ConfigError/StoreError (bad
inventory, a store that cannot be written or whose audit record does not read back, a row holding what
its column should not: exit 78; nothing applied), StoreLocked (another robustctl holds the lock past
``lock_timeout_s``: exit 2).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from robustctl.actions import ActionContext, open_context
from robustctl.actions.plan import (
    ApplyResult,
    Plan,
    StepKind,
    StepRunner,
    apply_json,
    apply_plan,
    audit_refusal,
    plan_json,
)
from robustctl.errors import ActionRefused, UsageError
from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION

__all__ = [
    "NO_CONFIRMATION",
    "ActionResult",
    "ActionSession",
    "Confirm",
    "Outcome",
    "ShowPlan",
    "always",
]

Confirm = Callable[[Plan], bool]
"""Asked before a plan that changes something is applied; True applies it."""

ShowPlan = Callable[[Plan], None]
"""Called with every plan once built (before confirm, also for dry runs and refusals)."""

Opener = Callable[[Path | None, Path | None], ActionContext]
"""Builds the context from (inventory path, state path); :func:`robustctl.actions.open_context`."""

NO_CONFIRMATION = "not applied: pass --yes to apply without a terminal to confirm on (or --dry-run)"
"""The UsageError message when a plan needs confirming and no ``confirm`` was given."""


def always(plan: Plan) -> bool:
    """The ``confirm`` of ``--yes`` (or of a playbook policy that allows the action): yes."""
    return True


class Outcome(str, enum.Enum):
    """How an action session ended (see the module docstring)."""

    DRY_RUN = "dry-run"
    REFUSED = "refused"
    DECLINED = "declined"
    APPLIED = "applied"
    NOTHING_TO_DO = "nothing-to-do"
    FAILED = "failed"
    RESTART_FAILED = "restart-failed"
    """A rollback checked the code out and recorded it, then the restart it ran failed
    (:mod:`robustctl.actions.rollback`)."""


@dataclass(frozen=True)
class ActionResult:
    """The outcome of one action command (evict, return, standby add, standby activate).

    Attributes:
        action: ``evict``, ``return``, ``standby-add``, ``standby-activate``. outcome: see :class:`Outcome`.
        plan: the plan (always). applied: what apply did (None unless it ran). refusal: the
        refusal's message (rules and overrides) when refused. audit_id: the audit record (None for a
        dry run, a declined plan, or a refusal the store could not record). schema_version.

    Its JSON document (:meth:`to_json`, which :func:`robustctl.commands.base.result_json`
    returns) is the plan document (``kind: "plan"``, :func:`~robustctl.actions.plan.plan_json`: the
    very document apply records in the audit log) when nothing was applied, and the apply document
    (``kind: "apply"``, :func:`~robustctl.actions.plan.apply_json`) when apply ran.
    """

    action: str
    outcome: Outcome
    plan: Plan
    applied: ApplyResult | None = None
    refusal: str | None = None
    audit_id: int | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def kind(self) -> str:
        """``"apply"`` when apply ran, else ``"plan"`` (the JSON document's kind)."""
        return "apply" if self.applied is not None else "plan"

    @property
    def exit_code(self) -> ExitCode:
        """OK (0) for a dry run, a declined plan, applied or nothing to do; CRITICAL (2) refused;
        UNKNOWN (3) when a step failed."""
        if self.outcome is Outcome.REFUSED:
            return ActionRefused.exit_code
        if self.applied is not None:
            return self.applied.exit_code
        return ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document: the apply document when apply ran, else the plan document."""
        return apply_json(self.applied) if self.applied is not None else plan_json(self.plan)

    def refused_error(self) -> ActionRefused:
        """The refusal as the error the CLI reports (only meaningful when ``outcome`` is refused)."""
        return ActionRefused(self.refusal or self.plan.refusal().args[0])


class ActionSession:
    """A context manager for one action: see the module docstring.

    Args:
        action: the action's name, recorded with the lock (``evict``, ``standby-check``, ...).
        inventory: the inventory path (None: ``$ROBUSTCTL_INVENTORY``, else the embedded default).
        state: the store path (None: ``$ROBUSTCTL_STATE``, else the user's state directory).
        dry_run: plan only: no lock, nothing written.
        lock: take the store's lock (False for commands that only read, e.g. ``standby list``).
        lock_timeout_s: how long to wait for another robustctl, seconds (None: the inventory's
            ``policy.lock_timeout_s``).
        confirm: asked before a plan that changes something is applied (see the module docstring;
            None: nobody can confirm).
        show: called with every plan once built (see the module docstring; None: not shown).
        opener: builds the context from the two paths (tests pass their own).

    Raises:
        ConfigError / InventoryError / StoreError: on enter, the inventory or the store cannot be used.
        StoreLocked: on enter, another robustctl holds the lock past the wait.
    """

    def __init__(
        self,
        action: str,
        *,
        inventory: Path | None = None,
        state: Path | None = None,
        dry_run: bool = False,
        lock: bool = True,
        lock_timeout_s: float | None = None,
        confirm: Confirm | None = None,
        show: ShowPlan | None = None,
        opener: Opener = open_context,
    ) -> None:
        self.action = action
        self.dry_run = dry_run
        self._inventory = inventory
        self._state = state
        self._lock = lock
        self._lock_timeout_s = lock_timeout_s
        self._confirm = confirm
        self._show = show
        self._opener = opener
        self._ctx: ActionContext | None = None

    def __enter__(self) -> ActionSession:
        ctx = self._opener(self._inventory, self._state)
        try:
            if self._lock and not self.dry_run:
                ctx.lock(self.action, self._lock_timeout_s)
        except BaseException:
            ctx.close()
            raise
        self._ctx = ctx
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._ctx is not None:
            self._ctx.close()
            self._ctx = None

    @property
    def ctx(self) -> ActionContext:
        """The open context (inventory, policy, store, scheduler). Raises RuntimeError outside ``with``."""
        if self._ctx is None:
            raise RuntimeError("ActionSession.ctx used outside its with block")
        return self._ctx

    def run(
        self,
        planner: Callable[[ActionContext], Plan],
        *,
        runners: Mapping[StepKind, StepRunner] | None = None,
    ) -> ActionResult:
        """Plan with ``planner(ctx)``, then :meth:`settle` the plan.

        Args:
            planner: builds the plan from the open context.
            runners: the runners of the step kinds the scheduler does not handle (see
                :func:`~robustctl.actions.plan.apply_plan`; None: none).

        Returns:
            The action's outcome, its plan and, when apply ran, what it did.

        Raises:
            UsageError: from the planner (bad input), or a plan that needs confirming without ``confirm``.
            StoreError: the store cannot be written.
        """
        return self.settle(planner(self.ctx), runners=runners)

    def settle(self, plan: Plan, *, runners: Mapping[StepKind, StepRunner] | None = None) -> ActionResult:
        """Show ``plan``, then refuse, confirm and apply it as the module docstring says.

        Args:
            plan: the plan to settle.
            runners: the runners of the step kinds the scheduler does not handle (see
                :func:`~robustctl.actions.plan.apply_plan`; None: none).

        Returns:
            The action's outcome, its plan and, when apply ran, what it did (the refusal's message
            and audit record when refused).

        Raises:
            UsageError: a plan that needs confirming without ``confirm`` (:data:`NO_CONFIRMATION`).
            StoreError: the store cannot be written.
        """
        ctx = self.ctx
        if self._show is not None:
            self._show(plan)
        refusal = str(plan.refusal()) if plan.refused else None
        if self.dry_run:
            outcome = Outcome.REFUSED if plan.refused else Outcome.DRY_RUN
            return ActionResult(plan.action, outcome, plan, refusal=refusal)
        if plan.refused:
            audit_id = audit_refusal(plan, ctx.store)
            return ActionResult(plan.action, Outcome.REFUSED, plan, refusal=refusal, audit_id=audit_id)
        if not plan.nothing_to_do:
            if self._confirm is None:
                raise UsageError(NO_CONFIRMATION)
            if not self._confirm(plan):
                return ActionResult(plan.action, Outcome.DECLINED, plan)
        applied = apply_plan(plan, ctx.scheduler, ctx.store, runners=runners)
        return ActionResult(
            plan.action, Outcome(applied.status), plan, applied=applied, audit_id=applied.audit_id
        )
