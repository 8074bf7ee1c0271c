"""The four diagnose levels and the probe arguments each one sends.

- **L0 quick**: the ``host`` and ``nvml`` probes in one remote Python process (``bundle``).

Hosts with ``transport: srun`` are reached many at a time: L0 and L1 run one Slurm step for all
of them (:meth:`robustctl.diagnose.engine.Engine.fan_batch`); the other levels one step per host.
- **L1 burn**: the ``burn`` probe, then the fleet-wide peer rule on TFLOP/s per device kind.
- **L2 intra-host all-reduce**: the ``allreduce`` probe in intra-host mode (the host's own ranks
  rendezvous on its loopback, ``127.0.0.1``: every peer is a process of the same host), then the
  peer rule on peak busbw.
- **L3 inter-host all-reduce**: neighbour pairs of hosts (:mod:`robustctl.diagnose.pairs`).
- **L4 bitwise alignment**: one reference training step per host, digests compared by majority
  (:mod:`robustctl.diagnose.alignment`); only with ``--level 4`` (:data:`DEFAULT_LEVEL` is 3).

The argument builders (:func:`burn_args`, :func:`intra_args`, ...) are shared with the dry-run plan
(:mod:`robustctl.diagnose.plan`), so ``--dry-run`` prints the very command lines a run sends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from robustctl.checks.allreduce import peak_busbw
from robustctl.checks.peer import peer_outliers
from robustctl.errors import HostError, ProbeError
from robustctl.models import CheckResult, Status
from robustctl.probes import (
    ANSWER_MARGIN_S,
    ProbeDocument,
    budget_s,
    command_deadline,
    run_probe,
    run_probe_batch,
    run_probes,
    run_probes_batch,
)
from robustctl.thresholds import beyond_min, ladder
from robustctl.transport.fanout import fan_out

if TYPE_CHECKING:
    from robustctl.config import DiagnoseSettings
    from robustctl.diagnose.engine import Engine
    from robustctl.inventory import Host

LEVEL_NAMES: dict[int, str] = {
    0: "quick",
    1: "burn",
    2: "intra-allreduce",
    3: "inter-allreduce",
    4: "alignment",
}
MAX_LEVEL = 4
DEFAULT_LEVEL = 3
"""``--level`` when none is given: L4 (a reference training step on every host, the NaN playbook's
test) runs only when asked for with ``--level 4``."""
L0_PROBES = ("host", "nvml")
INTRA_MASTER = "127.0.0.1"
"""L2's rendezvous address: the ranks of an intra-host all-reduce are all on the host itself."""


def budget_of(host_timeout_s: float) -> str:
    """The ``--timeout`` a probe gets when its whole per-host budget is left (dry-run plan)."""
    return f"{max(1.0, host_timeout_s - ANSWER_MARGIN_S):.0f}"


def command_budget_s(host: Host, seconds: float) -> float:
    """``seconds`` of per-host budget, capped by an SSH host's ``ssh.command_timeout_s`` (dry-run plan)."""
    return min(seconds, host.ssh.command_timeout_s) if host.transport == "ssh" else seconds


def l1_timeout_s(s: DiagnoseSettings) -> float:
    """L1's per-host budget: the burn itself three times over plus a minute, at least ``host_timeout_s``."""
    return max(s.host_timeout_s, s.burn.seconds * 3 + 60)


def burn_args(s: DiagnoseSettings) -> list[str]:
    """The ``burn`` probe's arguments (without ``--timeout``)."""
    b = s.burn
    out = ["--seconds", f"{b.seconds:g}"]
    if b.size:
        out += ["--size", str(b.size)]
    if b.threads:
        out += ["--threads", str(b.threads)]
    return out


def allreduce_args(s: DiagnoseSettings) -> list[str]:
    """The ``allreduce`` arguments common to L2 and L3: iterations, warm-up, message sizes."""
    a = s.allreduce
    args = ["--iters", str(a.iters), "--warmup", str(a.warmup)]
    if a.sizes:
        args += ["--sizes", ",".join(str(x) for x in a.sizes)]
    return args


def intra_args(s: DiagnoseSettings) -> list[str]:
    """L2's ``allreduce`` arguments (without ``--timeout``): intra-host ranks on the host's loopback."""
    a = s.allreduce
    out = allreduce_args(s)
    if a.nproc:
        out += ["--nproc", str(a.nproc)]
    out += ["--master-addr", INTRA_MASTER]
    if a.use_nccl_tests:
        out += ["--nccl-tests"]
    return out


# -- the levels ------------------------------------------------------------------------------------
# Each takes the engine and the hosts still targeted and returns None when it ran, or why it did
# not; L3 is :func:`robustctl.diagnose.pairs.run_pairs`.


