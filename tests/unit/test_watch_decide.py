"""The watch's decisions and rails (robustctl.watch.decide), one case per rule and rail.

Each case walks a short timeline by hand: verdicts seen at given times, the memory each decision
returns fed to the next, the run's end and the job's newest step given as the journal and the
progress signal would give them.
"""

from __future__ import annotations

import json
import math

import pytest

from robustctl.config import WatchSettings
from robustctl.watch.decide import (
    PRIORITY,
    RECOVERY_WINDOW_S,
    Action,
    Decision,
    Rail,
    WatchMemory,
    decide,
    priority_of,
)
from robustctl.watch.rules import SignalClass, Verdict

JOB = "llm"
T0 = 1_700_000_000.0
DEFAULT = WatchSettings()
COOLDOWN = DEFAULT.cooldown_s

HANG = Verdict(
    SignalClass.HANG, "hang.stall", (("age_s", 700.0), ("stall_after_s", 600.0)), "no step for 700 s"
)
CRASH = Verdict(
    SignalClass.CRASH,
    "log.cuda-error",
    (("rank", 3),),
    "CUDA error: an illegal memory access",
    cause="cuda-error",
)
NAN = Verdict(
    SignalClass.NAN_LOSS, "loss.nonfinite", (("index", 7), ("loss", math.nan)), "loss nan at index 7"
)
SLOW = Verdict(SignalClass.FAIL_SLOW, "fail-slow.bocpd", (("ratio", 1.6),), "step time 1.6x its baseline")
HOST = Verdict(SignalClass.HOST_CRITICAL, "host.critical", (("host", "gpu-node-2"),), "gpu-node-2: GPU lost")
HOSTS = Verdict(
    SignalClass.HOST_CRITICAL, "host.critical", (("hosts", "gpu-node-2, gpu-node-5"),), "two hosts critical"
)
UNKNOWN = Verdict(SignalClass.UNKNOWN, "hang.no-progress", (), "no progress could be read")

BY_CLASS = {
    SignalClass.CRASH: CRASH,
    SignalClass.HOST_CRITICAL: HOST,
    SignalClass.NAN_LOSS: NAN,
    SignalClass.HANG: HANG,
    SignalClass.FAIL_SLOW: SLOW,
}


def start_and_end(verdict: Verdict, at: float, ended: float) -> WatchMemory:
    """Memory after a recovery for ``verdict`` decided at ``at`` whose run ended at ``ended``."""
    d = decide(JOB, at, [verdict], WatchMemory(), DEFAULT)
    assert d.action is Action.RUN
    d2 = decide(JOB, ended, [], d.memory, DEFAULT, run_ended_s=ended)
    return d2.memory


# ------------------------------------------------------------------------------------ plain cases


def test_healthy_is_none() -> None:
    d = decide(JOB, T0, [], WatchMemory(), DEFAULT)
    assert d.action is Action.NONE
    assert d.reason.startswith("healthy")
    assert d.memory.last_evaluated_s == T0
    assert d.memory.incident is None and d.memory.running is None


def test_unknown_only_is_a_skip_never_healthy_and_is_recorded() -> None:
    d = decide(JOB, T0, [UNKNOWN], WatchMemory(), DEFAULT)
    assert d.action is Action.SKIP
    assert d.rail is Rail.UNKNOWN_ONLY
    assert d.evidence == (UNKNOWN,)
    assert d.playbook is None and d.memory.incident is None


@pytest.mark.parametrize(
    ("verdict", "playbook"),
    [(CRASH, "job-failed"), (HANG, "hang"), (SLOW, "fail-slow"), (NAN, "nan-loss")],
)
def test_each_class_runs_its_shipped_playbook_with_the_job(verdict: Verdict, playbook: str) -> None:
    d = decide(JOB, T0, [verdict], WatchMemory(), DEFAULT)
    assert d.action is Action.RUN
    assert d.playbook == playbook
    assert d.params == (("job", JOB),)
    assert d.signal is verdict.signal
    assert d.evidence == (verdict,)
    assert d.incident == f"{JOB}-1"
    mem = d.memory
    assert mem.running is not None and mem.running.playbook == playbook and mem.running.started_s == T0
    assert mem.recoveries_s == (T0,)
    assert mem.incident is not None and mem.incident.handled and mem.incident.playbook == playbook


