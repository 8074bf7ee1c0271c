"""Property-based tests: every ``analyze`` parser on mutated real samples and generated text.

Contract checked: the public parse/analyse functions return results (or raise the project's own
:class:`~robustctl.stacks.model.DumpParseError` where documented), never another exception; and
``robustctl analyze FILE --json`` exits with a code of the table and prints one valid JSON document.
Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robustctl.analysis import dcgm, nccl_tests, xid
from robustctl.analysis.detect import ArtefactAnalysis, analyze_file, analyze_text, detect_kind
from robustctl.cli.main import main
from robustctl.stacks import analyze as stacks_analyze  # registers the py-spy kind
from robustctl.stacks.model import DumpParseError
from robustctl.stacks.parse import looks_like_pyspy, parse_dump_text, parse_pyspy_text

pytestmark = pytest.mark.fuzz

DATA = Path(__file__).resolve().parents[1] / "data"
SAMPLES = sorted(
    p
    for sub in ("nccl-tests", "kernel-log", "dcgm", "pyspy")
    for p in (DATA / sub).rglob("*")
    if p.is_file() and p.suffix not in (".md", ".src") and p.stat().st_size < 512 * 1024
)
EXIT_CODES = {0, 1, 2, 3, 64, 78}

# Tokens of the formats, so generated text reaches deep into the parsers.
TOKENS = [
    "#",
    "# nThread 1 nGpus 8 minBytes 8 maxBytes 128M step: 2(factor)",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong",
    "# Avg bus bandwidth    : ",
    "# Out of bounds values : 3 FAILED",
    "#  Rank  0 Group  0 Pid  12 on host1 device  0 [0x1b] NVIDIA H100",
    "Test NCCL failure common.cu:1 'unhandled system error'",
    "1048576",
    "262144",
    "float",
    "sum",
    "-1",
    "N/A",
    "1e+300",
    "nan",
    "-0",
    "[  12.345678]",
    "kernel:",
    "NVRM: Xid (PCI:0000:3b:00):",
    "79,",
    "pid=",
    "name=python3",
    "|",
    "+---------------------------+------------------------------------------------+",
    "| Diagnostic                | Result                                         |",
    "|-----  Hardware  ----------+------------------------------------------------|",
    "| Memory                    | Fail - GPU: 0                                  |",
    "| Warning                   | GPU 2 ",
    "Pass",
    "Skip",
    'Thread 123 (idle): "MainThread"',
    "    wait (threading.py:320)",
    "Process 42: python train.py",
    "Error: Failed to open process",
    '{"frames": [',
    '"thread_name"',
    "\u202e",
    "[/]",
    "\x00",
    "\ufffd",
]

text_lines = st.lists(
    st.one_of(
        st.lists(st.one_of(st.sampled_from(TOKENS), st.text(max_size=12)), max_size=12).map(" ".join),
        st.sampled_from(TOKENS),
    ),
    max_size=40,
).map("\n".join)


@st.composite
def mutated_sample(draw: st.DrawFn) -> bytes:
    """A real sample with a few byte flips, truncations, duplicated lines or inserted junk."""
    data = bytearray(draw(st.sampled_from(SAMPLES)).read_bytes())
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["flip", "truncate", "duplicate", "junk", "drop"]))
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[i] = draw(st.integers(0, 255))
        elif op == "truncate":
            del data[i:]
        elif op == "junk":
            junk = draw(st.one_of(st.binary(max_size=40), st.sampled_from(TOKENS).map(str.encode)))
            data[i:i] = junk
        else:
            lines = bytes(data).split(b"\n")
            j = draw(st.integers(0, len(lines) - 1))
            if op == "duplicate":
                lines[j:j] = [lines[j]] * draw(st.integers(1, 5))
            else:
                del lines[j]
            data = bytearray(b"\n".join(lines))
    return bytes(data)


def _all_parsers(text: str) -> None:
    """Every public parser and judge on ``text``; only the documented errors may come out."""
    nccl = nccl_tests.parse_nccl_tests(text)
    nccl_tests.evaluate(nccl, expected_busbw_gbps=100.0)
    nccl_tests.evaluate(nccl_tests.parse_nccl_tests(iter(text.splitlines())))
    nccl_tests.looks_like_nccl_tests(text)
    xid.parse_kernel_log(text)
    list(xid.iter_kernel_log(iter(text.splitlines())))
    diag = dcgm.parse_dcgm_diag(text)
    dcgm.evaluate(diag)
    dcgm.looks_like_dcgm_diag(text)
    looks_like_pyspy(text)
    detect_kind(text)
    for parse in (parse_dump_text, parse_pyspy_text):
        try:
            parse(text)
        except DumpParseError:
            pass
    a = analyze_text(text)
    assert isinstance(a, ArtefactAnalysis)
    assert "analysis failed" not in a.summary, a.summary  # a parser raised: a bug
    json.dumps(stacks_analyze.KIND)


@given(mutated_sample())
def test_parsers_survive_mutated_samples(data: bytes) -> None:
    _all_parsers(data.decode("utf-8", errors="replace"))


@given(text_lines)
def test_parsers_survive_generated_text(text: str) -> None:
    _all_parsers(text)


@given(st.text(max_size=300))
def test_parsers_survive_any_text(text: str) -> None:
    _all_parsers(text)


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    mutated_sample(),
    st.booleans(),
    st.sampled_from([[], ["--layout", "tp=2"], ["-G", "2"], ["--expected-busbw", "100"]]),
)
def test_cli_json_contract(
    capsys: pytest.CaptureFixture[str], data: bytes, compress: bool, extra: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rank0.txt"
        path.write_bytes(gzip.compress(data) if compress else data)
        capsys.readouterr()
        code = main(["analyze", str(path), "--json", *extra])
        out, err = capsys.readouterr()
        assert code in EXIT_CODES, (code, err)
        assert "Traceback" not in err
        if code != 64:
            json.loads(out)
        # The library call agrees and never raises.
        assert analyze_file(path).path == str(path)
