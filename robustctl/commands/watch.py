"""``robustctl watch --once`` and ``watch --history`` as library calls (issue 22, §1 and §3).

:func:`run_watch_once` makes one evaluation of one job: it takes the job's watch lock
(:func:`robustctl.watchstore.watch_lock`), loads what the watcher keeps in the store between
evaluations (the fail-slow detector's state, the newest step judged, the decision memory
:class:`~robustctl.watch.decide.WatchMemory`), reads the job's signals once
(:func:`robustctl.watch.signals.read_job`), turns the reading into verdicts (the rules of
:mod:`robustctl.watch.rules` and the log scan's crash verdicts, plus the liveness and host-finding
verdicts built here, :func:`reading_verdicts`), decides (:func:`robustctl.watch.decide.decide`),
records the decision as an event and opens, updates or closes the job's incident in the store, and
only when the action is ``run`` and not ``--advise`` runs the playbook through the playbook engine's
library call (:func:`robustctl.commands.playbook.run_playbook_run`, the playbook's own policy and the
rails of ``evict`` apply as by hand), recording the run's journal id on the event and the incident;
then it saves the state. A ``stop`` (the hourly limit) runs ``watch.notify`` with the decision's
JSON on stdin. Never two recoveries for one incident: the decision's rails and the store's one open
incident per job.

Exit codes (the table of :mod:`robustctl.exit_codes`): **0** healthy (action ``none``); **1** a
signal was seen and a rail held the watcher back (``skip``: a playbook already running, the incident
already handled, a cool-down, paused): the fault is known and being handled; **2** a fault was found
and a recovery ran and reached its end, or would run (``advise``), or the hourly limit stopped the
watcher (``stop``); **3** could not check (only ``unknown`` verdicts: a source could not be read), the
recovery's playbook run failed, or another watcher holds the job's lock (:class:`WatchBusy`);
64 a job the inventory does not hold; 78 a bad inventory or store.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustctl.actions.restart import picked_iteration
from robustctl.errors import ConfigError, InventoryError, RobustctlError, UsageError
from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION, strict_jsonable
from robustctl.watch.decide import Action, Decision, Rail, WatchMemory, decide
from robustctl.watch.rules import (
    FailSlowParams,
    FailSlowState,
    SignalClass,
    Verdict,
    after_recovery,
    judge_hang,
    judge_losses,
    observe_step_time,
)

if TYPE_CHECKING:
    from robustctl.config import WatchSettings
    from robustctl.inventory import Inventory
    from robustctl.playbooks.journal import JournalRun
    from robustctl.store import Store
    from robustctl.transport.pool import TransportPool
    from robustctl.watch.signals import JobReading
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
    "incident_phases",
    "reading_verdicts",
    "run_watch_history",
    "run_watch_loop",
    "run_watch_once",
]

STATE_VERSION = 1
"""Version of the per-job state document this module keeps in ``watch_state``."""

NOTIFY_TIMEOUT_S = 30.0
"""Longest wait for ``watch.notify`` (a pager or chat hook posting one message), in seconds; past it
the notifier is killed and the failure recorded in the result (our choice: a hook that does not answer
in 30 s will not, and the watcher must not hang on it)."""

MAX_NOTIFY_OUTPUT_CHARS = 512
"""Most characters of the notifier's stderr kept in the result when it fails (one line or two)."""

SOURCE_LIVENESS = (
    "crash: a rank exited or the job left the running state (issue 22 §2 table; ByteRobust, arXiv "
    "2509.16293 §4.1: the process and job status is a real-time explicit-failure signal)"
)
SOURCE_FINDINGS = (
    "host-critical: the host's latest sweep/diagnose verdict is critical (issue 22 §2 table; "
    "ByteRobust §4.2: a machine named with high confidence is evicted at once)"
)


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


# ------------------------------------------------------------------------------------------ state


