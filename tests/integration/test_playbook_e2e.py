"""The shipped ``hang`` playbook end to end on the SSH testbed: a hung rank to a job training again.

robustctl launches the real minimegatron job itself (``run_restart`` from the inventory's ``launch:``
section, :mod:`tests.integration.hangjob`: tp=1, pp=2, dp=2 on node01-node04, standbys node05 and
node06 ready in the store, checkpoints every 3 steps in a directory every host sees). A rank is hung
in compute at step 12 through the job's fault file (a rank-bound fault, removed once the restart is
over: :func:`machine_gone`), then:

* ``playbook run hang --job mini --yes`` (the library call): ``stacks`` names the hung rank's group,
  ``evict`` takes exactly that group's machines out, ``standby-activate`` puts the two standbys in
  their places, ``restart`` stops what is left, picks the newest complete checkpoint and launches on
  the new host list, and the job trains past that checkpoint, its ranks on the standbys included;
* the run SIGKILLed after the eviction was applied but before the journal recorded it, and the newest
  checkpoint torn (one shard removed) before ``playbook resume``: the resume never evicts again (one
  eviction in the audit log), activates the standbys, and the restart picks the previous iteration
  (its ``pick_checkpoint`` detail says why); the job's first step is that iteration + 1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from robustctl.actions.session import always
from robustctl.commands.playbook import (
    PlaybookResumeRequest,
    PlaybookRunRequest,
    run_playbook_resume,
    run_playbook_run,
)
from robustctl.playbooks import journal
from robustctl.playbooks.engine import PLAYBOOK_STEP_SLEEP_ENV, StepEvent
from robustctl.store import Store
from tests.support.needs import needed

from .conftest import require_testbed
from .hangjob import CKPT_EVERY, JOB, HangJob, dumps, step_details
from .testbed import Testbed

HUNG = 2  # pp=1, dp=0: PP group {0, 2} (node01, node03), DP group {2, 3}
HANG_AT = 12  # the step rank 2 hangs in: the job stalls past checkpoints 6 and 9 (no save of 12)
NEWEST = 9


@pytest.fixture
def hang_job(testbed: Testbed, tmp_path: Path) -> Iterator[HangJob]:
    """The job launched by robustctl, rank 2 hung in compute at step 12 (checkpoints 6 and 9 on disk)."""
    require_testbed()
    if testbed.n_hosts < 6:
        needed("needs a testbed of at least 6 hosts (ROBUSTCTL_TESTBED_HOSTS)")
    with HangJob(testbed, tmp_path) as hj:
        hj.cold_start()
        hj.wait_step(3)
        hj.mini.set_faults(f"hang:compute:rank={HUNG}:step={HANG_AT}")
        hj.mini.wait_stalled(1.5, timeout=60)
        assert max(hj.mini.steps_done().values()) == HANG_AT - 1, hj.mini.steps_done()
        deadline = time.monotonic() + 30  # the asynchronous save of the last checkpoint lands
        while hj.complete_iterations()[:1] != [NEWEST] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert hj.complete_iterations()[:2] == [NEWEST, NEWEST - CKPT_EVERY], hj.complete_iterations()
        yield hj
    assert hj.mini.processes() == [], "the job left processes behind"


def machine_gone(hj: HangJob) -> Any:
    """A playbook progress hook that removes the fault once the restart is over: the fault file names a
    rank, not a machine, and the restarted rank 2 (on a standby) would hang again at step 12. Removed
    earlier, the old rank 2 would train on and save iterations the restart must not see; after the
    restart's verified stop, no old process is left to."""

    def hook(ev: StepEvent) -> None:
        if ev.event == "end" and ev.step == "restart":
            hj.mini.clear_faults()

    return hook


def by_step(res: Any) -> dict[str, Any]:
    return {s.step: s for s in res.steps}


def check_recovered(hj: HangJob, evicted: list[str], iteration: int, old_pids: set[int]) -> None:
    """The job runs on the new host list, every rank past ``iteration`` in a new process, the ranks of
    the evicted machines on the standbys, nothing of the job left on the evicted machines."""
    hosts = hj.job_hosts()
    assert sorted(set(hosts) & set(hj.standbys)) == sorted(hj.standbys), hosts
    assert not set(hosts) & set(evicted)
    prog = hj.wait_step(iteration + 1, not_pids=old_pids)
    where = {r: hj.host_of_pid(int(d["pid"])) for r, d in prog.items()}
    assert where == dict(enumerate(hosts)), (where, hosts)
    for p in hj.mini.processes():
        assert hj.host_of_pid(p.pid) not in evicted, f"pid {p.pid} still runs on an evicted machine"


