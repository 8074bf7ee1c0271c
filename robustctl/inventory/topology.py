"""Rank ↔ parallel coordinates ↔ machine, and the parallel groups of a layout.

Semantics are Megatron-LM's (``megatron/core/parallel_state.py``: ``RankGenerator`` and
``generate_masked_orthogonal_rank_groups``). A layout's ``order`` lists the dimensions fastest-varying
first; with sizes ``s_0 … s_4`` in that order and strides ``d_0 = 1, d_i = d_{i-1}·s_{i-1}``::

    rank = Σ coord[i] · d_i            e.g. order tp-cp-ep-dp-pp: rank = tp + TP·(cp + CP·(ep + EP·(dp + DP·pp)))

The group of kind ``K`` (one dimension such as ``"pp"``, or several joined with ``-`` such as
``"tp-pp"``, Megatron's ``get_ranks(token)``) that contains a rank holds every rank that differs from
it only in the coordinates of ``K``; groups of a kind are numbered as Megatron enumerates them (the
other coordinates read as a mixed-radix number, fastest dimension first), and ranks within a group
ascend. Megatron's documented example (``initialize_model_parallel`` docstring: 16 GPUs, TP=2, PP=4,
DP=2) gives TP groups ``[0,1] [2,3] …``, PP groups ``[0,4,8,12] [1,5,9,13] …`` and DP groups ``[0,2]
[1,3] [4,6] …`` (tested in ``tests/unit/test_topology.py``).

Unlike Megatron, which builds expert groups with a second generator (``ep`` replaces part of ``dp``),
robustctl treats the five dimensions as orthogonal: ``world = tp·cp·ep·dp·pp`` (as
:class:`~robustctl.config.ParallelLayout` does). Machine ``k`` holds ranks ``k·G … k·G+G-1``
(``G`` = ranks per host), so rank ``r`` runs on machine ``r // G``.

:func:`smallest_group` picks the group with the fewest machines that holds some ranks: what stacks
blame and ``evict --over-evict auto`` take out. :class:`GroupFinder` (one per :class:`Topology`,
:attr:`Topology.finder`) remembers its answers and the groups' members, so stacks blame and the
waits-for analysis, which ask about the same ranks and groups many times, share one search.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from robustctl.config import MAX_WORLD_SIZE, ParallelLayout
from robustctl.errors import UsageError
from robustctl.inventory.hostrange import compact_ranges

__all__ = ["DIMS", "GroupChoice", "GroupFinder", "Topology", "parse_layout", "smallest_group"]

DIMS = ("tp", "cp", "ep", "dp", "pp")
"""The parallel dimensions robustctl knows."""

_KEYS = {*DIMS, "order"}

MAX_REMEMBERED_SEARCHES = 256
"""Smallest-group answers a :class:`GroupFinder` keeps before it forgets them all. One blame asks a few
per stack class it tries to treat as healthy (tens at most); a key holds up to W ranks, so the bound
keeps a long-lived topology's memory at a few hundred rank sets rather than growing with every call."""


