"""One reading of a job's signals turned into verdicts (issue 22, §2), pure.

:func:`reading_verdicts` applies the rules of :mod:`robustctl.watch.rules` (hang, fail-slow, nan-loss,
thresholds from the inventory's ``watch:`` section) to a :class:`~robustctl.watch.signals.JobReading`,
adds the log scan's crash verdicts, a ``crash`` when the job's ranks are not all running, a
``host-critical`` for the job's hosts the store holds a critical verdict for, and an ``unknown`` for
each signal that could not be read. :func:`judged_from` says from which fail-slow state and step a
reading is judged (after a recovery: the pace before the episode). :func:`reading_summary` is the
``reading`` part of ``watch --json``. Nothing here reads the clock, the store or a host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
    from robustctl.watch.decide import WatchMemory
    from robustctl.watch.signals import JobReading

__all__ = [
    "MAX_EXITS_SAID",
    "MAX_READING_ERRORS",
    "SOURCE_FINDINGS",
    "SOURCE_LIVENESS",
    "fail_slow_params",
    "finding_verdicts",
    "judged_from",
    "liveness_verdicts",
    "reading_summary",
    "reading_verdicts",
]

SOURCE_LIVENESS = (
    "crash: a rank exited or the job left the running state (issue 22 §2 table; ByteRobust, arXiv "
    "2509.16293 §4.1: the process and job status is a real-time explicit-failure signal)"
)
"""The source a liveness ``crash`` verdict cites."""

SOURCE_FINDINGS = (
    "host-critical: the host's latest sweep/diagnose verdict is critical (issue 22 §2 table; "
    "ByteRobust §4.2: a machine named with high confidence is evicted at once)"
)
"""The source a ``host-critical`` verdict cites."""

MAX_EXITS_SAID = 4
"""Most rank exits a liveness verdict's evidence sentence names (the count of all is among its
values): a sentence stays one line; the first few exits show the pattern (our choice)."""

MAX_READING_ERRORS = 16
"""Most error lines of a reading kept in :func:`reading_summary` (each evaluation is printed and
stored: the first sixteen say what went wrong; our choice)."""


def fail_slow_params(settings: WatchSettings) -> FailSlowParams:
    """The fail-slow rule's parameters from the inventory's ``watch:`` section.

    Args:
        settings: the ``watch:`` section (``slow_factor``, ``persist_steps``; the rule's other
            parameters keep their defaults).

    Returns:
        The :class:`~robustctl.watch.rules.FailSlowParams` every fail-slow judgement of the watch uses.

    Raises:
        ValueError: a value outside the rule's range (the inventory's bounds keep them inside).
    """
    return FailSlowParams(slow_factor=settings.slow_factor, persist_steps=settings.persist_steps)


def liveness_verdicts(reading: JobReading) -> list[Verdict]:
    """A ``crash`` verdict when the reading's liveness is ``dead`` (else none).

    Args:
        reading: the job's reading.

    Returns:
        One ``liveness.dead`` verdict naming the first :data:`MAX_EXITS_SAID` exits, or an empty list.
    """
    from robustctl.watch.signals import Liveness

    live = reading.liveness
    if live.state is not Liveness.DEAD:
        return []
    exits = live.exits[:MAX_EXITS_SAID]
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


def finding_verdicts(reading: JobReading) -> list[Verdict]:
    """A ``host-critical`` verdict for the job's hosts with a critical verdict in the store (else none).

    Args:
        reading: the job's reading.

    Returns:
        One ``host.critical`` verdict naming the hosts and checks, or an empty list.
    """
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


def _fail_slow_verdict(
    reading: JobReading, state: FailSlowState, last_step: int | None, params: FailSlowParams
) -> tuple[Verdict | None, FailSlowState, int | None]:
    """Feed the step times of the steps after ``last_step`` to the fail-slow rule: its last verdict,
    the state after them and the newest step seen."""
    fs, slow = state, None
    newest = last_step
    for s in reading.progress.samples:
        if last_step is not None and s.step <= last_step:
            continue
        if s.step_time_s is not None:
            fs, slow = observe_step_time(fs, s.step_time_s, params)
        newest = s.step if newest is None else max(newest, s.step)
    return slow, fs, newest


def reading_verdicts(
    reading: JobReading, state_fail_slow: FailSlowState, last_step: int | None, settings: WatchSettings
) -> tuple[list[Verdict], FailSlowState, int | None]:
    """Every verdict of one reading, with the fail-slow state and newest step judged after it.

    The rules (:mod:`robustctl.watch.rules`, thresholds from ``settings``): hang
    (``judge_hang`` with ``watch.stall_after_s``), fail-slow (``observe_step_time`` on the step times of
    steps after ``last_step``, :func:`fail_slow_params`), nan-loss (``judge_losses`` on the losses of
    steps after ``last_step``, ``watch.spike_factor``/``loss_window``); the log scan's crash verdicts; a
    ``crash`` when liveness is ``dead``; a ``host-critical`` for the job's hosts with a critical verdict
    in the store; an ``unknown`` for each signal that could not be read (the hang rule's own unknown
    speaks for the progress signal). Pure.

    Args:
        reading: the job's reading.
        state_fail_slow: the fail-slow detector's state before it.
        last_step: the newest step judged before (None: none).
        settings: the ``watch:`` section.

    Returns:
        ``(verdicts, fail-slow state after, newest step judged)``.
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
    slow, fs, newest = _fail_slow_verdict(reading, state_fail_slow, last_step, fail_slow_params(settings))
    if slow is not None:
        verdicts.append(slow)
    losses, start = reading.losses_after(last_step)
    loss = judge_losses(losses, start=start, spike_factor=settings.spike_factor, window=settings.loss_window)
    if loss is not None:
        verdicts.append(loss)
    verdicts.extend(v for _, v in reading.log_verdicts)
    verdicts.extend(liveness_verdicts(reading))
    verdicts.extend(finding_verdicts(reading))
    for name, why in reading.unknown:
        if name == "progress" and hang is not None and hang.signal is SignalClass.UNKNOWN:
            continue
        verdicts.append(
            Verdict(SignalClass.UNKNOWN, f"source.{name}", (), why, "not checked is never healthy")
        )
    return verdicts, fs, newest


