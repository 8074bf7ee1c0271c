"""Time to recovery: ``hang`` on the SSH test bed vs a cold start, ``gpu-lost`` on Slurm vs a requeue.

Six loopback sshd hosts; robustctl launches the minimegatron job (tp=1, pp=2, dp=2, one rank per
host, :mod:`tests.integration.hangjob`) on four of them, two are ready warm standbys.

1. **Cold start** (the baseline): ``run_restart --from-checkpoint none`` from nothing until every rank
   has finished its first step (the job's progress files, polled every 20 ms).
2. **Recovery**: rank 2 hangs in compute at step 12 (checkpoints 6 and 9 on disk); ``playbook run hang``
   (the library call) until every rank has finished a step past the checkpoint it restarted from, in
   a new process. Broken down from the playbook's step events (``stacks``, ``evict``, ``standby``,
   ``restart``) and the restart's audit steps (``stop_job``, ``pick_checkpoint``, ``launch``,
   ``wait_running``: their start and end times); *first step* runs from the end of ``wait_running``
   (every rank's process found) to the first new step of every rank. The playbook's final
   ``wait-for-progress`` step overlaps *first step* and is not counted.

Printed: seconds per phase, the total, and total / cold start. The run is one sample (a recovery
evicts; the test bed is rebuilt for another), so the figures carry the noise of a shared machine.

**Slurm part** (after the sshd part; ``--part slurm`` runs it alone): the same ladder through slurmctld
on the Slurm test bed (``tests/integration/slurmbed.py``, five slurmd on 127.0.0.1) with the job of
:mod:`tests.integration.slurmjob` (a 3-node batch job, one heartbeat task per node, resuming from its
own checkpoint file; ``sn4``/``sn5`` ready warm standbys), ``--slurm-repeats`` times (each on a fresh
job, state store and standbys):

1. **Ladder**: ``playbook run gpu-lost --param hosts=sn2`` (the library call) until the requeued
   run wrote a step on each of ``sn1``, ``sn3``, ``sn4``. Broken down from the journal's step times:
   ``evict`` (drain), ``standby`` (``requeuehold``, pin ``ReqNodeList``/``ExcNodeList``, resume the
   standby), then from the start of ``restart`` (release, the settle pause of ``Slurm.requeue`` after
   the requeue, ``StartTime=now``; slurmctld starts the job, ``srun`` its tasks) to the first new step.
   The ``restart`` step itself returns a little later (it polls until Slurm says RUNNING; printed,
   not counted), and the final ``wait-for-progress`` step overlaps too.
2. **Plain requeue** (the baseline): ``scontrol requeue`` of the whole job (``Slurm.requeue``, the
   same settle pause) on the same nodes until the next run's first step on each.

Printed per repeat and as medians: both times and ladder / plain requeue.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


class _FirstStep:
    """Polls the job's progress files: when every rank first finished a step ``> after`` in a process
    not in ``old`` (UNIX time in ``at``)."""

    def __init__(self, hj: Any, after: int, old: set[int]) -> None:
        self.hj, self.after, self.old = hj, after, old
        self.at: float | None = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            prog = self.hj.progress()
            if len(prog) == 4 and all(
                int(d["step"]) > self.after and d["pid"] not in self.old for d in prog.values()
            ):
                self.at = time.time()
                return
            time.sleep(0.02)

    def wait(self, timeout: float) -> float | None:
        self._t.join(timeout)
        self._stop.set()
        return self.at


def main(argv: Sequence[str] | None = None) -> int:
    """Run the parts asked and print their tables; 0 when every recovery succeeded, else 1 (or 1 when
    a test bed cannot run here, with the reason on stderr)."""
    ap = argparse.ArgumentParser(prog="python -m bench recovery", description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("all", "sshd", "slurm"), default="all", help="default: both")
    ap.add_argument(
        "--slurm-repeats", type=int, default=3, help="ladder/requeue pairs on Slurm (1-20, default 3)"
    )
    args = ap.parse_args(list(argv) if argv is not None else None)
    if not 1 <= args.slurm_repeats <= 20:
        ap.error("--slurm-repeats must be 1..20")
    sys.path.insert(0, str(REPO))
    rc = 0
    if args.part in ("all", "sshd"):
        rc = max(rc, _sshd())
    if args.part in ("all", "slurm"):
        rc = max(rc, _slurm(args.slurm_repeats))
    return rc


def _sshd() -> int:
    """The hang playbook on the sshd test bed against the job's cold start; 0 when it recovered."""
    from robustctl.actions.session import always
    from robustctl.commands.playbook import PlaybookRunRequest, run_playbook_run
    from robustctl.playbooks.engine import StepEvent
    from tests.integration.hangjob import JOB, HangJob
    from tests.integration.testbed import Testbed

    work = Path(tempfile.mkdtemp(prefix="bench-recovery-"))
    with Testbed(work / "tb", 6) as tb, HangJob(tb, work / "job") as hj:
        t0 = time.time()
        first = _FirstStep(hj, 0, set())
        hj.cold_start()
        launched = time.time()
        cold_at = first.wait(120)
        if cold_at is None:
            print("cold start: no first step within 120 s\n" + hj.log_tails())
            return 1
        cold = cold_at - t0

        hj.wait_step(3)
        hj.mini.set_faults("hang:compute:rank=2:step=12")  # stalls past checkpoints 6 and 9
        hj.mini.wait_stalled(1.5, timeout=60)
        deadline = time.monotonic() + 30  # the asynchronous save of iteration 9 lands
        while hj.complete_iterations()[:1] != [9] and time.monotonic() < deadline:
            time.sleep(0.1)
        old = {int(d["pid"]) for d in hj.progress().values()}
        newest = hj.complete_iterations()[0]
        marks: dict[tuple[str, str], float] = {}

        def on_step(ev: StepEvent) -> None:
            marks[(ev.step, ev.event)] = time.time()
            if ev.event == "end" and ev.step == "restart":
                hj.mini.clear_faults()  # old processes gone; the new rank 2 must not hang at step 12

        watch = _FirstStep(hj, newest, old)
        t1 = time.time()
        res = run_playbook_run(
            PlaybookRunRequest(name="hang", params={"job": JOB}, inventory=hj.inventory, state=hj.state),
            confirm=always,
            progress=on_step,
        )
        new_at = watch.wait(120)
        restart = hj.audits("restart")[-1]
        on_standbys = set(hj.standbys) <= set(hj.job_hosts())
    if res.status != "done" or new_at is None or not on_standbys:
        print(f"recovery failed: {res.message}; first new step at {new_at}; standbys in: {on_standbys}")
        return 1
    kinds = [str(s["kind"]) for s in (restart.plan or {}).get("steps", [])]
    audit = {kinds[s.index]: s for s in restart.steps if s.index < len(kinds)}

    def span(kind: str) -> float:
        s = audit[kind]
        return (s.finished_at or s.started_at) - s.started_at

    wait_end = max(s.finished_at or s.started_at for s in restart.steps)
    phases = [
        ("stacks (py-spy x2, cluster, blame)", marks[("stacks", "end")] - marks[("stacks", "start")]),
        ("evict (drain, mark)", marks[("evict", "end")] - marks[("evict", "start")]),
        ("standby (2 activations)", marks[("standby", "end")] - marks[("standby", "start")]),
        ("restart: stop (TERM, verify)", span("stop_job")),
        ("restart: pick checkpoint", span("pick_checkpoint")),
        ("restart: launch", span("launch")),
        ("restart: wait until running", span("wait_running")),
        ("first step (running -> step)", new_at - wait_end),
    ]
    total = new_at - t1
    accounted = sum(v for _, v in phases)
    print("hang playbook recovery on 4 loopback sshd hosts + 2 standbys (minimegatron tp=1 pp=2 dp=2)")
    print(
        f"  cold start (run_restart -> first step)   {cold:6.2f} s   (launch returned after {launched - t0:.2f} s)"
    )
    for name, v in phases:
        print(f"  {name:<40} {v:6.2f} s")
    print(f"  (between steps: journal, rails, store)   {total - accounted:6.2f} s")
    print(
        f"  recovery: playbook run -> first new step {total:6.2f} s   ratio {total / cold:.2f}x the cold start"
    )
    print(f"  resumed from iteration {newest}; ranks on {', '.join(hj.job_hosts())}")
    return 0


