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

In code each rule is a small function ``(evidence) -> RuleVerdict | None``: :func:`gather_evidence`
collects what the class rules look at (:class:`BlameEvidence`), :data:`CLASS_RULES` lists them in the
order :func:`blame` tries them (the first that fires gives the class answer), and
:func:`rule_waits_for` (rule 6, on a :class:`WaitsEvidence`) may then replace that answer. Group
searches go through the topology's remembered :class:`~robustctl.inventory.topology.GroupFinder`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

from robustctl.errors import UsageError
from robustctl.inventory.hostrange import compact_ranges
from robustctl.inventory.topology import GroupChoice, Topology, smallest_group
from robustctl.stacks.cluster import Category, ClusterResult, RoleClusters, StackClass
from robustctl.stacks.model import ProcessDump, ProcessRole
from robustctl.stacks.waitsfor import WaitChain, WaitsFor, WaitSuspect, analyze_waits, pyspy_error_reason

__all__ = [
    "CLASS_RULES",
    "WAITING",
    "BlameEvidence",
    "BlameOptions",
    "BlameResult",
    "GroupChoice",  # defined in robustctl.inventory.topology (topology, not stacks)
    "Placement",
    "RuleVerdict",
    "Suspect",
    "WaitsEvidence",
    "blame",
    "gather_evidence",
    "rule_dominant_group",
    "rule_no_dominant_main",
    "rule_not_a_minority",
    "rule_nothing_readable",
    "rule_outlier_classes",
    "rule_own_machines",
    "rule_promoted_group",
    "rule_unlocalized",
    "rule_waits_for",
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
    clusters: ClusterResult, healthy: AbstractSet[tuple[ProcessRole, int]], notes: list[str]
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

    The outlier classes first (rules 1-5 of the module docstring, :data:`CLASS_RULES` in order), then
    the waits-for chains (rule 6, :func:`rule_waits_for`).

    Args:
        clusters: from :func:`robustctl.stacks.cluster.cluster`.
        topology: the job's layout, ranks per host and hosts; ``None`` when unknown (offline without
            ``--layout``): suspects are then named by rank and the dumps' hosts, with no group.
        options: thresholds, see :class:`BlameOptions`.
        expected_ranks: the ranks that were asked for (e.g. the ranks of the hosts a live collection
            targeted); default every rank of the layout. Expected ranks without a main-process dump
            are "not collected".

    Returns:
        A :class:`BlameResult`.

    Raises:
        UsageError: a dump's rank lies outside the layout (the layout does not match the job).
    """
    opts = options or BlameOptions()
    ev = gather_evidence(clusters, topology, opts, expected_ranks=expected_ranks)
    res = next(v for rule in CLASS_RULES if (v := rule(ev)) is not None).result
    if not opts.waits_for or clusters.readable == 0:
        return res
    wf = analyze_waits(
        clusters, topology, expected_ranks=expected_ranks, max_suspects=opts.max_spread_machines
    )
    verdict = rule_waits_for(WaitsEvidence(ev, res, wf))
    if verdict is not None:
        return verdict.result
    if not wf.decided and res.ambiguous and wf.undecided:
        return replace(
            res,
            waits_for=wf,
            ambiguity=f"{res.ambiguity}; the waits-for chains do not decide: {wf.undecided}",
        )
    return replace(res, waits_for=wf)


# --- the evidence the rules look at -------------------------------------------------------------------


@dataclass(frozen=True)
class BlameEvidence:
    """One sample's clustering placed on the job's topology: what the class rules look at.

    Attributes:
        clusters: the clustering. topology: the job's topology (``None`` without a layout).
        options: the thresholds.
        main: the main role's classes (``None`` when no main process was dumped).
        healthy: ``(role, class id)`` of each role's dominant class.
        outliers: the outlier classes when only the dominant classes are healthy (rule 2).
        ranks: the ranks of the processes in ``outliers``.
        not_collected: the expected ranks with no main-process dump, ascending.
        notes: the "not collected" note, when there is one.
        role_notes: roles other than main with no dominant class (their stacks are shown, not blamed).
    """

    clusters: ClusterResult
    topology: Topology | None
    options: BlameOptions
    main: RoleClusters | None
    healthy: frozenset[tuple[ProcessRole, int]]
    outliers: tuple[StackClass, ...]
    ranks: frozenset[int]
    not_collected: tuple[int, ...]
    notes: tuple[str, ...]
    role_notes: tuple[str, ...]


def gather_evidence(
    clusters: ClusterResult,
    topology: Topology | None,
    options: BlameOptions | None = None,
    *,
    expected_ranks: Iterable[int] | None = None,
) -> BlameEvidence:
    """Check the dumps against the layout and collect what the class rules look at.

    Args:
        clusters: from :func:`robustctl.stacks.cluster.cluster`.
        topology: the job's topology; ``None`` when unknown.
        options: thresholds (default :class:`BlameOptions`).
        expected_ranks: the ranks that were asked for (default every rank of the layout).

    Returns:
        The :class:`BlameEvidence`.

    Raises:
        UsageError: a dump's rank lies outside the layout (the layout does not match the job).
    """
    dumps = clusters.dumps
    notes: list[str] = []
    not_collected: list[int] = []
    if topology is not None:
        bad = sorted({d.rank for d in dumps if d.rank is not None and not 0 <= d.rank < topology.world_size})
        if bad:
            raise UsageError(
                f"rank{'s' if len(bad) > 1 else ''} {compact_ranges(bad)} in the dumps "
                f"{'lie' if len(bad) > 1 else 'lies'} outside the layout's {topology.world_size} ranks "
                f"(0-{topology.world_size - 1}): the layout does not match this job"
            )
        have = _collected_ranks(clusters)
        wanted = sorted(set(expected_ranks)) if expected_ranks is not None else range(topology.world_size)
        not_collected = [r for r in wanted if r not in have]
        if not_collected:
            notes.append(
                f"{len(not_collected)} of {len(wanted)} ranks not collected "
                f"({compact_ranges(not_collected)}): not checked, never blamed"
            )
    healthy = frozenset((rc.role, rc.dominant) for rc in clusters.roles if rc.dominant is not None)
    role_notes: list[str] = []
    outliers = _outlier_classes(clusters, healthy, role_notes)
    return BlameEvidence(
        clusters=clusters,
        topology=topology,
        options=options or BlameOptions(),
        main=clusters.role(ProcessRole.MAIN),
        healthy=healthy,
        outliers=tuple(outliers),
        ranks=frozenset(_ranks_of(outliers, dumps)),
        not_collected=tuple(not_collected),
        notes=tuple(notes),
        role_notes=tuple(role_notes),
    )


@dataclass(frozen=True)
class Placement:
    """Where a rule places the outliers.

    Attributes:
        outliers: the outlier classes (under ``healthy``).
        group: the smallest group holding them; ``None`` without a layout or when none holds them
            (kind ``job``: they are named by their own machines).
        separate: unreadable ranks outside ``group``, named by their machines.
        healthy: the classes treated as healthy.
        notes: what the rule observed (a class promoted to healthy).
    """

    outliers: tuple[StackClass, ...]
    group: GroupChoice | None
    separate: frozenset[int]
    healthy: frozenset[tuple[ProcessRole, int]]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class RuleVerdict:
    """What a blame rule concluded when it fired.

    Attributes:
        rule: the rule's name (``"dominant-group"``, ``"waits-for"`` …).
        reason: one line: why these suspects, or (ambiguous) why nobody is named.
        ranks: the suspect ranks, ascending (empty: nobody named).
        machines: the over-eviction set (host names).
        ambiguous: the picture does not support naming suspects.
        result: the whole answer, as :func:`blame` returns it.
    """

    rule: str
    reason: str
    result: BlameResult
    ranks: tuple[int, ...] = ()
    machines: tuple[str, ...] = ()
    ambiguous: bool = False


def _verdict(rule: str, reason: str, result: BlameResult) -> RuleVerdict:
    """A :class:`RuleVerdict` summarizing ``result``."""
    return RuleVerdict(
        rule=rule,
        reason=reason,
        result=result,
        ranks=result.suspect_ranks,
        machines=result.over_eviction,
        ambiguous=result.ambiguous,
    )


# --- the class rules (1-5), in the order CLASS_RULES tries them ---------------------------------------


def rule_nothing_readable(ev: BlameEvidence) -> RuleVerdict | None:
    """No process could be read: nothing to compare (UNKNOWN, not ambiguity); names nobody.

    Args:
        ev: the evidence.

    Returns:
        The verdict when no process is readable, else ``None``.
    """
    if ev.clusters.readable:
        return None
    why = "no process could be read: nothing to compare"
    return _verdict(
        "nothing-readable",
        why,
        BlameResult(
            not_collected=compact_ranges(ev.not_collected),
            n_not_collected=len(ev.not_collected),
            notes=(*ev.notes, why),
        ),
    )


def rule_no_dominant_main(ev: BlameEvidence) -> RuleVerdict | None:
    """Ambiguous when the main role has no dominant class (module docstring, rule 4).

    Args:
        ev: the evidence.

    Returns:
        An ambiguous verdict with the clustering's reason, else ``None``.
    """
    main = ev.main
    if main is None or not main.ambiguous:
        return None
    result = BlameResult(
        not_collected=compact_ranges(ev.not_collected),
        n_not_collected=len(ev.not_collected),
        healthy_classes=(),
        ambiguous=True,
        ambiguity=main.reason,
        notes=ev.notes,
    )
    return _verdict("no-dominant-main", main.reason or "", result)


def rule_dominant_group(ev: BlameEvidence) -> RuleVerdict | None:
    """With only the dominant classes healthy, the outliers fit one proper group (rules 1 and 3).

    The group may leave out unreadable ranks, named by their own machines (at most
    ``max_spread_machines``). No outlier at all also fires (nobody named).

    Args:
        ev: the evidence.

    Returns:
        The verdict naming the outliers and their group, else ``None`` (no layout, or no fit).
    """
    if ev.topology is None:
        return None
    placed = _localize(ev, ev.healthy, allow_job=False)
    if placed is None:
        return None
    return _named("dominant-group", ev, placed)


def rule_promoted_group(ev: BlameEvidence) -> RuleVerdict | None:
    """The outliers fit one proper group once large classes waiting in a collective count as healthy.

    Main classes that are ``large``, readable, not dominant and in a collective are added to the
    healthy ones one by one, largest first, until the outliers fit (rule 1); computing, data, I/O and
    p2p classes are never promoted. Off with ``promote_waiting=False``.

    Args:
        ev: the evidence.

    Returns:
        The verdict (with a note naming the promoted class), else ``None``.
    """
    main = ev.main
    if ev.topology is None or main is None or not ev.options.promote_waiting:
        return None
    trial = set(ev.healthy)
    for c in main.classes:
        if not c.large or c.unreadable or c.dominant or c.category is not Category.COLLECTIVE:
            continue
        trial.add((main.role, c.id))
        placed = _localize(ev, frozenset(trial), allow_job=False)
        if placed is not None:
            note = (
                f"main class {c.id} ({c.size} ranks waiting in a {c.category.value}) treated as healthy: "
                "with it the outliers fit one group"
            )
            return _named("promoted-group", ev, replace(placed, notes=(note,)))
    return None


def rule_own_machines(ev: BlameEvidence) -> RuleVerdict | None:
    """No group smaller than the job holds the outliers, but they sit on few machines: name those.

    Fires when the outliers' own machines are at most ``max_spread_machines`` and at most
    ``max_evict_fraction`` of the job's (rule 4); evaluated after the group rules.

    Args:
        ev: the evidence.

    Returns:
        The verdict naming the outliers and their machines (no group), else ``None``.
    """
    if ev.topology is None:
        return None
    placed = _localize(ev, ev.healthy, allow_job=True)
    if placed is None or placed.group is None or placed.group.kind != "job":
        return None
    return _named("own-machines", ev, placed)


def rule_unlocalized(ev: BlameEvidence) -> RuleVerdict | None:
    """Ambiguous: with a layout, the outliers fit no group small enough and sit on many machines.

    Evaluated after the rules that localize; it reads only where the smallest group holding the
    outliers lies: the whole job (a pattern with a shared cause) or a group spanning too many machines.

    Args:
        ev: the evidence.

    Returns:
        An ambiguous verdict saying which, else ``None`` (no layout, no outlier).
    """
    topology = ev.topology
    if topology is None:
        return None
    g = topology.finder.smallest(ev.ranks)
    if g is None:
        return None
    n = topology.n_machines
    if g.kind == "job":
        own = topology.machines_of(ev.ranks)
        why = (
            f"outliers ({len(ev.ranks)} ranks"
            + (f" on {len(own)} of {n} machines" if n else "")
            + ") share no parallel group smaller than the whole job: a pattern, not a machine fault"
        )
    else:
        why = (
            f"the smallest group holding the outliers ({len(ev.ranks)} ranks), {g.kind} group "
            f"{g.index}, spans {len(g.machines)} of {n} machines"
        )
    return _ambiguous("unlocalized", ev, why)


def rule_not_a_minority(ev: BlameEvidence) -> RuleVerdict | None:
    """Ambiguous without a layout when the outliers are more than ``max_outlier_fraction`` of the
    main processes (rule 4).

    Args:
        ev: the evidence.

    Returns:
        An ambiguous verdict, else ``None`` (a layout, no readable main process, or a minority).
    """
    main = ev.main
    if ev.topology is not None or main is None or not main.readable:
        return None
    n_out = sum(c.size for c in ev.outliers if c.role is ProcessRole.MAIN)
    if n_out <= ev.options.max_outlier_fraction * main.processes:
        return None
    return _ambiguous(
        "not-a-minority", ev, f"outliers are {n_out} of {main.processes} main processes: not a minority"
    )


def rule_outlier_classes(ev: BlameEvidence) -> RuleVerdict | None:
    """Without a layout, the outlier processes are the suspects, by rank and the dumps' hosts.

    Args:
        ev: the evidence.

    Returns:
        The verdict naming every outlier (no group), else ``None`` (a layout: the rules above decide).
    """
    if ev.topology is not None:
        return None
    return _named("outlier-classes", ev, Placement(ev.outliers, None, frozenset(), ev.healthy))


def _last_resort(ev: BlameEvidence) -> RuleVerdict:
    """After every other rule: the outlier classes as they are (a layout whose smallest group for the
    outliers is none at all; the rules above leave no such picture, this keeps :func:`blame` total)."""
    return _named("outlier-classes", ev, Placement(ev.outliers, None, frozenset(), ev.healthy))


CLASS_RULES: tuple[Callable[[BlameEvidence], RuleVerdict | None], ...] = (
    rule_nothing_readable,
    rule_no_dominant_main,
    rule_dominant_group,
    rule_promoted_group,
    rule_own_machines,
    rule_unlocalized,
    rule_not_a_minority,
    rule_outlier_classes,
    _last_resort,
)
"""The class rules in the order :func:`blame` tries them; the first that fires decides. Each rule
sees only pictures the rules before it let through: nothing readable and a main role without a
dominant class end it first; with a layout, a proper group with the dominant classes healthy, then
with large waiting classes promoted, then the outliers' own machines, else ambiguity; without one,
ambiguity when the outliers are no minority, else the outliers themselves."""


# --- localizing the outliers --------------------------------------------------------------------------


def _fits(ev: BlameEvidence, g: GroupChoice | None, ranks: set[int]) -> bool:
    """Whether ``g`` (the smallest group holding ``ranks``) is small enough to over-evict: at most
    ``max_evict_fraction`` of a multi-machine job's machines; for ``job`` (no proper group), whether
    the ranks' own machines are few (``max_spread_machines``, and the same fraction)."""
    topology, opts = ev.topology, ev.options
    if g is None or topology is None:
        return True
    n = topology.n_machines
    if n is not None and n <= 1:
        return True
    if g.kind != "job":
        return n is None or len(g.machines) <= opts.max_evict_fraction * n
    own = len(topology.machines_of(ranks)) if n is not None else len(ranks)
    return own <= opts.max_spread_machines and (n is None or own <= opts.max_evict_fraction * n)


