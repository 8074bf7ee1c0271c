"""``robustctl watch --once``, the ``watch`` loop and ``watch --history`` as library calls (issue 22,
§1 and §3).

:func:`run_watch_once` makes one evaluation of one job under the job's watch lock
(:func:`robustctl.watchstore.watch_lock`); the evaluation itself is the domain's
(:func:`robustctl.watch.loop.evaluate_job`: read the signals, judge them, decide, record, recover). Only
when the action is ``run`` and not ``--advise`` does it run the playbook, through the playbook engine's
library call (:func:`robustctl.commands.playbook.run_playbook_run`, the playbook's own policy and the
rails of ``evict`` apply as by hand), which this module passes down as a
:class:`~robustctl.watch.recovery.PlaybookEngine`. A ``stop`` (the hourly limit) runs ``watch.notify``
with the decision's JSON on stdin. Never two recoveries for one incident: the decision's rails and the
store's one open incident per job.

Exit codes (the table of :mod:`robustctl.exit_codes`): **0** healthy (action ``none``); **1** a
signal was seen and a rail held the watcher back (``skip``: a playbook already running, the incident
already handled, a cool-down, paused): the fault is known and being handled; **2** a fault was found
and a recovery ran and reached its end, or would run (``advise``), or the hourly limit stopped the
watcher (``stop``); **3** could not check (only ``unknown`` verdicts: a source could not be read), the
recovery's playbook run failed, or another watcher holds the job's lock (:class:`WatchBusy`);
64 a job the inventory does not hold; 78 a bad inventory or store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustctl.errors import InventoryError, RobustctlError, UsageError
from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION, strict_jsonable
from robustctl.watch.decide import Action, Rail
from robustctl.watch.incidents import EVICTION_KINDS, LOCALIZATION_KINDS, RESTART_KINDS, incident_phases
from robustctl.watch.loop import NOTIFY_TIMEOUT_S, Evaluation, Reader, evaluate_every, evaluate_job
from robustctl.watch.recovery import ADOPT_RUNS_READ, ADOPT_SLACK_S, MAX_RUN_MESSAGE_CHARS
from robustctl.watch.state import STATE_VERSION
from robustctl.watch.verdicts import SOURCE_FINDINGS, SOURCE_LIVENESS, fail_slow_params, reading_verdicts

if TYPE_CHECKING:
    from robustctl.inventory import Inventory
    from robustctl.playbooks.journal import JournalRun
    from robustctl.store import Store
    from robustctl.transport.pool import TransportPool
    from robustctl.watchstore import WatchEvent

__all__ = [
    "ADOPT_RUNS_READ",
    "ADOPT_SLACK_S",
    "EVICTION_KINDS",
    "LOCALIZATION_KINDS",
    "NOTIFY_TIMEOUT_S",
    "RESTART_KINDS",
    "SOURCE_FINDINGS",
    "SOURCE_LIVENESS",
    "STATE_VERSION",
    "WatchHistoryRequest",
    "WatchHistoryResult",
    "WatchLoopResult",
    "WatchRequest",
    "WatchResult",
    "fail_slow_params",
    "incident_phases",
    "reading_verdicts",
    "run_watch_history",
    "run_watch_loop",
    "run_watch_once",
]


@dataclass(frozen=True, kw_only=True)
class WatchRequest:
    """One evaluation: ``robustctl watch --once``.

    Attributes:
        inventory: the resolved inventory. job: the job's name. state: the store file (None:
        ``$ROBUSTCTL_STATE``/XDG). advise: decide and record, act on nothing. resume: a person
        clears the pause after the hourly limit. yes: the recovery playbooks' destructive steps run
        without asking (``--yes``: the watcher is unattended); without it a playbook with destructive
        steps runs only where its own policy applies them, else it is refused before anything runs
        (recorded as a refused attempt, not as a recovery).
    """

    inventory: Inventory
    job: str
    state: Path | None = None
    advise: bool = False
    resume: bool = False
    yes: bool = False


@dataclass(frozen=True)
class WatchResult:
    """One evaluation's outcome (kind ``watch``).

    Attributes:
        job. decision: the decision document (:meth:`Decision.to_json`, kind ``watch-decision``).
        reading: a summary of the reading (backend, hosts, step, newest step time, liveness, what was
            unknown). verdicts: every verdict of the reading. event_id: the event recorded (None for
            ``none``, which is not an event). incident_id: the store's incident concerned (None: none).
        playbook_run: for ``run``: ``{run_id, playbook, status, message}`` of the recovery run.
        notify: for ``stop``: ``{argv, exit_code, error}`` of the notifier (None: none configured).
        resumed: ``{run_id, playbook, status, message, event_id}`` of a recovery run an earlier watcher
            began and died in, resumed through the journal before this evaluation (None: none).
        job_ended: the back end says the job completed and no recovery is in progress (the loop
            stops on it).
    """

    job: str
    decision: Mapping[str, Any]
    reading: Mapping[str, Any]
    verdicts: tuple[Mapping[str, Any], ...]
    event_id: int | None = None
    incident_id: int | None = None
    playbook_run: Mapping[str, Any] | None = None
    notify: Mapping[str, Any] | None = None
    resumed: Mapping[str, Any] | None = None
    job_ended: bool = False
    kind: str = "watch"
    schema_version: int = SCHEMA_VERSION

    @property
    def action(self) -> str:
        """The decision's action (``run``, ``advise``, ``skip``, ``stop``, ``none``)."""
        return str(self.decision["action"])

    @property
    def exit_code(self) -> ExitCode:
        """The module docstring's mapping."""
        action = self.action
        if self.resumed is not None and self.resumed.get("status") != "done" and action in ("none", "skip"):
            return ExitCode.UNKNOWN  # the resumed recovery failed
        if action == Action.NONE.value:
            return ExitCode.OK
        if action == Action.SKIP.value:
            if self.decision.get("rail") == Rail.UNKNOWN_ONLY.value:
                return ExitCode.UNKNOWN
            return ExitCode.WARNING
        if action == Action.RUN.value:
            run = self.playbook_run or {}
            return ExitCode.CRITICAL if run.get("status") == "done" else ExitCode.UNKNOWN
        return ExitCode.CRITICAL

    def to_json(self) -> dict[str, Any]:
        """The strict-JSON document (``--json``), with ``exit_code``."""
        doc = {
            "kind": self.kind,
            "schema_version": self.schema_version,
            "job": self.job,
            "action": self.action,
            "decision": dict(self.decision),
            "reading": dict(self.reading),
            "verdicts": [dict(v) for v in self.verdicts],
            "event_id": self.event_id,
            "incident_id": self.incident_id,
            "playbook_run": None if self.playbook_run is None else dict(self.playbook_run),
            "notify": None if self.notify is None else dict(self.notify),
            "resumed": None if self.resumed is None else dict(self.resumed),
            "job_ended": self.job_ended,
            "exit_code": int(self.exit_code),
        }
        out: dict[str, Any] = strict_jsonable(doc)
        return out