def level0(engine: Engine, hosts: list[Host]) -> str | None:
    """L0: the host and nvml probes in one remote process, evaluated (srun hosts: one step for all)."""

    def evaluate(host: Host, docs: list[ProbeDocument | ProbeError]) -> list[CheckResult]:
        out: list[CheckResult] = []
        for probe, doc in zip(L0_PROBES, docs, strict=True):
            if isinstance(doc, ProbeError):
                out.append(CheckResult(f"{probe}.probe", 0, Status.UNKNOWN, doc.reason))
            else:
                out.extend(engine.evaluate(host, probe, doc, 0))
        return out

    def work(host: Host, deadline: float) -> list[CheckResult]:
        deadline = command_deadline(host, deadline)
        try:
            docs = run_probes(
                engine.pool.for_host(host),
                host,
                [(p, ["--timeout", budget_s(deadline)]) for p in L0_PROBES],
                deadline=deadline,
            )
        except ProbeError as exc:
            return [CheckResult(f"{p}.probe", 0, Status.UNKNOWN, exc.reason) for p in L0_PROBES]
        return evaluate(host, docs)

    def batch(group: list[Host], deadline: float) -> dict[str, list[CheckResult] | HostError]:
        answers = run_probes_batch(
            engine.pool.srun(),
            group,
            [(p, ["--timeout", budget_s(deadline)]) for p in L0_PROBES],
            deadline=deadline,
        )
        out: dict[str, list[CheckResult] | HostError] = {}
        by_name = {h.name: h for h in group}
        for name, got in answers.items():
            if isinstance(got, ProbeError):
                out[name] = [CheckResult(f"{p}.probe", 0, Status.UNKNOWN, got.reason) for p in L0_PROBES]
            elif isinstance(got, HostError):
                out[name] = got
            else:
                out[name] = evaluate(by_name[name], got)
        return out

    batched, single = engine.pool.batched(hosts)
    if single:
        engine.fan("L0 quick checks", single, work, level=0)
    if batched:
        engine.fan_batch("L0 quick checks (srun)", batched, batch, level=0)
    return None


def level1(engine: Engine, hosts: list[Host]) -> str | None:
    """L1: the burn, then the peer rule on TFLOP/s per device kind."""
    s = engine.settings
    measured_level(
        engine,
        hosts,
        level=1,
        probe="burn",
        args=lambda host: burn_args(s),
        metric=burn_device_tflops,
        ratio=engine.thresholds.burn_peer_ratio,
        unit="TFLOP/s",
        concurrency=s.burn.concurrency,
        host_timeout_s=l1_timeout_s(s),
    )
    return None


def level2(engine: Engine, hosts: list[Host]) -> str | None:
    """L2: the intra-host all-reduce, then the peer rule on peak busbw."""
    s = engine.settings
    measured_level(
        engine,
        hosts,
        level=2,
        probe="allreduce",
        args=lambda host: intra_args(s),
        metric=allreduce_peak_busbw,
        ratio=engine.thresholds.allreduce_peer_ratio,
        unit="GB/s busbw",
        concurrency=s.allreduce.concurrency,
        host_timeout_s=s.host_timeout_s,
    )
    return None


@dataclass(frozen=True)
class Measurement:
    """What a measuring level runs and how its peer rule reads the answers.

    Attributes:
        level: the diagnose level (1, 2). probe: the measuring probe (``burn``, ``allreduce``).
        args: the probe's own arguments for a host (``--timeout`` is added). metric: the values
            compared across hosts, ``{group key: value}`` of a document (higher is better).
        ratio: the peer rule's fraction of the fleet median. unit: the values' unit, for the
            summaries. concurrency: hosts measured at once (None: the engine's). host_timeout_s:
            one host's budget, seconds.
    """

    level: int
    probe: str
    args: Callable[[Host], list[str]]
    metric: Callable[[Mapping[str, Any]], dict[str, float]]
    ratio: float
    unit: str
    concurrency: int | None
    host_timeout_s: float

    def probe_args(self, host: Host, deadline: float) -> list[str]:
        """The probe's arguments for ``host`` with ``--timeout`` from ``deadline``."""
        return [*self.args(host), "--timeout", budget_s(deadline)]


