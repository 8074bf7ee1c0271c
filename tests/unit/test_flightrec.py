"""Flight Recorder dumps in ``analyze``: real gloo dumps (tests/data/flight-recorder, made by
tests/fr_gen.py) name the right rank; crafted dumps in torch's schema cover p2p, cycles, ties,
pg_config, missing dumps and bad files; a pickle never runs code."""

from __future__ import annotations

import itertools
import json
import os
import pickle
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from robustctl.analysis import detect, flightrec
from robustctl.analysis.flightrec import FrDump, FrLoadError, analyze_dumps, load_dump
from robustctl.inventory.topology import Topology, parse_layout
from robustctl.models import Status

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "flight-recorder"
LAYOUT = parse_layout("tp=2,pp=2")
CASES = {"skipped-allreduce": ("root", 3), "size-mismatch": ("mismatch", 2), "cascade": ("root", 1)}


def _dumps(case: str, *, suffix: str | None = None, drop: tuple[int, ...] = ()) -> list[FrDump]:
    out = []
    for p in sorted((DATA / case).iterdir()):
        if suffix is not None and p.suffix != suffix:
            continue
        d = load_dump(str(p), p.read_bytes())
        if d.rank not in drop:
            out.append(d)
    return out


# --- crafted dumps in torch's schema -------------------------------------------------------------


def _e(rid: int, pg: str, desc: str, seq: int, op: str = "all_reduce", **kw: Any) -> dict[str, Any]:
    p2p = op in ("send", "recv")
    return {
        "record_id": rid,
        "pg_id": int(pg) if pg.isdigit() else 0,
        "process_group": [pg, desc],
        "collective_seq_id": 0 if p2p else seq,
        "p2p_seq_id": seq if p2p else 0,
        "op_id": rid + 1,
        "profiling_name": kw.pop("name", f"nccl:{op}"),
        "input_sizes": kw.pop("sizes", [[4]]),
        "output_sizes": kw.pop("out", kw.get("sizes_out", [[4]])),
        "input_dtypes": ["Float"],
        "output_dtypes": ["Float"],
        "state": kw.pop("state", "completed"),
        "time_created_ns": 1_700_000_000_000_000_000 + rid,
        "is_p2p": p2p,
        "frames": [{"name": "train_step", "filename": "train.py", "line": 42}],
        **kw,
    }


def _dump(rank: int, entries: list[Any], pg_config: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "version": "2.10",
        "pg_config": pg_config if pg_config is not None else {"": {"name": "", "desc": "", "ranks": "[]"}},
        "pg_status": {},
        "entries": entries,
        "rank": rank,
    }


def _load(rank: int, doc: dict[str, Any], fmt: str = "json") -> FrDump:
    data = json.dumps(doc).encode() if fmt == "json" else pickle.dumps(doc, protocol=2)
    return load_dump(f"crafted/rank{rank}.{fmt}", data)


NCCL_PG = {
    "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
    "1": {"name": "1", "desc": "TENSOR_MODEL_PARALLEL_GROUP", "ranks": "[0, 1]"},
    "2": {"name": "2", "desc": "TENSOR_MODEL_PARALLEL_GROUP", "ranks": "[2, 3]"},
    "3": {"name": "3", "desc": "PIPELINE_MODEL_PARALLEL_GROUP", "ranks": "[0, 2]"},
    "4": {"name": "4", "desc": "PIPELINE_MODEL_PARALLEL_GROUP", "ranks": "[1, 3]"},
}


def _p2p_cascade() -> list[FrDump]:
    """NCCL-style cascade with a real recv: rank 1 never sends #2 to rank 3 in PP group 4."""
    tp = "TENSOR_MODEL_PARALLEL_GROUP"
    pp = "PIPELINE_MODEL_PARALLEL_GROUP"
    docs = {
        0: [
            _e(0, "3", pp, 1, "send", name="nccl:send 0->1"),
            _e(1, "1", tp, 1),
            _e(2, "3", pp, 2, "send", name="nccl:send 0->1"),
            _e(3, "1", tp, 2, state="started"),
        ],
        1: [_e(0, "4", pp, 1, "send", name="nccl:send 0->1"), _e(1, "1", tp, 1)],
        2: [
            _e(0, "3", pp, 1, "recv", name="nccl:recv 1<-0"),
            _e(1, "2", tp, 1),
            _e(2, "3", pp, 2, "recv", name="nccl:recv 1<-0"),
            _e(3, "2", tp, 2, state="scheduled"),
        ],
        3: [
            _e(0, "4", pp, 1, "recv", name="nccl:recv 1<-0"),
            _e(1, "2", tp, 1),
            _e(2, "4", pp, 2, "recv", name="nccl:recv 1<-0", state="started"),
        ],
    }
    return [_load(r, _dump(r, es, NCCL_PG), "pickle") for r, es in docs.items()]


