"""``robustctl evict`` and ``robustctl return``: plan the eviction (with over-eviction) or the return.

Targets come from host names/ranges, or from a report file (``--from-report``):

* a ``robustctl diagnose --json`` document (``kind: "diagnose"``, :class:`~robustctl.models.RunReport`):
  its ``suspects``;
* a ``robustctl stacks --json`` document (``kind: "stacks"``, :class:`~robustctl.stacks.result.StacksReport`):
  its ``suspect_hosts``; with ``--over-evict auto`` and no ``--job``, the report's own
  ``over_eviction`` (the machines of the ``group`` it chose with its layout).

``--over-evict tp|pp|dp|cp|ep|auto`` with ``--job NAME`` expands the suspects to the machines of the
job's parallel group(s) of that kind containing any rank of a suspect machine (``auto``: the smallest
group containing every suspect rank, :func:`robustctl.stacks.blame.smallest_group`), over the job's
*current* host list (:func:`robustctl.actions.hosts.job_hosts`: the scheduler's, which follows standby
activations; else robustctl's record; else the inventory's, with a note in the plan).

An eviction plan has, per target host, ``drain`` (scheduler) then ``mark evicted`` (store); a step
already in its wanted state is a no-op. A return plan has ``resume`` then ``mark active`` (history:
evicted → returned → active).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robustctl.actions import ActionContext
from robustctl.actions.plan import Plan, RailCheck, Step, StepKind
from robustctl.actions.rails import evaluate_rails, non_empty
from robustctl.config import HostState
from robustctl.errors import ConfigError, UsageError
from robustctl.inventory.hostrange import compact_ranges
from robustctl.inventory.topology import Topology, smallest_group
from robustctl.models import SCHEMA_VERSION
from robustctl.schedulers.base import NodeState
from robustctl.store import MachineState
from robustctl.yamlsrc import read_regular_file

__all__ = [
    "MAX_REPORT_BYTES",
    "OVER_EVICT_MODES",
    "REPORT_SCHEMA_VERSIONS",
    "EvictSpec",
    "ReportTargets",
    "current_state",
    "expand_over_eviction",
    "load_report",
    "plan_evict",
    "plan_return",
]

OVER_EVICT_MODES = ("tp", "pp", "dp", "cp", "ep", "auto")
"""Accepted ``--over-evict`` values."""


@dataclass(frozen=True)
class EvictSpec:
    """What to evict, as the planner takes it (:func:`plan_evict`).

    The command's request, :class:`robustctl.commands.evict.EvictRequest`, adds the session's
    options (inventory, state, dry run, lock wait) and fills in the default reason.

    Attributes:
        hosts: a host range (``node[001-004],node017``) or None. report: a report file or None.
        job: the job whose layout defines the groups. over_evict: a mode of :data:`OVER_EVICT_MODES` or None.
        reason: why (required by the CLI). force / force_reason: override the overridable rails.
    """

    hosts: str | None = None
    report: Path | None = None
    job: str | None = None
    over_evict: str | None = None
    reason: str = ""
    force: bool = False
    force_reason: str | None = None


@dataclass(frozen=True)
class ReportTargets:
    """What a report file names.

    Attributes:
        kind: ``"diagnose"`` or ``"stacks"``. suspects: hosts named bad. over_eviction: the stacks
        report's own over-eviction set (empty for diagnose). group: one line on the stacks report's group.
    """

    kind: str
    suspects: tuple[str, ...]
    over_eviction: tuple[str, ...] = ()
    group: str | None = None


MAX_REPORT_BYTES = 32 * 1024 * 1024
"""Largest ``--from-report`` file read, bytes (32 MiB). A ``diagnose --json`` report of 10,000 hosts is
about 20 MiB; parsing JSON takes about 10x its size in memory, so the cap bounds that at a few hundred MB.
A larger file (or ``/dev/zero``) is refused before it is read."""

REPORT_SCHEMA_VERSIONS = frozenset({SCHEMA_VERSION})
"""``schema_version`` values of reports this version understands (a missing one reads as current)."""


def load_report(path: Path) -> ReportTargets:
    """Read a ``diagnose --json`` or ``stacks --json`` document.

    The file must be a regular file of at most :data:`MAX_REPORT_BYTES` (FIFOs and devices are refused
    without blocking, :func:`robustctl.yamlsrc.read_regular_file`). Errors in the file are configuration
    errors (exit 78, like an inventory's), not usage errors: the flag was fine, the file it names is not.

    Args:
        path: the ``--from-report`` file.

    Returns:
        The report's kind, suspects, and (a stacks report) its over-eviction set and group.

    Raises:
        ConfigError: missing, unreadable or special file, over the size cap, not JSON, not one of these
            two kinds, an unknown ``schema_version``, or a host list that is not a list of names; the
            message names the file.
    """
    raw = read_regular_file(path, max_bytes=MAX_REPORT_BYTES, what="JSON report")
    try:
        doc: Any = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a JSON report: not UTF-8 ({exc.reason})") from None
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{path}: not a JSON report: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a JSON object (a diagnose or stacks --json report)")
    version = doc.get("schema_version", SCHEMA_VERSION)
    if type(version) is not int or version not in REPORT_SCHEMA_VERSIONS:
        known = ", ".join(str(v) for v in sorted(REPORT_SCHEMA_VERSIONS))
        raise ConfigError(
            f"{path}: schema_version {str(version)[:40]!r} is not one this robustctl reads ({known})"
        )
    kind = doc.get("kind")

    def names(key: str) -> tuple[str, ...]:
        value = doc.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{path}: {key!r} is not a list of host names")
        return tuple(value)

    if kind == "diagnose":
        return ReportTargets("diagnose", names("suspects"))
    if kind == "stacks":
        group = doc.get("group")
        desc = None
        if isinstance(group, dict):
            desc = (
                f"{group.get('kind')} group {group.get('index')} (ranks {group.get('ranks')}) from the report"
            )
        return ReportTargets("stacks", names("suspect_hosts"), names("over_eviction"), desc)
    raise ConfigError(f"{path}: kind {str(kind)[:40]!r} is not a diagnose or stacks report")


def current_state(ctx: ActionContext, host: str) -> MachineState:
    """robustctl's lifecycle state of ``host``: the store's, else the inventory's."""
    rec = ctx.store.machine(host)
    if rec is not None:
        return rec.state
    inv = {h.name: h.state for h in ctx.inventory.hosts}.get(host, HostState.ACTIVE)
    return MachineState(inv.value)


def expand_over_eviction(
    ctx: ActionContext, job: str, suspects: Sequence[str], mode: str, *, hosts: Sequence[str] | None = None
) -> tuple[tuple[str, ...], str]:
    """The machines to evict for ``suspects`` of ``job`` under ``mode``, and a line naming the group(s).

    The job's machines are its current ones (:meth:`ActionContext.job_hosts`: the scheduler's, else
    robustctl's record, else the inventory's), or ``hosts`` when the caller already has them.

    Args:
        ctx: the action context (inventory, scheduler, store).
        job: the inventory job whose layout defines the groups.
        suspects: the suspect machines, names of the job's hosts.
        mode: one of :data:`OVER_EVICT_MODES`.
        hosts: the job's current machines, rank order (None: asked of :meth:`ActionContext.job_hosts`).

    Returns:
        ``(machines, group)``: the machines of the group(s) holding a suspect rank, rank order (empty
        when there is no suspect), and one line naming the group(s) (``"no suspect"`` when none).

    Raises:
        UsageError: unknown job or mode, a suspect not in the job, or a layout that does not match the
            job's current host list.
    """
    if mode not in OVER_EVICT_MODES:
        raise UsageError(f"--over-evict {mode!r}: expected one of {', '.join(OVER_EVICT_MODES)}")
    hosts = list(ctx.job_hosts(job).hosts if hosts is None else hosts)
    spec = ctx.inventory.job(job)
    g = spec.ranks_per_host
    if len(hosts) * g != spec.layout.world_size:
        raise UsageError(
            f"job {job}: layout of {spec.layout.world_size} ranks does not match its {len(hosts)} hosts × {g} ranks"
        )
    topo = Topology(spec.layout, g, hosts)
    index = {h: i for i, h in enumerate(hosts)}
    outside = [h for h in suspects if h not in index]
    if outside:
        raise UsageError(f"host {outside[0]!r} is not in job {job} (its hosts: {', '.join(hosts)})")
    ranks = [r for h in suspects for r in topo.machine_ranks(index[h])]
    if not ranks:
        return (), "no suspect"
    if mode == "auto":
        choice = smallest_group(topo, ranks)
        assert choice is not None
        return choice.machines, f"{choice.kind} group {choice.index} (ranks {choice.ranks}) of job {job}"
    groups = sorted({topo.group_index(r, mode) for r in ranks})
    members = {r for gi in groups for r in topo.group_ranks(mode, gi)}
    machines = tuple(topo.machine_name(m) for m in topo.machines_of(members))
    which = compact_ranges(groups)
    return machines, f"{mode} group{'s' if len(groups) > 1 else ''} {which} of job {job}"


def _jobs_hosts(ctx: ActionContext) -> dict[str, list[str]]:
    """Every inventory job's current machines (fallbacks included: the rails count a stopped job too)."""
    return {name: list(ctx.job_hosts(name).hosts) for name in ctx.inventory.jobs}


def _ordered(ctx: ActionContext, hosts: Iterable[str]) -> tuple[str, ...]:
    wanted = set(hosts)
    order = [h.name for h in ctx.inventory.hosts if h.name in wanted]
    return tuple(order + sorted(wanted - set(order)))


def _check_spec(req: EvictSpec) -> None:
    """Refuse a spec that names both, or neither, of hosts and report, or forces without a reason."""
    if req.hosts is not None and req.report is not None:
        raise UsageError("give hosts or --from-report, not both")
    if req.force and not (req.force_reason or "").strip():
        raise UsageError('--force needs --force-reason "why" (it is recorded in the audit log)')
    if req.hosts is None and req.report is None:
        raise UsageError(
            "name the hosts to evict (e.g. node017 or 'node[001-004]') or pass --from-report FILE"
        )


def _suspects(req: EvictSpec, ctx: ActionContext) -> tuple[list[str], ReportTargets | None]:
    """The hosts named bad (the named hosts, then the report's suspects) and the report read, if any.

    Args:
        req: the eviction spec.
        ctx: the action context.

    Returns:
        ``(suspects, report)``: the suspect host names and the report read (None: no ``--from-report``).

    Raises:
        UsageError: a bad range, a host the inventory lacks.
        ConfigError: the report (:func:`load_report`).
    """
    suspects: list[str] = []
    report: ReportTargets | None = None
    if req.hosts is not None:
        suspects.extend(ctx.resolve_hosts(req.hosts))
    if req.report is not None:
        report = load_report(req.report)
        known = {x.name for x in ctx.inventory.hosts}
        unknown = [h for h in report.suspects + report.over_eviction if h not in known]
        if unknown:
            raise UsageError(
                f"{req.report}: names host {unknown[0]!r} that is not in {ctx.inventory.source} (unresolved target)"
            )
        suspects.extend(h for h in report.suspects if h not in suspects)
    return suspects, report


def _targets(
    req: EvictSpec, ctx: ActionContext, suspects: list[str], report: ReportTargets | None, notes: list[str]
) -> tuple[tuple[str, ...], str | None]:
    """The hosts to evict (the suspects, over-evicted as asked) and the group chosen (one line or None).

    Args:
        req: the eviction spec.
        ctx: the action context.
        suspects: the hosts named bad (:func:`_suspects`).
        report: the report read (None: no ``--from-report``).
        notes: the plan's notes; a line is appended when the job's hosts came from a fallback.

    Returns:
        ``(targets, group)``: the hosts to evict and one line on the group chosen (None: no over-eviction).

    Raises:
        UsageError: ``--over-evict`` without ``--job`` outside a stacks report's ``auto``; see
            :func:`expand_over_eviction`.
    """
    if req.over_evict is None:
        return _ordered(ctx, suspects), None
    if req.job is None:
        if req.over_evict == "auto" and report is not None and report.kind == "stacks" and not req.hosts:
            return _ordered(ctx, report.over_eviction or report.suspects), report.group
        raise UsageError(f"--over-evict {req.over_evict} needs --job NAME (whose layout defines the groups)")
    current = ctx.job_hosts(req.job)
    if current.note():
        notes.append(str(current.note()))
    machines, group = expand_over_eviction(ctx, req.job, suspects, req.over_evict, hosts=current.hosts)
    return tuple(dict.fromkeys([*machines, *suspects])), group


def _evict_steps(
    ctx: ActionContext, targets: tuple[str, ...], notes: list[str]
) -> tuple[list[Step], list[str]]:
    """Per target, ``drain`` then ``mark evicted`` (each a no-op when already so); and the targets not
    evicted yet (what the rails count).

    Args:
        ctx: the action context.
        targets: the hosts to evict.
        notes: the plan's notes; a line is appended for each target that is a standby.

    Returns:
        ``(steps, new)``: the plan's steps and the targets not evicted yet.
    """
    node_states = ctx.scheduler.state(list(targets)) if targets else {}
    steps: list[Step] = []
    new: list[str] = []
    for host in targets:
        drained = node_states.get(host) is NodeState.DRAINED
        if node_states.get(host) is NodeState.STANDBY:
            notes.append(f"{host} is a standby held out of scheduling: it is drained for eviction")
        evicted = current_state(ctx, host) is MachineState.EVICTED
        if not evicted:
            new.append(host)
        steps.append(
            Step(StepKind.DRAIN, host, ctx.scheduler.name, noop=drained, note="stop scheduling work on it")
        )
        steps.append(Step(StepKind.MARK, host, "store", to_state=MachineState.EVICTED, noop=evicted))
    return steps, new


def plan_evict(req: EvictSpec, ctx: ActionContext) -> Plan:
    """Resolve targets, expand over-eviction, evaluate the rails and build the eviction plan.

    A plan that breaks a rail is still returned (``plan.refused``); :func:`~robustctl.actions.plan.apply_plan`
    refuses it, and the CLI prints it with the rule that fired.

    Args:
        req: what to evict.
        ctx: the action context.

    Returns:
        The eviction plan (``plan.refused`` when a rail failed that ``--force`` did not override).

    Raises:
        UsageError: no targets given, both or neither of hosts/report, a bad host range or unknown host,
            an unknown job, a suspect not in the job, ``--over-evict`` (other than ``auto`` with a stacks
            report) without ``--job``, ``--force`` without ``--force-reason``.
        ConfigError: the report file is unreadable or invalid (:func:`load_report`).
    """
    _check_spec(req)
    notes: list[str] = []
    suspects, report = _suspects(req, ctx)
    targets, group = _targets(req, ctx, suspects, report, notes)
    what = "the named hosts" if req.hosts is not None else f"report {req.report}"
    rails: list[RailCheck] = [non_empty(targets, what)]
    steps, new = _evict_steps(ctx, targets, notes)
    if targets:
        rails.extend(
            evaluate_rails(
                new_evictions=new,
                suspects=suspects,
                cluster_hosts=[h.name for h in ctx.inventory.hosts],
                jobs=_jobs_hosts(ctx),
                store=ctx.store,
                policy=ctx.policy,
                now=ctx.clock(),
            )
        )
    if targets and not new:
        notes.append("every target is already evicted: nothing to do")
    from robustctl.ckpt.evict import evict_survival

    checkpoints = evict_survival(ctx, targets) if targets else ()
    return Plan(
        action="evict",
        targets=targets,
        steps=tuple(steps),
        reason=req.reason,
        scheduler=ctx.scheduler.name,
        rails=tuple(rails),
        source=str(req.report) if req.report is not None else None,
        suspects=_ordered(ctx, suspects),
        job=req.job,
        over_evict=req.over_evict,
        group=group,
        forced=req.force,
        force_reason=req.force_reason if req.force else None,
        notes=tuple(notes),
        checkpoints=checkpoints,
    )


def plan_return(hosts: str, reason: str, ctx: ActionContext) -> Plan:
    """Plan putting evicted hosts back in service: ``resume`` (scheduler), then ``mark active`` (store).

    Args:
        hosts: a host or range (``node017``, ``'node[001-004]'``).
        reason: why (recorded in the audit log).
        ctx: the action context.

    Returns:
        The return plan.

    Raises:
        UsageError: a bad host range or unknown host.
    """
    targets = _ordered(ctx, ctx.resolve_hosts(hosts))
    node_states = ctx.scheduler.state(list(targets)) if targets else {}
    steps: list[Step] = []
    notes: list[str] = []
    for host in targets:
        state = current_state(ctx, host)
        steps.append(
            Step(StepKind.RESUME, host, ctx.scheduler.name, noop=node_states.get(host) is NodeState.ACTIVE)
        )
        if state is MachineState.ACTIVE:
            notes.append(f"{host} is already active in the store")
            continue
        if state is MachineState.STANDBY:
            notes.append(f"{host} is a standby: returning it puts it in service and out of the pool")
        steps.append(
            Step(StepKind.MARK, host, "store", to_state=MachineState.RETURNED, note=f"was {state.value}")
        )
        steps.append(Step(StepKind.MARK, host, "store", to_state=MachineState.ACTIVE))
    return Plan(
        action="return",
        targets=targets,
        steps=tuple(steps),
        reason=reason,
        scheduler=ctx.scheduler.name,
        rails=(non_empty(targets, f"{hosts!r}"),),
        notes=tuple(notes),
    )
