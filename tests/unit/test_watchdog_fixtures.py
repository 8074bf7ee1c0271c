"""NCCL watchdog logs pasted in public threads (tests/data/nccl-watchdog, SOURCE.md): each is claimed
by the ``nccl-watchdog`` kind and judged as its thread judged it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from robustctl.analysis import detect
from robustctl.config import ParallelLayout
from robustctl.inventory.topology import parse_layout
from robustctl.models import Status

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl-watchdog"


def judge(name: str, layout: ParallelLayout | None = None) -> detect.ArtefactAnalysis:
    report = detect.analyze_inputs([DATA / name], layout=layout)
    (entry,) = report.artefacts
    assert entry.kind == "nccl-watchdog", entry.summary
    return entry


def rows(entry: detect.ArtefactAnalysis) -> set[tuple[Any, int, str]]:
    return {(r["process_group"], r["seq"], "/".join(r["ops"])) for r in entry.details["timeouts"]}


def test_every_fixture_has_a_source_and_a_test() -> None:
    logs = sorted(p.name for p in DATA.glob("*.log"))
    source = (DATA / "SOURCE.md").read_text()
    assert all(f"`{name}`" in source for name in logs)
    assert len(logs) >= 5
    tested = Path(__file__).read_text()
    assert all(name in tested for name in logs)


def test_formats_cover_the_three_log_prefixes() -> None:
    seen: set[str] = set()
    for p in DATA.glob("*.log"):
        seen.update(judge(p.name).details["formats"])
    assert {"rank", "pg", "pg-guid", "launcher"} <= seen


def test_ofa_271_every_rank_shown_waits_in_one_allreduce() -> None:
    entry = judge("ofa-271-rank-prefix.log")
    assert entry.status is Status.CRITICAL
    assert rows(entry) == {(None, 469508, "ALLREDUCE")}
    assert entry.details["timeouts"][0]["reported_by"] == ["rank 1", "rank 3", "rank 2", "rank 6", "rank 7"]
    assert entry.details["suspect_ranks"] == []  # the thread named no rank; the log has no group to compare


def test_pytorch_118369_sequence_numbers_of_unnamed_groups_are_not_compared() -> None:
    entry = judge("pytorch-118369-rank-prefix-two-groups.log")
    assert entry.status is Status.CRITICAL
    assert {r[1] for r in rows(entry)} == {64088, 96117, 96120, 96125}
    assert entry.details["suspect_ranks"] == []
    assert not [f for f in entry.findings if "behind" in f.message]


def test_llamafactory_7396_allreduce_of_pg_1_and_no_rank_behind() -> None:
    entry = judge("llamafactory-7396-pg-rank.log")
    assert entry.status is Status.CRITICAL
    assert rows(entry) == {("PG 1", 1580, "ALLREDUCE")}
    row = entry.details["timeouts"][0]
    assert sorted(row["reported_by"]) == ["rank 0", "rank 3", "rank 4"]
    assert row["numel_in"] == {"466119168": ["rank 0", "rank 4"]}
    assert entry.details["suspect_ranks"] == []


def test_llamafactory_7396_with_its_world_size_names_the_ranks_that_printed_nothing() -> None:
    entry = judge("llamafactory-7396-pg-rank.log", parse_layout("dp=8"))
    assert entry.details["silent_ranks"] == "1-2,5-7"


def test_sglang_1693_allgather_of_pg_3_and_the_process_taken_down() -> None:
    entry = judge("sglang-1693-pg-rank.log")
    assert entry.status is Status.CRITICAL
    assert rows(entry) == {("PG 3", 9141, "_ALLGATHER_BASE")}
    row = entry.details["timeouts"][0]
    assert sorted(row["reported_by"]) == ["rank 1", "rank 4"]
    assert row["group_inferred"] == ["rank 1"]  # its status line is not in the paste
    assert entry.details["process_groups"][0]["last_completed"] == {"rank 4": 9140}


def test_basicsr_737_default_group_allreduce_every_rank_waits() -> None:
    entry = judge("basicsr-737-pg-guid.log")
    assert entry.status is Status.CRITICAL
    assert rows(entry) == {("PG 0 (default_pg)", 808, "ALLREDUCE")}
    assert len(entry.details["timeouts"][0]["reported_by"]) == 3
    assert entry.details["suspect_ranks"] == []


def test_llamafactory_8261_pg_status_line_of_2_7() -> None:
    entry = judge("llamafactory-8261-pg-status.log")
    assert entry.status is Status.CRITICAL
    assert rows(entry) == {("PG 1", 2847, "ALLREDUCE")}
    (group,) = entry.details["process_groups"]
    assert group["last_completed"] == {"rank 0": 2846, "rank 2": 2846}
    assert entry.details["suspect_ranks"] == []


def test_pytorch_152623_desync_report_names_rank_7() -> None:
    entry = judge("pytorch-152623-desync-debug.log")
    assert entry.status is Status.CRITICAL
    assert entry.details["suspect_ranks"] == [7]
    (suspect,) = entry.details["suspects"]
    assert suspect["category"] == "desync"
    assert "finished collective #182, but didn't join collective #183" in suspect["reason"]
    assert any(
        line.startswith("- [0] Timeout at collective: ALLREDUCE, #315")
        for line in entry.details["desync_report"]
    )


def test_arctictraining_219_stuck_watchdog_on_rank_7() -> None:
    entry = judge("arctictraining-219-watchdog-stuck.log")
    assert entry.status is Status.CRITICAL
    assert entry.details["suspect_ranks"] == [7]
    assert entry.details["suspects"][0]["category"] == "watchdog-stuck"
    assert entry.details["watchdog_stuck"][0]["stuck_s"] == 480
    assert rows(entry) == {("PG 0 (default_pg)", 120049, "_ALLGATHER_BASE")}


def test_nccl_1610_two_groups_time_out_apart() -> None:
    entry = judge("nccl-1610-two-groups.log")
    assert entry.status is Status.CRITICAL
    assert rows(entry) == {("PG 112", 57, "ALLREDUCE"), ("PG 119", 216, "ALLTOALL_BASE")}
    by_group = {g["process_group"]: g["last_completed"] for g in entry.details["process_groups"]}
    assert by_group == {"PG 119": {"rank 13": 215}, "PG 112": {"rank 15": 56}}
    assert entry.details["suspect_ranks"] == []


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.log")))
def test_each_fixture_is_one_entry_when_given_with_the_others(name: str) -> None:
    report = detect.analyze_inputs(sorted(DATA.glob("*.log")))
    assert [a.kind for a in report.artefacts] == ["nccl-watchdog"]
    assert str(DATA / name) in report.artefacts[0].details["members"]


def test_crafted_per_rank_logs_of_the_readme_name_the_silent_rank() -> None:
    d = DATA / "crafted-8rank-silent-rank5"
    entry = detect.analyze_inputs([d], layout=parse_layout("tp=2,pp=2,dp=2"), ranks_per_host=4).artefacts[0]
    assert (entry.kind, entry.status) == ("nccl-watchdog", Status.CRITICAL)
    assert entry.details["suspect_ranks"] == [5]
    assert entry.details["suspects"][0]["category"] == "silent"
    assert rows(entry) == {("PG 0 (default_pg)", 4211, "ALLREDUCE")}
    assert entry.details["rank_count"] == 7