def _localize(
    ev: BlameEvidence, healthy: frozenset[tuple[ProcessRole, int]], allow_job: bool
) -> Placement | None:
    """Localize the outliers under ``healthy``: all together in one group, else the stack outliers in
    a group with the unreadable ones outside it named machine by machine; ``None`` when neither fits.
    A ``job`` answer (outliers named by their own machines) is accepted only with ``allow_job``."""
    topology = ev.topology
    assert topology is not None
    dumps = ev.clusters.dumps
    out = tuple(_outlier_classes(ev.clusters, healthy, []))
    every = _ranks_of(out, dumps)
    g = topology.finder.smallest(every)
    if (allow_job or g is None or g.kind != "job") and _fits(ev, g, every):
        return Placement(out, g, frozenset(), healthy)
    stack = _ranks_of((c for c in out if not c.unreadable), dumps)
    unread = every - stack
    if not (stack and unread):
        return None
    g = topology.finder.smallest(stack)
    if g is None or g.kind == "job" or not _fits(ev, g, stack):
        return None
    inside = set(topology.finder.group_of(min(stack), g.kind)) if g.kind != "rank" else stack
    rest = unread - inside
    if len(topology.machines_of(rest) if topology.ranks_per_host else rest) > ev.options.max_spread_machines:
        return None
    return Placement(out, g, frozenset(rest), healthy)