# --- the real fixtures -------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("layout", [None, LAYOUT])
def test_each_fixture_names_the_faulty_rank(case: str, layout: Any) -> None:
    kind, rank = CASES[case]
    a = analyze_dumps(_dumps(case), layout, 2 if layout else None)
    assert a.status is Status.CRITICAL, a.summary
    assert a.suspect_ranks == (rank,), a.suspects
    assert a.suspects[0].kind == kind
    assert a.ranks == (0, 1, 2, 3) and not a.missing_dumps
    if layout is not None:
        assert a.suspects[0].host == f"machine-{rank // 2}" and a.suspects[0].machine == rank // 2


def test_the_cascade_root_comes_with_its_chain_across_groups() -> None:
    a = analyze_dumps(_dumps("cascade"), LAYOUT, 2)
    (root,) = a.suspects
    assert (root.rank, root.waiters, root.direct) == (1, 3, 2)
    chain = a.chains[0]
    assert [h.rank for h in chain.hops] == [2, 3, 1]
    assert [h.state for h in chain.hops] == ["waiting", "waiting", "not waiting"]
    assert "all_reduce #2 in TENSOR_MODEL_PARALLEL_GROUP 2" in chain.hops[0].what
    assert "broadcast #2 in PIPELINE_MODEL_PARALLEL_GROUP 4" in chain.hops[1].what
    assert a.blocked == {
        0: "all_reduce #2 in TENSOR_MODEL_PARALLEL_GROUP 1",
        2: "all_reduce #2 in TENSOR_MODEL_PARALLEL_GROUP 2",
        3: "broadcast #2 in PIPELINE_MODEL_PARALLEL_GROUP 4",
    }
    assert "chain rank 2 → rank 3 → rank 1" in a.summary


@pytest.mark.parametrize("suffix", ["", ".json"])
def test_pickle_and_json_dumps_give_the_same_answer(suffix: str) -> None:
    for case, (_, rank) in CASES.items():
        dumps = _dumps(case, suffix=suffix)
        assert len(dumps) == 4 and {d.format for d in dumps} == {"json" if suffix else "pickle"}
        assert {d.rank_source for d in dumps} == {"file name"}
        assert analyze_dumps(dumps, LAYOUT).suspect_ranks == (rank,)


@pytest.mark.parametrize("case", ["size-mismatch", "skipped-allreduce"])
def test_the_answer_does_not_depend_on_read_order(case: str) -> None:
    dumps = _dumps(case, suffix="")
    first = analyze_dumps(dumps)
    for perm in itertools.permutations(dumps):
        a = analyze_dumps(list(perm))
        assert a.suspects == first.suspects and a.summary == first.summary


def test_a_tied_mismatch_names_nobody_in_any_order() -> None:
    docs = [_dump(r, [_e(0, "0", "default_pg", 1, sizes=[[4 + r]], state="scheduled")]) for r in range(2)]
    dumps = [_load(r, d) for r, d in enumerate(docs)]
    for perm in (dumps, dumps[::-1]):
        a = analyze_dumps(perm)
        assert a.status is Status.WARNING and not a.suspects
        (m,) = a.mismatches
        assert not m.decided and m.odd_ranks == (0, 1)
        assert a.undecided is not None and "without a majority" in a.undecided


def test_gloo_empty_pg_config_is_rebuilt_from_the_layout() -> None:
    a = analyze_dumps(_dumps("cascade"), LAYOUT)
    groups = {g.name: (g.ranks, g.membership, g.kind) for g in a.groups}
    assert groups == {
        "0": ((0, 1, 2, 3), "layout", "job"),
        "1": ((0, 1), "layout", "tp"),
        "2": ((2, 3), "layout", "tp"),
        "3": ((0, 2), "layout", "pp"),
        "4": ((1, 3), "layout", "pp"),
    }
    without = {g.name: g.membership for g in analyze_dumps(_dumps("cascade")).groups}
    assert without == {"0": "world", "1": "observed", "2": "observed", "3": "observed", "4": "observed"}