@dataclass(frozen=True)
class _State:
    """What the watcher keeps per job: the decision memory, the fail-slow detector, the newest step
    judged (fail-slow and loss rules judge only steps after it), the store's open incident id."""

    memory: WatchMemory = field(default_factory=WatchMemory)
    fail_slow: FailSlowState = field(default_factory=FailSlowState)
    last_step: int | None = None
    incident_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "memory": self.memory.to_json(),
            "fail_slow": self.fail_slow.to_json(),
            "last_step": self.last_step,
            "incident_id": self.incident_id,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any] | None, where: str) -> _State:
        """Read back; a damaged document is a ConfigError naming the store and job."""
        if doc is None:
            return cls()
        try:
            if doc.get("version") != STATE_VERSION:
                raise ConfigError(f"version {doc.get('version')!r:.20} is not {STATE_VERSION}")
            last, inc = doc.get("last_step"), doc.get("incident_id")
            for name, v in (("last_step", last), ("incident_id", inc)):
                if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**63):
                    raise ConfigError(f"{name}: {v!r:.40} is not a non-negative integer")
            return cls(
                WatchMemory.from_json(doc.get("memory")),
                FailSlowState.from_json(doc.get("fail_slow")),
                last,
                inc,
            )
        except ConfigError as exc:
            raise ConfigError(f"{where}: the watcher's state is damaged: {exc}") from None


# --------------------------------------------------------------------------------------- verdicts


def _liveness_verdicts(reading: JobReading) -> list[Verdict]:
    from robustctl.watch.signals import Liveness

    live = reading.liveness
    if live.state is not Liveness.DEAD:
        return []
    exits = live.exits[:4]
    said = "; ".join(
        f"{e.where} ranks {','.join(map(str, e.ranks)) or '?'}: "
        + (f"exit {e.exit_code}" if e.exit_code is not None else f"signal {e.signal}" if e.signal else "gone")
        + (f" ({e.reason})" if e.reason else "")
        for e in exits
    )
    values: list[tuple[str, Any]] = [
        ("backend", live.backend),
        ("ranks_expected", live.ranks_expected),
        ("ranks_running", live.ranks_running),
        ("exits", live.exits_total),
    ]
    hosts = sorted({e.where for e in live.exits if e.where in reading.hosts})
    if hosts:
        values.append(("hosts_exited", ",".join(hosts)))
    return [
        Verdict(
            SignalClass.CRASH,
            "liveness.dead",
            tuple(values),
            said or live.detail or "the job's ranks are not all running",
            SOURCE_LIVENESS,
        )
    ]


def _finding_verdicts(reading: JobReading) -> list[Verdict]:
    critical = reading.findings.critical
    if not critical:
        return []
    hosts = ",".join(h.host for h in critical)
    checks = sorted({c.kind for h in critical for c in h.checks})
    first = next((f"{h.host}: {c.check}: {c.detail}" for h in critical for c in h.checks), "")
    return [
        Verdict(
            SignalClass.HOST_CRITICAL,
            "host.critical",
            (("hosts", hosts), ("checks", ",".join(checks)), ("count", len(critical))),
            first or f"critical verdict on {hosts}",
            SOURCE_FINDINGS,
        )
    ]


