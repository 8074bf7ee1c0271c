"""One evaluation of ``robustctl watch``, and the loop of them (issue 22, §1 and §3).

:func:`evaluate_job` makes one evaluation of one job, its watch lock already held by the caller: it
loads what the watcher keeps in the store between evaluations (:class:`~robustctl.watch.state.WatchState`),
carries on a recovery an earlier watcher died in (:func:`robustctl.watch.recovery.resume_orphaned`),
reads the job's signals once (:func:`robustctl.watch.signals.read_job`), turns the reading into
verdicts (:func:`robustctl.watch.verdicts.reading_verdicts`), decides
(:func:`robustctl.watch.decide.decide`), records the decision as an event and opens, updates or closes
the job's incident in the store (:mod:`robustctl.watch.incidents`), saves the state, and only when the
action is ``run`` runs the playbook through the :class:`~robustctl.watch.recovery.PlaybookEngine` the
command layer passed down, recording the run's journal id on the event and the incident. A ``stop``
(the hourly limit) runs ``watch.notify`` with the decision's JSON on stdin (:func:`notify`).
:func:`evaluate_every` repeats an evaluation every interval until the job ends or a stop is asked.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from robustctl.models import strict_jsonable
from robustctl.watch.decide import Action, Decision, decide
from robustctl.watch.rules import SignalClass, Verdict
from robustctl.watch.state import WatchState

if TYPE_CHECKING:
    from robustctl.inventory import Inventory
    from robustctl.store import Store
    from robustctl.transport.pool import TransportPool
    from robustctl.watch.recovery import PlaybookEngine
    from robustctl.watch.signals import JobReading

__all__ = [
    "MAX_NOTIFY_OUTPUT_CHARS",
    "NOTIFY_TIMEOUT_S",
    "Evaluation",
    "Reader",
    "evaluate_every",
    "evaluate_job",
    "notify",
    "transport_pool",
]

NOTIFY_TIMEOUT_S = 30.0
"""Longest wait for ``watch.notify`` (a pager or chat hook posting one message), in seconds; past it
the notifier is killed and the failure recorded in the result (our choice: a hook that does not answer
in 30 s will not, and the watcher must not hang on it)."""

MAX_NOTIFY_OUTPUT_CHARS = 512
"""Most characters of the notifier's stderr kept in the result when it fails (one line or two)."""

Reader = Callable[..., "JobReading"]
"""A signal reader: :func:`robustctl.watch.signals.read_job`'s arguments and result."""

E = TypeVar("E")


