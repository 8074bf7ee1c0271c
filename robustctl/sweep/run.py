"""One fleet sweep, from the hosts it picks to what it records: the orchestration behind ``robustctl sweep``.

:func:`sweep_fleet` runs inside :func:`sweep_session` (the store open, one sweep at a time:
:mod:`robustctl.sweep.lock`), in this order:

1. **Which hosts** (:func:`sweep_targets`): of the hosts asked for, those in service
   (:data:`SWEPT_STATES`, by the store's record of the host, else the inventory's state) are swept, the
   others (evicted) skipped; a host is *busy* when a job holds it (the inventory's job or the store's
   record of the job's hosts).
2. **The diagnose fan-out** (:func:`diagnose_hosts`): the quick level (L0: host and NVML checks, no
   GPU load, safe on hosts running a job) on every swept host, deeper levels up to the asked level only
   on hosts no job holds, unless busy hosts are included (:func:`split_levels`); the two runs' reports
   are merged into one in the hosts' order (:func:`merge_reports`).
3. **Policy and recording** (:func:`robustctl.sweep.policy.record_sweep`): every host's checks go to
   the history with its verdict after the debounce; history older than ``sweep.retention_days`` is
   pruned.
4. **Acting** (:func:`act_on`, only when asked): the named hosts are recorded suspect; with
   ``sweep.act: drain`` they are drained through the caller's :data:`Drainer` (the command layer passes
   ``robustctl evict``: rails and audit apply).
5. **What the result carries**: each host's :class:`SweepHost` (:func:`sweep_hosts`), the lemons, each
   host's newest state changes and its counters.

The command (:func:`robustctl.commands.sweep.run_sweep`) builds a :class:`SweepSpec` from its request,
adds what only the command layer knows (each job's ETTR) and returns its result type.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from robustctl.errors import RobustctlError, UsageError
from robustctl.models import RunReport, Status

if TYPE_CHECKING:
    from robustctl.diagnose import ProgressSink
    from robustctl.inventory import Host, Inventory
    from robustctl.store import Store
    from robustctl.sweep.history import CheckChange, CheckState, HostCounters
    from robustctl.sweep.lemons import Lemon
    from robustctl.sweep.policy import Decision
    from robustctl.transport.pool import TransportPool

__all__ = [
    "DAY_S",
    "DRAIN_REASON_CHARS",
    "RECENT_CHANGES",
    "SWEPT_STATES",
    "TRANSPORTS",
    "Drainer",
    "SweepHost",
    "SweepOutcome",
    "SweepSpec",
    "SweepTargets",
    "act_on",
    "diagnose_hosts",
    "merge_reports",
    "split_levels",
    "sweep_fleet",
    "sweep_hosts",
    "sweep_session",
    "sweep_targets",
    "with_transport",
]

RECENT_CHANGES = 10
"""State changes per host carried in a sweep's result (the HTML report's history column)."""
SWEPT_STATES = ("active", "standby", "suspect", "returned")
"""Host states a sweep checks (an evicted host is out for repair)."""
TRANSPORTS = ("ssh", "local", "srun")
"""The transports ``--transport`` can put every host on."""
DAY_S = 86_400
"""Seconds in a day: the ``sweep:`` section counts its retention and lemon windows in days."""
DRAIN_REASON_CHARS = 1000
"""Characters of the drain's reason (the named hosts' reasons joined): 1000 characters are at most 4000
UTF-8 bytes, within ``evict``'s reason limit (:data:`robustctl.commands.actions.MAX_REASON_BYTES`,
4096), so a drain is never refused for its reason's length however many hosts are named."""

Drainer = Callable[[Sequence[str], str], int]
"""Drains hosts: ``drain(hosts, reason) -> exit code`` (0: drained). Raises
:class:`~robustctl.errors.RobustctlError` when the drain could not be applied. The command layer passes
one that goes through ``robustctl evict`` (rails, audit)."""