def reading_verdicts(
    reading: JobReading, state_fail_slow: FailSlowState, last_step: int | None, settings: WatchSettings
) -> tuple[list[Verdict], FailSlowState, int | None]:
    """Every verdict of one reading, with the fail-slow state and newest step judged after it.

    The rules (:mod:`robustctl.watch.rules`, thresholds from ``settings``): hang
    (``judge_hang`` with ``watch.stall_after_s``), fail-slow (``observe_step_time`` on the step times of
    steps after ``last_step``, ``watch.slow_factor``/``persist_steps``), nan-loss (``judge_losses`` on
    the losses of steps after ``last_step``, ``watch.spike_factor``/``loss_window``); the log scan's
    crash verdicts; a ``crash`` when liveness is ``dead``; a ``host-critical`` for the job's hosts with
    a critical verdict in the store; an ``unknown`` for each signal that could not be read (the hang
    rule's own unknown speaks for the progress signal). Pure.
    """
    verdicts: list[Verdict] = []
    hang = judge_hang(
        reading.newest_step_time,
        reading.read_at,
        reading.ranks_alive,
        reading.step_times,
        settings.stall_after_s,
    )
    if hang is not None:
        verdicts.append(hang)
    params = FailSlowParams(slow_factor=settings.slow_factor, persist_steps=settings.persist_steps)
    fs, slow = state_fail_slow, None
    newest = last_step
    for s in reading.progress.samples:
        if last_step is not None and s.step <= last_step:
            continue
        if s.step_time_s is not None:
            fs, slow = observe_step_time(fs, s.step_time_s, params)
        newest = s.step if newest is None else max(newest, s.step)
    if slow is not None:
        verdicts.append(slow)
    losses, start = reading.losses_after(last_step)
    loss = judge_losses(losses, start=start, spike_factor=settings.spike_factor, window=settings.loss_window)
    if loss is not None:
        verdicts.append(loss)
    verdicts.extend(v for _, v in reading.log_verdicts)
    verdicts.extend(_liveness_verdicts(reading))
    verdicts.extend(_finding_verdicts(reading))
    for name, why in reading.unknown:
        if name == "progress" and hang is not None and hang.signal is SignalClass.UNKNOWN:
            continue
        verdicts.append(
            Verdict(SignalClass.UNKNOWN, f"source.{name}", (), why, "not checked is never healthy")
        )
    return verdicts, fs, newest


def _reading_summary(r: JobReading) -> dict[str, Any]:
    return {
        "backend": r.backend,
        "hosts": list(r.hosts),
        "read_at": r.read_at,
        "step": r.progress.step,
        "newest_step_time": r.newest_step_time,
        "liveness": r.liveness.state.value,
        "ranks_running": r.liveness.ranks_running,
        "ranks_expected": r.liveness.ranks_expected,
        "unknown": [{"signal": n, "why": w} for n, w in r.unknown],
        "errors": [e.line for e in r.errors[:16]],
    }


# --------------------------------------------------------------------------------------- the call


Reader = Callable[..., "JobReading"]


def _run_ended(store: Store, memory: WatchMemory) -> float | None:
    """When the playbook run in progress ended (the journal's finish time); a run never begun (the
    watcher died between deciding and beginning it) counts as ended when it was decided."""
    from robustctl.playbooks import journal

    run = memory.running
    if run is None:
        return None
    if run.run_id is None:
        return run.started_s
    rec = journal.run_record(store, run.run_id)
    if rec is None:
        return run.started_s
    return rec.finished_at


def _notify(argv: Sequence[str], decision: Decision) -> dict[str, Any]:
    """Run ``watch.notify`` with the decision's JSON on stdin (bounded by :data:`NOTIFY_TIMEOUT_S`)."""
    text = json.dumps(decision.to_json(), allow_nan=False)
    try:
        done = subprocess.run(
            list(argv),
            input=text.encode(),
            capture_output=True,
            timeout=NOTIFY_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"argv": list(argv), "exit_code": None, "error": f"timed out after {NOTIFY_TIMEOUT_S:.0f} s"}
    except OSError as exc:
        return {"argv": list(argv), "exit_code": None, "error": str(exc)[:MAX_NOTIFY_OUTPUT_CHARS]}
    err = done.stderr.decode(errors="replace")[-MAX_NOTIFY_OUTPUT_CHARS:] if done.returncode else None
    return {"argv": list(argv), "exit_code": done.returncode, "error": err}


