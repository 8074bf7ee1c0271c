"""``robustctl sweep`` of N loopback sshd hosts against ``pdsh -R ssh`` running the same probes.

Starts the SSH test bed (``tests/integration/testbed.py``: one real sshd per host on 127.0.0.2…)
and, interleaved, ``--repeats`` times each after one warm-up each:

- ``robustctl sweep -i INV --state S --json -q`` as a subprocess: the whole product path (CLI start,
  the store and its lock, the L0 probes ``host`` and ``nvml`` on every host over one connection per
  host, evaluation, the history written, the debounce policy, the report);
- ``pdsh -R ssh -f C -w HOSTS 'PY host.py; PY nvml.py'``: the same two probe files with the same
  Python on every host, with OpenSSH's defaults, and with ``KexAlgorithms`` set to the key exchange
  paramiko negotiates with this sshd (OpenSSH 9.x's post-quantum default costs ~0.1 s of CPU per
  connection on each side; see :mod:`bench.fanout`).

Printed: median wall seconds, client CPU ms per host (RUSAGE_CHILDREN deltas), hosts answered, and
the sweep/pdsh ratios of both.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.fanout import REPO, Variant, _testbed, measure_all, negotiated_kex, report
from tests.integration.testbed import Testbed, unavailable_reason

PROBES = (REPO / "diagnostics" / "host.py", REPO / "diagnostics" / "nvml.py")


def sweep_variant(inventory: Path, state: Path) -> Variant:
    """``robustctl sweep`` as a subprocess; hosts answered = hosts whose verdict is not UNKNOWN."""
    exe = Path(sys.executable).parent / "robustctl"
    argv = [str(exe), "sweep", "-i", str(inventory), "--state", str(state), "--json", "-q"]

    def run() -> int:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        try:
            doc = json.loads(p.stdout)
        except ValueError:
            raise RuntimeError(
                f"robustctl sweep exited {p.returncode} without JSON: {p.stderr[-500:]}"
            ) from None
        return sum(1 for h in doc.get("hosts", []) if h.get("status") != "unknown")

    return Variant("robustctl_sweep", "robustctl sweep (CLI, L0, history written)", run)


def pdsh_variant(tb: Testbed, concurrency: int, *, kex: str | None) -> Variant:
    """``pdsh -R ssh`` running both L0 probe files in one session per host."""
    ssh_args = f"-F {tb.ssh_config}" + (f" -oKexAlgorithms={kex}" if kex else "") + " %h"
    env = dict(os.environ, PDSH_SSH_ARGS=ssh_args, PDSH_RCMD_TYPE="ssh")
    hosts = f"{tb.name_prefix}[{1:0{tb.name_width}d}-{tb.n_hosts:0{tb.name_width}d}]"
    remote = "; ".join(f"{tb.python} {p}" for p in PROBES)
    argv = ["pdsh", "-R", "ssh", "-f", str(concurrency), "-w", hosts, remote]

    def run() -> int:
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
        got: dict[str, set[str]] = {}
        for line in p.stdout.splitlines():
            host, _, rest = line.partition(":")
            for probe in ("host", "nvml"):
                if f'"probe": "{probe}"' in rest:
                    got.setdefault(host, set()).add(probe)
        return sum(1 for s in got.values() if s == {"host", "nvml"})

    if kex:
        return Variant("pdsh_same_kex", f"pdsh -R ssh host.py; nvml.py, KexAlgorithms={kex}", run)
    return Variant("pdsh", "pdsh -R ssh host.py; nvml.py (OpenSSH defaults)", run)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print its table and ratios (``--json``: one JSON document instead)."""
    ap = argparse.ArgumentParser(prog="python -m bench sweep-fanout", description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=96, help="loopback hosts (default 96; 250 documented)")
    ap.add_argument("--repeats", type=int, default=3, help="measured runs per variant (default 3)")
    ap.add_argument("--concurrency", type=int, default=64, help="fan-out width for every tool (default 64)")
    ap.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    args = ap.parse_args(list(argv) if argv is not None else None)

    reason = unavailable_reason()
    if reason is None and not shutil.which("pdsh"):
        reason = "pdsh is missing: bash scripts/testbed-deps.sh"
    if reason:
        print(f"bench: cannot run: {reason}", file=sys.stderr)
        return 1

    with _testbed(args.hosts) as tb:
        print(f"bench: {tb.n_hosts} sshd on 127.0.0.2-{tb.address(-1)}:{tb.port}", file=sys.stderr)
        inventory = tb.write_inventory(
            tb.workdir / "inventory.yaml",
            diagnose={"concurrency": args.concurrency, "host_timeout_s": 120, "deadline_s": 600},
        )
        kex = negotiated_kex(tb)
        variants = [
            sweep_variant(inventory, tb.workdir / "state.db"),
            pdsh_variant(tb, args.concurrency, kex=None),
            pdsh_variant(tb, args.concurrency, kex=kex),
        ]
        measure_all(variants, args.repeats)

    return report(
        variants,
        args,
        kex,
        benchmark="sweep-fanout",
        pairs=[("robustctl_sweep", b) for b in ("pdsh", "pdsh_same_kex")],
        title=f"sweep of {args.hosts} loopback hosts (L0: host + nvml probes)",
        width=72,
    )


if __name__ == "__main__":
    raise SystemExit(main())
