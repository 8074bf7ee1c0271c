"""The result types of the Flight Recorder analysis (groups, mismatches, chains, suspects)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from robustctl.models import Status

MAX_CHAIN_HOPS = 12
"""Hops shown per chain (as :data:`robustctl.stacks.waitsfor.MAX_CHAIN_HOPS`); a longer chain keeps
its last hops, the end being the evidence."""

MAX_CHAINS = 20
"""Chains kept in a result, one per root, most waited-on first (as ``stacks``)."""

MAX_LISTED = 64
"""Ranks, values or notes listed in one piece of evidence; more are counted, not listed."""


@dataclass(frozen=True)
class FrGroup:
    """One process group seen in the dumps.

    Attributes:
        name: its name (``pg_config`` key, ``process_group[0]``). desc: its description.
        ranks: its global ranks, ascending. membership: where they came from: ``"pg_config"``,
            ``"layout"`` (rebuilt, with ``kind``), ``"world"`` (the default group: every rank) or
            ``"observed"`` (the ranks that recorded it: a member that never did is not known).
        kind: the layout group kind (``"tp"``, ``"pp"``, ``"job"``) when rebuilt from the layout.
    """

    name: str
    desc: str
    ranks: tuple[int, ...]
    membership: str
    kind: str | None = None

    @property
    def label(self) -> str:
        """``"TENSOR_MODEL_PARALLEL_GROUP 2"``: description and name, or the name alone."""
        return f"{self.desc} {self.name}" if self.desc and self.desc != "undefined" else f"group {self.name}"


@dataclass(frozen=True)
class FrMismatch:
    """Member ranks that called a different collective at one sequence number of one group.

    Attributes:
        group: the group's name. desc: its description. seq: the collective sequence number.
        field: what differs: ``"op"``, ``"sizes"`` or ``"dtypes"``.
        majority: the majority's value (``None`` on a tie). odd_ranks: the ranks off the majority
            (on a tie: every rank that recorded the sequence number). values: rank → its value.
        decided: a strict majority exists.
        electorate: when the group's own vote tied or was unanimous and the comparable groups'
            members decided (``votes.first_mismatches``): those groups in words
            (``"the 2 dp groups of pipeline stage 1 (7, 8)"``); ``None``: the group's own vote.
        voters: the electorate's members that recorded the sequence number (0: the group's own vote).
        agreeing: how many of them hold the majority's value (0: the group's own vote).
        numel: rank → elements of its inputs (the group's own ranks), for a size mismatch.
        majority_numel: the majority's elements, for a size mismatch.
    """

    group: str
    desc: str
    seq: int
    field: str
    majority: str | None
    odd_ranks: tuple[int, ...]
    values: Mapping[int, str]
    decided: bool
    electorate: str | None = None
    voters: int = 0
    agreeing: int = 0
    numel: Mapping[int, int] = dataclasses.field(default_factory=dict)
    majority_numel: int | None = None


@dataclass(frozen=True)
class FrHop:
    """One rank of a chain of waits.

    Attributes:
        rank: the rank. state: ``"waiting"``, ``"not waiting"`` or ``"no dump"``.
        what: ``"all_reduce #2 in TENSOR_MODEL_PARALLEL_GROUP 2"``, or for the end what it did last.
        frame: the caller's frame of that operation (``"train.py:42 train_step"``), when recorded.
    """

    rank: int
    state: str
    what: str
    frame: str | None = None


@dataclass(frozen=True)
class FrChain:
    """A chain of waits ending at a root (or going round a cycle).

    Attributes:
        hops: first the rank farthest from the end, last the root (for a cycle, the first rank
            again). truncated: hops left out at the start (longer than :data:`MAX_CHAIN_HOPS`).
        text: ``"rank 2 [...] → rank 3 [...] → rank 1 (not waiting: ...)"``.
    """

    hops: tuple[FrHop, ...]
    truncated: int
    text: str


@dataclass(frozen=True)
class FrSuspect:
    """A rank at fault, named the way ``stacks --json`` names its suspects.

    Attributes:
        rank: the global rank. host: its machine (``machine-k`` from ranks per host), when known.
        machine: its machine index, when known. process_group: the group the evidence is in.
        group_desc: that group's description. kind: ``"root"`` (others wait on it and it waits on
            nobody), ``"missing"`` (others wait on it and it left no dump), ``"mismatch"`` (the odd
            rank of a vote), ``"skip"`` (the member of a cycle that moved on past a collective its peers
            wait in) or ``"cycle"`` (waits only on ranks that wait on it).
        reason: one line. waiters: ranks waiting on it, directly or through others.
        direct: ranks waiting on it directly. evidence: the values behind the reason.
        likely_culprit: not waiting on a peer itself (a root or the odd rank) or the rank that skipped, as
            ``stacks``; not a root idle in Flight Recorder or a victim where a desync explains the hang.
    """

    rank: int
    host: str | None
    machine: int | None
    process_group: str | None
    group_desc: str | None
    kind: str
    reason: str
    waiters: int = 0
    direct: int = 0
    evidence: Mapping[str, Any] = field(default_factory=dict)
    likely_culprit: bool = True


@dataclass(frozen=True)
class FrAnalysis:
    """The analysis of one job's dumps (:func:`analyze_dumps`).

    Attributes:
        status: CRITICAL with suspects; WARNING when ranks are blocked but nobody is to blame (every
            member entered the collective, a tie) or dumps are missing; OK when nothing is blocked;
            UNKNOWN without a usable dump.
        summary: one line.
        suspects: likely culprits first, then the others; within each, roots (most waited-on
            first), then odd ranks, then a cycle's skipper and its members.
        chains: one per root (at most :data:`MAX_CHAINS`), or one round a cycle.
        mismatches: the first mismatch of each group. groups: every group seen.
        ranks: the ranks with a dump. missing_dumps: member ranks with none.
        blocked: rank → its oldest incomplete operation (``"all_reduce #2 in ..."``).
        undecided: why nobody is named while ranks are blocked; ``None`` otherwise.
        notes: other observations (duplicate dumps, dumps without a rank, layout ambiguities).
    """

    status: Status
    summary: str
    suspects: tuple[FrSuspect, ...] = ()
    chains: tuple[FrChain, ...] = ()
    mismatches: tuple[FrMismatch, ...] = ()
    groups: tuple[FrGroup, ...] = ()
    ranks: tuple[int, ...] = ()
    missing_dumps: tuple[int, ...] = ()
    blocked: Mapping[int, str] = field(default_factory=dict)
    undecided: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def suspect_ranks(self) -> tuple[int, ...]:
        """The suspects' distinct ranks, ascending."""
        return tuple(sorted({s.rank for s in self.suspects}))
