"""The playbook engine with real library calls: diagnose on the embedded default (this machine), evict
and standby activation on the inventory back end with a temporary store, notify through a real command;
branching, retries, on_failure, timeouts, the confirmation rule, one run per job, and the journal's
resume contract with a real SIGKILL of a child process between two destructive steps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from robustctl.actions.plan import STEP_SLEEP_ENV
from robustctl.actions.session import always
from robustctl.cli.main import main
from robustctl.commands.playbook import (
    PlaybookResumeRequest,
    PlaybookRunRequest,
    run_playbook_resume,
    run_playbook_run,
)
from robustctl.errors import ActionRefused, UsageError
from robustctl.playbooks import engine, journal
from robustctl.playbooks.engine import PLAYBOOK_STEP_SLEEP_ENV, RunOutcome
from robustctl.playbooks.kinds import KINDS, StepArgs, StepError, StepKind
from robustctl.store import SCHEMA_VERSION, MachineState, Readiness, Store
from tests.support.oldstore import migration_version, store_before

INVENTORY = """\
gpus_per_host: 2
hosts:
  - name: node[01-04]
    address: 127.0.0.[2-5]
  - name: spare1
    address: 127.0.0.10
    state: standby
jobs:
  small:
    hosts: node[01-04]
    layout: {tp: 2, pp: 2, dp: 2}
policy: {max_cluster_fraction: 1.0, max_job_fraction: 1.0, circuit_breaker_fraction: 1.0}
"""

TWO_EVICTIONS = """\
name: two-evictions
params:
  job: {required: true}
steps:
  - id: first
    kind: evict
    args: {hosts: node01}
  - id: second
    kind: evict
    when: steps.first.step.status == "done" and "node01" in steps.first.targets
    args: {hosts_from: '["node02"]'}
