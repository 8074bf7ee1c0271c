"""L3 inter-host all-reduce: ring neighbour pairs, rounds, rendezvous addresses, blame.

Hosts form a ring in inventory order; each neighbour pair runs a two-rank all-reduce (one
``allreduce`` probe per host, ``--rank 0|1 --world-size 2``). Pairs run in rounds in which no
host appears twice, through :func:`robustctl.transport.fanout.fan_out_units` (bounded
concurrency, a per-pair and the global deadline, every pair's outcome kept). A host whose pairs
with both neighbours fail or are slow is the suspect (:func:`blame_pairs`).

**Rendezvous address.** Rank 0 listens on ``--master-addr`` and rank 1 dials it, so it must be the
address at which the *other* host reaches the first one:

- by default the host's inventory ``address`` as written — an IP literal or a name (an address
  defaults to the host's name, as on real clusters: ``node[001-128]`` resolved by DNS or
  ``/etc/hosts``). A name is resolved on the hosts, never replaced by a loopback address;
- with ``diagnose.allreduce.interface`` (e.g. ``ib0``): the IPv4 address the host itself reports
  for that interface, asked before the pairs run with a short command over the transport
  (:func:`robustctl.transport.addresses.address_argv`). A host that reports none gets an UNKNOWN ``allreduce.pair`` check with
  the reason and is left out of the ring;
- ``127.0.0.1`` only for hosts of the ``local`` transport (they are this machine).

Each rank binds its gloo device to its own host's address (``--bind-addr``, same rule), so rank 0
listens only on its host's address and the peers connect to what each rank announced.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from robustctl.checks.allreduce import peak_busbw
from robustctl.checks.peer import peer_outliers
from robustctl.diagnose.levels import allreduce_args
from robustctl.models import CheckResult, Outcome, Status
from robustctl.probes import ProbeDocument, budget_s, command_deadline, run_probe
from robustctl.transport.addresses import lookup_addresses
from robustctl.transport.fanout import fan_out, fan_out_units

if TYPE_CHECKING:
    from robustctl.config import DiagnoseSettings
    from robustctl.diagnose.engine import Engine
    from robustctl.inventory import Host

CHECK = "allreduce.pair"


@dataclass(frozen=True)
class PairResult:
    """Outcome of one two-host all-reduce: ``ok`` when both ranks finished with correct results."""

    pair: tuple[str, str]
    ok: bool
    busbw_gbps: float | None
    error: str | None = None


# -- geometry --------------------------------------------------------------------------------------


def ring_pairs(names: Sequence[str]) -> list[tuple[str, str]]:
    """Neighbour pairs of hosts in a ring: ``[(h0,h1), (h1,h2), ..., (h_{n-1},h0)]``; one pair for n = 2."""
    n = len(names)
    if n < 2:
        return []
    if n == 2:
        return [(names[0], names[1])]
    return [(names[i], names[(i + 1) % n]) for i in range(n)]


def schedule_rounds(pairs: Sequence[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Split pairs into rounds in which no host appears twice (greedy edge colouring; 2-3 rounds on a ring)."""
    rounds: list[list[tuple[str, str]]] = []
    busy: list[set[str]] = []
    for p in pairs:
        for r, used in zip(rounds, busy, strict=True):
            if p[0] not in used and p[1] not in used:
                r.append(p)
                used.update(p)
                break
        else:
            rounds.append([p])
            busy.append(set(p))
    return rounds


def pair_ports(pairs: Sequence[tuple[str, str]], s: DiagnoseSettings) -> dict[tuple[str, str], int]:
    """Rendezvous port of each pair: ``master_port + 1 + i``, wrapping back to ``master_port + 1``
    past 65535 (at least 535 distinct ports, since ``master_port`` ≤ 65000; pairs of one round are
    on different hosts, so only pairs of local-transport hosts, which share 127.0.0.1, could meet)."""
    first = s.allreduce.master_port + 1
    span = 65536 - first
    return {p: first + i % span for i, p in enumerate(pairs)}


# -- addresses -------------------------------------------------------------------------------------


def resolve_addresses(engine: Engine, hosts: Sequence[Host]) -> tuple[dict[str, str], dict[str, str]]:
    """Each host's rendezvous address: ``({name: address}, {name: why there is none})``
    (:func:`lookup_addresses` with the engine's transports, settings and deadline)."""
    return lookup_addresses(engine.pool, hosts, engine.settings, engine.deadline)


