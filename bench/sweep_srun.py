"""``robustctl sweep --transport srun`` over the Slurm test bed's nodes against a sweep over SSH.

The same L0 sweep (the probes ``host`` and ``nvml``, the history written, the debounce policy) as a
``robustctl sweep`` subprocess, twice:

- ``srun``: every node of the Slurm test bed (``tests/integration/slurmbed.py``: munged, slurmctld
  and N slurmd on 127.0.0.1) in one Slurm step (``--transport srun``: slurmd's fan-out, one JSON
  document per node on stdout);
- ``ssh``: N sshd hosts of the SSH test bed (``tests/integration/testbed.py``: one real sshd per host
  on 127.0.0.2…), one paramiko connection per host. The Slurm test bed's nodes cannot be reached
  by SSH (every slurmd runs on 127.0.0.1 with no sshd of its own), so the SSH side is the sshd
  test bed with the same host count.

Each variant runs once as a warm-up, then ``--repeats`` times interleaved. Printed: median wall
seconds, client CPU (this machine's side: the ``robustctl`` process and what it starts, srun
included, from RUSAGE_CHILDREN deltas; slurmd/slurmstepd and sshd are the nodes' side and not
counted, they are not reaped until the test beds close), hosts answered, and the srun/ssh ratios.
Both test beds run on this machine, so the probes' own CPU competes with the clients'.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.fanout import Variant, _testbed, measure
from bench.sweep_fanout import sweep_variant
from tests.integration import slurmbed
from tests.integration.testbed import unavailable_reason


def srun_inventory(bed: slurmbed.SlurmBed, path: Path) -> Path:
    """An inventory of the bed's nodes reached through ``transport: srun`` (as the integration test's)."""
    path.write_text(
        f"hosts:\n  - name: sn[1-{bed.n_nodes}]\n    transport: srun\n"
        f"python:\n  path: {sys.executable}\n"
        f"scheduler:\n  kind: slurm\n  slurm:\n    conf: {bed.conf}\n"
        "diagnose:\n  host_timeout_s: 120\n  deadline_s: 600\n"
    )
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print its table and ratios (``--json``: one JSON document instead)."""
    ap = argparse.ArgumentParser(prog="python -m bench sweep-srun", description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=16, help="Slurm nodes and sshd hosts (default 16, ≤ 64)")
    ap.add_argument("--repeats", type=int, default=3, help="measured runs per variant (default 3)")
    ap.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    args = ap.parse_args(list(argv) if argv is not None else None)

    reason = slurmbed.unavailable_reason() or unavailable_reason()
    if reason:
        print(f"bench: cannot run: {reason}", file=sys.stderr)
        return 1
    n = args.nodes
    with tempfile.TemporaryDirectory(prefix="robustctl-bench-slurm-") as d, _testbed(n) as tb:
        bed = slurmbed.SlurmBed(Path(d), n)
        bed.start(timeout_s=60)
        try:
            print(f"bench: {n} slurmd on 127.0.0.1 (idle after {bed.startup_s:.1f} s), "
                  f"{tb.n_hosts} sshd on 127.0.0.2-{tb.address(-1)}", file=sys.stderr)  # fmt: skip
            ssh_inv = tb.write_inventory(
                tb.workdir / "inventory.yaml",
                diagnose={"concurrency": 64, "host_timeout_s": 120, "deadline_s": 600},
            )
            srun = sweep_variant(srun_inventory(bed, Path(d) / "inventory.yaml"), Path(d) / "state.db")
            srun = Variant("srun", "robustctl sweep --transport srun (one Slurm step)", srun.run)
            ssh = sweep_variant(ssh_inv, tb.workdir / "state.db")
            ssh = Variant("ssh", "robustctl sweep over SSH (paramiko, sshd test bed)", ssh.run)
            old = os.environ.get("SLURM_CONF")
            os.environ["SLURM_CONF"] = str(bed.conf)  # srun finds the bed's controller either way
            try:
                for v in (srun, ssh):
                    measure(v, record=False)
                for r in range(args.repeats):
                    for v in (srun, ssh):
                        measure(v)
                    print(f"bench: repeat {r + 1}/{args.repeats} done", file=sys.stderr)
            finally:
                if old is None:
                    os.environ.pop("SLURM_CONF", None)
                else:
                    os.environ["SLURM_CONF"] = old
        finally:
            bed.close()

    ratio = {
        "wall": round(srun.median_wall() / ssh.median_wall(), 3),
        "client_cpu": round(srun.median_cpu() / ssh.median_cpu(), 3),
    }
    doc = {
        "benchmark": "sweep-srun",
        "nodes": n,
        "repeats": args.repeats,
        "cpu_count": os.cpu_count(),
        "variants": {
            v.key: {
                "label": v.label,
                "median_wall_s": round(v.median_wall(), 4),
                "median_client_cpu_ms_per_host": round(1000 * v.median_cpu() / n, 2),
                "wall_s": [round(x, 4) for x in v.wall_s],
                "cpu_s": [round(x, 4) for x in v.cpu_s],
                "answered": v.answered,
            }
            for v in (srun, ssh)
        },
        "ratios": {"srun/ssh": ratio},
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"L0 sweep of {n} hosts, {os.cpu_count()} CPUs, median of {args.repeats} runs")
    print(f"{'variant':<56} {'wall s':>8} {'client CPU ms/host':>19} {'answered':>9}")
    for v in (srun, ssh):
        print(
            f"{v.label:<56} {v.median_wall():>8.3f} {1000 * v.median_cpu() / n:>19.1f} {min(v.answered):>5}/{n}"
        )
    print(f"ratio srun/ssh: wall {ratio['wall']:.2f}x   client CPU {ratio['client_cpu']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