"""


@pytest.fixture
def box(tmp_path: Path) -> Path:
    (tmp_path / "inv.yaml").write_text(INVENTORY)
    return tmp_path


def write(box: Path, text: str, name: str = "pb.yaml") -> Path:
    p = box / name
    p.write_text(textwrap.dedent(text))
    return p


def run(box: Path, pb: Path | str, params: dict[str, str] | None = None, **kw: Any) -> Any:
    req = PlaybookRunRequest(
        name=str(pb),
        params={"job": "small"} if params is None else params,
        inventory=box / "inv.yaml",
        state=box / "state.db",
    )
    return run_playbook_run(req, **kw)


def audits(box: Path, action: str = "evict") -> list[Any]:
    with Store.open(box / "state.db") as s:
        return [a for a in s.audit() if a.action == action]


def test_a_store_of_the_previous_schema_gains_the_journal(tmp_path: Path) -> None:
    """A store written before the journal existed is migrated forward on open, its rows kept."""

    mine = migration_version("playbook runs")
    path = tmp_path / "old.db"
    conn = store_before(path, mine)
    conn.execute("INSERT INTO machines VALUES ('node01', 'evicted', 'unchecked', 'old', 0)")
    conn.commit()
    conn.close()
    with Store.open(path) as s:
        assert s.schema_version == SCHEMA_VERSION and s.machine("node01") is not None
        run_id = journal.begin_run(s, "x", "x.yaml", "name: x", "job", {"job": "job"})
        assert journal.run_record(s, run_id).status == "running"  # type: ignore[union-attr]


def test_branching_on_a_real_diagnose_of_this_machine(box: Path) -> None:
    out = box / "notified.json"
    pb = write(
        box,
        f"""\
        name: local-check
        steps:
          - id: diag
            kind: diagnose
            args: {{level: 0, hosts: localhost, record: false}}
            on_failure: continue
          - id: found
            kind: notify
            when: steps.diag.exit_code == 2 and len(steps.diag.suspects) > 0
            args: {{command: ["{sys.executable}", "-c", "import sys; open(sys.argv[1], 'w').write('found')", "{out}"]}}
            next: end
          - id: healthy
            kind: notify
            args:
              command: ["{sys.executable}", "-c", "import sys, shutil; shutil.copyfileobj(sys.stdin, open(sys.argv[1], 'w'))", "{out}"]
        """,
    )
    box.joinpath("inv.yaml").unlink()  # the embedded default: this machine through the local transport
    res = run_playbook_run(PlaybookRunRequest(name=str(pb), state=box / "state.db"))
    assert isinstance(res, RunOutcome) and res.status == "done", res
    diag = res.steps[0]
    assert diag.step == "diag" and diag.result is not None and diag.result["kind"] == "diagnose"
    if diag.exit_code == 2:
        assert [s.step for s in res.steps] == ["diag", "found"] and out.read_text() == "found"
    else:
        assert [(s.step, s.status) for s in res.steps] == [
            ("diag", "done"),
            ("found", "skipped"),
            ("healthy", "done"),
        ]
        doc = json.loads(out.read_text())  # the run as JSON on the notifier's stdin
        assert doc["playbook"] == "local-check" and doc["steps"]["diag"]["kind"] == "diagnose"
        assert doc["steps"]["found"]["step"]["status"] == "skipped"
    with Store.open(box / "state.db") as s:
        rec = journal.run_record(s, res.run_id)
    assert rec is not None and rec.status == "done"
    assert [st.status for st in rec.steps] == [st.status for st in res.steps]


def test_evictions_on_the_inventory_back_end_are_audited_and_journaled(box: Path) -> None:
    res = run(box, write(box, TWO_EVICTIONS), confirm=always)
    assert res.status == "done" and [s.status for s in res.steps] == ["done", "done"]
    assert [a.targets for a in audits(box)] == [("node01",), ("node02",)]
    assert res.steps[1].result["targets"] == ["node02"] and res.steps[1].result["outcome"] == "applied"
    with Store.open(box / "state.db") as s:
        rec = journal.run_record(s, res.run_id)
        assert s.machine("node01").state.value == "evicted"  # type: ignore[union-attr]
    assert rec is not None and [(st.step, st.status, st.exit_code) for st in rec.steps] == [
        ("first", "done", 0),
        ("second", "done", 0),
    ]
    assert rec.steps[0].result is not None and rec.steps[0].result["kind"] == "apply"


def test_evict_then_standby_activation(box: Path) -> None:
    pb = write(
        box,
        """\
        name: swap
        params: {job: {required: true}}
        steps:
          - id: evict
            kind: evict
            args: {hosts: node03}
          - id: standby
            kind: standby-activate
            when: steps.evict.step.status == "done"
            args: {for_hosts_from: steps.evict.targets}
        """,
    )
    res = run(box, pb, confirm=always)
    assert res.status == "failed" and res.steps[1].exit_code == 2  # no ready standby: refused
    assert "ready-standby" in json.dumps(res.steps[1].result)
    with Store.open(box / "state.db") as s:
        s.set_state("spare1", MachineState.STANDBY, "checked", readiness=Readiness.READY)
    res = run(
        box, write(box, pb.read_text().replace("hosts: node03", "hosts: node04"), "pb2.yaml"), confirm=always
    )
    assert res.status == "done", res.message
    assert res.steps[1].result["hosts"] == ["node04"]
    with Store.open(box / "state.db") as s:
        assert s.job_hosts("small") == ["node01", "node02", "node03", "spare1"]


def test_destructive_steps_need_confirmation(box: Path) -> None:
    with pytest.raises(UsageError, match="pass --yes"):
        run(box, write(box, TWO_EVICTIONS))
    assert not audits(box)
    policy = TWO_EVICTIONS.replace("steps:", "policy: {apply_without_confirmation: true}\nsteps:", 1)
    assert run(box, write(box, policy)).status == "done"


def test_a_refused_action_fails_the_step_and_aborts(box: Path) -> None:
    (box / "inv.yaml").write_text(INVENTORY.replace("max_job_fraction: 1.0", "max_job_fraction: 0.1"))
    pb = write(box, TWO_EVICTIONS.replace("{hosts: node01}", "{hosts: node01, over_evict: pp}"))
    res = run(box, pb, confirm=always)  # the PP group is half the job: over max_job_fraction
    assert res.status == "failed" and res.steps[0].exit_code == 2 and int(res.exit_code) == 2
    assert [s.step for s in res.steps] == ["first"]
    assert [a.status for a in audits(box)] == ["refused"]


def test_retries_then_goto_and_missing_library_calls(box: Path) -> None:
    pb = write(
        box,
        """\
        name: ladder
        params: {job: {required: true}}
        steps:
          - id: flaky
            kind: notify
            args: {command: ["false"]}
            retries: 2
            on_failure: {goto: rollback}
          - id: never
            kind: notify
            args: {command: ["true"]}
          - id: rollback
            kind: restart
            on_failure: continue
          - id: after
            kind: notify
            when: steps.rollback.step.status == "failed" and steps.flaky.step.attempts == 3
            args: {command: ["true"]}
        """,
    )
    res = run(box, pb, confirm=always)
    assert [(s.step, s.status, s.attempts) for s in res.steps] == [
        ("flaky", "failed", 3),
        ("rollback", "failed", 1),
        ("after", "done", 1),
    ]
    assert "no launch: section" in res.steps[1].error, res.steps[1].error  # the real run_restart refused
    assert res.status == "done"


def test_a_step_past_its_timeout_fails(box: Path) -> None:
    pb = write(
        box,
        f"""\
        name: slow
        steps:
          - id: slow
            kind: notify
            timeout_s: 1
            args: {{command: ["{sys.executable}", "-c", "import time; time.sleep(30)"], timeout_s: 60}}
            on_failure: continue
        """,
    )
    res = run(box, pb, params={})
    assert res.steps[0].status == "failed" and "timed out" in res.steps[0].error


def test_a_step_that_does_not_stop_ends_the_run_and_stays_running(
    box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past its timeout the step's commands are stopped; a call that still does not return ends the run
    (never a second step beside a running one) and its journal row stays ``running`` for resume."""
    release = threading.Event()

    class Args(StepArgs):
        pass

    def block(req: Any, env: Any) -> Any:
        release.wait(30)
        raise StepError("released")

    monkeypatch.setitem(
        KINDS, "test-block", StepKind("test-block", Args, "blocks", lambda a, e: a, block, needs_job=False)
    )
    monkeypatch.setattr(engine, "STOP_GRACE_S", 0.1)
    pb = write(
        box,
        """\
        name: stuck
        steps:
          - id: stuck
            kind: test-block
            timeout_s: 0.2
            on_failure: continue
          - id: after
            kind: notify
            args: {command: ["true"]}
        """,
    )
    try:
        res = run(box, pb, params={})
    finally:
        release.set()
    assert res.status == "failed" and "did not stop" in res.message and res.steps == ()
    with Store.open(box / "state.db") as s:
        rec = journal.run_record(s, res.run_id)
    assert rec is not None and rec.status == "running" and steps_of(rec) == [("stuck", "running")]