def parse_layout(text: str, *, world_size: int | None = None) -> ParallelLayout:
    """Parse a ``--layout`` value such as ``"tp=2,pp=4,dp=4"``.

    Keys: ``tp``, ``pp``, ``dp``, ``cp``, ``ep`` (positive integers, default 1) and ``order`` (e.g.
    ``order=tp-cp-ep-dp-pp``, fastest first; Megatron's default when absent). Separators: commas or
    spaces. When ``dp`` is absent and ``world_size`` is given, ``dp`` is the world size divided by the
    other sizes (Megatron derives DP the same way).

    Args:
        text: the option value.
        world_size: the number of ranks the layout must cover, when known (e.g. the highest rank in
            the dumps + 1, or a job's world size).

    Returns:
        The validated layout (sizes absent from ``text`` are 1; ``dp`` derived as above).

    Raises:
        UsageError: empty text, an unknown key, a repeated key, a value that is not a positive
            integer, a bad order, or sizes whose product differs from ``world_size``; the message says
            which and what is expected.
    """
    items = [t for t in re.split(r"[,\s]+", text.strip()) if t]
    if not items:
        raise UsageError("empty layout: expected e.g. tp=2,pp=4,dp=4")
    values: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep or not value.strip():
            raise UsageError(f"layout item {item!r} is not KEY=VALUE (e.g. tp=2,pp=4,dp=4)")
        if key not in _KEYS:
            known = ", ".join((*DIMS, "order"))
            raise UsageError(f"unknown layout key {key!r} in {text!r} (known: {known})")
        if key in values:
            raise UsageError(f"layout key {key!r} given twice in {text!r}")
        values[key] = value.strip()
    sizes: dict[str, int] = {}
    for key in DIMS:
        if key in values:
            v = values[key]
            if not (v.isascii() and v.isdigit()):
                raise UsageError(f"layout {key}={v[:40]!r}: expected a positive integer")
            if len(v.lstrip("0")) > 7 or int(v) > MAX_WORLD_SIZE:
                raise UsageError(
                    f"layout {key}={v[:20]}{'...' if len(v) > 20 else ''}: larger than the largest "
                    f"world size {MAX_WORLD_SIZE}"
                )
            if int(v) < 1:
                raise UsageError(f"layout {key}={v!r}: expected a positive integer")
            sizes[key] = int(v)
    if "dp" not in sizes and world_size is not None:
        others = 1
        for size in sizes.values():
            others *= size
        if world_size % others:
            raise UsageError(
                f"layout {text!r}: world size {world_size} is not divisible by "
                f"{'·'.join(f'{k}={v}' for k, v in sizes.items()) or '1'} = {others}"
            )
        sizes["dp"] = world_size // others
    product = 1
    for size in sizes.values():
        product *= size
    if product > MAX_WORLD_SIZE:
        raise UsageError(
            f"layout {text!r} multiplies to {product} ranks, more than the largest world size {MAX_WORLD_SIZE}"
        )
    kwargs: dict[str, object] = dict(sizes)
    if "order" in values:
        order = values["order"].lower()
        parts = order.split("-")
        if sorted(parts) != sorted(DIMS):
            raise UsageError(
                f"layout order {values['order']!r}: expected each of tp, cp, ep, dp, pp once, e.g. tp-cp-ep-dp-pp"
            )
        kwargs["order"] = order
    try:
        layout = ParallelLayout.model_validate(kwargs)
    except ValidationError as exc:  # pragma: no cover - the checks above cover the model's rules
        raise UsageError(f"invalid layout {text!r}: {exc.errors()[0]['msg']}") from None
    if world_size is not None and layout.world_size != world_size:
        raise UsageError(
            f"layout {text!r} multiplies to {layout.world_size} ranks "
            f"(tp·cp·ep·dp·pp = {layout.tp}·{layout.cp}·{layout.ep}·{layout.dp}·{layout.pp}), "
            f"but the world size is {world_size}"
        )
    return layout


@dataclass(frozen=True)
class _Kind:
    name: str
    dims: tuple[int, ...]  # indices into the order, ascending
    others: tuple[int, ...]


