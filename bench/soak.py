"""Soak (first cut): one schedule of faults under ``robustctl watch`` and under today's practice.

One test bed of seven loopback sshd hosts; the job of :mod:`tests.integration.hangjob` (minimegatron
launched by robustctl: tp=1, pp=2, dp=2, one rank per host on node01-node04, checkpoints every 3
steps, collective timeout ``--pg-timeout-s``, default :data:`PG_TIMEOUT_S`) with three warm standbys
(node05-node07). The same schedule runs twice, each time on a fresh job, state store and standbys:

* **hang**: rank 2 hangs in compute (``hang:compute:rank=2``);
* **crash**: rank 1 raises a CUDA error (``crash:cuda:rank=1``) while its host logs XID 79.

Policies:

1. **watch**: a thread calls :func:`~robustctl.commands.watch.run_watch_once` (``yes=True``) every
   0.5 s with the small ``watch:`` section of ``tests/integration/test_watch_e2e.py`` (hang after
   10 s without a step, no cool-down). Per fault: *detect* = injection → the watcher's decision (the
   incident's ``decision_at``), *localize* = the playbook's stacks/diagnose span (the incident's
   localization times), *MTTR* = injection → every rank has finished a step in a new process,
   *evicted* = the incident's machines.
2. **baseline** (today's practice): nothing watches; the job is declared failed when it leaves the
   running state by itself (a rank exits: for a hang, when the peers' collectives hit the job's
   collective timeout; for a crash, when the peers see the lost connection), then the whole job is
   restarted in place (:func:`~robustctl.commands.restart.run_restart`, newest complete checkpoint,
   same hosts, no eviction). *detect* = injection → that exit, *MTTR* as above.

Printed per class and policy: detect, localize, MTTR, machines evicted; then MTTR baseline / watch per
class, both measured in this run. Caveats of the test bed, both in the baseline's favour: gloo's
peers of a crashed rank fail at once (NCCL's often block until the watchdog's timeout), and an
in-place restart succeeds because the fault is removed before it (a lost GPU would fail it again).
Fail-slow, NaN loss and host loss are not in this first cut's schedule. One sample per cell: the
figures carry the noise of a shared machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
PG_TIMEOUT_S = 60.0
"""The job's collective timeout (s) by default: above the watch's hang recovery here (10 s stall, then
stacks, evict and restart: ~30 s on an idle 2-core machine), so the watch acts before the timeout does;
real jobs keep PyTorch's default of 10 minutes (NCCL) or 30 minutes."""
RECOVERY_TIMEOUT_S = 240.0
"""Longest wait for one fault to be recovered (past it the bench fails): a baseline hang needs the
collective timeout plus a restart."""
HOSTS = 7
"""Four job hosts and three standbys (the hang's PP group takes two, the crashed host a third)."""
HUNG, CRASHED = 2, 1
FAULTS: tuple[tuple[str, int, str], ...] = (
    ("hang", HUNG, f"hang:compute:rank={HUNG}"),
    ("crash", CRASHED, f"crash:cuda:rank={CRASHED}"),
)
"""The schedule: (class, rank, fault spec), in order."""


@dataclass
class Row:
    """One fault under one policy (seconds from the injection; ``None``: not measured)."""

    cls: str
    detect: float | None
    localize: float | None
    mttr: float
    evicted: tuple[str, ...]


def _trains_anew(hj: Any, old: set[int]) -> bool:
    from tests.integration.hangjob import JOB_HOSTS

    prog = hj.progress()
    return len(prog) == len(JOB_HOSTS) and all(
        int(d["pid"]) not in old and d.get("phase") == "train" for d in prog.values()
    )


def _any_gone(pids: set[int]) -> bool:
    from tests.integration.test_watch_e2e import gone

    return any(gone(p) for p in pids)


def _poll(what: str, ok: Callable[[], bool], hj: Any, check: Callable[[], None] = lambda: None) -> float:
    """Poll ``ok`` every 50 ms until it holds; its UNIX time. RuntimeError past the deadline."""
    deadline = time.monotonic() + RECOVERY_TIMEOUT_S
    while True:
        check()
        if ok():
            return time.time()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {RECOVERY_TIMEOUT_S:g} s\n{hj.log_tails()}")
        time.sleep(0.05)


def _inject(hj: Any, rank: int, cls: str, spec: str) -> tuple[float, set[int], int]:
    """Inject one fault (a crash's host also logs XID 79); injection time, the pids before, the faulted pid."""
    hj.wait_step(max(int(d["step"]) for d in hj.progress().values()) + 4)  # a few steps in: a new checkpoint
    prog = hj.progress()
    old = {int(d["pid"]) for d in prog.values()}
    if cls == "crash":
        tb = hj.tb
        tb.inject_xid(tb.index_of(hj.job_hosts()[rank]), 79)
    at = time.time()
    hj.mini.set_faults(spec)
    return at, old, int(prog[rank]["pid"])


