"""Group kinds of ``analyze``: files claimed by a kind analysed together, one entry per kind."""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from robustctl.analysis import Finding, Verdict, detect
from robustctl.analysis.detect import AnalysisOptions, GroupKind, GroupMember
from robustctl.commands.analyze import analyze_request, run_analyze
from robustctl.models import Status

SEEN: list[tuple[list[str], AnalysisOptions]] = []


def _analyze(members: Sequence[GroupMember], options: AnalysisOptions) -> Verdict:
    SEEN.append(([m.base for m in members], options))
    bad = [m.base for m in members if b"BAD" in m.data]
    if bad:
        return Verdict(
            Status.CRITICAL,
            f"{len(bad)} bad",
            (Finding(Status.CRITICAL, f"bad: {', '.join(bad)}"),),
            {"bad": bad},
        )
    return Verdict(Status.OK, f"{len(members)} members fine", (), {"n": len(members)})


KIND = GroupKind(
    "test-group", "files starting with GRP", lambda base, head: head.startswith(b"GRP"), _analyze
)


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(detect._GROUP_REGISTRY, KIND.name, KIND)
    SEEN.clear()
    yield


NCCL = "# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 1 iters: 1\n"


def test_claimed_files_are_one_entry_at_the_first_members_place(tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    (d / "a.txt").write_text("just some words\n")
    (d / "b0.bin").write_bytes(b"GRP\x00rank0")
    (d / "b1.bin").write_bytes(b"GRP\x00rank1 BAD")
    (d / "c.bin").write_bytes(gzip.compress(b"GRP rank2"))
    report = detect.analyze_inputs([d])
    assert [a.kind for a in report.artefacts] == ["unknown", "test-group"]
    group = report.artefacts[1]
    assert group.status is Status.CRITICAL
    assert group.path == f"{d} (3 files)"
    assert group.details["members"] == [str(d / "b0.bin"), str(d / "b1.bin"), str(d / "c.bin")]
    assert group.details["bad"] == ["b1.bin"]
    assert SEEN[0][0] == ["b0.bin", "b1.bin", "c.bin"]  # the gzip file decompressed and claimed
    assert report.status is Status.CRITICAL


def test_files_given_one_by_one_are_grouped_across_arguments(tmp_path: Path) -> None:
    paths = []
    for r in range(3):
        p = tmp_path / f"rank{r}.log"
        p.write_bytes(b"GRP fine")
        paths.append(p)
    report = detect.analyze_inputs(paths)
    assert len(report.artefacts) == 1
    assert report.artefacts[0].summary == "3 members fine"
    single = detect.analyze_inputs(paths[:1])
    assert single.artefacts[0].path == str(paths[0])


def test_archive_members_are_claimed_including_gzip_ones(tmp_path: Path) -> None:
    tgz = tmp_path / "dumps.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        for name, data in (("r0", b"GRP a"), ("r1.gz", gzip.compress(b"GRP BAD")), ("n.txt", NCCL.encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    report = detect.analyze_inputs([tgz])
    kinds = sorted(a.kind for a in report.artefacts)
    assert "test-group" in kinds
    group = next(a for a in report.artefacts if a.kind == "test-group")
    assert group.details["bad"] == ["r1.gz"]
    assert group.path == f"{tgz} (2 files)"


def test_an_analysis_that_raises_is_unknown_and_a_claim_that_raises_claims_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(members: Sequence[GroupMember], options: AnalysisOptions) -> Verdict:
        raise RuntimeError("broken")

    def bad_claim(base: str, head: bytes) -> bool:
        raise ValueError("claim broken")

    monkeypatch.setitem(detect._GROUP_REGISTRY, KIND.name, GroupKind(KIND.name, "", KIND.claim, boom))
    monkeypatch.setitem(
        detect._GROUP_REGISTRY, "claims-badly", GroupKind("claims-badly", "", bad_claim, boom, 1)
    )
    (tmp_path / "x").write_bytes(b"GRP")
    report = detect.analyze_inputs([tmp_path / "x"])
    (only,) = report.artefacts
    assert only.kind == "test-group"
    assert only.status is Status.UNKNOWN
    assert "analysis failed" in only.summary


def test_group_bounds_make_the_extra_file_unknown_not_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(detect, "MAX_GROUP_MEMBERS", 2)
    for r in range(3):
        (tmp_path / f"r{r}").write_bytes(b"GRP ok")
    report = detect.analyze_inputs([tmp_path])
    assert [a.kind for a in report.artefacts] == ["test-group", "test-group"]
    extra = report.artefacts[1]
    assert extra.status is Status.UNKNOWN
    assert extra.path == str(tmp_path / "r2")
    assert "more than 2 test-group files" in extra.summary
    monkeypatch.setattr(detect, "MAX_GROUP_MEMBERS", 100)
    monkeypatch.setattr(detect, "MAX_GROUP_BYTES", 12)
    report = detect.analyze_inputs([tmp_path])
    assert "past" in report.artefacts[1].summary


def test_names_are_unique_across_both_registries() -> None:
    with pytest.raises(ValueError, match="already registered"):
        detect.register_group_kind(GroupKind("nccl-tests", "", KIND.claim, _analyze))
    with pytest.raises(ValueError, match="already registered"):
        detect.register_kind(
            detect.ArtefactKind("test-group", "", lambda t: False, lambda t, o: Verdict(Status.OK, ""))
        )


def test_layout_serves_the_group_kind_instead_of_forcing_the_pyspy_reading(tmp_path: Path) -> None:
    (tmp_path / "rank0.dump").write_bytes(b"GRP fine")
    result = run_analyze(analyze_request([tmp_path], layout="tp=2,dp=1", ranks_per_host=2))
    assert result.kind == "analyze"
    (entry,) = result.report.artefacts  # type: ignore[union-attr]
    assert entry.kind == "test-group"
    options = SEEN[-1][1]
    assert options.layout is not None and options.layout.tp == 2
    assert options.ranks_per_host == 2
