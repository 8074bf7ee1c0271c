"""The diagnose engine: hierarchical stop-time diagnostics fanned out to hosts.

Levels (ByteRobust, arXiv 2509.16293 §4.2 "stop-time diagnostics"; NVIDIA DCGM ``dcgmi diag``
run levels r1-r3 are the peer design):

- **L0 quick**: host checks (disks, memory, load, kernel-log XIDs, NICs/IB ports, clock) and GPU
  checks through NVML (count, ECC, retired pages, row remapping, temperature, throttling, PCIe,
  NVLink).
- **L1 burn**: a verified matmul load per device; absolute TFLOP/s floor and peer-relative rule.
- **L2 intra-host all-reduce**: NCCL across a host's GPUs, gloo across local CPU processes.
- **L3 inter-host all-reduce**: hosts in a ring form neighbour pairs; a host whose pairs with both
  neighbours fail or are slow is the suspect.

The run stops at the first level that names suspects unless ``all_levels`` is set. Every targeted
host appears in the report, whatever happened to it.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from robustctl.checks.allreduce import peak_busbw
from robustctl.checks.peer import peer_outliers
from robustctl.checks.registry import checks_for_probe
from robustctl.errors import ProbeError, RobustctlError
from robustctl.models import (
    CheckResult,
    HostReport,
    LevelSummary,
    Outcome,
    RunReport,
    Status,
)
from robustctl.probes import ProbeDocument, run_probe, run_probes
from robustctl.transport.fanout import HostOutcome, fan_out

if TYPE_CHECKING:
    from robustctl.checks.thresholds import Thresholds
    from robustctl.config import DiagnoseSettings
    from robustctl.inventory import Host
    from robustctl.transport.pool import TransportPool

LEVEL_NAMES: dict[int, str] = {0: "quick", 1: "burn", 2: "intra-allreduce", 3: "inter-allreduce"}
MAX_LEVEL = 3


class ProgressSink(Protocol):
    """Receives progress events; the CLI renders them as a rich progress bar on stderr."""

    def start(self, description: str, total: int) -> None:
        """A fan-out of ``total`` units starts."""

    def advance(self, label: str, outcome: Outcome) -> None:
        """One unit (host or pair) finished."""

    def stop(self) -> None:
        """The fan-out finished."""


class _NoProgress:
    def start(self, description: str, total: int) -> None:
        pass

    def advance(self, label: str, outcome: Outcome) -> None:
        pass

    def stop(self) -> None:
        pass


@dataclass(frozen=True)
class DiagnoseSpec:
    """What to diagnose and how.

    Attributes:
        hosts: targets, in inventory order (non-empty).
        settings: fan-out and level settings. thresholds: evaluation thresholds.
        max_level: highest level to run (0-3). all_levels: do not stop at the first level that
        names suspects.
    """

    hosts: tuple[Host, ...]
    settings: DiagnoseSettings
    thresholds: Thresholds
    max_level: int = MAX_LEVEL
    all_levels: bool = False


@dataclass
class _HostState:
    host: Host
    checks: list[CheckResult] = field(default_factory=list)
    outcome: Outcome = Outcome.OK
    error: str | None = None
    elapsed_s: float = 0.0

    def status(self) -> Status:
        if self.outcome is not Outcome.OK:
            return (
                Status.CRITICAL if any(c.status is Status.CRITICAL for c in self.checks) else Status.UNKNOWN
            )
        return Status.worst(c.status for c in self.checks) if self.checks else Status.UNKNOWN

    def usable(self) -> bool:
        return self.outcome is Outcome.OK


def run_levels(
    request: DiagnoseSpec,
    pool: TransportPool,
    *,
    progress: ProgressSink | None = None,
    clock: Callable[[], float] = time.time,
) -> RunReport:
    """Run the levels on the requested hosts and return the full report.

    Raises:
        ConfigError: a local precondition fails before any connection (e.g. an unreadable
            identity file). Per-host failures never raise; they become UNKNOWN host results.
    """
    if not request.hosts:
        raise RobustctlError("no hosts to diagnose")
    engine = _Engine(request, pool, progress or _NoProgress())
    return engine.run(clock)


class _Engine:
    def __init__(self, req: DiagnoseSpec, pool: TransportPool, progress: ProgressSink) -> None:
        self.req = req
        self.pool = pool
        self.progress = progress
        self.s = req.settings
        self.th = req.thresholds
        self.state = {h.name: _HostState(h) for h in req.hosts}
        self.deadline = time.monotonic() + self.s.deadline_s

    # -- driver ------------------------------------------------------------------------------
    def run(self, clock: Callable[[], float]) -> RunReport:
        started = clock()
        self.pool.preflight(self.req.hosts)
        levels: list[LevelSummary] = []
        stop = False
        level_fns: dict[int, Callable[[list[Host]], None]] = {
            0: self._level0,
            1: self._level1,
            2: self._level2,
            3: self._level3,
        }
        for level in range(MAX_LEVEL + 1):
            name = LEVEL_NAMES[level]
            targets = self._targets()
            if stop or level > self.req.max_level or not targets or time.monotonic() >= self.deadline:
                levels.append(LevelSummary(level, name, ran=False))
                continue
            before = {n for n, st in self.state.items() if st.status() is Status.CRITICAL}
            t0 = time.monotonic()
            level_fns[level](targets)
            after = {n for n, st in self.state.items() if st.status() is Status.CRITICAL}
            new = tuple(h.name for h in self.req.hosts if h.name in after - before)
            levels.append(
                LevelSummary(level, name, ran=True, suspects=new, elapsed_s=round(time.monotonic() - t0, 3))
            )
            if after and not self.req.all_levels:
                stop = True
        hosts = tuple(
            HostReport(
                host=st.host.name,
                address=st.host.address,
                status=st.status(),
                outcome=st.outcome,
                checks=tuple(st.checks),
                error=st.error,
                elapsed_s=round(st.elapsed_s, 3),
            )
            for st in self.state.values()
        )
        return RunReport(
            status=Status.worst(h.status for h in hosts),
            hosts=hosts,
            levels=tuple(levels),
            suspects=tuple(h.host for h in hosts if h.status is Status.CRITICAL),
            unknown=tuple(h.host for h in hosts if h.status is Status.UNKNOWN),
            started_at=started,
            finished_at=clock(),
        )

    def _targets(self) -> list[Host]:
        out = []
        for st in self.state.values():
            if not st.usable():
                continue
            if not self.req.all_levels and st.status() is Status.CRITICAL:
                continue
            out.append(st.host)
        return out

    # -- fan-out helper ------------------------------------------------------------------------
    def _fan(
        self,
        description: str,
        hosts: Sequence[Host],
        work: Callable[[Host, float], list[CheckResult]],
        *,
        level: int,
        concurrency: int | None = None,
        host_timeout_s: float | None = None,
    ) -> None:
        self.progress.start(description, len(hosts))

        def done(o: HostOutcome[list[CheckResult]]) -> None:
            self.progress.advance(o.host.name, o.outcome)

        try:
            res = fan_out(
                hosts,
                work,
                concurrency=concurrency or self.s.concurrency,
                host_timeout_s=host_timeout_s or self.s.host_timeout_s,
                deadline=self.deadline,
                retries=self.s.retries,
                backoff_s=self.s.retry_backoff_s,
                on_done=done,
                on_deadline=self.pool.shutdown,
            )
        finally:
            self.progress.stop()
        for o in res.outcomes:
            st = self.state[o.host.name]
            st.elapsed_s += o.elapsed_s
            if o.ok:
                st.checks.extend(o.value or [])
            else:
                st.outcome = o.outcome
                st.error = o.error
                st.checks.append(
                    CheckResult(
                        name=f"{LEVEL_NAMES[level]}.reach",
                        level=level,
                        status=Status.UNKNOWN,
                        summary=f"{o.outcome.value}: {o.error}",
                        evidence={"attempts": o.attempts},
                    )
                )

    def _probe_checks(
        self, host: Host, probe: str, args: Sequence[str], deadline: float, level: int
    ) -> tuple[ProbeDocument | None, list[CheckResult]]:
        """Run one probe and evaluate its checks; a probe failure is one UNKNOWN check, not a lost host."""
        try:
            doc = run_probe(self.pool.for_host(host), host, probe, args, deadline=deadline)
        except ProbeError as exc:
            msg = exc.reason
            return None, [CheckResult(f"{probe}.probe", level, Status.UNKNOWN, msg)]
        return doc, self._evaluate(host, probe, doc, level)

    def _evaluate(self, host: Host, probe: str, doc: ProbeDocument, level: int) -> list[CheckResult]:
        """Evaluate ``probe``'s checks on ``doc`` with the engine's context (see checks/thresholds.py)."""
        data = dict(doc.data)
        data["_context"] = {
            "expected_gpus": host.gpus,
            "host_time": doc.host_time,
            "control_time": (doc.sent_at + doc.received_at) / 2,
            "round_trip_s": doc.received_at - doc.sent_at,
            "probe_errors": list(doc.errors),
        }
        return evaluate_probe(probe, data, self.th, level)

    # -- levels ----------------------------------------------------------------------------------
    def _level0(self, hosts: list[Host]) -> None:
        def work(host: Host, deadline: float) -> list[CheckResult]:
            out: list[CheckResult] = []
            probes = ("host", "nvml")
            try:
                docs = run_probes(
                    self.pool.for_host(host),
                    host,
                    [(p, ["--timeout", _secs(deadline)]) for p in probes],
                    deadline=deadline,
                )
            except ProbeError as exc:
                msg = exc.reason
                return [CheckResult(f"{p}.probe", 0, Status.UNKNOWN, msg) for p in probes]
            for probe, doc in zip(probes, docs, strict=True):
                if isinstance(doc, ProbeError):
                    out.append(CheckResult(f"{probe}.probe", 0, Status.UNKNOWN, doc.reason))
                else:
                    out.extend(self._evaluate(host, probe, doc, 0))
            return out

        self._fan("L0 quick checks", hosts, work, level=0)

    def _level1(self, hosts: list[Host]) -> None:
        b = self.s.burn

        def args(host: Host) -> list[str]:
            out = ["--seconds", f"{b.seconds:g}"]
            if b.size:
                out += ["--size", str(b.size)]
            if b.threads:
                out += ["--threads", str(b.threads)]
            return out

        self._measured_level(
            hosts,
            level=1,
            probe="burn",
            args=args,
            metric=burn_device_tflops,
            ratio=self.th.burn_peer_ratio,
            unit="TFLOP/s",
            concurrency=b.concurrency,
            host_timeout_s=max(self.s.host_timeout_s, b.seconds * 3 + 60),
        )

    def _level2(self, hosts: list[Host]) -> None:
        a = self.s.allreduce

        def args(host: Host) -> list[str]:
            out = self._allreduce_args()
            if a.nproc:
                out += ["--nproc", str(a.nproc)]
            if host.transport == "ssh":
                out += ["--master-addr", host.address if _is_ip(host.address) else "127.0.0.1"]
            if a.use_nccl_tests:
                out += ["--nccl-tests"]
            return out

        self._measured_level(
            hosts,
            level=2,
            probe="allreduce",
            args=args,
            metric=allreduce_peak_busbw,
            ratio=self.th.allreduce_peer_ratio,
            unit="GB/s busbw",
            concurrency=a.concurrency,
            host_timeout_s=self.s.host_timeout_s,
        )

    def _measured_level(
        self,
        hosts: list[Host],
        *,
        level: int,
        probe: str,
        args: Callable[[Host], list[str]],
        metric: Callable[[Mapping[str, Any]], dict[str, float]],
        ratio: float,
        unit: str,
        concurrency: int | None,
        host_timeout_s: float,
    ) -> None:
        """Run a measuring probe, evaluate its checks, then apply the peer-relative rule.

        With ``diagnose.peer_confirm``, hosts below ``ratio`` × the fleet median are measured once
        more, one at a time, and named only if the better of their two measurements is still low:
        a transient neighbour (another job's burst, a co-scheduled probe) is not a slow machine.
        """
        docs: dict[str, ProbeDocument] = {}
        lock = threading.Lock()
        by_name = {h.name: h for h in hosts}

        def work(host: Host, deadline: float) -> list[CheckResult]:
            doc, checks = self._probe_checks(
                host,
                probe,
                [*args(host), "--timeout", _secs(deadline)],
                deadline,
                level,
            )
            if doc is not None:
                with lock:
                    docs[host.name] = doc
            return checks

        self._fan(
            f"L{level} {LEVEL_NAMES[level]}",
            hosts,
            work,
            level=level,
            concurrency=concurrency,
            host_timeout_s=host_timeout_s,
        )
        groups: dict[str, dict[str, float]] = {}
        for host, doc in docs.items():
            for key, value in metric(doc.data).items():
                groups.setdefault(key, {})[host] = value
        flagged = {
            key: peer_outliers(values, ratio, self.th.peer_min_peers) for key, values in groups.items()
        }
        retried: dict[str, dict[str, float]] = {}
        suspects = sorted({h for slow in flagged.values() for h in slow})
        if suspects and self.s.peer_confirm and time.monotonic() < self.deadline:
            again: dict[str, dict[str, float]] = {}

            def remeasure(host: Host, deadline: float) -> None:
                doc = run_probe(
                    self.pool.for_host(host),
                    host,
                    probe,
                    [*args(host), "--timeout", _secs(deadline)],
                    deadline=deadline,
                )
                with lock:
                    again[host.name] = metric(doc.data)

            fan_out(
                [by_name[h] for h in suspects],
                remeasure,
                concurrency=1,
                host_timeout_s=host_timeout_s,
                deadline=self.deadline,
                retries=0,
            )
            retried = again
        for key, slow in flagged.items():
            for host, (first, median) in slow.items():
                second = retried.get(host, {}).get(key)
                best = max(first, second) if second is not None else first
                evidence: dict[str, Any] = {
                    "value": best,
                    "measurements": [first] + ([second] if second is not None else []),
                    "fleet_median": median,
                    "ratio": ratio,
                    "group": key,
                }
                if best >= ratio * median:
                    self.state[host].checks.append(
                        CheckResult(
                            name=f"{probe}.peer",
                            level=level,
                            status=Status.OK,
                            summary=f"first {first:.3g} {unit} was below {ratio:g}x the fleet median "
                            f"{median:.3g}; re-measured {best:.3g} alone ({key})",
                            evidence=evidence,
                            device=key,
                        )
                    )
                    continue
                self.state[host].checks.append(
                    CheckResult(
                        name=f"{probe}.peer",
                        level=level,
                        status=Status.CRITICAL,
                        summary=f"{best:.3g} {unit} is below {ratio:g}x the fleet median {median:.3g} ({key})",
                        evidence=evidence,
                        device=key,
                    )
                )

    def _allreduce_args(self) -> list[str]:
        a = self.s.allreduce
        args = ["--iters", str(a.iters), "--warmup", str(a.warmup)]
        if a.sizes:
            args += ["--sizes", ",".join(str(x) for x in a.sizes)]
        return args

    def _level3(self, hosts: list[Host]) -> None:
        if len(hosts) < 2:
            for h in hosts:
                self.state[h.name].checks.append(
                    CheckResult(
                        "allreduce.pair",
                        3,
                        Status.NOT_APPLICABLE,
                        "inter-host all-reduce needs at least two hosts",
                    )
                )
            return
        pairs = ring_pairs([h.name for h in hosts])
        by_name = {h.name: h for h in hosts}
        results: dict[tuple[str, str], PairResult] = {}
        a = self.s.allreduce
        port_of = {p: a.master_port + 1 + i for i, p in enumerate(pairs)}
        lock = threading.Lock()
        sem = threading.Semaphore(a.concurrency or self.s.concurrency)

        def run_pair(pair: tuple[str, str]) -> None:
            with sem:
                r = self._run_pair(by_name[pair[0]], by_name[pair[1]], port_of[pair])
            with lock:
                results[pair] = r
            self.progress.advance(f"{pair[0]}<->{pair[1]}", Outcome.OK if r.ok else Outcome.FAILED)

        for rnd in schedule_rounds(pairs):
            self.progress.start(f"L3 inter-host all-reduce ({len(rnd)} pairs)", len(rnd))
            threads = [threading.Thread(target=run_pair, args=(pair,), daemon=True) for pair in rnd]
            for t in threads:
                t.start()
            for t in threads:
                t.join(max(0.0, self.deadline - time.monotonic()))
            self.progress.stop()
            with lock:
                for pair in rnd:
                    results.setdefault(
                        pair, PairResult(pair, ok=False, busbw_gbps=None, error="global deadline passed")
                    )
        for name, check in blame_pairs(
            results, [h.name for h in hosts], self.th.allreduce_peer_ratio
        ).items():
            self.state[name].checks.append(check)

    def _run_pair(self, h0: Host, h1: Host, port: int) -> PairResult:
        master = h0.address if _is_ip(h0.address) else "127.0.0.1"
        deadline = min(self.deadline, time.monotonic() + self.s.host_timeout_s)
        out: dict[int, ProbeDocument | str] = {}

        def rank(r: int, host: Host) -> None:
            args = [
                *self._allreduce_args(),
                "--rank",
                str(r),
                "--world-size",
                "2",
                "--master-addr",
                master,
                "--master-port",
                str(port),
                "--timeout",
                _secs(deadline),
            ]
            if _is_ip(host.address):
                args += ["--bind-addr", host.address]
            try:
                out[r] = run_probe(self.pool.for_host(host), host, "allreduce", args, deadline=deadline)
            except RobustctlError as exc:
                out[r] = str(exc)
            except Exception as exc:
                out[r] = f"{host.name}: internal error: {type(exc).__name__}: {exc}"

        t1 = threading.Thread(target=rank, args=(1, h1), daemon=True)
        t1.start()
        rank(0, h0)
        t1.join(max(0.0, deadline - time.monotonic()))
        return pair_result((h0.name, h1.name), out.get(0, "no answer"), out.get(1, "no answer"))


def plan_levels(request: DiagnoseSpec) -> dict[str, Any]:
    """What a run would do, without connecting: per host its transport, address and probe argv.

    Returns a JSON-ready mapping (``kind: "diagnose-plan"``, ``schema_version``, ``levels``,
    ``hosts``); ``robustctl diagnose --dry-run`` prints it.
    """
    from robustctl.models import SCHEMA_VERSION
    from robustctl.probes import probe_argv
    from robustctl.transport.base import remote_command

    levels = [
        {"level": lv, "name": LEVEL_NAMES[lv]} for lv in range(MAX_LEVEL + 1) if lv <= request.max_level
    ]
    hosts = []
    for h in request.hosts:
        entry: dict[str, Any] = {
            "host": h.name,
            "transport": h.transport,
            "address": h.address,
            "gpus": h.gpus,
        }
        if h.transport == "ssh":
            user = f"{h.ssh.user}@" if h.ssh.user else ""
            port = f":{h.ssh.port}" if h.ssh.port else ""
            entry["ssh"] = f"{user}{h.address}{port}"
        entry["command"] = remote_command(probe_argv(h, ["<probe args>"])) + "  < diagnostics/<probe>.py"
        hosts.append(entry)
    return {
        "kind": "diagnose-plan",
        "schema_version": SCHEMA_VERSION,
        "levels": levels,
        "all_levels": request.all_levels,
        "concurrency": request.settings.concurrency,
        "host_timeout_s": request.settings.host_timeout_s,
        "deadline_s": request.settings.deadline_s,
        "hosts": hosts,
    }


def evaluate_probe(
    probe: str, data: Mapping[str, Any], thresholds: Thresholds, level: int
) -> list[CheckResult]:
    """Run every registered check of ``probe`` on ``data``; a crashing check is one UNKNOWN result."""
    out: list[CheckResult] = []
    for spec in checks_for_probe(probe):
        try:
            out.extend(spec.evaluate(data, thresholds))
        except Exception as exc:
            out.append(
                CheckResult(spec.name, level, Status.UNKNOWN, f"check failed: {type(exc).__name__}: {exc}")
            )
    return out


# -- metrics used by the peer-relative rules ----------------------------------------------------


def burn_device_tflops(data: Mapping[str, Any]) -> dict[str, float]:
    """``{"<kind>:<device name>": TFLOP/s}`` per device of a burn document (mismatching devices skipped)."""
    out: dict[str, float] = {}
    for dev in data.get("devices") or []:
        tf = dev.get("tflops")
        if isinstance(tf, (int, float)) and not dev.get("mismatches"):
            key = f"{dev.get('kind', '?')}:{dev.get('name', '?')}"
            out[key] = min(out.get(key, float("inf")), float(tf))
    return out


def allreduce_peak_busbw(data: Mapping[str, Any]) -> dict[str, float]:
    """``{"<backend>/<ranks> ranks": peak busbw GB/s}`` of an all-reduce document (correct sizes only)."""
    peak = peak_busbw(data)
    if peak is None:
        return {}
    return {f"{data.get('backend', '?')}/{data.get('world_size', '?')} ranks": peak}


# -- L3 pairs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairResult:
    """Outcome of one two-host all-reduce: ``ok`` when both ranks finished with correct results."""

    pair: tuple[str, str]
    ok: bool
    busbw_gbps: float | None
    error: str | None = None


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
            out[h] = CheckResult("allreduce.pair", 3, Status.UNKNOWN, "no pair measured", evidence)
        elif mine_bad and len(mine_bad) == len(mine):
            peers = ", ".join(p[1] if p[0] == h else p[0] for p in mine_bad)
            why = "; ".join(bad[p] for p in mine_bad)
            if len(mine) == 1:
                summary = (
                    f"all-reduce with its only peer {peers} failed ({why}); cannot tell which of the two"
                )
            else:
                summary = f"all-reduce fails or is slow with every neighbour ({peers}): {why}"
            out[h] = CheckResult("allreduce.pair", 3, Status.CRITICAL, summary, evidence)
        elif mine_bad:
            p = mine_bad[0]
            peer = p[1] if p[0] == h else p[0]
            peer_pairs = pairs_of.get(peer, [])
            if all(q in bad for q in peer_pairs) and len(peer_pairs) > 1:
                summary = f"pair with {peer} bad ({bad[p]}); {peer} fails with all its neighbours"
                out[h] = CheckResult("allreduce.pair", 3, Status.OK, summary, evidence)
            else:
                summary = f"pair with {peer} bad ({bad[p]}) while both pass elsewhere: link between them?"
                out[h] = CheckResult("allreduce.pair", 3, Status.WARNING, summary, evidence)
        else:
            vals = [bw for p in mine if (bw := results[p].busbw_gbps) is not None]
            low = min(vals) if vals else None
            summary = f"all-reduce with {len(mine)} neighbour(s) ok" + (
                f", min {low:.3g} GB/s busbw" if low else ""
            )
            out[h] = CheckResult("allreduce.pair", 3, Status.OK, summary, evidence)
    return out


def _secs(deadline: float) -> str:
    """Seconds left until ``deadline``, minus a margin for the answer to travel back."""
    return f"{max(1.0, deadline - time.monotonic() - 2.0):.0f}"


def _is_ip(address: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True
