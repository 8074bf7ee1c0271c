"""Process groups rebuilt from ``pg_config`` or the job's layout, and each rank's entries indexed by group."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from robustctl.analysis.flightrec.load import P2P_PEER_RE, FrDump, FrEntry
from robustctl.analysis.flightrec.model import FrGroup
from robustctl.errors import UsageError
from robustctl.inventory.hostrange import compact_ranges
from robustctl.inventory.topology import DIMS, Topology

# --- groups --------------------------------------------------------------------------------------

_DESC_DIMS = (
    ("tensor", "tp"),
    ("tp", "tp"),
    ("pipeline", "pp"),
    ("pp", "pp"),
    ("data", "dp"),
    ("dp", "dp"),
    ("context", "cp"),
    ("cp", "cp"),
    ("expert", "ep"),
    ("ep", "ep"),
    ("moe", "ep"),
)


def desc_kind(desc: str) -> str | None:
    """The layout group kind a group description names: Megatron's ``TENSOR_MODEL_PARALLEL_GROUP``
    → ``"tp"``, ``DATA_PARALLEL_GROUP_WITH_CP`` → ``"cp-dp"``, ``MODEL_PARALLEL_GROUP`` →
    ``"tp-pp"``, ``default_pg`` → ``"job"``; embedding groups and other descriptions name none.

    Args:
        desc: the description (``process_group[1]``).

    Returns:
        A kind :meth:`Topology.group_of` accepts, or ``None``.
    """
    low = desc.lower()
    if low == "default_pg":
        return "job"
    if "embedding" in low:
        return None
    toks = set(re.split(r"[^a-z0-9]+", low))
    dims = {d for tok, d in _DESC_DIMS if tok in toks}
    if not dims and {"model", "parallel"} <= toks:
        dims = {"tp", "pp"}
    return "-".join(d for d in DIMS if d in dims) or None


def _from_layout(
    name: str, desc: str, observed: Sequence[int], topo: Topology
) -> tuple[FrGroup | None, str | None]:
    """The group rebuilt from the layout, or ``None`` with why (a note) when the layout cannot say."""
    valid = sorted(r for r in observed if 0 <= r < topo.world_size)
    if not valid or len(valid) != len(observed):
        return None, None
    finder = topo.finder
    named = desc_kind(desc)
    if named is not None:
        try:
            members = finder.group_of(valid[0], named)
        except UsageError:
            members = ()
        if set(valid) <= set(members):
            return FrGroup(name, desc, members, "layout", named), None
    fits: list[tuple[int, str, tuple[int, ...]]] = []
    for kind in [d for d in topo.order if topo.sizes[d] > 1] + ["job"]:
        members = finder.group_of(valid[0], kind)
        if set(valid) <= set(members):
            fits.append((len(members), kind, members))
    if not fits:
        return None, None
    size = min(f[0] for f in fits)
    best = [f for f in fits if f[0] == size]
    if len({f[2] for f in best}) > 1:
        kinds = "/".join(f[1] for f in best)
        return None, (
            f"group {name} ({desc or 'no description'}): recorded by rank(s) {compact_ranges(valid)} only; "
            f"the layout allows {kinds}: its members are the ranks that recorded it"
        )
    return FrGroup(name, desc, best[0][2], "layout", best[0][1]), None


def build_groups(
    dumps: Mapping[int, FrDump], topo: Topology | None, world: int
) -> tuple[dict[str, FrGroup], list[str]]:
    """Every group named in the entries, with its members (see the module docstring, step 2)."""
    observed: dict[str, set[int]] = {}
    descs: dict[str, str] = {}
    config: dict[str, tuple[int, ...]] = {}
    for rank in sorted(dumps):
        d = dumps[rank]
        for e in d.entries:
            observed.setdefault(e.pg_name, set()).add(rank)
            if e.pg_desc and e.pg_name not in descs:
                descs[e.pg_name] = e.pg_desc
        for gname, members in d.pg_config.items():
            config.setdefault(gname, members)
        for gname, gdesc in d.pg_desc.items():
            descs.setdefault(gname, gdesc)
    groups: dict[str, FrGroup] = {}
    notes: list[str] = []
    for gname in sorted(observed, key=_name_key):
        desc = descs.get(gname, "")
        seen = sorted(observed[gname])
        if gname in config:
            groups[gname] = FrGroup(gname, desc, config[gname], "pg_config")
            continue
        if topo is not None:
            rebuilt, note = _from_layout(gname, desc, seen, topo)
            if note:
                notes.append(note)
            if rebuilt is not None:
                groups[gname] = rebuilt
                continue
        if desc == "default_pg" or (gname == "0" and not desc):
            groups[gname] = FrGroup(gname, desc, tuple(range(world)), "world", "job")
        else:
            groups[gname] = FrGroup(gname, desc, tuple(seen), "observed")
    return groups, notes


def _name_key(name: str) -> tuple[int, int, str]:
    """Groups in creation order: numeric names ascending, then the others by name."""
    return (0, int(name), "") if name.isdigit() and len(name) < 12 else (1, 0, name)


MAX_NAMES = 8
"""Group names listed in a class's label; more are elided (a 1,024-way DP job has 64 TP groups per stage)."""


# --- comparable groups ---------------------------------------------------------------------------