def test_host_critical_runs_gpu_lost_with_the_hosts_named() -> None:
    d = decide(JOB, T0, [HOST, HOSTS], WatchMemory(), DEFAULT)
    assert d.action is Action.RUN
    assert d.playbook == "gpu-lost"
    assert dict(d.params) == {"job": JOB, "hosts": "gpu-node-2,gpu-node-5"}


def test_host_critical_naming_no_host_is_skipped() -> None:
    bare = Verdict(SignalClass.HOST_CRITICAL, "host.critical", (), "a host is critical")
    d = decide(JOB, T0, [bare], WatchMemory(), DEFAULT)
    assert d.action is Action.SKIP
    assert d.rail is Rail.NO_HOSTS
    assert d.memory.running is None and d.memory.recoveries_s == ()


def test_inventory_playbook_override() -> None:
    settings = WatchSettings(playbooks={"hang": "my-hang"})
    d = decide(JOB, T0, [HANG], WatchMemory(), settings)
    assert d.playbook == "my-hang"


# ----------------------------------------------------------------------------------------- priority


def test_priority_order_is_the_documented_one() -> None:
    assert [c.value for c in PRIORITY] == ["crash", "host-critical", "nan-loss", "hang", "fail-slow"]
    assert priority_of(SignalClass.UNKNOWN) > max(priority_of(c) for c in PRIORITY)


@pytest.mark.parametrize("higher", range(len(PRIORITY)))
def test_highest_priority_wins_when_several_at_once(higher: int) -> None:
    top = PRIORITY[higher]
    seen = [BY_CLASS[c] for c in reversed(PRIORITY[higher:])] + [UNKNOWN]
    d = decide(JOB, T0, seen, WatchMemory(), DEFAULT)
    assert d.action is Action.RUN
    assert d.signal is top
    assert d.evidence == (BY_CLASS[top],)
    # the rest recorded, priority order, unknown last
    assert [v.signal for v in d.also_seen] == [*PRIORITY[higher + 1 :], SignalClass.UNKNOWN]


# -------------------------------------------------------------------------------------------- rails


def test_never_two_playbooks_at_once() -> None:
    d = decide(JOB, T0, [HANG], WatchMemory(), DEFAULT)
    mem = d.memory.with_run_id(42)
    d2 = decide(JOB, T0 + 30, [HANG], mem, DEFAULT)
    assert d2.action is Action.SKIP
    assert d2.rail is Rail.RUNNING
    assert "run 42" in d2.reason and "already running" in d2.reason
    assert d2.memory.running == mem.running
    assert d2.memory.recoveries_s == (T0,)


def test_crash_while_hang_playbook_runs_is_skipped_not_a_second_run() -> None:
    d = decide(JOB, T0, [HANG], WatchMemory(), DEFAULT)
    d2 = decide(JOB, T0 + 30, [CRASH, HANG], d.memory, DEFAULT)
    assert d2.action is Action.SKIP
    assert d2.rail is Rail.RUNNING
    assert d2.signal is SignalClass.CRASH
    assert d2.incident == d.incident
    assert d2.memory.incident is not None and d2.memory.incident.signal is SignalClass.HANG


def test_crash_while_an_unhandled_hang_is_open_reclassifies_it() -> None:
    # a recovery of an earlier incident leaves a cool-down; a hang is seen inside it, then a crash
    mem = start_and_end(SLOW, T0, T0 + 100)
    mem = decide(JOB, T0 + 200, [], mem, DEFAULT, newest_step_s=T0 + 150).memory
    assert mem.incident is None
    d = decide(JOB, T0 + 300, [HANG], mem, DEFAULT)
    assert d.action is Action.SKIP and d.rail is Rail.COOLDOWN
    hang_incident = d.incident
    d2 = decide(JOB, T0 + 330, [CRASH, HANG], d.memory, DEFAULT)
    assert d2.action is Action.SKIP and d2.rail is Rail.COOLDOWN
    assert d2.incident == hang_incident
    assert d2.memory.incident is not None and d2.memory.incident.signal is SignalClass.CRASH
    assert "reclassified hang -> crash" in d2.reason
    # once the cool-down is over the crash's playbook runs for the same incident
    d3 = decide(JOB, T0 + 100 + COOLDOWN, [HANG], d2.memory, DEFAULT)
    assert d3.action is Action.RUN
    assert d3.playbook == "job-failed"
    assert d3.incident == hang_incident
    assert d3.evidence == (HANG,)


