"""``robustctl sweep --local [--slurm]``: the quick checks (L0) of this node, as Slurm's HealthCheckProgram.

slurmd runs ``HealthCheckProgram`` every ``HealthCheckInterval`` seconds (and once at start), as root,
with an environment holding only ``SLURMD_NODENAME``, and kills it after 60 s (slurm.conf(5),
HealthCheckProgram; ``run_script_health_check`` in slurmd.c: ``max_wait = 60 * 1000`` ms). The program
is expected to drain the node itself when it finds a fault (as LBNL's NHC does). This mode:

1. **Names the node**: ``--node``, else ``$SLURMD_NODENAME`` (set by slurmd), else the short host name
   (what slurmd itself takes as its NodeName when started without ``-N``).
2. **Runs L0 on the node itself** (local transport, this interpreter; no inventory, no SSH) within
   :data:`PROBE_BUDGET_S`; the whole run stays within :data:`BUDGET_S` (45 s, below Slurm's 60 s): the
   probe's budget plus at most :data:`SLURM_CALLS` Slurm commands of :data:`SLURM_TIMEOUT_S` each.
3. **Decides**: without a state store every CRITICAL check is a finding (NHC's semantics: one run,
   one verdict). With a store (``--state`` or ``$ROBUSTCTL_STATE``, opt-in: many nodes writing one
   file is the operator's choice), the run is recorded in the history and the ``sweep:`` policy's
   debounce applies (:mod:`robustctl.sweep.policy`; default settings): a network flap drains only
   when seen twice within 5 minutes. A store that cannot be opened is a warning, never a failure.
4. **With** ``--slurm``: a confirmed finding drains the node through the Slurm back end
   (:meth:`robustctl.schedulers.slurm.Slurm.drain`) with the reason ``robustctl: health check:
   CHECK: DETAIL``; a node already drained keeps its reason. A healthy node (no CRITICAL, nothing
   UNKNOWN) is resumed only when it is drained with a reason robustctl's health check or sweep set
   (``robustctl: health check: CHECK: …`` or ``robustctl: sweep: CHECK: …``) and that CHECK ran now and
   passed. Every other drain (an operator's own reason, ``robustctl evict``'s reasons, a warm standby)
   is never cleared.

Exit code (the design's table): 2 a confirmed finding (whether or not the drain succeeded; the
result says), 3 the node could not be checked or Slurm could not be read or changed, 1 a pending
finding or a warning, 0 healthy.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from robustctl.errors import UsageError
from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION, CheckResult, RunReport, Status

if TYPE_CHECKING:
    from robustctl.config import SweepSettings
    from robustctl.schedulers.slurm import Slurm
    from robustctl.transport.pool import TransportPool

__all__ = [
    "BUDGET_S",
    "PROBE_BUDGET_S",
    "REASON_PREFIX",
    "SLURM_CALLS",
    "SLURM_LIMIT_S",
    "SLURM_TIMEOUT_S",
    "LocalCheckRequest",
    "LocalCheckResult",
    "local_request",
    "node_name",
    "reason_check",
    "run_local_check",
]

SLURM_LIMIT_S = 60.0
"""slurmd kills a HealthCheckProgram after 60 s (slurmd.c ``run_script_health_check``)."""
BUDGET_S = 45.0
"""The whole run's budget, seconds: a quarter below Slurm's limit, for Python's start and a loaded node."""
SLURM_TIMEOUT_S = 5.0
"""Deadline of one Slurm command (``scontrol show node``, ``sinfo``, ``scontrol update``)."""
SLURM_CALLS = 4
"""Most Slurm commands one run makes: read the node, then drain (re-read, update) or resume."""
PROBE_BUDGET_S = BUDGET_S - SLURM_CALLS * SLURM_TIMEOUT_S
"""The L0 probe's budget, seconds (25 s; L0 takes 1-3 s on a healthy node)."""
REASON_PREFIX = "health check"
"""Drain reasons this mode sets read ``robustctl: health check: CHECK: DETAIL``."""
MAX_REASON = 200
"""Characters of a drain reason (``sinfo -R`` shows the first ~20; Slurm stores more)."""