def test_without_descriptions_the_layout_still_places_groups_the_ranks_pin_down() -> None:
    tp_only = [_load(r, _dump(r, [_e(0, "7", "undefined", 1)])) for r in (2, 3)]
    (g,) = analyze_dumps(tp_only, LAYOUT).groups
    assert (g.ranks, g.kind) == ((2, 3), "tp")
    one = [_load(0, _dump(0, [_e(0, "9", "undefined", 1)]))]
    a = analyze_dumps(one, LAYOUT)
    assert a.groups[0].membership == "observed"
    assert any("the layout allows tp/pp" in n for n in a.notes)


def test_a_member_without_a_dump_is_the_missing_root() -> None:
    a = analyze_dumps(_dumps("cascade", drop=(1,)), LAYOUT, 2)
    assert a.missing_dumps == (1,)
    assert a.suspects[0].rank == 1 and a.suspects[0].kind == "missing"
    assert a.status is Status.CRITICAL
    assert [h.state for h in a.chains[0].hops][-1] == "no dump"
    b = analyze_dumps(_dumps("skipped-allreduce", drop=(3,)), LAYOUT)
    assert b.suspects[0].rank == 3 and b.suspects[0].waiters == 3


def test_without_a_layout_a_rank_past_the_highest_dump_is_not_known_to_be_missing() -> None:
    a = analyze_dumps(_dumps("skipped-allreduce", drop=(3,)))
    assert not a.suspects and a.status is Status.WARNING
    assert a.undecided is not None and "every member entered" in a.undecided


def test_pg_config_in_the_dump_is_used_and_p2p_waits_are_followed() -> None:
    a = analyze_dumps(_p2p_cascade())
    assert {g.membership for g in a.groups} == {"pg_config"}
    assert a.suspect_ranks == (1,)
    assert [h.rank for h in a.chains[0].hops] == [2, 3, 1]
    assert "recv p2p #2 in PIPELINE_MODEL_PARALLEL_GROUP 4" in a.chains[0].hops[1].what


def test_a_cycle_is_reported_once_not_looped_on() -> None:
    a_desc, b_desc = "GROUP_A", "GROUP_B"
    pg = {
        "5": {"name": "5", "desc": a_desc, "ranks": "[0, 1]"},
        "6": {"name": "6", "desc": b_desc, "ranks": "[0, 1]"},
    }
    r0 = _dump(
        0, [_e(0, "5", a_desc, 1), _e(1, "6", b_desc, 1), _e(2, "5", a_desc, 2, state="scheduled")], pg
    )
    r1 = _dump(
        1, [_e(0, "5", a_desc, 1), _e(1, "6", b_desc, 1), _e(2, "6", b_desc, 2, state="scheduled")], pg
    )
    a = analyze_dumps([_load(0, r0), _load(1, r1)])
    assert a.status is Status.CRITICAL
    assert {s.kind for s in a.suspects} == {"cycle"} and a.suspect_ranks == (0, 1)
    (chain,) = a.chains
    assert [h.rank for h in chain.hops] == [0, 1, 0]


def test_every_member_in_the_call_is_undecided_not_blamed() -> None:
    dumps = [_load(r, _dump(r, [_e(0, "0", "default_pg", 1, state="started")])) for r in range(4)]
    a = analyze_dumps(dumps)
    assert a.status is Status.WARNING and not a.suspects
    assert a.undecided is not None and "stuck inside the collective" in a.undecided


def test_a_healthy_job_is_ok() -> None:
    dumps = [_load(r, _dump(r, [_e(0, "0", "default_pg", 1)])) for r in range(2)]
    a = analyze_dumps(dumps)
    assert a.status is Status.OK and not a.suspects and not a.blocked