def pair_args(
    s: DiagnoseSettings, *, rank: int, master: str, port: int, bind: str, timeout: str
) -> list[str]:
    """One rank's ``allreduce`` arguments in a two-host pair."""
    return [
        *allreduce_args(s),
        "--rank",
        str(rank),
        "--world-size",
        "2",
        "--master-addr",
        master,
        "--master-port",
        str(port),
        "--bind-addr",
        bind,
        "--timeout",
        timeout,
    ]


# -- running -----------------------------------------------------------------------------------------


def run_pairs(engine: Engine, hosts: list[Host]) -> str | None:
    """Run L3 on ``hosts``: addresses, ring pairs in rounds, blame. Returns why it did not run, or None."""
    if len(hosts) < 2:
        for h in hosts:
            engine.add_check(
                h.name,
                CheckResult(
                    CHECK, 3, Status.NOT_APPLICABLE, "inter-host all-reduce needs at least two hosts"
                ),
            )
        return f"needs at least two hosts, {len(hosts)} left to check"
    addresses, missing = resolve_addresses(engine, hosts)
    for name, why in missing.items():
        engine.add_check(name, CheckResult(CHECK, 3, Status.UNKNOWN, f"not run: {why}"))
    ring = [h for h in hosts if h.name in addresses]
    if len(ring) < 2:
        for h in ring:
            engine.add_check(
                h.name,
                CheckResult(CHECK, 3, Status.UNKNOWN, "not run: no other host with a usable address"),
            )
        return None
    pairs = ring_pairs([h.name for h in ring])
    by_name = {h.name: h for h in ring}
    port_of = pair_ports(pairs, engine.settings)
    s = engine.settings
    results: dict[tuple[str, str], PairResult] = {}

    def work(pair: tuple[str, str], deadline: float) -> PairResult:
        return run_pair(engine, by_name[pair[0]], by_name[pair[1]], addresses, port_of[pair], deadline)

    for rnd in schedule_rounds(pairs):
        engine.progress.start(f"L3 inter-host all-reduce ({len(rnd)} pairs)", len(rnd))
        try:
            outcomes = fan_out_units(
                rnd,
                work,
                concurrency=s.allreduce.concurrency or s.concurrency,
                unit_timeout_s=s.host_timeout_s,
                deadline=engine.deadline,
                retries=0,
                on_done=lambda o: engine.progress.advance(
                    f"{o.unit[0]}<->{o.unit[1]}",
                    Outcome.OK if o.ok and o.value is not None and o.value.ok else Outcome.FAILED,
                ),
                on_deadline=engine.pool.shutdown,
            )
        finally:
            engine.progress.stop()
        for o in outcomes:
            if o.ok and o.value is not None:
                results[o.unit] = o.value
            elif o.outcome is Outcome.TIMED_OUT:
                results[o.unit] = PairResult(
                    o.unit, ok=False, busbw_gbps=None, error="global deadline passed"
                )
            else:
                results[o.unit] = PairResult(o.unit, ok=False, busbw_gbps=None, error=o.error)
    for name, check in blame_pairs(
        results, [h.name for h in ring], engine.thresholds.allreduce_peer_ratio
    ).items():
        engine.add_check(name, check)
    return None


def run_pair(
    engine: Engine, h0: Host, h1: Host, addresses: Mapping[str, str], port: int, deadline: float
) -> PairResult:
    """Both ranks of one pair at once (a two-host fan-out); their answers combined."""
    s = engine.settings
    master = addresses[h0.name]

    def rank(host: Host, rank_deadline: float) -> ProbeDocument:
        rank_deadline = command_deadline(host, rank_deadline)
        r = 0 if host is h0 else 1
        args = pair_args(
            s, rank=r, master=master, port=port, bind=addresses[host.name], timeout=budget_s(rank_deadline)
        )
        return run_probe(engine.pool.for_host(host), host, "allreduce", args, deadline=rank_deadline)

    # A rank that could not connect is retried (diagnose.retries) while its partner waits at the
    # rendezvous: a connection error happens before the probe starts.
    res = fan_out(
        [h0, h1],
        rank,
        concurrency=2,
        host_timeout_s=s.host_timeout_s,
        deadline=deadline,
        retries=s.retries,
        backoff_s=s.retry_backoff_s,
    )
    answers: list[ProbeDocument | str] = [
        o.value if o.ok and o.value is not None else f"{o.host.name}: {o.error or o.outcome.value}"
        for o in res.outcomes
    ]
    return pair_result((h0.name, h1.name), answers[0], answers[1])


# -- judging ----------------------------------------------------------------------------------------


