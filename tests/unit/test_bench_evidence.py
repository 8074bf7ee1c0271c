"""``python -m bench evidence``'s judging and table on recorded inputs (no live job).

The recorded inputs (``tests/data/evidence/``, see its SOURCE.md) are one run of the harness on the
loopback test bed: the table it wrote (``evidence.json``), and for the ``wrong_size`` hang the Flight
Recorder dumps the ranks' debug servers gave and ``torchfrtrace``'s output on them, as dumped and with
``pg_config`` filled from the layout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.evidence import (
    CASES,
    LAYOUT,
    PATHS,
    RANKS_PER_HOST,
    Answer,
    Row,
    fr_named,
    job_groups,
    judge,
    render_table,
    stacks_named,
    table_json,
    torchfrtrace_answer,
    with_layout_pg_config,
)

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "evidence"


def test_judge_words() -> None:
    assert judge([5], [5]) == "right"
    assert judge([0, 1, 5], [5]) == "also others"
    assert judge([1, 5], [5, 7]) == "partly"
    assert judge([1, 3], [5]) == "wrong"
    assert judge([], [5]) == "none"
    assert judge((5, 5), (5,)) == "right", "ranks are a set"


def test_stacks_named_prefers_likely_culprits_then_suspects() -> None:
    assert stacks_named({"likely_culprits": [7, 3], "suspect_ranks": [3, 5, 7]}) == (3, 7)
    assert stacks_named({"likely_culprits": [], "suspect_ranks": [6, 2, 6]}) == (2, 6)
    assert stacks_named({"status": "ok"}) == ()
    assert stacks_named({"likely_culprits": [True, "3", 4]}) == (4,), "only integers are ranks"


def test_torchfrtrace_answers_as_recorded() -> None:
    """Its crash on gloo's empty ``pg_config`` is a crash, named by its last line; with the layout's
    groups its blocks name the ranks missing from each blocked collective and the "culprit" of a size
    mismatch, which for the 2-rank DP group is the healthy rank 5 (the dump read first decides)."""
    raw = (DATA / "wrong_size" / "torchfrtrace.txt").read_text()
    assert torchfrtrace_answer(1, raw) == ((), "crashed: KeyError: ('2', 3)")
    layout = (DATA / "wrong_size" / "torchfrtrace-layout.txt").read_text()
    named, note = torchfrtrace_answer(0, layout)
    assert "Culprit rank 5; Error type: SIZE_OR_SYNTAX_MISMATCH" in layout
    assert 5 in named and 7 in named and note.endswith("exit 0")
    assert torchfrtrace_answer(0, "tabulate is not installed. Proceeding without it.\n") == (
        (),
        "no collective reported (no output)",
    )
    assert torchfrtrace_answer(0, "missing ranks: {1, 3}\nmissing ranks: {3}\n") == (
        (1, 3),
        "2 problem block(s), exit 0",
    )


def test_job_groups_follow_minimegatrons_creation_order() -> None:
    """Group ``"i"`` of the dumps is entry i: the world, then minimegatron's TP, DP and PP groups in the
    order every rank creates them (the order robustctl's analysis rebuilds from the layout too)."""
    groups = job_groups(2, 2, 2)
    assert groups[0] == list(range(8))
    assert groups[1:5] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert groups[5:9] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert groups[9:] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    mm = pytest.importorskip("tests.jobs.minimegatron", reason="minimegatron needs torch")
    topo = mm.Topology(tp=2, dp=4, pp=3)
    assert job_groups(2, 3, 4) == [list(range(24)), *topo.tp_groups(), *topo.dp_groups(), *topo.pp_groups()]
    dump = {"entries": [], "pg_config": {"": {"name": "", "desc": "", "ranks": "[]"}}}
    filled = with_layout_pg_config(dump, groups)
    assert filled["pg_config"]["8"] == {"name": "8", "desc": "group 8", "ranks": "[5, 7]"}
    assert dump["pg_config"] == {"": {"name": "", "desc": "", "ranks": "[]"}}, "the input is not changed"


def test_fr_named_on_recorded_dumps_of_the_wrong_size_hang() -> None:
    """``robustctl analyze`` of the recorded dumps (rank 7 called its DP all-reduce with 0 elements):
    the 2-rank DP group's own vote ties, the comparable DP groups of its stage outvote the odd size
    (3 of 4 members), and the roots of the waits (ranks whose pipeline recv Flight Recorder does not
    record) are not likely culprits once that mismatch explains the hang: rank 7 alone is named."""
    argv = [sys.executable, "-m", "robustctl", "analyze", str(DATA / "wrong_size" / "fr")]
    argv += ["--layout", "tp=2,pp=2,dp=2", "-G", str(RANKS_PER_HOST), "--json", "-q"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO)
    named, summary = fr_named(json.loads(proc.stdout))
    recorded = json.loads((DATA / "evidence.json").read_text())
    row = next(r for r in recorded["rows"] if r["kind"] == "wrong_size")
    assert list(named) == row["answers"]["flight_recorder"]["named"] == [7]
    assert summary == row["answers"]["flight_recorder"]["note"] and summary.startswith(
        "Flight Recorder, 8 ranks"
    )
    assert fr_named({"artefacts": [{"kind": "nccl-tests"}]}) == (
        (),
        "no Flight Recorder artefact in the document",
    )
    two = {"kind": "flight-recorder", "summary": "s", "details": {"suspects": [{"rank": 4}, {"rank": 2}]}}
    assert fr_named({"artefacts": [two]}) == ((2, 4), "s"), "no likely culprit: every suspect"


def test_the_recorded_table_renders_as_the_readme_shows_it() -> None:
    """The recorded run, read back into rows, judges as it recorded and renders the README's table."""
    recorded = json.loads((DATA / "evidence.json").read_text())
    assert recorded["paths"] == list(PATHS) and recorded["layout"] == {
        **LAYOUT,
        "ranks_per_host": RANKS_PER_HOST,
    }
    rows = []
    for r in recorded["rows"]:
        row = Row(r["kind"], tuple(r["truth"]), extra=r["extra"])
        for path, a in r["answers"].items():
            answer = Answer(tuple(a["named"]), a["verdict"], a["note"], a["exit_code"])
            assert judge(answer.named, row.truth) == answer.verdict, (row.kind, path)
            row.answers[path] = answer
        rows.append(row)
    assert [r.kind for r in rows] == [c.kind for c in CASES]
    assert {r.kind: r.truth for r in rows} == {c.kind: c.truth for c in CASES}
    table = render_table(rows)
    lines = table.splitlines()
    assert len(lines) == 2 + len(CASES) and all(ln.count("|") == 2 + len(PATHS) + 1 for ln in lines)
    readme = (REPO / "README.md").read_text()
    assert table in readme, "the README's table is the recorded run's"
    again = table_json(rows)
    assert again["rows"] == [{**r, "extra": r["extra"]} for r in recorded["rows"]]
