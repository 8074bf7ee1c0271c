"""Property-based tests of the watch's decisions and rails (robustctl.watch.decide).

Any sequence of evaluations (verdict sets of any classes, unknown included; time steps from 0 to
over an hour; the playbook run in progress ending at any time between its start and the evaluation
that reports it; the job's newest step before or after that end; --advise on or off) fed through
:func:`decide`, each decision's memory into the next:

* every evaluation yields exactly one decision with a non-empty reason, strict JSON, no exception;
* never two runs overlapping for one job (a ``run`` only when no run is in flight);
* never more than ``max_recoveries_per_hour`` runs in any sliding hour (no resume: a person's resume
  restarts the count by design, checked separately);
* after a ``stop``, no ``run`` until a resume;
* the rail table (:data:`RAILS`, :func:`judge`): for any situation, the first rail that holds decides,
  a ``run`` happens exactly when none holds, and a rail that holds never starts a run or counts a
  recovery (only the hourly limit's ``stop`` changes the memory, by pausing).

Seeded and bounded by the ``ci`` profile (tests/conftest.py); each case is at most 40 cheap calls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.config import WatchSettings
from robustctl.watch.decide import (
    RAILS,
    RECOVERY_WINDOW_S,
    Action,
    Decision,
    OpenIncident,
    Pause,
    RunInProgress,
    Situation,
    WatchMemory,
    decide,
    judge,
)
from robustctl.watch.rules import SignalClass, Verdict

pytestmark = pytest.mark.fuzz

JOB = "llm"
T0 = 1_700_000_000.0


def verdict(signal: SignalClass) -> Verdict:
    """A verdict of ``signal`` (host-critical names a host)."""
    values: tuple[tuple[str, str | float], ...] = (("value", 1.0),)
    if signal is SignalClass.HOST_CRITICAL:
        values = (("host", "gpu-node-1"),)
    return Verdict(signal, f"{signal.value}.rule", values, f"saw {signal.value}")


@dataclass(frozen=True)
class Step:
    """One evaluation: time since the previous one, verdict classes, whether the run in flight (if
    any) reports ended and where in (start, now] it ended, whether a step follows that end, advise,
    resume."""

    dt: float
    classes: tuple[SignalClass, ...]
    end_run: bool
    end_frac: float
    stepped: bool
    advise: bool
    resume: bool


def steps(resume: bool) -> st.SearchStrategy[list[Step]]:
    step = st.builds(
        Step,
        dt=st.one_of(st.sampled_from([0.0, 1.0, 599.0, 600.0, 601.0, RECOVERY_WINDOW_S]), st.floats(0, 4000)),
        classes=st.lists(st.sampled_from(list(SignalClass)), max_size=4).map(tuple),
        end_run=st.booleans(),
        end_frac=st.floats(0, 1),
        stepped=st.booleans(),
        advise=st.booleans(),
        resume=st.booleans() if resume else st.just(False),
    )
    return st.lists(step, min_size=1, max_size=40)


SETTINGS = st.builds(
    WatchSettings,
    cooldown_s=st.sampled_from([0.0, 60.0, 600.0]),
    max_recoveries_per_hour=st.integers(1, 4),
    notify=st.sampled_from([None, ["notify"]]),
)


def run_sequence(settings: WatchSettings, seq: list[Step]) -> list[tuple[Step, float, Decision, bool]]:
    """Feed ``seq`` through decide; returns (step, time, decision, a run was in flight before it)."""
    mem = WatchMemory()
    now = T0
    out = []
    in_flight: float | None = None  # start of the run in flight, as the journal would know it
    newest_step: float | None = None
    for s in seq:
        now += s.dt
        ended: float | None = None
        if in_flight is not None and s.end_run:
            ended = in_flight + s.end_frac * (now - in_flight)
        if s.stepped:
            newest_step = now
        d = decide(
            JOB,
            now,
            [verdict(c) for c in s.classes],
            mem,
            settings,
            run_ended_s=ended,
            newest_step_s=newest_step,
            advise=s.advise,
            resume=s.resume,
        )
        flying = in_flight is not None and ended is None
        if ended is not None:
            in_flight = None
        if d.action is Action.RUN:
            in_flight = now
        out.append((s, now, d, flying))
        mem = d.memory
    return out


def check_decision(d: Decision) -> None:
    assert isinstance(d.action, Action)
    assert d.reason.strip()
    doc = json.loads(json.dumps(d.to_json(), allow_nan=False))
    assert doc["kind"] == "watch-decision" and doc["schema_version"] == 1
    assert doc["action"] == d.action.value
    if d.action is Action.RUN:
        assert d.playbook and ("job", JOB) in d.params


@given(SETTINGS, steps(resume=False))
def test_rails_hold_for_any_sequence(settings: WatchSettings, seq: list[Step]) -> None:
    results = run_sequence(settings, seq)
    assert len(results) == len(seq)
    runs: list[float] = []
    stopped = False
    for s, now, d, flying in results:
        check_decision(d)
        if d.action is Action.RUN:
            assert not flying, "a second run while one is in flight"
            assert not s.advise, "advise started a run"
            assert not stopped, "a run after stop without resume"
            runs.append(now)
        if d.action is Action.STOP:
            assert not stopped, "stop twice without resume"
            stopped = True
        if s.advise:
            assert d.action not in (Action.RUN, Action.STOP)
        if not s.classes:
            assert d.action is Action.NONE
    # never more than N runs in any sliding hour
    for i, start in enumerate(runs):
        within = [t for t in runs[i:] if t - start < RECOVERY_WINDOW_S]
        assert len(within) <= settings.max_recoveries_per_hour


@given(SETTINGS, steps(resume=True))
def test_resume_reopens_acting_and_nothing_raises(settings: WatchSettings, seq: list[Step]) -> None:
    results = run_sequence(settings, seq)
    paused = False
    for s, _now, d, flying in results:
        check_decision(d)
        if s.resume:
            paused = False
        if d.action is Action.RUN:
            assert not flying
            assert not paused, "a run while paused"
        if d.action is Action.STOP:
            assert not paused
            paused = True
        assert (d.memory.paused is not None) == paused


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=25,
)


@given(SETTINGS, steps(resume=True), st.data())
def test_a_stored_memory_reads_back_or_is_one_config_error(
    settings: WatchSettings, seq: list[Step], data: st.DataObject
) -> None:
    """What the watcher saved reads back equal; any damage to it (a field replaced by any JSON value,
    a field dropped) is a ConfigError naming the field, never another exception."""
    from robustctl.errors import ConfigError

    results = run_sequence(settings, seq)
    if not results:
        return
    doc = json.loads(json.dumps(results[-1][2].memory.to_json()))
    assert WatchMemory.from_json(doc).to_json() == doc
    damaged = dict(doc)
    key = data.draw(st.sampled_from(sorted(damaged)))
    if data.draw(st.booleans()):
        damaged[key] = data.draw(JSON_VALUES)
    else:
        del damaged[key]
    try:
        WatchMemory.from_json(damaged)
    except ConfigError as exc:
        assert "\n" not in str(exc)


@st.composite
def situations(draw: st.DrawFn) -> Situation:
    """A situation after rules 1 to 5 with any combination of the rails' conditions."""
    settings = draw(SETTINGS)
    now = T0 + draw(st.floats(0, 3600))
    signal = draw(st.sampled_from([c for c in SignalClass if c is not SignalClass.UNKNOWN]))
    handled = draw(st.booleans())
    inc = OpenIncident(
        f"{JOB}-1",
        signal,
        T0,
        playbook="p" if handled else None,
        recovery_started_s=T0 if handled else None,
        recovery_ended_s=draw(st.sampled_from([None, T0 + 1.0])) if handled else None,
    )
    mem = WatchMemory(
        recoveries_s=tuple(draw(st.lists(st.floats(T0, now), max_size=5))),
        cooldown_until_s=draw(st.one_of(st.none(), st.floats(T0, T0 + 7200))),
        running=draw(st.sampled_from([None, RunInProgress("p", inc.incident_id, T0, 3)])),
        incident=inc,
        paused=draw(st.sampled_from([None, Pause("limit", T0)])),
        incidents_opened=1,
    )
    hosts = tuple(draw(st.lists(st.sampled_from(["n1", "n2", "x" * 5000]), max_size=2, unique=True)))
    return Situation(
        job=JOB,
        now=now,
        settings=settings,
        memory=mem,
        incident=inc,
        seen=signal,
        signal=signal,
        lower=draw(st.booleans()),
        playbook=settings.playbook_for(signal.value),
        evidence=(verdict(signal),),
        hosts=hosts,
        advise=draw(st.booleans()),
    )


@given(situations())
def test_the_first_rail_that_holds_decides_and_only_act_runs(s: Situation) -> None:
    held = [out for out in (rail(s) for rail in RAILS) if out is not None]
    out = judge(s)
    if held:
        assert out == held[0]
        for o in held:
            assert o.action is not Action.RUN and o.params == ()
            assert o.memory.running == s.memory.running and o.memory.recoveries_s == s.memory.recoveries_s
            assert o.memory == s.memory or (o.action is Action.STOP and o.memory.paused is not None)
    else:
        assert out.action is (Action.ADVISE if s.advise else Action.RUN)
        assert out.params[0] == ("job", JOB)
        if out.action is Action.RUN:
            assert out.memory.running is not None and out.memory.recoveries_s == (
                *s.memory.recoveries_s,
                s.now,
            )
