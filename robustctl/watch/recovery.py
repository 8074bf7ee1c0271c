"""The watcher's recoveries: how it reaches the playbook engine, and how it carries on a recovery an
earlier watcher began and died in (issue 22, §3).

The playbook engine and its journal live in :mod:`robustctl.playbooks`, which sits beside this
package and reaches the command layer; the watch may not import it. So the command layer passes
down a :class:`PlaybookEngine` (:mod:`robustctl.commands.watch` builds it over
:func:`robustctl.commands.playbook.run_playbook_run`, ``run_playbook_resume`` and the journal), and
everything here speaks to it only.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from robustctl.models import strict_jsonable
from robustctl.watch.rules import SignalClass
from robustctl.watch.state import WatchState

if TYPE_CHECKING:
    from robustctl.playbooks.journal import JournalRun
    from robustctl.store import Store
    from robustctl.watch.decide import WatchMemory

__all__ = [
    "ADOPT_RUNS_READ",
    "ADOPT_SLACK_S",
    "PlaybookEngine",
    "resume_orphaned",
    "run_alive",
    "run_ended",
    "run_summary",
]

ADOPT_SLACK_S = 5.0
"""How much earlier than the watcher's decision an unfinished run of the job may have begun and still be
adopted as the decision's run (the watcher died after beginning it, before storing its id), in seconds.
The decision's time and the journal's are the same host's clock read moments apart; 5 s covers a
clock slewed by NTP meanwhile, while a run a person began by hand earlier is not taken for it."""

ADOPT_RUNS_READ = 8
"""Most journal runs of the job read when adopting one (the newest; begin_run allows one unfinished)."""

MAX_RESUMED_STEPS_SAID = 64
"""Most finished step ids the resume event's evidence lists (the event is stored and printed; a
playbook has a few dozen steps at most; our choice)."""

MAX_RUN_MESSAGE_CHARS = 1024
"""Longest refusal message kept in a recovery run's summary (one error line; our choice)."""


def run_summary(run_id: int | None, playbook: str, status: str, message: str) -> dict[str, Any]:
    """A recovery run's summary as ``watch --json`` shows it (``playbook_run``, ``resumed``).

    Args:
        run_id: its journal id (None: refused before anything ran).
        playbook: the playbook.
        status: the run's status (``done``, ``failed``, ``running``) or ``refused``.
        message: its message (the caller cuts a refusal's to :data:`MAX_RUN_MESSAGE_CHARS`).

    Returns:
        ``{run_id, playbook, status, message}``.
    """
    return {"run_id": run_id, "playbook": playbook, "status": status, "message": message}


class PlaybookEngine(Protocol):
    """The playbook engine and journal as the watcher uses them (the command layer implements it)."""

    def start(self, name: str, params: Mapping[str, str]) -> dict[str, Any]:
        """Run playbook ``name`` with ``params`` (unattended: its policy decides destructive steps).

        Args:
            name: the playbook.
            params: its parameters, by name.

        Returns:
            ``{run_id, playbook, status, message}``; ``run_id`` None and status ``refused`` when the
            engine refused it before anything ran.
        """

    def resume(self, run_id: int) -> dict[str, Any]:
        """Carry journal run ``run_id`` on (no finished step runs again).

        Args:
            run_id: the journal run.

        Returns:
            ``{run_id, playbook, status, message}``.

        Raises:
            StoreLocked: the run's process lives after all (it holds the job's playbook lock).
            RobustctlError: the engine refused it.
        """

    def run_record(self, store: Store, run_id: int) -> JournalRun | None:
        """Journal run ``run_id`` with its steps (None: no such run).

        Args:
            store: the open store.
            run_id: the run's journal id.

        Returns:
            The run, or None.
        """

    def unfinished_runs(self, store: Store, job: str, limit: int) -> list[JournalRun]:
        """The job's newest ``limit`` journal runs whose status is still ``running``, newest first.

        Args:
            store: the open store.
            job: the job.
            limit: how many runs are read.

        Returns:
            Those of them still ``running``.
        """

    def is_unfinished(self, run: JournalRun) -> bool:
        """Whether the journal still says ``run`` is running.

        Args:
            run: a journal run.

        Returns:
            True while its status is ``running``.
        """

    def lock_held(self, store: Store, job: str) -> bool:
        """Whether a process holds the job's playbook lock (held for a whole run, released by the
        kernel when its process dies).

        Args:
            store: the open store.
            job: the job.

        Returns:
            True when another process holds it.
        """


def run_ended(store: Store, engine: PlaybookEngine, memory: WatchMemory) -> float | None:
    """When the playbook run in progress ended (the journal's finish time); a run never begun (the
    watcher died between deciding and beginning it) counts as ended when it was decided.

    Args:
        store: the open store.
        engine: the journal's reader.
        memory: the decision memory.

    Returns:
        UNIX s, or None while no run is in progress or it still runs.
    """
    run = memory.running
    if run is None:
        return None
    if run.run_id is None:
        return run.started_s
    rec = engine.run_record(store, run.run_id)
    if rec is None:
        return run.started_s
    return rec.finished_at


