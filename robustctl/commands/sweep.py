"""``robustctl sweep`` (and ``sweep --local``) as library calls; ``history`` and ``lemons`` are in
:mod:`robustctl.commands.history`.

:func:`run_sweep` runs the quick diagnose level (L0: host and NVML checks, no GPU load, safe on
hosts running a job) on every host in service (active, standby, suspect, returned; never evicted),
deeper levels up to ``level`` only on hosts no job holds (unless ``include_busy``), records every
host's checks in the history (:mod:`robustctl.sweep.history`), applies the debounce policy
(:mod:`robustctl.sweep.policy`) and, with ``act``, records the confirmed hosts suspect or drains them
through ``robustctl evict`` (rails and audit apply). One sweep at a time (:mod:`robustctl.sweep.lock`).

Exit code of a sweep: 2 when the policy names a host (a confirmed finding), else 3 when a host could
not be checked, else 1 when a finding is pending (CRITICAL but debounced) or a check warns, else 0.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from robustctl.errors import ConfigError, RobustctlError, UsageError
from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION, RunReport, Status

if TYPE_CHECKING:
    from robustctl.commands.ettr import JobEttr
    from robustctl.diagnose import ProgressSink
    from robustctl.inventory import Inventory
    from robustctl.store import Store
    from robustctl.sweep.healthcheck import LocalCheckRequest, LocalCheckResult
    from robustctl.sweep.history import CheckChange, CheckState, HostCounters
    from robustctl.sweep.lemons import Lemon
    from robustctl.sweep.policy import Decision
    from robustctl.transport.pool import TransportPool

__all__ = [
    "SweepHost",
    "SweepRequest",
    "SweepResult",
    "check_output_path",
    "local_request",
    "run_local",
    "run_sweep",
    "sweep_request",
    "with_transport",
]

RECENT_CHANGES = 10
"""State changes per host carried in a sweep's result (the HTML report's history column)."""
SWEPT_STATES = ("active", "standby", "suspect", "returned")
"""Host states a sweep checks (an evicted host is out for repair)."""


@dataclass(frozen=True)
class SweepRequest:
    """What a sweep does.

    Attributes:
        inventory: the resolved inventory. state: the store file (None: ``$ROBUSTCTL_STATE``/XDG).
        hosts: a host range restricting the sweep (None: every host in service).
        level: highest diagnose level (0: quick checks only). include_busy: run levels above 0 on
            hosts a job holds too. act: apply the policy (``sweep.act``: suspect or drain).
        textfile / html: where the caller writes the Prometheus textfile / HTML report
            (:func:`robustctl.report.sweep.write_sweep_files`, atomically; checked writable here
            before the sweep runs). :func:`run_sweep` itself writes no artefact.
        accept_new_host_keys: as diagnose. (``--transport srun`` is applied to ``inventory``'s hosts by
        :func:`sweep_request`.)
    """

    inventory: Inventory
    state: Path | None = None
    hosts: str | None = None
    level: int = 0
    include_busy: bool = False
    act: bool = False
    textfile: Path | None = None
    html: Path | None = None
    accept_new_host_keys: bool = False


@dataclass(frozen=True)
class SweepHost:
    """One host of a sweep: its verdict, the highest level it got, each check's worst status now.

    Attributes:
        host, status (its verdict after the policy, as the history records it: critical only when
        named, warning while a CRITICAL finding is pending; the engine's own verdict is in the
        result's ``report``), busy (a job holds it), max_level, checks ({check: status}), error
        (unknown outcome), named (the policy names it), pending (CRITICAL checks waiting on their rule).
    """

    host: str
    status: Status
    busy: bool
    max_level: int
    checks: Mapping[str, str]
    error: str | None = None
    named: bool = False
    pending: tuple[str, ...] = ()


@dataclass(frozen=True)
class SweepResult:
    """A sweep's outcome (the ``--json`` document).

    Attributes:
        started_at / finished_at (UNIX s, the store's clock), duration_s; hosts: one per swept host;
        skipped: hosts not swept (evicted); decisions: the policy's reading of each host with a
        CRITICAL check; acted: what ``--act`` did (None without it), ``{"suspect": [...], "drained":
        [...], "skipped": [...], "error": str|None}``; lemons: lemons now (the ``sweep:`` window);
        recent: each host's newest state changes; counters: each host's counters; warnings: one line each (clock went backwards,
        a job's ETTR ledger that could not be read); state: the store file; report: the diagnose engine's report;
        ettr: the ETTR of each job of the inventory that has ledger data (:func:`_job_ettrs`, best effort).
    """

    started_at: float
    finished_at: float
    hosts: tuple[SweepHost, ...]
    skipped: tuple[str, ...]
    decisions: tuple[Decision, ...]
    acted: Mapping[str, Any] | None
    lemons: tuple[Lemon, ...]
    recent: Mapping[str, tuple[CheckChange, ...]]
    counters: Mapping[str, HostCounters]
    warnings: tuple[str, ...]
    state: str
    report: RunReport
    ettr: tuple[JobEttr, ...] = ()
    kind: str = "sweep"
    schema_version: int = SCHEMA_VERSION

    @property
    def duration_s(self) -> float:
        """Wall seconds of the sweep."""
        return max(0.0, self.finished_at - self.started_at)

    @property
    def exit_code(self) -> ExitCode:
        """2 a host named, 3 a host not checked, 1 pending or warning, 0 healthy."""
        if any(h.named for h in self.hosts):
            return ExitCode.CRITICAL
        if any(h.status is Status.UNKNOWN for h in self.hosts):
            return ExitCode.UNKNOWN
        if any(h.pending or h.status is Status.WARNING for h in self.hosts):
            return ExitCode.WARNING
        return ExitCode.OK


def check_output_path(path: Path, flag: str) -> None:
    """Refuse an output file whose directory is missing or not writable, or that is not a regular file.

    Raises:
        ConfigError: one line naming ``flag`` and the path (exit 78), before anything runs.
    """
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(f"{flag} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: directory {parent} is not writable")
    if path.exists() and not path.is_file():
        raise ConfigError(f"{flag} {path}: not a regular file")


def sweep_request(
    *,
    inventory: Path | None = None,
    state: Path | None = None,
    hosts: str | None = None,
    level: int = 0,
    include_busy: bool = False,
    act: bool = False,
    textfile: Path | None = None,
    html: Path | None = None,
    accept_new_host_keys: bool = False,
    transport: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> SweepRequest:
    """A :class:`SweepRequest` from command-line values; the output paths are checked here.

    ``transport`` (``--transport``): reach every host through it (``srun``: each host is the Slurm
    node of its name, all in one step; ``ssh``/``local`` as the inventory's ``transport:``).

    Raises:
        ConfigError / InventoryError: bad inventory; an output directory missing or not writable.
        UsageError: a bad ``hosts`` range or level.
    """
    from robustctl.commands import options

    if not 0 <= level <= 3:
        raise UsageError(f"bad --level {level}: a sweep runs levels 0-3")
    inv = options.inventory(inventory, environ)
    if transport is not None:
        inv = with_transport(inv, transport)
    if hosts is not None:
        options.select_hosts(inv, hosts)
    for path, flag in ((textfile, "--textfile"), (html, "--html")):
        if path is not None:
            check_output_path(path, flag)
    return SweepRequest(
        inventory=inv,
        state=options.state_path(state, environ),
        hosts=hosts,
        level=level,
        include_busy=include_busy,
        act=act,
        textfile=textfile,
        html=html,
        accept_new_host_keys=accept_new_host_keys,
    )


TRANSPORTS = ("ssh", "local", "srun")


def with_transport(inventory: Inventory, transport: str) -> Inventory:
    """``inventory`` with every host reached through ``transport`` (``--transport``).

    Raises:
        UsageError: an unknown transport, or ``ssh`` for a host the inventory has no address for
            (a local host's address is this machine).
    """
    import dataclasses

    if transport not in TRANSPORTS:
        raise UsageError(f"bad --transport {transport!r}: one of {', '.join(TRANSPORTS)}")
    hosts = []
    for h in inventory.hosts:
        if h.transport == transport:
            hosts.append(h)
            continue
        if transport == "ssh" and h.transport == "local":
            raise UsageError(f"--transport ssh: host {h.name} is transport: local and has no address")
        address = {"local": "local", "srun": h.name}.get(transport, h.address)
        kind: Literal["ssh", "local", "srun"] = (
            "srun" if transport == "srun" else "local" if transport == "local" else "ssh"
        )
        hosts.append(dataclasses.replace(h, transport=kind, address=address))
    return dataclasses.replace(inventory, hosts=tuple(hosts))


def _targets(request: SweepRequest, store: Store) -> tuple[list[Any], list[str], set[str]]:
    """(hosts to sweep, hosts skipped as evicted, busy host names)."""
    from robustctl.commands import options

    inv = request.inventory
    chosen = options.select_hosts(inv, request.hosts) if request.hosts else list(inv.hosts)
    recorded = {m.host: m.state.value for m in store.machines()}
    swept: list[Any] = []
    skipped: list[Any] = []
    for h in chosen:
        (swept if recorded.get(h.name, h.state.value) in SWEPT_STATES else skipped).append(h)
    busy: set[str] = set()
    for name, job in inv.jobs.items():
        busy.update(h.name for h in job.hosts)
        busy.update(store.job_hosts(name) or ())
    return swept, [h.name for h in skipped], busy


def _merge(reports: list[RunReport], order: list[str]) -> RunReport:
    by = {h.host: h for r in reports for h in r.hosts}
    hosts = tuple(by[n] for n in order if n in by)
    levels = max((r.levels for r in reports), key=len)
    return RunReport(
        status=Status.worst(h.status for h in hosts),
        hosts=hosts,
        levels=levels,
        suspects=tuple(h.host for h in hosts if h.status is Status.CRITICAL),
        unknown=tuple(h.host for h in hosts if h.status is Status.UNKNOWN),
        started_at=min(r.started_at for r in reports),
        finished_at=max(r.finished_at for r in reports),
    )


def _diagnose(
    request: SweepRequest,
    hosts: list[Any],
    busy: set[str],
    pool: TransportPool,
    progress: ProgressSink | None,
) -> tuple[RunReport, dict[str, int]]:
    from robustctl.diagnose import DiagnoseSpec, run_levels

    inv = request.inventory
    deep = [h for h in hosts if request.include_busy or h.name not in busy] if request.level > 0 else []
    quick = [h for h in hosts if h not in deep]
    reports: list[RunReport] = []
    levels: dict[str, int] = {}
    for group, level in ((quick, 0), (deep, request.level)):
        if not group:
            continue
        spec = DiagnoseSpec(
            hosts=tuple(group), settings=inv.diagnose, thresholds=inv.thresholds, max_level=level
        )
        reports.append(run_levels(spec, pool, progress=progress))
        levels.update({h.name: level for h in group})
    return _merge(reports, [h.name for h in hosts]), levels


def _act(request: SweepRequest, store: Store, decisions: list[Decision]) -> dict[str, Any]:
    """Record the named hosts suspect; with ``sweep.act: drain``, drain them through ``evict``."""
    from robustctl.store import MachineState
    from robustctl.suspects import record_suspects

    named = {d.host: d.reason() for d in decisions if d.named}
    out: dict[str, Any] = {"suspect": [], "drained": [], "skipped": [], "error": None}
    if not named:
        return out
    inv_states = {h.name: MachineState(h.state.value) for h in request.inventory.hosts}
    rec = record_suspects(store, named, source="sweep", inventory_states=inv_states)
    out["suspect"] = list(rec.suspects)
    out["skipped"] = [f"{s.host} ({s.state.value})" for s in rec.skipped]
    if request.inventory.sweep.act != "drain" or not rec.suspects:
        return out
    from robustctl.commands.actions import always
    from robustctl.commands.evict import EvictRequest, run_evict
    from robustctl.inventory.hostrange import collapse

    source = request.inventory.source
    try:
        res = run_evict(
            EvictRequest(
                inventory=None if source.startswith("<") else Path(source),
                state=request.state,
                hosts=collapse(list(rec.suspects)),
                reason="; ".join(named[h] for h in rec.suspects)[:1000],
            ),
            confirm=always,
        )
    except RobustctlError as exc:
        out["error"] = f"drain not applied: {exc}"
        return out
    if int(res.exit_code) == 0:
        out["drained"] = list(rec.suspects)
    else:
        out["error"] = f"drain not applied (exit {int(res.exit_code)}): see robustctl audit"
    return out


def run_sweep(
    request: SweepRequest,
    *,
    pool: TransportPool | None = None,
    progress: ProgressSink | None = None,
    clock: Callable[[], float] = time.time,
) -> SweepResult:
    """Sweep the fleet once (see the module docstring) and write the asked outputs.

    Args:
        pool: the transports (closed by the caller); None: one opened and closed here.
        clock: UNIX seconds for the history (tests pass a fake clock).

    Raises:
        SweepBusy: another sweep runs (exit 3). StoreError: the store cannot be opened or written
            (exit 78). ConfigError: an output file cannot be written (exit 78; the old file is intact).
    """
    from robustctl.commands.options import state_path
    from robustctl.store import Store
    from robustctl.sweep import history
    from robustctl.sweep.lemons import find_lemons
    from robustctl.sweep.lock import sweep_lock
    from robustctl.sweep.policy import record_sweep

    path = state_path(request.state)
    settings = request.inventory.sweep
    with Store.open(path, clock=clock) as store, sweep_lock(path):
        started = clock()
        hosts, skipped, busy = _targets(request, store)
        own = pool is None
        if pool is None:
            from robustctl.transport.pool import TransportPool

            pool = TransportPool(
                accept_new_host_keys=request.accept_new_host_keys, scheduler=request.inventory.scheduler
            )
        try:
            if hosts:
                report, levels = _diagnose(request, hosts, busy, pool, progress)
            else:
                now = clock()
                report, levels = RunReport(Status.SKIPPED, (), (), (), (), now, now), {}
        finally:
            if own:
                pool.close()
        obs = [o for h in report.hosts for o in history.observations_of(h)]
        rec, decisions = record_sweep(store, obs, settings, started_at=started)
        warnings: list[str] = []
        if rec.clock_skew_s > 0:
            warnings.append(
                f"robustctl: warning: the clock is {rec.clock_skew_s:.0f} s behind the last sweep recorded in "
                f"{path}; this sweep is recorded at that time"
            )
        history.prune(store, rec.at - settings.retention_days * 86_400)
        names = [h.host for h in report.hosts]
        states = history.check_states(store, names)
        acted = _act(request, store, decisions) if request.act else None
        lemons = find_lemons(
            store,
            since=rec.at - settings.lemon_days * 86_400,
            min_failures=settings.lemon_failures,
            min_returns=settings.lemon_returns,
        )
        recent = {n: tuple(history.changes(store, host=n, limit=RECENT_CHANGES)) for n in names}
        counters = history.counters(store, names)
        ettrs = _job_ettrs(request.inventory, store, rec.at, warnings)
    by_decision = {d.host: d for d in decisions}
    swept = tuple(
        SweepHost(
            host=h.host,
            status=_verdict(states, h.host, h.status),
            busy=h.host in busy,
            max_level=levels.get(h.host, 0),
            checks=_checks(states, h.host),
            error=h.error,
            named=h.host in by_decision and by_decision[h.host].named,
            pending=tuple(f.check for f in by_decision[h.host].findings if not f.confirmed)
            if h.host in by_decision
            else (),
        )
        for h in report.hosts
    )
    result = SweepResult(
        started_at=min(started, rec.at),
        finished_at=rec.at,
        hosts=swept,
        skipped=tuple(skipped),
        decisions=tuple(decisions),
        acted=acted,
        lemons=tuple(lemons),
        recent=recent,
        counters=counters,
        warnings=tuple(warnings),
        state=str(path),
        report=report,
        ettr=ettrs,
    )
    return result


def _job_ettrs(inventory: Inventory, store: Store, now: float, warnings: list[str]) -> tuple[JobEttr, ...]:
    """The cumulative ETTR ledger of each job of the inventory, for the textfile and the page's
    timeline (issue 22, item 4): :func:`robustctl.commands.ettr.ettr_of_store` over all the store
    holds for the job, summed up and bounded by :meth:`~robustctl.commands.ettr.EttrResult.summary`.
    Best effort: a job without data is left out; a store or ledger error is one warning line, never a
    failed sweep."""
    from robustctl.commands.ettr import ettr_of_store

    out: list[JobEttr] = []
    for job in sorted(inventory.jobs):
        try:
            summary = ettr_of_store(store, job, now=now).summary()
        except ConfigError as exc:  # StoreError, LedgerInputError, WatchStoreInputError: all exit 78
            warnings.append(f"robustctl: warning: job {job!r}: no ETTR in the textfile: {exc}")
            continue
        if summary is not None:
            out.append(summary)
    return tuple(out)


def _verdict(states: Mapping[tuple[str, str], CheckState], host: str, engine: Status) -> Status:
    """The host's verdict as recorded (after the policy: a pending finding is a warning)."""
    from robustctl.sweep.history import HOST_CHECK

    st = states.get((host, HOST_CHECK))
    return Status(st.status) if st is not None else engine


def _checks(states: Mapping[tuple[str, str], CheckState], host: str) -> dict[str, str]:
    from robustctl.sweep.history import HOST_CHECK

    return {c: s.status for (h, c), s in sorted(states.items()) if h == host and c != HOST_CHECK}


# --- this node (sweep --local [--slurm]) ----------------------------------------------------------


def local_request(
    *,
    node: str | None = None,
    slurm: bool = False,
    gpus: int | None = None,
    state: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> LocalCheckRequest:
    """A :class:`~robustctl.sweep.healthcheck.LocalCheckRequest` from command-line values and the
    environment: the node's name (``--node``, ``$SLURMD_NODENAME``, the short host name) and the store
    (``--state``, else ``$ROBUSTCTL_STATE``, else none: this mode records history only when asked).

    Raises:
        UsageError: a bad node name.
    """
    from robustctl.sweep.healthcheck import LocalCheckRequest, node_name

    env = os.environ if environ is None else environ
    store = (
        state if state is not None else (Path(env["ROBUSTCTL_STATE"]) if env.get("ROBUSTCTL_STATE") else None)
    )
    return LocalCheckRequest(node=node_name(node, env), slurm=slurm, gpus=gpus or 0, state=store)


def run_local(request: LocalCheckRequest, **kwargs: Any) -> LocalCheckResult:
    """``robustctl sweep --local [--slurm]``: :func:`robustctl.sweep.healthcheck.run_local_check`."""
    from robustctl.sweep.healthcheck import run_local_check

    return run_local_check(request, **kwargs)
