"""The fail-slow rule on step-time traces of the test-bed job: detection delay and false alarms.

Runs the minimegatron job (:mod:`tests.jobs.minimegatron`, tp=1, pp=2, dp=2: four local rank
processes on 127.0.0.1, ``--log-every 1``) twice for ``--steps`` steps: once healthy, once with a
``slow`` fault (``slow:rank=1:step=K:factor=F``, rank 1's compute ``F`` x as long) from step ``K``
(``--onset``, default half-way). Each rank's per-step times are read from what the job itself
writes: rank 0's ``step N step_s X`` lines and the last-stage ranks' Megatron training-log lines
(``elapsed time per iteration (ms)``) on stdout, and, for the ranks that print neither, their
heartbeat files (``step_s``) polled every :data:`POLL_S` (a step the poll missed is left out of that
rank's trace and counted). Every rank waits for the slow one in the collectives, so every rank's
trace shows the slowdown.

Each trace goes through :func:`robustctl.watch.rules.detection_delay_and_false_alarms` from a fresh
state, which measures both the watch's rule (BOCPD change point confirmed by the medians) and the
rolling-median rule alone. Printed per trace: samples, the detection delay in steps and in the job's
own seconds, and the false alarms (episodes declared before the onset; every episode of the healthy
run is one). The baseline, run in the same process, is the rolling-median rule alone on the same
traces: the delay ratio BOCPD / median is printed per slow trace.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TP, PP, DP = 1, 2, 2
"""The job's layout: four ranks (two on each stage) fit a 2-core machine at a few steps per second."""
WORLD = TP * PP * DP
SLOW_RANK = 1
"""The rank the ``slow`` fault hits (stage 0, DP replica 1: not a rank that prints its step time, so
its slowdown reaches the printed traces only through the collectives, as it reaches a real job's)."""
POLL_S = 0.01
"""Heartbeat poll period (s): well under the job's step time (~0.1-0.2 s), so few steps are missed."""
RUN_DEADLINE_S = 300.0
"""Longest one run may take before its ranks are killed and the bench fails (an idle machine needs
~40 s for the default 200 steps)."""
MAX_STEPS = 5_000
"""Most ``--steps`` accepted: a run of this many steps takes ~15 minutes, far past a benchmark's budget."""
_RANK0 = re.compile(r"\[rank 0\] step (\d+) step_s ([0-9.]+)")
_MEGATRON = re.compile(
    r"\[rank (\d+)\].*?iteration\s+(\d+)/\s*\d+ \|.*?elapsed time per iteration \(ms\): ([0-9.]+)"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _last_stage(rank: int) -> bool:
    return rank // (TP * DP) == PP - 1


class _Poller:
    """Polls every rank's heartbeat file; ``seen[rank][step]`` is that step's ``step_s``."""

    def __init__(self, progress: Path) -> None:
        self.progress = progress
        self.seen: dict[int, dict[int, float]] = {r: {} for r in range(WORLD)}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for r in range(WORLD):
                try:
                    doc = json.loads((self.progress / f"rank{r:05d}.json").read_text())
                except (OSError, ValueError):
                    continue
                if doc.get("phase") == "train" and doc.get("step_s") is not None:
                    self.seen[r][int(doc["step"])] = float(doc["step_s"])
            time.sleep(POLL_S)

    def stop(self) -> None:
        self._stop.set()
        self._t.join()


def _run_job(work: Path, steps: int, fault: str) -> dict[int, list[tuple[int, float]]] | None:
    """Run the job for ``steps`` steps with ``fault`` (empty: none); ``{rank: [(step, step_s), ...]}``
    (steps in order; a step the heartbeat poll missed is absent), or ``None`` when a rank failed or
    the deadline passed (its log tail on stdout)."""
    progress = work / "progress"
    progress.mkdir(parents=True)
    port = _free_port()
    procs: list[subprocess.Popen[bytes]] = []
    poller = _Poller(progress)
    try:
        for rank in range(WORLD):
            env = {
                **os.environ,
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(WORLD),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "PYTHONPATH": str(REPO),
                "ROBUSTCTL_FAULT": fault,
            }
            cmd = [sys.executable, "-m", "tests.jobs.minimegatron", "--tp", str(TP), "--pp", str(PP)]
            cmd += ["--dp", str(DP), "--steps", str(steps), "--log-every", "1", "--idle-ms", "20"]
            cmd += ["--pg-timeout-s", "60", "--progress-dir", str(progress)]
            with open(work / f"rank{rank}.log", "wb") as log:
                procs.append(subprocess.Popen(cmd, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + RUN_DEADLINE_S
        rcs: list[int | None] = [None] * WORLD
        while any(rc is None for rc in rcs) and time.monotonic() < deadline:
            rcs = [p.poll() for p in procs]
            time.sleep(0.1)
    finally:
        poller.stop()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if rcs != [0] * WORLD:
        bad = next(r for r, rc in enumerate(rcs) if rc != 0)
        tail = (work / f"rank{bad}.log").read_text(errors="replace")[-2000:]
        print(f"  run failed (exit statuses {rcs}); rank {bad}'s log ends:\n{tail}")
        return None
    found: dict[int, dict[int, float]] = {r: dict(poller.seen[r]) for r in range(WORLD)}
    for r in range(WORLD):
        text = (work / f"rank{r}.log").read_text(errors="replace")
        if r == 0:
            found[r] = {int(m[1]): float(m[2]) for m in _RANK0.finditer(text)}
        elif _last_stage(r):
            found[r] = {int(m[2]): float(m[3]) / 1000.0 for m in _MEGATRON.finditer(text) if int(m[1]) == r}
    return {r: [(s, found[r][s]) for s in range(1, steps + 1) if s in found[r]] for r in range(WORLD)}


def _source(rank: int) -> str:
    if rank == 0:
        return "log step_s"
    return "log Megatron" if _last_stage(rank) else "heartbeat"


def _fmt(v: float | int | None, spec: str) -> str:
    digits = spec[: len(spec) - len(spec.lstrip("0123456789"))]
    width = int(digits) if digits else 0
    return "-".rjust(width) if v is None else format(v, spec)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the healthy and the slow job, print the table; 0 when both runs finished and every slow
    trace was detected with no false alarm in the healthy run, else 1."""
    ap = argparse.ArgumentParser(prog="python -m bench failslow", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200, help="steps per run (default 200)")
    ap.add_argument("--factor", type=float, default=2.0, help="the slow rank's compute factor (default 2)")
    ap.add_argument("--onset", type=int, default=0, help="first slow step (default: --steps / 2)")
    args = ap.parse_args(list(argv) if argv is not None else None)
    if not 40 <= args.steps <= MAX_STEPS:
        ap.error(f"--steps must be 40..{MAX_STEPS}")
    if not 1.0 < args.factor <= 100.0:
        ap.error("--factor must be in (1, 100]")
    onset = args.onset or args.steps // 2
    if not 2 <= onset <= args.steps - 10:
        ap.error("--onset must be 2..steps-10 (the rule needs steps after it)")
    sys.path.insert(0, str(REPO))
    from robustctl.watch.rules import DetectionReport, FailSlowParams, detection_delay_and_false_alarms

    params = FailSlowParams()
    work = Path(tempfile.mkdtemp(prefix="bench-failslow-"))
    runs: dict[str, dict[int, list[tuple[int, float]]]] = {}
    for name, fault in (
        ("healthy", ""),
        ("slow", f"slow:rank={SLOW_RANK}:step={onset}:factor={args.factor:g}"),
    ):
        t0 = time.monotonic()
        got = _run_job(work / name, args.steps, fault)
        if got is None:
            return 1
        runs[name] = got
        print(f"  {name} run: {args.steps} steps in {time.monotonic() - t0:.1f} s", flush=True)

    print(
        f"fail-slow rule on minimegatron step times (tp={TP} pp={PP} dp={DP}, {args.steps} steps; slow run: "
        f"rank {SLOW_RANK} x{args.factor:g} from step {onset}; slow_factor {params.slow_factor:g}, "
        f"persist {params.persist_steps})"
    )
    head = (
        f"  {'run':<7} {'rank':>4} {'source':<12} {'n':>4} {'miss':>4} {'med before':>10} {'med after':>9} "
        f"| {'BOCPD delay':>11} {'(s)':>6} {'FA':>3} | {'median delay':>12} {'FA':>3} | ratio"
    )
    print(head)
    ok = True
    for name, traces in runs.items():
        for r, pairs in traces.items():
            trace = [t for _, t in pairs]
            missed = args.steps - len(pairs)
            # the trace index of the first step >= onset (steps the poll missed are absent)
            idx = next((i for i, (s, _) in enumerate(pairs) if s >= onset), None) if name == "slow" else None
            rep: DetectionReport = detection_delay_and_false_alarms(trace, idx, params)
            cut = idx if idx is not None else len(trace)
            before = statistics.median(trace[:cut]) if cut else None
            after = statistics.median(trace[cut:]) if idx is not None else None
            ratio = (
                f"{rep.delay_steps / rep.median_rule_delay_steps:.2f}"
                if rep.delay_steps is not None and rep.median_rule_delay_steps
                else "-"
            )
            print(
                f"  {name:<7} {r:>4} {_source(r):<12} {len(trace):>4} {missed:>4} {_fmt(before, '10.3f')} "
                f"{_fmt(after, '9.3f')} | {_fmt(rep.delay_steps, '11d')} {_fmt(rep.delay_s, '6.2f')} "
                f"{rep.false_alarms:>3} | {_fmt(rep.median_rule_delay_steps, '12d')} "
                f"{rep.median_rule_false_alarms:>3} | {ratio}"
            )
            if name == "healthy" and rep.false_alarms:
                ok = False
            if name == "slow" and rep.detected_index is None:
                ok = False
    print("  (delay: steps from the first slow step to the verdict; FA: episodes before the onset;")
    print("   ratio: BOCPD delay / rolling-median delay in steps, on the same trace)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
