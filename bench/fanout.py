"""Fan-out benchmark: the L0 host probe on N loopback hosts, robustctl against ``pdsh -R ssh``.

Starts the SSH testbed (``tests/integration/testbed.py``: one real sshd per host on 127.0.0.2…),
then, interleaved in one process run, ``--repeats`` times each (after one warm-up each):

- ``robustctl diagnose -i INV --level 0 --json`` as a subprocess: the whole product path (CLI start,
  the L0 probes ``host`` and ``nvml`` per host over one reused connection, evaluation, report);
- robustctl's fan-out API in this process (``fan_out`` + ``run_probe(host, "host")`` over
  ``SshTransport``): exactly the work pdsh does, one new connection and one probe per host;
- ``pdsh -R ssh -f C -w HOSTS PYTHON /abs/diagnostics/host.py`` with OpenSSH's defaults (the
  baseline an SRE would type), and the same with ``KexAlgorithms`` set to the key exchange paramiko
  negotiates with this sshd (OpenSSH 9.x's default post-quantum kex costs ~0.1 s CPU per connection
  on each side, which dominates a loopback benchmark on 2 cores).

Each variant's remote side is the same sshd, user, environment and Python. Printed: median wall
seconds, client CPU ms per host (``getrusage`` deltas: RUSAGE_CHILDREN for subprocesses, RUSAGE_SELF
for the in-process API; the sshd servers are the testbed's children but are not reaped until the
end, so their CPU is not counted), hosts answered, and the robustctl/pdsh ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.testbed import Testbed, unavailable_reason

REPO = Path(__file__).resolve().parent.parent
HOST_PROBE = REPO / "diagnostics" / "host.py"


@dataclass
class Variant:
    """One way of fanning out, and its measurements (one entry per repeat)."""

    key: str
    label: str
    run: Callable[[], int]  # returns how many hosts answered with a document
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)

    def median_wall(self) -> float:
        """Median wall seconds over the repeats."""
        return statistics.median(self.wall_s)

    def median_cpu(self) -> float:
        """Median client CPU seconds over the repeats."""
        return statistics.median(self.cpu_s)


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def measure(variant: Variant, *, record: bool = True) -> None:
    """Run ``variant`` once; record wall time, client CPU (children + self) and hosts answered."""
    c0, s0 = _cpu(resource.RUSAGE_CHILDREN), _cpu(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    answered = variant.run()
    wall = time.perf_counter() - t0
    cpu = (_cpu(resource.RUSAGE_CHILDREN) - c0) + (_cpu(resource.RUSAGE_SELF) - s0)
    if record:
        variant.wall_s.append(wall)
        variant.cpu_s.append(cpu)
        variant.answered.append(answered)


def negotiated_kex(tb: Testbed) -> str:
    """The key exchange paramiko agrees with the testbed's sshd (read from paramiko's debug log)."""
    names: list[str] = []

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            msg = record.getMessage()
            if msg.startswith("Kex: "):
                names.append(msg[5:].strip())

    logger = logging.getLogger("paramiko.transport")
    handler, level = Grab(logging.DEBUG), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        tb.connect(0).close()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return names[0] if names else "curve25519-sha256@libssh.org"


def cli_variant(tb: Testbed, inventory: Path, concurrency: int) -> Variant:
    """``robustctl diagnose --level 0 --json`` as a subprocess."""
    exe = Path(sys.executable).parent / "robustctl"
    argv = [str(exe), "diagnose", "-i", str(inventory), "--level", "0", "--json", "-q"]
    argv += ["--concurrency", str(concurrency)]

    def run() -> int:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        try:
            doc = json.loads(p.stdout)
        except ValueError:
            raise RuntimeError(f"robustctl exited {p.returncode} without JSON: {p.stderr[-500:]}") from None
        return sum(1 for h in doc.get("hosts", []) if h.get("outcome") == "ok")

    return Variant("robustctl_cli", "robustctl diagnose --level 0 (CLI)", run)


def api_variant(inventory: Path, concurrency: int) -> Variant:
    """robustctl's fan-out API in-process: one new connection and one ``host`` probe per host."""
    from robustctl.inventory import load_inventory
    from robustctl.probes import run_probe
    from robustctl.transport.fanout import fan_out
    from robustctl.transport.ssh import SshTransport

    hosts = list(load_inventory(inventory).hosts)

    def run() -> int:
        transport = SshTransport()
        try:
            result = fan_out(
                hosts,
                lambda h, deadline: run_probe(transport, h, "host", ["--timeout", "30"], deadline=deadline),
                concurrency=concurrency,
                host_timeout_s=120,
                retries=1,
            )
        finally:
            transport.close()
        return len(result.ok)

    return Variant("robustctl_api", "robustctl fan_out + run_probe(host)", run)


