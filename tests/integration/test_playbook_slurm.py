"""The recovery ladder on the Slurm test bed: ``playbook run gpu-lost`` drains, swaps and requeues through slurmctld.

A real Slurm 22.05 (``slurmbed.py``: munged, slurmctld, five slurmd ``sn1``-``sn5`` on 127.0.0.1) and an
inventory with ``scheduler.kind: slurm`` pointing at its ``slurm.conf``. The five nodes are inventory
hosts with ``transport: local`` (every slurmd "node" is this machine), so the job's progress files
are read through the local transport.

* ``sn4`` and ``sn5`` are added as warm standbys (``standby add``: drained by Slurm with the reason
  ``robustctl-standby: …``) and self-checked (``standby check``: diagnose L0-L1 over the local
  transport), so they are ``ready``.
* A batch job (``--job-name`` = the inventory job) on three nodes lands on ``sn1``-``sn3``; its script
  runs one ``srun`` task per node that writes a heartbeat file ``progress/<node>/hb.json``
  (``{"step", "time", "rank", "restart"}``) every 0.2 s; rank 0 keeps the step in a checkpoint file
  from which a requeued run goes on, as a training job resumes from its checkpoint.
* ``playbook run gpu-lost --job J --param hosts=sn2 --yes`` (the library call) then:

  1. ``evict``: ``scontrol update nodename=sn2 state=drain reason="robustctl: …"``;
  2. ``standby``: Slurm cannot swap a node inside a running job, so robustctl's ``replace_host``
     requeues the job *held* (``scontrol requeuehold``), pins it to the new host list
     (``ReqNodeList=sn[1,3-4]``, ``ExcNodeList=sn2``) and resumes the standby ``sn4``;
  3. ``restart``: ``scontrol release`` + ``StartTime=now`` (a requeued job is otherwise eligible only
     ~120 s later), then waits until Slurm reports the job RUNNING;
  4. ``check`` (``wait-for-progress``): the heartbeats of the job's current nodes advance.

  Asserted through Slurm's own tools: ``sn2`` is drained with robustctl's reason, the job ran again
  (``Restarts=1``) exactly on ``sn1``, ``sn3``, ``sn4`` (the standby, pinned by ``ReqNodeList``: Slurm
  does place a requeued job on named nodes), never on ``sn2``, and the requeued run's tasks wrote the
  steps the wait saw (``restart: 1`` in each heartbeat, the standby's included).

What this ladder cannot do on Slurm (and the test shows): the swap is not in place. The whole job is
stopped and started again by slurmctld (the ``requeuehold`` in step 2 already stops it); only the
host list is chosen by robustctl.

The measured figure printed at the end: seconds from the playbook's start to the requeued job's first
new step, against a plain ``scontrol requeue`` of the whole job (robustctl's ``Slurm.requeue``, the same
settle pause) on the same nodes, as a ratio (``python -m bench recovery`` measures the same, its
Slurm part). The job, the inventory and the timed runs are ``slurmjob.py``, shared with that bench.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from robustctl.cli.main import main
from robustctl.schedulers.slurm import Slurm
from robustctl.store import Readiness

from .slurmbed import SlurmBed
from .slurmjob import (
    JOB,
    add_standbys,
    journal_spans,
    plain_requeue,
    run_gpu_lost,
    steps,
    submit,
    wait_steps,
    write_inventory,
)

pytestmark = pytest.mark.timeout(180)


def test_gpu_lost_drains_swaps_in_a_standby_and_requeues_through_slurmctld(
    slurm_cluster: SlurmBed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bed = slurm_cluster
    inv, state = write_inventory(bed, tmp_path), tmp_path / "state.db"

    added, checked = add_standbys(inv, state)
    assert int(added.exit_code) == 0
    assert {n: bed.node_states()[n] for n in ("sn4", "sn5")} == {
        "sn4": ("drained", "robustctl-standby: warm spare"),
        "sn5": ("drained", "robustctl-standby: warm spare"),
    }
    assert [(c.host, c.readiness) for c in checked.results] == [
        ("sn4", Readiness.READY),
        ("sn5", Readiness.READY),
    ], checked.results

    job = submit(bed, tmp_path)
    fields = bed.wait_job(job, "RUNNING")
    assert fields["NodeList"] == "sn[1-3]"  # the standbys are drained: Slurm does not use them
    # A few steps in: the resume check below (the new run starts past the old run's last step - 2)
    # tells a resumed run from one started over only once the old run is past step 3.
    wait_steps(tmp_path, 0, {"sn1", "sn2", "sn3"}, min_step=5)

    # The CLI's dry run on the Slurm back end: the decision tree and what evict would do now; nothing changes.
    argv = ["playbook", "run", "gpu-lost", "--job", JOB, "--param", "hosts=sn2", "--dry-run", "--json"]
    assert main([*argv, "-i", str(inv), "--state", str(state)]) == 0
    tree = json.loads(capsys.readouterr().out)
    evict_now = tree["steps"][0]["now"]
    assert [(s["kind"], s["host"], s["via"]) for s in evict_now["steps"]] == [
        ("drain", "sn2", "slurm"),
        ("mark", "sn2", "store"),
    ]
    assert all(r["passed"] for r in evict_now["rails"])
    assert bed.node_states()["sn2"][0] == "allocated"
    assert bed.job_fields(job)["Restarts"] == "0"

    ladder = run_gpu_lost(inv, state, "sn2")
    res = ladder.outcome
    assert [(s.step, s.status) for s in res.steps] == [
        ("evict", "done"),
        ("standby", "done"),
        ("restart", "done"),
        ("check", "done"),
    ], [(s.step, s.status, s.error) for s in res.steps]
    assert res.status == "done" and int(res.exit_code) == 0

    # 1. sn2 drained through slurmctld with robustctl's reason.
    state_sn2, reason = bed.node_states()["sn2"]
    assert state_sn2 == "drained" and reason.startswith("robustctl: GPU lost"), (state_sn2, reason)
    assert "Reason=robustctl: GPU lost" in bed.scontrol_node("sn2")
    # 2. The standby sn4 took sn2's place; sn5 is still a standby.
    assert bed.node_states()["sn5"] == ("drained", "robustctl-standby: warm spare")
    assert bed.node_states()["sn4"][0] in ("allocated", "mixed")
    standby_detail = json.dumps(res.steps[1].result)
    assert "requeuehold" in standby_detail and "ReqNodeList=sn[1,3-4]" in standby_detail
    # 3. The job was requeued and runs again on sn1, sn3, sn4, not on sn2.
    fields = bed.job_fields(job)
    assert fields["JobState"] == "RUNNING" and fields["Restarts"] == "1"
    assert fields["NodeList"] == "sn[1,3-4]" and fields["ExcNodeList"] == "sn2"
    assert Slurm(conf=bed.conf).job_hosts(JOB) == ["sn1", "sn3", "sn4"]
    starts = (tmp_path / "starts.log").read_text().splitlines()
    assert starts == [f"start {job} sn[1-3] 0", f"start {job} sn[1,3-4] 1"]
    # 4. The wait read the requeued run's heartbeats on the new host list (the standby's included).
    check = res.steps[3].result or {}
    assert check["outcome"] == "progress" and check["new_steps"] >= 1
    # Its last reading came at least one poll after its first: every node of the new list had written.
    assert {h["host"]: bool(h["entries"]) for h in check["hosts"]} == {"sn1": True, "sn3": True, "sn4": True}
    first_new = wait_steps(tmp_path, 1, {"sn1", "sn3", "sn4"})
    old = [s for s in steps(tmp_path) if s[0] == 0]
    new = [s for s in steps(tmp_path) if s[0] == 1]
    assert check["last_step"] in {s[2] for s in new}  # the step the wait saw is one the requeued run made
    assert not [s for s in new if s[1] == "sn2"]  # the drained node ran nothing of the new run
    assert min(s[2] for s in new) > max(s[2] for s in old if s[1] == "sn1") - 2  # resumed from ckpt
    for node in ("sn1", "sn3", "sn4"):
        hb = json.loads((tmp_path / "progress" / node / "hb.json").read_text())
        assert hb["restart"] == 1, (node, hb)
    # The journal recorded each step once, in order, inside the run's wall time.
    spans = journal_spans(state, res.run_id)
    assert [name for name, _, _ in spans] == ["evict", "standby", "restart", "check"]
    assert all(ladder.t0 <= a <= b <= ladder.t0 + ladder.took for _, a, b in spans), spans
    ladder_s = first_new - ladder.t0
    times = ", ".join(f"{name} {b - a:.2f} s" for name, a, b in spans)
    print(
        f"gpu-lost on Slurm ({times}): {ladder.took:.2f} s; playbook start → first new step {ladder_s:.2f} s"
    )

    # Baseline: a plain requeue of the whole job (scontrol requeue + StartTime=now, the same settle).
    plain_s = plain_requeue(bed, tmp_path, job, 2, {"sn1", "sn3", "sn4"})
    print(
        f"plain scontrol requeue → first new step {plain_s:.2f} s; "
        f"gpu-lost ladder / plain requeue = {ladder_s / plain_s:.2f}x"
    )
