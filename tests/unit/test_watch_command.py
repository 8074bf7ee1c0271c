"""``robustctl watch --once`` and ``--history`` (issue 22 §1, §3) on the heartbeat job, local transport.

A hang is made by stopping the ranks (SIGSTOP, alive) and writing their heartbeats 60 s in the past,
so a 10 s ``watch.stall_after_s`` sees a stall without waiting for it. The recovery is an inventory
playbook named ``hang`` (it overrides the shipped one) whose one step is a harmless ``notify`` that
writes a marker file: the test needs no real recovery.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from robustctl import watchstore
from robustctl.cli.main import main
from robustctl.commands.watch import (
    WatchHistoryRequest,
    WatchRequest,
    incident_phases,
    run_watch_history,
    run_watch_loop,
    run_watch_once,
)
from robustctl.errors import UsageError
from robustctl.inventory import load_inventory
from robustctl.playbooks import journal
from robustctl.store import Store
from robustctl.watch import signals
from robustctl.watch.decide import OpenIncident, RunInProgress, WatchMemory
from robustctl.watch.rules import SignalClass
from robustctl.watchstore import WatchBusy
from tests.unit.test_restart import Job as BedJob
from tests.unit.test_watch_signals import POLL_S, start

PLAYBOOK = """\
name: hang
description: test recovery that only writes a marker
params:
  job: {required: true, description: the job}
steps:
  - id: mark
    kind: notify
    args: {command: [%(py)s, -c, "import sys; open(sys.argv[1], 'a').write('ran\\\\n')", %(marker)s]}