class _Engine:
    """The playbook engine and journal as the watcher reaches them
    (:class:`robustctl.watch.recovery.PlaybookEngine`): runs unattended, destructive steps allowed by
    ``--yes`` (:func:`robustctl.actions.session.always`) or else by the playbook's own policy only."""

    def __init__(self, request: WatchRequest) -> None:
        from robustctl.actions.session import always

        self._inventory = Path(request.inventory.source)
        self._state = request.state
        self._confirm = always if request.yes else None

    def start(self, name: str, params: Mapping[str, str]) -> dict[str, Any]:
        from robustctl.commands.playbook import PlaybookRunRequest, run_playbook_run
        from robustctl.playbooks.engine import RunOutcome

        req = PlaybookRunRequest(name=name, params=dict(params), inventory=self._inventory, state=self._state)
        try:
            out = run_playbook_run(req, confirm=self._confirm)
        except RobustctlError as exc:
            return {
                "run_id": None,
                "playbook": name,
                "status": "refused",
                "message": str(exc)[:MAX_RUN_MESSAGE_CHARS],
            }
        if not isinstance(out, RunOutcome):  # pragma: no cover - not a dry run
            return {"run_id": None, "playbook": name, "status": "refused", "message": "not run"}
        return {"run_id": out.run_id, "playbook": out.playbook, "status": out.status, "message": out.message}

    def resume(self, run_id: int) -> dict[str, Any]:
        from robustctl.commands.playbook import PlaybookResumeRequest, run_playbook_resume

        req = PlaybookResumeRequest(run_id=run_id, inventory=self._inventory, state=self._state)
        out = run_playbook_resume(req, confirm=self._confirm)
        return {"run_id": out.run_id, "playbook": out.playbook, "status": out.status, "message": out.message}

    def run_record(self, store: Store, run_id: int) -> JournalRun | None:
        from robustctl.playbooks import journal

        return journal.run_record(store, run_id)

    def unfinished_runs(self, store: Store, job: str, limit: int) -> list[JournalRun]:
        from robustctl.playbooks import journal

        return [r for r in journal.runs(store, job=job, limit=limit) if self.is_unfinished(r)]

    def is_unfinished(self, run: JournalRun) -> bool:
        from robustctl.playbooks import journal

        return run.status == journal.RunStatus.RUNNING

    def lock_held(self, store: Store, job: str) -> bool:
        from robustctl.playbooks import journal
        from robustctl.store import StoreLocked

        try:
            with journal.job_lock(store, job):
                return False
        except StoreLocked:
            return True


def _job(request: WatchRequest) -> str:
    """The request's job, checked against the inventory (UsageError, exit 64, when it has none)."""
    try:
        return request.inventory.job(request.job).name
    except InventoryError as exc:
        raise UsageError(str(exc)) from None