# --- the class answer ---------------------------------------------------------------------------------


def _sorted_healthy(healthy: Iterable[tuple[ProcessRole, int]]) -> tuple[tuple[ProcessRole, int], ...]:
    return tuple(sorted(healthy, key=lambda x: (x[0].value, x[1])))


def _unplaced(outliers: Iterable[StackClass], dumps: Sequence[ProcessDump]) -> tuple[str, ...]:
    """Outlier processes without a rank: their ``source``, else ``host:pid`` or ``pid N``."""
    return tuple(
        dumps[i].source or (f"{dumps[i].host}:{dumps[i].pid}" if dumps[i].host else f"pid {dumps[i].pid}")
        for c in outliers
        for i in c.members
        if dumps[i].rank is None
    )


def _ambiguous(rule: str, ev: BlameEvidence, why: str) -> RuleVerdict:
    """An ambiguous verdict: nobody named, the outliers' unplaced processes listed."""
    result = BlameResult(
        not_collected=compact_ranges(ev.not_collected),
        n_not_collected=len(ev.not_collected),
        healthy_classes=_sorted_healthy(ev.healthy),
        unplaced=_unplaced(ev.outliers, ev.clusters.dumps),
        ambiguous=True,
        ambiguity=why,
        notes=(*ev.notes, *ev.role_notes),
    )
    return _verdict(rule, why, result)