def judged_from(
    reading: JobReading,
    memory: WatchMemory,
    fail_slow: FailSlowState,
    last_step: int | None,
    run_ended_s: float | None,
    settings: WatchSettings,
) -> tuple[FailSlowState, int | None]:
    """The fail-slow state and newest step judged to start this reading's verdicts from.

    When the open incident was handled and its recovery run has ended, the recovery restarted the job:
    it is judged by the pace before the episode, without the slow window
    (:func:`robustctl.watch.rules.after_recovery`), and every step this reading shows is skipped (the
    old processes' last, slow steps and the restart's warm-up, numbered alike). Otherwise the stored
    ones, unchanged.

    Args:
        reading: the job's reading.
        memory: the decision memory before it.
        fail_slow: the stored fail-slow state.
        last_step: the stored newest step judged (None: none).
        run_ended_s: when the run in progress ended, UNIX s (None: none or still running).
        settings: the ``watch:`` section.

    Returns:
        ``(fail-slow state, newest step judged)`` to pass to :func:`reading_verdicts`.
    """
    if memory.incident is None or not memory.incident.handled or run_ended_s is None:
        return fail_slow, last_step
    state = after_recovery(fail_slow, fail_slow_params(settings))
    shown = [s.step for s in reading.progress.samples]
    if reading.progress.step is not None:
        shown.append(reading.progress.step)
    if shown:
        last_step = max(shown) if last_step is None else max(last_step, *shown)
    return state, last_step


def reading_summary(r: JobReading) -> dict[str, Any]:
    """The ``reading`` part of ``watch --json``: backend, hosts, time, step, newest step time, liveness,
    what was unknown and the first :data:`MAX_READING_ERRORS` error lines.

    Args:
        r: the job's reading.

    Returns:
        A plain JSON document (non-finite numbers still to be made strict by the caller).
    """
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
        "errors": [e.line for e in r.errors[:MAX_READING_ERRORS]],
    }
