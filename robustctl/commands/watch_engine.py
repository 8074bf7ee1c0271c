"""The playbook engine and its journal as ``robustctl watch`` reaches them.

The watch's domain (:mod:`robustctl.watch`) may import neither the command layer nor the playbooks
package (which reaches the command layer); :mod:`robustctl.commands.watch` passes this
:class:`~robustctl.watch.recovery.PlaybookEngine` down instead. It runs a recovery through the same
library calls as ``robustctl playbook run`` and ``playbook resume``
(:func:`robustctl.commands.playbook.run_playbook_run`, :func:`~robustctl.commands.playbook.run_playbook_resume`):
the playbook's own policy and the rails of ``evict`` apply as by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustctl.errors import RobustctlError
from robustctl.watch.recovery import MAX_RUN_MESSAGE_CHARS, run_summary

if TYPE_CHECKING:
    from robustctl.playbooks.journal import JournalRun
    from robustctl.store import Store

__all__ = ["WatchPlaybookEngine"]


class WatchPlaybookEngine:
    """The playbook engine and journal as the watcher reaches them
    (:class:`robustctl.watch.recovery.PlaybookEngine`): runs unattended, destructive steps allowed by
    ``--yes`` (:func:`robustctl.actions.session.always`) or else by the playbook's own policy only.

    Args:
        inventory: the inventory file the playbooks read.
        state: the store file (None: ``$ROBUSTCTL_STATE`` or the XDG default).
        yes: ``--yes``: confirm every destructive step (else the playbook's policy decides, and a
            playbook that needs a person is refused before anything runs).
    """

    def __init__(self, inventory: Path, state: Path | None, *, yes: bool) -> None:
        from robustctl.actions.session import always

        self._inventory = inventory
        self._state = state
        self._confirm = always if yes else None

    def start(self, name: str, params: Mapping[str, str]) -> dict[str, Any]:
        """:meth:`robustctl.watch.recovery.PlaybookEngine.start` (a refusal is a summary, not raised)."""
        from robustctl.commands.playbook import PlaybookRunRequest, run_playbook_run
        from robustctl.playbooks.engine import RunOutcome

        req = PlaybookRunRequest(name=name, params=dict(params), inventory=self._inventory, state=self._state)
        try:
            out = run_playbook_run(req, confirm=self._confirm)
        except RobustctlError as exc:
            return run_summary(None, name, "refused", str(exc)[:MAX_RUN_MESSAGE_CHARS])
        if not isinstance(out, RunOutcome):  # pragma: no cover - not a dry run
            return run_summary(None, name, "refused", "not run")
        return run_summary(out.run_id, out.playbook, out.status, out.message)

    def resume(self, run_id: int) -> dict[str, Any]:
        """:meth:`robustctl.watch.recovery.PlaybookEngine.resume`."""
        from robustctl.commands.playbook import PlaybookResumeRequest, run_playbook_resume

        req = PlaybookResumeRequest(run_id=run_id, inventory=self._inventory, state=self._state)
        out = run_playbook_resume(req, confirm=self._confirm)
        return run_summary(out.run_id, out.playbook, out.status, out.message)

    def run_record(self, store: Store, run_id: int) -> JournalRun | None:
        """:func:`robustctl.playbooks.journal.run_record`."""
        from robustctl.playbooks import journal

        return journal.run_record(store, run_id)

    def unfinished_runs(self, store: Store, job: str, limit: int) -> list[JournalRun]:
        """The job's newest ``limit`` journal runs (:func:`robustctl.playbooks.journal.runs`) still running."""
        from robustctl.playbooks import journal

        return [r for r in journal.runs(store, job=job, limit=limit) if self.is_unfinished(r)]

    def is_unfinished(self, run: JournalRun) -> bool:
        """Whether the journal's status of ``run`` is ``running``."""
        from robustctl.playbooks import journal

        return run.status == journal.RunStatus.RUNNING

    def lock_held(self, store: Store, job: str) -> bool:
        """Whether another process holds the job's playbook lock (:func:`robustctl.playbooks.journal.job_lock`)."""
        from robustctl.playbooks import journal
        from robustctl.store import StoreLocked

        try:
            with journal.job_lock(store, job):
                return False
        except StoreLocked:
            return True
