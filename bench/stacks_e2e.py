"""End-to-end ``robustctl stacks`` on the 16-rank test-bed job: time from start to named suspects.

Starts 4 loopback sshd hosts and the minimegatron job (tp=2, pp=2, dp=4, 4 ranks per host), hangs
one rank in compute, then times :func:`robustctl.stacks.live.stacks_hang` (collection through
each host's sshd, clustering, blame) until the suspects are named, two ways in the same run: py-spy
over SSH only (``debug_server=False``), and through each rank's in-job agent debug server (the
default; py-spy the fallback per rank). The baseline, run in the same process, is one py-spy
collection alone, so the ratios show what analysis adds to it and what the debug-server path costs
or saves against py-spy.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print a table; 0 when every run named the hung rank, else 1.

    Args:
        argv: the arguments (``--repeats``); None: ``sys.argv``.

    Returns:
        0 when both paths named the hung rank in every run, else 1.
    """
    ap = argparse.ArgumentParser(prog="python -m bench stacks-e2e", description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="measured runs (default 3)")
    args = ap.parse_args(list(argv) if argv is not None else None)
    sys.path.insert(0, str(REPO))
    from robustctl.inventory import load_inventory
    from robustctl.stacks.collect import DEBUG_SERVER, CollectSettings, collect_stacks
    from robustctl.stacks.live import stacks_hang
    from robustctl.transport.pool import TransportPool
    from tests.integration.jobrunner import MiniJob
    from tests.integration.testbed import Testbed

    work = Path(tempfile.mkdtemp(prefix="bench-stacks-"))
    named = True
    with Testbed(work / "tb", 4) as tb, MiniJob(tb, work / "job", tp=2, pp=2, dp=4, ranks_per_host=4) as job:
        job.start(timeout=180)
        hung = job.rank_at(tp=1, dp=2, pp=0)
        job.set_faults(f"hang:compute:rank={hung}")
        job.wait_stalled(2.0, timeout=60)
        inv_job = load_inventory(job.write_inventory(work / "inv.yaml")).job("mini")
        pool = TransportPool()
        collect_s: list[float] = []
        total_s: list[float] = []
        agent_s: list[float] = []
        via_agent: list[int] = []
        spy_only = CollectSettings(debug_server=False)
        try:
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                collect_stacks(inv_job, pool, settings=spy_only)
                collect_s.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                live = stacks_hang(inv_job, pool, settings=spy_only, samples=1)
                total_s.append(time.perf_counter() - t0)
                named = named and hung in live.report.likely_culprits
                t0 = time.perf_counter()
                live = stacks_hang(inv_job, pool, settings=CollectSettings(), samples=1)
                agent_s.append(time.perf_counter() - t0)
                named = named and hung in live.report.likely_culprits
                via_agent.append(live.collections[-1].source_counts()[DEBUG_SERVER])
        finally:
            pool.close()
    c, t, a = statistics.median(collect_s), statistics.median(total_s), statistics.median(agent_s)
    print(f"stacks end to end, 16 ranks (+ workers) on 4 loopback hosts, median of {args.repeats}")
    print(f"  one py-spy collection (baseline)           {c:6.2f} s")
    print(f"  start -> named suspects, py-spy over SSH   {t:6.2f} s   ratio {t / c:.2f}x the collection")
    print(
        f"  start -> named suspects, debug server      {a:6.2f} s   ratio {a / t:.2f}x py-spy over SSH "
        f"({min(via_agent)}-{max(via_agent)} of 16 ranks via the debug server)"
    )
    print(f"  hung rank named in every run:              {'PASS' if named else 'FAIL'}")
    return 0 if named else 1


if __name__ == "__main__":
    raise SystemExit(main())