def _watch_policy(tb: Any, work: Path, pg_timeout: float) -> list[Row]:
    from tests.integration.hangjob import HangJob
    from tests.integration.test_watch_e2e import Watcher, add_watch, gone, incidents

    rows: list[Row] = []
    with HangJob(tb, work) as hj:
        _set_pg_timeout(hj, pg_timeout)
        add_watch(hj)
        hj.cold_start()
        hj.wait_step(3)
        w = Watcher(hj.inventory, hj.state)
        w.start()
        try:
            for n, (cls, rank, spec) in enumerate(FAULTS, start=1):
                at, old, faulted = _inject(hj, rank, cls, spec)
                cleared = [False]

                def clear_when_gone(faulted: int = faulted, cleared: list[bool] = cleared) -> None:
                    w.check()
                    if not cleared[0] and gone(faulted):  # the machine it models is out of the job
                        hj.mini.clear_faults()
                        cleared[0] = True

                first = _poll(
                    f"watch {cls}: first new step", partial(_trains_anew, hj, old), hj, clear_when_gone
                )

                def closed(n: int = n) -> bool:
                    incs = incidents(hj)
                    return len(incs) >= n and incs[n - 1].closed_at is not None

                _poll(f"watch {cls}: incident closed", closed, hj, w.check)
                inc = incidents(hj)[n - 1]
                loc = (
                    inc.localization_end_at - inc.localization_start_at
                    if inc.localization_end_at is not None and inc.localization_start_at is not None
                    else None
                )
                detect = inc.decision_at - at if inc.decision_at is not None else None
                rows.append(Row(cls, detect, loc, first - at, tuple(inc.machines_evicted)))
        finally:
            w.stop()
    return rows


def _baseline_policy(tb: Any, work: Path, pg_timeout: float) -> list[Row]:
    from robustctl.actions.session import always
    from robustctl.commands.restart import RestartRequest, run_restart
    from tests.integration.hangjob import JOB, HangJob
    from tests.integration.test_watch_e2e import add_watch

    rows: list[Row] = []
    with HangJob(tb, work) as hj:
        _set_pg_timeout(hj, pg_timeout)
        add_watch(hj)  # the same inventory and standbys; nothing watches
        hj.cold_start()
        hj.wait_step(3)
        for cls, rank, spec in FAULTS:
            at, old, _ = _inject(hj, rank, cls, spec)
            ended = _poll(f"baseline {cls}: a rank exits", partial(_any_gone, old), hj)
            hj.mini.clear_faults()
            res = run_restart(
                RestartRequest(job=JOB, inventory=hj.inventory, state=hj.state, reason="baseline: in place"),
                confirm=always,
            )
            if res.outcome.value != "applied":
                raise RuntimeError(f"baseline {cls}: restart {res.outcome.value}")
            first = _poll(f"baseline {cls}: first new step", partial(_trains_anew, hj, old), hj)
            rows.append(Row(cls, ended - at, None, first - at, ()))
        evicts = hj.audits("evict")
        if evicts:
            raise RuntimeError(f"baseline evicted: {evicts}")
    return rows


def _set_pg_timeout(hj: Any, seconds: float) -> None:
    """Give the job's launch command ``--pg-timeout-s seconds`` (its collective timeout)."""
    doc = yaml.safe_load(hj.inventory.read_text())
    cmd = doc["jobs"]["mini"]["launch"]["command"]
    doc["jobs"]["mini"]["launch"]["command"] = [*cmd, "--pg-timeout-s", f"{seconds:g}"]
    hj.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))


def _s(v: float | None) -> str:
    return f"{v:7.2f}" if v is not None else "      -"


def main(argv: Sequence[str] | None = None) -> int:
    """Run both policies on one test bed and print the table; 0 when every fault was recovered, else 1
    (1 too when the test bed cannot run here, with the reason on stderr)."""
    ap = argparse.ArgumentParser(prog="python -m bench soak", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--pg-timeout-s",
        type=float,
        default=PG_TIMEOUT_S,
        help=f"the job's collective timeout (default {PG_TIMEOUT_S:g})",
    )
    args = ap.parse_args(list(argv) if argv is not None else None)
    if not 30.0 <= args.pg_timeout_s <= 180.0:
        ap.error("--pg-timeout-s must be 30..180 (above the watch's recovery, within the recovery deadline)")
    sys.path.insert(0, str(REPO))
    from tests.integration.testbed import Testbed, unavailable_reason

    reason = unavailable_reason()
    if reason:
        print(f"bench: the test bed cannot run: {reason}", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    results: dict[str, list[Row]] = {}
    try:
        with Testbed(work / "tb", HOSTS) as tb:
            for name, run in (("watch", _watch_policy), ("baseline", _baseline_policy)):
                t0 = time.monotonic()
                results[name] = run(tb, work / name, args.pg_timeout_s)
                tb.reset_faults()
                print(f"  {name} schedule: {time.monotonic() - t0:.1f} s", flush=True)
    except (RuntimeError, AssertionError) as exc:
        print(f"soak failed: {exc}")
        return 1
    print(
        f"soak on {HOSTS} loopback sshd hosts (minimegatron tp=1 pp=2 dp=2, 3 standbys, collective "
        f"timeout {args.pg_timeout_s:g} s); seconds from the injection"
    )
    print(f"  {'class':<6} {'policy':<9} {'detect':>7} {'localize':>8} {'MTTR':>7}  evicted")
    for (cls, _, _), w, b in zip(FAULTS, results["watch"], results["baseline"], strict=True):
        for name, row in (("watch", w), ("baseline", b)):
            print(
                f"  {cls:<6} {name:<9} {_s(row.detect)} {_s(row.localize):>8} {_s(row.mttr)}  "
                f"{len(row.evicted)} {' '.join(row.evicted)}"
            )
    print(
        "  MTTR baseline / watch: "
        + ", ".join(
            f"{w.cls} {b.mttr / w.mttr:.2f}x"
            for w, b in zip(results["watch"], results["baseline"], strict=True)
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