# --- loading -----------------------------------------------------------------------------------------


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    evil = pickle.dumps({"version": "2.10", "pg_config": {}, "entries": [_Evil(marker)]}, protocol=2)
    assert flightrec.claim("nccl_trace_rank_0", evil)
    with pytest.raises(
        FrLoadError, match=r"^x/rank0: not a Flight Recorder dump: refused to load (posix|os)\.system"
    ):
        load_dump("x/rank0", evil)
    assert not marker.exists()
    report = detect.analyze_inputs([_write(tmp_path / "d" / "nccl_trace_rank_0", evil)])
    (entry,) = report.artefacts
    assert entry.kind == "flight-recorder" and entry.status is Status.UNKNOWN
    assert "refused to load" in entry.findings[0].message
    assert not marker.exists()


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "neither a pickle nor a JSON object"),
        (b"hello", "neither a pickle nor a JSON object"),
        (b"{not json", "damaged JSON"),
        (b"[1, 2]", "neither a pickle nor a JSON object"),
        (b'{"a": 1}', "no entries, pg_config or pg_status"),
        (b'{"entries": 5}', "no entries, pg_config or pg_status"),
        (b"\x80\x02}q\x00", "damaged pickle"),
        (pickle.dumps([1, 2], protocol=2), "top level is not a dict"),
        (b'{"entries": []}' + b"\xff", "not UTF-8"),
    ],
)
def test_bad_files_raise_one_clear_error(data: bytes, reason: str) -> None:
    with pytest.raises(FrLoadError, match=f"^f: .*{reason}"):
        load_dump("f", data)


def test_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = _dump(0, [_e(i, "0", "default_pg", i + 1) for i in range(10)])
    monkeypatch.setattr(flightrec.load, "MAX_ENTRIES", 4)
    d = _load(0, doc)
    assert len(d.entries) == 4 and d.skipped == 6
    monkeypatch.setattr(flightrec.load, "MAX_DUMP_BYTES", 100)
    with pytest.raises(FrLoadError, match="larger than"):
        _load(0, doc)


def test_malformed_entries_are_skipped_and_counted() -> None:
    doc = _dump(0, [_e(0, "0", "default_pg", 1), {"record_id": 1}, "junk", _e(2, "0", "default_pg", 0)])
    d = _load(0, doc)
    assert len(d.entries) == 1 and d.skipped == 3


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("nccl_trace_rank_3", 3),
        ("/tmp/nccl_trace_rank_12.json", 12),
        ("rank3.json", 3),
        ("dumps.tgz:fr/Rank-7.pkl", 7),
        ("trace_5", 5),
        ("rank2_copy1.json", 2),
        ("trace.json", None),
    ],
)
def test_rank_from_the_file_name_as_torch_names_it(name: str, rank: int | None) -> None:
    assert flightrec.rank_from_name(name) == rank


def test_the_rank_field_wins_over_the_file_name() -> None:
    d = load_dump("nccl_trace_rank_9", json.dumps(_dump(2, [])).encode())
    assert (d.rank, d.rank_source) == (2, "dump")


def test_a_dump_without_rank_is_noted_not_used() -> None:
    doc = _dump(0, [])
    del doc["rank"]
    a = analyze_dumps([load_dump("trace.json", json.dumps(doc).encode())])
    assert a.status is Status.UNKNOWN and "no rank" in a.notes[0]


# --- analyze -----------------------------------------------------------------------------------------


def test_claims_every_fixture_and_nothing_of_the_other_kinds() -> None:
    for p in DATA.rglob("*"):
        if p.is_file() and p.name != "SOURCE.md":
            assert flightrec.claim(p.name, p.read_bytes()[: detect.HEAD_BYTES]), p
    data_root = ROOT / "tests" / "data"
    recorded = ROOT / "tests" / "data" / "evidence"  # bench evidence keeps real dumps under <case>/fr/
    for p in recorded.glob("*/fr/*"):
        assert flightrec.claim(p.name, p.read_bytes()[: detect.HEAD_BYTES]), p
    others = [
        p
        for p in data_root.rglob("*")
        if p.is_file() and DATA not in p.parents and not (recorded in p.parents and p.parent.name == "fr")
    ]
    assert others
    for p in others:
        assert not flightrec.claim(p.name, p.read_bytes()[: detect.HEAD_BYTES]), p