def test_hang_playbook_evicts_the_group_activates_standbys_and_restarts(hang_job: HangJob) -> None:
    hj = hang_job
    old_pids = {int(d["pid"]) for d in hj.progress().values()}
    newest = NEWEST

    res = run_playbook_run(
        PlaybookRunRequest(name="hang", params={"job": JOB}, inventory=hj.inventory, state=hj.state),
        confirm=always,
        progress=machine_gone(hj),
    )
    steps = by_step(res)
    assert res.status == "done", (res.message, dumps([(s.step, s.status, s.error) for s in res.steps]))
    assert [(s.step, s.status) for s in res.steps] == [
        ("stacks", "done"),
        ("evict", "done"),
        ("standby", "done"),
        ("restart", "done"),
        ("check", "done"),
    ]
    stacks = steps["stacks"].result
    assert stacks is not None and stacks["exit_code"] == 2
    assert HUNG in stacks["likely_culprits"], dumps(stacks)
    group = stacks["group"]
    assert group is not None and "pp" in group["kind"].split("-"), dumps(group)
    pp_group = [hj.tb.name(0), hj.tb.name(2)]  # ranks 0 and 2
    assert sorted(stacks["over_eviction"]) == pp_group, dumps(stacks)

    evict = steps["evict"].result
    assert evict is not None and sorted(evict["targets"]) == pp_group
    assert [a.targets for a in hj.audits("evict")] == [tuple(pp_group)]
    standby = steps["standby"].result
    assert standby is not None and sorted(standby["hosts"]) == pp_group
    assert sorted(standby["targets"]) == sorted([*pp_group, *hj.standbys]), dumps(standby)

    restart = steps["restart"].result
    assert restart is not None
    detail = step_details(restart)
    assert detail["pick_checkpoint"][1].startswith(f"iteration {newest}:"), detail["pick_checkpoint"]
    assert "ended by SIGTERM" in detail["stop_job"][1] or "SIGKILL" in detail["stop_job"][1], detail
    assert "all 4 rank(s) running" in detail["wait_running"][1]
    check_recovered(hj, pp_group, newest, old_pids)
    assert hj.first_step_after_resume() == (newest, newest + 1), hj.log_tails()


CHILD = """\
import sys
from pathlib import Path
from robustctl.actions.session import always
from robustctl.commands.playbook import PlaybookRunRequest, run_playbook_run
work = Path(sys.argv[1])
run_playbook_run(PlaybookRunRequest(name="hang", params={"job": "mini"}, inventory=work / "inventory.yaml",
                 state=work / "state.db"), confirm=always)
"""


def run_and_kill_after_evict(hj: HangJob) -> int:
    """Run the hang playbook in a child process and SIGKILL it once the eviction was applied (audit
    record ``applied``) while the journal still has the step ``running``; return the run's id."""
    env = {**os.environ, PLAYBOOK_STEP_SLEEP_ENV: "evict=120"}
    err = hj.workdir / "child.err"
    with err.open("wb") as f:
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(hj.workdir)], env=env, stderr=f)
    deadline = time.monotonic() + 120
    try:
        while True:
            assert proc.poll() is None, err.read_text()[-3000:]
            assert time.monotonic() < deadline, "the eviction was never applied"
            with Store.open(hj.state) as s:
                rows = journal.runs(s)
                rec = journal.run_record(s, rows[0].id) if rows else None
                applied = [a for a in s.audit() if a.action == "evict" and a.status == "applied"]
            if (
                rec is not None
                and applied
                and [(x.step, x.status) for x in rec.steps][-1:] == [("evict", "running")]
            ):
                return rec.id
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_resume_after_sigkill_between_evict_and_restart_with_a_torn_checkpoint(hang_job: HangJob) -> None:
    hj = hang_job
    old_pids = {int(d["pid"]) for d in hj.progress().values()}
    run_id = run_and_kill_after_evict(hj)
    evictions = hj.audits("evict")
    assert len(evictions) == 1 and evictions[0].status == "applied"
    evicted = list(evictions[0].targets)
    assert hj.audits("restart")[-1].reason == "start"  # only the cold start: no restart yet

    newest, previous = NEWEST, NEWEST - CKPT_EVERY
    (hj.ckpt / f"iter_{newest:07d}" / "rank_00001.pt").unlink()  # the newest save, torn

    res = run_playbook_resume(
        PlaybookResumeRequest(run_id=run_id, inventory=hj.inventory, state=hj.state),
        confirm=always,
        progress=machine_gone(hj),
    )
    assert res.status == "done" and res.resumed, (res.message, [(s.step, s.error) for s in res.steps])
    steps = by_step(res)
    assert steps["stacks"].resumed == "journal"
    assert steps["evict"].resumed == f"audit {evictions[0].id}", steps["evict"]
    assert [a.id for a in hj.audits("evict")] == [evictions[0].id], "evicted a second time"
    assert steps["standby"].status == "done" and steps["restart"].status == "done"
    pick = step_details(steps["restart"].result)["pick_checkpoint"][1]
    assert pick.startswith(f"iteration {previous}:"), pick
    assert f"iteration {newest} lacks rank 1's shard" in pick, pick
    check_recovered(hj, evicted, previous, old_pids)
    assert hj.first_step_after_resume() == (previous, previous + 1), hj.log_tails()
