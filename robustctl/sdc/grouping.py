"""Dual-phase replay groups: which machines replay together in each of the two rounds.

Source: ByteRobust (arXiv 2509.16293), §4.2 "dual-phase replay", Algorithm 1 and Fig. 6. Machines
are numbered ``x = 0 … M-1`` in the job's rank order (machine ``x`` holds ranks ``x·G … x·G+G-1``,
:mod:`robustctl.inventory.topology`). With ``m = k·PP`` and ``n = DP/k`` (``k ≥ 1`` divides DP):

- **phase 1** replays the *horizontal* groups ``H_h = {x : ⌊x/m⌋ = h}`` (``m`` consecutive machines);
- **phase 2** replays the *vertical* groups ``V_v = {x : x mod n = v}`` (every ``n``-th machine).

Both phases have ``n`` groups of ``m`` machines (``M = m·n``). Each group replays the job's TP and PP
(and CP, EP) with ``DP = k``: ``k`` whole pipelines. The replay is a fresh reduced job on the group's
machines (its ranks assigned to them in ascending machine order), not the job's own placement, so
a vertical group holds whole pipelines just as a horizontal one does.

**Why the intersection is one machine.** ``H_h`` is the interval ``[h·m, h·m+m)``; ``V_v`` the
residue class ``v mod n``. An interval of ``m ≤ n`` consecutive integers holds at most one member of
a residue class mod ``n``, so ``|H_h ∩ V_v| ≤ 1``, and machine ``x`` is exactly
``H_{⌊x/m⌋} ∩ V_{x mod n}``. One faulty machine makes one group of each phase fail; their
intersection names it. ``m ≤ n`` (i.e. ``m² ≤ M``) is required: with ``m > n`` two machines of one
horizontal group share a vertical group and the answer is not unique. Fig. 6: M = 24, m = 4, n = 6;
machine 13 is ``H_3 = {12…15} ∩ V_1 = {1, 7, 13, 19}``.

**General layouts (the paper assumes TP = GPUs per machine, so a pipeline is PP machines).** Let
``G`` be the ranks per machine and ``R = W/DP = TP·CP·EP·PP`` the ranks of one model replica (one
pipeline with its TP/CP/EP ranks). The smallest set of whole machines that holds whole replicas,
the *unit*, has

    u = lcm(R, G) / G machines and holds  d = lcm(R, G) / R replicas.

A group is ``k`` units: ``m = k·u`` machines replaying ``DP = k·d``; there are ``N = M/u = DP/d``
units (always an integer: ``R`` and ``G`` both divide ``W``), so ``k`` must divide ``N`` and
``n = N/k``. The paper's case is ``R = TP·PP``, ``G = TP``: ``u = PP``, ``d = 1``, ``m = k·PP``,
``n = DP/k``. Two other cases:

- **TP spans machines** (TP = 16 on 8-GPU machines, PP = 4): ``R = 64``, ``u = 8`` machines per
  pipeline, ``d = 1``: ``m = 8k``, ``n = DP/k``.
- **One machine holds several stages** (TP = 2, PP = 4 on 8-GPU machines): ``R = 8 = G``, ``u = 1``,
  ``d = 1``: every machine is a whole pipeline, ``m = k``. With ``R < G`` (TP = 2, PP = 2) a machine
  holds ``d = G/R = 2`` replicas: ``u = 1``, groups of ``k`` machines replay ``DP = 2k``. With ``R``
  and ``G`` coprime-ish (TP = 4, PP = 3 on 8-GPU machines: ``R = 12``): ``u = 3`` machines hold
  ``d = 2`` replicas.

**Default k** (:func:`choose_k`; ``--k`` overrides): the smallest ``k ≥ 2`` that divides ``N`` with
``m ≤ n``, so that every replay keeps a data-parallel gradient all-reduce as the job has, with the
fewest machines per group; ``k = 1`` when no ``k ≥ 2`` fits. In Fig. 6 (PP = 2, DP = 12) that is
``k = 2``: ``m = 4``, ``n = 6``. A layout with no valid ``k`` is refused (:class:`UsageError`)
naming each ``k`` tried and why it fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from robustctl.config import ParallelLayout
from robustctl.errors import UsageError

__all__ = [
    "MAX_MACHINES",
    "Phase",
    "ReplayGroup",
    "SdcGrouping",
    "Unit",
    "choose_k",
    "group_members",
    "horizontal",
    "k_problems",
    "plan_grouping",
    "replica_unit",
    "vertical",
]

MAX_MACHINES = 1_000_000
"""Largest machine count a grouping is computed for (the layout's own bound on ranks, one rank per machine)."""


@dataclass(frozen=True)
class Unit:
    """The smallest set of whole machines holding whole model replicas.

    Attributes:
        machines: ``u = lcm(R, G) / G``. replicas: ``d = lcm(R, G) / R``. replica_ranks: ``R``.
    """

    machines: int
    replicas: int
    replica_ranks: int


@dataclass(frozen=True)
class ReplayGroup:
    """One group of one phase.

    Attributes:
        phase: 1 (horizontal) or 2 (vertical). index: ``h`` or ``v``. name: ``"H3"``, ``"V1"``.
        machines: machine indices, ascending (``m`` of them).
    """

    phase: int
    index: int
    name: str
    machines: tuple[int, ...]


@dataclass(frozen=True)
class Phase:
    """The ``n`` groups of one phase, in index order."""

    number: int
    groups: tuple[ReplayGroup, ...]


@dataclass(frozen=True)
class SdcGrouping:
    """The dual-phase plan of a layout.

    Attributes:
        machines: M. ranks_per_machine: G. layout: the job's layout.
        unit: see :class:`Unit`. k: pipelines' units per group. m: machines per group.
        n: groups per phase. replay_dp: the replay's DP (``k · unit.replicas``).
        k_chosen_by: ``"default"`` or ``"--k"``. phases: phase 1 (horizontal) and phase 2 (vertical).
    """

    machines: int
    ranks_per_machine: int
    layout: ParallelLayout
    unit: Unit
    k: int
    m: int
    n: int
    replay_dp: int
    k_chosen_by: str
    phases: tuple[Phase, Phase]

    def group_of(self, phase: int, machine: int) -> ReplayGroup:
        """The group of ``phase`` (1 or 2) holding ``machine``."""
        p = self.phases[phase - 1]
        return p.groups[horizontal(machine, self.m) if phase == 1 else vertical(machine, self.n)]


def horizontal(x: int, m: int) -> int:
    """Phase-1 group of machine ``x``: ``⌊x/m⌋``."""
    return x // m


def vertical(x: int, n: int) -> int:
    """Phase-2 group of machine ``x``: ``x mod n``."""
    return x % n


def group_members(phase: int, index: int, m: int, n: int) -> tuple[int, ...]:
    """Machines of group ``index`` of ``phase``: ``H_h = [h·m, h·m+m)``, ``V_v = {v, v+n, …}`` (m each)."""
    if phase == 1:
        return tuple(range(index * m, index * m + m))
    return tuple(index + j * n for j in range(m))


def replica_unit(layout: ParallelLayout, ranks_per_machine: int) -> Unit:
    """The unit of ``layout`` on machines of ``ranks_per_machine`` ranks (see the module docstring).

    Args:
        layout: the job's parallel layout (``R = W/DP`` ranks per replica).
        ranks_per_machine: G.

    Returns:
        The unit: ``u`` machines holding ``d`` replicas of ``R`` ranks.

    Raises:
        UsageError: ``ranks_per_machine`` < 1.
    """
    if ranks_per_machine < 1:
        raise UsageError(f"ranks per machine must be at least 1, got {ranks_per_machine}")
    r = layout.world_size // layout.dp
    lcm = math.lcm(r, ranks_per_machine)
    return Unit(machines=lcm // ranks_per_machine, replicas=lcm // r, replica_ranks=r)


def k_problems(machines: int, unit: Unit, k: int) -> str | None:
    """Why ``k`` is not valid for ``machines`` machines made of ``unit``s, or None when it is."""
    n_units = machines // unit.machines
    if k < 1:
        return f"k={k}: k must be at least 1"
    if n_units % k:
        return f"k={k}: does not divide the {n_units} pipeline units"
    m = k * unit.machines
    n = machines // m
    if m > n:
        return f"k={k}: m={m} machines per group > n={n} groups"
    return None


def choose_k(machines: int, unit: Unit) -> tuple[int | None, list[str]]:
    """The default ``k`` (module docstring) and, when there is none, why each divisor fails.

    Args:
        machines: M, the job's machines.
        unit: the layout's unit (:func:`replica_unit`).

    Returns:
        ``(k, [])`` or ``(None, ["k=1: m=4 machines per group > n=2 groups", …])``.
    """
    divisors = _divisors(machines // unit.machines)
    for k in [d for d in divisors if d >= 2] + [1]:
        if k_problems(machines, unit, k) is None:
            return k, []
    return None, [why for d in divisors if (why := k_problems(machines, unit, d)) is not None]


def _divisors(n: int) -> list[int]:
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i != n // i:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def plan_grouping(
    machines: int, layout: ParallelLayout, ranks_per_machine: int, k: int | None = None
) -> SdcGrouping:
    """The two phases' groups for ``machines`` machines running ``layout``.

    Args:
        machines: M, the job's machines in rank order.
        layout: its parallel layout.
        ranks_per_machine: G.
        k: ``--k`` (None: :func:`choose_k`).

    Returns:
        The plan: ``k``, ``m``, ``n`` and the ``n`` groups of each phase.

    Raises:
        UsageError: M out of range, ``M·G`` differs from the layout's world size, ``k`` invalid, or no
            valid ``k`` (one line naming each ``k`` tried and why it fails).
    """
    if not 1 <= machines <= MAX_MACHINES:
        raise UsageError(f"{machines} machines: dual-phase replay needs 1 to {MAX_MACHINES}")
    unit = replica_unit(layout, ranks_per_machine)
    lay = f"tp={layout.tp} pp={layout.pp} dp={layout.dp}" + "".join(
        f" {d}={getattr(layout, d)}" for d in ("cp", "ep") if getattr(layout, d) > 1
    )
    if machines * ranks_per_machine != layout.world_size:
        raise UsageError(
            f"layout {lay} is {layout.world_size} ranks, but {machines} machines x {ranks_per_machine} "
            f"ranks per machine = {machines * ranks_per_machine}"
        )
    where = (
        f"{machines} machines, {lay}, {ranks_per_machine} ranks per machine "
        f"({unit.machines} machine(s) per unit of {unit.replicas} pipeline(s))"
    )
    if k is not None:
        why = k_problems(machines, unit, k)
        if why is not None:
            raise UsageError(f"--k {k} is not valid for {where}: {why} (dual-phase replay needs m <= n)")
        chosen_by = "--k"
    else:
        found, tried = choose_k(machines, unit)
        if found is None:
            raise UsageError(
                f"no valid k for {where}: tried {'; '.join(tried)} (dual-phase replay needs m <= n, "
                f"i.e. at least m*m machines)"
            )
        k, chosen_by = found, "default"
    m = k * unit.machines
    n = machines // m
    phases = (
        Phase(1, tuple(ReplayGroup(1, h, f"H{h}", group_members(1, h, m, n)) for h in range(n))),
        Phase(2, tuple(ReplayGroup(2, v, f"V{v}", group_members(2, v, m, n)) for v in range(n))),
    )
    return SdcGrouping(
        machines=machines,
        ranks_per_machine=ranks_per_machine,
        layout=layout,
        unit=unit,
        k=k,
        m=m,
        n=n,
        replay_dp=k * unit.replicas,
        k_chosen_by=chosen_by,
        phases=phases,
    )
