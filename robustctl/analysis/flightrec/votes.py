"""Per (group, sequence number) majority votes over op, sizes and dtypes."""

from __future__ import annotations

from collections.abc import Mapping

from robustctl.analysis.flightrec.groups import RankView
from robustctl.analysis.flightrec.load import FrEntry
from robustctl.analysis.flightrec.model import FrGroup, FrMismatch

# --- votes ---------------------------------------------------------------------------------------


def entry_value(e: FrEntry, what: str) -> str:
    """What a vote compares of one entry.

    Args:
        e: the entry.
        what: ``"op"``, ``"sizes"`` (op and shapes) or ``"dtypes"``.

    Returns:
        The value as text (``"all_reduce [[4096]]"``).
    """
    if what == "op":
        return e.op
    if what == "sizes":
        ins, outs = list(map(list, e.input_sizes)), list(map(list, e.output_sizes))
        return f"{e.op} {ins}" if ins == outs or not outs else f"{e.op} in {ins} out {outs}"
    return ",".join(e.input_dtypes)


def vote(group: FrGroup, seq: int, at: Mapping[int, FrEntry]) -> FrMismatch | None:
    """The mismatch at one sequence number (op first, then sizes, then dtypes), ``None`` if none."""
    for what in ("op", "sizes", "dtypes"):
        values = {r: entry_value(at[r], what) for r in sorted(at)}
        counts: dict[str, int] = {}
        for v in values.values():
            counts[v] = counts.get(v, 0) + 1
        if len(counts) < 2:
            continue
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        decided = ranked[0][1] > ranked[1][1]
        majority = ranked[0][0] if decided else None
        odd = tuple(r for r, v in values.items() if v != majority)
        return FrMismatch(group.name, group.desc, seq, what, majority, odd, values, decided)
    return None


def numel(e: FrEntry) -> int:
    """Elements of an entry's inputs: the sum over its tensors of the product of each shape
    (``[[4, 32]]`` → 128, ``[[0]]`` → 0); a dimension not recorded (-1) counts as 0.

    Args:
        e: the entry.

    Returns:
        The element count.
    """
    total = 0
    for shape in e.input_sizes:
        n = 1
        for d in shape:
            n *= max(d, 0)
        total += n
    return total


def _counts(values: Mapping[int, str]) -> list[tuple[str, int]]:
    """Distinct values with their counts, most common first (ties by value: order-independent)."""
    counts: dict[str, int] = {}
    for v in values.values():
        counts[v] = counts.get(v, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def wide_vote(
    group: FrGroup, seq: int, own: Mapping[int, FrEntry], electorate: Mapping[int, FrEntry], label: str
) -> FrMismatch | None:
    """The vote of every member of the comparable groups at one sequence number, for a group whose own
    vote tied or was unanimous: op first, then sizes, then dtypes, the first field where a rank of
    ``group`` differs from a strict majority of the electorate.

    Args:
        group: the group.
        seq: the collective sequence number.
        own: its member ranks' entries at ``seq``.
        electorate: the entries at ``seq`` of every member of the comparable groups (``own`` included).
        label: the comparable groups in words (:func:`~robustctl.analysis.flightrec.groups.class_label`).

    Returns:
        A decided mismatch naming ``group``'s ranks off the electorate's majority; ``None`` when they
        agree with it, or the electorate has no strict majority where they differ.
    """
    for what in ("op", "sizes", "dtypes"):
        everyone = {r: entry_value(electorate[r], what) for r in sorted(electorate)}
        ranked = _counts(everyone)
        if len(ranked) < 2:
            continue
        majority, agreeing = ranked[0]
        if 2 * agreeing <= len(everyone):
            return None
        values = {r: everyone[r] for r in sorted(own)}
        odd = tuple(r for r, v in values.items() if v != majority)
        if not odd:
            continue
        sizes = what == "sizes"
        major = next(r for r, v in everyone.items() if v == majority)
        return FrMismatch(
            group.name,
            group.desc,
            seq,
            what,
            majority,
            odd,
            values,
            True,
            electorate=label,
            voters=len(everyone),
            agreeing=agreeing,
            numel={r: numel(own[r]) for r in values} if sizes else {},
            majority_numel=numel(electorate[major]) if sizes else None,
        )
    return None


def _entries_at(views: Mapping[int, RankView], g: FrGroup) -> dict[int, dict[int, FrEntry]]:
    """Sequence number → rank → entry, over ``g``'s members with a dump."""
    seqs: dict[int, dict[int, FrEntry]] = {}
    for r in g.ranks:
        v = views.get(r)
        if v is None:
            continue
        for seq, e in v.at.get(g.name, {}).items():
            seqs.setdefault(seq, {})[r] = e
    return seqs


def first_mismatches(
    views: Mapping[int, RankView],
    groups: Mapping[str, FrGroup],
    classes: Mapping[str, tuple[str, ...]] | None = None,
    labels: Mapping[str, str] | None = None,
    stuck: bool = True,
) -> list[FrMismatch]:
    """The first mismatch of each group, over the sequence numbers two or more members recorded.

    A group's own majority decides first; where it ties (a 2-rank group) or, in a stuck job, is
    unanimous, the members of its comparable groups (``classes``) vote at the same sequence number
    (:func:`wide_vote`). A unanimous group off the others' majority in a job where nothing is blocked
    is a schedule of its own (a collective only one TP rank's DP group runs, e.g. for logging), not a
    fault: it is not put to the wider vote then.

    Args:
        views: each rank's entries by group.
        groups: the groups by name, in creation order.
        classes: group name → its comparable groups' names
            (:func:`~robustctl.analysis.flightrec.groups.comparable_groups`); ``None``: none.
        labels: group name → its class in words, for each group of ``classes``.
        stuck: some rank has an operation pending (the job hung): unanimous groups are put to the
            wider vote too.

    Returns:
        At most one mismatch per group, in ``groups`` order.
    """
    classes = classes or {}
    labels = labels or {}
    at = {name: _entries_at(views, g) for name, g in groups.items()}
    found: list[FrMismatch] = []
    for g in groups.values():
        seqs = at[g.name]
        peers = classes.get(g.name, ())
        for seq in sorted(seqs):
            if len(seqs[seq]) < 2:
                continue
            m = vote(g, seq, seqs[seq])
            if (m is None and stuck) or (m is not None and not m.decided):
                electorate = {r: e for name in peers for r, e in at[name].get(seq, {}).items()}
                wide = wide_vote(g, seq, seqs[seq], electorate, labels.get(g.name, "")) if peers else None
                m = wide or m
            if m is not None:
                found.append(m)
                break
    return found
