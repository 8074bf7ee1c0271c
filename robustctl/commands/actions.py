"""What the action commands (evict, return, standby add/activate/check) share: the session options.

Every action request carries where to act (``inventory``, ``state``), whether to only plan
(``dry_run``) and how long to wait for another robustctl's lock (``lock_timeout_s``); the command
opens one :class:`~robustctl.actions.session.ActionSession` with them. Confirmation is not an option
of the request but a callable the caller passes (``confirm``; :func:`~robustctl.actions.session.always`
for ``--yes``), as is the hook that shows the plan before it is confirmed (``show``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from robustctl.actions.session import (
    ActionResult,
    ActionSession,
    Confirm,
    Outcome,
    ShowPlan,
    always,
)

__all__ = ["ActionRequest", "ActionResult", "Confirm", "Outcome", "ShowPlan", "always", "session_for"]


@dataclass(frozen=True, kw_only=True)
class ActionRequest:
    """The session options of every action request.

    Attributes:
        inventory: the inventory YAML (None: ``$ROBUSTCTL_INVENTORY``, else this machine).
        state: the state store (None: ``$ROBUSTCTL_STATE``, else the user's state directory).
        dry_run: plan only (no lock, nothing written). lock_timeout_s: seconds to wait for another
            robustctl acting on the store (None: the inventory's ``policy.lock_timeout_s``, 30).
    """

    inventory: Path | None = None
    state: Path | None = None
    dry_run: bool = False
    lock_timeout_s: float | None = None


def session_for(
    req: ActionRequest,
    action: str,
    *,
    confirm: Confirm | None = None,
    show: ShowPlan | None = None,
    lock: bool = True,
) -> ActionSession:
    """The :class:`~robustctl.actions.session.ActionSession` of ``req`` for ``action``."""
    return ActionSession(
        action,
        inventory=req.inventory,
        state=req.state,
        dry_run=req.dry_run,
        lock=lock,
        lock_timeout_s=req.lock_timeout_s,
        confirm=confirm,
        show=show,
    )
