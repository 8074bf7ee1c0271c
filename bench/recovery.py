"""Time to recovery of the ``hang`` playbook on the SSH test bed, against the job's own cold start.

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
"""

from __future__ import annotations

import argparse
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
    """Run once and print the table; 0 when the job recovered onto the standbys, else 1."""
    ap = argparse.ArgumentParser(prog="python -m bench recovery", description=__doc__.splitlines()[0])
    ap.parse_args(list(argv) if argv is not None else None)
    sys.path.insert(0, str(REPO))
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


if __name__ == "__main__":
    raise SystemExit(main())
