"""``robustctl audit`` as a library call: :func:`run_audit` reads the audit log of the state store."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from robustctl.commands.options import parse_duration
from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION

if TYPE_CHECKING:
    from robustctl.store import AuditRecord

__all__ = ["AuditRequest", "AuditResult", "audit_request", "parse_duration", "pid_gone", "run_audit"]


@dataclass(frozen=True)
class AuditRequest:
    """Attributes: state: the store file (None: ``$ROBUSTCTL_STATE`` or the XDG default).
    since_s: only actions started within this many seconds (None: all)."""

    state: Path | None = None
    since_s: float | None = None


@dataclass(frozen=True)
class AuditResult:
    """The audit log, oldest first.

    Attributes:
        records: every action in the window (:class:`~robustctl.store.AuditRecord`).
        incomplete: ids of records left ``started`` by a process of this host that is gone (an
            action killed mid-apply: the steps before its running step ran, that one may or may not
            have). kind: ``"audit"``. schema_version.
    """

    records: tuple[AuditRecord, ...]
    incomplete: tuple[int, ...] = ()
    kind: str = "audit"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """Always OK (an unreadable store is a StoreError, 78)."""
        return ExitCode.OK


def audit_request(*, state: Path | None = None, since: str | None = None) -> AuditRequest:
    """An :class:`AuditRequest` from command-line values (``since`` as ``24h``, ``7d``, ...).

    Args:
        state: the state store path (None: ``$ROBUSTCTL_STATE`` or the default).
        since: how far back to read, as ``24h``, ``7d``, ... (None: the whole log).

    Returns:
        The request :func:`run_audit` takes (the window in seconds).

    Raises:
        UsageError: a bad duration.
    """
    return AuditRequest(state=state, since_s=parse_duration(since) if since else None)


def run_audit(request: AuditRequest, *, clock: Callable[[], float] = time.time) -> AuditResult:
    """Read the audit log (the window ends now, by ``clock``).

    Args:
        request: the store and the window (``since``) to read.
        clock: seconds since the epoch now (tests pass a fixed one).

    Returns:
        The audit records in the window, oldest first.

    Raises:
        StoreError: the store cannot be opened or read.
    """
    from robustctl.store import Store

    cutoff = clock() - request.since_s if request.since_s is not None else None
    with Store.open(request.state) as store:
        records = tuple(store.audit(since=cutoff))
    gone = tuple(r.id for r in records if r.status == "started" and pid_gone(r.who, r.pid))
    return AuditResult(records, gone)


def pid_gone(who: str, pid: int) -> bool:
    """True when ``who`` (``user@host``) ran on this host and its ``pid`` no longer exists."""
    from robustctl.store import whoami

    if who.split("@")[-1] != whoami().split("@")[-1]:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False