def test_analyze_groups_the_dumps_with_bad_files_and_other_kinds_beside_them(tmp_path: Path) -> None:
    d = tmp_path / "run"
    shutil.copytree(DATA / "skipped-allreduce", d)
    (d / "notes.txt").write_text("just words\n")
    (d / "nccl_trace_rank_9").write_bytes(b"\x80\x02 entries damaged")
    report = detect.analyze_inputs([d], layout=LAYOUT, ranks_per_host=2)
    fr = next(a for a in report.artefacts if a.kind == "flight-recorder")
    assert fr.status is Status.CRITICAL
    assert fr.details["suspects"][0]["rank"] == 3
    assert fr.details["not_read"][0]["file"].endswith("nccl_trace_rank_9")
    assert any(f.status is Status.UNKNOWN for f in fr.findings)
    assert json.dumps(fr.details)


@pytest.mark.parametrize("case", sorted(CASES))
def test_cli_end_to_end(case: str) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "robustctl",
            "analyze",
            str(DATA / case),
            "--layout",
            "tp=2,pp=2",
            "-G",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 2, proc.stderr
    doc = json.loads(proc.stdout)
    (entry,) = doc["artefacts"]
    assert entry["kind"] == "flight-recorder" and entry["status"] == "critical"
    suspect = entry["details"]["suspects"][0]
    assert (suspect["rank"], suspect["kind"]) == tuple(reversed(CASES[case]))
    assert suspect["host"] == f"machine-{suspect['rank'] // 2}"
    assert "Traceback" not in proc.stderr