def _suspect_hosts(suspects: Iterable[Suspect]) -> tuple[str, ...]:
    """The suspects' distinct hosts in machine order (hosts without a machine last, by name)."""
    by_machine = {
        (s.machine if s.machine is not None else 1 << 60, s.host): None
        for s in suspects
        if s.host is not None
    }
    return tuple(h for _, h in sorted(by_machine))


def _over_eviction(
    group: GroupChoice | None, separate: Iterable[int], topology: Topology | None, hosts: tuple[str, ...]
) -> tuple[str, ...]:
    """The hosts to evict: the group's machines and those of the ``separate`` ranks, else ``hosts``."""
    if group is not None and group.machines and topology is not None:
        extra = [topology.machine_name(m) for m in topology.machines_of(separate)]
        return tuple(dict.fromkeys((*group.machines, *extra)))
    return hosts


def _named(rule: str, ev: BlameEvidence, placed: Placement) -> RuleVerdict:
    """The verdict naming ``placed``'s outliers: suspects, hosts, over-eviction set and notes."""
    topology, dumps = ev.topology, ev.clusters.dumps
    notes = [*ev.notes, *ev.role_notes, *placed.notes]
    separate, group = placed.separate, placed.group
    if separate:
        notes.append(
            f"unreadable rank{'s' if len(separate) > 1 else ''} {compact_ranges(separate)} outside "
            f"the group: {'their' if len(separate) > 1 else 'its'} machines are named too"
        )
    if group is not None and group.kind == "job":
        notes.append(
            "no parallel group smaller than the job holds every outlier: only the outliers' own machines are named"
        )
        group = None
    suspects = [_class_suspect(c, dumps[i], topology) for c in placed.outliers for i in c.members]
    suspects.sort(
        key=lambda s: (s.rank is None, s.rank if s.rank is not None else 0, s.role.value, s.pid or 0)
    )
    hosts = _suspect_hosts(suspects)
    culprits = tuple(sorted({s.rank for s in suspects if s.likely_culprit and s.rank is not None}))
    if suspects and not culprits:
        notes.append(
            "every outlier is waiting on a peer (collective or p2p): the rank they wait for may be among "
            "the ranks not collected, or in a healthy-looking class"
        )
    over = _over_eviction(group, separate, topology, hosts)
    # expected healthy machines evicted: those running no likely culprit (victims waiting on a peer
    # run on healthy machines: ByteRobust counts 6-7 such machines per PP group at 9,600 GPUs)
    blamed = set(culprits) if culprits else {s.rank for s in suspects if s.rank is not None}
    culprit_hosts = {s.host for s in suspects if s.rank in blamed and s.host is not None}
    if group is not None and topology is not None and topology.ranks_per_host is None:
        notes.append("ranks per host unknown: no machines, no over-eviction set")
    result = BlameResult(
        suspects=tuple(suspects),
        suspect_ranks=tuple(sorted({s.rank for s in suspects if s.rank is not None})),
        suspect_hosts=hosts,
        likely_culprits=culprits,
        group=group,
        over_eviction=over,
        healthy_machines_taken=sum(1 for h in over if h not in culprit_hosts),
        healthy_classes=_sorted_healthy(placed.healthy),
        not_collected=compact_ranges(ev.not_collected),
        n_not_collected=len(ev.not_collected),
        unplaced=_unplaced(placed.outliers, dumps),
        notes=tuple(notes),
    )
    where = f"{group.kind} group {group.index} ({group.ranks})" if group is not None else "their own machines"
    reason = (
        f"{len(result.suspect_ranks)} outlier ranks, over-evicted through {where}"
        if suspects
        else "no outlier"
    )
    return _verdict(rule, reason, result)


