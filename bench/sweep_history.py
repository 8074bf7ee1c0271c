"""The sweep history over a simulated year: store size and the ``history`` / ``lemons`` query times.

2,000 hosts (``--hosts``) × the 15 L0 checks, one sweep every 5 minutes for ``--days`` days (365:
105,120 sweeps), written through :func:`robustctl.sweep.policy.record_sweep` (the history with each
host's verdict after the debounce policy, as ``run_sweep`` records it) with a fake clock, then
:func:`robustctl.commands.history.run_history` (``robustctl history HOST --since 7d``) and
:func:`robustctl.commands.history.run_lemons` (``robustctl lemons --since 30d``) run on the store.

Fault model (per host and day, seeded; every event begins and ends at a sweep):

* hardware failure (XID 79/48/94, GPU missing, uncorrectable ECC, row-remap failure, read-only disk):
  0.0038, CRITICAL until repaired 1-3 days later. Llama 3 (arXiv 2407.21783, §3.3.4): 419 unexpected
  interruptions in 54 days on 16,384 GPUs (2,048 8-GPU hosts), 0.0038 per host-day. 1% of the hosts
  are lemons failing 10× as often (Kokolis et al., HPCA 2025: a small set of nodes fail repeatedly).
* network flap (``host.nic``/``host.ib``) caught by a sweep: 0.05, CRITICAL for 1-2 sweeps (an
  assumption: a link must be down at the moment of a sweep to be seen; Llama 3 counts network faults
  as 8.4% of its interruptions, links that flap without failing a job are more frequent). The
  debounce names a host for a flap seen at two sweeps in a row (twice within 5 minutes), not for
  one seen once: only the named ones are failures.
* hot GPU (``nvml.temperature``): 0.02, WARNING for 1-6 sweeps; load or memory: 0.05, 1-12 sweeps.
* unreachable (the host's verdict UNKNOWN, no check observed): 0.01, 1-3 sweeps.

How the year goes through the history code fast: the sweep's writer only writes rows for what
changed (a state change, a counter, the sweep's row), so the replay calls ``record()`` once per
sweep — as the sweep does — with the full observations (16 per host) of the hosts whose checks
change at that sweep (all hosts in the first sweep), plus the hosts with a CRITICAL network fault
under way (every sighting counts for the debounce), and ``hosts_swept`` for the sweep's row; a
host left out keeps its rows as they are. What this leaves out, said plainly: the per-sweep
``last_seen``/``streak``/``seen`` bumps of hosts with no change (fixed-size columns of rows that
exist anyway: the file's size does not depend on them). ``prune()`` runs after every sweep as in
``run_sweep``.

Printed: sweeps and changes written, write time per sweep, the store's size (MB, after a WAL
checkpoint) and rows per table, and each query's median time as a ratio against a baseline run in
the same process on the same file: the one plain indexed ``SELECT`` (sqlite3, an open connection, no
robustctl code) that fetches the rows the command reports: the host's changes since 7 days for
``history`` (asked of the host with the most changes in those 7 days and of a median host), the
failures since 30 days for ``lemons``. The ratio is what the command adds: opening the store
(schema check), the host's states and counters, the evict-and-return history, the result types.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

SWEEP_S = 300.0
START = 1_767_225_600.0  # 2026-01-01 00:00 UTC
L0_CHECKS = (
    "host.clock", "host.disk", "host.ib", "host.load", "host.memory", "host.nic", "host.xid",
    "nvml.count", "nvml.ecc", "nvml.nvlink", "nvml.pcie", "nvml.retired_pages", "nvml.row_remap",
    "nvml.temperature", "nvml.throttle",
)  # fmt: skip
HARDWARE = (  # (check, detail) of a hardware failure, weighted by repetition
    ("host.xid", "0000:3b:00: XID 79 on 0000:3b:00 (GPU has fallen off the bus) x1: evict"),
    ("host.xid", "0000:5d:00: XID 48 on 0000:5d:00 (double-bit ECC error) x1: evict"),
    ("host.xid", "0000:9a:00: XID 94 on 0000:9a:00 (contained ECC error) x2: reset GPU"),
    ("nvml.count", "7 GPU(s) visible, 8 expected"),
    ("nvml.ecc", "gpu3: 2 uncorrectable ECC errors (volatile)"),
    ("nvml.row_remap", "gpu5: row remapping failed"),
    ("host.disk", "/raid is mounted read-only"),
)
# (kind, per host-day, (min, max) sweeps it lasts, status)
RATES = {
    "hardware": (0.0038, (288, 864), "critical"),
    "flap": (0.05, (1, 2), "critical"),
    "thermal": (0.02, (1, 6), "warning"),
    "load": (0.05, (1, 12), "warning"),
    "unreachable": (0.01, (1, 3), "unknown"),
}
LEMON_FRACTION, LEMON_FACTOR = 0.01, 10.0


def _events(
    hosts: list[str], sweeps: int, rng: random.Random
) -> tuple[list[tuple[int, int, str, str, str, str]], set[str]]:
    """(start sweep, end sweep, host, check, status, detail) of every fault of the period, and the
    hosts seeded as lemons."""
    lemons = set(rng.sample(hosts, max(1, int(len(hosts) * LEMON_FRACTION))))
    out = []
    for h in hosts:
        for kind, (rate, (lo, hi), status) in RATES.items():
            per_sweep = rate * SWEEP_S / 86_400 * (LEMON_FACTOR if kind == "hardware" and h in lemons else 1)
            k = int(rng.expovariate(per_sweep))
            while k < sweeps:
                n = rng.randint(lo, hi)
                if kind == "hardware":
                    check, detail = rng.choice(HARDWARE)
                elif kind == "flap":
                    check = rng.choice(("host.nic", "host.ib"))
                    detail = (
                        "eth0: eth0 link is down (operstate down, carrier 0)"
                        if check == "host.nic"
                        else ("mlx5_0/1: port DOWN (phys Disabled), link_downed 1")
                    )
                elif kind == "thermal":
                    check, detail = (
                        "nvml.temperature",
                        f"gpu{rng.randrange(8)}: {rng.randint(85, 89)} °C (warning at 85 °C)",
                    )
                elif kind == "load":
                    check = rng.choice(("host.load", "host.memory"))
                    detail = (
                        "load 1/5/15 min 212/198/160 on 192 CPUs"
                        if check == "host.load"
                        else ("MemAvailable 3.1% of 2015 GiB")
                    )
                else:
                    check, detail = "(host)", "timed out after 60 s"
                out.append((k, k + n, h, check, status, detail))
                k += n + int(rng.expovariate(per_sweep))
    return out, lemons


def _observations(host: str, faults: dict[str, list[tuple[str, str]]]) -> list[object]:
    from robustctl.models import Status
    from robustctl.sweep.history import HOST_CHECK, Observation

    if faults.get(HOST_CHECK):
        return [Observation(host, HOST_CHECK, Status.UNKNOWN, faults[HOST_CHECK][-1][1])]
    obs = []
    for c in L0_CHECKS:
        if faults.get(c):
            status, detail = max(faults[c], key=lambda f: Status(f[0]).severity)
            obs.append(Observation(host, c, Status(status), detail))
        elif c == "nvml.retired_pages":
            obs.append(Observation(host, c, Status.NOT_APPLICABLE, "page retirement not supported"))
        else:
            obs.append(Observation(host, c, Status.OK, "ok"))
    worst = max(obs, key=lambda o: o.status.severity)
    return [Observation(host, HOST_CHECK, worst.status, worst.detail), *obs]


def simulate(path: Path, n_hosts: int, days: float, seed: int) -> dict[str, float]:
    """Write the simulated period into the store at ``path``; returns counts and write timings."""
    from robustctl.config import SweepSettings
    from robustctl.store import Store
    from robustctl.sweep import history
    from robustctl.sweep.policy import CheckClass, check_class, record_sweep

    sweeps = int(days * 86_400 / SWEEP_S)
    rng = random.Random(seed)
    hosts = [f"node{i:04d}" for i in range(1, n_hosts + 1)]
    events, seeded = _events(hosts, sweeps, rng)
    settings = SweepSettings()
    debounced: dict[str, int] = defaultdict(int)  # CRITICAL network faults under way, per host
    starts: dict[int, list[int]] = defaultdict(list)
    for i, e in enumerate(events):
        starts[e[0]].append(i)
    ending: list[tuple[int, int]] = []  # heap of (end sweep, event index)
    active: dict[str, dict[str, list[tuple[str, str]]]] = defaultdict(lambda: defaultdict(list))
    now = [START]
    changes = 0
    slow: list[float] = []
    t0 = time.perf_counter()
    with Store.open(path, clock=lambda: now[0]) as store:
        for k in range(sweeps):
            now[0] = START + k * SWEEP_S + 40.0  # a sweep of 2,000 hosts takes ~40 s
            touched: set[str] = set(hosts) if k == 0 else set()
            while ending and ending[0][0] <= k:
                _, i = heapq.heappop(ending)
                _, _, h, check, status, detail = events[i]
                active[h][check].remove((status, detail))
                touched.add(h)
                if status == "critical" and check_class(check) is CheckClass.NETWORK:
                    debounced[h] -= 1
            for i in starts.pop(k, ()):
                _, end, h, check, status, detail = events[i]
                active[h][check].append((status, detail))
                heapq.heappush(ending, (end, i))
                touched.add(h)
                if status == "critical" and check_class(check) is CheckClass.NETWORK:
                    debounced[h] += 1
            touched.update(h for h, k_ in debounced.items() if k_ > 0)
            obs = [o for h in sorted(touched) for o in _observations(h, active[h])]
            w0 = time.perf_counter()
            rec, _ = record_sweep(
                store,
                obs,  # type: ignore[arg-type]
                settings,
                started_at=now[0] - 40.0,
                hosts_swept=n_hosts,
            )
            history.prune(store, rec.at - 400 * 86_400)
            if k and touched:
                slow.append(time.perf_counter() - w0)
            changes += len(rec.changes)
    wall = time.perf_counter() - t0
    return {
        "sweeps": sweeps,
        "events": len(events),
        "changes": changes,
        "write_wall_s": wall,
        "write_ms_per_sweep": 1000 * wall / sweeps,
        "write_ms_per_sweep_with_changes": 1000 * statistics.median(slow) if slow else 0.0,
        "end": START + sweeps * SWEEP_S,
        "seeded_lemons": sorted(seeded),  # type: ignore[dict-item]
    }


def _timed(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: Sequence[str] | None = None) -> int:
    """Simulate, measure, print a table (``--json``: one JSON document)."""
    ap = argparse.ArgumentParser(prog="python -m bench sweep-history", description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=2000, help="hosts (default 2000)")
    ap.add_argument("--days", type=float, default=365.0, help="days of 5-minute sweeps (default 365: a year)")
    ap.add_argument("--repeats", type=int, default=21, help="runs of each query (default 21, median)")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--dir", type=Path, default=None, help="where the store is written (default: a temp dir)")
    ap.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    args = ap.parse_args(list(argv) if argv is not None else None)
    from robustctl.commands.history import HistoryRequest, LemonsRequest, run_history, run_lemons
    from robustctl.sweep.history import HOST_CHECK

    with tempfile.TemporaryDirectory(prefix="bench-sweep-history-", dir=args.dir) as d:
        path = Path(d) / "state.db"
        print(
            f"bench: simulating {args.days:g} days of 5-minute sweeps of {args.hosts} hosts", file=sys.stderr
        )
        sim = simulate(path, args.hosts, args.days, args.seed)
        end = sim["end"]
        con = sqlite3.connect(path)
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        rows = {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in ("check_changes", "check_state", "host_counters", "sweeps")}  # fmt: skip
        size_mb = path.stat().st_size / 1e6
        since7, since30 = end - 7 * 86_400, end - 30 * 86_400
        # the hosts to ask about: the one with the most changes in the last 7 days, and a median one
        week = con.execute(
            "SELECT host, COUNT(*) FROM check_changes WHERE at>=? GROUP BY host ORDER BY 2 DESC, 1", (since7,)
        ).fetchall()
        busy = week[0][0]
        typical = sorted(
            con.execute("SELECT host, COUNT(*) FROM check_changes GROUP BY host").fetchall(),
            key=lambda r: r[1],
        )[rows["host_counters"] // 2][0]
        cols = "host, check_name, at, from_status, to_status, detail, source"

        def select_host(host: str) -> Callable[[], object]:
            sql = f"SELECT {cols} FROM check_changes WHERE host=? AND at>=? ORDER BY id"
            return lambda: con.execute(sql, (host, since7)).fetchall()

        def select_failures() -> list[object]:
            sql = f"SELECT {cols} FROM check_changes WHERE check_name=? AND to_status=? AND at>=? ORDER BY id"
            return con.execute(sql, (HOST_CHECK, "critical", since30)).fetchall()

        def hist(host: str) -> Callable[[], object]:
            return lambda: run_history(
                HistoryRequest(host, since_s=7 * 86_400, state=path), clock=lambda: end
            )

        def lemons() -> object:
            return run_lemons(LemonsRequest(since_s=30 * 86_400, state=path), clock=lambda: end)

        t = {
            name: _timed(fn, args.repeats)
            for name, fn in (
                ("base_busy", select_host(busy)), ("history_busy", hist(busy)),
                ("base_typical", select_host(typical)), ("history_typical", hist(typical)),
                ("base_lemons", select_failures), ("lemons", lemons),
            )
        }  # fmt: skip
        n_busy = len(
            run_history(HistoryRequest(busy, since_s=7 * 86_400, state=path), clock=lambda: end).changes
        )
        n_typical = len(
            run_history(HistoryRequest(typical, since_s=7 * 86_400, state=path), clock=lambda: end).changes
        )
        n_failures = len(select_failures())
        found = run_lemons(LemonsRequest(since_s=30 * 86_400, state=path), clock=lambda: end).lemons
        seeded_hosts = set(sim["seeded_lemons"])  # type: ignore[call-overload]
        seeded_found = [lm for lm in found if lm.host in seeded_hosts]
        con.close()

    doc = {
        "benchmark": "sweep-history",
        "hosts": args.hosts,
        "days": args.days,
        **{
            k: round(v, 3) if isinstance(v, float) else v
            for k, v in sim.items()
            if k not in ("end", "seeded_lemons")
        },
        "store_mb": round(size_mb, 2),
        "rows": rows,
        "bytes_per_change": round(size_mb * 1e6 / max(1, rows["check_changes"]), 1),
        "ms": {k: round(1000 * v, 3) for k, v in t.items()},
        "history_7d_changes": {"busy_host": n_busy, "typical_host": n_typical},
        "lemons_30d_failures": n_failures,
        "lemons_30d_found": len(found),
        "lemons_30d_found_seeded": len(seeded_found),
        "seeded_lemons": len(seeded_hosts),
        "ratios": {
            "history_7d_busy_host/select": round(t["history_busy"] / t["base_busy"], 2),
            "history_7d_typical_host/select": round(t["history_typical"] / t["base_typical"], 2),
            "lemons_30d/select": round(t["lemons"] / t["base_lemons"], 2),
        },
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"sweep history: {args.hosts} hosts x {len(L0_CHECKS)} L0 checks, {sim['sweeps']} sweeps "
          f"({args.days:g} days), {sim['events']} simulated faults")  # fmt: skip
    print(f"  written in {sim['write_wall_s']:.1f} s: {doc['write_ms_per_sweep']} ms per sweep, "
          f"{doc['write_ms_per_sweep_with_changes']} ms (median) for a sweep with changes")  # fmt: skip
    print(f"  store {doc['store_mb']} MB: {rows['check_changes']} changes ({doc['bytes_per_change']} B each, "
          f"indexes and other tables included), {rows['sweeps']} sweeps, {rows['check_state']} check states")  # fmt: skip
    rows_out = (
        (f"history HOST --since 7d, busiest host ({n_busy} changes)", "history_busy", "base_busy"),
        (f"history HOST --since 7d, median host ({n_typical} changes)", "history_typical", "base_typical"),
        (f"lemons --since 30d ({n_failures} failures, {len(found)} lemons)", "lemons", "base_lemons"),
    )
    print(f"  lemons found: {len(found)}, of which {len(seeded_found)} of the {len(seeded_hosts)} hosts "
          "seeded to fail 10x as often")  # fmt: skip
    print(f"  {'query':<58} {'ms':>8} {'SELECT ms':>10} {'ratio':>8}")
    for label, k, base in rows_out:
        print(f"  {label:<58} {1000 * t[k]:>8.3f} {1000 * t[base]:>10.3f} {t[k] / t[base]:>7.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
