"""``robustctl analyze`` of directories and tar archives: the same verdict as the files they hold,
every odd entry (FIFO, subdirectory, link, device member, non-dump member) named with its reason,
damaged archives and archives past their bounds an UNKNOWN input, never a hang or a traceback."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest

from robustctl.analysis import sources
from robustctl.analysis.sources import Source, iter_sources
from robustctl.cli.main import main
from robustctl.exit_codes import ExitCode

DATA = Path(__file__).resolve().parents[1] / "data"
HANG = DATA / "pyspy" / "captured-minimegatron-compute-hang"
LAYOUT = ["--layout", "tp=2,pp=2,dp=2", "-G", "2"]
XID = DATA / "kernel-log" / "xid-lines.txt"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["analyze", *args, "--json", "-q"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, json.loads(out)


def verdict(doc: Any) -> Any:
    """The report without what names the inputs (``inputs``, each process's ``source``) or times the run."""
    if isinstance(doc, dict):
        return {k: verdict(v) for k, v in doc.items() if k not in ("inputs", "elapsed_s", "source")}
    if isinstance(doc, list):
        return [verdict(v) for v in doc]
    return doc


def dumps_dir(tmp_path: Path) -> Path:
    d = tmp_path / "dumps"
    d.mkdir()
    for p in sorted(HANG.glob("rank*.dump")):
        shutil.copy(p, d / p.name)
    return d


def tgz(path: Path, members: dict[str, bytes], *, extra: list[tarfile.TarInfo] | None = None) -> Path:
    with tarfile.open(path, "w:gz" if path.name.endswith("gz") else "w") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for info in extra or []:
            tf.addfile(info)
    return path


def hang_members(prefix: str = "dumps/") -> dict[str, bytes]:
    return {f"{prefix}{p.name}": p.read_bytes() for p in sorted(HANG.glob("rank*.dump"))}


def test_directory_and_archive_give_the_verdict_of_the_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = [str(p) for p in sorted(HANG.glob("rank*.dump"))]
    code_f, by_files = run(capsys, *files, *LAYOUT)
    code_d, by_dir = run(capsys, str(dumps_dir(tmp_path)), *LAYOUT)
    archive = tgz(tmp_path / "dumps.tgz", hang_members())
    code_t, by_tar = run(capsys, str(archive), *LAYOUT)
    assert code_f == code_d == code_t == ExitCode.CRITICAL
    assert by_files["suspect_ranks"]  # the hang is found, and found alike
    assert verdict(by_dir) == verdict(by_files) == verdict(by_tar)
    assert [i["ranks"] for i in by_tar["inputs"]] == [i["ranks"] for i in by_files["inputs"]]
    assert by_tar["inputs"][0]["path"] == f"{archive}:dumps/rank0.dump"
    assert by_dir["inputs"][0]["path"] == str(tmp_path / "dumps" / "rank0.dump")
    # without a layout too: every input is a dump, so they are clustered together
    code, doc = run(capsys, str(archive))
    assert code == ExitCode.CRITICAL and doc["kind"] == "stacks"


def test_rank_comes_from_the_member_name_not_the_archive_name(tmp_path: Path) -> None:
    from robustctl.stacks.analyze import load_dumps

    text = (HANG / "rank3.dump").read_bytes()
    archive = tgz(tmp_path / "rank9.tgz", {"x/rank_5.txt": text, "noname.txt": text})
    _dumps, inputs = load_dumps([archive])
    assert [i.path for i in inputs] == [f"{archive}:x/rank_5.txt", f"{archive}:noname.txt"]
    assert [i.ranks for i in inputs] == ["5", ""]


def test_inputs_mix_files_directories_and_archives_in_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    members = hang_members("")
    first = {k: v for k, v in members.items() if k < "rank4"}
    d = tmp_path / "d"
    d.mkdir()
    for name in ("rank4.dump", "rank5.dump"):
        shutil.copy(HANG / name, d / name)
    archive = tgz(tmp_path / "a.tar.gz", first)
    code, doc = run(capsys, str(archive), str(d), str(HANG / "rank6.dump"), str(HANG / "rank7.dump"), *LAYOUT)
    _, by_files = run(capsys, *(str(p) for p in sorted(HANG.glob("rank*.dump"))), *LAYOUT)
    assert code == ExitCode.CRITICAL and verdict(doc) == verdict(by_files)
    assert [i["path"].rsplit("/", 1)[-1].rsplit(":", 1)[-1] for i in doc["inputs"]] == [
        f"rank{r}.dump" for r in range(8)
    ]


def test_empty_directory_is_an_input_that_could_not_be_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code, doc = run(capsys, str(empty))
    assert code == ExitCode.UNKNOWN
    (a,) = doc["artefacts"]
    assert a["status"] == "unknown" and "empty directory" in a["summary"] and str(empty) in a["summary"]
    code, doc = run(capsys, str(empty), *LAYOUT)
    assert code == ExitCode.UNKNOWN and "empty directory" in json.dumps(doc["inputs"])


def test_fifo_subdirectory_and_links_in_a_directory_are_skipped_with_their_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = dumps_dir(tmp_path)
    os.mkfifo(d / "zz-pipe")
    (d / "sub").mkdir()
    (d / "sub" / "rank99.txt").write_text("never read")
    os.symlink(HANG / "rank0.dump", d / "link-rank0.dump")
    os.symlink(tmp_path / "missing", d / "dangling")
    code, doc = run(capsys, str(d), *LAYOUT)  # the FIFO must not block
    _, by_files = run(capsys, *(str(p) for p in sorted(HANG.glob("rank*.dump"))), *LAYOUT)
    assert code == ExitCode.CRITICAL and verdict(doc) == verdict(by_files)
    skipped = {Path(i["path"]).name: i["error"] for i in doc["inputs"] if i["status"] == "skipped"}
    assert set(skipped) == {"zz-pipe", "sub", "link-rank0.dump", "dangling"}
    assert "FIFO" in skipped["zz-pipe"] and "subdirectory" in skipped["sub"]
    assert "symbolic link" in skipped["link-rank0.dump"] and "symbolic link" in skipped["dangling"]


def test_directory_with_no_regular_file_is_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "d"
    d.mkdir()
    os.mkfifo(d / "pipe")
    code, doc = run(capsys, str(d))
    assert code == ExitCode.UNKNOWN
    statuses = {a["status"] for a in doc["artefacts"]}
    assert statuses == {"skipped", "unknown"} and "no regular file" in json.dumps(doc)


def test_directory_of_other_artefacts_is_explained_file_by_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    shutil.copy(XID, d / "kern.log")
    shutil.copy(DATA / "nccl-tests" / "bitdeer-h100-8gpu-1node-allreduce.txt", d / "nccl.txt")
    code, doc = run(capsys, str(d))
    assert doc["kind"] == "analyze" and code == ExitCode.CRITICAL
    assert [(Path(a["path"]).name, a["kind"]) for a in doc["artefacts"]] == [
        ("kern.log", "kernel-log"),
        ("nccl.txt", "nccl-tests"),
    ]


def test_corrupt_and_truncated_archives_are_unknown_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    garbage = tmp_path / "garbage.tgz"
    garbage.write_bytes(b"\x1f\x8b\x08\x00not a gzip stream at all" * 10)
    good = tgz(tmp_path / "good.tar", hang_members())  # uncompressed: half of it holds whole members
    truncated = tmp_path / "truncated.tar"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    plain = tmp_path / "plain.tar"
    plain.write_bytes(b"x" * 700)
    for bad in (garbage, truncated, plain):
        code, doc = run(capsys, str(bad))
        assert code == ExitCode.UNKNOWN and "corrupt or truncated archive" in json.dumps(doc)
        code, doc = run(capsys, str(bad), str(HANG / "rank0.dump"), *LAYOUT)
        unknown = [i for i in doc["inputs"] if i["status"] == "unknown"]
        assert unknown and "corrupt or truncated archive" in unknown[-1]["error"]
        assert str(bad) in unknown[-1]["error"]
        assert any(i["path"].endswith("rank0.dump") and i["status"] == "ok" for i in doc["inputs"])
    # the members before the damage are read
    code, doc = run(capsys, str(truncated), *LAYOUT)
    assert sum(1 for i in doc["inputs"] if i["status"] == "ok") >= 1


def test_archive_bounds_stop_reading_and_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tgz(tmp_path / "bomb.tgz", hang_members())
    monkeypatch.setattr(sources, "MAX_MEMBERS", 3)
    _code, doc = run(capsys, str(archive), *LAYOUT)
    assert sum(1 for i in doc["inputs"] if i["status"] == "ok") == 3
    assert doc["inputs"][-1]["status"] == "unknown" and "more than 3 members" in doc["inputs"][-1]["error"]
    monkeypatch.setattr(sources, "MAX_MEMBERS", 1000)
    monkeypatch.setattr(sources, "MAX_ARCHIVE_BYTES", 20_000)
    _code, doc = run(capsys, str(archive), *LAYOUT)
    assert doc["inputs"][-1]["status"] == "unknown"
    assert "uncompressed: the rest not read" in doc["inputs"][-1]["error"]
    # a member larger than the per-member bound is not read (reading stops at the bound)
    big = tgz(tmp_path / "big.tgz", {"rank0.txt": b"x" * 5000, "rank1.txt": b"y" * 10})
    got = list(iter_sources([big], max_bytes=100))
    assert got[0].data is None and got[0].error is not None and "larger than" in got[0].error
    assert got[1].data == b"y" * 10


def test_oversized_extended_header_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "pax.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo("rank0.txt")
        info.pax_headers = {"comment": "z" * 5000}
        info.size = 3
        tf.addfile(info, io.BytesIO(b"abc"))
    monkeypatch.setattr(sources, "MAX_HEADER_BYTES", 1000)
    (src,) = list(iter_sources([path], max_bytes=100))
    assert src.data is None and src.error is not None and "extended header" in src.error
    monkeypatch.setattr(sources, "MAX_HEADER_BYTES", 1 << 20)
    (src,) = list(iter_sources([path], max_bytes=100))
    assert src.data == b"abc"


def test_link_device_and_directory_members(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = []
    for name, kind in (("sym", tarfile.SYMTYPE), ("hard", tarfile.LNKTYPE), ("dev", tarfile.CHRTYPE)):
        info = tarfile.TarInfo(name)
        info.type = kind
        info.linkname = "/etc/passwd" if kind != tarfile.CHRTYPE else ""
        extra.append(info)
    d = tarfile.TarInfo("dumps")
    d.type = tarfile.DIRTYPE
    extra.append(d)
    archive = tgz(tmp_path / "odd.tgz", hang_members(), extra=extra)
    code, doc = run(capsys, str(archive), *LAYOUT)
    assert code == ExitCode.CRITICAL
    skipped = {i["path"].rsplit(":", 1)[-1]: i["error"] for i in doc["inputs"] if i["status"] == "skipped"}
    assert set(skipped) == {"sym", "hard", "dev"}  # the directory member is passed over
    assert "symbolic link" in skipped["sym"] and "hard link" in skipped["hard"]
    assert "character device" in skipped["dev"]


def test_archive_with_non_dump_members(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    members = {
        **hang_members(),
        "dumps/README.md": b"# saved on 2024-05-01\n",
        "dumps/kern.log": XID.read_bytes(),
    }
    archive = tgz(tmp_path / "mixed.tgz", members)
    code, doc = run(capsys, str(archive), *LAYOUT)
    assert doc["kind"] == "stacks" and code == ExitCode.CRITICAL  # the hang is still named
    unknown = {i["path"].rsplit("/", 1)[-1]: i["error"] for i in doc["inputs"] if i["status"] == "unknown"}
    assert set(unknown) == {"README.md", "kern.log"}
    assert "kernel-log" in unknown["kern.log"]
    # without a layout not every input is a dump: each member is explained alone
    code, doc = run(capsys, str(archive))
    assert doc["kind"] == "analyze" and code == ExitCode.CRITICAL
    kinds = {a["path"].rsplit("/", 1)[-1]: a["kind"] for a in doc["artefacts"]}
    assert kinds["kern.log"] == "kernel-log" and kinds["rank0.dump"] == "pyspy"


def test_empty_archive_is_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archive = tgz(tmp_path / "empty.tgz", {})
    code, doc = run(capsys, str(archive))
    assert code == ExitCode.UNKNOWN and "no regular file in the archive" in json.dumps(doc)


def test_sources_of_files_keep_the_file_errors(tmp_path: Path) -> None:
    missing = tmp_path / "missing.txt"
    (src,) = list(iter_sources([missing], max_bytes=10))
    assert src == Source(str(missing), "missing.txt", error="no such file", unopened=True)
    big = tmp_path / "big.txt"
    big.write_bytes(b"a" * 50)
    (src,) = list(iter_sources([big], max_bytes=10))
    assert src.data == b"a" * 11  # one byte past the bound: the caller sees it is over