def test_lower_priority_signal_while_a_higher_incident_is_handled() -> None:
    d = decide(JOB, T0, [CRASH], WatchMemory(), DEFAULT)
    d2 = decide(JOB, T0 + 30, [HANG], d.memory, DEFAULT)
    assert d2.action is Action.SKIP
    assert d2.rail is Rail.LOWER_PRIORITY
    assert "lower-priority hang while crash is open" in d2.reason
    d3 = decide(JOB, T0 + 60, [SLOW], d2.memory, DEFAULT, run_ended_s=T0 + 50)
    assert d3.action is Action.SKIP
    assert d3.rail is Rail.LOWER_PRIORITY


def test_repeated_same_incident_signal_never_gets_a_second_recovery() -> None:
    mem = start_and_end(HANG, T0, T0 + 120)
    # long after the cool-down, the job has still made no step: the same incident
    for k in range(3):
        d = decide(JOB, T0 + 2 * COOLDOWN + k * 30, [HANG], mem, DEFAULT, newest_step_s=T0 - 700)
        assert d.action is Action.SKIP
        assert d.rail is Rail.SAME_INCIDENT
        assert d.incident == f"{JOB}-1"
        mem = d.memory
    assert mem.recoveries_s == (T0,)


def test_new_step_after_the_recovery_closes_the_incident() -> None:
    mem = start_and_end(HANG, T0, T0 + 120)
    # a step at the run's end is not after it
    d = decide(JOB, T0 + 130, [], mem, DEFAULT, newest_step_s=T0 + 120)
    assert d.memory.incident is not None
    d = decide(JOB, T0 + 140, [], d.memory, DEFAULT, newest_step_s=T0 + 121)
    assert d.memory.incident is None
    assert "closed" in d.reason
    # the next signal is a new incident (still in cool-down)
    d2 = decide(JOB, T0 + 200, [HANG], d.memory, DEFAULT)
    assert d2.incident == f"{JOB}-2"
    assert d2.rail is Rail.COOLDOWN


def test_unhandled_incident_closes_when_its_signal_is_gone_but_not_on_unknown() -> None:
    mem = start_and_end(SLOW, T0, T0 + 100)
    mem = decide(JOB, T0 + 110, [], mem, DEFAULT, newest_step_s=T0 + 105).memory
    d = decide(JOB, T0 + 200, [HANG], mem, DEFAULT)
    assert d.rail is Rail.COOLDOWN and d.memory.incident is not None
    d2 = decide(JOB, T0 + 230, [UNKNOWN], d.memory, DEFAULT)
    assert d2.memory.incident is not None
    d3 = decide(JOB, T0 + 260, [], d2.memory, DEFAULT)
    assert d3.action is Action.NONE
    assert d3.memory.incident is None


@pytest.mark.parametrize(
    ("after_end", "action"),
    [(COOLDOWN - 0.5, Action.SKIP), (COOLDOWN, Action.RUN), (COOLDOWN + 1, Action.RUN)],
)
def test_cooldown_edges(after_end: float, action: Action) -> None:
    end = T0 + 100
    mem = start_and_end(HANG, T0, end)
    mem = decide(JOB, end + 1, [], mem, DEFAULT, newest_step_s=end + 1).memory
    assert mem.cooldown_until_s == end + COOLDOWN
    d = decide(JOB, end + after_end, [CRASH], mem, DEFAULT)
    assert d.action is action
    if action is Action.SKIP:
        assert d.rail is Rail.COOLDOWN


