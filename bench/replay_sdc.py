"""replay-sdc benchmark: rounds against bisection, and the cost of fanning out a round's groups.

1. **Rounds** (from the grouping, no run): for M = 24 … 4,096 machines (TP 8 = GPUs per machine,
   PP 2, DP = M/2, the default k of :func:`robustctl.sdc.grouping.plan_grouping`), dual-phase replay
   needs 2 rounds of n groups in parallel (ByteRobust §4.2); bisection needs ⌈log2 M⌉ rounds, one
   after the other. Printed: m, n, k, both round counts and bisection/dual.
2. **Fan-out** (measured, local transport, this process): the built-in replay on ``--machines``
   local hosts (Fig. 6 by default: M 24, PP 2, DP 12, k 2 → 6 groups of 4), one group replayed
   alone (:func:`robustctl.sdc.replay.run_group`) against one whole round of n groups
   (:func:`robustctl.sdc.replay.run_round`, ``concurrency // m`` groups at once), interleaved
   ``--repeats`` times. Printed: median wall seconds and round/group, and round/(n · group): 1.0
   would be a round costing n groups run one after the other; on a machine with fewer cores than
   the round's ranks the groups share the CPU, so the first ratio is not the fan-out's overhead
   alone (the second is its upper bound).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

from robustctl.config import DiagnoseSettings, ParallelLayout, PythonSettings, SshSettings
from robustctl.inventory import Host
from robustctl.sdc.grouping import plan_grouping
from robustctl.sdc.replay import ReplaySpec, Workload, resolve, run_group, run_round
from robustctl.transport.pool import TransportPool

SIZES = (24, 64, 128, 256, 512, 1024, 2048, 4096)


def rounds_table() -> None:
    """Part 1: rounds needed, dual-phase vs bisection, from the grouping."""
    print(f"{'M':>6} {'m':>4} {'n':>5} {'k':>4} {'dual':>5} {'bisect':>7} {'bisect/dual':>12}")
    for machines in SIZES:
        g = plan_grouping(machines, ParallelLayout(tp=8, pp=2, dp=machines // 2), 8)
        bisect = math.ceil(math.log2(machines))
        print(f"{machines:>6} {g.m:>4} {g.n:>5} {g.k:>4} {2:>5} {bisect:>7} {bisect / 2:>12.2f}")


def fanout(machines: int, pp: int, k: int | None, steps: int, repeats: int) -> None:
    """Part 2: one round's wall time against one group's, local transport, same process."""
    hosts = tuple(
        Host(f"node{i:02d}", "127.0.0.1", "local", SshSettings(), PythonSettings(path=sys.executable))
        for i in range(machines)
    )
    grouping = plan_grouping(machines, ParallelLayout(tp=1, pp=pp, dp=machines // pp), 1, k)
    settings = DiagnoseSettings(concurrency=64, host_timeout_s=300, retries=0)
    spec = ReplaySpec(hosts, grouping, Workload(steps=steps), settings, round_deadline_s=600)
    print(
        f"fan-out: M {machines}, PP {pp}, k {grouping.k} -> {grouping.n} groups of m {grouping.m}, "
        f"{steps} steps, local transport"
    )
    pool = TransportPool()
    group_s: list[float] = []
    round_s: list[float] = []
    try:
        addresses, missing = resolve(spec, pool)
        group = grouping.phases[0].groups[0]
        for rep in range(repeats + 1):  # the first of each is a warm-up
            t0 = time.perf_counter()
            run = run_group(spec, pool, group, addresses, missing, time.monotonic() + 300)
            g = time.perf_counter() - t0
            t0 = time.perf_counter()
            rnd = run_round(spec, pool, 1, addresses=addresses, missing=missing)
            r = time.perf_counter() - t0
            ok = run.ran and all(x.ran for x in rnd.groups)
            if not ok:
                print(f"  repeat {rep}: some group did not run: {run.error or [x.error for x in rnd.groups]}")
                return
            if rep:
                group_s.append(g)
                round_s.append(r)
    finally:
        pool.close()
    g, r = statistics.median(group_s), statistics.median(round_s)
    print(f"  one group alone   {g:7.2f} s (median of {repeats})")
    print(
        f"  one round         {r:7.2f} s ({grouping.n} groups, {min(grouping.n, 64 // grouping.m)} at once)"
    )
    print(f"  round / group     {r / g:7.2f}x")
    print(f"  round / (n*group) {r / (grouping.n * g):7.2f}x")


def main(argv: list[str]) -> int:
    """``python -m bench replay-sdc [--machines M --pp P --k K --steps S --repeats R --rounds-only]``."""
    p = argparse.ArgumentParser(prog="python -m bench replay-sdc")
    p.add_argument("--machines", type=int, default=24)
    p.add_argument("--pp", type=int, default=2)
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--rounds-only", action="store_true", help="only the rounds table (no run)")
    args = p.parse_args(argv)
    rounds_table()
    if args.rounds_only:
        return 0
    try:
        import torch  # noqa: F401
    except ImportError:
        print("fan-out: skipped (torch is not installed)")
        return 0
    fanout(args.machines, args.pp, args.k, args.steps, args.repeats)
    return 0