_OURS_RE = re.compile(r"^robustctl: (?:health check|sweep): ([A-Za-z0-9_.-]+): ")
_PASSED = frozenset({Status.OK, Status.WARNING, Status.NOT_APPLICABLE, Status.SKIPPED})


def node_name(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """This node's Slurm name: ``explicit``, else ``$SLURMD_NODENAME``, else the short host name.

    Args:
        explicit: the ``--node`` value (None or empty: not given).
        environ: the environment to read (None: ``os.environ``).

    Returns:
        The node name (a letter or digit, then at most 127 of letters, digits, ``.``, ``_``, ``-``).

    Raises:
        UsageError: the name is empty or not a plain node name.
    """
    env = os.environ if environ is None else environ
    name = explicit or env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", name or ""):
        raise UsageError(f"bad node name {name!r}: give --node NAME (a plain Slurm node name)")
    return name


def reason_check(reason: str) -> str | None:
    """The check a drain reason set by robustctl's health check or sweep names, else None.

    ``"robustctl: health check: nvml.ecc: 1 uncorrectable"`` → ``"nvml.ecc"``; an operator's reason,
    a standby's (``robustctl-standby: …``) or ``robustctl evict``'s free text → None.
    """
    m = _OURS_RE.match(reason.strip())
    return m.group(1) if m else None


@dataclass(frozen=True)
class LocalCheckRequest:
    """What ``sweep --local`` does.

    Attributes:
        node: the node's name (see :func:`node_name`). slurm: act on Slurm (drain / resume).
        gpus: GPUs the node must have (0: none expected or not known). state: the store recording
        the history (None: none, no debounce). python: the interpreter that runs the probe.
        budget_s: the whole run's budget (at most :data:`BUDGET_S` under Slurm).
    """

    node: str
    slurm: bool = False
    gpus: int = 0
    state: Path | None = None
    python: str = sys.executable
    budget_s: float = BUDGET_S


def local_request(
    *,
    node: str | None = None,
    slurm: bool = False,
    gpus: int | None = None,
    state: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> LocalCheckRequest:
    """A :class:`LocalCheckRequest` from command-line values and the environment.

    Args:
        node: ``--node`` (None: ``$SLURMD_NODENAME``, else the short host name; :func:`node_name`).
        slurm: ``--slurm``.
        gpus: ``--gpus`` (None: 0).
        state: ``--state`` (None: ``$ROBUSTCTL_STATE``, else none: this mode records history only
            when asked).
        environ: the environment (None: the process's).

    Returns:
        The request.

    Raises:
        UsageError: a bad node name.
    """
    env = os.environ if environ is None else environ
    store = (
        state if state is not None else (Path(env["ROBUSTCTL_STATE"]) if env.get("ROBUSTCTL_STATE") else None)
    )
    return LocalCheckRequest(node=node_name(node, env), slurm=slurm, gpus=gpus or 0, state=store)


@dataclass(frozen=True)
class LocalCheckResult:
    """The node's verdict and what was done about it (the ``--json`` document).

    Attributes:
        node, status (the node's worst check); checks: every L0 check; findings: ``check: detail`` of
        the CRITICAL checks that name the node; pending: CRITICAL checks the policy holds back.
        action: ``drained``, ``resumed``, ``none``, or ``left drained (…)`` / ``already drained (…)``;
        slurm_state / slurm_reason: the node as Slurm showed it before (None without ``--slurm``).
        error: the Slurm command that failed (one line). warnings: one line each (store).
        history: the store recorded in (None: none). started_at / finished_at: UNIX s.
    """

    node: str
    status: Status
    checks: tuple[CheckResult, ...]
    findings: tuple[str, ...]
    pending: tuple[str, ...]
    action: str
    slurm_state: str | None
    slurm_reason: str | None
    error: str | None
    warnings: tuple[str, ...]
    history: str | None
    started_at: float
    finished_at: float
    budget_s: float
    kind: str = "sweep-local"
    schema_version: int = SCHEMA_VERSION

    @property
    def duration_s(self) -> float:
        """Wall seconds of the run."""
        return max(0.0, self.finished_at - self.started_at)

    @property
    def exit_code(self) -> ExitCode:
        """2 a finding, 3 not checked or a Slurm error, 1 pending or warning, 0 healthy."""
        from robustctl.sweep.policy import sweep_exit_code

        return sweep_exit_code(
            named=bool(self.findings),
            unchecked=self.status is Status.UNKNOWN or bool(self.error),
            pending=bool(self.pending) or self.status is Status.WARNING,
        )


def _probe(request: LocalCheckRequest, pool: TransportPool | None, budget: float) -> RunReport:
    from robustctl.config import DiagnoseSettings, PythonSettings, SshSettings
    from robustctl.diagnose import DiagnoseSpec, run_levels
    from robustctl.inventory import Host
    from robustctl.thresholds import Thresholds
    from robustctl.transport.pool import TransportPool

    host = Host(
        name=request.node,
        address="local",
        transport="local",
        ssh=SshSettings(),
        python=PythonSettings(path=request.python),
        gpus=request.gpus,
    )
    settings = DiagnoseSettings().model_copy(
        update={"deadline_s": budget, "host_timeout_s": budget, "retries": 0, "concurrency": 1}
    )
    spec = DiagnoseSpec(hosts=(host,), settings=settings, thresholds=Thresholds(), max_level=0)
    own = pool is None
    use = pool if pool is not None else TransportPool()
    try:
        return run_levels(spec, use)
    finally:
        if own:
            use.close()


def _decide(
    request: LocalCheckRequest, report: RunReport, settings: SweepSettings, clock: Callable[[], float]
) -> tuple[list[tuple[str, str]], list[str], str | None, list[str]]:
    """(confirmed findings as (check, detail), pending checks, store recorded in, warnings)."""
    from robustctl.sweep.history import MAX_DETAIL

    host = report.hosts[0]
    critical = sorted(
        {c.name: c.summary for c in host.checks if c.status is Status.CRITICAL}.items(), key=lambda kv: kv[0]
    )
    if request.state is None:
        return [(c, d[:MAX_DETAIL]) for c, d in critical], [], None, []
    from robustctl.store import Store, StoreError
    from robustctl.sweep import history
    from robustctl.sweep.policy import record_sweep

    try:
        with Store.open(request.state, clock=clock) as store:
            _, decisions = record_sweep(store, history.observations_of(host), settings, sweep=False)
    except (StoreError, OSError) as exc:
        warn = f"robustctl: warning: history not recorded ({exc}); every CRITICAL check counts"
        return [(c, d[:MAX_DETAIL]) for c, d in critical], [], None, [warn]
    confirmed = [(f.check, f.detail) for d in decisions for f in d.findings if f.confirmed]
    pending = [f.check for d in decisions for f in d.findings if not f.confirmed]
    return confirmed, pending, str(request.state), []


def drain_reason(findings: list[tuple[str, str]]) -> str:
    """``health check: CHECK: DETAIL (+N more)`` of the first finding, one line of at most
    :data:`MAX_REASON` characters with the ``robustctl: `` prefix Slurm's back end adds."""
    check, detail = findings[0]
    more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
    room = MAX_REASON - len("robustctl: ") - len(REASON_PREFIX) - len(check) - len(more) - 4
    detail = " ".join(detail.split())
    if len(detail) > room:
        detail = detail[: max(0, room - 1)] + "…"
    return f"{REASON_PREFIX}: {check}: {detail}{more}"


def _act(
    slurm: Slurm, node: str, report: RunReport, findings: list[tuple[str, str]], pending: list[str]
) -> tuple[str, str | None, str | None, str | None]:
    """Drain or resume ``node``; (action, Slurm state before, its reason before, error)."""
    from robustctl.schedulers.base import SchedulerError

    try:
        info = slurm.show_nodes([node]).get(node)
    except SchedulerError as exc:
        return "none", None, None, str(exc)
    if info is None:
        return "none", None, None, f"node {node} is unknown to Slurm (set SLURMD_NODENAME or --node)"
    before = (info.state + ("+drain" if info.drained and "drain" not in info.state else ""), info.reason)
    host = report.hosts[0]
    try:
        if findings:
            if info.drained and not info.standby:
                return f"already drained (reason: {info.reason or 'none'})", *before, None
            slurm.drain([node], drain_reason(findings))
            return "drained", *before, None
        if not info.drained:
            return "none", *before, None
        check = reason_check(info.reason)
        if check is None:
            return "left drained (reason not set by robustctl's health check or sweep)", *before, None
        statuses = [c.status for c in host.checks if c.name == check]
        healthy = host.status in _PASSED and not pending
        if not statuses or not healthy or any(s not in _PASSED for s in statuses):
            why = "did not run now" if not statuses else "is not healthy now"
            return f"left drained ({check} {why})", *before, None
        slurm.resume([node], f"health check: {check} passes again")
        return "resumed", *before, None
    except SchedulerError as exc:
        return "none", *before, str(exc)


def run_local_check(
    request: LocalCheckRequest,
    *,
    pool: TransportPool | None = None,
    slurm: Slurm | None = None,
    settings: SweepSettings | None = None,
    clock: Callable[[], float] = time.time,
) -> LocalCheckResult:
    """Check this node once and, with ``request.slurm``, drain or resume it (module docstring).

    Never raises for the node's state: a probe that cannot run is UNKNOWN, a Slurm command that
    fails is ``error`` (exit 3), a store that cannot be opened a warning.

    Args:
        request: what to do (:func:`local_request`).
        pool: the transports (tests: a fake); None: a local one.
        slurm: the Slurm back end (tests: a fake runner); None: ``scontrol``/``sinfo`` from ``PATH``,
            ``$SLURM_CONF``, each command under :data:`SLURM_TIMEOUT_S`.
        settings: the debounce (None: defaults).
        clock: the UNIX clock, seconds (the run's times and the history's).

    Returns:
        The node's verdict and what was done about it (:class:`LocalCheckResult`).
    """
    from robustctl.config import SweepSettings

    t0 = time.monotonic()
    started = clock()
    budget = min(request.budget_s, BUDGET_S) if request.slurm else request.budget_s
    probe_budget = max(1.0, budget - (SLURM_CALLS * SLURM_TIMEOUT_S if request.slurm else 2.0))
    report = _probe(request, pool, probe_budget)
    findings, pending, recorded, warnings = _decide(request, report, settings or SweepSettings(), clock)
    action, state, reason, error = "none", None, None, None
    if request.slurm:
        if slurm is None:
            from robustctl.schedulers.slurm import Slurm

            left = budget - (time.monotonic() - t0)
            slurm = Slurm(timeout_s=max(1.0, min(SLURM_TIMEOUT_S, left / SLURM_CALLS)))
        action, state, reason, error = _act(slurm, request.node, report, findings, pending)
    host = report.hosts[0]
    return LocalCheckResult(
        node=request.node,
        status=host.status,
        checks=host.checks,
        findings=tuple(f"{c}: {d}" for c, d in findings),
        pending=tuple(pending),
        action=action,
        slurm_state=state,
        slurm_reason=reason,
        error=error,
        warnings=tuple(warnings),
        history=recorded,
        started_at=started,
        finished_at=clock(),
        budget_s=budget,
    )