def _evaluate(
    request: WatchRequest,
    path: Path,
    *,
    pool: TransportPool | None,
    clock: Callable[[], float],
    reader: Reader | None,
) -> WatchResult:
    """One evaluation (:func:`robustctl.watch.loop.evaluate_job`), the job's watch lock held by the caller."""
    out: Evaluation = evaluate_job(
        request.inventory, request.job, path, _Engine(request),
        advise=request.advise, resume=request.resume, pool=pool, clock=clock, reader=reader,
    )  # fmt: skip
    return WatchResult(**{f.name: getattr(out, f.name) for f in fields(out)})


def run_watch_once(
    request: WatchRequest,
    *,
    pool: TransportPool | None = None,
    clock: Callable[[], float] = time.time,
    reader: Reader | None = None,
) -> WatchResult:
    """One evaluation of ``request.job`` (module docstring: the steps and the exit codes).

    Args:
        request: the job, the inventory, the store, ``--advise``, ``--resume``.
        pool: the transports (None: a new pool, closed at the end).
        clock: the control side's UNIX clock (the reading's time, the store's).
        reader: the signal reader (None: :func:`robustctl.watch.signals.read_job`); same arguments.

    Raises:
        UsageError: the inventory has no job ``request.job`` (exit 64).
        WatchBusy: another watcher holds the job's lock (exit 3, names its pid).
        ConfigError / StoreError: the store cannot be opened or its watch state is damaged (exit 78).
    """
    from robustctl import watchstore
    from robustctl.commands.options import state_path

    job = _job(request)
    path = state_path(request.state)
    with watchstore.watch_lock(path, job):
        return _evaluate(request, path, pool=pool, clock=clock, reader=reader)


# ------------------------------------------------------------------------------------------- loop


@dataclass(frozen=True)
class WatchLoopResult:
    """The loop's end (kind ``watch-loop``): the job, the evaluations made, why it ended (``job-ended``:
    the back end says the job completed and no recovery runs; ``stopped``: the stop event was set) and
    the last evaluation. Exit 0 (a signal ends the CLI with 130 before any result)."""

    job: str
    evaluations: int
    reason: str
    last: WatchResult | None = None
    kind: str = "watch-loop"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """Always OK: the watcher ended as asked, or with its job."""
        return ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        """The strict-JSON document (the last line of ``watch --json``)."""
        doc = {
            "kind": self.kind,
            "schema_version": self.schema_version,
            "job": self.job,
            "evaluations": self.evaluations,
            "reason": self.reason,
            "exit_code": int(self.exit_code),
        }
        out: dict[str, Any] = strict_jsonable(doc)
        return out


def run_watch_loop(
    request: WatchRequest,
    *,
    sleep: Callable[[float], object] | None = None,
    clock: Callable[[], float] = time.time,
    stop_event: threading.Event | None = None,
    on_result: Callable[[WatchResult], None] | None = None,
    pool: TransportPool | None = None,
    reader: Reader | None = None,
) -> WatchLoopResult:
    """``robustctl watch`` without ``--once``: evaluate every ``watch.interval_s`` until stopped.

    Holds the job's watch lock for the whole loop (a second watcher exits 3) and one transport pool
    (None: a new one, closed at the end). Each evaluation is :func:`run_watch_once`'s (``--resume``
    applies to the first only: a person clears the pause once) and is passed to ``on_result``. Ends
    when an evaluation says the job ended (:attr:`WatchResult.job_ended`) or ``stop_event`` is set
    (checked before each evaluation and after it); between evaluations it calls
    ``sleep(interval_s)`` (None: ``stop_event.wait``, which a stop wakes). SIGINT and SIGTERM are the
    CLI's (:mod:`robustctl.interrupts`: exit 130; a recovery run interrupted stays ``running`` in the
    journal and the next watcher resumes it).

    Raises:
        UsageError: the inventory has no such job (64). WatchBusy: another watcher (3).
        ConfigError / StoreError: the store or its watch state (78); the loop stops on them.
    """
    from robustctl import watchstore
    from robustctl.commands.options import state_path

    job = _job(request)
    stop = stop_event if stop_event is not None else threading.Event()
    path = state_path(request.state)
    with watchstore.watch_lock(path, job):
        own = pool is None
        if pool is None:
            from robustctl.transport.pool import TransportPool

            pool = TransportPool(scheduler=request.inventory.scheduler)
        used = pool

        def once(count: int) -> WatchResult:
            req = request if count == 0 else replace(request, resume=False)
            return _evaluate(req, path, pool=used, clock=clock, reader=reader)

        def ended(result: WatchResult) -> bool:
            return result.job_ended

        try:
            outcome = evaluate_every(
                request.inventory.watch.interval_s, once, ended,
                stop=stop, wait=sleep if sleep is not None else stop.wait, on_result=on_result,
            )  # fmt: skip
        finally:
            if own:
                pool.close()
    return WatchLoopResult(job, outcome[0], outcome[2], outcome[1])


# ---------------------------------------------------------------------------------------- history


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