def _slurm(repeats: int) -> int:
    """The gpu-lost ladder on the Slurm test bed against a plain requeue, ``repeats`` times."""
    from robustctl.store import Readiness
    from tests.integration import slurmbed, slurmjob
    from tests.integration.testbed import unavailable_reason

    reason = slurmbed.unavailable_reason() or unavailable_reason()
    if reason:
        print(f"bench: Slurm part cannot run: {reason}", file=sys.stderr)
        return 1
    new_nodes = {"sn1", "sn3", "sn4"}
    rows: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-recovery-slurm-") as d:
        bed = slurmbed.SlurmBed(Path(d) / "bed", 5)
        bed.start(timeout_s=60)
        try:
            for r in range(repeats):
                bed.reset()
                work = Path(d) / f"run{r}"
                work.mkdir()
                inv, state = slurmjob.write_inventory(bed, work), work / "state.db"
                _, checked = slurmjob.add_standbys(inv, state)
                if [c.readiness for c in checked.results] != [Readiness.READY] * 2:
                    print(f"standbys not ready: {checked.results}")
                    return 1
                job = slurmjob.submit(bed, work)
                bed.wait_job(job, "RUNNING")
                slurmjob.wait_steps(work, 0, set(slurmjob.JOB_NODES))
                time.sleep(1.0)  # a few steps in
                ladder = slurmjob.run_gpu_lost(inv, state, "sn2")
                if ladder.outcome.status != "done":
                    print(f"gpu-lost failed: {ladder.outcome.message}")
                    return 1
                first_new = slurmjob.wait_steps(work, 1, new_nodes)
                spans = {name: (a, b) for name, a, b in slurmjob.journal_spans(state, ladder.outcome.run_id)}
                plain = slurmjob.plain_requeue(bed, work, job, 2, new_nodes)
                row = {name: spans[name][1] - spans[name][0] for name in ("evict", "standby")}
                row["restart"] = first_new - spans["restart"][0]
                row["total"] = first_new - ladder.t0
                row["between"] = row["total"] - sum(v for k, v in row.items() if k != "total")
                row["restart return"] = spans["restart"][1] - first_new
                row["plain"] = plain
                rows.append(row)
        finally:
            bed.close()
    names = [
        ("evict", "evict (scontrol drain, mark)"),
        ("standby", "standby (requeuehold, pin, resume)"),
        ("restart", "restart: release, settle, start -> step"),
        ("between", "(between steps: journal, rails, store)"),
        ("total", "ladder: playbook run -> first new step"),
        ("plain", "plain scontrol requeue -> first new step"),
        ("restart return", "(restart saw RUNNING after the step by)"),
    ]
    print(
        f"gpu-lost ladder vs whole-job requeue on the Slurm test bed (3-node job, 2 standbys; {repeats} runs)"
    )
    print(f"  {'':<42} {'median':>7}   runs")
    for key, label in names:
        vals = [row[key] for row in rows]
        print(f"  {label:<42} {statistics.median(vals):6.2f} s   {' '.join(f'{v:.2f}' for v in vals)}")
    ratios = [row["total"] / row["plain"] for row in rows]
    print(
        f"  ladder / plain requeue: median {statistics.median(ratios):.2f}x   "
        f"runs {' '.join(f'{x:.2f}' for x in ratios)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
