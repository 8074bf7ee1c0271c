"""The job's incidents in the store as the watcher keeps them (issue 22, §4).

:func:`sync_incident` mirrors the decision memory's open incident into the store's ``incidents``
table; :func:`fill_incident` fills an incident's phases from its recovery run's journal
(:func:`incident_phases`, pure) and its first new step. The journal is reached through the
:class:`~robustctl.watch.recovery.PlaybookEngine` the command layer passes down.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from robustctl.actions.restart import picked_iteration

if TYPE_CHECKING:
    from robustctl.playbooks.journal import JournalRun, JournalStep
    from robustctl.store import Store
    from robustctl.watch.decide import Decision, WatchMemory
    from robustctl.watch.recovery import PlaybookEngine
    from robustctl.watch.signals import JobReading

__all__ = [
    "EVICTION_KINDS",
    "LOCALIZATION_KINDS",
    "RESTART_KINDS",
    "fill_incident",
    "incident_phases",
    "sync_incident",
]

LOCALIZATION_KINDS = ("diagnose", "stacks", "replay-sdc")
"""Playbook step kinds whose time is the incident's localization phase (issue 22 §4: "localization
(stacks/diagnose/replay)")."""

EVICTION_KINDS = ("evict", "standby-activate")
"""Step kinds whose time is the eviction phase (issue 22 §4: "eviction and standby swap")."""

RESTART_KINDS = ("restart", "rollback")
"""Step kinds that start the restart phase (``rollback`` restarts the job on the older code)."""


def _span(
    steps: list[JournalStep], kinds: tuple[str, ...], start: str, end: str, out: dict[str, Any]
) -> None:
    """Set ``out[start]`` to the first start of the ``kinds`` steps and ``out[end]`` to their last end,
    the end only once each of them has ended."""
    mine = [x for x in steps if x.kind in kinds]
    if not mine:
        return
    out[start] = min(x.started_at for x in mine)
    ends = [x.finished_at for x in mine]
    if all(e is not None for e in ends) and not any(x.status == "running" for x in mine):
        out[end] = max(e for e in ends if e is not None)


def _evicted(steps: list[JournalStep]) -> list[str]:
    """The targets of the ``evict`` steps that applied (an apply document, or one rebuilt from the
    audit on resume), in order, repeats kept."""
    machines: list[str] = []
    for x in steps:
        doc = x.result or {}
        if x.kind != "evict" or x.status != "done" or doc.get("kind") != "apply":
            continue
        if doc.get("status") != "applied":
            continue
        plan = doc.get("plan")
        targets = doc.get("targets") or (plan.get("targets") if isinstance(plan, Mapping) else None)
        if isinstance(targets, list):
            machines.extend(t for t in targets if isinstance(t, str) and t)
    return machines


def _restart_steps(restarts: list[JournalStep], out: dict[str, Any]) -> None:
    """Set ``checkpoint_step`` and ``last_step`` from the restart steps' results (first found wins)."""
    for x in restarts:
        doc = x.result or {}
        loaded = picked_iteration(doc)
        if loaded is not None and "checkpoint_step" not in out:
            out["checkpoint_step"] = loaded
        for key, names in (
            ("checkpoint_step", ("checkpoint_step", "ckpt_iter")),
            ("last_step", ("last_step",)),
        ):
            for n in names:
                v = doc.get(n)
                if key not in out and isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63:
                    out[key] = v


def incident_phases(run: JournalRun) -> dict[str, Any]:
    """The incident fields a recovery's journal run gives (for :func:`robustctl.watchstore.update_incident`).

    Pure. Steps skipped are not counted. ``localization_start_at``/``_end_at``: the first start and the
    last end of the :data:`LOCALIZATION_KINDS` steps (the end only once each of them has ended);
    ``eviction_start_at``/``_end_at``: the same for :data:`EVICTION_KINDS`; ``restart_start_at``: the
    first start of a :data:`RESTART_KINDS` step; ``machines_evicted``: the targets of the ``evict``
    steps that applied (an apply document, or one rebuilt from the audit on resume);
    ``checkpoint_step``: the iteration a restart step's apply document says it loaded
    (:func:`robustctl.actions.restart.picked_iteration`), else its ``checkpoint_step`` or ``ckpt_iter``;
    ``last_step``: from a restart step's result when it names it. Keys without a value are left out.

    Args:
        run: the recovery's journal run, with its steps.

    Returns:
        The incident fields, by name.
    """
    steps = [x for x in run.steps if x.status != "skipped"]
    out: dict[str, Any] = {}
    _span(steps, LOCALIZATION_KINDS, "localization_start_at", "localization_end_at", out)
    _span(steps, EVICTION_KINDS, "eviction_start_at", "eviction_end_at", out)
    restarts = [x for x in steps if x.kind in RESTART_KINDS]
    if restarts:
        out["restart_start_at"] = min(x.started_at for x in restarts)
    machines = _evicted(steps)
    if machines:
        out["machines_evicted"] = tuple(dict.fromkeys(machines))
    _restart_steps(restarts, out)
    return out


