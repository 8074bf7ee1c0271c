"""Property-based tests for the pasted-artefact paths: launcher tags inside nccl-tests rows, rows split
over lines by other ranks' output, the busbw-collapse rule, redacted XID lines.

Contract: no traceback; a row survives any launcher tagging at nccl-tests' write boundaries; an XID
code survives any redaction of the other fields; memory stays bounded on hostile input. Seeded and
bounded by the ``ci`` profile (tests/conftest.py).
"""

from __future__ import annotations

import re
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.analysis.detect import UNKNOWN_KIND, analyze_text, kinds
from robustctl.analysis.nccl_tests import busbw_collapses, evaluate, parse_nccl_tests
from robustctl.analysis.xid import DEVICE_REDACTED, parse_kernel_log
from robustctl.models import Status

pytestmark = pytest.mark.fuzz

DATA = Path(__file__).resolve().parents[1] / "data"
ROW_SOURCES = [
    DATA / "nccl-tests" / n
    for n in (
        "bitdeer-h100-8gpu-1node-allreduce.txt",
        "taylor-h100-8gpu-1node-nvlink-alltoall.txt",
        "crafted-wrong-values-allreduce.txt",
        "recon-busbw-collapse-taylor-h100-alltoall.txt",
    )
]
ROWS = [
    ln.strip()
    for p in ROW_SOURCES
    for ln in p.read_text().splitlines()
    if len(ln.split()) == 13 and ln.split()[0].isdigit()
]
XID_LINES = [
    ln
    for p in (DATA / "kernel-log").glob("*.txt")
    for ln in p.read_text().splitlines()
    if re.search(r"NVRM: Xid \(PCI:[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\): \d+", ln)
]
TAGS = st.one_of(
    st.integers(0, 4095).map(lambda r: f"[{r}]"),
    st.tuples(st.integers(0, 9), st.integers(0, 4095)).map(lambda t: f"[{t[0]},{t[1]}]<stdout>:"),
    st.tuples(st.integers(0, 9), st.integers(0, 4095)).map(lambda t: f"[{t[0]},{t[1]}]<stderr>:"),
)
OTHER_LINES = st.sampled_from(
    [
        "test-nccl-efa-worker-1:21:26 [0] NCCL INFO Connected all rings",
        "node002:41009:41100 [1] NCCL INFO 2 coll channels, 2 p2p channels, 2 p2p channels per peer",
        "NCCL version 2.21.5+cuda12.4",
        "",
    ]
)
REDACTIONS = st.sampled_from(
    ["XXXX:XX:XX", "<redacted>", "****", "...", "[REMOVED]", "xxxx:xx:xx.x", "", "0000:xx:00", "{masked}"]
)


def _pieces(row: str) -> list[str]:
    """A row in nccl-tests' write pieces: parameters, out-of-place result, in-place result."""
    toks = list(re.finditer(r"\S+", row))
    a, b = toks[4].end(), toks[8].end()
    return [row[:a], row[a:b], row[b:]]


@st.composite
def tagged_table(draw: st.DrawFn) -> tuple[list[str], str]:
    rows = draw(st.lists(st.sampled_from(ROWS), min_size=1, max_size=8))
    out: list[str] = []
    for row in rows:
        tag = draw(TAGS)
        line = ""
        for piece in _pieces(row):
            line += draw(st.sampled_from(["", tag])) + piece
            if draw(st.integers(0, 5)) == 0:  # another rank's line ends this one
                out.append(draw(st.sampled_from(["", tag])) + line)
                out.append(draw(TAGS) + draw(OTHER_LINES))
                line = ""
        out.append(draw(st.sampled_from(["", tag])) + line)
    return rows, "\n".join(out)


def _key(text: str) -> list[tuple[object, ...]]:
    return [
        (r.size_bytes, r.count, r.dtype, r.redop, r.root, r.out_of_place, r.in_place)
        for r in parse_nccl_tests(text).rows
    ]