def _sync_incident(
    store: Store, job: str, st: _State, decision: Decision, reading: JobReading, now: float
) -> int | None:
    """Mirror the memory's incident into the store's ``incidents`` table; the store's id."""
    from robustctl import watchstore

    before, after = st.memory.incident, decision.memory.incident
    inc_id = st.incident_id
    if inc_id is not None and (after is None or before is None or after.incident_id != before.incident_id):
        why = (
            "a new step after its recovery" if before is not None and before.handled else "its signal is gone"
        )
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
                store, job, incident_class=cls, onset_at=onset, opened_at=now, last_step=st.last_step
            )
        except watchstore.IncidentRefused:
            current = watchstore.current_incident(store, job)
            if current is None:
                raise
            rec = current
        inc_id = rec.id
    return inc_id


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

    inv = request.inventory
    try:
        job = inv.job(request.job)
    except InventoryError as exc:
        raise UsageError(str(exc)) from None
    path = state_path(request.state)
    with watchstore.watch_lock(path, job.name):
        return _evaluate(request, path, pool=pool, clock=clock, reader=reader)


def _evaluate(
    request: WatchRequest,
    path: Path,
    *,
    pool: TransportPool | None,
    clock: Callable[[], float],
    reader: Reader | None,
) -> WatchResult:
    """:func:`run_watch_once`'s evaluation, the job's watch lock already held by the caller."""
    from robustctl import watchstore
    from robustctl.actions.hosts import job_hosts
    from robustctl.schedulers import make_scheduler
    from robustctl.store import Store
    from robustctl.watch.signals import Liveness, read_job

    inv = request.inventory
    job = inv.job(request.job)
    settings = inv.watch
    read = reader if reader is not None else read_job
    with Store.open(path, clock=clock) as store:
        st = _State.from_json(watchstore.get_state(store, job.name), f"{path}: job {job.name}")
        st, resumed = _resume_orphaned(request, store, job.name, st, clock())
        scheduler = make_scheduler(inv.scheduler, inventory=inv, store=store)
        current = job_hosts(job.name, scheduler=scheduler, store=store, inventory=inv)
        hosts = [inv.by_name(n) for n in current.hosts]
        own = pool is None
        if pool is None:
            from robustctl.transport.pool import TransportPool

            pool = TransportPool(scheduler=inv.scheduler)
        try:
            reading = read(
                job,
                pool,
                hosts=hosts,
                scheduler=scheduler,
                store=store,
                diagnose=inv.diagnose,
                clock=clock,
            )
        finally:
            if own:
                pool.close()
        if reading.newest_step_time is not None and reading.progress.step is not None:
            with contextlib.suppress(watchstore.WatchStoreInputError):  # a step the store cannot hold
                watchstore.record_progress(
                    store,
                    job.name,
                    at=min(reading.newest_step_time, reading.read_at),
                    step=reading.progress.step,
                )
        if st.incident_id is not None:
            _fill_incident(store, job.name, st.incident_id, reading.newest_step_time)
        run_ended = _run_ended(store, st.memory)
        fail_slow_in, last_in = st.fail_slow, st.last_step
        if st.memory.incident is not None and st.memory.incident.handled and run_ended is not None:
            # the recovery restarted the job: judge it by the pace before the episode, without the
            # slow window (rules.after_recovery), and skip every step this reading shows: the old
            # processes' last (slow) steps and the restart's warm-up, numbered alike
            fail_slow_in = after_recovery(
                st.fail_slow,
                FailSlowParams(slow_factor=settings.slow_factor, persist_steps=settings.persist_steps),
            )
            shown = [s.step for s in reading.progress.samples]
            if reading.progress.step is not None:
                shown.append(reading.progress.step)
            if shown:
                last_in = max(shown) if last_in is None else max(last_in, *shown)
        verdicts, fail_slow, last_step = reading_verdicts(reading, fail_slow_in, last_in, settings)
        prior = st.memory
        decision = decide(
            job.name,
            reading.read_at,
            verdicts,
            st.memory,
            settings,
            run_ended_s=run_ended,
            newest_step_s=reading.newest_step_time,
            advise=request.advise,
            resume=request.resume,
        )
        now = decision.at_s
        inc_id = _sync_incident(store, job.name, st, decision, reading, now)
        memory = decision.memory
        event_id: int | None = None
        doc = decision.to_json()
        if decision.action is not Action.NONE:
            first = decision.evidence[0] if decision.evidence else None
            evidence = {
                "evidence": doc["evidence"],
                "also_seen": doc["also_seen"],
                "left_out": doc["left_out"],
                "params": doc["params"],
                "rail": doc["rail"],
                "incident": doc["incident"],
                "hosts": list(reading.hosts),
            }
            event_id = watchstore.record_event(
                store,
                job.name,
                at=now,
                signal_class=(decision.signal or SignalClass.UNKNOWN).value,
                rule=first.rule if first is not None else "none",
                action=watchstore.WatchAction(decision.action.value),
                reason=decision.reason,
                playbook=decision.playbook,
                evidence=strict_jsonable(evidence),
                incident_id=inc_id,
            )
        # the state is saved before anything acts: a watcher killed during the run finds the run
        # in progress (and its incident handled), never decides it again
        st = _State(memory, fail_slow, last_step, inc_id)
        watchstore.put_state(store, job.name, st.to_json(), at=now)
        playbook_run: dict[str, Any] | None = None
        notified: dict[str, Any] | None = None
        if decision.action is Action.RUN and decision.playbook is not None:
            playbook_run = _run_recovery(request, decision)
            run_id = playbook_run.get("run_id")
            if not isinstance(run_id, int):
                # refused before anything ran: not a recovery (no cool-down, not counted in the hour,
                # the incident still unhandled); the next evaluation decides again
                st = _State(decision.memory.refused(prior), fail_slow, last_step, inc_id)
                watchstore.put_state(store, job.name, st.to_json(), at=now)
            if isinstance(run_id, int):
                st = _State(memory.with_run_id(run_id), fail_slow, last_step, inc_id)
                watchstore.put_state(store, job.name, st.to_json(), at=now)
                if event_id is not None:
                    watchstore.set_event_run(store, event_id, run_id)
                if inc_id is not None:
                    watchstore.update_incident(
                        store, inc_id, decision_at=now, playbook=decision.playbook, playbook_run_id=run_id
                    )
                    _fill_incident(store, job.name, inc_id, None)
        elif decision.action is Action.STOP and decision.notify:
            notified = _notify(decision.notify, decision)
        # the job completed and no recovery is in progress (one just run is: the next evaluation
        # sees what it left)
        ended = reading.liveness.state is Liveness.ENDED and st.memory.running is None
    return WatchResult(
        job=job.name,
        decision=doc,
        reading=strict_jsonable(_reading_summary(reading)),
        verdicts=tuple(v.to_json() for v in verdicts),
        event_id=event_id,
        incident_id=inc_id,
        playbook_run=playbook_run,
        notify=notified,
        resumed=resumed,
        job_ended=ended,
    )


