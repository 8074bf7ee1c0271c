"""A 3-node batch job on the Slurm test bed with two warm standbys, and the ``gpu-lost`` ladder run on it.

Shared by the Slurm ladder test (``test_playbook_slurm.py``) and the recovery benchmark
(``bench/recovery.py``, its Slurm part). The test bed is :class:`~tests.integration.slurmbed.SlurmBed`
with five nodes ``sn1``-``sn5`` on 127.0.0.1; the inventory (:func:`write_inventory`) has
``scheduler.kind: slurm`` and the five nodes as hosts with ``transport: local`` (every slurmd "node"
is this machine), so the job's progress files are read through the local transport.

* :func:`add_standbys`: ``sn4`` and ``sn5`` become warm standbys (``standby add``, drained by Slurm
  with the reason ``robustctl-standby: …``) and are self-checked (``standby check``).
* :func:`submit`: a batch job (``--job-name`` = :data:`JOB`) on three nodes; its script runs one
  ``srun`` task per node that writes a heartbeat file ``progress/<node>/hb.json`` (``{"step", "time",
  "rank", "restart"}``) every :data:`STEP_S` seconds and appends each step to ``steps.log``; rank 0
  keeps the step in a checkpoint file from which a requeued run goes on, as a training job resumes
  from its checkpoint.
* :func:`run_gpu_lost`: ``playbook run gpu-lost --job J --param hosts=HOST --yes`` (the library call),
  timed, with the playbook's step events; :func:`journal_spans`: its steps' start and end times as the
  state store's journal recorded them.
* :func:`plain_requeue`: the baseline, ``scontrol requeue`` of the whole job (robustctl's
  ``Slurm.requeue``), timed to the requeued run's first step on every node.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from robustctl.actions.session import always
from robustctl.commands.actions import ActionResult
from robustctl.commands.playbook import PlaybookRunRequest, run_playbook_run
from robustctl.commands.standby import (
    StandbyAddRequest,
    StandbyCheckRequest,
    StandbyCheckResult,
    run_standby_add,
    run_standby_check,
)
from robustctl.playbooks import journal
from robustctl.playbooks.engine import RunOutcome, StepEvent
from robustctl.schedulers.slurm import Slurm
from robustctl.store import Store

from .slurmbed import LOAD_CHECK_OFF, SlurmBed

JOB = "llama-sl"
STEP_S = 0.2
"""Seconds between two heartbeats of a task."""
JOB_NODES = ("sn1", "sn2", "sn3")
STANDBYS = ("sn4", "sn5")

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
  # written whole, then renamed: a task killed by the requeue never leaves an empty checkpoint
  [ "$SLURM_PROCID" = 0 ] && echo "$s" > "$D/ckpt.tmp" && mv -f "$D/ckpt.tmp" "$D/ckpt"
  sleep %STEP%
done
"""


def write_inventory(bed: SlurmBed, work: Path) -> Path:
    """``work/inv.yaml``: the bed's nodes (``transport: local``), the Slurm back end, the job :data:`JOB`
    on ``sn[1-3]`` (dp=3, one rank per node) with its progress files under ``work/progress``.

    Every node is this one shared machine, so its load average says nothing of a node: the load
    warning is raised out of reach (:data:`~tests.integration.slurmbed.LOAD_CHECK_OFF`), else
    ``standby check`` calls the standbys bad whenever other work loads the machine."""
    scontrol = shutil.which("scontrol", path="/usr/local/bin:/usr/bin:/bin")
    if scontrol is None:
        raise RuntimeError("scontrol not found on /usr/local/bin:/usr/bin:/bin")
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
{LOAD_CHECK_OFF}jobs:
  {JOB}:
    hosts: sn[1-3]
    layout: {{dp: 3}}
    ranks_per_host: 1
    progress: {{files: "{work}/progress/{{host}}/hb.json"}}
"""
    )
    return inv


def add_standbys(inv: Path, state: Path) -> tuple[ActionResult, StandbyCheckResult]:
    """``standby add sn4,sn5 --reason "warm spare" --yes`` then ``standby check``: both results."""
    added = run_standby_add(
        StandbyAddRequest(hosts=",".join(STANDBYS), reason="warm spare", inventory=inv, state=state),
        confirm=always,
    )
    return added, run_standby_check(StandbyCheckRequest(inventory=inv, state=state))


def submit(bed: SlurmBed, work: Path) -> str:
    """``sbatch`` the 3-node job (output appended, so a requeue keeps it); its job id."""
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


def steps(work: Path) -> list[tuple[int, str, int, float]]:
    """``steps.log``: (restart count, node, step, wall time) per step written."""
    out: list[tuple[int, str, int, float]] = []
    path = work / "steps.log"
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:
            out.append((int(parts[0]), parts[1], int(parts[2]), float(parts[3])))
    return out


def wait_steps(
    work: Path, restart: int, nodes: set[str], timeout_s: float = 30, *, min_step: int = 0
) -> float:
    """Wait until every node of ``nodes`` wrote a step of run ``restart`` numbered ``min_step`` or more;
    the time of the run's first step.

    Raises:
        AssertionError: not within ``timeout_s`` (the message has the last steps written).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = [s for s in steps(work) if s[0] == restart]
        if nodes <= {s[1] for s in seen if s[2] >= min_step}:
            return min(s[3] for s in seen)
        time.sleep(0.05)
    raise AssertionError(
        f"run {restart} wrote no step >= {min_step} on each of {sorted(nodes)}: {steps(work)[-6:]}"
    )


@dataclass
class LadderRun:
    """One ``gpu-lost`` run: its outcome, start (``t0``, UNIX s), wall seconds (``took``) and the
    playbook's step events as (event, step, UNIX s)."""

    outcome: RunOutcome
    t0: float
    took: float
    marks: list[tuple[str, str, float]] = field(default_factory=list)


def run_gpu_lost(inv: Path, state: Path, host: str = "sn2") -> LadderRun:
    """``playbook run gpu-lost --job JOB --param hosts=HOST --yes`` as the library call, timed."""
    marks: list[tuple[str, str, float]] = []

    def note(ev: StepEvent) -> None:
        marks.append((ev.event, ev.step, time.time()))

    t0 = time.time()
    res = run_playbook_run(
        PlaybookRunRequest(name="gpu-lost", params={"job": JOB, "hosts": host}, inventory=inv, state=state),
        confirm=always,
        progress=note,
    )
    took = time.time() - t0
    if not isinstance(res, RunOutcome):
        raise TypeError(f"playbook run returned {type(res).__name__}, not a RunOutcome")
    return LadderRun(res, t0, took, marks)


def journal_spans(state: Path, run_id: int) -> list[tuple[str, float, float]]:
    """The run's steps from the state store's journal: (step, started_at, finished_at) in UNIX s, in
    the order they ran (a step not finished has ``finished_at`` = its start)."""
    with Store.open(state) as s:
        rec = journal.run_record(s, run_id)
    if rec is None:
        raise LookupError(f"no playbook run {run_id} in {state}")
    return [(st.step, st.started_at, st.finished_at or st.started_at) for st in rec.steps]


def plain_requeue(bed: SlurmBed, work: Path, job: str, restart: int, nodes: set[str]) -> float:
    """``Slurm.requeue`` of the whole job (``scontrol requeue`` + ``StartTime=now``, robustctl's settle);
    seconds from the call to the first step of run ``restart`` on every node of ``nodes``."""
    t1 = time.time()
    Slurm(conf=bed.conf, timeout_s=30).requeue(job)
    return wait_steps(work, restart, nodes) - t1