@dataclass(frozen=True)
class Evaluation:
    """One evaluation's outcome, as :class:`robustctl.commands.watch.WatchResult` carries it.

    Attributes:
        job: the job. decision: the decision document. reading: the reading's summary. verdicts: every
        verdict's document. event_id, incident_id: the event recorded and the incident concerned (None:
        none). playbook_run: the recovery run's summary (``run`` only). notify: the notifier's outcome
        (``stop`` only). resumed: a recovery carried on before deciding. job_ended: the job completed
        and no recovery is in progress.
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


def notify(argv: Sequence[str], decision: Decision) -> dict[str, Any]:
    """Run ``watch.notify`` with the decision's JSON on stdin (bounded by :data:`NOTIFY_TIMEOUT_S`).

    Args:
        argv: the notifier's command.
        decision: the ``stop`` decision.

    Returns:
        ``{argv, exit_code, error}``: exit_code None when it could not run or timed out; error the
        tail of its stderr (at most :data:`MAX_NOTIFY_OUTPUT_CHARS`) when it failed, else None.
    """
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


@contextlib.contextmanager
def transport_pool(inv: Inventory, pool: TransportPool | None) -> Iterator[TransportPool]:
    """``pool``, or a new pool for the inventory's scheduler, closed when the block ends.

    Args:
        inv: the inventory (its ``scheduler`` section configures a new pool).
        pool: the caller's pool (None: a new one).

    Yields:
        The pool to use.
    """
    if pool is not None:
        yield pool
        return
    from robustctl.transport.pool import TransportPool

    own = TransportPool(scheduler=inv.scheduler)
    try:
        yield own
    finally:
        own.close()


def _read(
    inv: Inventory,
    job_name: str,
    store: Store,
    pool: TransportPool | None,
    clock: Callable[[], float],
    reader: Reader | None,
) -> JobReading:
    """Read the job's signals once over its current hosts (a pool of its own when none is given, closed
    after), and record its newest step as a progress sample."""
    from robustctl import watchstore
    from robustctl.actions.hosts import job_hosts
    from robustctl.schedulers import make_scheduler
    from robustctl.watch.signals import read_job

    job = inv.job(job_name)
    read = reader if reader is not None else read_job
    scheduler = make_scheduler(inv.scheduler, inventory=inv, store=store)
    current = job_hosts(job.name, scheduler=scheduler, store=store, inventory=inv)
    hosts = [inv.by_name(n) for n in current.hosts]
    with transport_pool(inv, pool) as used:
        reading = read(
            job, used, hosts=hosts, scheduler=scheduler, store=store, diagnose=inv.diagnose, clock=clock
        )
    if reading.newest_step_time is not None and reading.progress.step is not None:
        with contextlib.suppress(watchstore.WatchStoreInputError):  # a step the store cannot hold
            watchstore.record_progress(
                store, job.name, at=min(reading.newest_step_time, reading.read_at), step=reading.progress.step
            )
    return reading


def _record_decision(
    store: Store, job: str, decision: Decision, reading: JobReading, incident_id: int | None
) -> int | None:
    """Record the decision as an event (``none`` is not one); the event's id."""
    from robustctl import watchstore

    if decision.action is Action.NONE:
        return None
    doc = decision.to_json()
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
    return watchstore.record_event(
        store,
        job,
        at=decision.at_s,
        signal_class=(decision.signal or SignalClass.UNKNOWN).value,
        rule=first.rule if first is not None else "none",
        action=watchstore.WatchAction(decision.action.value),
        reason=decision.reason,
        playbook=decision.playbook,
        evidence=strict_jsonable(evidence),
        incident_id=incident_id,
    )


def _recover(
    store: Store,
    engine: PlaybookEngine,
    job: str,
    decision: Decision,
    prior: WatchState,
    st: WatchState,
    event_id: int | None,
) -> tuple[WatchState, dict[str, Any]]:
    """Run the decided playbook and record it: its run id on the state, the event and the incident; a
    run refused before anything ran is not a recovery (no cool-down, not counted in the hour, the
    incident still unhandled: the next evaluation decides again). The state after it and the run's
    summary."""
    from robustctl import watchstore
    from robustctl.watch.incidents import fill_incident

    now = decision.at_s
    playbook_run = engine.start(str(decision.playbook), dict(decision.params))
    run_id = playbook_run.get("run_id")
    if not isinstance(run_id, int):
        st = WatchState(decision.memory.refused(prior.memory), st.fail_slow, st.last_step, st.incident_id)
        watchstore.put_state(store, job, st.to_json(), at=now)
        return st, playbook_run
    st = WatchState(decision.memory.with_run_id(run_id), st.fail_slow, st.last_step, st.incident_id)
    watchstore.put_state(store, job, st.to_json(), at=now)
    if event_id is not None:
        watchstore.set_event_run(store, event_id, run_id)
    if st.incident_id is not None:
        watchstore.update_incident(
            store, st.incident_id, decision_at=now, playbook=decision.playbook, playbook_run_id=run_id
        )
        fill_incident(store, engine, job, st.incident_id, None)
    return st, playbook_run


def _judge(
    store: Store, engine: PlaybookEngine, inv: Inventory, job: str, st: WatchState, reading: JobReading,
    *, advise: bool, resume: bool,
) -> tuple[list[Verdict], WatchState, Decision]:  # fmt: skip
    """The reading's verdicts and decision; the state after them (not yet stored)."""
    from robustctl.watch.incidents import sync_incident
    from robustctl.watch.recovery import run_ended
    from robustctl.watch.verdicts import judged_from, reading_verdicts

    settings = inv.watch
    ended_s = run_ended(store, engine, st.memory)
    fail_slow_in, last_in = judged_from(reading, st.memory, st.fail_slow, st.last_step, ended_s, settings)
    verdicts, fail_slow, last_step = reading_verdicts(reading, fail_slow_in, last_in, settings)
    decision = decide(
        job,
        reading.read_at,
        verdicts,
        st.memory,
        settings,
        run_ended_s=ended_s,
        newest_step_s=reading.newest_step_time,
        advise=advise,
        resume=resume,
    )
    inc_id = sync_incident(
        store, job, st.memory, st.incident_id, st.last_step, decision, reading, decision.at_s
    )
    return verdicts, WatchState(decision.memory, fail_slow, last_step, inc_id), decision


