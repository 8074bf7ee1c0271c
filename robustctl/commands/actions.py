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
from robustctl.errors import UsageError

__all__ = [
    "MAX_REASON_BYTES",
    "ActionRequest",
    "ActionResult",
    "Confirm",
    "Outcome",
    "ShowPlan",
    "always",
    "check_reason",
    "session_for",
]

MAX_REASON_BYTES = 4096
"""Longest ``--reason`` / ``--force-reason`` accepted, in UTF-8 bytes. A reason is a line or a
paragraph a person reads in the audit log and a scheduler shows beside the node (Slurm keeps it in
the node's reason field); 4 KiB holds a long paragraph with a ticket link, and refusing more keeps a
pasted log file out of every history row."""


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


def check_reason(text: str | None, flag: str) -> None:
    """Refuse a ``flag`` value (``--reason``, ``--force-reason``) that cannot be recorded as given.

    Any text is accepted (markup, control characters and bytes that are not UTF-8 are data, escaped
    where rendered) except a NUL, which no scheduler command line can carry, and text longer than
    :data:`MAX_REASON_BYTES` bytes.

    Args:
        text: the value (None: not given, accepted).
        flag: the option's name, for the message.

    Raises:
        UsageError: a NUL in ``text``, or ``text`` too long (the message names ``flag`` and the limit).
    """
    if text is None:
        return
    if "\x00" in text:
        raise UsageError(f"{flag} holds a NUL character (\\x00); give plain text")
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_REASON_BYTES:
        raise UsageError(
            f"{flag} is {size} bytes long; the limit is {MAX_REASON_BYTES} (a line or a paragraph)"
        )