def test_cooldown_counts_from_the_journal_end_not_the_evaluation() -> None:
    d = decide(JOB, T0, [HANG], WatchMemory(), DEFAULT)
    # the watcher sees the run's end late (it was down): the cool-down still starts at the end
    d2 = decide(JOB, T0 + 2000, [], d.memory, DEFAULT, run_ended_s=T0 + 100)
    assert d2.memory.cooldown_until_s == T0 + 100 + COOLDOWN
    # an end time in the future of the evaluation is taken as now
    d3 = decide(JOB, T0 + 10, [], d.memory, DEFAULT, run_ended_s=T0 + 99_999)
    assert d3.memory.cooldown_until_s == T0 + 10 + COOLDOWN


def _recover(mem: WatchMemory, at: float, settings: WatchSettings) -> WatchMemory:
    """One full recovery at ``at``: run decided, ended 10 s later, a new step after it."""
    d = decide(JOB, at, [CRASH], mem, settings)
    assert d.action is Action.RUN, d.reason
    mem = decide(JOB, at + 10, [], d.memory, settings, run_ended_s=at + 10).memory
    return decide(JOB, at + 20, [], mem, settings, newest_step_s=at + 15).memory


def test_fourth_recovery_in_an_hour_stops_then_skips_paused_until_resume() -> None:
    settings = WatchSettings(cooldown_s=0, max_recoveries_per_hour=3, notify=["notify-send", "--job"])
    mem = WatchMemory()
    for k in range(3):
        mem = _recover(mem, T0 + k * 600, settings)
    stop = decide(JOB, T0 + 1800, [CRASH], mem, settings)
    assert stop.action is Action.STOP
    assert stop.rail is Rail.HOURLY_LIMIT
    assert stop.notify == ("notify-send", "--job")
    assert "max_recoveries_per_hour 3" in stop.reason
    assert stop.memory.paused is not None and stop.memory.paused.since_s == T0 + 1800
    assert stop.memory.running is None
    # then skip, paused, even long after the hour has passed
    for at in (T0 + 1830, T0 + 3 * RECOVERY_WINDOW_S):
        d = decide(JOB, at, [CRASH], stop.memory, settings)
        assert d.action is Action.SKIP
        assert d.rail is Rail.PAUSED
        assert d.notify == ()
        assert "resume" in d.reason
    # healthy while paused: none, still paused
    d = decide(JOB, T0 + 1900, [], stop.memory, settings)
    assert d.action is Action.NONE and d.memory.paused is not None
    # a person resumes: the watcher acts again
    d = decide(JOB, T0 + 1900, [CRASH], stop.memory, settings, resume=True)
    assert d.action is Action.RUN
    assert d.memory.paused is None
    assert d.memory.recoveries_s == (T0 + 1900,)
    assert "resumed" in d.reason


def test_recoveries_leave_the_sliding_hour() -> None:
    settings = WatchSettings(cooldown_s=0, max_recoveries_per_hour=3)
    mem = WatchMemory()
    for k in range(3):
        mem = _recover(mem, T0 + k * 100, settings)
    # one second before the first recovery leaves the window: stop; at the edge: run
    d = decide(JOB, T0 + RECOVERY_WINDOW_S - 1, [CRASH], mem, settings, advise=True)
    assert d.action is Action.ADVISE and d.rail is Rail.HOURLY_LIMIT
    d = decide(JOB, T0 + RECOVERY_WINDOW_S, [CRASH], mem, settings)
    assert d.action is Action.RUN
    assert d.memory.recoveries_s == (T0 + 100, T0 + 200, T0 + RECOVERY_WINDOW_S)


def test_resume_while_not_paused_changes_nothing() -> None:
    d = decide(JOB, T0, [HANG], WatchMemory(), DEFAULT, resume=True)
    assert d.action is Action.RUN
    assert "not paused" in d.reason


# ------------------------------------------------------------------------------------------- advise