def _confirm(request: WatchRequest) -> Callable[[Any], bool] | None:
    """The playbook engine's ``confirm``: yes to every destructive step with ``--yes``, else None
    (the playbook's own policy decides, and a playbook that needs a person is refused)."""
    from robustctl.actions.session import always

    return always if request.yes else None


def _run_recovery(request: WatchRequest, decision: Decision) -> dict[str, Any]:
    """Run the decided playbook (unattended: its policy decides destructive steps); its outcome."""
    from robustctl.commands.playbook import PlaybookRunRequest, run_playbook_run
    from robustctl.playbooks.engine import RunOutcome

    name = str(decision.playbook)
    req = PlaybookRunRequest(
        name=name,
        params=dict(decision.params),
        inventory=Path(request.inventory.source),
        state=request.state,
    )
    try:
        out = run_playbook_run(req, confirm=_confirm(request))
    except RobustctlError as exc:
        return {"run_id": None, "playbook": name, "status": "refused", "message": str(exc)[:1024]}
    if not isinstance(out, RunOutcome):  # pragma: no cover - not a dry run
        return {"run_id": None, "playbook": name, "status": "refused", "message": "not run"}
    return {"run_id": out.run_id, "playbook": out.playbook, "status": out.status, "message": out.message}


# ----------------------------------------------------------------------- resume, incident phases


