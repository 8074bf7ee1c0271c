"""Property-based tests of the Flight Recorder analysis (robustctl.analysis.flightrec): any bytes given
as a dump either load or raise ``FrLoadError`` (never anything else, never running code: a pickle's
globals are refused); any plain value under a dump's keys loads and analyses without raising; and a
generated job where one rank skipped a collective or called it with another size always names that
rank, whatever order the dumps are read in. Seeded and bounded by the ``ci`` profile
(tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.analysis import flightrec
from robustctl.analysis.flightrec import FrDump, FrLoadError, analyze_dumps, load_dump
from robustctl.inventory.topology import Topology, parse_layout

pytestmark = pytest.mark.fuzz

PICKLE_HEADS = st.sampled_from([b"", b"\x80\x02", b"\x80\x04", b"\x80\x05", b"{", b'{"entries": ['])


def _no_system(command: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> int:
    raise AssertionError(f"os.system called: {command!r}")


@given(head=PICKLE_HEADS, body=st.binary(max_size=300))
def test_any_bytes_load_or_raise_the_documented_error(head: bytes, body: bytes) -> None:
    saved = os.system
    os.system = _no_system
    try:
        try:
            dump = load_dump("fuzz/rank1", head + body)
        except FrLoadError as exc:
            assert str(exc).startswith("fuzz/rank1: ") and "\n" not in str(exc)
        else:
            assert isinstance(dump, FrDump) and dump.rank is not None
        flightrec.claim("x", head + body)
    finally:
        os.system = saved


PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=20), inner, max_size=5),
    max_leaves=25,
)
KEYS = st.sampled_from(
    [
        "record_id",
        "process_group",
        "collective_seq_id",
        "p2p_seq_id",
        "profiling_name",
        "input_sizes",
        "output_sizes",
        "state",
        "retired",
        "is_p2p",
        "pg_id",
        "frames",
    ]
)
ENTRY = st.dictionaries(
    KEYS, PLAIN | st.sampled_from([["0", "default_pg"], 1, 2, "completed", [[4]]]), max_size=12
)


@given(
    entries=st.lists(ENTRY | PLAIN, max_size=6),
    pg_config=PLAIN,
    fmt=st.sampled_from(["json", "pickle"]),
)
def test_plain_values_under_the_keys_load_and_analyse(entries: list[Any], pg_config: Any, fmt: str) -> None:
    doc = {"version": "2.10", "pg_config": pg_config, "entries": entries}
    data = json.dumps(doc).encode() if fmt == "json" else pickle.dumps(doc, protocol=2)
    dumps = [load_dump(f"rank{r}.{fmt}", data) for r in range(3)]
    a = analyze_dumps(dumps)
    assert a.ranks == (0, 1, 2)
    flightrec.to_verdict(a)


def _entry(rid: int, seq: int, size: int, done: bool) -> dict[str, Any]:
    return {
        "record_id": rid,
        "pg_id": 0,
        "process_group": ["0", "default_pg"],
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "profiling_name": "nccl:all_reduce",
        "input_sizes": [[size]],
        "output_sizes": [[size]],
        "input_dtypes": ["Float"],
        "state": "completed" if done else "started",
    }


@given(
    world=st.integers(min_value=3, max_value=8),
    steps=st.integers(min_value=1, max_value=5),
    data=st.data(),
    skip=st.booleans(),
    fmt=st.sampled_from(["json", "pickle"]),
)
def test_one_odd_rank_is_always_named_in_any_order(
    world: int, steps: int, data: st.DataObject, skip: bool, fmt: str
) -> None:
    odd = data.draw(st.integers(min_value=0, max_value=world - 1), label="odd")
    docs = []
    for r in range(world):
        entries = [_entry(s - 1, s, 64, True) for s in range(1, steps)]
        if skip and r == odd:
            pass  # never reaches the last collective
        else:
            size = 65 if (not skip and r == odd) else 64
            entries.append(_entry(steps - 1, steps, size, done=r == odd))
        doc = {"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": entries}
        docs.append(json.dumps(doc).encode() if fmt == "json" else pickle.dumps(doc, protocol=2))
    dumps = [load_dump(f"nccl_trace_rank_{r}", d) for r, d in enumerate(docs)]
    order = data.draw(st.permutations(dumps), label="order")
    a = analyze_dumps(order)
    assert a.suspect_ranks == (odd,), a.summary
    assert a.suspects[0].kind == ("root" if skip else "mismatch")
    if skip:
        assert a.suspects[0].waiters == world - 1


def _dp_entry(rid: int, group: str, seq: int, op: str, size: int, dtype: str, done: bool) -> dict[str, Any]:
    return {
        "record_id": rid,
        "pg_id": int(group),
        "process_group": [group, "undefined"],
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "profiling_name": f"gloo:{op}",
        "input_sizes": [[size]],
        "output_sizes": [[size]],
        "input_dtypes": [dtype],
        "state": "scheduled",
        "retired": done,
    }


@given(
    n_groups=st.integers(min_value=3, max_value=6),
    pp=st.sampled_from([1, 2]),
    steps=st.integers(min_value=1, max_value=4),
    odd_field=st.sampled_from(["sizes", "op", "dtypes"]),
    data=st.data(),
)
def test_one_odd_rank_of_a_two_rank_group_among_comparable_groups_is_named_in_any_order(
    n_groups: int, pp: int, steps: int, odd_field: str, data: st.DataObject
) -> None:
    """gloo-style dumps (no pg_config, no descriptions) of a job ``tp=n_groups, dp=2, pp``: each DP
    group of 2 ranks runs ``steps`` all-reduces (stage s's of ``4096 >> s`` elements: the stages
    legitimately differ). One rank's last one differs in size (0, an empty bucket, or another count),
    op or dtype: it returned, its DP peer waits. The 2-rank group's own vote ties; the comparable DP
    groups of its stage name it, whatever order the dumps are read in."""
    layout = parse_layout(f"tp={n_groups},dp=2,pp={pp}")
    topo = Topology(layout)
    dp_groups = topo.groups("dp")
    name_of = {r: str(1 + i) for i, g in enumerate(dp_groups) for r in g}
    odd = data.draw(st.integers(min_value=0, max_value=topo.world_size - 1), label="odd")
    odd_size = data.draw(st.sampled_from([0, 1, 8191]), label="odd_size")
    peer = next(r for r in topo.group_of(odd, "dp") if r != odd)
    docs = []
    for r in range(topo.world_size):
        size = 4096 >> topo.coords(r)["pp"]
        entries = []
        for s in range(1, steps + 1):
            op, dtype, n = "all_reduce", "Float", size
            if r == odd and s == steps:
                n = odd_size if odd_field == "sizes" else n
                op = "all_gather" if odd_field == "op" else op
                dtype = "Half" if odd_field == "dtypes" else dtype
            entries.append(_dp_entry(s - 1, name_of[r], s, op, n, dtype, done=not (r == peer and s == steps)))
        docs.append(json.dumps({"version": "2.10", "pg_config": {}, "entries": entries}).encode())
    dumps = [load_dump(f"nccl_trace_rank_{r}.json", d) for r, d in enumerate(docs)]
    order = data.draw(st.permutations(dumps), label="order")
    a = analyze_dumps(order, layout)
    assert a.suspect_ranks == (odd,), a.summary
    top = a.suspects[0]
    assert top.kind == "mismatch" and top.likely_culprit and top.evidence["field"] == odd_field
    assert top.evidence["voters"] == 2 * n_groups and top.evidence["agreeing"] == 2 * n_groups - 1