def run_alive(store: Store, engine: PlaybookEngine, job: str, pid: int) -> bool:
    """Whether the process of a journal run still carries it: this process, or another that holds the
    job's playbook lock (so a pid reused since does not count).

    Args:
        store: the open store.
        engine: the journal's lock.
        job: the job.
        pid: the id of the run's process (the journal's).

    Returns:
        True while the run's process lives.
    """
    if pid == os.getpid():
        return True
    return engine.lock_held(store, job)


def _adopt(
    store: Store, engine: PlaybookEngine, job: str, st: WatchState, now: float
) -> tuple[WatchState, int | None]:
    """The journal id of the run in progress: the stored one, else the job's unfinished run begun since
    the decision (:data:`ADOPT_SLACK_S`), stored at once; None when none is found."""
    from robustctl import watchstore

    run = st.memory.running
    assert run is not None
    if run.run_id is not None:
        return st, run.run_id
    found = [
        r
        for r in engine.unfinished_runs(store, job, ADOPT_RUNS_READ)
        if r.started_at >= run.started_s - ADOPT_SLACK_S
    ]
    if not found:
        return st, None
    rid = found[0].id
    st = WatchState(st.memory.with_run_id(rid), st.fail_slow, st.last_step, st.incident_id)
    watchstore.put_state(store, job, st.to_json(), at=now)
    return st, rid


def _record_resume(store: Store, job: str, st: WatchState, rec: JournalRun, now: float) -> int:
    """Record the ``watch.resume`` event of carrying ``rec`` on (and the run on the incident, where the
    watcher died before it could); the event's id."""
    from robustctl import watchstore

    run = st.memory.running
    assert run is not None
    incident = st.memory.incident
    cls = incident.signal.value if incident is not None else SignalClass.UNKNOWN.value
    done = [x.step for x in rec.steps if x.status in ("done", "skipped")]
    event_id = watchstore.record_event(
        store,
        job,
        at=now,
        signal_class=cls,
        rule="watch.resume",
        action=watchstore.WatchAction.RUN,
        reason=(
            f"resumed playbook run {rec.id} ({rec.playbook}) of incident {run.incident}: the process that "
            f"ran it (pid {rec.pid}) is gone; the journal carries it on, no finished step runs again"
        ),
        playbook=rec.playbook,
        evidence=strict_jsonable(
            {"run_id": rec.id, "dead_pid": rec.pid, "steps_finished": done[:MAX_RESUMED_STEPS_SAID]}
        ),
        incident_id=st.incident_id,
        playbook_run_id=rec.id,
    )
    if st.incident_id is not None:  # the watcher died before it could record the run on the incident
        with contextlib.suppress(watchstore.IncidentRefused):
            watchstore.update_incident(
                store,
                st.incident_id,
                decision_at=run.started_s,
                playbook=rec.playbook,
                playbook_run_id=rec.id,
            )
    return event_id


def resume_orphaned(
    store: Store, engine: PlaybookEngine, job: str, st: WatchState, now: float, *, advise: bool
) -> tuple[WatchState, dict[str, Any] | None]:
    """Resume the recovery run an earlier watcher began and died in, through the journal.

    The stored memory names a run in progress; when its journal record is still ``running`` and the
    process that ran it is gone (:func:`run_alive`), :meth:`PlaybookEngine.resume` carries it on (a
    finished step is never run again; a destructive step whose audit record finished is not applied
    again: the engine's resume rule), after an event saying so. A run begun but whose id the watcher
    had not stored yet is adopted (the job's unfinished run begun since the decision, see
    :data:`ADOPT_SLACK_S`). Nothing is resumed with ``advise`` or while the run's process lives.

    Args:
        store: the open store.
        engine: the playbook engine.
        job: the job.
        st: the stored state.
        now: UNIX s of the evaluation.
        advise: ``--advise`` (nothing is resumed).

    Returns:
        The state (with the adopted id) and the resumed run's summary ``{run_id, playbook, status,
        message, event_id}`` (None: nothing resumed).

    Raises:
        StoreError: the store cannot be read or written.
    """
    from robustctl.errors import RobustctlError
    from robustctl.store import StoreLocked
    from robustctl.watch.incidents import fill_incident

    if st.memory.running is None or advise:
        return st, None
    st, rid = _adopt(store, engine, job, st, now)
    if rid is None:
        return st, None
    rec = engine.run_record(store, rid)
    if rec is None or not engine.is_unfinished(rec) or run_alive(store, engine, job, rec.pid):
        return st, None
    event_id = _record_resume(store, job, st, rec, now)
    try:
        info = engine.resume(rid)
    except StoreLocked:
        return st, None  # its process lives after all (another pid namespace): it carries on
    except RobustctlError as exc:
        info = run_summary(rid, rec.playbook, "refused", str(exc)[:MAX_RUN_MESSAGE_CHARS])
    info["event_id"] = event_id
    if st.incident_id is not None:
        fill_incident(store, engine, job, st.incident_id, None)
    return st, info