def evaluate_job(
    inv: Inventory,
    job_name: str,
    path: Path,
    engine: PlaybookEngine,
    *,
    advise: bool = False,
    resume: bool = False,
    pool: TransportPool | None = None,
    clock: Callable[[], float],
    reader: Reader | None = None,
) -> Evaluation:
    """One evaluation of ``job_name`` (module docstring), the job's watch lock held by the caller.

    The state is saved before anything acts: a watcher killed during the run finds the run in progress
    (and its incident handled), and never decides it again.

    Args:
        inv: the inventory (it holds the job).
        job_name: the job.
        path: the store file.
        engine: the playbook engine (the command layer's).
        advise: decide and record, act on nothing.
        resume: a person clears the pause.
        pool: the transports (None: a new pool, closed after the reading).
        clock: the control side's UNIX clock.
        reader: the signal reader (None: :func:`robustctl.watch.signals.read_job`).

    Returns:
        The :class:`Evaluation`.

    Raises:
        ConfigError / StoreError: the store cannot be opened or its watch state is damaged (exit 78).
    """
    from robustctl import watchstore
    from robustctl.store import Store
    from robustctl.watch.incidents import fill_incident
    from robustctl.watch.recovery import resume_orphaned
    from robustctl.watch.signals import Liveness
    from robustctl.watch.verdicts import reading_summary

    job = inv.job(job_name).name
    with Store.open(path, clock=clock) as store:
        st = WatchState.from_json(watchstore.get_state(store, job), f"{path}: job {job}")
        st, resumed = resume_orphaned(store, engine, job, st, clock(), advise=advise)
        reading = _read(inv, job, store, pool, clock, reader)
        if st.incident_id is not None:
            fill_incident(store, engine, job, st.incident_id, reading.newest_step_time)
        verdicts, new, decision = _judge(store, engine, inv, job, st, reading, advise=advise, resume=resume)
        event_id = _record_decision(store, job, decision, reading, new.incident_id)
        watchstore.put_state(store, job, new.to_json(), at=decision.at_s)
        playbook_run: dict[str, Any] | None = None
        notified: dict[str, Any] | None = None
        if decision.action is Action.RUN and decision.playbook is not None:
            new, playbook_run = _recover(store, engine, job, decision, st, new, event_id)
        elif decision.action is Action.STOP and decision.notify:
            notified = notify(decision.notify, decision)
        # the job completed and no recovery is in progress (one just run is: the next evaluation
        # sees what it left)
        ended = reading.liveness.state is Liveness.ENDED and new.memory.running is None
    return Evaluation(
        job=job,
        decision=decision.to_json(),
        reading=strict_jsonable(reading_summary(reading)),
        verdicts=tuple(v.to_json() for v in verdicts),
        event_id=event_id,
        incident_id=new.incident_id,
        playbook_run=playbook_run,
        notify=notified,
        resumed=resumed,
        job_ended=ended,
    )


def evaluate_every(
    interval_s: float,
    evaluate: Callable[[int], E],
    ended: Callable[[E], bool],
    *,
    stop: threading.Event,
    wait: Callable[[float], object],
    on_result: Callable[[E], None] | None = None,
) -> tuple[int, E | None, str]:
    """Evaluate until the job ends or ``stop`` is set, waiting ``interval_s`` between evaluations.

    ``stop`` is checked before each evaluation and after it.

    Args:
        interval_s: seconds between evaluations.
        evaluate: one evaluation, given how many were made before it.
        ended: whether an evaluation says the job ended.
        stop: the stop event.
        wait: called with ``interval_s`` between evaluations.
        on_result: given each evaluation (None: nothing is).

    Returns:
        ``(evaluations made, the last one (None: none), why it ended: "job-ended" or "stopped")``.
    """
    count, last = 0, None
    while not stop.is_set():
        last = evaluate(count)
        count += 1
        if on_result is not None:
            on_result(last)
        if ended(last):
            return count, last, "job-ended"
        if stop.is_set():
            break
        wait(interval_s)
    return count, last, "stopped"
