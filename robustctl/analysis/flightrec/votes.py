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


def first_mismatches(views: Mapping[int, RankView], groups: Mapping[str, FrGroup]) -> list[FrMismatch]:
    """The first mismatch of each group, over the sequence numbers two or more members recorded."""
    found: list[FrMismatch] = []
    for g in groups.values():
        seqs: dict[int, dict[int, FrEntry]] = {}
        for r in g.ranks:
            v = views.get(r)
            if v is None:
                continue
            for seq, e in v.at.get(g.name, {}).items():
                seqs.setdefault(seq, {})[r] = e
        for seq in sorted(seqs):
            if len(seqs[seq]) < 2:
                continue
            m = vote(g, seq, seqs[seq])
            if m is not None:
                found.append(m)
                break
    return found