def fill_incident(
    store: Store, engine: PlaybookEngine, job: str, incident_id: int, newest_step_s: float | None
) -> None:
    """Fill the job's open incident's phases from its recovery run's journal (:func:`incident_phases`)
    and, once the run has ended, its first new step: the first progress sample after the run's end
    (else ``newest_step_s`` when later than that end). Forward only: a field set keeps its value.

    Args:
        store: the open store.
        engine: the journal's reader.
        job: the job.
        incident_id: the store's id of the job's open incident (nothing is done when it is not the
            open one or has no run).
        newest_step_s: UNIX s of the job's newest step (None: unknown).

    Raises:
        StoreError: the store cannot be read or written.
    """
    from robustctl import watchstore

    inc = watchstore.current_incident(store, job)
    if inc is None or inc.id != incident_id or inc.playbook_run_id is None:
        return
    run = engine.run_record(store, inc.playbook_run_id)
    if run is None:
        return
    fields = incident_phases(run)
    end = run.finished_at
    if end is not None and inc.first_new_step_at is None:
        after = [p.at for p in watchstore.progress_samples(store, job, since=end) if p.at > end]
        first = min(after) if after else newest_step_s
        if first is not None and first > end:
            fields["first_new_step_at"] = first
    machines = tuple(fields.pop("machines_evicted", ()))
    try:
        watchstore.update_incident(store, incident_id, machines_evicted=machines, **fields)
    except watchstore.IncidentRefused:
        for k, v in fields.items():  # a field set otherwise earlier holds the others back: one by one
            with contextlib.suppress(watchstore.IncidentRefused):
                watchstore.update_incident(store, incident_id, **{k: v})


def sync_incident(
    store: Store,
    job: str,
    before: WatchMemory,
    incident_id: int | None,
    last_step: int | None,
    decision: Decision,
    reading: JobReading,
    now: float,
) -> int | None:
    """Mirror the memory's incident into the store's ``incidents`` table.

    The stored incident closes when the decision's memory no longer holds it (or holds another); a new
    one opens (onset: the newest step's time, else the memory's onset, never after ``now``) when the
    memory holds one and none is open; one opened meanwhile by another watcher is taken as it.

    Args:
        store: the open store.
        job: the job.
        before: the memory before the decision.
        incident_id: the store's id of the open incident before it (None: none).
        last_step: the newest step judged before it (None: none yet); a new incident records it as
            its last step.
        decision: the decision.
        reading: the reading decided on.
        now: UNIX s of the evaluation.

    Returns:
        The store's id of the job's open incident after the decision (None: none).

    Raises:
        IncidentRefused: the store refused to open one and holds none open.
        StoreError: the store cannot be read or written.
    """
    from robustctl import watchstore

    prior, after = before.incident, decision.memory.incident
    inc_id = incident_id
    if inc_id is not None and (after is None or prior is None or after.incident_id != prior.incident_id):
        why = "a new step after its recovery" if prior is not None and prior.handled else "its signal is gone"
        try:
            watchstore.update_incident(store, inc_id, closed_at=now, close_reason=why)
        except watchstore.IncidentRefused:
            pass  # already closed (by a person or an earlier watcher)
        inc_id = None
    if after is not None and inc_id is None:
        onset = reading.newest_step_time if reading.newest_step_time is not None else after.onset_s
        onset = min(onset, now)
        cls = after.signal.value
        try:
            rec = watchstore.open_incident(
                store, job, incident_class=cls, onset_at=onset, opened_at=now, last_step=last_step
            )
        except watchstore.IncidentRefused:
            current = watchstore.current_incident(store, job)
            if current is None:
                raise
            rec = current
        inc_id = rec.id
    return inc_id