@dataclass(frozen=True)
class SweepSpec:
    """What one fleet sweep does, resolved (the command's request after flag handling).

    Attributes:
        inventory: the resolved inventory (its ``sweep:`` section is the policy).
        state: the store file. hosts: the hosts asked for, in inventory order (a ``--hosts`` range
            resolved, else every host of the inventory); :func:`sweep_targets` keeps those in service.
        level: highest diagnose level (0-3). include_busy: levels above 0 on hosts a job holds too.
        act: apply the policy (:func:`act_on`). accept_new_host_keys: as diagnose.
    """

    inventory: Inventory
    state: Path
    hosts: tuple[Host, ...]
    level: int = 0
    include_busy: bool = False
    act: bool = False
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
class SweepTargets:
    """Which hosts a sweep checks (:func:`sweep_targets`).

    Attributes:
        swept: the hosts in service, in the order asked. skipped: the names of the others (evicted).
        busy: the names of the hosts a job holds (any host of the inventory or the store's record,
            swept or not).
    """

    swept: tuple[Host, ...]
    skipped: tuple[str, ...]
    busy: frozenset[str]


@dataclass(frozen=True)
class SweepOutcome:
    """What a fleet sweep saw, recorded and did (:func:`sweep_fleet`).

    Attributes:
        started_at / finished_at: UNIX s, the store's clock (``finished_at`` is the time the sweep is
            recorded at; ``started_at`` is never after it). hosts: one per swept host, in order.
        skipped: hosts not swept. decisions: the policy's reading of each host with a CRITICAL check.
        acted: what acting did (None: not asked), as :func:`act_on` returns it. lemons: lemons now
            (the ``sweep:`` window). recent: each host's newest state changes (at most
            :data:`RECENT_CHANGES`). counters: each host's counters. warnings: one line each (the clock
            went backwards). state: the store file. report: the diagnose engine's report.
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


def with_transport(inventory: Inventory, transport: str) -> Inventory:
    """``inventory`` with every host reached through ``transport`` (``--transport``).

    Args:
        inventory: the inventory.
        transport: one of :data:`TRANSPORTS` (``srun``: the host's address becomes its name, the Slurm
            node; ``local``: this machine; ``ssh``: the inventory's address).

    Returns:
        A copy of ``inventory``; hosts already on ``transport`` are kept as they are.

    Raises:
        UsageError: an unknown transport, or ``ssh`` for a host the inventory has no address for
            (a local host's address is this machine).
    """
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


def sweep_targets(hosts: Sequence[Host], inventory: Inventory, store: Store) -> SweepTargets:
    """Split ``hosts`` into those a sweep checks and those it skips, and name the busy hosts.

    Args:
        hosts: the hosts asked for.
        inventory: their inventory (its jobs).
        store: the open store (each machine's recorded state, each job's recorded hosts after standby
            swaps).

    Returns:
        A :class:`SweepTargets`: a host is swept when its state (the store's record, else the
        inventory's) is one of :data:`SWEPT_STATES`; busy hosts are every job's hosts, from the
        inventory and from the store.
    """
    recorded = {m.host: m.state.value for m in store.machines()}
    swept: list[Host] = []
    skipped: list[str] = []
    for h in hosts:
        if recorded.get(h.name, h.state.value) in SWEPT_STATES:
            swept.append(h)
        else:
            skipped.append(h.name)
    busy: set[str] = set()
    for name, job in inventory.jobs.items():
        busy.update(h.name for h in job.hosts)
        busy.update(store.job_hosts(name) or ())
    return SweepTargets(tuple(swept), tuple(skipped), frozenset(busy))


def split_levels(
    hosts: Sequence[Host], busy: frozenset[str], level: int, include_busy: bool
) -> tuple[list[Host], list[Host]]:
    """Which hosts get only the quick level and which get the deeper levels.

    Args:
        hosts: the swept hosts.
        busy: the names of the hosts a job holds.
        level: the highest level asked (0: quick checks only).
        include_busy: deeper levels on busy hosts too.

    Returns:
        ``(quick, deep)``, each in ``hosts`` order: with ``level`` 0 every host is quick; else a host is
        deep unless a job holds it (and ``include_busy`` is off): a deeper level loads the GPUs.
    """
    deep = [h for h in hosts if include_busy or h.name not in busy] if level > 0 else []
    quick = [h for h in hosts if h not in deep]
    return quick, deep


def merge_reports(reports: Sequence[RunReport], order: Sequence[str]) -> RunReport:
    """One report from the reports of disjoint host groups, the hosts in ``order``.

    Args:
        reports: at least one report.
        order: host names; a name no report has is left out.

    Returns:
        A :class:`~robustctl.models.RunReport` whose status is the worst host's, suspects the CRITICAL
        hosts and unknown the UNKNOWN ones (in ``order``), levels the longest report's, and whose times
        span all the reports.
    """
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


def diagnose_hosts(
    spec: SweepSpec,
    targets: SweepTargets,
    pool: TransportPool,
    progress: ProgressSink | None,
) -> tuple[RunReport, dict[str, int]]:
    """Run the diagnose levels on the swept hosts (:func:`split_levels`), one engine run per group.

    Args:
        spec: the sweep (its inventory's diagnose settings and thresholds, its level).
        targets: at least one swept host.
        pool: the transports.
        progress: the engine's progress sink (None: none).

    Returns:
        (the merged report, in the swept hosts' order; each host's highest level asked).
    """
    from robustctl.diagnose import DiagnoseSpec, run_levels

    inv = spec.inventory
    quick, deep = split_levels(targets.swept, targets.busy, spec.level, spec.include_busy)
    reports: list[RunReport] = []
    levels: dict[str, int] = {}
    for group, level in ((quick, 0), (deep, spec.level)):
        if not group:
            continue
        dspec = DiagnoseSpec(
            hosts=tuple(group), settings=inv.diagnose, thresholds=inv.thresholds, max_level=level
        )
        reports.append(run_levels(dspec, pool, progress=progress))
        levels.update({h.name: level for h in group})
    return merge_reports(reports, [h.name for h in targets.swept]), levels


def act_on(
    inventory: Inventory, store: Store, decisions: Sequence[Decision], drain: Drainer | None
) -> dict[str, Any]:
    """Act on the hosts the policy names: record them suspect; with ``sweep.act: drain``, drain them.

    Args:
        inventory: the inventory (each host's state where the store has none; ``sweep.act``).
        store: the open store.
        decisions: the policy's decisions.
        drain: drains the hosts recorded suspect (None: no drain, as with ``sweep.act: suspect``).

    Returns:
        ``{"suspect": [hosts marked], "drained": [hosts drained], "skipped": ["HOST (STATE)", ...],
        "error": str | None}`` (the ``acted`` of the sweep's JSON document, keys in this order). A
        drain that raises or exits non-zero is an ``error`` line, never a failed sweep.

    Raises:
        StoreError: the store cannot be written.
    """
    from robustctl.store import MachineState
    from robustctl.suspects import record_suspects

    named = {d.host: d.reason() for d in decisions if d.named}
    out: dict[str, Any] = {"suspect": [], "drained": [], "skipped": [], "error": None}
    if not named:
        return out
    inv_states = {h.name: MachineState(h.state.value) for h in inventory.hosts}
    rec = record_suspects(store, named, source="sweep", inventory_states=inv_states)
    out["suspect"] = list(rec.suspects)
    out["skipped"] = [f"{s.host} ({s.state.value})" for s in rec.skipped]
    if inventory.sweep.act != "drain" or not rec.suspects or drain is None:
        return out
    reason = "; ".join(named[h] for h in rec.suspects)[:DRAIN_REASON_CHARS]
    try:
        code = drain(list(rec.suspects), reason)
    except RobustctlError as exc:
        out["error"] = f"drain not applied: {exc}"
        return out
    if code == 0:
        out["drained"] = list(rec.suspects)
    else:
        out["error"] = f"drain not applied (exit {code}): see robustctl audit"
    return out


def sweep_hosts(
    report: RunReport,
    states: Mapping[tuple[str, str], CheckState],
    decisions: Sequence[Decision],
    busy: frozenset[str],
    levels: Mapping[str, int],
) -> tuple[SweepHost, ...]:
    """Each host of ``report`` as the sweep's result shows it.

    Args:
        report: the diagnose report.
        states: the check states after the sweep was recorded
            (:func:`robustctl.sweep.history.check_states`).
        decisions: the policy's decisions.
        busy: hosts a job holds.
        levels: each host's highest level asked (missing: 0).

    Returns:
        One :class:`SweepHost` per host of ``report``, in its order: the status is the host's recorded
        verdict (:data:`~robustctl.sweep.history.HOST_CHECK`; the engine's when none is recorded),
        the checks every other recorded check's status by name, ``pending`` the decision's unconfirmed
        findings.
    """
    from robustctl.sweep.history import HOST_CHECK

    by_decision = {d.host: d for d in decisions}
    out: list[SweepHost] = []
    for h in report.hosts:
        verdict = states.get((h.host, HOST_CHECK))
        decision = by_decision.get(h.host)
        out.append(
            SweepHost(
                host=h.host,
                status=Status(verdict.status) if verdict is not None else h.status,
                busy=h.host in busy,
                max_level=levels.get(h.host, 0),
                checks={
                    c: s.status for (n, c), s in sorted(states.items()) if n == h.host and c != HOST_CHECK
                },
                error=h.error,
                named=decision is not None and decision.named,
                pending=tuple(f.check for f in decision.findings if not f.confirmed) if decision else (),
            )
        )
    return tuple(out)


@contextmanager
def sweep_session(state: Path, clock: Callable[[], float] = time.time) -> Iterator[Store]:
    """The store open and the sweep lock held, for one sweep.

    Args:
        state: the store file.
        clock: UNIX seconds for the store (tests pass a fake clock).

    Yields:
        The open store; it is closed and the lock released on leaving.

    Raises:
        SweepBusy: another sweep holds the lock (exit 3).
        StoreError: the store cannot be opened (exit 78).
    """
    from robustctl.store import Store
    from robustctl.sweep.lock import sweep_lock

    with Store.open(state, clock=clock) as store, sweep_lock(state):
        yield store


def _diagnose_or_skip(
    spec: SweepSpec,
    targets: SweepTargets,
    pool: TransportPool | None,
    progress: ProgressSink | None,
    clock: Callable[[], float],
) -> tuple[RunReport, dict[str, int]]:
    """:func:`diagnose_hosts` through ``pool`` (None: one opened and closed here); no host: a SKIPPED
    report at the clock's time."""
    if not targets.swept:
        now = clock()
        return RunReport(Status.SKIPPED, (), (), (), (), now, now), {}
    if pool is not None:
        return diagnose_hosts(spec, targets, pool, progress)
    from robustctl.transport.pool import TransportPool

    own = TransportPool(accept_new_host_keys=spec.accept_new_host_keys, scheduler=spec.inventory.scheduler)
    try:
        return diagnose_hosts(spec, targets, own, progress)
    finally:
        own.close()


def sweep_fleet(
    spec: SweepSpec,
    store: Store,
    *,
    pool: TransportPool | None = None,
    progress: ProgressSink | None = None,
    clock: Callable[[], float] = time.time,
    drain: Drainer | None = None,
) -> SweepOutcome:
    """Sweep the fleet once (see the module docstring), inside :func:`sweep_session`.

    Args:
        spec: the sweep.
        store: the store :func:`sweep_session` opened.
        pool: the transports (closed by the caller); None: one opened and closed here.
        progress: the diagnose engine's progress sink (None: none).
        clock: UNIX seconds (the store's clock).
        drain: how named hosts are drained with ``spec.act`` and ``sweep.act: drain`` (:func:`act_on`).

    Returns:
        A :class:`SweepOutcome`; it writes no artefact.

    Raises:
        StoreError: the store cannot be read or written (exit 78).
    """
    from robustctl.sweep import history
    from robustctl.sweep.lemons import find_lemons
    from robustctl.sweep.policy import record_sweep

    settings = spec.inventory.sweep
    started = clock()
    targets = sweep_targets(spec.hosts, spec.inventory, store)
    report, levels = _diagnose_or_skip(spec, targets, pool, progress, clock)
    obs = [o for h in report.hosts for o in history.observations_of(h)]
    rec, decisions = record_sweep(store, obs, settings, started_at=started)
    warnings: list[str] = []
    if rec.clock_skew_s > 0:
        warnings.append(
            f"robustctl: warning: the clock is {rec.clock_skew_s:.0f} s behind the last sweep recorded in "
            f"{spec.state}; this sweep is recorded at that time"
        )
    history.prune(store, rec.at - settings.retention_days * DAY_S)
    names = [h.host for h in report.hosts]
    states = history.check_states(store, names)
    acted = act_on(spec.inventory, store, decisions, drain) if spec.act else None
    lemons = find_lemons(
        store,
        since=rec.at - settings.lemon_days * DAY_S,
        min_failures=settings.lemon_failures,
        min_returns=settings.lemon_returns,
    )
    return SweepOutcome(
        started_at=min(started, rec.at),
        finished_at=rec.at,
        hosts=sweep_hosts(report, states, decisions, targets.busy, levels),
        skipped=targets.skipped,
        decisions=tuple(decisions),
        acted=acted,
        lemons=tuple(lemons),
        recent={n: tuple(history.changes(store, host=n, limit=RECENT_CHANGES)) for n in names},
        counters=history.counters(store, names),
        warnings=tuple(warnings),
        state=str(spec.state),
        report=report,
    )