# --- rule 6: waits-for --------------------------------------------------------------------------------


@dataclass(frozen=True)
class WaitsEvidence:
    """What the waits-for rule looks at.

    Attributes:
        classes: the evidence the class rules looked at. answer: their answer.
        waits: the waits-for analysis of the same sample.
    """

    classes: BlameEvidence
    answer: BlameResult
    waits: WaitsFor


def rule_waits_for(wev: WaitsEvidence) -> RuleVerdict | None:
    """The ranks at the ends of the waits-for chains are the suspects (rule 6).

    Does not fire when the chains decide nothing, or when the class answer stands: not ambiguous,
    and its suspects hold every rank the chains end at. Otherwise the ends (with their data-loader or
    checkpoint children that are outliers) are over-evicted through their own smallest group, or
    their machines when that group is the job or spans more than ``max_evict_fraction`` of them.

    Args:
        wev: the class answer and the chains.

    Returns:
        The verdict naming the ends (``decided_by="waits-for"``), else ``None``.
    """
    res, wf = wev.answer, wev.waits
    if not wf.decided:
        return None
    ends = set(wf.suspect_ranks)
    if not res.ambiguous and res.suspects and ends <= set(res.suspect_ranks):
        return None
    ev = wev.classes
    topology = ev.topology
    suspects = _waits_suspects(ends, wf, ev.clusters, topology)
    notes = [n for n in res.notes if "never blamed" not in n]
    if res.n_not_collected:
        notes.insert(0, f"ranks {res.not_collected} not collected: not checked")
    group = _ends_group(ends, topology, ev.options, notes)
    hosts = _suspect_hosts(suspects)
    over = _over_eviction(group, (), topology, hosts)
    notes.append(f"named by the waits-for chains (confidence {wf.confidence}); {_class_summary(res)}")
    notes.extend(wf.notes)
    bad_classes = {(s.role, s.class_id) for s in suspects}
    healthy = _sorted_healthy(
        (rc.role, c.id)
        for rc in ev.clusters.roles
        for c in rc.classes
        if not c.unreadable and (rc.role, c.id) not in bad_classes
    )
    result = BlameResult(
        suspects=tuple(suspects),
        suspect_ranks=tuple(sorted(ends)),
        suspect_hosts=hosts,
        likely_culprits=tuple(sorted(ends)),
        group=group,
        over_eviction=over,
        healthy_machines_taken=sum(1 for h in over if h not in set(hosts)),
        healthy_classes=healthy,
        not_collected=res.not_collected,
        n_not_collected=res.n_not_collected,
        unplaced=res.unplaced if not res.ambiguous else (),
        notes=tuple(notes),
        waits_for=wf,
        decided_by="waits-for",
    )
    return _verdict("waits-for", f"the waits-for chains end at ranks {compact_ranges(sorted(ends))}", result)


