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
settle pause) on the same nodes, as a ratio.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from robustctl.actions.session import always
from robustctl.cli.main import main
from robustctl.commands.playbook import PlaybookRunRequest, run_playbook_run
from robustctl.commands.standby import (
    StandbyAddRequest,
    StandbyCheckRequest,
    run_standby_add,
    run_standby_check,
)
from robustctl.playbooks.engine import RunOutcome, StepEvent
from robustctl.schedulers.slurm import Slurm
from robustctl.store import Readiness

from .slurmbed import SlurmBed, slurm_bed, slurm_cluster

__all__ = ["slurm_bed", "slurm_cluster"]  # fixtures, imported for pytest

pytestmark = pytest.mark.timeout(180)

JOB = "llama-sl"
STEP_S = 0.2

BATCH = """#!/bin/bash
echo "start $SLURM_JOB_ID $SLURM_JOB_NODELIST ${SLURM_RESTART_COUNT:-0}" >> "$1/starts.log"
exec srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash "$1/rank.sh" "$1"
"""

# One task per node: heartbeat file per node (written whole, then renamed), every step appended to
# steps.log with its wall time; rank 0 keeps the step in ckpt, from which a requeued run goes on.
RANK = """#!/bin/bash
D=$1; H=$SLURMD_NODENAME; R=${SLURM_RESTART_COUNT:-0}; P=$D/progress/$H
mkdir -p "$P"
s=$(cat "$D/ckpt" 2>/dev/null || echo 0)
while true; do
  s=$((s + 1)); now=$(date +%s.%N)
  printf '{"step": %d, "time": %s, "rank": %d, "restart": %d}\\n' "$s" "$now" "$SLURM_PROCID" "$R" \\
    > "$P/hb.tmp" && mv -f "$P/hb.tmp" "$P/hb.json"
  echo "$R $H $s $now" >> "$D/steps.log"
  [ "$SLURM_PROCID" = 0 ] && echo "$s" > "$D/ckpt"
  sleep %STEP%
done
"""


def _inventory(bed: SlurmBed, work: Path) -> Path:
    scontrol = shutil.which("scontrol", path="/usr/local/bin:/usr/bin:/bin")
    assert scontrol is not None
    inv = work / "inv.yaml"
    inv.write_text(
        f"""
gpus_per_host: 0
hosts:
  - name: sn[1-{bed.n_nodes}]
    transport: local
scheduler:
  kind: slurm
  timeout_s: 30
  slurm: {{conf: {bed.conf}, bin_dir: {Path(scontrol).parent}}}
policy: {{max_cluster_fraction: 0.5}}
jobs:
  {JOB}:
    hosts: sn[1-3]
    layout: {{dp: 3}}
    ranks_per_host: 1
    progress: {{files: "{work}/progress/{{host}}/hb.json"}}
"""
    )
    return inv


def _submit(bed: SlurmBed, work: Path) -> str:
    (work / "batch.sh").write_text(BATCH)
    (work / "rank.sh").write_text(RANK.replace("%STEP%", str(STEP_S)))
    out = bed.cmd(
        "sbatch",
        "--parsable",
        "--nodes=3",
        f"--job-name={JOB}",
        "--open-mode=append",
        f"--output={work}/job-%j.out",
        str(work / "batch.sh"),
        str(work),
    )
    return out.strip().split(";")[0]


def _steps(work: Path) -> list[tuple[int, str, int, float]]:
    """``steps.log``: (restart count, node, step, wall time) per step written."""
    out = []
    path = work / "steps.log"
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:
            out.append((int(parts[0]), parts[1], int(parts[2]), float(parts[3])))
    return out


def _wait_steps(work: Path, restart: int, nodes: set[str], timeout_s: float = 30) -> float:
    """Wait until every node of ``nodes`` wrote a step of run ``restart``; the first such step's time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = [s for s in _steps(work) if s[0] == restart]
        if nodes <= {s[1] for s in seen}:
            return min(s[3] for s in seen)
        time.sleep(0.05)
    raise AssertionError(f"run {restart} wrote no step on each of {sorted(nodes)}: {_steps(work)[-6:]}")


def test_gpu_lost_drains_swaps_in_a_standby_and_requeues_through_slurmctld(
    slurm_cluster: SlurmBed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bed = slurm_cluster
    inv, state = _inventory(bed, tmp_path), tmp_path / "state.db"
    session = {"inventory": inv, "state": state}

    added = run_standby_add(
        StandbyAddRequest(hosts="sn4,sn5", reason="warm spare", **session), confirm=always
    )
    assert int(added.exit_code) == 0
    assert {n: bed.node_states()[n] for n in ("sn4", "sn5")} == {
        "sn4": ("drained", "robustctl-standby: warm spare"),
        "sn5": ("drained", "robustctl-standby: warm spare"),
    }
    checked = run_standby_check(StandbyCheckRequest(**session))
    assert [(c.host, c.readiness) for c in checked.results] == [
        ("sn4", Readiness.READY),
        ("sn5", Readiness.READY),
    ], checked.results

    job = _submit(bed, tmp_path)
    fields = bed.wait_job(job, "RUNNING")
    assert fields["NodeList"] == "sn[1-3]"  # the standbys are drained: Slurm does not use them
    _wait_steps(tmp_path, 0, {"sn1", "sn2", "sn3"})
    time.sleep(1.0)  # a few steps in

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

    marks: list[tuple[str, str, float]] = []

    def note(ev: StepEvent) -> None:
        marks.append((ev.event, ev.step, time.time()))

    t0 = time.time()
    res = run_playbook_run(
        PlaybookRunRequest(name="gpu-lost", params={"job": JOB, "hosts": "sn2"}, **session),
        confirm=always,
        progress=note,
    )
    took = time.time() - t0
    assert isinstance(res, RunOutcome)
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
    first_new = _wait_steps(tmp_path, 1, {"sn1", "sn3", "sn4"})
    old = [s for s in _steps(tmp_path) if s[0] == 0]
    new = [s for s in _steps(tmp_path) if s[0] == 1]
    assert check["last_step"] in {s[2] for s in new}  # the step the wait saw is one the requeued run made
    assert not [s for s in new if s[1] == "sn2"]  # the drained node ran nothing of the new run
    assert min(s[2] for s in new) > max(s[2] for s in old if s[1] == "sn1") - 2  # resumed from ckpt
    for node in ("sn1", "sn3", "sn4"):
        hb = json.loads((tmp_path / "progress" / node / "hb.json").read_text())
        assert hb["restart"] == 1, (node, hb)
    ladder_s = first_new - t0
    began = {step: at for ev, step, at in marks if ev == "start"}
    ended = {step: at for ev, step, at in marks if ev == "end"}
    times = ", ".join(f"{s} {ended[s] - began[s]:.2f} s" for s in began if s in ended)
    print(f"gpu-lost on Slurm ({times}): {took:.2f} s; playbook start → first new step {ladder_s:.2f} s")

    # Baseline: a plain requeue of the whole job (scontrol requeue + StartTime=now, the same settle).
    t1 = time.time()
    Slurm(conf=bed.conf, timeout_s=30).requeue(job)
    first_requeued = _wait_steps(tmp_path, 2, {"sn1", "sn3", "sn4"})
    plain_s = first_requeued - t1
    print(
        f"plain scontrol requeue → first new step {plain_s:.2f} s; "
        f"gpu-lost ladder / plain requeue = {ladder_s / plain_s:.2f}x"
    )