class Topology:
    """A job's rank geometry: coordinates, machines, hosts and groups.

    Args:
        layout: the parallel layout (W ranks).
        ranks_per_host: ranks per machine ``G``; ``None`` when unknown (machines are then unknown too).
        hosts: machine names in rank order (``Job.hosts``); machine ``k`` is ``hosts[k]``. Without
            it, machine ``k`` is named ``"machine-k"``.

    Raises:
        UsageError: ``ranks_per_host`` < 1, or ``hosts`` too few to hold W ranks at G per host.
    """

    def __init__(
        self,
        layout: ParallelLayout,
        ranks_per_host: int | None = None,
        hosts: Sequence[str] | None = None,
    ) -> None:
        self.layout = layout
        self.order: tuple[str, ...] = tuple(layout.order.split("-"))
        self.sizes: dict[str, int] = {d: int(getattr(layout, d)) for d in DIMS}
        self.world_size = layout.world_size
        strides: list[int] = []
        acc = 1
        for d in self.order:
            strides.append(acc)
            acc *= self.sizes[d]
        self._strides = tuple(strides)
        self._shape = tuple(self.sizes[d] for d in self.order)
        self._kinds: dict[str, _Kind] = {}  # _kind's answers: it runs once per rank in group lookups
        self._finder: GroupFinder | None = None
        if ranks_per_host is not None and ranks_per_host < 1:
            raise UsageError(f"ranks per host must be at least 1, got {ranks_per_host}")
        self.ranks_per_host = ranks_per_host
        self.hosts: tuple[str, ...] | None = tuple(hosts) if hosts is not None else None
        if (
            self.hosts is not None
            and ranks_per_host is not None
            and len(self.hosts) * ranks_per_host < self.world_size
        ):
            raise UsageError(
                f"{len(self.hosts)} hosts × {ranks_per_host} ranks per host hold fewer than the layout's "
                f"{self.world_size} ranks"
            )

    # --- ranks and coordinates ------------------------------------------------------------------

    def check_rank(self, rank: int) -> None:
        """Raise UsageError when ``rank`` is outside ``0 … W-1``."""
        if not 0 <= rank < self.world_size:
            raise UsageError(
                f"rank {rank} is outside the layout's {self.world_size} ranks (0-{self.world_size - 1})"
            )

    def coords(self, rank: int) -> dict[str, int]:
        """``{"tp": …, "cp": …, "ep": …, "dp": …, "pp": …}`` of ``rank``. Raises UsageError when out of range."""
        self.check_rank(rank)
        return {d: (rank // s) % n for d, s, n in zip(self.order, self._strides, self._shape, strict=True)}

    def rank_of(self, coords: Mapping[str, int]) -> int:
        """The rank at ``coords`` (missing dimensions are 0). Raises UsageError when a coordinate is out of range."""
        r = 0
        for d, s, n in zip(self.order, self._strides, self._shape, strict=True):
            c = int(coords.get(d, 0))
            if not 0 <= c < n:
                raise UsageError(f"{d} coordinate {c} outside 0-{n - 1}")
            r += c * s
        return r

    # --- machines -------------------------------------------------------------------------------

    @property
    def n_machines(self) -> int | None:
        """Machines the job spans (``ceil(W / G)``), ``None`` when ranks per host is unknown."""
        if self.ranks_per_host is None:
            return None
        return -(-self.world_size // self.ranks_per_host)

    def machine_of(self, rank: int) -> int | None:
        """Machine index ``rank // G``; ``None`` when ranks per host is unknown."""
        self.check_rank(rank)
        return None if self.ranks_per_host is None else rank // self.ranks_per_host

    def machine_name(self, machine: int) -> str:
        """``hosts[machine]``, or ``"machine-<k>"`` without a host list."""
        if self.hosts is not None and 0 <= machine < len(self.hosts):
            return self.hosts[machine]
        return f"machine-{machine}"

    def host_of(self, rank: int) -> str | None:
        """The host (or ``machine-k``) running ``rank``; ``None`` when ranks per host is unknown."""
        m = self.machine_of(rank)
        return None if m is None else self.machine_name(m)

    def machines_of(self, ranks: Iterable[int]) -> tuple[int, ...]:
        """Sorted distinct machine indices of ``ranks`` (empty when ranks per host is unknown)."""
        if self.ranks_per_host is None:
            return ()
        g = self.ranks_per_host
        return tuple(sorted({r // g for r in ranks}))

    def machine_ranks(self, machine: int) -> range:
        """The ranks machine ``machine`` holds. Raises UsageError when ranks per host is unknown."""
        if self.ranks_per_host is None:
            raise UsageError("ranks per host unknown: cannot map machines to ranks")
        g = self.ranks_per_host
        return range(machine * g, min((machine + 1) * g, self.world_size))

    # --- groups ---------------------------------------------------------------------------------

    @property
    def finder(self) -> GroupFinder:
        """The :class:`GroupFinder` of this topology (made on first use, then shared by every caller)."""
        if self._finder is None:
            self._finder = GroupFinder(self)
        return self._finder

    def _kind(self, kind: str) -> _Kind:
        found = self._kinds.get(kind)
        if found is None:
            found = self._kinds[kind] = self._parse_kind(kind)
        return found

    def _parse_kind(self, kind: str) -> _Kind:
        if kind == "job":
            parts = set(DIMS)
        else:
            parts = set(kind.lower().split("-"))
            if not parts <= set(DIMS) or not parts:
                raise UsageError(
                    f"unknown group kind {kind!r}: expected tp, cp, ep, dp, pp, 'job' or a '-'-joined mix"
                )
        dims = tuple(i for i, d in enumerate(self.order) if d in parts)
        others = tuple(i for i in range(len(self.order)) if i not in dims)
        return _Kind(self.kind_name(parts), dims, others)

    def kind_name(self, dims: Iterable[str]) -> str:
        """Canonical name of a group kind: its dimensions in layout order joined by ``-`` (``"tp-pp"``)."""
        s = set(dims)
        return "-".join(d for d in self.order if d in s)

    def group_count(self, kind: str) -> int:
        """How many groups of ``kind`` the layout has."""
        k = self._kind(kind)
        n = 1
        for i in k.others:
            n *= self._shape[i]
        return n

    def group_size(self, kind: str) -> int:
        """Ranks per group of ``kind``."""
        return self.world_size // self.group_count(kind)

    def group_index(self, rank: int, kind: str) -> int:
        """Megatron's index of the ``kind`` group that contains ``rank``."""
        self.check_rank(rank)
        k = self._kind(kind)
        idx, mul = 0, 1
        for i in k.others:
            idx += ((rank // self._strides[i]) % self._shape[i]) * mul
            mul *= self._shape[i]
        return idx

    def group_ranks(self, kind: str, index: int) -> tuple[int, ...]:
        """The ranks of group ``index`` of ``kind``, ascending. Raises UsageError when out of range."""
        k = self._kind(kind)
        count = self.group_count(kind)
        if not 0 <= index < count:
            raise UsageError(f"{kind} group {index} outside 0-{count - 1}")
        base, rem = 0, index
        for i in k.others:
            base += (rem % self._shape[i]) * self._strides[i]
            rem //= self._shape[i]
        ranks = [base]
        for i in k.dims:
            step, n = self._strides[i], self._shape[i]
            ranks = [r + c * step for c in range(n) for r in ranks]
        return tuple(sorted(ranks))

    def group_of(self, rank: int, kind: str) -> tuple[int, ...]:
        """The ranks of the ``kind`` group containing ``rank``."""
        return self.group_ranks(kind, self.group_index(rank, kind))

    def groups(self, kind: str) -> list[tuple[int, ...]]:
        """Every group of ``kind`` in Megatron's order (``RankGenerator.get_ranks(kind)``)."""
        return [self.group_ranks(kind, i) for i in range(self.group_count(kind))]

    def varying_dims(self, ranks: Iterable[int]) -> tuple[str, ...]:
        """The dimensions (size > 1, layout order) in which ``ranks`` do not all share one coordinate.

        The group of that kind containing any one of the ranks is the smallest group, of any kind,
        that contains them all (every group containing them must vary in at least these dimensions).
        """
        first: dict[str, int] | None = None
        varying: set[str] = set()
        for r in ranks:
            c = self.coords(r)
            if first is None:
                first = c
                continue
            for d in self.order:
                if c[d] != first[d]:
                    varying.add(d)
        return tuple(d for d in self.order if d in varying)


@dataclass(frozen=True)
class GroupChoice:
    """The smallest parallel group containing every outlier rank.

    Attributes:
        kind: ``"tp"``, ``"cp"``, ``"ep"``, ``"dp"``, ``"pp"``, a combination in layout order such as
            ``"tp-pp"``, ``"rank"`` (a single rank alone) or ``"job"``.
        index: Megatron's index of the group among the groups of its kind (the rank for ``rank``, 0
            for ``job``).
        ranks: the group's ranks as compact ranges (``"0,4,8,12"`` → ``"0,4,8,12"``, ``"0-7"``).
        n_ranks: how many ranks it holds.
        machines: its machines' host names (the over-eviction set), machine order.
    """

    kind: str
    index: int
    ranks: str
    n_ranks: int
    machines: tuple[str, ...]


# --- the smallest group holding some ranks ----------------------------------------------------------


def smallest_group(topology: Topology, ranks: Iterable[int]) -> GroupChoice | None:
    """The group with the fewest machines that contains every rank of ``ranks``.

    Candidates: the single-dimension groups (size > 1) containing them all, the group of exactly the
    dimensions in which they vary (when that is two or more and not the whole job), for a single rank
    the rank alone (kind ``"rank"``), and the job. The fewest machines win; ties go to the earlier
    candidate (TP, CP, EP, DP, PP in layout order, then the combined group, the rank, the job), so a
    single stuck rank gets its TP group when that stays on its machine, and itself otherwise.
    Without ranks per host every group counts as zero machines. Answers are remembered by the
    topology's :class:`GroupFinder`.

    Args:
        topology: the job's topology.
        ranks: the ranks to hold (any order, repeats allowed).

    Returns:
        ``None`` when ``ranks`` is empty.

    Raises:
        UsageError: a rank outside the layout.
    """
    return topology.finder.smallest(ranks)


class GroupFinder:
    """Remembered group searches over one :class:`Topology`: the smallest group holding a set of ranks
    (:func:`smallest_group`) and the members of a group.

    Stacks blame tries the same outlier sets several times (with and without promoted classes) and
    the waits-for analysis looks up the group of every waiting rank, mostly the same few groups; both
    ask the topology's finder (:attr:`Topology.finder`), so each answer is computed once. Members
    are kept for every group asked about (at most W ranks per group kind); smallest-group answers up
    to :data:`MAX_REMEMBERED_SEARCHES`.

    Args:
        topology: the topology searched.
    """

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self._smallest: dict[frozenset[int], GroupChoice | None] = {}
        self._members: dict[tuple[str, int], tuple[int, ...]] = {}

    def __len__(self) -> int:
        """How many smallest-group answers are remembered (at most :data:`MAX_REMEMBERED_SEARCHES`)."""
        return len(self._smallest)

    def smallest(self, ranks: Iterable[int]) -> GroupChoice | None:
        """The smallest group holding every rank of ``ranks`` (see :func:`smallest_group`).

        Args:
            ranks: the ranks to hold.

        Returns:
            The remembered or newly found choice; ``None`` when ``ranks`` is empty.

        Raises:
            UsageError: a rank outside the layout (not remembered).
        """
        key = frozenset(ranks)
        if key in self._smallest:
            return self._smallest[key]
        found = _search_smallest_group(self.topology, key)
        if len(self._smallest) >= MAX_REMEMBERED_SEARCHES:
            self._smallest.clear()
        self._smallest[key] = found
        return found

    def members(self, kind: str, index: int) -> tuple[int, ...]:
        """The ranks of group ``index`` of ``kind``, ascending (:meth:`Topology.group_ranks`, remembered).

        Args:
            kind: a group kind (``"pp"``, ``"tp-pp"``, ``"job"``).
            index: Megatron's index of the group among the groups of its kind.

        Returns:
            The group's ranks, ascending.

        Raises:
            UsageError: an unknown kind or an index out of range.
        """
        key = (kind, index)
        found = self._members.get(key)
        if found is None:
            found = self._members[key] = self.topology.group_ranks(kind, index)
        return found

    def group_of(self, rank: int, kind: str) -> tuple[int, ...]:
        """The ranks of the ``kind`` group containing ``rank`` (:meth:`Topology.group_of`, remembered).

        Args:
            rank: a rank of the layout.
            kind: a group kind (``"pp"``, ``"tp-pp"``, ``"job"``).

        Returns:
            The group's ranks, ascending.

        Raises:
            UsageError: a rank outside the layout or an unknown kind.
        """
        return self.members(kind, self.topology.group_index(rank, kind))


def _search_smallest_group(topology: Topology, ranks: Iterable[int]) -> GroupChoice | None:
    """:func:`smallest_group` without memory: the search itself."""
    rs = sorted(set(ranks))
    if not rs:
        return None
    for r in rs:
        topology.check_rank(r)
    varying = set(topology.varying_dims(rs))
    nontrivial = [d for d in topology.order if 1 < topology.sizes[d] < topology.world_size]
    kinds: list[str] = [d for d in nontrivial if varying <= {d}]
    if len(varying) >= 2 and set(nontrivial) - varying:
        kinds.append(topology.kind_name(varying))
    if not varying:
        kinds.append("rank")  # one rank: the rank alone (a size-1 group)
    kinds.append("job")
    best: tuple[tuple[int, int, int], GroupChoice] | None = None
    for pos, kind in enumerate(kinds):
        if kind == "job":
            members: Sequence[int] = range(topology.world_size)
            index = 0
        elif kind == "rank":
            members, index = (rs[0],), rs[0]
        else:
            index = topology.group_index(rs[0], kind)
            members = topology.finder.members(kind, index)
        machines = topology.machines_of(members)
        choice = GroupChoice(
            kind=kind,
            index=index,
            ranks=compact_ranges(members),
            n_ranks=len(members),
            machines=tuple(topology.machine_name(m) for m in machines),
        )
        key = (len(machines), pos, len(members))
        if best is None or key < best[0]:
            best = (key, choice)
    return best[1] if best else None