def _class_summary(res: BlameResult) -> str:
    """What the stack classes alone said, for the waits-for note."""
    if res.ambiguous:
        return f"the stack classes alone were ambiguous ({res.ambiguity})"
    if res.suspect_ranks:
        return f"the stack classes alone named ranks {compact_ranges(res.suspect_ranks)}"
    return "the stack classes alone named no rank"


def _ends_group(
    ends: set[int], topology: Topology | None, opts: BlameOptions, notes: list[str]
) -> GroupChoice | None:
    """The smallest group holding the chains' ends, ``None`` (with a note) when it is the job or spans
    more than ``max_evict_fraction`` of a multi-machine job's machines, or without a layout."""
    if topology is None:
        return None
    group = topology.finder.smallest(ends)
    n = topology.n_machines
    if group is not None and (
        group.kind == "job" or (n is not None and n > 1 and len(group.machines) > opts.max_evict_fraction * n)
    ):
        notes.append(
            f"the smallest group holding ranks {compact_ranges(sorted(ends))} ({group.kind}) is too large: "
            "only their own machines are named"
        )
        return None
    return group


def _waits_suspects(
    ends: set[int], wf: WaitsFor, clusters: ClusterResult, topology: Topology | None
) -> list[Suspect]:
    """The suspects at the chains' ends: each end's main process (its reason from the chains), then
    its data-loader or checkpoint children that are outliers; rank order, main first."""
    main_of, children = _processes_at(clusters, ends)
    by_rank = {s.rank: s for s in wf.suspects}
    chain_of = {ch.hops[-1].rank: ch for ch in wf.chains}
    if any(s.cycle for s in wf.suspects) and wf.chains:
        chain_of = {r: wf.chains[0] for r in ends}
    suspects = [_end_suspect(by_rank[r], chain_of.get(r), main_of.get(r), topology) for r in sorted(ends)]
    suspects.extend(_class_suspect(c, d, topology) for c, d in children)
    suspects.sort(
        key=lambda s: (s.rank if s.rank is not None else 0, s.role is not ProcessRole.MAIN, s.pid or 0)
    )
    return suspects


