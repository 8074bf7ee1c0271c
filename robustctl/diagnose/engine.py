"""The diagnose engine: the driver of the level ladder, per-host state, the fan-out helper.

Levels (ByteRobust, arXiv 2509.16293 §4.2 "stop-time diagnostics"; NVIDIA DCGM ``dcgmi diag``
run levels r1-r3 are the peer design):

- **L0 quick**: host checks (disks, memory, load, kernel-log XIDs, NICs/IB ports, clock) and GPU
  checks through NVML (count, ECC, retired pages, row remapping, temperature, throttling, PCIe,
  NVLink).
- **L1 burn**: a verified matmul load per device; absolute TFLOP/s floor and peer-relative rule.
- **L2 intra-host all-reduce**: NCCL across a host's GPUs, gloo across local CPU processes.
- **L3 inter-host all-reduce**: hosts in a ring form neighbour pairs; a host whose pairs with both
  neighbours fail or are slow is the suspect.
- **L4 bitwise alignment** (§4.3, only with ``max_level`` 4): one reference training step per
  host with fixed weights and input; a host whose digest differs from the majority's is the suspect
  (:mod:`robustctl.diagnose.alignment`).

The run stops at the first level that names suspects unless ``all_levels`` is set. Every targeted
host appears in the report, whatever happened to it; every level appears in ``levels``, with the
reason when it did not run (an opt-in level above the default, L4, only when asked for). The levels themselves are in :mod:`robustctl.diagnose.levels` and
:mod:`robustctl.diagnose.pairs` (L3); the dry-run plan in :mod:`robustctl.diagnose.plan`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from robustctl.checks.registry import NO_CONTEXT, CheckContext, checks_for_probe
from robustctl.diagnose.alignment import run_alignment
from robustctl.diagnose.levels import DEFAULT_LEVEL, LEVEL_NAMES, MAX_LEVEL, level0, level1, level2
from robustctl.diagnose.pairs import run_pairs
from robustctl.errors import CommandTimeout, HostError, HostUnreachable, ProbeError, RobustctlError
from robustctl.models import (
    CheckResult,
    HostReport,
    LevelSummary,
    Outcome,
    RunReport,
    Status,
)
from robustctl.probes import ProbeDocument, run_probe
from robustctl.transport.fanout import HostOutcome, fan_out

if TYPE_CHECKING:
    from robustctl.config import DiagnoseSettings
    from robustctl.inventory import Host
    from robustctl.thresholds import Thresholds
    from robustctl.transport.pool import TransportPool

LevelRunner = Callable[["Engine", list["Host"]], "str | None"]
"""``run(engine, targets) -> None`` when the level ran, else the reason it did not."""

LEVELS: dict[int, LevelRunner] = {0: level0, 1: level1, 2: level2, 3: run_pairs, 4: run_alignment}


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
        max_level: highest level to run (0-4). all_levels: do not stop at the first level that
        names suspects.
    """

    hosts: tuple[Host, ...]
    settings: DiagnoseSettings
    thresholds: Thresholds
    max_level: int = DEFAULT_LEVEL
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

    Args:
        request: the hosts, the levels and the settings.
        pool: the transports to the hosts (closed by the caller).
        progress: receives per-level progress (None: none).
        clock: seconds since the epoch now (tests pass a fixed one).

    Returns:
        The full report: each level's per-host results, the suspects, and where the run stopped.

    Raises:
        ConfigError: a local precondition fails before any connection (e.g. an unreadable
            identity file). Per-host failures never raise; they become UNKNOWN host results.
    """
    if not request.hosts:
        raise RobustctlError("no hosts to diagnose")
    engine = Engine(request, pool, progress or _NoProgress())
    return engine.run(clock)


class Engine:
    """One run's state, shared by the levels: settings, transports, per-host results, deadline.

    Internal to :mod:`robustctl.diagnose`; callers use :func:`run_levels`.
    """

    def __init__(self, req: DiagnoseSpec, pool: TransportPool, progress: ProgressSink) -> None:
        self.req = req
        self.pool = pool
        self.progress = progress
        self.settings = req.settings
        self.thresholds = req.thresholds
        self.state = {h.name: _HostState(h) for h in req.hosts}
        self.deadline = time.monotonic() + self.settings.deadline_s

    # -- driver ------------------------------------------------------------------------------
    def run(self, clock: Callable[[], float]) -> RunReport:
        """Run the levels in order (see :func:`run_levels`); ``clock`` stamps the report (UNIX s)."""
        started = clock()
        self.pool.preflight(self.req.hosts)
        levels: list[LevelSummary] = []
        stopped_by: int | None = None
        # Opt-in levels above DEFAULT_LEVEL (L4) are listed only when asked for.
        for level in range(max(DEFAULT_LEVEL, min(self.req.max_level, MAX_LEVEL)) + 1):
            name = LEVEL_NAMES[level]
            targets = self._targets()
            why = self._skip_reason(level, stopped_by, targets)
            if why is not None:
                levels.append(LevelSummary(level, name, ran=False, reason=why))
                continue
            before = {n for n, st in self.state.items() if st.status() is Status.CRITICAL}
            t0 = time.monotonic()
            why = LEVELS[level](self, targets)
            if why is not None:
                levels.append(LevelSummary(level, name, ran=False, reason=why))
                continue
            after = {n for n, st in self.state.items() if st.status() is Status.CRITICAL}
            new = tuple(h.name for h in self.req.hosts if h.name in after - before)
            levels.append(
                LevelSummary(level, name, ran=True, suspects=new, elapsed_s=round(time.monotonic() - t0, 3))
            )
            if after and not self.req.all_levels and stopped_by is None:
                stopped_by = level
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

    def _skip_reason(self, level: int, stopped_by: int | None, targets: list[Host]) -> str | None:
        if level > self.req.max_level:
            return f"above the highest level asked (L{self.req.max_level})"
        if stopped_by is not None:
            return f"stopped after L{stopped_by} named suspects"
        if not targets:
            return "no host left to check"
        if time.monotonic() >= self.deadline:
            return "global deadline passed"
        return None

    def add_check(self, host: str, check: CheckResult) -> None:
        """Record one more result for ``host``."""
        self.state[host].checks.append(check)

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
    def fan(
        self,
        description: str,
        hosts: Sequence[Host],
        work: Callable[[Host, float], list[CheckResult]],
        *,
        level: int,
        concurrency: int | None = None,
        host_timeout_s: float | None = None,
    ) -> None:
        """Run ``work`` on ``hosts`` (fan-out settings of the run) and record each host's checks.

        A host whose work did not finish (unreachable, timed out, failed) gets one UNKNOWN
        ``<level name>.reach`` check and is not targeted by later levels.
        """
        self.progress.start(description, len(hosts))

        def done(o: HostOutcome[list[CheckResult]]) -> None:
            self.progress.advance(o.host.name, o.outcome)

        try:
            res = fan_out(
                hosts,
                work,
                concurrency=concurrency or self.settings.concurrency,
                host_timeout_s=host_timeout_s or self.settings.host_timeout_s,
                deadline=self.deadline,
                retries=self.settings.retries,
                backoff_s=self.settings.retry_backoff_s,
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

    def fan_batch(
        self,
        description: str,
        hosts: Sequence[Host],
        work: Callable[[list[Host], float], Mapping[str, list[CheckResult] | HostError]],
        *,
        level: int,
        host_timeout_s: float | None = None,
    ) -> None:
        """Run ``work(hosts, deadline)`` once for all ``hosts`` (the srun transport's one step) and
        record each host's checks as :meth:`fan` does; a host the work gives an error (or nothing)
        gets one UNKNOWN ``<level name>.reach`` check and is not targeted by later levels.
        """
        self.progress.start(description, len(hosts))
        t0 = time.monotonic()
        deadline = min(self.deadline, t0 + (host_timeout_s or self.settings.host_timeout_s))
        try:
            try:
                answers: Mapping[str, list[CheckResult] | HostError] = work(list(hosts), deadline)
            except RobustctlError as exc:
                answers = {h.name: HostUnreachable(h.name, str(exc)) for h in hosts}
            elapsed = round(time.monotonic() - t0, 6)
            for h in hosts:
                got = answers.get(h.name) or HostUnreachable(h.name, "no answer from the batch")
                st = self.state[h.name]
                st.elapsed_s += elapsed
                if isinstance(got, HostError):
                    outcome = (
                        Outcome.TIMED_OUT
                        if isinstance(got, CommandTimeout)
                        else Outcome.UNREACHABLE
                        if isinstance(got, HostUnreachable)
                        else Outcome.FAILED
                    )
                    st.outcome, st.error = outcome, got.reason
                    st.checks.append(
                        CheckResult(
                            name=f"{LEVEL_NAMES[level]}.reach",
                            level=level,
                            status=Status.UNKNOWN,
                            summary=f"{outcome.value}: {got.reason}",
                            evidence={"attempts": 1, "transport": h.transport},
                        )
                    )
                else:
                    st.checks.extend(got)
                self.progress.advance(h.name, st.outcome)
        finally:
            self.progress.stop()

    def probe_checks(
        self, host: Host, probe: str, args: Sequence[str], deadline: float, level: int
    ) -> tuple[ProbeDocument | None, list[CheckResult]]:
        """Run one probe and evaluate its checks; a probe failure is one UNKNOWN check, not a lost host."""
        try:
            doc = run_probe(self.pool.for_host(host), host, probe, args, deadline=deadline)
        except ProbeError as exc:
            msg = exc.reason
            return None, [CheckResult(f"{probe}.probe", level, Status.UNKNOWN, msg)]
        return doc, self.evaluate(host, probe, doc, level)

    def evaluate(self, host: Host, probe: str, doc: ProbeDocument, level: int) -> list[CheckResult]:
        """Evaluate ``probe``'s checks on ``doc`` with what the control side knows of the run."""
        return evaluate_probe(probe, doc.data, self.thresholds, level, check_context(host, doc))


def check_context(host: Host, doc: ProbeDocument) -> CheckContext:
    """The :class:`CheckContext` of one probe run on ``host``."""
    return CheckContext(
        expected_gpus=host.gpus,
        host_time=doc.host_time,
        control_time=(doc.sent_at + doc.received_at) / 2,
        round_trip_s=doc.received_at - doc.sent_at,
        probe_errors=doc.errors,
    )


def evaluate_probe(
    probe: str,
    data: Mapping[str, Any],
    thresholds: Thresholds,
    level: int,
    context: CheckContext = NO_CONTEXT,
) -> list[CheckResult]:
    """Run every registered check of ``probe`` on ``data``; a crashing check is one UNKNOWN result."""
    out: list[CheckResult] = []
    for spec in checks_for_probe(probe):
        try:
            out.extend(spec.evaluate(data, thresholds, context))
        except Exception as exc:
            out.append(
                CheckResult(spec.name, level, Status.UNKNOWN, f"check failed: {type(exc).__name__}: {exc}")
            )
    return out