LOCALIZATION_KINDS = ("diagnose", "stacks", "replay-sdc")
"""Playbook step kinds whose time is the incident's localization phase (issue 22 §4: "localization
(stacks/diagnose/replay)")."""

EVICTION_KINDS = ("evict", "standby-activate")
"""Step kinds whose time is the eviction phase (issue 22 §4: "eviction and standby swap")."""

RESTART_KINDS = ("restart", "rollback")
"""Step kinds that start the restart phase (``rollback`` restarts the job on the older code)."""

ADOPT_SLACK_S = 5.0
"""How much earlier than the watcher's decision an unfinished run of the job may have begun and still be
adopted as the decision's run (the watcher died after beginning it, before storing its id), in seconds.
The decision's time and the journal's are the same host's clock read moments apart; 5 s covers a
clock slewed by NTP meanwhile, while a run a person began by hand earlier is not taken for it."""

ADOPT_RUNS_READ = 8
"""Most journal runs of the job read when adopting one (the newest; begin_run allows one unfinished)."""


def _run_alive(store: Store, job: str, pid: int) -> bool:
    """Whether the process of a journal run still carries it: this process, or another that holds the
    job's playbook lock (:func:`robustctl.playbooks.journal.job_lock`, held for a whole run and
    released by the kernel when its process dies, so a pid reused since does not count)."""
    from robustctl.playbooks import journal
    from robustctl.store import StoreLocked

    if pid == os.getpid():
        return True
    try:
        with journal.job_lock(store, job):
            return False
    except StoreLocked:
        return True


