"""Property-based tests of the tar and directory reader of ``robustctl analyze`` (robustctl.analysis.sources).

Contract: on any archive (members of every type, hostile names, damaged, compressed or not) and any
directory, :func:`~robustctl.analysis.sources.iter_sources` never raises, reads no member past the
per-member bound, no archive past its member-count and byte bounds, writes nothing to disk; and
``robustctl analyze ARCHIVE --json`` exits with a code of the table and prints one JSON document.
Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robustctl.analysis import sources
from robustctl.analysis.sources import iter_sources
from robustctl.cli.main import main

pytestmark = pytest.mark.fuzz

EXIT_CODES = {0, 1, 2, 3, 64, 78}
MAX_BYTES = 300
CAPS = {"MAX_MEMBERS": 6, "MAX_ARCHIVE_BYTES": 8192, "MAX_HEADER_BYTES": 512}
DUMP = b'Thread 1 (idle): "MainThread"\n    all_reduce (torch/distributed/distributed_c10d.py:12)\n'
NAMES = st.sampled_from(
    [
        "rank0.txt",
        "rank_1.dump",
        "../../etc/evil",
        "/abs/rank2.txt",
        "a/b/rank3.json",
        "x" * 150,
        "d/",
        "ünï.txt",
    ]
)
TYPES = st.sampled_from(
    [
        tarfile.REGTYPE,
        tarfile.REGTYPE,
        tarfile.DIRTYPE,
        tarfile.SYMTYPE,
        tarfile.LNKTYPE,
        tarfile.CHRTYPE,
        tarfile.FIFOTYPE,
    ]
)
member = st.tuples(NAMES, TYPES, st.one_of(st.just(DUMP), st.binary(max_size=700)), st.text(max_size=700))


@st.composite
def archives(draw: st.DrawFn) -> bytes:
    """A tar archive (plain or gzip), possibly cut or with bytes changed."""
    buf = io.BytesIO()
    fmt = draw(st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT]))
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for name, kind, data, pax in draw(st.lists(member, max_size=10)):
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.REGTYPE:
                info.size = len(data)
            else:
                info.linkname = "target"
            if pax and fmt == tarfile.PAX_FORMAT:
                info.pax_headers = {"comment": pax}
            try:
                tf.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
            except ValueError:  # a name the format cannot hold
                continue
    raw = buf.getvalue()
    if draw(st.booleans()):
        raw = gzip.compress(raw)
    cut = draw(st.one_of(st.none(), st.integers(0, max(len(raw) - 1, 0))))
    if cut is not None:
        raw = raw[:cut]
    flips = draw(st.lists(st.tuples(st.integers(0, max(len(raw) - 1, 0)), st.integers(0, 255)), max_size=3))
    b = bytearray(raw)
    for pos, val in flips:
        if pos < len(b):
            b[pos] = val
    return bytes(b)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(archives())
def test_archive_reader_stays_within_its_bounds(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp, mock.patch.multiple(sources, **CAPS):
        path = Path(tmp) / "dumps.tgz"
        path.write_bytes(raw)
        got = list(iter_sources([path], max_bytes=MAX_BYTES))
        assert got, "an archive is always reported, read or not"
        assert len(got) <= CAPS["MAX_MEMBERS"] + 1
        total = 0
        for src in got:
            assert src.name.startswith(str(path))
            assert (src.data is None) != (src.error is None)
            if src.data is not None:
                assert len(src.data) <= MAX_BYTES
                total += len(src.data)
        assert total <= CAPS["MAX_ARCHIVE_BYTES"]
        assert sorted(os.listdir(tmp)) == ["dumps.tgz"]  # nothing extracted


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(archives(), st.sampled_from([[], ["--layout", "tp=2"]]))
def test_cli_on_any_archive_exits_with_a_code_of_the_table(
    capsys: pytest.CaptureFixture[str], raw: bytes, extra: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp, mock.patch.multiple(sources, **CAPS):
        path = Path(tmp) / "dumps.tar.gz"
        path.write_bytes(raw)
        capsys.readouterr()
        code = main(["analyze", str(path), "--json", *extra])
        out, err = capsys.readouterr()
        assert code in EXIT_CODES, (code, err)
        assert "Traceback" not in err
        if code != 64:
            json.loads(out)


entry = st.tuples(
    st.sampled_from(["rank0.txt", "rank1.dump", "notes.md", "sub", "link", "pipe", ".hidden", "rank2.json"]),
    st.sampled_from(["file", "dir", "symlink", "dangling", "fifo"]),
    st.one_of(st.just(DUMP), st.binary(max_size=500)),
)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(entry, max_size=8, unique_by=lambda e: e[0]))
def test_directory_reader_reads_regular_files_only_and_never_blocks(
    entries: list[tuple[str, str, bytes]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "dumps"
        d.mkdir()
        for name, kind, data in entries:
            p = d / name
            if kind == "file":
                p.write_bytes(data)
            elif kind == "dir":
                p.mkdir()
            elif kind == "symlink":
                (Path(tmp) / f"target-{name}").write_bytes(data)
                p.symlink_to(Path(tmp) / f"target-{name}")
            elif kind == "dangling":
                p.symlink_to(Path(tmp) / "nowhere")
            else:
                os.mkfifo(p)
        got = list(iter_sources([d], max_bytes=MAX_BYTES))
        regular = sorted(n for n, k, _ in entries if k == "file")
        assert [Path(s.name).name for s in got if s.data is not None] == regular
        for src in got:
            if src.data is not None:
                assert len(src.data) <= MAX_BYTES + 1
            else:
                assert src.error
        odd = sorted(n for n, k, _ in entries if k != "file")
        assert sorted(Path(s.name).name for s in got if s.skipped) == odd
        if not regular:
            assert any(s.name == str(d) and not s.skipped for s in got)  # never an empty, healthy input


def _info(buf: bytes, cls: type[tarfile.TarInfo]) -> tuple[str, object]:
    """What ``cls.frombuf`` makes of one header: its fields, or the error it raised."""
    try:
        t = cls.frombuf(buf, "utf-8", "surrogateescape")
    except Exception as exc:  # the same class of error either way
        return "error", type(exc).__name__
    return "ok", (t.get_info(), t.type, getattr(t, "_sparse_structs", None))


@st.composite
def headers(draw: st.DrawFn) -> bytes:
    """One 512-byte tar header as GNU, ustar or pax tar writes it, maybe with some bytes changed."""
    info = tarfile.TarInfo(draw(st.text(min_size=1, max_size=220).filter(lambda s: "\x00" not in s)))
    info.size = draw(st.integers(0, 8**11 - 1))
    info.mtime = draw(st.integers(0, 8**11 - 1))
    info.mode = draw(st.integers(0, 0o7777))
    info.uid = draw(st.integers(0, 8**7 - 1))
    info.type = draw(st.sampled_from([tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE]))
    if info.type == tarfile.AREGTYPE and draw(st.booleans()):
        info.name += "/"
    fmt = draw(st.sampled_from([tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT, tarfile.PAX_FORMAT]))
    try:
        raw = info.tobuf(fmt, "utf-8", "surrogateescape")
    except ValueError:  # a name ustar cannot hold
        raw = info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")
    blocks = [raw[i : i + 512] for i in range(0, len(raw), 512)]
    b = bytearray(draw(st.sampled_from(blocks)))
    for pos, val in draw(st.lists(st.tuples(st.integers(0, 511), st.integers(0, 255)), max_size=3)):
        b[pos] = val
    return bytes(b)


@given(headers())
def test_fast_header_decoding_gives_what_tarfile_gives(buf: bytes) -> None:
    assert _info(buf, sources._BoundedTarInfo) == _info(buf, tarfile.TarInfo)
