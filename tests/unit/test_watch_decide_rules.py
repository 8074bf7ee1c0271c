"""The watch's decision rules one by one (robustctl.watch.decide): each rail of :data:`RAILS`, the act
rule and the memory rules 1 to 4, reached directly with a hand-built :class:`Situation` or memory.

``tests/unit/test_watch_decide.py`` walks timelines through :func:`decide`; here each rule is held
alone: when it holds, what it returns, and where its boundary lies.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from robustctl.config import WatchSettings
from robustctl.watch.decide import (
    MAX_HOSTS_PARAM_CHARS,
    RAILS,
    RECOVERY_WINDOW_S,
    Action,
    OpenIncident,
    Pause,
    Rail,
    RunInProgress,
    Situation,
    WatchMemory,
    act,
    advance_clock,
    apply_resume,
    close_recovered,
    end_run,
    judge,
    open_or_reclassify,
    rail_cooldown,
    rail_hourly_limit,
    rail_no_hosts,
    rail_paused,
    rail_running,
    rail_same_incident,
)
from robustctl.watch.rules import SignalClass, Verdict

JOB = "llm"
T0 = 1_700_000_000.0
SETTINGS = WatchSettings()
HANG = Verdict(SignalClass.HANG, "hang.stall", (("age_s", 700.0),), "no step for 700 s")
INCIDENT = OpenIncident(f"{JOB}-1", SignalClass.HANG, T0 - 60)


def situation(
    memory: WatchMemory | None = None,
    *,
    signal: SignalClass = SignalClass.HANG,
    seen: SignalClass | None = None,
    lower: bool = False,
    hosts: tuple[str, ...] = (),
    advise: bool = False,
    settings: WatchSettings = SETTINGS,
) -> Situation:
    """A situation after rules 1 to 5: an open, unhandled hang incident unless the memory says else."""
    mem = memory if memory is not None else WatchMemory(incident=INCIDENT, incidents_opened=1)
    inc = mem.incident if mem.incident is not None else INCIDENT
    return Situation(
        job=JOB,
        now=T0,
        settings=settings,
        memory=replace(mem, incident=inc),
        incident=inc,
        seen=seen if seen is not None else signal,
        signal=signal,
        lower=lower,
        playbook=settings.playbook_for(signal.value),
        evidence=(HANG,),
        hosts=hosts,
        advise=advise,
    )


def test_the_rails_are_applied_in_the_documented_order() -> None:
    assert RAILS == (
        rail_paused,
        rail_running,
        rail_same_incident,
        rail_cooldown,
        rail_no_hosts,
        rail_hourly_limit,
    )


def test_no_rail_holds_for_a_fresh_incident_and_act_runs_the_playbook() -> None:
    s = situation()
    assert all(rail(s) is None for rail in RAILS)
    out = judge(s)
    assert out.action is Action.RUN
    assert out.rail is None
    assert out.params == (("job", JOB),)
    assert out.reason == f"run {s.playbook} (job={JOB}) for hang ({INCIDENT.incident_id})"
    assert out.memory.running == RunInProgress(s.playbook, INCIDENT.incident_id, T0)
    assert out.memory.recoveries_s == (T0,)
    assert out.memory.incident is not None and out.memory.incident.handled


def test_act_with_advise_starts_nothing() -> None:
    s = situation(advise=True)
    out = act(s)
    assert out.action is Action.ADVISE
    assert out.reason.endswith("--advise acts on nothing")
    assert out.memory == s.memory  # no run, no recovery counted, the incident unhandled


def test_act_passes_the_hosts_of_a_host_critical_signal() -> None:
    s = situation(signal=SignalClass.HOST_CRITICAL, hosts=("n1", "n2"))
    out = act(s)
    assert out.params == (("job", JOB), ("hosts", "n1,n2"))


def test_paused_holds_only_while_paused_and_names_the_pause() -> None:
    assert rail_paused(situation()) is None
    mem = WatchMemory(incident=INCIDENT, paused=Pause("3 recoveries in the hour", T0 - 100))
    out = rail_paused(situation(mem))
    assert out is not None
    assert (out.action, out.rail) == (Action.SKIP, Rail.PAUSED)
    assert "3 recoveries in the hour" in out.reason and "resume" in out.reason
    assert out.memory == situation(mem).memory


def test_running_holds_while_a_run_is_in_progress_and_says_lower_priority_for_a_lower_signal() -> None:
    assert rail_running(situation()) is None
    run = RunInProgress("hang", INCIDENT.incident_id, T0 - 30, run_id=7)
    mem = WatchMemory(incident=INCIDENT, running=run)
    out = rail_running(situation(mem))
    assert out is not None and (out.action, out.rail) == (Action.SKIP, Rail.RUNNING)
    assert "(run 7)" in out.reason and "never two at once" in out.reason
    low = rail_running(situation(mem, seen=SignalClass.FAIL_SLOW, lower=True))
    assert low is not None and low.rail is Rail.LOWER_PRIORITY
    assert low.reason.startswith("lower-priority fail-slow while hang is open")


def test_same_incident_holds_once_the_incident_was_handled() -> None:
    assert rail_same_incident(situation()) is None
    handled = replace(INCIDENT, playbook="hang", recovery_started_s=T0 - 50, recovery_ended_s=T0 - 10)
    out = rail_same_incident(situation(WatchMemory(incident=handled)))
    assert out is not None and (out.action, out.rail) == (Action.SKIP, Rail.SAME_INCIDENT)
    assert "already handled by hang ended at" in out.reason
    low = rail_same_incident(situation(WatchMemory(incident=handled), seen=SignalClass.FAIL_SLOW, lower=True))
    assert low is not None and low.rail is Rail.LOWER_PRIORITY


def test_cooldown_holds_before_its_end_and_not_at_it() -> None:
    assert rail_cooldown(situation()) is None
    inside = rail_cooldown(situation(WatchMemory(incident=INCIDENT, cooldown_until_s=T0 + 1)))
    assert inside is not None and (inside.action, inside.rail) == (Action.SKIP, Rail.COOLDOWN)
    assert rail_cooldown(situation(WatchMemory(incident=INCIDENT, cooldown_until_s=T0))) is None


def test_no_hosts_holds_for_a_host_critical_signal_without_hosts_or_with_too_many() -> None:
    assert rail_no_hosts(situation()) is None  # not host-critical: the rail does not apply
    assert rail_no_hosts(situation(signal=SignalClass.HOST_CRITICAL, hosts=("n1",))) is None
    none = rail_no_hosts(situation(signal=SignalClass.HOST_CRITICAL))
    assert none is not None and (none.action, none.rail) == (Action.SKIP, Rail.NO_HOSTS)
    assert "name no host" in none.reason
    many = tuple(f"host-{i:05d}" for i in range(MAX_HOSTS_PARAM_CHARS // 10 + 1))
    assert len(",".join(many)) > MAX_HOSTS_PARAM_CHARS
    over = rail_no_hosts(situation(signal=SignalClass.HOST_CRITICAL, hosts=many))
    assert over is not None and over.rail is Rail.NO_HOSTS
    assert f"{len(many)} hosts do not fit" in over.reason


def test_hourly_limit_stops_and_pauses_at_the_limit_and_advises_so_with_advise() -> None:
    settings = WatchSettings(max_recoveries_per_hour=2, notify=["/bin/true"])
    below = WatchMemory(incident=INCIDENT, recoveries_s=(T0 - 100,))
    assert rail_hourly_limit(situation(below, settings=settings)) is None
    at = WatchMemory(incident=INCIDENT, recoveries_s=(T0 - 100, T0 - 50))
    out = rail_hourly_limit(situation(at, settings=settings))
    assert out is not None and (out.action, out.rail) == (Action.STOP, Rail.HOURLY_LIMIT)
    assert out.notify == ("/bin/true",)
    assert out.memory.paused is not None and out.memory.paused.since_s == T0
    advised = rail_hourly_limit(situation(at, settings=settings, advise=True))
    assert advised is not None and advised.action is Action.ADVISE
    assert advised.reason.startswith("would stop: ")
    assert advised.memory.paused is None and advised.notify == ()


def test_judge_takes_the_first_rail_that_holds() -> None:
    run = RunInProgress("hang", INCIDENT.incident_id, T0 - 30)
    mem = WatchMemory(incident=INCIDENT, running=run, paused=Pause("limit", T0 - 10), cooldown_until_s=T0 + 5)
    assert judge(situation(mem)).rail is Rail.PAUSED
    assert judge(situation(replace(mem, paused=None))).rail is Rail.RUNNING
    assert judge(situation(replace(mem, paused=None, running=None))).rail is Rail.COOLDOWN


def test_advance_clock_never_goes_back_and_forgets_recoveries_older_than_the_window() -> None:
    mem = WatchMemory(recoveries_s=(T0 - RECOVERY_WINDOW_S, T0 - RECOVERY_WINDOW_S + 1), last_evaluated_s=T0)
    after, now = advance_clock(mem, T0 - 500)  # a clock stepped back is taken as the last evaluation's
    assert now == T0 and after.last_evaluated_s == T0
    assert after.recoveries_s == (T0 - RECOVERY_WINDOW_S + 1,)  # exactly one window old is forgotten


def test_apply_resume_clears_a_pause_and_the_hour_and_says_when_there_was_none() -> None:
    mem = WatchMemory(recoveries_s=(T0 - 5,), paused=Pause("limit", T0 - 10), cooldown_until_s=T0 + 60)
    after, note = apply_resume(mem)
    assert after.paused is None and after.recoveries_s == ()
    assert after.cooldown_until_s == T0 + 60  # a resume does not shorten a cool-down
    assert note.startswith("resumed by a person")
    same, note = apply_resume(WatchMemory())
    assert same == WatchMemory() and note == "resume asked while not paused: nothing to clear"


def test_end_run_starts_the_cooldown_at_the_runs_end_bounded_by_its_start_and_now() -> None:
    inc = replace(INCIDENT, playbook="hang", recovery_started_s=T0 - 100)
    run = RunInProgress("hang", inc.incident_id, T0 - 100, 3)
    mem = WatchMemory(incident=inc, running=run)
    after, note = end_run(mem, T0 - 40, T0, 600.0)
    assert after.running is None and after.cooldown_until_s == T0 - 40 + 600.0
    assert after.incident is not None and after.incident.recovery_ended_s == T0 - 40
    assert "playbook hang for llm-1 ended at" in note
    early, _ = end_run(mem, T0 - 1000, T0, 600.0)  # before the run began: taken as its start
    assert early.cooldown_until_s == T0 - 100 + 600.0
    late, _ = end_run(mem, T0 + 1000, T0, 600.0)  # in the future: taken as now
    assert late.cooldown_until_s == T0 + 600.0
    kept, _ = end_run(replace(mem, cooldown_until_s=T0 + 5000), T0 - 40, T0, 600.0)
    assert kept.cooldown_until_s == T0 + 5000  # a later cool-down is kept


def test_close_recovered_closes_only_on_a_step_after_the_recovery_ended() -> None:
    inc = replace(INCIDENT, playbook="hang", recovery_started_s=T0 - 100, recovery_ended_s=T0 - 40)
    mem = WatchMemory(incident=inc)
    assert close_recovered(mem, T0 - 40) == (mem, None)  # the same instant is not after it
    assert close_recovered(mem, None) == (mem, None)
    closed, note = close_recovered(mem, T0 - 39)
    assert closed.incident is None and note == "incident llm-1 closed: a new step after its recovery"
    running = replace(mem, running=RunInProgress("hang", inc.incident_id, T0 - 100))
    assert close_recovered(running, T0)[1] is None


def test_open_or_reclassify_opens_numbers_and_raises_only_an_unhandled_incident() -> None:
    mem, inc, note = open_or_reclassify(
        WatchMemory(incidents_opened=4), JOB, SignalClass.HANG, SignalClass.HANG, T0
    )
    assert inc == OpenIncident(f"{JOB}-5", SignalClass.HANG, T0) and mem.incidents_opened == 5
    assert note == f"incident {JOB}-5 opened (hang)"
    mem, inc, note = open_or_reclassify(
        WatchMemory(incident=INCIDENT), JOB, SignalClass.CRASH, SignalClass.CRASH, T0
    )
    assert inc.signal is SignalClass.CRASH and inc.incident_id == INCIDENT.incident_id
    assert note == "incident llm-1 reclassified hang -> crash"
    handled = replace(INCIDENT, recovery_started_s=T0 - 5)
    same = WatchMemory(incident=handled)
    assert open_or_reclassify(same, JOB, SignalClass.CRASH, SignalClass.CRASH, T0) == (same, handled, None)
    lower = WatchMemory(incident=INCIDENT)
    assert open_or_reclassify(lower, JOB, SignalClass.FAIL_SLOW, SignalClass.HANG, T0) == (
        lower,
        INCIDENT,
        None,
    )


@pytest.mark.parametrize("rail", RAILS, ids=lambda r: r.__name__)
def test_a_rail_that_holds_never_runs_anything(rail: object) -> None:
    run = RunInProgress("hang", INCIDENT.incident_id, T0 - 30)
    handled = replace(INCIDENT, playbook="hang", recovery_started_s=T0 - 50)
    mem = WatchMemory(
        incident=handled,
        running=run,
        paused=Pause("limit", T0 - 10),
        cooldown_until_s=T0 + 5,
        recoveries_s=(T0 - 1,) * SETTINGS.max_recoveries_per_hour,
    )
    s = situation(mem, signal=SignalClass.HOST_CRITICAL)
    assert callable(rail)
    out = rail(s)
    assert out is not None
    assert out.action is not Action.RUN and out.params == ()
    assert out.memory.running == run and out.memory.recoveries_s == mem.recoveries_s