def measured_level(
    engine: Engine,
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
    The arguments are those of :class:`Measurement`.
    """
    m = Measurement(level, probe, args, metric, ratio, unit, concurrency, host_timeout_s)
    docs = _measure(engine, hosts, m)
    groups: dict[str, dict[str, float]] = {}
    for host, doc in docs.items():
        for key, value in metric(doc.data).items():
            groups.setdefault(key, {})[host] = value
    flagged = {
        key: peer_outliers(values, ratio, engine.thresholds.peer_min_peers) for key, values in groups.items()
    }
    retried: dict[str, dict[str, float]] = {}
    suspects = sorted({h for slow in flagged.values() for h in slow})
    if suspects and engine.settings.peer_confirm and time.monotonic() < engine.deadline:
        by_name = {h.name: h for h in hosts}
        retried = _remeasure(engine, [by_name[h] for h in suspects], m)
    for key, slow in flagged.items():
        for host, (first, median) in slow.items():
            engine.add_check(host, _peer_result(m, key, first, retried.get(host, {}).get(key), median))


def _measure(engine: Engine, hosts: list[Host], m: Measurement) -> dict[str, ProbeDocument]:
    """Run ``m.probe`` on ``hosts`` (srun hosts in one step), evaluate its checks into the engine,
    and return each answering host's document."""
    docs: dict[str, ProbeDocument] = {}
    lock = threading.Lock()

    def work(host: Host, deadline: float) -> list[CheckResult]:
        deadline = command_deadline(host, deadline)
        doc, checks = engine.probe_checks(host, m.probe, m.probe_args(host, deadline), deadline, m.level)
        if doc is not None:
            with lock:
                docs[host.name] = doc
        return checks

    def batch(group: list[Host], deadline: float) -> dict[str, list[CheckResult] | HostError]:
        answers = run_probe_batch(
            engine.pool.srun(), group, m.probe, m.probe_args(group[0], deadline), deadline=deadline
        )
        out: dict[str, list[CheckResult] | HostError] = {}
        for h in group:
            got = answers[h.name]
            if isinstance(got, ProbeError):
                out[h.name] = [CheckResult(f"{m.probe}.probe", m.level, Status.UNKNOWN, got.reason)]
            elif isinstance(got, HostError):
                out[h.name] = got
            else:
                with lock:
                    docs[h.name] = got
                out[h.name] = engine.evaluate(h, m.probe, got, m.level)
        return out

    title = f"L{m.level} {LEVEL_NAMES[m.level]}"
    batched, single = engine.pool.batched(hosts)
    if single:
        engine.fan(
            title,
            single,
            work,
            level=m.level,
            concurrency=m.concurrency,
            host_timeout_s=m.host_timeout_s,
        )
    if batched:
        engine.fan_batch(f"{title} (srun)", batched, batch, level=m.level, host_timeout_s=m.host_timeout_s)
    return docs


def _remeasure(engine: Engine, suspects: list[Host], m: Measurement) -> dict[str, dict[str, float]]:
    """Measure ``suspects`` once more, one at a time; ``{host: metric}`` of those that answered."""
    again: dict[str, dict[str, float]] = {}
    lock = threading.Lock()

    def remeasure(host: Host, deadline: float) -> None:
        deadline = command_deadline(host, deadline)
        doc = run_probe(
            engine.pool.for_host(host), host, m.probe, m.probe_args(host, deadline), deadline=deadline
        )
        with lock:
            again[host.name] = m.metric(doc.data)

    fan_out(
        suspects,
        remeasure,
        concurrency=1,
        host_timeout_s=m.host_timeout_s,
        deadline=engine.deadline,
        retries=engine.settings.retries,
        backoff_s=engine.settings.retry_backoff_s,
    )
    return again


def _peer_result(m: Measurement, key: str, first: float, second: float | None, median: float) -> CheckResult:
    """The ``<probe>.peer`` verdict of a host first measured below the fleet median's ratio: the
    better of its measurements still below it is CRITICAL (the peer rule's strict floor, as in
    :func:`~robustctl.checks.peer.peer_outliers`), else OK with the re-measurement named."""
    ratio, unit = m.ratio, m.unit
    best = max(first, second) if second is not None else first
    evidence: dict[str, Any] = {
        "value": best,
        "measurements": [first] + ([second] if second is not None else []),
        "fleet_median": median,
        "ratio": ratio,
        "group": key,
    }
    if ladder(best, crit=beyond_min(ratio * median), higher_is_worse=False) is Status.CRITICAL:
        status = Status.CRITICAL
        summary = f"{best:.3g} {unit} is below {ratio:g}x the fleet median {median:.3g} ({key})"
    else:
        status = Status.OK
        summary = (
            f"first {first:.3g} {unit} was below {ratio:g}x the fleet median "
            f"{median:.3g}; re-measured {best:.3g} alone ({key})"
        )
    return CheckResult(f"{m.probe}.peer", m.level, status, summary, evidence, key)


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
