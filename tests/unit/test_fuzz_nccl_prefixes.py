"""Property-based tests of launcher line prefixes as a class (:mod:`robustctl.analysis.nccl_tests`):
every real nccl-tests output of tests/data/nccl-tests (tables, and runs that failed before theirs),
each line wrapped in a generated stack of launcher tags (bracketed ``[1,0]<stdout>:`` / ``[0]`` /
``[timestamp]``, parenthesised Ray ``(RayWorker pid=N, ip=...)``, ``host:`` and ``N:`` labels,
timestamps; in any order, one stack per line or one for the whole run), parses to exactly the result
of the unprefixed text (same rows and values, ranks, error lines, hosts), gets the same verdict and is
recognised as the same kind.
Seeded and bounded by the ``ci`` profile (tests/conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.analysis.detect import analyze_text
from robustctl.analysis.nccl_tests import MAX_PREFIX_TAGS, evaluate, parse_nccl_tests

pytestmark = pytest.mark.fuzz

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl-tests"
REAL_TABLES = (
    "bitdeer-h100-8gpu-1node-allreduce.txt",
    "taylor-h100-8gpu-1node-nvlink-alltoall.txt",
    "llminsights-a40-4gpu-sys-p2pdisabled-allreduce.txt",
    "issue-nccltests37-v100-8gpu-allgather-oob-failed.txt",
    "issue-nccltests287-rtx5090-1gpu-alltoall-avg0.txt",
)
REAL_FAILED_RUNS = (
    "issue-nccltests264-h100-8gpu-cuda-system-not-initialized.txt",
    "issue-nccltests252-h100-2node-ib-completion-error.txt",
    "issue-nccltests14-docker-8gpu-socket-no-interface.txt",
    "issue-nccltests5-p100-8gpu-nccl1-unhandled-cuda.txt",
    "issue-nccl1705-h100-nvls-invalid-argument.txt",
)
TEXTS = {name: (DATA / name).read_text() for name in REAL_TABLES + REAL_FAILED_RUNS}
KINDS = {name: analyze_text(text).kind for name, text in TEXTS.items()}

_RANK = st.integers(0, 4095)
_PID = st.integers(1, 4_194_304)
_IP = st.integers(1, 254).map(lambda n: f"127.0.0.{n}")
_HOST = st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,12}(\.[a-z][a-z0-9]{0,6}){0,2}", fullmatch=True)
_STAMP = st.tuples(
    st.integers(2000, 2099), st.integers(1, 12), st.integers(1, 28), st.integers(0, 23), st.integers(0, 59)
).map(lambda t: f"{t[0]:04d}-{t[1]:02d}-{t[2]:02d}T{t[3]:02d}:{t[4]:02d}:07")

# Tags that may be glued to what follows them ...
GLUED = st.one_of(
    _RANK.map(lambda r: f"[{r}]"),
    st.tuples(st.integers(0, 9), _RANK, st.sampled_from(["stdout", "stderr"])).map(
        lambda t: f"[{t[0]},{t[1]}]<{t[2]}>:"
    ),
    _STAMP.map(lambda s: f"[{s}Z]"),
    _HOST.map(lambda h: f"[{h}]"),
    st.tuples(
        st.sampled_from(["RayWorker", "RayWorkerWrapper", "WorkerDict", "TrainTrainable"]), _PID, _IP
    ).map(lambda t: f"({t[0]} pid={t[1]}, ip={t[2]})"),
    st.tuples(_PID, _IP).map(lambda t: f"(pid={t[0]}, ip={t[1]})"),
    _PID.map(lambda p: f"(pid={p})"),
)
# ... and tags that need white space after them (labels and bare timestamps).
SPACED = st.one_of(
    _HOST.map(lambda h: f"{h}:"),
    _RANK.map(lambda r: f"{r}:"),
    _STAMP.map(lambda s: s.replace("T", " ") + ",123"),
    _STAMP.map(lambda s: f"{s}.123456+00:00"),
)


@st.composite
def prefix_stack(draw: st.DrawFn) -> str:
    """A run of 1..4 tags in any order, each glued or followed by white space as the grammar allows."""
    out = ""
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            out += draw(GLUED) + draw(st.sampled_from(["", " ", "  "]))
        else:
            out += draw(SPACED) + draw(st.sampled_from([" ", "  ", "\t"]))
    return out


@st.composite
def prefixed(draw: st.DrawFn) -> tuple[str, str]:
    """A real output and the same output with a prefix stack on every line (per line or per run)."""
    name = draw(st.sampled_from(sorted(TEXTS)))
    lines = TEXTS[name].splitlines()
    if draw(st.booleans()):
        stack = draw(prefix_stack())
        wrapped = [stack + ln for ln in lines]
    else:
        wrapped = [draw(prefix_stack()) + ln for ln in lines]
    return name, "\n".join(wrapped)


@given(prefixed())
def test_a_prefix_stack_changes_nothing(case: tuple[str, str]) -> None:
    name, text = case
    plain = parse_nccl_tests(TEXTS[name])
    got = parse_nccl_tests(text)
    assert got == plain, name
    a, b = evaluate(got), evaluate(plain)
    assert (a.status, a.summary, [f.message for f in a.findings]) == (
        b.status,
        b.summary,
        [f.message for f in b.findings],
    )
    assert analyze_text(text).kind == KINDS[name]


def test_the_fixtures_parse_as_their_threads_say() -> None:
    """The baseline of the property: every table fixture has rows, every failed run has error lines."""
    for name in REAL_TABLES:
        assert parse_nccl_tests(TEXTS[name]).rows, name
    for name in REAL_FAILED_RUNS:
        r = parse_nccl_tests(TEXTS[name])
        assert r.failed and not r.rows, name


@given(st.lists(st.one_of(GLUED, SPACED), min_size=MAX_PREFIX_TAGS + 1, max_size=MAX_PREFIX_TAGS + 8))
def test_a_line_of_only_tags_never_raises(tags: list[str]) -> None:
    line = (
        " ".join(tags) + "  1048576  262144  float  sum  -1  20.00  52.43  91.75  0  20.00  52.43  91.75  0"
    )
    result = parse_nccl_tests(line)
    assert len(result.rows) <= 1