"""


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[BedJob]:
    j = BedJob(tmp_path)
    yield j
    for p in j.processes():
        try:
            os.kill(p.pid, signal.SIGCONT)
        except OSError:
            pass
    j.kill_all()


def configure(bed: BedJob, **watch: Any) -> Path:
    """Add ``watch:`` and the marker playbook to the bed's inventory; the marker file's path."""
    marker = bed.tmp / "marker.txt"
    pb = bed.tmp / "hang.yaml"
    pb.write_text(PLAYBOOK % {"py": json.dumps(sys.executable), "marker": json.dumps(str(marker))})
    data = yaml.safe_load(bed.inventory.read_text())
    data["playbooks"] = [str(pb)]
    data["watch"] = {"stall_after_s": 10, **watch}
    bed.inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    return marker


def stall(bed: BedJob, age_s: float = 60.0) -> None:
    """Stop every rank (alive, no new step) and write its heartbeat ``age_s`` in the past."""
    deadline = time.monotonic() + 20
    while len(list(bed.beats.glob("*.json"))) < 4 and time.monotonic() < deadline:
        time.sleep(POLL_S)
    for p in bed.processes():
        os.kill(p.pid, signal.SIGSTOP)
    for f in bed.beats.glob("*.json"):
        doc = json.loads(f.read_text())
        doc["time"] = time.time() - age_s
        f.write_text(json.dumps(doc))


def once(bed: BedJob, **kw: Any) -> Any:
    inv = load_inventory(bed.inventory, environ={})
    return run_watch_once(WatchRequest(inventory=inv, job="hb", state=bed.state, **kw))


def test_a_stalled_job_is_advised_then_recovered_once_and_listed(
    bed: BedJob, capsys: pytest.CaptureFixture[str]
) -> None:
    start(bed)
    marker = configure(bed)
    stall(bed)
    # --advise through the CLI: the hang decision with its evidence, exit 2, nothing run
    rc = main(
        [
            "watch",
            "-i",
            str(bed.inventory),
            "--state",
            str(bed.state),
            "--job",
            "hb",
            "--once",
            "--advise",
            "--json",
        ]
    )
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert rc == 2 and doc["kind"] == "watch" and doc["schema_version"] == 1
    d = doc["decision"]
    assert (d["action"], d["signal"], d["playbook"], d["params"]) == ("advise", "hang", "hang", {"job": "hb"})
    assert d["evidence"][0]["rule"] == "hang.stall" and d["evidence"][0]["values"]["stall_after_s"] == 10
    assert "watch hb: advise hang -> hang (job=hb)" in out.err and "hang.stall" in out.err
    assert not marker.exists()
    # the run: the playbook ran once, its run id on the event and the incident
    ran = once(bed)
    assert ran.action == "run" and ran.exit_code == 2 and ran.playbook_run["status"] == "done"
    assert marker.read_text() == "ran\n"
    # still stalled: the same incident is not recovered twice
    again = once(bed)
    assert again.action == "skip" and again.decision["rail"] == "same-incident" and again.exit_code == 1
    assert marker.read_text() == "ran\n"
    with Store.open(bed.state) as store:
        evs = watchstore.events(store, "hb")
        inc = watchstore.current_incident(store, "hb")
        mem = WatchMemory.from_json((watchstore.get_state(store, "hb") or {})["memory"])
    assert [e.action.value for e in evs] == ["advise", "run", "skip"]
    assert evs[1].playbook_run_id == ran.playbook_run["run_id"] and evs[1].rule == "hang.stall"
    assert (
        inc is not None and inc.incident_class == "hang" and inc.playbook_run_id == ran.playbook_run["run_id"]
    )
    assert mem.running is None and mem.incident is not None and mem.incident.handled
    hist = run_watch_history(WatchHistoryRequest(job="hb", state=bed.state))
    assert [e.id for e in hist.events] == [e.id for e in evs]
    rc = main(["watch", "--history", "--job", "hb", "--state", str(bed.state), "--json"])
    listed = json.loads(capsys.readouterr().out)
    assert rc == 0 and [e["action"] for e in listed["events"]] == ["advise", "run", "skip"]


def test_a_second_watcher_exits_3_naming_the_holder(bed: BedJob, capsys: pytest.CaptureFixture[str]) -> None:
    start(bed)
    configure(bed)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from pathlib import Path; from robustctl.watchstore import watch_lock\n"
         "with watch_lock(Path(sys.argv[1]), 'hb'):\n print('held', flush=True); sys.stdin.read()",
         str(bed.state)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        rc = main(
            ["watch", "-i", str(bed.inventory), "--state", str(bed.state), "--job", "hb", "--once", "--yes"]
        )
        err = capsys.readouterr().err
        assert rc == 3 and str(holder.pid) in err and "another watcher" in err
    finally:
        holder.communicate("", timeout=20)


def test_bad_input_is_a_one_line_usage_or_config_error(
    bed: BedJob, capsys: pytest.CaptureFixture[str]
) -> None:
    bed.write()
    inv = str(bed.inventory)
    assert main(["watch", "-i", inv, "--state", str(bed.state), "--job", "nope", "--once", "--yes"]) == 64
    assert "nope" in capsys.readouterr().err
    assert main(["watch", "-i", inv, "--job", "nope", "--yes"]) == 64  # the loop refuses an unknown job too
    assert "nope" in capsys.readouterr().err
    assert main(["watch", "--history", "--once", "--job", "hb"]) == 64
    capsys.readouterr()
    # acting needs consent: neither --yes nor --advise (or both) is a usage error naming them
    for flags in ([], ["--advise", "--yes"]):
        assert main(["watch", "-i", inv, "--state", str(bed.state), "--job", "hb", "--once", *flags]) == 64
        err = capsys.readouterr().err
        assert "--yes" in err and "--advise" in err and len(err.strip().splitlines()) == 1, err
    bad = bed.tmp / "bad.yaml"
    bad.write_text(bed.inventory.read_text() + "watch:\n  stall_after_s: 1\n")
    assert main(["watch", "-i", str(bad), "--state", str(bed.state), "--job", "hb", "--once", "--yes"]) == 78
    err = capsys.readouterr().err
    assert "stall_after_s" in err and "Traceback" not in err
    with pytest.raises(UsageError):
        run_watch_once(
            WatchRequest(inventory=load_inventory(bed.inventory, environ={}), job="nope", state=bed.state)
        )


# ---- the loop -----------------------------------------------------------------------------------


def fake_reading(
    *, step: int = 5, newest_age_s: float = 1.0, state: signals.Liveness = signals.Liveness.ALIVE
) -> Any:
    """A reader (run_watch_once's ``reader``) giving job hb healthy at ``step``, its newest step
    ``newest_age_s`` old, its ranks in liveness ``state``."""

    class Progress(signals.ProgressSignal):
        @property
        def step(self) -> int | None:
            return step

    class Reading(signals.JobReading):
        @property
        def newest_step_time(self) -> float | None:
            return self.read_at - newest_age_s

    def read(job: Any, pool: Any, **kw: Any) -> Any:
        return Reading(
            job="hb",
            backend="inventory",
            hosts=tuple(h.name for h in job.hosts),
            read_at=kw["clock"](),
            progress=Progress(None),
            liveness=signals.LivenessSignal("inventory", state, 4, 4),
            logs=signals.LogSignal(),
            findings=signals.FindingsSignal(),
        )

    return read


def loop_request(bed: BedJob) -> WatchRequest:
    return WatchRequest(inventory=load_inventory(bed.inventory, environ={}), job="hb", state=bed.state)


def test_the_loop_evaluates_every_interval_until_the_job_ends_holding_the_lock(bed: BedJob) -> None:
    bed.write()
    configure(bed, interval_s=7)
    sleeps: list[float] = []
    seen: list[str] = []
    readers = [fake_reading(step=5), fake_reading(step=6), fake_reading(step=6, state=signals.Liveness.ENDED)]

    def reader(*a: Any, **kw: Any) -> Any:
        return readers[len(seen)](*a, **kw)

    def on_result(r: Any) -> None:
        seen.append(r.action)
        with pytest.raises(WatchBusy):  # the loop holds the job's watch lock between evaluations too
            run_watch_once(loop_request(bed), reader=reader)

    out = run_watch_loop(loop_request(bed), sleep=sleeps.append, reader=reader, on_result=on_result)
    assert (out.reason, out.evaluations, out.exit_code) == ("job-ended", 3, 0)
    assert sleeps == [7.0, 7.0] and seen == ["none", "none", "none"]
    assert out.last is not None and out.last.job_ended
    with Store.open(bed.state) as store:  # one progress sample per new step seen
        assert [p.step for p in watchstore.progress_samples(store, "hb")] == [5, 6]


def test_the_loop_stops_on_its_stop_event_and_the_cli_prints_json_lines(
    bed: BedJob, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    bed.write()
    configure(bed, interval_s=3)
    stop = threading.Event()
    sleeps: list[float] = []
    count = [0]

    def on_result(r: Any) -> None:
        count[0] += 1
        if count[0] == 2:
            stop.set()

    out = run_watch_loop(
        loop_request(bed), sleep=sleeps.append, stop_event=stop, reader=fake_reading(), on_result=on_result
    )
    assert (out.reason, out.evaluations, sleeps) == ("stopped", 2, [3.0])
    # the CLI: the job ends at the second evaluation; one JSON line per evaluation, then the loop's
    calls = [fake_reading(step=7), fake_reading(state=signals.Liveness.ENDED)]
    monkeypatch.setattr(signals, "read_job", lambda *a, **kw: calls.pop(0)(*a, **kw))
    monkeypatch.setattr(
        "robustctl.commands.watch.threading.Event.wait", lambda self, timeout=None: self.is_set()
    )
    rc = main(
        ["watch", "-i", str(bed.inventory), "--state", str(bed.state), "--job", "hb", "--json", "--yes"]
    )
    got = capsys.readouterr()
    lines = [json.loads(x) for x in got.out.splitlines()]
    assert rc == 0 and [d["kind"] for d in lines] == ["watch", "watch", "watch-loop"]
    assert all(d["schema_version"] == 1 for d in lines) and lines[1]["job_ended"] is True
    assert lines[2]["reason"] == "job-ended" and "the job ended" in got.err


# ---- resume after SIGKILL -----------------------------------------------------------------------

TWO_STEPS = """\
name: hang
description: test recovery whose second step waits for a go file
params:
  job: {required: true, description: the job}
steps:
  - id: first
    kind: notify
    args: {command: [%(py)s, -c, "import sys; open(sys.argv[1], 'a').write('a\\\\n')", %(marker)s]}
  - id: second
    kind: notify
    args:
      command:
        - %(py)s
        - -c
        - "import os, sys, time\\nopen(sys.argv[1], 'a').write('b\\\\n')\\nend = time.monotonic() + 60\\nwhile not os.path.exists(sys.argv[2]) and time.monotonic() < end: time.sleep(0.05)"
        - %(marker)s
        - %(go)s
"""


def test_a_watcher_killed_mid_playbook_is_resumed_not_repeated(bed: BedJob) -> None:
    start(bed)
    marker = configure(bed)
    go = bed.tmp / "go"
    (bed.tmp / "hang.yaml").write_text(
        TWO_STEPS
        % {"py": json.dumps(sys.executable), "marker": json.dumps(str(marker)), "go": json.dumps(str(go))}
    )
    stall(bed)
    argv = [sys.executable, "-m", "robustctl", "watch", "-i", str(bed.inventory), "--state", str(bed.state)]
    log = bed.tmp / "watcher.err"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [*argv, "--job", "hb", "--once", "--yes"], stdout=subprocess.DEVNULL, stderr=err
        )
    try:
        deadline = time.monotonic() + 60
        run: Any = None
        while time.monotonic() < deadline:
            if bed.state.exists():
                with Store.open(bed.state) as store:
                    found = journal.runs(store, job="hb")
                    run = journal.run_record(store, found[0].id) if found else None
                if run is not None and any(x.step == "second" and x.status == "running" for x in run.steps):
                    break
            if proc.poll() is not None:
                with Store.open(bed.state) as store:
                    pytest.fail(
                        f"the watcher ended before its second step ran: {journal.runs(store, job='hb')}"
                    )
            time.sleep(POLL_S)
        else:
            pytest.fail("the journal never showed the second step running")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)
    finally:
        go.write_text("go")  # lets the orphaned step's command end
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=20)
    again = once(bed)
    assert (
        again.resumed is not None and again.resumed["run_id"] == run.id and again.resumed["status"] == "done"
    )
    assert again.action == "skip" and again.decision["rail"] == "same-incident"  # no second recovery
    with Store.open(bed.state) as store:
        runs = journal.runs(store, job="hb")
        rec = journal.run_record(store, run.id)
        evs = watchstore.events(store, "hb")
        inc = watchstore.current_incident(store, "hb")
    assert [r.id for r in runs] == [run.id] and runs[0].status == "done"
    assert rec is not None  # the finished step did not run again; the one killed ran once more
    assert [(x.step, x.status) for x in rec.steps] == [
        ("first", "done"),
        ("second", "interrupted"),
        ("second", "done"),
    ]
    assert marker.read_text().count("a\n") == 1
    assert [e.action.value for e in evs] == ["run", "run", "skip"]
    assert evs[1].rule == "watch.resume" and "resumed playbook run" in evs[1].reason
    assert evs[1].playbook_run_id == run.id and evs[1].evidence["dead_pid"] == proc.pid
    assert inc is not None and inc.playbook_run_id == run.id


# ---- incident phases ----------------------------------------------------------------------------


def _seed_run(store: Store, clock: list[float]) -> int:
    """A finished recovery run of hb in the journal: stacks 110-120, evict 120-125 (node2 applied),
    standby 125-130, restart 130-140 (checkpoint 40, last step 57), each time taken from ``clock``."""
    rid = journal.begin_run(store, "hang", "shipped", "name: hang", "hb", {"job": "hb"})
    for kind, t0, t1, result in (
        ("stacks", 110.0, 120.0, {"kind": "stacks"}),
        ("evict", 120.0, 125.0, {"kind": "apply", "status": "applied", "plan": {"targets": ["node2"]}}),
        (
            "standby-activate",
            125.0,
            130.0,
            {"kind": "apply", "status": "applied", "plan": {"targets": ["s1"]}},
        ),
        (
            "restart",
            130.0,
            140.0,
            {"kind": "apply", "status": "applied", "checkpoint_step": 40, "last_step": 57},
        ),
    ):
        clock[0] = t0
        seq = journal.step_start(store, rid, kind, kind, 1)
        clock[0] = t1
        journal.step_end(store, rid, seq, "done", exit_code=0, result=result)
    journal.step_skipped(store, rid, "diagnose", "diagnose", "when: false")
    clock[0] = 141.0
    journal.finish_run(store, rid, "done", "reached the end")
    return rid


def test_incident_phases_come_from_the_recovery_runs_journal(bed: BedJob) -> None:
    bed.write()
    configure(bed)
    clock = [100.0]
    with Store.open(bed.state, clock=lambda: clock[0]) as store:
        rid = _seed_run(store, clock)
        run = journal.run_record(store, rid)
        inc = watchstore.open_incident(store, "hb", incident_class="hang", onset_at=90.0, opened_at=105.0)
        watchstore.update_incident(store, inc.id, decision_at=105.0, playbook="hang", playbook_run_id=rid)
        memory = WatchMemory(
            recoveries_s=(105.0,),
            running=RunInProgress("hang", "hb-1", 105.0, rid),
            incident=OpenIncident("hb-1", SignalClass.HANG, 100.0, "hang", 105.0),
            incidents_opened=1,
        )
        doc = {
            "version": 1,
            "memory": memory.to_json(),
            "fail_slow": {},
            "last_step": 57,
            "incident_id": inc.id,
        }
        from robustctl.watch.rules import FailSlowState

        doc["fail_slow"] = FailSlowState().to_json()
        watchstore.put_state(store, "hb", doc, at=105.0)
    assert run is not None
    phases = incident_phases(run)
    assert phases == {
        "localization_start_at": 110.0,
        "localization_end_at": 120.0,
        "eviction_start_at": 120.0,
        "eviction_end_at": 130.0,
        "restart_start_at": 130.0,
        "machines_evicted": ("node2",),
        "checkpoint_step": 40,
        "last_step": 57,
    }
    # an evaluation after the run: the phases filled, the first new step (155) after the run's end
    # (141) from the reading; the incident closes on that new step
    now = [160.0]
    out = run_watch_once(
        loop_request(bed), clock=lambda: now[0], reader=fake_reading(step=60, newest_age_s=5)
    )
    assert out.action == "none", (out.decision["rail"], out.decision["reason"], out.verdicts)
    with Store.open(bed.state) as store:
        got = next(i for i in watchstore.incidents(store, "hb") if i.id == inc.id)
    assert (got.localization_start_at, got.localization_end_at) == (110.0, 120.0)
    assert (got.eviction_start_at, got.eviction_end_at, got.restart_start_at) == (120.0, 130.0, 130.0)
    assert got.machines_evicted == ("node2",) and (got.checkpoint_step, got.last_step) == (40, 57)
    assert got.first_new_step_at == 155.0 and got.closed_at == 160.0


def test_a_run_whose_process_still_holds_the_job_lock_is_not_resumed(bed: BedJob) -> None:
    bed.write()
    configure(bed)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from pathlib import Path; from robustctl.store import Store\n"
         "from robustctl.playbooks import journal\n"
         "with Store.open(Path(sys.argv[1])) as s, journal.job_lock(s, 'hb'):\n"
         " print(journal.begin_run(s, 'hang', 'shipped', 'name: hang', 'hb', {'job': 'hb'}), flush=True)\n"
         " sys.stdin.read()",
         str(bed.state)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None
    rid = int(holder.stdout.readline())  # a run begun by another process, which runs it still
    with Store.open(bed.state) as store:
        memory = WatchMemory(
            recoveries_s=(time.time() - 5,),
            running=RunInProgress("hang", "hb-1", time.time() - 5, rid),
            incident=OpenIncident("hb-1", SignalClass.HANG, time.time() - 9, "hang", time.time() - 5),
            incidents_opened=1,
        )
        from robustctl.watch.rules import FailSlowState

        doc = {
            "version": 1,
            "memory": memory.to_json(),
            "fail_slow": FailSlowState().to_json(),
            "last_step": None,
            "incident_id": None,
        }
        watchstore.put_state(store, "hb", doc, at=time.time())
    try:
        out = run_watch_once(loop_request(bed), reader=fake_reading(newest_age_s=60))
    finally:
        holder.communicate("", timeout=20)
    assert out.resumed is None and out.action == "skip" and out.decision["rail"] == "running"
    with Store.open(bed.state) as store:
        rec = journal.run_record(store, rid)
        assert rec is not None and rec.status == "running"
        assert all(e.rule != "watch.resume" for e in watchstore.events(store, "hb"))


EVICTING = """\
name: hang
description: test recovery with a destructive step
params:
  job: {required: true, description: the job}
steps:
  - id: out
    kind: evict
    args: {hosts: n1, reason: watch test}
"""


def test_a_refused_recovery_is_not_counted_as_one(bed: BedJob) -> None:
    """A playbook with a destructive step and nobody to confirm (no --yes, no policy) is refused
    before anything runs: recorded as refused, no cool-down, not counted in the hour, the incident
    unhandled, so the next evaluation decides to run again."""
    start(bed)
    configure(bed, cooldown_s=600)
    (bed.tmp / "hang.yaml").write_text(EVICTING)
    stall(bed)
    first = once(bed)
    assert first.action == "run" and first.playbook_run["status"] == "refused", first.playbook_run
    assert "--yes" in first.playbook_run["message"]
    with Store.open(bed.state) as store:
        mem = WatchMemory.from_json((watchstore.get_state(store, "hb") or {})["memory"])
        assert store.machine("n1") is None or store.machine("n1").state.value == "active"
    assert mem.running is None and mem.recoveries_s == () and mem.cooldown_until_s is None
    assert mem.incident is not None and not mem.incident.handled
    second = once(bed)
    assert second.action == "run" and second.playbook_run["status"] == "refused"
    with Store.open(bed.state) as store:
        assert [e.action.value for e in watchstore.events(store, "hb")] == ["run", "run"]
        assert len({e.incident_id for e in watchstore.events(store, "hb")}) == 1


@pytest.mark.parametrize("cured", [True, False])
def test_after_a_fail_slow_recovery_the_job_is_judged_by_its_healthy_pace(bed: BedJob, cured: bool) -> None:
    """A fail-slow episode is recovered. Cured (the restart's slow warm-up step, then the healthy
    pace): no second incident, although the old episode's window would declare the slowdown again
    the moment the first incident closed. Not cured (still 4x slower): a second incident, because the
    job is judged by its pace before the episode, not by the slow pace as a new normal."""
    bed.write()
    marker = configure(bed, cooldown_s=0, persist_steps=5, playbooks={"fail-slow": "hang"})
    t0 = time.time() - 1000
    now = [t0]
    feed: list[tuple[int, float]] = []  # (step, step time) the next reading shows

    class Progress(signals.ProgressSignal):
        @property
        def step(self) -> int | None:
            return max((s.step for s in self.samples), default=None)

    class Reading(signals.JobReading):
        @property
        def newest_step_time(self) -> float | None:
            return max((s.at for s in self.progress.samples if s.at is not None), default=None)

    def read(job: Any, pool: Any, **kw: Any) -> Any:
        samples = tuple(signals.StepSample(step, at=now[0] - 0.01 * (len(feed) - i), step_time_s=st)
                        for i, (step, st) in enumerate(feed))  # fmt: skip
        return Reading(
            job="hb", backend="inventory", hosts=tuple(h.name for h in job.hosts), read_at=kw["clock"](),
            progress=Progress(None, samples=samples), liveness=signals.LivenessSignal("inventory",
            signals.Liveness.ALIVE, 4, 4), logs=signals.LogSignal(), findings=signals.FindingsSignal(),
        )  # fmt: skip

    step = [0]

    def evaluate(*step_times: float) -> Any:
        feed[:] = []
        for t in step_times:
            step[0] += 1
            feed.append((step[0], t))
        now[0] += 2.0
        return run_watch_once(loop_request(bed), clock=lambda: now[0], reader=read)

    results = [evaluate(0.2) for _ in range(40)]
    for _ in range(30):
        results.append(evaluate(0.8))
        if results[-1].action == "run":
            break
    assert [r.action for r in results if r.action != "none"] == ["run"], [r.decision for r in results]
    assert results[-1].decision["signal"] == "fail-slow" and marker.read_text() == "ran\n"
    # the first reading after the recovery still shows the old processes' last slow steps (made
    # while the playbook ran) and the restart's warm-up step, numbered after them
    later = [evaluate(0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 3.0)]
    later += [evaluate(0.2 if cured else 0.8) for _ in range(14)]
    with Store.open(bed.state) as store:
        incs = [(i.incident_class, i.closed_at is not None) for i in watchstore.incidents(store, "hb")]
    if cured:
        assert [r.action for r in later if r.action != "none"] == [], [r.decision for r in later]
        assert incs == [("fail-slow", True)]
    else:
        acted = [r.action for r in later if r.action != "none"]
        assert acted[:1] == ["run"], [r.decision for r in later]  # then again, up to the hourly limit
        assert len(incs) >= 2 and {c for c, _ in incs} == {"fail-slow"} and incs[0][1], incs


def test_the_checkpoint_a_restart_loaded_is_read_from_its_apply_document() -> None:
    """A restart's apply document names the iteration only in its ``pick_checkpoint`` step's
    result (``iteration N: why``, written by the restart runner): the incident's checkpoint step."""
    from robustctl.actions.restart import PICKED_PREFIX, picked_iteration

    def doc(detail: str, kind: str = "pick_checkpoint") -> dict[str, Any]:
        steps = [{"kind": "stop_job"}, {"kind": kind}, {"kind": "launch"}]
        results = [
            {"index": i, "status": "done", "detail": d} for i, d in enumerate(["stopped", detail, "up"])
        ]
        return {"kind": "apply", "status": "applied", "plan": {"steps": steps}, "results": results}

    picked = doc(f"{PICKED_PREFIX}6: tracker says 3 (complete): using 6 (newest complete)")
    assert picked_iteration(picked) == 6
    assert picked_iteration(doc("no checkpoint: --from-checkpoint none")) is None
    assert picked_iteration(doc("iteration 6: x", kind="launch")) is None
    assert picked_iteration(doc("iteration 99999999999999999999: x")) is None
    assert picked_iteration({"plan": "x", "results": []}) is None and picked_iteration(None) is None

    from types import SimpleNamespace

    step = SimpleNamespace(kind="restart", result=picked, status="done", started_at=10.0, finished_at=20.0)
    assert incident_phases(SimpleNamespace(steps=[step]))["checkpoint_step"] == 6  # type: ignore[arg-type]