def _processes_at(
    clusters: ClusterResult, ends: set[int]
) -> tuple[dict[int, tuple[StackClass, ProcessDump]], list[tuple[StackClass, ProcessDump]]]:
    """The processes of the ranks in ``ends``: each rank's first main process with its class, and its
    blamed children (data loader, checkpoint) that are unreadable or outside their role's dominant class."""
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
    return main_of, children


def _end_suspect(
    ws: WaitSuspect,
    chain: WaitChain | None,
    main: tuple[StackClass, ProcessDump] | None,
    topology: Topology | None,
) -> Suspect:
    """The main process of a rank the chains end at: its reason the chains' (with who waits on it)."""
    md = main[1] if main else None
    machine, host, coords = _place(topology, ws.rank, md)
    reason = ws.reason
    if chain is not None and len(chain.hops) > 1:
        reason += (
            f"; {ws.waiters} rank{'s' if ws.waiters != 1 else ''} wait on it ({chain.text.split(' (', 1)[0]})"
        )
    state = ws.state if ws.state != "missing" else Category.UNREADABLE.value
    return Suspect(
        rank=ws.rank,
        host=host,
        machine=machine,
        coords=coords,
        role=ProcessRole.MAIN,
        pid=md.pid if md is not None else None,
        source=md.source if md is not None else None,
        category=Category(state),
        class_id=main[0].id if main else -1,
        reason=reason,
        likely_culprit=True,
    )