@given(tagged_table())
def test_tagged_and_split_rows_parse_as_the_source(table: tuple[list[str], str]) -> None:
    rows, text = table
    assert _key(text) == _key("\n".join(rows))
    a = analyze_text(text)
    assert a.kind == "nccl-tests" and "analysis failed" not in a.summary


@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=0, max_size=40))
def test_collapse_rule_never_raises_and_needs_a_fall(curve: list[float]) -> None:
    text = "\n".join(
        f"{2**i:12d}  {2**i:12d}  float  sum  -1  1.0  {bw:.2f}  {bw:.2f}  0  1.0  {bw:.2f}  {bw:.2f}  0"
        for i, bw in enumerate(curve)
    )
    result = parse_nccl_tests(text)
    evaluate(result)
    for c in busbw_collapses(result.rows):
        assert all(bw < c.peak_busbw_gbps / 2 for bw in c.busbw_gbps)
        assert len(c.sizes_bytes) >= 2 and c.peak_busbw_gbps >= 1.0


@given(
    st.sampled_from(XID_LINES),
    REDACTIONS,
    st.booleans(),
    st.sampled_from(["pid=****", "pid=<redacted>", "pid='XXXX'", None]),
    st.sampled_from(["name=****", "name=<redacted>", None]),
)
def test_redaction_never_loses_the_code(
    line: str, device: str, keep_pci_prefix: bool, pid: str | None, name: str | None
) -> None:
    (orig,) = parse_kernel_log(line)
    red = re.sub(r"\(PCI:[^)]*\)", f"({'PCI:' if keep_pci_prefix else ''}{device})", line, count=1)
    if pid:
        red = re.sub(r"pid='?[^,']*'?", pid, red, count=1)
    if name:
        red = re.sub(r"name=[^,]*", name, red, count=1)
    (e,) = parse_kernel_log(red)
    assert e.xid == orig.xid and e.pci == DEVICE_REDACTED
    assert e.message == orig.message or e.message.endswith(orig.message.split(", ")[-1])


@given(st.text(max_size=200), TAGS)
def test_tags_in_any_text_never_raise(text: str, tag: str) -> None:
    mixed = tag.join(text.split(" "))
    lines = mixed.splitlines()
    result = parse_nccl_tests(mixed)
    assert len(result.rows) <= len(lines)  # a row takes one line at least
    assert all(1 <= row.line <= len(lines) and row.size_bytes >= 0 for row in result.rows)
    assert [row.line for row in result.rows] == sorted(row.line for row in result.rows)

    log = "NVRM: Xid (" + mixed[:80] + "): 79, " + mixed
    events = parse_kernel_log(log)
    assert len(events) <= len(log.splitlines())
    assert all(e.raw in log.splitlines() and 0 <= e.xid < 10**9 for e in events)
    head = mixed[:80]
    if not set("()") & set(head) and len(("x" + head + "x").splitlines()) == 1:
        # whatever stands between the parentheses, the first line's code is read
        assert events and events[0].xid == 79 and events[0].raw == log.splitlines()[0], events

    a = analyze_text(mixed)
    assert a.kind in {k.name for k in kinds()} | {UNKNOWN_KIND}
    assert isinstance(a.status, Status) and "analysis failed" not in a.summary, a.summary


def test_memory_is_flat_on_endless_row_pieces() -> None:
    """50,000 lines of parameter pieces and tags: the pending piece never grows. The parser's peak is
    a few KiB whatever the count (3.6 KiB at 20,000 and at 200,000 lines); the 1 MiB bound fails on
    anything kept at more than about 20 bytes a line."""

    def lines() -> object:
        for i in range(50_000):
            yield f"[1,0]<stdout>:  {1 << (i % 40)}  {i}  float  sum  -1" + "[0]" * 50

    tracemalloc.start()
    try:
        result = parse_nccl_tests(lines())  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.rows == ()
    assert peak < 1024 * 1024, peak
