"""StacksReport (JSON contract, status, exit code), rich rendering, offline analyze_dumps and the
``pyspy`` artefact kind of ``robustctl analyze``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from robustctl.analysis.detect import analyze_paths, detect_kind
from robustctl.config import ParallelLayout
from robustctl.errors import UsageError
from robustctl.exit_codes import ExitCode
from robustctl.inventory.topology import parse_layout
from robustctl.models import SCHEMA_VERSION, Status, to_jsonable
from robustctl.report.stacks import render_failslow, render_stacks
from robustctl.stacks.blame import BlameOptions
from robustctl.stacks.cluster import cluster
from robustctl.stacks.failslow import FailSlowResult, vote
from robustctl.stacks.model import Frame, ProcessDump, ThreadStack
from robustctl.stacks.result import StacksReport, analyze_stacks

DATA = Path(__file__).resolve().parents[1] / "data" / "pyspy"
KIND = "pyspy"


# robustctl.stacks.analyze registers the "pyspy" artefact kind when imported; import it only when a
# test runs, so that collecting this module leaves the analyze registry as the other tests expect it.
def analyze_dumps(*args: Any, **kwargs: Any) -> StacksReport:
    from robustctl.stacks.analyze import analyze_dumps as run

    return run(*args, **kwargs)


def all_pyspy(paths: Any) -> bool:
    from robustctl.stacks.analyze import all_pyspy as run

    return run(paths)


def load_dumps(paths: Any) -> Any:
    from robustctl.stacks.analyze import load_dumps as run

    return run(paths)


GLOO = DATA / "captured-gloo-4ranks"
ROOT = [("<module>", "train.py"), ("main", "train.py"), ("step", "train.py")]
WAIT = [*ROOT, ("all_reduce", "torch/distributed/distributed_c10d.py")]
RECV = [*ROOT, ("recv", "torch/distributed/distributed_c10d.py")]
COMPUTE = [*ROOT, ("_call_impl", "torch/nn/modules/module.py"), ("forward", "model.py")]
LAYOUT = ParallelLayout(tp=2, pp=4, dp=2)


def mk(rank: int, path: list[tuple[str, str]], line: int = 1) -> ProcessDump:
    frames = tuple(Frame(fn, f, line) for fn, f in reversed(path))
    return ProcessDump(
        (ThreadStack("1", "MainThread", frames),), rank=rank, pid=100 + rank, host=f"h{rank // 2}"
    )


def fig7() -> list[ProcessDump]:
    return [mk(r, COMPUTE if r == 12 else RECV if r in (0, 4, 8) else WAIT) for r in range(16)]


def render(report: StacksReport, verbose: bool = False) -> str:
    console = Console(record=True, width=160, force_terminal=False, color_system=None)
    render_stacks(report, console, verbose=verbose)
    return console.export_text()


def test_report_critical_and_json_contract() -> None:
    rep = analyze_stacks(fig7(), layout=LAYOUT, ranks_per_host=2, hosts=[f"node{i}" for i in range(8)])
    assert rep.status is Status.CRITICAL and rep.exit_code is ExitCode.CRITICAL
    assert rep.suspect_ranks == (0, 4, 8, 12) and rep.likely_culprits == (12,)
    assert (
        rep.group is not None
        and rep.group.kind == "pp"
        and rep.over_eviction == ("node0", "node2", "node4", "node6")
    )
    assert rep.healthy_machines_taken == 3
    assert (
        rep.summary.startswith("4 outlier ranks (ranks 0,4,8 p2p; rank 12 compute) in pp group 0")
        and "over-evict 4 machines" in rep.summary
    )
    doc = json.loads(json.dumps(to_jsonable(rep)))
    assert doc["schema_version"] == SCHEMA_VERSION and doc["kind"] == "stacks" and doc["exit_code"] == 2
    assert doc["status"] == "critical" and doc["layout"] == {
        "tp": 2,
        "cp": 1,
        "ep": 1,
        "dp": 2,
        "pp": 4,
        "order": "tp-cp-ep-dp-pp",
    }
    classes = doc["classes"]
    assert [(c["role"], c["size"], c["ranks"], c["healthy"]) for c in classes] == [
        ("main", 12, "1-3,5-7,9-11,13-15", True),
        ("main", 3, "0,4,8", False),
        ("main", 1, "12", False),
    ]
    assert classes[0]["processes"] == [] and [p["rank"] for p in classes[1]["processes"]] == [0, 4, 8]
    assert classes[2]["divergence"]["last_common"] == "step (train.py)"
    assert doc["suspects"][3]["coords"]["pp"] == 3 and doc["suspects"][3]["likely_culprit"] is True


def test_report_statuses() -> None:
    ok = analyze_stacks([mk(r, WAIT) for r in range(16)], layout=LAYOUT, ranks_per_host=2)
    assert ok.status is Status.OK and ok.exit_code is ExitCode.OK and ok.suspects == ()
    amb = analyze_stacks(
        [mk(r, COMPUTE if r < 8 else WAIT) for r in range(16)], layout=LAYOUT, ranks_per_host=2
    )
    assert amb.status is Status.WARNING and amb.exit_code is ExitCode.WARNING and amb.ambiguous
    assert amb.summary.startswith("ambiguous, no suspect named")
    gone = analyze_stacks([ProcessDump((), rank=r, error="process gone") for r in range(4)])
    assert gone.status is Status.UNKNOWN and gone.exit_code is ExitCode.UNKNOWN and gone.readable == 0
    assert gone.suspects == () and "no process could be read" in gone.summary
    missing = analyze_stacks([mk(r, WAIT) for r in range(15)], layout=LAYOUT, ranks_per_host=2)
    assert missing.status is Status.UNKNOWN and missing.not_collected == "15" and missing.n_not_collected == 1
    asked = analyze_stacks(
        [mk(r, WAIT) for r in range(8)], layout=LAYOUT, ranks_per_host=2, expected_ranks=range(8)
    )
    assert asked.status is Status.OK and asked.n_not_collected == 0
    empty = analyze_stacks([])
    assert empty.status is Status.UNKNOWN and empty.summary == "no dump"


def test_progress_between_two_samples_means_no_hang() -> None:
    before = [mk(r, COMPUTE if r % 3 else WAIT, line=r) for r in range(16)]
    after = [mk(r, WAIT if r % 3 else COMPUTE, line=r + 1) for r in range(16)]
    rep = analyze_stacks(after, layout=LAYOUT, ranks_per_host=2, previous=before)
    assert rep.status is Status.OK and rep.suspects == () and rep.progress is not None
    assert rep.progress.changed_fraction == 1.0 and "making progress" in rep.summary
    hung = analyze_stacks(fig7(), layout=LAYOUT, ranks_per_host=2, previous=fig7())
    assert hung.status is Status.CRITICAL and hung.progress is not None and hung.progress.changed == ()


def test_layout_mismatch_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="outside the layout"):
        analyze_stacks([mk(r, WAIT) for r in range(20)], layout=LAYOUT, ranks_per_host=2)
    with pytest.raises(UsageError, match="multiplies to 32"):
        parse_layout("tp=2,pp=4,dp=4", world_size=16)


def test_render_tree_marks_divergence_and_summary() -> None:
    rep = analyze_stacks(fig7(), layout=LAYOUT, ranks_per_host=2, hosts=[f"node{i}" for i in range(8)])
    text = render(rep)
    assert "main processes: 16 (16 read), 3 classes" in text
    assert "class 0 · 12 processes · ranks 1-3,5-7,9-11,13-15 · collective · dominant" in text
    assert "✗ recv (torch/distributed/distributed_c10d.py) ← diverges" in text
    assert "✗ _call_impl (nn/modules/module.py) ← diverges" in text
    assert "class 2 · 1 process · rank 12 on h6 · compute · OUTLIER" in text
    assert "smallest group holding the suspects: pp group 0 (4 ranks: 0,4,8,12)" in text
    assert "over-eviction set: node0, node2, node4, node6 (4 machines, 3 expected healthy)" in text
    assert text.rstrip().endswith("→ exit 2")


def test_render_folds_long_runs_and_escapes_markup() -> None:
    deep = [("<module>", "train.py"), *[(f"[bold]layer{i}[/]", "m.py") for i in range(10)]]
    dumps = [mk(r, [*deep, ("all_reduce", "torch/distributed/distributed_c10d.py")]) for r in range(5)]
    dumps.append(ProcessDump((), rank=5, error="Permission denied (os error 13)"))
    text = render(analyze_stacks(dumps))
    assert "⋮ 10 frames" in text
    assert "[bold]layer0[/] (m.py)" in render(analyze_stacks(dumps), verbose=True)
    assert "could not be read · 1 process · ranks 5 · OUTLIER · Permission denied (os error 13)" in text
    assert "⋮" not in render(analyze_stacks(dumps), verbose=True)


def test_render_ambiguous_and_failslow() -> None:
    amb = analyze_stacks([mk(r, [*ROOT, (f"f{r}", "x.py")]) for r in range(4)])
    text = render(amb)
    assert "no dominant main class: every process differs" in text and "WARNING" in text
    rounds = [cluster([mk(r, COMPUTE if r == 3 else WAIT) for r in range(16)]) for _ in range(3)]
    console = Console(record=True, width=120, color_system=None)
    render_failslow(vote(rounds), console)
    out = console.export_text()
    assert "degrader: rank 3 (ranks 3)" in out and "votes: rank 3: 3" in out


def test_failslow_votes_list_groups_as_ranges() -> None:
    # pp groups 16-23 flagged once each, group 4 three times: "pp 4: 3, pp 16-23: 1 each", not a long list
    res = FailSlowResult("pp", (), ((4, 3), *((g, 1) for g in range(16, 24))), None, reason="too few")
    console = Console(record=True, width=120, color_system=None)
    render_failslow(res, console)
    assert "votes: pp 4: 3, pp 16-23: 1 each" in console.export_text()


def test_analyze_dumps_on_captured_gloo_job() -> None:
    paths = sorted(GLOO.glob("rank*.dump"))
    assert all_pyspy(paths)
    rep = analyze_dumps(paths, layout=parse_layout("tp=2,dp=2", world_size=4), ranks_per_host=1)
    # ranks 0,2 all_reduce (dominant); 1 recv, 3 compute: DP group [1,3] on machines 1 and 3
    assert rep.status is Status.CRITICAL and rep.suspect_ranks == (1, 3) and rep.likely_culprits == (3,)
    assert rep.group is not None and (rep.group.kind, rep.group.ranks) == ("dp", "1,3")
    assert [f.status for f in rep.inputs] == [Status.OK] * 4 and rep.inputs[3].ranks == "3"
    json_paths = sorted(GLOO.glob("rank*.json"))
    rep_json = analyze_dumps(json_paths, layout=parse_layout("tp=2,dp=2"), ranks_per_host=1)
    assert rep_json.suspect_ranks == (1, 3)
    # with 2 ranks per host that DP group spans both machines: the classes alone are ambiguous ...
    classes_only = BlameOptions(waits_for=False)
    both = analyze_dumps(
        paths, layout=parse_layout("tp=2,dp=2"), ranks_per_host=2, blame_options=classes_only
    )
    assert both.status is Status.WARNING and both.suspects == ()
    # ... the waits-for chain (rank 1's recv waits for rank 3) names rank 3 and its machine
    both = analyze_dumps(paths, layout=parse_layout("tp=2,dp=2"), ranks_per_host=2)
    assert both.status is Status.CRITICAL and both.suspect_ranks == (3,) and both.decided_by == "waits-for"
    assert both.over_eviction == ("machine-1",)


def test_analyze_dumps_bad_files_are_unknown_inputs_never_suspects(tmp_path: Path) -> None:
    for r in range(4):
        shutil.copy(GLOO / f"rank{r}.dump", tmp_path / f"rank{r}.dump")
    (tmp_path / "rank4.dump").write_text("garbage\n")
    (tmp_path / "rank5.dump").write_bytes(b"\x00\x01")
    paths = [*sorted(tmp_path.glob("rank*.dump")), tmp_path / "missing.txt"]
    assert not all_pyspy(paths)
    rep = analyze_dumps(paths, layout=parse_layout("dp=8"), ranks_per_host=1)
    bad = [f for f in rep.inputs if f.status is Status.UNKNOWN]
    assert [Path(f.path).name for f in bad] == ["rank4.dump", "rank5.dump", "missing.txt"]
    assert all(f.error for f in bad)
    assert 4 not in rep.suspect_ranks and 5 not in rep.suspect_ranks
    assert rep.not_collected == "4-7"
    text = render(rep)
    assert "rank4.dump: not a py-spy dump" in text


def test_analyze_dumps_garbage_only_is_unknown() -> None:
    rep = analyze_dumps([DATA / "fairseq-rank0-dataloader-hang-PARTIAL" / "EXPECTED.json"])
    assert rep.status is Status.UNKNOWN and rep.processes == 0 and rep.suspects == ()


def test_analyze_dumps_real_samples() -> None:
    fairseq = analyze_dumps([DATA / "fairseq-rank0-dataloader-hang-PARTIAL" / "rank0.dump"])
    assert fairseq.status is Status.OK and fairseq.classes[0].category == "dataloader"
    mix = DATA / "mixtral-zero3-accelerate-8xh100-PARTIAL"
    rep = analyze_dumps([mix / "rank_pid39.dump", mix / "rank_pid42.dump"])
    assert len(rep.classes) == 1 and rep.classes[0].size == 2 and rep.classes[0].partial == 1
    with_layout = analyze_dumps(
        [mix / "rank_pid39.dump", mix / "rank_pid42.dump"], layout=parse_layout("dp=8")
    )
    assert with_layout.status is Status.UNKNOWN and with_layout.n_not_collected == 8
    assert any("without a rank" in n for n in with_layout.notes)


def test_errors_and_dataloader_workers_offline() -> None:
    dumps, inputs = load_dumps(sorted((DATA / "captured-errors").glob("*.dump")))
    assert len(dumps) == 6 and all(d.error for d in dumps) and all(f.status is Status.OK for f in inputs)
    rep = analyze_dumps([DATA / "captured-dataloader-worker-stuck" / "rank0-with-workers.dump"])
    roles = {r.role: r for r in rep.roles}
    assert roles["dataloader"].ambiguous and roles["main"].dominant == 0


def test_pyspy_artefact_kind_registered() -> None:
    import robustctl.stacks.analyze  # noqa: F401 - registers the kind

    text = (GLOO / "rank3.dump").read_text()
    kind = detect_kind(text)
    assert kind is not None and kind.name == KIND
    report = analyze_paths([GLOO / "rank3.dump", DATA / "captured-errors" / "permission-denied.dump"])
    a, b = report.artefacts
    assert a.kind == KIND and a.status is Status.OK and "compute" in a.summary
    assert a.details["processes"][0]["main_stack"][-1] == "compute (g.py)"
    assert b.kind == KIND and b.status is Status.UNKNOWN and "Permission Denied" in b.summary
    multi = analyze_paths([DATA / "crafted" / "jsonl-records.jsonl"])
    assert multi.artefacts[0].kind == KIND


def test_pyspy_artefact_kind_clusters_a_multi_process_file(tmp_path: Path) -> None:
    import robustctl.stacks.analyze  # noqa: F401 - registers the kind

    text = "".join(
        f"Process {100 + r}: python train.py\nPython v3.10.12 (/usr/bin/python3.10)\n\n"
        f'Thread {100 + r} (idle): "MainThread"\n'
        + (
            "    forward (model.py:3)\n"
            if r == 2
            else "    all_reduce (torch/distributed/distributed_c10d.py:9)\n"
        )
        + "    step (train.py:5)\n    <module> (train.py:9)\n"
        for r in range(6)
    )
    p = tmp_path / "all.txt"
    p.write_text(text)
    (a,) = analyze_paths([p]).artefacts
    assert a.kind == KIND and a.status is Status.CRITICAL and a.details["stacks"]["status"] == "critical"


def test_minimegatron_compute_hang_end_to_end() -> None:
    # real dumps of the project's 8-rank job (tp=2, pp=2, dp=2), rank 6 hung in a layer's forward
    d = DATA / "captured-minimegatron-compute-hang"
    rep = analyze_dumps(sorted(d.glob("rank*.dump")), layout=parse_layout("tp=2,pp=2,dp=2"), ranks_per_host=2)
    assert rep.status is Status.CRITICAL and rep.processes == 32 and rep.readable == 32
    assert rep.suspect_ranks == (2, 3, 6, 7) and rep.likely_culprits == (6,)
    cats = {s.rank: s.category.value for s in rep.suspects}
    assert cats == {2: "p2p", 3: "p2p", 6: "compute", 7: "collective"}
    assert rep.group is not None and (rep.group.kind, rep.group.index, rep.group.ranks) == (
        "tp-pp",
        1,
        "2-3,6-7",
    )
    assert rep.over_eviction == ("machine-1", "machine-3") and rep.healthy_machines_taken == 1
    roles = {r.role: r for r in rep.roles}
    assert roles["dataloader"].processes == 16 and roles["checkpoint"].processes == 8
    assert roles["checkpoint"].dominant == 0 and roles["checkpoint"].n_classes == 1


def test_minimegatron_dataloader_hang_named_through_workers() -> None:
    d = DATA / "captured-minimegatron-dataloader-hang"
    rep = analyze_dumps(sorted(d.glob("rank*.dump")), layout=parse_layout("tp=2,pp=2,dp=2"), ranks_per_host=2)
    assert rep.status is Status.CRITICAL and rep.likely_culprits == (3,)
    workers = [s for s in rep.suspects if s.role.value == "dataloader"]
    assert (
        len(workers) == 2
        and {s.rank for s in workers} == {3}
        and all(s.category.value == "dataloader" for s in workers)
    )
    main3 = next(s for s in rep.suspects if s.rank == 3 and s.role.value == "main")
    assert main3.category.value == "dataloader"


def test_hosts_default_to_the_dumps_hosts() -> None:
    rep = analyze_stacks(fig7(), layout=LAYOUT, ranks_per_host=2)  # mk() sets host h{rank // 2}
    assert rep.over_eviction == ("h0", "h2", "h4", "h6") and rep.suspect_hosts == ("h0", "h2", "h4", "h6")
    partial = [d for d in fig7() if d.rank != 14 and d.rank != 15]
    rep2 = analyze_stacks(partial, layout=LAYOUT, ranks_per_host=2, expected_ranks=range(14))
    assert rep2.over_eviction == ("h0", "h2", "h4", "h6")