def _layout_kind(g: FrGroup, topo: Topology) -> str | None:
    """The layout kind of ``g``: as rebuilt, or for a ``pg_config`` group the kind its description names
    (or, undescribed, the one single-dimension kind) whose layout group holds exactly its ranks."""
    if g.membership == "layout":
        return g.kind
    if g.membership != "pg_config" or not g.ranks or not 0 <= g.ranks[0] < topo.world_size:
        return None
    named = desc_kind(g.desc)
    undescribed = not g.desc or g.desc == "undefined"
    candidates = [named] if named is not None else ([d for d in topo.order] if undescribed else [])
    finder = topo.finder
    for kind in candidates:
        try:
            if finder.group_of(g.ranks[0], kind) == g.ranks:
                return kind
        except UsageError:
            continue
    return None


def comparable_groups(groups: Mapping[str, FrGroup], topo: Topology | None) -> dict[str, tuple[str, ...]]:
    """Which groups run the same collective schedule, so that their entries at one sequence number
    should agree on op, sizes and dtypes: the wider electorate of a vote.

    Two groups are comparable when the layout gives both the same kind (``"dp"``, ``"tp"``; rebuilt
    from the layout, or a ``pg_config`` group whose ranks are exactly the layout's group of that kind)
    and their ranks sit in the same pipeline stages: every DP group of stage 1, every TP group of stage
    0, every PP group (each spans all stages). Ranks of different stages hold different layers, so
    their groups' sizes (and even their collective counts) legitimately differ; ranks of one stage hold
    the same layers' shards, same-sized in Megatron's even split. A kind with one group (``"job"``)
    has nothing to compare with; a class whose groups share a rank (a description that matched two
    groups of the same ranks, e.g. an embedding group equal to a PP group) is left out: they need not
    run the same schedule.

    Args:
        groups: the job's groups by name.
        topo: the job's topology; ``None`` (no layout): nothing is comparable.

    Returns:
        Group name → the names of its class (itself included, in :func:`build_groups` order), for the
        groups of a class of two or more.
    """
    if topo is None:
        return {}
    classes: dict[tuple[str, tuple[int, ...]], list[FrGroup]] = {}
    for g in groups.values():
        kind = _layout_kind(g, topo)
        if kind is None or kind == "job" or any(not 0 <= r < topo.world_size for r in g.ranks):
            continue
        stages = tuple(sorted({topo.coords(r).get("pp", 0) for r in g.ranks}))
        classes.setdefault((kind, stages), []).append(g)
    out: dict[str, tuple[str, ...]] = {}
    for members in classes.values():
        ranks = [r for g in members for r in g.ranks]
        if len(members) < 2 or len(ranks) != len(set(ranks)):
            continue
        names = tuple(g.name for g in members)
        for g in members:
            out[g.name] = names
    return out


def class_label(names: Sequence[str], groups: Mapping[str, FrGroup], topo: Topology) -> str:
    """``"the 2 dp groups of pipeline stage 1 (7, 8)"``: a class of :func:`comparable_groups` in words.

    Args:
        names: the class's group names.
        groups: the groups by name.
        topo: the job's topology.

    Returns:
        The label.
    """
    first = groups[names[0]]
    kind = _layout_kind(first, topo) or "?"
    stages = sorted({topo.coords(r).get("pp", 0) for r in first.ranks})
    where = f" of pipeline stage {stages[0]}" if len(stages) == 1 and topo.sizes["pp"] > 1 else ""
    listed = ", ".join(names[:MAX_NAMES]) + (", …" if len(names) > MAX_NAMES else "")
    return f"the {len(names)} {kind} groups{where} ({listed})"


# --- per rank ------------------------------------------------------------------------------------


@dataclass
class RankView:
    """One rank's entries indexed by group: the last (and first) sequence number it recorded."""

    dump: FrDump
    last: dict[tuple[str, bool], int] = field(default_factory=dict)
    first: dict[tuple[str, bool], int] = field(default_factory=dict)
    at: dict[str, dict[int, FrEntry]] = field(default_factory=dict)  # group -> seq -> collective
    blocked: FrEntry | None = None
    latest: FrEntry | None = None

    @classmethod
    def of(cls, dump: FrDump) -> RankView:
        """Index ``dump``'s entries.

        Args:
            dump: one rank's dump.

        Returns:
            The view.
        """
        v = cls(dump)
        for e in dump.entries:
            key = (e.pg_name, e.is_p2p)
            v.last[key] = max(v.last.get(key, 0), e.seq)
            v.first[key] = min(v.first.get(key, e.seq), e.seq)
            if not e.is_p2p:
                v.at.setdefault(e.pg_name, {}).setdefault(e.seq, e)
            if v.blocked is None and not e.complete:
                v.blocked = e
            v.latest = e
        return v


def what(e: FrEntry, groups: Mapping[str, FrGroup]) -> str:
    """``"all_reduce #2 in TENSOR_MODEL_PARALLEL_GROUP 2"``: an entry as reports name it.

    Args:
        e: the entry.
        groups: the groups by name (for the label).

    Returns:
        The text.
    """
    g = groups.get(e.pg_name)
    label = g.label if g is not None else f"group {e.pg_name}"
    kind = " p2p" if e.is_p2p else ""
    return f"{e.op}{kind} #{e.seq} in {label}"


def peers(e: FrEntry, group: FrGroup | None, rank: int) -> tuple[int, ...] | None:
    """The ranks ``rank``'s blocked operation needs: the other members for a collective, the peer
    for a p2p operation (``None`` when it cannot be told)."""
    if group is None:
        return None
    others = tuple(r for r in group.ranks if r != rank)
    if not e.is_p2p:
        return others
    if len(others) == 1:
        return others
    m = P2P_PEER_RE.search(e.profiling_name)
    if m is not None and group.membership != "observed":
        me, peer = int(m.group(1)), int(m.group(3))
        if me < len(group.ranks) and peer < len(group.ranks) and group.ranks[me] == rank:
            return (group.ranks[peer],)
    return None