def pair_result(pair: tuple[str, str], r0: ProbeDocument | str, r1: ProbeDocument | str) -> PairResult:
    """Combine the two ranks' answers into one :class:`PairResult`."""
    errors = [r for r in (r0, r1) if isinstance(r, str)]
    for r in (r0, r1):
        if isinstance(r, ProbeDocument):
            if r.data.get("error"):
                errors.append(f"{r.data['error']}")
            elif r.data.get("correct") is False:
                errors.append("all-reduce returned wrong values")
    busbw = peak_busbw(r0.data) if isinstance(r0, ProbeDocument) else None
    if not errors and busbw is None:
        errors.append("no bandwidth measured")
    return PairResult(pair, ok=not errors, busbw_gbps=busbw, error="; ".join(errors) or None)


def blame_pairs(
    results: Mapping[tuple[str, str], PairResult], hosts: Sequence[str], ratio: float, min_peers: int = 3
) -> dict[str, CheckResult]:
    """Turn pair outcomes into one verdict per host.

    A pair is *bad* when it failed or its busbw is below ``ratio`` × the median of all pairs (with
    at least ``min_peers`` measured pairs). A host whose every pair is bad (≥ 2 pairs) is CRITICAL: it fails with
    both neighbours. With only two hosts a bad pair cannot be split, and both are CRITICAL (isolation
    over localization). A host with one bad pair whose partner is not otherwise bad gets WARNING (a
    link problem between the two); otherwise OK.
    """
    measured = {p: r.busbw_gbps for p, r in results.items() if r.ok and r.busbw_gbps is not None}
    slow = peer_outliers({f"{a}<->{b}": v for (a, b), v in measured.items()}, ratio, min_peers)
    bad: dict[tuple[str, str], str] = {}
    for p, r in results.items():
        if not r.ok:
            bad[p] = r.error or "failed"
        elif f"{p[0]}<->{p[1]}" in slow:
            value, median = slow[f"{p[0]}<->{p[1]}"]
            bad[p] = f"slow: {value:.3g} GB/s busbw vs pair median {median:.3g}"
    median_all = statistics.median(measured.values()) if measured else None
    pairs_of: dict[str, list[tuple[str, str]]] = {h: [] for h in hosts}
    for p in results:
        for h in p:
            pairs_of.setdefault(h, []).append(p)
    out: dict[str, CheckResult] = {}
    for h in hosts:
        mine = pairs_of.get(h, [])
        mine_bad = [p for p in mine if p in bad]
        evidence: dict[str, Any] = {
            "pairs": [
                {
                    "peer": p[1] if p[0] == h else p[0],
                    "ok": p not in bad,
                    "busbw_gbps": results[p].busbw_gbps,
                    "problem": bad.get(p),
                }
                for p in mine
            ],
            "pair_median_busbw_gbps": median_all,
        }
        if not mine:
            out[h] = CheckResult(CHECK, 3, Status.UNKNOWN, "no pair measured", evidence)
        elif mine_bad and len(mine_bad) == len(mine):
            peers = ", ".join(p[1] if p[0] == h else p[0] for p in mine_bad)
            why = "; ".join(bad[p] for p in mine_bad)
            if len(mine) == 1:
                summary = (
                    f"all-reduce with its only peer {peers} failed ({why}); cannot tell which of the two"
                )
            else:
                summary = f"all-reduce fails or is slow with every neighbour ({peers}): {why}"
            out[h] = CheckResult(CHECK, 3, Status.CRITICAL, summary, evidence)
        elif mine_bad:
            p = mine_bad[0]
            peer = p[1] if p[0] == h else p[0]
            peer_pairs = pairs_of.get(peer, [])
            if all(q in bad for q in peer_pairs) and len(peer_pairs) > 1:
                summary = f"pair with {peer} bad ({bad[p]}); {peer} fails with all its neighbours"
                out[h] = CheckResult(CHECK, 3, Status.OK, summary, evidence)
            else:
                summary = f"pair with {peer} bad ({bad[p]}) while both pass elsewhere: link between them?"
                out[h] = CheckResult(CHECK, 3, Status.WARNING, summary, evidence)
        else:
            vals = [bw for p in mine if (bw := results[p].busbw_gbps) is not None]
            low = min(vals) if vals else None
            summary = f"all-reduce with {len(mine)} neighbour(s) ok" + (
                f", min {low:.3g} GB/s busbw" if low else ""
            )
            out[h] = CheckResult(CHECK, 3, Status.OK, summary, evidence)
    return out
