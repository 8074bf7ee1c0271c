"""Property-based tests of the watch rules (issue 22, item 2): any bytes or text as a rank's log tail,
any step-time and loss sequences (NaN, ±Inf, negative, huge), any times and liveness for the hang
rule, and any document as a stored fail-slow state.

Contract: no exception but the documented ones (ValueError for a bad parameter, ConfigError for a
damaged state); verdict classes from the table; evidence, findings, lines and bytes read within their
bounds; verdicts and states are strict JSON; a constant step time never gives fail-slow, and a step
time that doubles at sample k is declared within a bounded delay. Seeded and bounded by the ``ci``
profile (tests/conftest.py); each case is cheap (traces of at most ~130 samples).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robustctl.errors import ConfigError
from robustctl.watch.logscan import (
    CAUSE_NCCL_WARN,
    CAUSE_PRIORITY,
    MAX_DETAIL_CHARS,
    MAX_LINES,
    MAX_TAIL_BYTES,
    LogScan,
    scan_log,
)
from robustctl.watch.rules import (
    DEFAULT_PERSIST_STEPS,
    MAX_EVIDENCE_CHARS,
    MAX_STATE_JSON_CHARS,
    MIN_BASELINE_STEPS,
    FailSlowState,
    SignalClass,
    Verdict,
    detection_delay_and_false_alarms,
    judge_hang,
    judge_losses,
    observe_step_time,
)

pytestmark = pytest.mark.fuzz

DETECTION_DELAY_BOUND = 2 * DEFAULT_PERSIST_STEPS
"""Samples after the onset within which a doubled step time must be declared (the rule needs
``persist_steps`` post-change samples; the rest is slack for a change point found a little late)."""

FRAGMENTS = [
    "Traceback (most recent call last):",
    '  File "/workspace/train.py", line 12, in <module>',
    "    main()",
    "           ^^^^^^",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "CUDA error: device-side assert triggered",
    "cuda runtime error (77) : an illegal memory access",
    "/pytorch/aten/src/ATen/native/cuda/Loss.cu:95: operator(): block: [0,0,0], thread: [1,0,0] Assertion `t >= 0` failed.",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79 GiB",
    "Out of memory: Killed process 4821 (python3) total-vm:1kB",
    "Memory cgroup out of memory: Killed process 77 (",
    "[Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600034 milliseconds before timing out.",
    "Watchdog caught collective operation timeout: WorkNCCL(((((((",
    "Exception (either an error or timeout) detected by watchdog at work: 8, last enqueued NCCL work: 9, last completed NCCL work: 7.",
    "failure detected by watchdog at work sequence id: 1 PG status: last enqueued work: 547, last completed work: -1",
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled system error",
    "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
    "ncclSystemError ncclInternalError ncclUnhandledCudaError",
    "Some NCCL operations have failed or timed out.",
    "node1:12:34 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.1<1> with status=12",
    "[   12.345] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:01:00): 31, Ch 00000013",
    "NVRM: Xid (((((((((((((: 48,",
    "[rank3]: ",
    "[default0]:",
    "[80746] [rank0]:",
    "0: ",
    "\x1b[31m",
    "\x1b[0m",
    "KeyError: 7",
    "During handling of the above exception, another exception occurred:",
    "CUBLAS_STATUS_EXECUTION_FAILED",
    "x" * 5000,
    "(" * 300,
    ":" * 300,
    "\t",
    " ",
    "\u202e",
    "\x00",
    "\ufffd",
]
SEPARATORS = ["\n", "\r\n", "\r", "\x0b", "\u2028", "", " "]

LOG_TEXT = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.sampled_from(SEPARATORS), st.text(max_size=40)), max_size=40
).map("".join)


def _check_scan(scan: LogScan) -> None:
    assert scan.lines_read <= MAX_LINES and scan.bytes_read <= MAX_TAIL_BYTES
    assert len(scan.findings) <= len(CAUSE_PRIORITY) + 1
    assert len({f.cause for f in scan.findings}) == len(scan.findings)
    for f in scan.findings:
        assert len(f.line) <= MAX_EVIDENCE_CHARS and f.line_no >= 1
        assert all(len(v) <= MAX_DETAIL_CHARS for _, v in f.detail if isinstance(v, str))
    fatal = [f.cause for f in scan.findings if f.fatal]
    assert all(c in CAUSE_PRIORITY for c in fatal) and CAUSE_NCCL_WARN not in fatal
    if scan.verdict is None:
        assert fatal == []
        return
    v = scan.verdict
    assert v.signal is SignalClass.CRASH and v.cause == min(fatal, key=CAUSE_PRIORITY.index)
    assert v.rule == f"log.{v.cause}" and v.source
    assert len(v.evidence) <= MAX_EVIDENCE_CHARS
    json.dumps(v.to_json(), allow_nan=False)


@given(tail=st.binary(max_size=4096))
def test_any_bytes_as_a_log_tail(tail: bytes) -> None:
    _check_scan(scan_log(tail))


@given(tail=st.text(max_size=2000))
def test_any_text_as_a_log_tail(tail: str) -> None:
    _check_scan(scan_log(tail))


@given(tail=LOG_TEXT)
def test_log_like_text_as_a_log_tail(tail: str) -> None:
    _check_scan(scan_log(tail))
    _check_scan(scan_log(tail.encode("utf-8", "surrogatepass")))


@settings(max_examples=8)  # each example scans a full MAX_TAIL_BYTES tail
@given(fragment=st.sampled_from(FRAGMENTS), newline=st.sampled_from(["\n", "\r", ""]))
def test_a_tail_past_its_bounds_is_cut(fragment: str, newline: str) -> None:
    line = fragment + newline
    text = line * (MAX_TAIL_BYTES // max(len(line), 1) + 2)
    scan = scan_log(text.encode("utf-8", "surrogatepass"))
    assert scan.cut
    _check_scan(scan)


FLOATS = st.floats(allow_nan=True, allow_infinity=True)
STEP_TIMES = st.one_of(FLOATS, st.floats(min_value=1e-3, max_value=100.0), st.integers(-5, 10**6))


def _check_verdict(v: Verdict | None, allowed: set[SignalClass]) -> None:
    if v is None:
        return
    assert v.signal in allowed and len(v.evidence) <= MAX_EVIDENCE_CHARS and v.source
    json.dumps(v.to_json(), allow_nan=False)


@given(trace=st.lists(STEP_TIMES, max_size=80))
def test_any_step_times_feed_the_fail_slow_rule(trace: list[float]) -> None:
    state = FailSlowState()
    for x in trace:
        state, verdict = observe_step_time(state, x)
        _check_verdict(verdict, {SignalClass.FAIL_SLOW})
    assert state.seen + state.skipped == len(trace)
    text = json.dumps(state.to_json(), allow_nan=False)
    assert len(text) <= MAX_STATE_JSON_CHARS
    assert FailSlowState.from_json(json.loads(text)) == state
    detection_delay_and_false_alarms(trace, None)


@given(value=st.floats(min_value=1e-6, max_value=1e6), n=st.integers(1, 130))
def test_a_constant_step_time_never_gives_fail_slow(value: float, n: int) -> None:
    state = FailSlowState()
    for _ in range(n):
        state, verdict = observe_step_time(state, value)
        assert verdict is None
    assert state.candidate is None or state.slow_since is None


@given(
    base=st.floats(min_value=1e-3, max_value=1e4),
    onset=st.integers(MIN_BASELINE_STEPS, 60),
    jitter=st.lists(st.floats(min_value=-0.03, max_value=0.03), min_size=1, max_size=16),
)
def test_a_doubled_step_time_is_declared_within_a_bounded_delay(
    base: float, onset: int, jitter: list[float]
) -> None:
    n = onset + DETECTION_DELAY_BOUND + 5
    trace = [base * (2.0 if i >= onset else 1.0) * (1.0 + jitter[i % len(jitter)]) for i in range(n)]
    rep = detection_delay_and_false_alarms(trace, onset)
    assert rep.false_alarms == 0
    assert rep.delay_steps is not None and 0 <= rep.delay_steps <= DETECTION_DELAY_BOUND, rep


LOSSES = st.lists(
    st.one_of(FLOATS, st.integers(-(10**6), 10**6), st.floats(min_value=0.5, max_value=12.0)), max_size=200
)


@given(losses=LOSSES, start=st.integers(0, 220))
def test_any_losses_feed_the_loss_rules(losses: list[float], start: int) -> None:
    v = judge_losses(losses, start=start)
    _check_verdict(v, {SignalClass.NAN_LOSS})
    bad = [i for i, x in enumerate(losses) if i >= start and not math.isfinite(x)]
    if bad:
        assert v is not None
    if v is not None:
        index = v.value("index")
        assert isinstance(index, int) and start <= index < len(losses)
        assert not bad or index <= bad[0]


TIMES = st.one_of(st.none(), FLOATS, st.floats(min_value=1.7e9, max_value=1.8e9))


@given(
    newest=TIMES,
    now=st.one_of(FLOATS, st.floats(min_value=1.7e9, max_value=1.8e9)),
    alive=st.sampled_from([True, False, None]),
    steps=st.lists(STEP_TIMES, max_size=30),
    stall=st.one_of(st.none(), FLOATS),
)
def test_any_times_feed_the_hang_rule(
    newest: float | None, now: float, alive: bool | None, steps: list[float], stall: float | None
) -> None:
    try:
        v = judge_hang(newest, now, alive, steps, stall)
    except ValueError as exc:
        assert stall is not None and "stall_after_s" in str(exc)
        return
    _check_verdict(v, {SignalClass.HANG, SignalClass.UNKNOWN})
    if v is not None and v.signal is SignalClass.HANG:
        assert alive is True
        age, bound = v.value("age_s"), v.value("stall_after_s")
        assert isinstance(age, float) and isinstance(bound, float) and age >= bound


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(10**20), 10**20), FLOATS, st.text(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _a_real_state_doc() -> dict[str, Any]:
    state = FailSlowState()
    for i in range(40):
        state, _ = observe_step_time(state, 1.0 + 0.02 * math.sin(i) + (1.0 if i > 25 else 0.0))
    return state.to_json()


REAL_DOC = _a_real_state_doc()


@given(key=st.sampled_from(sorted(REAL_DOC)), value=JSON_VALUES, whole=st.one_of(st.none(), JSON_VALUES))
def test_any_document_as_a_stored_state(key: str, value: Any, whole: Any) -> None:
    doc = whole if whole is not None else {**REAL_DOC, key: value}
    try:
        state = FailSlowState.from_json(doc)
    except ConfigError as exc:
        assert str(exc).startswith("fail-slow state: ") and "\n" not in str(exc)
        return
    for x in (1.0, 2.0, math.nan, 1e-300, 3e6):  # a state it accepts takes further samples
        state, verdict = observe_step_time(state, x)
        _check_verdict(verdict, {SignalClass.FAIL_SLOW})
    assert len(json.dumps(state.to_json(), allow_nan=False)) <= MAX_STATE_JSON_CHARS
