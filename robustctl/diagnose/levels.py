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
    """
    docs: dict[str, ProbeDocument] = {}
    lock = threading.Lock()
    by_name = {h.name: h for h in hosts}

    def work(host: Host, deadline: float) -> list[CheckResult]:
        deadline = command_deadline(host, deadline)
        doc, checks = engine.probe_checks(
            host, probe, [*args(host), "--timeout", budget_s(deadline)], deadline, level
        )
        if doc is not None:
            with lock:
                docs[host.name] = doc
        return checks

    def batch(group: list[Host], deadline: float) -> dict[str, list[CheckResult] | HostError]:
        answers = run_probe_batch(
            engine.pool.srun(),
            group,
            probe,
            [*args(group[0]), "--timeout", budget_s(deadline)],
            deadline=deadline,
        )
        out: dict[str, list[CheckResult] | HostError] = {}
        for h in group:
            got = answers[h.name]
            if isinstance(got, ProbeError):
                out[h.name] = [CheckResult(f"{probe}.probe", level, Status.UNKNOWN, got.reason)]
            elif isinstance(got, HostError):
                out[h.name] = got
            else:
                with lock:
                    docs[h.name] = got
                out[h.name] = engine.evaluate(h, probe, got, level)
        return out

    batched, single = engine.pool.batched(hosts)
    if single:
        engine.fan(
            f"L{level} {LEVEL_NAMES[level]}",
            single,
            work,
            level=level,
            concurrency=concurrency,
            host_timeout_s=host_timeout_s,
        )
    if batched:
        engine.fan_batch(
            f"L{level} {LEVEL_NAMES[level]} (srun)",
            batched,
            batch,
            level=level,
            host_timeout_s=host_timeout_s,
        )
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
        again: dict[str, dict[str, float]] = {}

        def remeasure(host: Host, deadline: float) -> None:
            deadline = command_deadline(host, deadline)
            doc = run_probe(
                engine.pool.for_host(host),
                host,
                probe,
                [*args(host), "--timeout", budget_s(deadline)],
                deadline=deadline,
            )
            with lock:
                again[host.name] = metric(doc.data)

        fan_out(
            [by_name[h] for h in suspects],
            remeasure,
            concurrency=1,
            host_timeout_s=host_timeout_s,
            deadline=engine.deadline,
            retries=engine.settings.retries,
            backoff_s=engine.settings.retry_backoff_s,
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
                status = Status.OK
                summary = (
                    f"first {first:.3g} {unit} was below {ratio:g}x the fleet median "
                    f"{median:.3g}; re-measured {best:.3g} alone ({key})"
                )
            else:
                status = Status.CRITICAL
                summary = f"{best:.3g} {unit} is below {ratio:g}x the fleet median {median:.3g} ({key})"
            engine.add_check(host, CheckResult(f"{probe}.peer", level, status, summary, evidence, key))


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
