"""``robustctl watch --history --job J`` as a library call: the job's recorded decisions (the events
``robustctl watch`` stored, :func:`robustctl.watchstore.events`), oldest first. Nothing is written; a
missing store is an empty history. Exit 0; 78 a store that cannot be read or a bad limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION, strict_jsonable

if TYPE_CHECKING:
    from robustctl.watchstore import WatchEvent

__all__ = ["WatchHistoryRequest", "WatchHistoryResult", "run_watch_history"]


@dataclass(frozen=True, kw_only=True)
class WatchHistoryRequest:
    """``robustctl watch --history --job J``: the job's recorded decisions, oldest first."""

    job: str
    state: Path | None = None
    limit: int = 1000


@dataclass(frozen=True)
class WatchHistoryResult:
    """The job's watch events (kind ``watch-history``). Exit 0."""

    job: str
    events: tuple[WatchEvent, ...]
    kind: str = "watch-history"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """Always OK: a history is not a verdict."""
        return ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        """The strict-JSON document."""
        rows = [
            {
                "id": e.id,
                "at": e.at,
                "class": e.signal_class,
                "rule": e.rule,
                "action": e.action.value,
                "playbook": e.playbook,
                "reason": e.reason,
                "evidence": dict(e.evidence),
                "incident_id": e.incident_id,
                "playbook_run_id": e.playbook_run_id,
                "who": e.who,
            }
            for e in self.events
        ]
        doc = {"kind": self.kind, "schema_version": self.schema_version, "job": self.job, "events": rows}
        out: dict[str, Any] = strict_jsonable(doc)
        return out


def run_watch_history(request: WatchHistoryRequest) -> WatchHistoryResult:
    """The job's newest ``limit`` events (nothing written; a missing store is an empty history).

    Args:
        request: the job, the store file, the limit.

    Returns:
        The job's events, oldest first.

    Raises:
        WatchStoreInputError: a bad limit (exit 78). StoreError: the store cannot be read (exit 78).
    """
    from robustctl import watchstore
    from robustctl.commands.options import state_path
    from robustctl.store import Store

    path = state_path(request.state)
    if not path.exists():
        return WatchHistoryResult(request.job, ())
    with Store.open(path) as store:
        return WatchHistoryResult(
            request.job, tuple(watchstore.events(store, request.job, limit=request.limit))
        )