def test_advise_is_the_same_decision_and_starts_nothing() -> None:
    acting = decide(JOB, T0, [HANG], WatchMemory(), DEFAULT)
    d = decide(JOB, T0, [HANG], WatchMemory(), DEFAULT, advise=True)
    assert d.action is Action.ADVISE
    assert (d.playbook, d.params, d.signal, d.evidence) == (
        acting.playbook,
        acting.params,
        acting.signal,
        acting.evidence,
    )
    assert "would run hang (job=llm)" in d.reason
    mem = d.memory
    assert mem.running is None and mem.recoveries_s == () and mem.cooldown_until_s is None
    assert mem.incident is not None and not mem.incident.handled
    # advised again on the next evaluation, same incident
    d2 = decide(JOB, T0 + 30, [HANG], mem, DEFAULT, advise=True)
    assert d2.action is Action.ADVISE and d2.incident == d.incident


def test_advise_at_the_hourly_limit_would_stop_but_does_not_pause() -> None:
    settings = WatchSettings(cooldown_s=0, max_recoveries_per_hour=1, notify=["page"])
    mem = _recover(WatchMemory(), T0, settings)
    d = decide(JOB, T0 + 60, [HANG], mem, settings, advise=True)
    assert d.action is Action.ADVISE
    assert d.rail is Rail.HOURLY_LIMIT
    assert d.reason.startswith("would stop")
    assert d.memory.paused is None and d.notify == ()


def test_advise_still_obeys_the_rails() -> None:
    d = decide(JOB, T0, [HANG], WatchMemory(), DEFAULT)
    d2 = decide(JOB, T0 + 30, [CRASH], d.memory, DEFAULT, advise=True)
    assert d2.action is Action.SKIP and d2.rail is Rail.RUNNING


# ------------------------------------------------------------------------------------- JSON, inputs


def test_to_json_is_a_strict_watch_decision_document() -> None:
    d = decide(JOB, T0, [NAN, UNKNOWN], WatchMemory(), DEFAULT)
    doc = d.to_json()
    text = json.dumps(doc, allow_nan=False)
    back = json.loads(text)
    assert back["kind"] == "watch-decision"
    assert back["schema_version"] == 1
    assert back["action"] == "run"
    assert back["playbook"] == "nan-loss"
    assert back["params"] == {"job": JOB}
    assert back["evidence"][0]["values"]["loss"] == "nan"
    assert back["also_seen"][0]["signal"] == "unknown"
    assert back["memory"]["running"]["playbook"] == "nan-loss"
    assert back["memory"]["incident"]["class"] == "nan-loss"


def test_evidence_is_bounded() -> None:
    many = [Verdict(SignalClass.CRASH, "log.oom", (("rank", i),), f"rank {i} OOM") for i in range(40)]
    d = decide(JOB, T0, many, WatchMemory(), DEFAULT)
    assert len(d.evidence) == 16
    assert d.left_out == 24


def test_clock_stepped_back_is_taken_as_the_last_evaluation() -> None:
    mem = start_and_end(HANG, T0, T0 + 100)
    d = decide(JOB, T0 + 100 - 5000, [CRASH], mem, DEFAULT)
    assert d.at_s == T0 + 100
    assert d.action is Action.SKIP


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_times_are_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        decide(JOB, bad, [], WatchMemory(), DEFAULT)
    with pytest.raises(ValueError, match="run_ended_s"):
        decide(JOB, T0, [], WatchMemory(), DEFAULT, run_ended_s=bad)
    with pytest.raises(ValueError, match="newest_step_s"):
        decide(JOB, T0, [], WatchMemory(), DEFAULT, newest_step_s=bad)


def test_bad_job_or_verdict_is_refused() -> None:
    with pytest.raises(ValueError, match="job"):
        decide("", T0, [], WatchMemory(), DEFAULT)
    with pytest.raises(ValueError, match="Verdict"):
        decide(JOB, T0, ["hang"], WatchMemory(), DEFAULT)  # type: ignore[list-item]


def test_with_run_id_needs_a_run() -> None:
    with pytest.raises(ValueError, match="no playbook run"):
        WatchMemory().with_run_id(1)


def test_decision_is_frozen() -> None:
    d = decide(JOB, T0, [], WatchMemory(), DEFAULT)
    assert isinstance(d, Decision)
    with pytest.raises(AttributeError):
        d.action = Action.RUN  # type: ignore[misc]