def _resume_orphaned(
    request: WatchRequest, store: Store, job: str, st: _State, now: float
) -> tuple[_State, dict[str, Any] | None]:
    """Resume the recovery run an earlier watcher began and died in, through the journal.

    The stored memory names a run in progress; when its journal record is still ``running`` and the
    process that ran it is gone (it no longer holds the job's playbook lock: :func:`_run_alive`),
    :func:`robustctl.commands.playbook.run_playbook_resume` carries it on
    (a finished step is never run again; a destructive step whose audit record finished is not applied
    again: the engine's resume rule), after an event saying so. A run begun but whose id the watcher
    had not stored yet is adopted (the job's unfinished run begun since the decision, see
    :data:`ADOPT_SLACK_S`). Nothing is resumed with ``--advise`` or while the run's process lives. Returns the state (with the adopted id) and the resumed
    run's summary (None: nothing resumed).
    """
    from robustctl import watchstore
    from robustctl.commands.playbook import PlaybookResumeRequest, run_playbook_resume
    from robustctl.playbooks import journal
    from robustctl.store import StoreLocked

    run = st.memory.running
    if run is None or request.advise:
        return st, None
    rid = run.run_id
    if rid is None:
        found = [
            r
            for r in journal.runs(store, job=job, limit=ADOPT_RUNS_READ)
            if r.status == journal.RunStatus.RUNNING and r.started_at >= run.started_s - ADOPT_SLACK_S
        ]
        if not found:
            return st, None
        rid = found[0].id
        st = _State(st.memory.with_run_id(rid), st.fail_slow, st.last_step, st.incident_id)
        watchstore.put_state(store, job, st.to_json(), at=now)
    rec = journal.run_record(store, rid)
    if rec is None or rec.status != journal.RunStatus.RUNNING or _run_alive(store, job, rec.pid):
        return st, None
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
            f"resumed playbook run {rid} ({rec.playbook}) of incident {run.incident}: the process that "
            f"ran it (pid {rec.pid}) is gone; the journal carries it on, no finished step runs again"
        ),
        playbook=rec.playbook,
        evidence=strict_jsonable({"run_id": rid, "dead_pid": rec.pid, "steps_finished": done[:64]}),
        incident_id=st.incident_id,
        playbook_run_id=rid,
    )
    if st.incident_id is not None:  # the watcher died before it could record the run on the incident
        with contextlib.suppress(watchstore.IncidentRefused):
            watchstore.update_incident(
                store, st.incident_id, decision_at=run.started_s, playbook=rec.playbook, playbook_run_id=rid
            )
    req = PlaybookResumeRequest(run_id=rid, inventory=Path(request.inventory.source), state=request.state)
    try:
        out = run_playbook_resume(req, confirm=_confirm(request))
        info: dict[str, Any] = {
            "run_id": out.run_id,
            "playbook": out.playbook,
            "status": out.status,
            "message": out.message,
        }
    except StoreLocked:
        return st, None  # its process lives after all (another pid namespace): it carries on
    except RobustctlError as exc:
        info = {"run_id": rid, "playbook": rec.playbook, "status": "refused", "message": str(exc)[:1024]}
    info["event_id"] = event_id
    if st.incident_id is not None:
        _fill_incident(store, job, st.incident_id, None)
    return st, info


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
    """
    steps = [x for x in run.steps if x.status != "skipped"]
    out: dict[str, Any] = {}

    def span(kinds: tuple[str, ...], start: str, end: str) -> None:
        mine = [x for x in steps if x.kind in kinds]
        if not mine:
            return
        out[start] = min(x.started_at for x in mine)
        ends = [x.finished_at for x in mine]
        if all(e is not None for e in ends) and not any(x.status == "running" for x in mine):
            out[end] = max(e for e in ends if e is not None)

    span(LOCALIZATION_KINDS, "localization_start_at", "localization_end_at")
    span(EVICTION_KINDS, "eviction_start_at", "eviction_end_at")
    restarts = [x for x in steps if x.kind in RESTART_KINDS]
    if restarts:
        out["restart_start_at"] = min(x.started_at for x in restarts)
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
    if machines:
        out["machines_evicted"] = tuple(dict.fromkeys(machines))
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
    return out


def _fill_incident(store: Store, job: str, incident_id: int, newest_step_s: float | None) -> None:
    """Fill the job's open incident's phases from its recovery run's journal (:func:`incident_phases`)
    and, once the run has ended, its first new step: the first progress sample after the run's end
    (else ``newest_step_s`` when later than that end). Forward only: a field set keeps its value."""
    from robustctl import watchstore
    from robustctl.playbooks import journal

    inc = watchstore.current_incident(store, job)
    if inc is None or inc.id != incident_id or inc.playbook_run_id is None:
        return
    run = journal.run_record(store, inc.playbook_run_id)
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

    inv = request.inventory
    try:
        job = inv.job(request.job)
    except InventoryError as exc:
        raise UsageError(str(exc)) from None
    interval = inv.watch.interval_s
    stop = stop_event if stop_event is not None else threading.Event()
    wait = sleep if sleep is not None else stop.wait
    path = state_path(request.state)
    count, last = 0, None
    with watchstore.watch_lock(path, job.name):
        own = pool is None
        if pool is None:
            from robustctl.transport.pool import TransportPool

            pool = TransportPool(scheduler=inv.scheduler)
        try:
            while not stop.is_set():
                req = request if count == 0 else replace(request, resume=False)
                last = _evaluate(req, path, pool=pool, clock=clock, reader=reader)
                count += 1
                if on_result is not None:
                    on_result(last)
                if last.job_ended:
                    return WatchLoopResult(job.name, count, "job-ended", last)
                if stop.is_set():
                    break
                wait(interval)
        finally:
            if own:
                pool.close()
    return WatchLoopResult(job.name, count, "stopped", last)


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