def pdsh_variant(tb: Testbed, concurrency: int, *, kex: str | None) -> Variant:
    """``pdsh -R ssh`` running the host probe file with the same Python on every host."""
    ssh_args = f"-F {tb.ssh_config}" + (f" -oKexAlgorithms={kex}" if kex else "") + " %h"
    env = dict(os.environ, PDSH_SSH_ARGS=ssh_args, PDSH_RCMD_TYPE="ssh")
    hosts = f"{tb.name_prefix}[{1:0{tb.name_width}d}-{tb.n_hosts:0{tb.name_width}d}]"
    argv = ["pdsh", "-R", "ssh", "-f", str(concurrency), "-w", hosts, tb.python, str(HOST_PROBE)]

    def run() -> int:
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
        answered = {line.split(":", 1)[0] for line in p.stdout.splitlines() if '"probe": "host"' in line}
        return len(answered)

    if kex:
        return Variant("pdsh_same_kex", f"pdsh -R ssh, KexAlgorithms={kex}", run)
    return Variant("pdsh", "pdsh -R ssh (OpenSSH defaults)", run)


@contextlib.contextmanager
def _testbed(n: int) -> Iterator[Testbed]:
    with tempfile.TemporaryDirectory(prefix="robustctl-bench-") as d:
        tb = Testbed(Path(d), n)
        try:
            tb.start()
            yield tb
        finally:
            tb.close()


def measure_all(variants: Sequence[Variant], repeats: int) -> None:
    """One unrecorded warm-up run of each variant (page cache, imports, first sshd forks), then
    ``repeats`` rounds that run every variant once, interleaved."""
    for v in variants:
        measure(v, record=False)
    for r in range(repeats):
        for v in variants:
            measure(v)
        print(f"bench: repeat {r + 1}/{repeats} done", file=sys.stderr)


def report(
    variants: Sequence[Variant],
    args: argparse.Namespace,
    kex: str,
    *,
    benchmark: str,
    pairs: Sequence[tuple[str, str]],
    title: str,
    width: int,
) -> int:
    """Print the variants' medians and the ``a/b`` ratios of ``pairs`` (a table, or JSON with ``--json``).

    ``args`` gives ``hosts``, ``concurrency``, ``repeats`` and ``json``. Returns 0.
    """
    n = args.hosts
    by = {v.key: v for v in variants}
    ratios = {
        f"{a}/{b}": {
            "wall": round(by[a].median_wall() / by[b].median_wall(), 3),
            "cpu_per_host": round(by[a].median_cpu() / by[b].median_cpu(), 3),
        }
        for a, b in pairs
    }
    doc = {
        "benchmark": benchmark,
        "hosts": n,
        "concurrency": args.concurrency,
        "repeats": args.repeats,
        "cpu_count": os.cpu_count(),
        "paramiko_kex": kex,
        "variants": {
            v.key: {
                "label": v.label,
                "median_wall_s": round(v.median_wall(), 4),
                "median_client_cpu_ms_per_host": round(1000 * v.median_cpu() / n, 2),
                "wall_s": [round(x, 4) for x in v.wall_s],
                "answered": v.answered,
            }
            for v in variants
        },
        "ratios": ratios,
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"{title}, concurrency {args.concurrency}, {os.cpu_count()} CPUs, median of {args.repeats} runs")
    print(f"{'variant':<{width}} {'wall s':>8} {'client CPU ms/host':>19} {'answered':>9}")
    for v in variants:
        print(
            f"{v.label:<{width}} {v.median_wall():>8.3f} {1000 * v.median_cpu() / n:>19.1f} "
            f"{min(v.answered):>5}/{n}"
        )
    for key, r in ratios.items():
        print(f"ratio {key:<30} wall {r['wall']:.2f}x   client CPU/host {r['cpu_per_host']:.2f}x")
    short = [v.label for v in variants if min(v.answered) < n]
    if short:
        print(f"note: not every host answered ok in: {', '.join(short)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table and ratios (``--json``: one JSON document instead)."""
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=64, help="loopback hosts (default 64)")
    ap.add_argument("--repeats", type=int, default=5, help="measured runs per variant (default 5)")
    ap.add_argument("--concurrency", type=int, default=64, help="fan-out width for every tool (default 64)")
    ap.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    args = ap.parse_args(argv)

    reason = unavailable_reason()
    if reason is None and not shutil.which("pdsh"):
        reason = "pdsh is missing: bash scripts/testbed-deps.sh"
    if reason:
        print(f"bench: cannot run: {reason}", file=sys.stderr)
        return 1

    with _testbed(args.hosts) as tb:
        print(
            f"bench: {tb.n_hosts} sshd on 127.0.0.2-{tb.address(-1)}:{tb.port} "
            f"started in {tb.startup_s:.2f}s",
            file=sys.stderr,
        )
        inventory = tb.write_inventory(
            tb.workdir / "inventory.yaml",
            diagnose={"concurrency": args.concurrency, "host_timeout_s": 120, "deadline_s": 600},
        )
        kex = negotiated_kex(tb)
        variants = [
            cli_variant(tb, inventory, args.concurrency),
            api_variant(inventory, args.concurrency),
            pdsh_variant(tb, args.concurrency, kex=None),
            pdsh_variant(tb, args.concurrency, kex=kex),
        ]
        measure_all(variants, args.repeats)

    return report(
        variants,
        args,
        kex,
        benchmark="fanout-l0",
        pairs=[(a, b) for a in ("robustctl_cli", "robustctl_api") for b in ("pdsh", "pdsh_same_kex")],
        title=f"L0 host-probe fan-out to {args.hosts} loopback hosts",
        width=56,
    )