def test_bad_parameters_are_usage_errors(box: Path) -> None:
    pb = write(box, TWO_EVICTIONS)
    with pytest.raises(UsageError, match="needs parameter 'job'"):
        run(box, pb, params={}, confirm=always)
    with pytest.raises(UsageError, match="no parameter 'jbo'"):
        run(box, pb, params={"job": "small", "jbo": "x"}, confirm=always)
    assert main(["playbook", "run", str(pb), "--job", "small", "--param", "novalue", "--yes"]) == 64
    assert main(["playbook", "run", "no-such-playbook", "--job", "small"]) == 64


# --- the journal and resume ----------------------------------------------------------------------

CHILD = """\
import sys
from pathlib import Path
from robustctl.actions.session import always
from robustctl.commands.playbook import PlaybookRunRequest, run_playbook_run
box = Path(sys.argv[1])
run_playbook_run(PlaybookRunRequest(name=str(box / "pb.yaml"), params={"job": "small"},
                 inventory=box / "inv.yaml", state=box / "state.db"), confirm=always)
"""


def start_child(box: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    write(box, TWO_EVICTIONS)
    with (box / "child.err").open("wb") as err:
        return subprocess.Popen(
            [sys.executable, "-c", CHILD, str(box)],
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def kill_when(proc: subprocess.Popen[bytes], box: Path, ready: Any, limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s
    try:
        while time.monotonic() < deadline:
            if list(box.glob("state.db.playbook-*.lock")):  # the child opened (and migrated) the store
                with Store.open(box / "state.db") as s:
                    rows = journal.runs(s)
                    rec = journal.run_record(s, rows[0].id) if rows else None
                    if rec is not None and ready(rec, s):
                        break
            assert proc.poll() is None, (box / "child.err").read_text()[-2000:]
            time.sleep(0.05)
        else:
            pytest.fail("the child never reached the point to kill it at")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def steps_of(rec: journal.JournalRun) -> list[tuple[str, str]]:
    return [(s.step, s.status) for s in rec.steps]


def test_resume_after_sigkill_never_repeats_a_finished_destructive_step(box: Path) -> None:
    """Killed after the second eviction was applied and audited but before the journal recorded it:
    resume takes it from the audit record; the first eviction is never repeated."""
    proc = start_child(box, {PLAYBOOK_STEP_SLEEP_ENV: "second=60"})

    def second_applied(rec: journal.JournalRun, s: Store) -> bool:
        applied = [a for a in s.audit() if a.action == "evict" and a.status == "applied"]
        return steps_of(rec)[-1:] == [("second", "running")] and len(applied) == 2

    kill_when(proc, box, second_applied)
    with Store.open(box / "state.db") as s:
        run_id = journal.runs(s)[0].id
        assert journal.run_record(s, run_id).status == "running"  # type: ignore[union-attr]
    with pytest.raises(ActionRefused, match=f"resume {run_id}"):  # one run at a time per job
        run(box, write(box, TWO_EVICTIONS), confirm=always)
    res = run_playbook_resume(
        PlaybookResumeRequest(run_id=run_id, inventory=box / "inv.yaml", state=box / "state.db"),
        confirm=always,
    )
    assert res.status == "done" and res.resumed
    assert [(s.step, s.status, s.resumed) for s in res.steps] == [
        ("first", "done", "journal"),
        ("second", "done", f"audit {audits(box)[1].id}"),
    ]
    assert [a.targets for a in audits(box)] == [("node01",), ("node02",)]  # nothing applied twice
    with Store.open(box / "state.db") as s:
        rec = journal.run_record(s, run_id)
    assert rec is not None and rec.status == "done"
    assert steps_of(rec) == [("first", "done"), ("second", "done")]


def test_resume_reruns_a_half_applied_destructive_step(box: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Killed inside the second eviction's apply (audit record started, a scheduler step running):
    resume runs the step again (its plan steps re-check the state) and never repeats the first."""
    proc = start_child(box, {STEP_SLEEP_ENV: "0.3"})

    def second_half(rec: journal.JournalRun, s: Store) -> bool:
        mid = [a for a in s.audit() if a.targets == ("node02",) and a.status == "started" and a.steps]
        return steps_of(rec)[-1:] == [("second", "running")] and bool(mid)

    kill_when(proc, box, second_half)
    with Store.open(box / "state.db") as s:
        run_id = journal.runs(s)[0].id
    code = main(
        [
            "playbook",
            "resume",
            str(run_id),
            "--yes",
            "-i",
            str(box / "inv.yaml"),
            "--state",
            str(box / "state.db"),
            "--json",
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["status"] == "done" and doc["kind"] == "playbook-run"
    assert [(s["step"], s["resumed"]) for s in doc["steps"]] == [("first", "journal"), ("second", "rerun")]
    evicts = audits(box)
    assert [a.targets for a in evicts] == [("node01",), ("node02",), ("node02",)]
    assert [a.status for a in evicts] == ["applied", "started", "applied"]
    with Store.open(box / "state.db") as s:
        rec = journal.run_record(s, run_id)
        assert s.machine("node02").state.value == "evicted"  # type: ignore[union-attr]
    assert rec is not None and steps_of(rec) == [
        ("first", "done"),
        ("second", "interrupted"),
        ("second", "done"),
    ]
    assert main(["playbook", "resume", str(run_id), "--state", str(box / "state.db")]) == 64  # finished


def test_resume_of_an_unknown_run_is_a_usage_error(box: Path) -> None:
    with pytest.raises(UsageError, match="no playbook run 99"):
        run_playbook_resume(PlaybookResumeRequest(run_id=99, state=box / "state.db"))


def test_the_shipped_gpu_lost_playbook_runs_evict_standby_and_calls_restart(box: Path) -> None:
    """gpu-lost through real library calls on the inventory back end: evict, standby in, then the real
    ``run_restart``, which refuses in one line a job without a ``launch:`` section; the run stops."""
    with Store.open(box / "state.db") as s:
        s.set_state("spare1", MachineState.STANDBY, "checked", readiness=Readiness.READY)
    res = run(box, "gpu-lost", params={"job": "small", "hosts": "node02"}, confirm=always)
    got = [(s.step, s.status) for s in res.steps]
    assert got[:2] == [("evict", "done"), ("standby", "done")]
    with Store.open(box / "state.db") as s:
        assert s.job_hosts("small") == ["node01", "spare1", "node03", "node04"]
    assert got[2] == ("restart", "failed") and "no launch: section" in res.steps[2].error
    assert res.status == "failed" and int(res.exit_code) in (3, 78)


def test_a_diagnose_step_checks_the_jobs_machines_after_a_standby_swap(box: Path) -> None:
    """After spare1 took node02's place, the job's diagnose step checks spare1, not the evicted node02
    (whose old XID would otherwise be named again, and the real machine never looked at)."""
    from robustctl.playbooks.catalog import find_playbook
    from robustctl.playbooks.engine import dry_run

    with Store.open(box / "state.db") as s:
        s.set_job_hosts("small", ["node01", "spare1", "node03", "node04"])
    pb = find_playbook("job-failed", box / "inv.yaml")
    steps = dry_run(pb, {"job": "small"}, inventory=box / "inv.yaml", state=box / "state.db")
    diag = next(s for s in steps if s.kind == "diagnose")
    assert diag.now is not None
    assert sorted(h["host"] for h in diag.now["hosts"]) == ["node01", "node03", "node04", "spare1"]
