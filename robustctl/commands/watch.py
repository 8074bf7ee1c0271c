"""``robustctl watch --once``, the ``watch`` loop and ``watch --history`` as library calls (issue 22,
§1 and §3).

:func:`run_watch_once` takes the job's watch lock (:func:`robustctl.watchstore.watch_lock`) and makes
one evaluation, the domain's :func:`robustctl.watch.loop.evaluate_job` (read the signals, judge,
decide, record; run the recovery, or notify on ``stop``). A recovery runs through the playbook engine's
library calls (:func:`robustctl.commands.playbook.run_playbook_run`, ``run_playbook_resume``: the
playbook's own policy and the rails of ``evict`` apply as by hand), passed down as a
:class:`~robustctl.watch.recovery.PlaybookEngine`.

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
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustctl.commands.watch_engine import WatchPlaybookEngine
from robustctl.commands.watch_history import WatchHistoryRequest, WatchHistoryResult, run_watch_history
from robustctl.errors import InventoryError, UsageError
from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION, strict_jsonable
from robustctl.watch.decide import Action, Rail
from robustctl.watch.incidents import EVICTION_KINDS, LOCALIZATION_KINDS, RESTART_KINDS, incident_phases
from robustctl.watch.loop import (
    NOTIFY_TIMEOUT_S,
    Evaluation,
    Reader,
    evaluate_every,
    evaluate_job,
    transport_pool,
)
from robustctl.watch.recovery import ADOPT_RUNS_READ, ADOPT_SLACK_S
from robustctl.watch.state import STATE_VERSION
from robustctl.watch.verdicts import SOURCE_FINDINGS, SOURCE_LIVENESS, fail_slow_params, reading_verdicts

if TYPE_CHECKING:
    from robustctl.inventory import Inventory
    from robustctl.transport.pool import TransportPool

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
class WatchResult(Evaluation):
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
    engine = WatchPlaybookEngine(Path(request.inventory.source), request.state, yes=request.yes)
    out: Evaluation = evaluate_job(
        request.inventory, request.job, path, engine,
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

    Returns:
        The evaluation: the decision, the reading, its verdicts, what was recorded and run (its
        ``exit_code``: the module docstring's mapping).

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

    Args:
        request: the job, the inventory, the store, ``--advise``, ``--resume`` (first evaluation only),
            ``--yes``.
        sleep: called with ``watch.interval_s`` between evaluations (None: ``stop_event.wait``).
        clock: the control side's UNIX clock (the reading's time, the store's).
        stop_event: set to end the loop (None: a new one that nothing here sets: the loop then ends
            with its job, or with a signal).
        on_result: called with each evaluation's result (None: not called).
        pool: the transports (None: a new pool, closed at the end).
        reader: the signal reader (None: :func:`robustctl.watch.signals.read_job`).

    Returns:
        The job, the evaluations made, why the loop ended (``job-ended`` or ``stopped``) and the last
        evaluation.

    Raises:
        UsageError: the inventory has no such job (64).
        WatchBusy: another watcher (3).
        ConfigError / StoreError: the store or its watch state (78); the loop stops on them.
    """
    from robustctl import watchstore
    from robustctl.commands.options import state_path

    job = _job(request)
    stop = stop_event if stop_event is not None else threading.Event()
    path = state_path(request.state)
    with watchstore.watch_lock(path, job), transport_pool(request.inventory, pool) as used:

        def once(count: int) -> WatchResult:
            req = request if count == 0 else replace(request, resume=False)
            return _evaluate(req, path, pool=used, clock=clock, reader=reader)

        def ended(result: WatchResult) -> bool:
            return result.job_ended

        outcome = evaluate_every(
            request.inventory.watch.interval_s, once, ended,
            stop=stop, wait=sleep if sleep is not None else stop.wait, on_result=on_result,
        )  # fmt: skip
    return WatchLoopResult(job, outcome[0], outcome[2], outcome[1])
