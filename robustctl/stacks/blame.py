"""From outlier stack classes to suspects, the smallest parallel group and the over-eviction set.

ByteRobust (arXiv 2509.16293, §5 "aggregation analysis"): the dominant stack groups are healthy, the
remaining groups are outliers; find the parallel group the outliers share and over-evict its machines
rather than hunt the exact faulty one (at 9,600 GPUs it accepts evicting 6–7 healthy machines with
each PP group). This module does that as a pure function of a :class:`~.cluster.ClusterResult` and the
job's :class:`~robustctl.inventory.topology.Topology`:

1. **Healthy classes**: the dominant class of each role. If the outliers then fit no proper group,
   *large* classes (≥ ``secondary_fraction``) of ranks *waiting in a collective* are also treated as
   healthy, largest first, until the outliers fit a group no larger than ``max_evict_fraction`` of the
   job's machines. Ranks waiting at a second collective call site are the normal picture of a stalled
   job (e.g. first/last PP stages in the embedding all-reduce while the rest wait in the DP
   all-reduce); ranks computing, loading data or writing are never promoted, and neither are ranks
   blocked in p2p send/recv: in ByteRobust's Fig. 7 case the PP stage-mates of the stuck rank are the
   small outlier class next to it, and together they fit one PP group.
2. **Outlier ranks**: every rank with a process in an outlier class of a blamed role (main, data
   loader, checkpoint; readable ``other`` processes are shown, not blamed), plus every rank with a
   process py-spy could not read, whatever its role (evidence, "could not be read"). A data-loader worker or checkpoint writer names its
   rank (it carries its parent's rank).
3. **Smallest group**: the outliers' coordinates vary in a set S of dimensions; candidates are the
   single-dimension groups (TP, CP, EP, DP, PP) containing every outlier, the combined S group
   (e.g. ``tp-pp``, Megatron's model-parallel group, when a stuck stage's TP peers are outliers too) and
   the whole job. The one with the fewest machines wins (then fewest ranks, then TP, CP, EP, DP, PP
   order): e.g. a single stuck rank gets its TP group (one machine) rather than its PP group.
4. **Ambiguity** (say so, name nobody): the main role has no dominant class; the smallest group holding
   the outliers spans more than ``max_evict_fraction`` (half) of a multi-machine job's machines; no
   group smaller than the job holds them and they sit on more than ``max_spread_machines`` (4) machines
   (or more than half) — a pattern with a shared cause, not machine faults (when they sit on a few
   machines, those machines are named, without a group); without a layout, outliers are more than half
   the main processes. Nothing could be read at all is not ambiguity but UNKNOWN.
5. **Missing data** alone never names a suspect here: ranks of the layout with no dump are listed as
   "not collected"; outlier processes without a rank are listed as "unplaced".
6. **Waits-for** (:mod:`.waitsfor`): the chains of waits between ranks decide when the classes do
   not. The class answer stands when it is not ambiguous and its suspects hold every rank the chains
   end at (ByteRobust's over-eviction of the stuck stage's PP group in its Fig. 7 case); the chains are
   attached as evidence. Otherwise, when the chains end at a few ranks, those ranks are the suspects
   (with their data-loader or checkpoint children that are outliers), over-evicted through their own
   smallest group (or machines). Here a rank py-spy could not read, or with no dump, is a suspect
   when every readable rank waits and the waits lead to it. When neither decides, the ambiguity says
   what the chains saw and what would decide.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from robustctl.errors import UsageError
from robustctl.inventory.hostrange import compact_ranges
from robustctl.inventory.topology import GroupChoice, Topology, smallest_group
from robustctl.stacks.cluster import Category, ClusterResult, StackClass
from robustctl.stacks.model import ProcessDump, ProcessRole
from robustctl.stacks.waitsfor import WaitsFor, analyze_waits, pyspy_error_reason

__all__ = [
    "WAITING",
    "BlameOptions",
    "BlameResult",
    "GroupChoice",  # defined in robustctl.inventory.topology (topology, not stacks)
    "Suspect",
    "blame",
    "smallest_group",  # likewise
]

WAITING = frozenset({Category.COLLECTIVE, Category.P2P})
"""Categories of ranks waiting on a peer: victims rather than likely culprits."""

BLAMED_ROLES = (ProcessRole.MAIN, ProcessRole.DATALOADER, ProcessRole.CHECKPOINT)


@dataclass(frozen=True)
class BlameOptions:
    """Thresholds of :func:`blame`.

    Attributes:
        max_evict_fraction: the largest share of a multi-machine job's machines an over-eviction set
            may cover before the result is called ambiguous (0.5).
        promote_waiting: allow large waiting classes to count as healthy when that localizes the
            outliers (see the module docstring).
        max_outlier_fraction: without a layout, the largest share of main processes that may be
            outliers before the result is ambiguous (0.5).
        max_spread_machines: when no group smaller than the job holds every outlier, the most
            machines named one by one (4); more is ambiguous (a shared cause, not machine faults).
        waits_for: run the waits-for analysis (:mod:`.waitsfor`) and let it decide where the classes
            do not (see the module docstring, rule 6).
    """

    max_evict_fraction: float = 0.5
    promote_waiting: bool = True
    max_outlier_fraction: float = 0.5
    max_spread_machines: int = 4
    waits_for: bool = True


@dataclass(frozen=True)
class Suspect:
    """One outlier process and why.

    Attributes:
        rank: its rank (``None``: unknown, then it is also in ``unplaced``).
        host: the machine's host name (from the job's host list, else the dump, else ``machine-k``).
        machine: machine index ``rank // ranks_per_host`` when known.
        coords: ``{"tp": …, "pp": …, …}`` when a layout is known.
        role: the process's role. pid: its PID. source: file or ``host:pid``.
        category: the class's category (``unreadable`` when py-spy failed).
        class_id: the outlier class (within the role).
        reason: one line: where its stack leaves the dominant path, or py-spy's error.
        likely_culprit: not waiting on a peer (compute, data, I/O, checkpoint, unknown, unreadable).
    """

    rank: int | None
    host: str | None
    machine: int | None
    coords: Mapping[str, int] | None
    role: ProcessRole
    pid: int | None
    source: str | None
    category: Category
    class_id: int
    reason: str
    likely_culprit: bool


@dataclass(frozen=True)
class BlameResult:
    """Who to blame and what to evict.

    Attributes:
        suspects: every outlier process (rank order); empty when ambiguous.
        suspect_ranks: their distinct ranks. suspect_hosts: their distinct hosts (machine order).
        likely_culprits: suspect ranks not waiting on a peer.
        group: the smallest group containing the suspects (``None`` without a layout, or none).
        over_eviction: hosts to evict: the group's machines (plus the machines of unreadable
            processes outside it), else the suspects' hosts.
        healthy_machines_taken: machines in ``over_eviction`` expected healthy: running no likely
            culprit (or, when every suspect waits on a peer, no suspect).
        healthy_classes: ``(role, class id)`` of the classes treated as healthy.
        not_collected: ranks of the layout with no main-process dump (compact ranges); n_not_collected: count.
        unplaced: outlier processes without a rank (``source`` or ``host:pid``).
        ambiguous: the picture does not support naming suspects; ambiguity: why.
        notes: other observations, one line each.
        waits_for: the waits-for analysis (``None`` when not run).
        decided_by: ``"classes"`` (outlier stack classes) or ``"waits-for"`` (the chains of waits).
    """

    suspects: tuple[Suspect, ...] = ()
    suspect_ranks: tuple[int, ...] = ()
    suspect_hosts: tuple[str, ...] = ()
    likely_culprits: tuple[int, ...] = ()
    group: GroupChoice | None = None
    over_eviction: tuple[str, ...] = ()
    healthy_machines_taken: int = 0
    healthy_classes: tuple[tuple[ProcessRole, int], ...] = ()
    not_collected: str = ""
    n_not_collected: int = 0
    unplaced: tuple[str, ...] = ()
    ambiguous: bool = False
    ambiguity: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    waits_for: WaitsFor | None = None
    decided_by: str = "classes"


# --- blame -----------------------------------------------------------------------------------------


def _place(
    topology: Topology | None, rank: int | None, dump: ProcessDump | None
) -> tuple[int | None, str | None, Mapping[str, int] | None]:
    """Where a suspect runs: ``(machine index, host name, coordinates)``, ``None`` where unknown.

    The host is the topology's machine name, unless the topology names no hosts and the dump does.
    """
    host = dump.host if dump is not None else None
    if topology is None or rank is None:
        return None, host, None
    machine = topology.machine_of(rank)
    if machine is not None and (topology.hosts or not host):
        host = topology.machine_name(machine)
    return machine, host, topology.coords(rank)


def _class_suspect(c: StackClass, d: ProcessDump, topology: Topology | None) -> Suspect:
    """The suspect for dump ``d``, a member of class ``c``: placed on its machine and groups, its reason
    from the class, a likely culprit unless the class waits in communication."""
    machine, host, coords = _place(topology, d.rank, d)
    return Suspect(
        rank=d.rank,
        host=host,
        machine=machine,
        coords=coords,
        role=c.role,
        pid=d.pid,
        source=d.source,
        category=c.category,
        class_id=c.id,
        reason=_reason(c, d),
        likely_culprit=c.category not in WAITING,
    )


def _reason(c: StackClass, dump: ProcessDump) -> str:
    if c.unreadable:
        low = (dump.error or "").lower()
        if "suspend" in low or "timed out" in low:
            return f"could not be read: {pyspy_error_reason(dump.rank, dump.error, dump.state)}"
        return f"could not be read: {dump.error}"
    now = f"{c.category.value} in {c.frames[-1]}" if c.frames else f"{c.category.value} (no Python frame)"
    d = c.divergence
    if d is None:
        return now
    if d.first_different is None:
        return f"{now}; stops where the dominant stack goes on to {d.dominant_next}"
    where = f"after {d.last_common}" if d.last_common else "at the outermost frame"
    return f"{now}; leaves the dominant stack {where} ({d.first_different} instead of {d.dominant_next or 'its end'})"


def _collected_ranks(clusters: ClusterResult) -> set[int]:
    return {d.rank for d in clusters.dumps if d.rank is not None and d.role is ProcessRole.MAIN}


def _outlier_classes(
    clusters: ClusterResult, healthy: set[tuple[ProcessRole, int]], notes: list[str]
) -> list[StackClass]:
    out: list[StackClass] = []
    for rc in clusters.roles:
        if rc.role not in BLAMED_ROLES:
            # other children are shown, not blamed, unless py-spy could not read them (evidence)
            out.extend(c for c in rc.classes if c.unreadable)
            continue
        if rc.dominant is None and rc.role is not ProcessRole.MAIN and rc.readable:
            # a role with no dominant class contributes only its unreadable processes
            if rc.reason:
                notes.append(f"{rc.reason}: its stacks are shown but not blamed")
        for c in rc.classes:
            if c.unreadable:
                out.append(c)
            elif rc.dominant is not None and (rc.role, c.id) not in healthy:
                out.append(c)
    return out


def _ranks_of(classes: Iterable[StackClass], dumps: Sequence[ProcessDump]) -> set[int]:
    return {r for c in classes for i in c.members if (r := dumps[i].rank) is not None}


def blame(
    clusters: ClusterResult,
    topology: Topology | None = None,
    options: BlameOptions | None = None,
    *,
    expected_ranks: Iterable[int] | None = None,
) -> BlameResult:
    """Name suspects, the smallest group containing them and the over-eviction set.

    The outlier classes first (rules 1-5 of the module docstring), then the waits-for chains (rule 6).

    Args:
        clusters: from :func:`robustctl.stacks.cluster.cluster`.
        topology: the job's layout, ranks per host and hosts; ``None`` when unknown.
        options: thresholds, see :class:`BlameOptions`.
        expected_ranks: the ranks that were asked for (default every rank of the layout).

    Returns:
        A :class:`BlameResult`.

    Raises:
        UsageError: a dump's rank lies outside the layout (the layout does not match the job).
    """
    opts = options or BlameOptions()
    res = _blame_classes(clusters, topology, opts, expected_ranks=expected_ranks)
    if not opts.waits_for or clusters.readable == 0:
        return res
    wf = analyze_waits(
        clusters, topology, expected_ranks=expected_ranks, max_suspects=opts.max_spread_machines
    )
    return _with_waits(res, wf, clusters, topology, opts)


def _blame_classes(
    clusters: ClusterResult,
    topology: Topology | None = None,
    options: BlameOptions | None = None,
    *,
    expected_ranks: Iterable[int] | None = None,
) -> BlameResult:
    """Name suspects from the outlier classes alone (rules 1-5 of the module docstring).

    Args:
        clusters: from :func:`robustctl.stacks.cluster.cluster`.
        topology: the job's layout, ranks per host and hosts; ``None`` when unknown (offline without
            ``--layout``): suspects are then named by rank and the dumps' hosts, with no group.
        options: thresholds, see :class:`BlameOptions`.
        expected_ranks: the ranks that were asked for (e.g. the ranks of the hosts a live collection
            targeted); default every rank of the layout. Expected ranks without a main-process dump
            are "not collected".

    Returns:
        A :class:`BlameResult` (see the module docstring for the rules).

    Raises:
        UsageError: a dump's rank lies outside the layout (the layout does not match the job).
    """
    opts = options or BlameOptions()
    dumps = clusters.dumps
    notes: list[str] = []
    if topology is not None:
        bad = sorted({d.rank for d in dumps if d.rank is not None and not 0 <= d.rank < topology.world_size})
        if bad:
            raise UsageError(
                f"rank{'s' if len(bad) > 1 else ''} {compact_ranges(bad)} in the dumps "
                f"{'lie' if len(bad) > 1 else 'lies'} outside the layout's {topology.world_size} ranks "
                f"(0-{topology.world_size - 1}): the layout does not match this job"
            )
    not_collected: list[int] = []
    if topology is not None:
        have = _collected_ranks(clusters)
        wanted = sorted(set(expected_ranks)) if expected_ranks is not None else range(topology.world_size)
        not_collected = [r for r in wanted if r not in have]
        if not_collected:
            notes.append(
                f"{len(not_collected)} of {len(wanted)} ranks not collected "
                f"({compact_ranges(not_collected)}): not checked, never blamed"
            )
    nc = compact_ranges(not_collected)
    main = clusters.role(ProcessRole.MAIN)

    if clusters.readable == 0:
        return BlameResult(
            not_collected=nc,
            n_not_collected=len(not_collected),
            notes=(*notes, "no process could be read: nothing to compare"),
        )
    if main is not None and main.ambiguous:
        return BlameResult(
            not_collected=nc,
            n_not_collected=len(not_collected),
            healthy_classes=(),
            ambiguous=True,
            ambiguity=main.reason,
            notes=tuple(notes),
        )

    healthy: set[tuple[ProcessRole, int]] = {
        (rc.role, rc.dominant) for rc in clusters.roles if rc.dominant is not None
    }
    outliers = _outlier_classes(clusters, healthy, notes)
    ranks = _ranks_of(outliers, dumps)
    group: GroupChoice | None = None
    separate: set[int] = set()  # unreadable ranks named outside the group
    ambiguity: str | None = None

    def localized(g: GroupChoice | None, rs: set[int]) -> bool:
        if g is None or topology is None:
            return True
        n = topology.n_machines
        if n is not None and n <= 1:
            return True
        if g.kind != "job":
            return n is None or len(g.machines) <= opts.max_evict_fraction * n
        # no proper group holds them all: name their own machines if they are few
        own = len(topology.machines_of(rs)) if n is not None else len(rs)
        return own <= opts.max_spread_machines and (n is None or own <= opts.max_evict_fraction * n)

    def attempt(
        trial: set[tuple[ProcessRole, int]], allow_job: bool
    ) -> tuple[list[StackClass], GroupChoice | None, set[int]] | None:
        """Localize the outliers under ``trial`` healthy classes: all together, else the stack outliers
        in a group with the unreadable ones named machine by machine; ``None`` when neither fits. A
        ``job`` result (outliers named by their own machines) is accepted only with ``allow_job``."""
        assert topology is not None
        out = _outlier_classes(clusters, trial, [])
        every = _ranks_of(out, dumps)
        g = smallest_group(topology, every)
        if (allow_job or g is None or g.kind != "job") and localized(g, every):
            return out, g, set()
        stack = _ranks_of((c for c in out if not c.unreadable), dumps)
        unread = every - stack
        if stack and unread:
            g = smallest_group(topology, stack)
            if g is not None and g.kind != "job" and localized(g, stack):
                inside = set(topology.group_of(next(iter(stack)), g.kind)) if g.kind != "rank" else stack
                rest = unread - inside
                if (
                    len(topology.machines_of(rest) if topology.ranks_per_host else rest)
                    <= opts.max_spread_machines
                ):
                    return out, g, rest
        return None

    if topology is not None:
        # 1. a proper group, with only the dominant classes healthy; 2. the same after treating large
        # classes waiting in a collective as healthy too; 3. the outliers' own machines, when few
        found = attempt(healthy, allow_job=False)
        if found is None and main is not None and opts.promote_waiting:
            promotable = [
                c
                for c in main.classes
                if c.large and not c.unreadable and not c.dominant and c.category is Category.COLLECTIVE
            ]
            trial = set(healthy)
            for c in promotable:
                trial.add((main.role, c.id))
                found = attempt(set(trial), allow_job=False)
                if found is not None:
                    healthy = set(trial)
                    notes.append(
                        f"main class {c.id} ({c.size} ranks waiting in a {c.category.value}) treated as healthy: "
                        "with it the outliers fit one group"
                    )
                    break
        if found is None:
            found = attempt(healthy, allow_job=True)
        if found is not None:
            outliers, group, separate = found
            ranks = _ranks_of(outliers, dumps)
            if separate:
                notes.append(
                    f"unreadable rank{'s' if len(separate) > 1 else ''} {compact_ranges(separate)} outside "
                    f"the group: {'their' if len(separate) > 1 else 'its'} machines are named too"
                )
        else:
            g = smallest_group(topology, ranks)
            n = topology.n_machines
            if g is not None and g.kind == "job":
                own = topology.machines_of(ranks)
                ambiguity = (
                    f"outliers ({len(ranks)} ranks"
                    + (f" on {len(own)} of {n} machines" if n else "")
                    + ") share no parallel group smaller than the whole job: a pattern, not a machine fault"
                )
            elif g is not None:
                ambiguity = (
                    f"the smallest group holding the outliers ({len(ranks)} ranks), {g.kind} group "
                    f"{g.index}, spans {len(g.machines)} of {n} machines"
                )
    if group is not None and group.kind == "job":
        notes.append(
            "no parallel group smaller than the job holds every outlier: only the outliers' own machines are named"
        )
        group = None
    if topology is None and main is not None and main.readable:
        n_out = sum(c.size for c in outliers if c.role is ProcessRole.MAIN)
        if n_out > opts.max_outlier_fraction * main.processes:
            ambiguity = f"outliers are {n_out} of {main.processes} main processes: not a minority"

    unplaced = tuple(
        dumps[i].source or (f"{dumps[i].host}:{dumps[i].pid}" if dumps[i].host else f"pid {dumps[i].pid}")
        for c in outliers
        for i in c.members
        if dumps[i].rank is None
    )
    if ambiguity is not None:
        return BlameResult(
            not_collected=nc,
            n_not_collected=len(not_collected),
            healthy_classes=tuple(sorted(healthy, key=lambda x: (x[0].value, x[1]))),
            unplaced=unplaced,
            ambiguous=True,
            ambiguity=ambiguity,
            notes=tuple(notes),
        )

    suspects = [_class_suspect(c, dumps[i], topology) for c in outliers for i in c.members]
    suspects.sort(
        key=lambda s: (s.rank is None, s.rank if s.rank is not None else 0, s.role.value, s.pid or 0)
    )
    hosts_by_machine: dict[tuple[int, str], None] = {}
    for s in suspects:
        if s.host is not None:
            hosts_by_machine[(s.machine if s.machine is not None else 1 << 60, s.host)] = None
    suspect_hosts = tuple(h for _, h in sorted(hosts_by_machine))
    culprits = tuple(sorted({s.rank for s in suspects if s.likely_culprit and s.rank is not None}))
    if suspects and not culprits:
        notes.append(
            "every outlier is waiting on a peer (collective or p2p): the rank they wait for may be among "
            "the ranks not collected, or in a healthy-looking class"
        )
    if group is not None and group.machines and topology is not None:
        extra = [topology.machine_name(m) for m in topology.machines_of(separate)]
        over = tuple(dict.fromkeys((*group.machines, *extra)))
    else:
        over = suspect_hosts
    # expected healthy machines evicted: those running no likely culprit (victims waiting on a peer
    # run on healthy machines: ByteRobust counts 6-7 such machines per PP group at 9,600 GPUs)
    blamed = set(culprits) if culprits else {s.rank for s in suspects if s.rank is not None}
    culprit_hosts = {s.host for s in suspects if s.rank in blamed and s.host is not None}
    taken = sum(1 for h in over if h not in culprit_hosts)
    if group is not None and topology is not None and topology.ranks_per_host is None:
        notes.append("ranks per host unknown: no machines, no over-eviction set")
    return BlameResult(
        suspects=tuple(suspects),
        suspect_ranks=tuple(sorted({s.rank for s in suspects if s.rank is not None})),
        suspect_hosts=suspect_hosts,
        likely_culprits=culprits,
        group=group,
        over_eviction=tuple(over),
        healthy_machines_taken=taken,
        healthy_classes=tuple(sorted(healthy, key=lambda x: (x[0].value, x[1]))),
        not_collected=nc,
        n_not_collected=len(not_collected),
        unplaced=unplaced,
        notes=tuple(notes),
    )


# --- waits-for ---------------------------------------------------------------------------------------


def _with_waits(
    res: BlameResult,
    wf: WaitsFor,
    clusters: ClusterResult,
    topology: Topology | None,
    opts: BlameOptions,
) -> BlameResult:
    """Rule 6: attach the chains; let them name the suspects where the classes do not."""
    if not wf.decided:
        if res.ambiguous and wf.undecided:
            return replace(
                res,
                waits_for=wf,
                ambiguity=f"{res.ambiguity}; the waits-for chains do not decide: {wf.undecided}",
            )
        return replace(res, waits_for=wf)
    ends = set(wf.suspect_ranks)
    if not res.ambiguous and res.suspects and ends <= set(res.suspect_ranks):
        return replace(res, waits_for=wf)
    dumps = clusters.dumps
    main_of: dict[int, tuple[StackClass, ProcessDump]] = {}
    children: list[tuple[StackClass, ProcessDump]] = []
    for rc in clusters.roles:
        for c in rc.classes:
            for i in c.members:
                d = dumps[i]
                if d.rank is None or d.rank not in ends:
                    continue
                if rc.role is ProcessRole.MAIN:
                    main_of.setdefault(d.rank, (c, d))
                elif rc.role in BLAMED_ROLES and (
                    c.unreadable or (rc.dominant is not None and c.id != rc.dominant)
                ):
                    children.append((c, d))
    by_rank = {s.rank: s for s in wf.suspects}
    chain_of = {ch.hops[-1].rank: ch for ch in wf.chains}
    if any(s.cycle for s in wf.suspects) and wf.chains:
        chain_of = {r: wf.chains[0] for r in ends}

    suspects: list[Suspect] = []
    for r in sorted(ends):
        ws = by_rank[r]
        c_d = main_of.get(r)
        md = c_d[1] if c_d else None
        machine, host, coords = _place(topology, r, md)
        chain = chain_of.get(r)
        reason = ws.reason
        if chain is not None and len(chain.hops) > 1:
            reason += f"; {ws.waiters} rank{'s' if ws.waiters != 1 else ''} wait on it ({chain.text.split(' (', 1)[0]})"
        state = ws.state if ws.state != "missing" else Category.UNREADABLE.value
        suspects.append(
            Suspect(
                rank=r,
                host=host,
                machine=machine,
                coords=coords,
                role=ProcessRole.MAIN,
                pid=md.pid if md is not None else None,
                source=md.source if md is not None else None,
                category=Category(state),
                class_id=c_d[0].id if c_d else -1,
                reason=reason,
                likely_culprit=True,
            )
        )
    for c, d in children:
        assert d.rank is not None
        suspects.append(_class_suspect(c, d, topology))
    suspects.sort(
        key=lambda s: (s.rank if s.rank is not None else 0, s.role is not ProcessRole.MAIN, s.pid or 0)
    )
    group: GroupChoice | None = None
    notes = [n for n in res.notes if "never blamed" not in n]
    if res.n_not_collected:
        notes.insert(0, f"ranks {res.not_collected} not collected: not checked")
    if topology is not None:
        group = smallest_group(topology, ends)
        n = topology.n_machines
        if group is not None and (
            group.kind == "job"
            or (n is not None and n > 1 and len(group.machines) > opts.max_evict_fraction * n)
        ):
            notes.append(
                f"the smallest group holding ranks {compact_ranges(sorted(ends))} ({group.kind}) is too large: "
                "only their own machines are named"
            )
            group = None
    hosts_by_machine = {
        (s.machine if s.machine is not None else 1 << 60, s.host): None
        for s in suspects
        if s.host is not None
    }
    suspect_hosts = tuple(h for _, h in sorted(hosts_by_machine))
    if group is not None and group.machines:
        over = group.machines
    else:
        over = suspect_hosts
    taken = sum(1 for h in over if h not in set(suspect_hosts))
    before = (
        f"the stack classes alone were ambiguous ({res.ambiguity})"
        if res.ambiguous
        else (
            f"the stack classes alone named ranks {compact_ranges(res.suspect_ranks)}"
            if res.suspect_ranks
            else "the stack classes alone named no rank"
        )
    )
    notes.append(f"named by the waits-for chains (confidence {wf.confidence}); {before}")
    notes.extend(wf.notes)
    bad_classes = {(s.role, s.class_id) for s in suspects}
    healthy = tuple(
        sorted(
            (
                (rc.role, c.id)
                for rc in clusters.roles
                for c in rc.classes
                if not c.unreadable and (rc.role, c.id) not in bad_classes
            ),
            key=lambda x: (x[0].value, x[1]),
        )
    )
    unplaced = res.unplaced if not res.ambiguous else ()
    return BlameResult(
        suspects=tuple(suspects),
        suspect_ranks=tuple(sorted(ends)),
        suspect_hosts=suspect_hosts,
        likely_culprits=tuple(sorted(ends)),
        group=group,
        over_eviction=tuple(over),
        healthy_machines_taken=taken,
        healthy_classes=healthy,
        not_collected=res.not_collected,
        n_not_collected=res.n_not_collected,
        unplaced=unplaced,
        notes=tuple(notes),
        waits_for=wf,
        decided_by="waits-for",
    )