def test_torchfrtrace_crashes_on_the_same_gloo_dumps_and_exits_1(tmp_path: Path) -> None:
    """torch's own analyzer on the cascade: it cannot map gloo's empty pg_config (KeyError), names no
    rank and exits 1; robustctl names rank 1 from the same files (given the layout)."""
    exe = Path(sys.executable).with_name("torchfrtrace")
    if not exe.exists():
        pytest.skip("torchfrtrace is not installed")
    for p in (DATA / "cascade").glob("nccl_trace_rank_?"):
        shutil.copy(p, tmp_path / p.name)
    proc = subprocess.run([str(exe), str(tmp_path)], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1
    assert "KeyError" in proc.stderr
    mine = analyze_dumps([load_dump(str(p), p.read_bytes()) for p in tmp_path.iterdir()], LAYOUT)
    assert mine.suspect_ranks == (1,)


def test_torchfrtrace_given_the_groups_lists_every_blocked_group_names_a_victim_and_exits_0(
    tmp_path: Path,
) -> None:
    """The same cascade with ``pg_config`` filled in (as NCCL dumps carry it): torchfrtrace reports
    three groups "not all ranks joining", names rank 3 (a victim, blocked in PP) missing from its TP
    group next to rank 1, and exits 0; robustctl names rank 1 alone, with the chain."""
    exe = Path(sys.executable).with_name("torchfrtrace")
    if not exe.exists():
        pytest.skip("torchfrtrace is not installed")
    dumps = []
    for p in sorted((DATA / "cascade").glob("nccl_trace_rank_?")):
        doc = pickle.loads(p.read_bytes())  # our own fixture, written by tests/fr_gen.py
        doc["pg_config"] = NCCL_PG
        data = pickle.dumps(doc, protocol=2)
        (tmp_path / p.name).write_bytes(data)
        dumps.append(load_dump(p.name, data))
    proc = subprocess.run([str(exe), str(tmp_path)], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert out.count("Not all ranks joining collective") == 3
    assert "missing ranks: {3}" in out and "missing ranks: {1}" in out
    mine = analyze_dumps(dumps)
    assert {g.membership for g in mine.groups} == {"pg_config"}
    assert mine.suspect_ranks == (1,)
    assert [h.rank for h in mine.chains[0].hops] == [2, 3, 1]
    assert mine.chains[0].hops[0].frame is not None and "fr_gen.py" in mine.chains[0].hops[0].frame


# --- the test-bed job's desyncs (tests/data/flight-recorder/{skip-collective,wrong-size}) ---------------

JOB_LAYOUT = parse_layout("tp=2,pp=2,dp=2")
JOB_PER_HOST = 4


def _perms(dumps: list[FrDump]) -> list[list[FrDump]]:
    """Read orders of 8 dumps: every rotation, forwards and backwards, and a seeded sample of shuffles
    (all 40,320 permutations would cost minutes; the analysis first files the dumps by rank)."""
    rng = random.Random(24)
    out = [dumps[i:] + dumps[:i] for i in range(len(dumps))]
    out += [list(reversed(o)) for o in out]
    for _ in range(24):
        shuffled = list(dumps)
        rng.shuffle(shuffled)
        out.append(shuffled)
    return out


def test_wrong_size_the_comparable_dp_groups_outvote_the_tie_and_name_rank_7() -> None:
    dumps = _dumps("wrong-size")
    first = analyze_dumps(dumps, JOB_LAYOUT, JOB_PER_HOST)
    assert first.status is Status.CRITICAL
    top = first.suspects[0]
    assert (top.rank, top.kind, top.likely_culprit) == (7, "mismatch", True), first.summary
    assert {s.rank for s in first.suspects if s.likely_culprit} == {7}
    assert "numel 0" in top.reason and "3 of 4 members" in top.reason and "numel 4096" in top.reason
    assert top.evidence["electorate"] == "the 2 dp groups of pipeline stage 1 (7, 8)"
    assert (top.evidence["numel"], top.evidence["majority_numel"], top.evidence["voters"]) == (0, 4096, 4)
    (m,) = [m for m in first.mismatches if m.group == "8"]
    assert m.decided and m.odd_ranks == (7,) and m.seq == 5 and m.field == "sizes"
    victim = next(s for s in first.suspects if s.rank == 5)
    assert victim.kind == "root" and not victim.likely_culprit and "victim of that mismatch" in victim.reason
    idle = [s for s in first.suspects if s.evidence.get("idle")]
    assert sorted(s.rank for s in idle) == [1, 3] and not any(s.likely_culprit for s in idle)
    assert all("idle in Flight Recorder" in s.reason for s in idle)
    assert first.summary.startswith("Flight Recorder, 8 ranks: rank 7: size mismatch")
    for perm in _perms(dumps):
        a = analyze_dumps(perm, JOB_LAYOUT, JOB_PER_HOST)
        assert a.suspects == first.suspects and a.summary == first.summary


def test_wrong_size_without_a_layout_is_still_a_tie_nobody_named_for_it() -> None:
    a = analyze_dumps(_dumps("wrong-size"))
    assert 7 not in {s.rank for s in a.suspects if s.kind == "mismatch"}
    (m,) = [m for m in a.mismatches if m.group == "8"]
    assert not m.decided and m.electorate is None


def test_skip_collective_names_rank_1_as_the_cycle_s_culprit() -> None:
    dumps = _dumps("skip-collective")
    first = analyze_dumps(dumps, JOB_LAYOUT, JOB_PER_HOST)
    assert first.status is Status.CRITICAL
    top = first.suspects[0]
    assert (top.rank, top.kind, top.likely_culprit) == (1, "skip", True), first.summary
    assert {s.rank for s in first.suspects if s.likely_culprit} == {1}
    ev = top.evidence
    assert (ev["seq"], ev["last"], ev["moved_on"], ev["baseline"], ev["waiter"]) == (3, 2, 12, 6, 3)
    assert sorted(ev["cycle"]) == [0, 1, 2, 3]
    assert first.summary.startswith("Flight Recorder, 8 ranks: rank 1: skipped collective #3 in group 6")
    assert sorted(s.rank for s in first.suspects if s.kind == "cycle") == [0, 2, 3]
    idle = [s for s in first.suspects if s.evidence.get("idle")]
    assert sorted(s.rank for s in idle) == [6, 7] and not any(s.likely_culprit for s in idle)
    assert any("unrecorded pipeline send/recv" in n for n in first.notes)
    for perm in _perms(dumps):
        a = analyze_dumps(perm, JOB_LAYOUT, JOB_PER_HOST)
        assert a.suspects == first.suspects and a.summary == first.summary
    # without a layout the groups are the ranks that recorded them: the same cycle, the same skipper
    assert analyze_dumps(dumps).suspects[0].rank == 1


def test_the_cli_names_the_desyncs_truth_rank() -> None:
    for case, truth in (("wrong-size", 7), ("skip-collective", 1)):
        argv = [sys.executable, "-m", "robustctl", "analyze", str(DATA / case)]
        argv += ["--layout", "tp=2,pp=2,dp=2", "-G", "4", "--json", "-q"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert proc.returncode == 2, proc.stderr
        (art,) = json.loads(proc.stdout)["artefacts"]
        culprits = {s["rank"] for s in art["details"]["suspects"] if s["likely_culprit"]}
        assert culprits == {truth}, art["summary"]


# --- the comparable groups' vote on crafted dumps ----------------------------------------------------


def _dp_job(
    sizes: dict[int, int], layout: str = "tp=4,dp=2", state_of: dict[int, str] | None = None
) -> tuple[list[FrDump], Any]:
    """One DP all-reduce #1 per rank in its DP group (gloo: no pg_config, no descriptions); ``sizes``:
    rank → numel. DP groups are created after the TP groups, as Megatron does: names ``"10"``, ``"11"``…
    in the order of their lowest rank."""
    lay = parse_layout(layout)
    topo = Topology(lay)
    dp_groups = topo.groups("dp")
    name_of = {r: str(10 + i) for i, g in enumerate(dp_groups) for r in g}
    state_of = state_of or {}
    dumps = []
    for r, n in sorted(sizes.items()):
        e = _e(0, name_of[r], "undefined", 1, sizes=[[n]], out=[[n]], state=state_of.get(r, "completed"))
        dumps.append(_load(r, _dump(r, [e])))
    return dumps, lay


def test_a_tie_in_a_two_rank_group_is_broken_by_the_comparable_groups_in_any_order() -> None:
    sizes = {r: 8192 for r in range(8)}
    sizes[7] = 0
    dumps, lay = _dp_job(sizes, state_of={7: "completed", 3: "started"})
    first = analyze_dumps(dumps, lay)
    odd = [s for s in first.suspects if s.kind == "mismatch"]
    assert [s.rank for s in odd] == [7], first.summary
    assert "7 of 8 members of the 4 dp groups" in odd[0].reason and "numel 0" in odd[0].reason
    for perm in itertools.permutations(dumps[:3]):  # the reading order of a sample (8! is too many)
        a = analyze_dumps([*perm, *dumps[3:]], lay)
        assert a.suspects == first.suspects
    for perm in (dumps[::-1], dumps[4:] + dumps[:4], dumps[1::2] + dumps[::2]):
        assert analyze_dumps(perm, lay).suspects == first.suspects


def test_without_comparable_groups_a_tie_stays_a_tie_and_nobody_is_named() -> None:
    dumps, lay = _dp_job({0: 8192, 1: 0}, layout="dp=2")  # one DP group: nothing to compare with
    a = analyze_dumps(dumps, lay)
    assert not a.suspects and a.status is Status.WARNING
    (m,) = a.mismatches
    assert not m.decided and m.electorate is None
    # two DP groups, both split: the electorate has no strict majority either
    dumps, lay = _dp_job({0: 8192, 4: 0, 1: 8192, 5: 0}, layout="tp=4,dp=2")
    a = analyze_dumps(dumps, lay)
    assert not [s for s in a.suspects if s.kind == "mismatch"]


def test_groups_of_different_stages_are_not_compared_when_their_sizes_differ() -> None:
    # tp=2, pp=2, dp=2: stage 0's DP groups carry 4096 elements, stage 1's 1024 (other layers). Rank 7
    # (stage 1) called 0: the one other stage-1 DP group outvotes it (3 of 4), stage 0 does not vote.
    sizes = {0: 4096, 2: 4096, 1: 4096, 3: 4096, 4: 1024, 6: 1024, 5: 1024, 7: 0}
    lay = parse_layout("tp=2,pp=2,dp=2")
    topo = Topology(lay)
    name_of = {r: str(5 + i) for i, g in enumerate(topo.groups("dp")) for r in g}
    dumps = [
        _load(r, _dump(r, [_e(0, name_of[r], "undefined", 1, sizes=[[n]], out=[[n]])]))
        for r, n in sizes.items()
    ]
    a = analyze_dumps(dumps, lay)
    (odd,) = [s for s in a.suspects if s.kind == "mismatch"]
    assert odd.rank == 7 and "3 of 4 members" in odd.reason and "pipeline stage 1" in odd.reason
    # a healthy job whose stages differ in size is not a mismatch
    sizes[7] = 1024
    dumps = [
        _load(r, _dump(r, [_e(0, name_of[r], "undefined", 1, sizes=[[n]], out=[[n]])]))
        for r, n in sizes.items()
    ]
    healthy = analyze_dumps(dumps, lay)
    assert healthy.status is Status.OK and not healthy.mismatches


def test_a_unanimous_group_off_the_comparable_groups_majority_is_named() -> None:
    sizes = {r: 8192 for r in range(8)}
    sizes[3] = sizes[7] = 4096  # DP group [3, 7] agrees with itself, not with the other three
    dumps, lay = _dp_job(sizes, state_of={0: "started"})  # the job is stuck: rank 0 still waits
    a = analyze_dumps(dumps, lay)
    odd = sorted(s.rank for s in a.suspects if s.kind == "mismatch")
    assert odd == [3, 7] and "unanimous" in a.suspects[0].reason
    # nothing blocked: a DP group with a schedule of its own (healthy), not put to the wider vote
    healthy = analyze_dumps(_dp_job(sizes)[0], lay)
    assert healthy.status is Status.OK and not healthy.mismatches


def test_a_cycle_where_no_member_moved_on_keeps_the_cycle_report() -> None:
    # the crafted two-group cycle: each rank blocked in the next op right after the last shared one
    a_desc, b_desc = "GROUP_A", "GROUP_B"
    pg = {
        "5": {"name": "5", "desc": a_desc, "ranks": "[0, 1]"},
        "6": {"name": "6", "desc": b_desc, "ranks": "[0, 1]"},
    }
    r0 = _dump(
        0, [_e(0, "5", a_desc, 1), _e(1, "6", b_desc, 1), _e(2, "5", a_desc, 2, state="scheduled")], pg
    )
    r1 = _dump(
        1, [_e(0, "5", a_desc, 1), _e(1, "6", b_desc, 1), _e(2, "6", b_desc, 2, state="scheduled")], pg
    )
    a = analyze_dumps([_load(0, r0), _load(1, r1)])
    assert {s.kind for s in a.suspects} == {"cycle"}


def test_a_cycle_member_that_went_past_the_collective_is_named_in_any_order() -> None:
    # tp=2, dp=2 (pg_config): TP "1" [0,1], "2" [2,3]; DP "3" [0,2], "4" [1,3]; a step is TP, TP, DP.
    # Rank 1 stops calling DP after step 1: rank 3 waits in DP #2; rank 1 goes on with its TP group
    # (rank 0 keeps pace through step 3) and blocks in TP #7; the waits are the cycle 0 → 2 → 3 → 1.
    tp, dp = "TENSOR_MODEL_PARALLEL_GROUP", "DATA_PARALLEL_GROUP"
    pg = {
        "1": {"name": "1", "desc": tp, "ranks": "[0, 1]"},
        "2": {"name": "2", "desc": tp, "ranks": "[2, 3]"},
        "3": {"name": "3", "desc": dp, "ranks": "[0, 2]"},
        "4": {"name": "4", "desc": dp, "ranks": "[1, 3]"},
    }
    plan = {  # rank -> (group, desc, seq) in order; the last one pending
        0: [("1", 1), ("1", 2), ("3", 1), ("1", 3), ("1", 4), ("3", 2), ("1", 5), ("1", 6), ("3", 3)],
        1: [("1", 1), ("1", 2), ("4", 1), ("1", 3), ("1", 4), ("1", 5), ("1", 6), ("1", 7)],
        2: [("2", 1), ("2", 2), ("3", 1), ("2", 3), ("2", 4), ("3", 2), ("2", 5)],
        3: [("2", 1), ("2", 2), ("4", 1), ("2", 3), ("2", 4), ("4", 2)],
    }
    desc = {"1": tp, "2": tp, "3": dp, "4": dp}
    dumps = []
    for r, ops in plan.items():
        es = [
            _e(i, g, desc[g], s, state="scheduled" if i == len(ops) - 1 else "completed")
            for i, (g, s) in enumerate(ops)
        ]
        dumps.append(_load(r, _dump(r, es, pg)))
    first = analyze_dumps(dumps)
    top = first.suspects[0]
    assert (top.rank, top.kind, top.likely_culprit) == (1, "skip", True), first.summary
    assert (top.evidence["moved_on"], top.evidence["baseline"], top.evidence["waiter"]) == (4, 2, 3)
    assert sorted(s.rank for s in first.suspects if s.kind == "cycle") == [0, 2, 3]
    for perm in itertools.permutations(dumps):
        a = analyze_dumps(list(perm))
        assert a.suspects == first.suspects and a.summary == first.summary
