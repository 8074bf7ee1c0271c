"""Regression cases of the watch rules (issue 22, item 2): hang, fail-slow, nan-loss and the log
classifier, each on the values and log text a real job produces.

The log texts below are written for these tests in the exact formats of their sources (PyTorch's
ProcessGroupNCCL watchdog and NCCLUtils messages, PyTorch's CUDA and allocator errors, the Linux OOM
killer, Python tracebacks with torchrun's rank prefixes), with this project's own hosts, ranks and
numbers; public reports show the same shapes (e.g. pytorch/pytorch#81628 for ``NCCL WARN NET/IB``,
NVIDIA/nccl#2076 for ``ncclRemoteError``, hiyouga/LlamaFactory#7396 for watchdog timeouts with
``[rankN]:`` prefixes, equinor/ert#7797 for the OOM killer's line). The XID case reads the real,
verbatim kernel-log sample ``tests/data/kernel-log/xid-lines.txt``.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from robustctl.config import check_regex
from robustctl.errors import ConfigError
from robustctl.watch import logscan
from robustctl.watch.logscan import (
    CAUSE_CUDA,
    CAUSE_NCCL_ERROR,
    CAUSE_NCCL_TIMEOUT,
    CAUSE_NCCL_WARN,
    CAUSE_OOM,
    CAUSE_PYTHON,
    CAUSE_XID,
    MAX_LINES,
    MAX_TAIL_BYTES,
    scan_log,
)
from robustctl.watch.rules import (
    DEFAULT_PERSIST_STEPS,
    HANG_MAX_DEFAULT_STALL_S,
    HANG_MIN_STALL_S,
    HANG_UNMEASURED_STALL_S,
    MAX_EVIDENCE_CHARS,
    MAX_STATE_JSON_CHARS,
    MAX_TRACE_SAMPLES,
    MAX_VALUES,
    MIN_BASELINE_STEPS,
    RUN_LENGTH_MAX,
    FailSlowParams,
    FailSlowState,
    SignalClass,
    Verdict,
    default_stall_after_s,
    detection_delay_and_false_alarms,
    judge_hang,
    judge_losses,
    observe_step_time,
    p99,
    rolling_median_ratio,
)

DATA = Path(__file__).resolve().parents[1] / "data"
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z, a fixed clock


# ------------------------------------------------------------------------------------------- hang


def test_hang_with_no_step_time_measured_waits_the_unmeasured_bound() -> None:
    assert judge_hang(T0, T0 + HANG_UNMEASURED_STALL_S - 1, True) is None
    v = judge_hang(T0, T0 + HANG_UNMEASURED_STALL_S + 134, True)
    assert v is not None and v.signal is SignalClass.HANG and v.rule == "hang.stall"
    assert v.value("stall_after_s") == 600.0 and v.value("stall_after_from") == "unmeasured"
    assert v.value("age_s") == 734.0 and v.value("p99_step_s") is None
    assert "no new step for 734 s" in v.evidence and "every rank is alive" in v.evidence
    assert "2509.16293" in v.source


def test_hang_bound_is_ten_times_the_p99_step_time() -> None:
    steps = [30.0] * 99 + [31.0]  # p99 (nearest rank) = 30 s -> 300 s
    assert default_stall_after_s(steps) == (300.0, "10 x p99")
    assert judge_hang(T0, T0 + 299, True, steps) is None
    v = judge_hang(T0, T0 + 301, True, steps)
    assert v is not None and v.signal is SignalClass.HANG and v.value("p99_step_s") == 30.0


def test_hang_bound_has_a_floor_and_a_ceiling() -> None:
    fast = [0.5] * 50  # 10 x 0.5 s = 5 s -> the 120 s floor
    assert default_stall_after_s(fast) == (HANG_MIN_STALL_S, "floor")
    assert judge_hang(T0, T0 + 119, True, fast) is None
    assert judge_hang(T0, T0 + 121, True, fast) is not None
    compile_step = [1800.0, 2.0]  # a first step that compiled for half an hour: p99 = 1800 s
    assert default_stall_after_s(compile_step) == (HANG_MAX_DEFAULT_STALL_S, "ceiling")


def test_p99_ignores_readings_that_are_not_step_times() -> None:
    assert p99([math.nan, math.inf, -math.inf, -3.0, 0.0, 1e12]) is None
    assert p99([math.nan, 2.0, -1.0, 4.0]) == 4.0
    assert p99([]) is None


def test_a_dead_rank_is_not_a_hang_and_unknown_liveness_is_not_healthy() -> None:
    assert judge_hang(T0, T0 + 10_000, False) is None  # a crash, judged by the crash rules
    v = judge_hang(T0, T0 + 10_000, None)
    assert v is not None and v.signal is SignalClass.UNKNOWN and v.rule == "hang.liveness-unknown"
    assert judge_hang(T0, T0 + 5, None) is None  # steps advance: no hang whatever the liveness


def test_hang_rule_says_unknown_when_it_cannot_tell() -> None:
    no_progress = judge_hang(None, T0, True)
    assert no_progress is not None and no_progress.signal is SignalClass.UNKNOWN
    assert no_progress.rule == "hang.no-progress"
    bad = judge_hang(math.nan, T0, True)
    assert bad is not None and bad.signal is SignalClass.UNKNOWN and bad.rule == "hang.bad-time"
    bad_now = judge_hang(T0, math.inf, True)
    assert bad_now is not None and bad_now.rule == "hang.bad-time"
    ahead = judge_hang(T0 + 3600, T0, True)  # the host's clock runs an hour ahead
    assert ahead is not None and ahead.signal is SignalClass.UNKNOWN and ahead.rule == "hang.clock-skew"
    assert judge_hang(T0 + 30, T0, True) is None  # within the skew tolerance: a fresh step


def test_explicit_stall_bound_is_used_and_checked() -> None:
    v = judge_hang(T0, T0 + 61, True, [1.0] * 100, stall_after_s=60)
    assert v is not None and v.value("stall_after_from") == "set" and v.value("stall_after_s") == 60.0
    for bad in (0, -1.0, math.nan, math.inf, 1e12, True):
        with pytest.raises(ValueError, match="stall_after_s"):
            judge_hang(T0, T0 + 61, True, stall_after_s=bad)  # type: ignore[arg-type]


# -------------------------------------------------------------------------------------- fail-slow


def _run(
    trace: list[float], params: FailSlowParams | None = None
) -> tuple[FailSlowState, list[Verdict | None]]:
    state = FailSlowState()
    out: list[Verdict | None] = []
    for x in trace:
        state, verdict = observe_step_time(state, x, params)
        out.append(verdict)
    return state, out


def _jitter(i: int) -> float:
    """A fixed ±3 % pattern (no randomness in a regression case)."""
    return 1.0 + 0.03 * math.sin(i * 1.7)


def test_a_constant_step_time_never_gives_fail_slow() -> None:
    _, verdicts = _run([2.5] * 400)
    assert verdicts == [None] * 400


def test_a_doubled_step_time_is_declared_after_persist_steps() -> None:
    onset = 120
    trace = [(2.0 if i >= onset else 1.0) * _jitter(i) for i in range(200)]
    _, verdicts = _run(trace)
    first = next(i for i, v in enumerate(verdicts) if v is not None)
    assert first == onset + DEFAULT_PERSIST_STEPS - 1
    v = verdicts[first]
    assert v is not None and v.signal is SignalClass.FAIL_SLOW and v.rule == "fail-slow.bocpd"
    assert v.value("change_index") == onset
    ratio = v.value("ratio")
    assert isinstance(ratio, float) and 1.8 < ratio < 2.2
    assert isinstance(v.value("rolling_ratio"), float)
    change_prob = v.value("change_prob")
    assert isinstance(change_prob, float) and change_prob >= 0.8
    assert "0710.3742" in v.source and "2410.12588" in v.source
    assert all(x is not None for x in verdicts[first:])  # it lasts while the job stays slow


def test_a_short_burst_and_periodic_checkpoint_steps_are_not_fail_slow() -> None:
    burst = [(2.0 if 100 <= i < 105 else 1.0) * _jitter(i) for i in range(200)]  # half of persist_steps
    assert _run(burst)[1] == [None] * 200
    checkpoints = [(10.0 if i % 50 == 49 else 1.0) * _jitter(i) for i in range(500)]
    assert _run(checkpoints)[1] == [None] * 500


def test_a_slowdown_below_slow_factor_is_not_fail_slow() -> None:
    trace = [(1.1 if i >= 100 else 1.0) * _jitter(i) for i in range(300)]
    assert _run(trace)[1] == [None] * 300
    assert any(_run(trace, FailSlowParams(slow_factor=1.05))[1])  # a lower factor does see it


def test_the_episode_ends_when_the_job_recovers() -> None:
    trace = [(3.0 if 100 <= i < 160 else 1.0) * _jitter(i) for i in range(260)]
    state, verdicts = _run(trace)
    assert verdicts[100 + DEFAULT_PERSIST_STEPS - 1] is not None
    assert verdicts[159] is not None
    assert all(v is None for v in verdicts[160 + DEFAULT_PERSIST_STEPS :])
    assert state.slow_since is None and state.candidate is None


def test_unusable_step_times_are_skipped_not_judged() -> None:
    onset = 60
    clean = [(2.0 if i >= onset else 1.0) * _jitter(i) for i in range(100)]
    dirty: list[float] = []
    for i, x in enumerate(clean):
        dirty.append(x)
        if i % 7 == 0:
            dirty.extend([math.nan, math.inf, 0.0, -1.0, 1e300])
    state_clean, _ = _run(clean)
    state_dirty, _ = _run(dirty)
    assert state_dirty.skipped == 5 * len(range(0, 100, 7)) and state_clean.skipped == 0
    assert state_dirty.seen == state_clean.seen == 100
    assert state_dirty.slow_since == state_clean.slow_since == onset + DEFAULT_PERSIST_STEPS - 1


def test_state_is_small_json_that_resumes_exactly() -> None:
    onset = 150
    trace = [(1.6 if i >= onset else 1.0) * _jitter(i) for i in range(220)]
    straight_state, straight = _run(trace)
    state = FailSlowState()
    resumed: list[Verdict | None] = []
    for x in trace:  # as `watch --once` would: the state goes through the store (JSON) every sample
        state = FailSlowState.from_json(json.loads(json.dumps(state.to_json(), allow_nan=False)))
        state, verdict = observe_step_time(state, x)
        resumed.append(verdict)
    assert resumed == straight and state == straight_state
    text = json.dumps(state.to_json(), allow_nan=False)
    assert len(text) <= MAX_STATE_JSON_CHARS
    assert len(state.log_probs) == RUN_LENGTH_MAX and len(state.recent) == RUN_LENGTH_MAX


def _valid_state_doc() -> dict[str, object]:
    state, _ = _run([1.0 * _jitter(i) for i in range(30)])
    return state.to_json()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"v": 2}, "version"),
        ({"extra": 1}, "unknown keys"),
        ({"seen": -1}, "seen"),
        ({"seen": True}, "seen"),
        ({"mu": [0.0]}, "differ in length"),
        ({"kappa": [-1.0] * 31}, "kappa"),
        ({"alpha": [1e300] * 31}, "alpha"),
        ({"mu": [-1e6] * 31}, "mu holds"),
        ({"log_probs": [3.0] * 31}, "log_probs"),
        ({"origin": 1e9}, "origin outside"),
        ({"beta": [math.nan] * 31}, "finite"),
        ({"recent": [0.0] * 10}, "recent"),
        ({"recent": [1.0] * (RUN_LENGTH_MAX + 1)}, "at most"),
        ({"candidate": 99, "baseline": 1.0, "change_prob": 0.9}, "candidate"),
        ({"candidate": 5}, "together"),
        ({"slow_since": 3}, "slow_since"),
        ({"origin": None}, "origin"),
    ],
)
def test_a_damaged_state_is_a_one_line_config_error(change: dict[str, object], message: str) -> None:
    doc = {**_valid_state_doc(), **change}
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        FailSlowState.from_json(doc)
    assert str(info.value).startswith("fail-slow state: ") and "\n" not in str(info.value)
    assert info.value.exit_code == 78


def test_state_from_json_refuses_what_is_not_an_object() -> None:
    for doc in (None, [], "state", 3):
        with pytest.raises(ConfigError, match="not a JSON object"):
            FailSlowState.from_json(doc)
    missing = _valid_state_doc()
    del missing["recent"]
    with pytest.raises(ConfigError, match="missing keys"):
        FailSlowState.from_json(missing)


def test_fail_slow_params_are_bounded() -> None:
    for kwargs in (
        {"slow_factor": 1.0},
        {"slow_factor": math.nan},
        {"slow_factor": 1000.0},
        {"persist_steps": 0},
        {"persist_steps": 33},
        {"persist_steps": 2.5},
        {"cp_threshold": 1.0},
        {"hazard_lambda": 1.0},
    ):
        with pytest.raises(ValueError):
            FailSlowParams(**kwargs)  # type: ignore[arg-type]


def test_rolling_median_ratio() -> None:
    assert rolling_median_ratio([1.0] * (MIN_BASELINE_STEPS + 3), 3) == 1.0
    assert rolling_median_ratio([1.0] * (MIN_BASELINE_STEPS + 2), 3) is None  # too short a baseline
    # the lower median: 2 slow samples out of 4 are not "most of them"
    assert rolling_median_ratio([1.0] * 12 + [1.0, 1.0, 3.0, 3.0], 4) == 1.0
    assert rolling_median_ratio([1.0] * 12 + [1.0, 3.0, 3.0, 3.0], 4) == 3.0


def test_detection_delay_and_false_alarms_on_traces() -> None:
    healthy = [(10.0 if i % 50 == 49 else 1.0) * _jitter(i) for i in range(400)]
    rep = detection_delay_and_false_alarms(healthy, None)
    assert rep.samples == 400 and rep.false_alarms == 0 and rep.detected_index is None
    assert rep.delay_steps is None and rep.median_rule_false_alarms == 0
    onset = 200
    slow = [(2.0 if i >= onset else 1.0) * _jitter(i) for i in range(300)]
    rep = detection_delay_and_false_alarms(slow, onset)
    assert rep.detected_index == onset + DEFAULT_PERSIST_STEPS - 1
    assert rep.delay_steps == DEFAULT_PERSIST_STEPS - 1 and rep.false_alarms == 0
    assert rep.delay_s == pytest.approx(sum(slow[onset : onset + DEFAULT_PERSIST_STEPS]))
    assert rep.episodes == (onset + DEFAULT_PERSIST_STEPS - 1,)
    assert rep.median_rule_delay_steps is not None and rep.median_rule_delay_steps <= rep.delay_steps
    with pytest.raises(ValueError, match="onset_index"):
        detection_delay_and_false_alarms(slow, 300)
    with pytest.raises(ValueError, match="at most"):
        detection_delay_and_false_alarms([1.0] * (MAX_TRACE_SAMPLES + 1), None)


# ------------------------------------------------------------------------------------------- loss


def test_a_nan_or_inf_loss_is_nan_loss() -> None:
    for bad in (math.nan, math.inf, -math.inf):
        v = judge_losses([2.31, 2.30, 2.29, bad, 2.28])
        assert v is not None and v.signal is SignalClass.NAN_LOSS and v.rule == "loss.nonfinite"
        assert v.value("index") == 3
        doc = json.loads(json.dumps(v.to_json(), allow_nan=False))
        assert doc["values"]["loss"] in ("nan", "inf", "-inf") and doc["signal"] == "nan-loss"


def test_a_loss_spike_against_the_rolling_median() -> None:
    history = [2.0 + 0.01 * (i % 5) for i in range(40)]
    assert judge_losses([*history, 9.9]) is None  # under 5x the median (2.02)
    v = judge_losses([*history, 10.5])
    assert v is not None and v.rule == "loss.spike" and v.value("index") == 40
    assert v.value("median") == pytest.approx(2.02) and v.value("window") == 40
    assert judge_losses([*history, 10.5], spike_factor=6.0) is None


def test_loss_rules_judge_only_new_losses_and_skip_what_has_no_median() -> None:
    assert judge_losses([math.nan, 2.0, 2.0, 2.0, 2.0, 2.0, 2.1], start=1) is None
    assert judge_losses([2.0, 2.0, 2.0, 50.0]) is None  # fewer than MIN_LOSS_HISTORY before it
    assert judge_losses([-3.0] * 10 + [100.0]) is None  # a median <= 0: a ratio means nothing
    # the window: only the previous `window` losses count
    assert judge_losses([100.0] * 50 + [1.0] * 10 + [6.0], window=10) is not None
    assert judge_losses([100.0] * 50 + [1.0] * 10 + [6.0], window=60) is None


def test_loss_rule_parameters_are_bounded() -> None:
    for kwargs in ({"spike_factor": 1.0}, {"spike_factor": math.inf}, {"window": 0}, {"start": -1}):
        with pytest.raises(ValueError):
            judge_losses([1.0], **kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------- verdict


def test_verdict_bounds_its_evidence_and_values() -> None:
    v = Verdict(
        SignalClass.CRASH,
        "log.cuda-error",
        tuple((f"k{i}", "x" * 1000) for i in range(40)),
        "E" * 10_000,
        "src",
    )
    assert len(v.evidence) == MAX_EVIDENCE_CHARS and v.evidence.endswith("…")
    assert len(v.values) == MAX_VALUES and all(len(str(val)) <= 256 for _, val in v.values)


# ------------------------------------------------------------------------------------------- logs

WATCHDOG_LOG = """\
[2026-01-07 03:12:40,118] [INFO] [logging.py:96:log_dist] [Rank 0] step=4180, skipped=0, lr=[0.00029], mom=[(0.9, 0.95)]
 12%|█▏        | 4181/35000 [3:01:07<22:15:40,  2.60s/it]
[rank5]:[E107 03:22:41.604131220 ProcessGroupNCCL.cpp:632] [Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=25123, OpType=ALLREDUCE, NumelIn=2097152, NumelOut=2097152, Timeout(ms)=600000) ran for 600034 milliseconds before timing out.
[rank5]:[E107 03:22:41.604413987 ProcessGroupNCCL.cpp:2168] [PG ID 1 PG GUID 1 Rank 5]  failure detected by watchdog at work sequence id: 25123 PG status: last enqueued work: 25124, last completed work: 25122
[rank5]:[E107 03:22:41.604530114 ProcessGroupNCCL.cpp:1785] [PG ID 1 PG GUID 1 Rank 5] Exception (either an error or timeout) detected by watchdog at work: 25123, last enqueued NCCL work: 25124, last completed NCCL work: 25122.
[rank5]:[E107 03:22:41.604602031 ProcessGroupNCCL.cpp:681] [Rank 5] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.
[rank5]:[E107 03:22:41.604655792 ProcessGroupNCCL.cpp:695] [Rank 5] To avoid data inconsistency, we are taking the entire process down.
terminate called after throwing an instance of 'c10::DistBackendError'
  what():  [PG ID 1 PG GUID 1 Rank 5] Process group watchdog thread terminated with exception: [Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=25123, OpType=ALLREDUCE, NumelIn=2097152, NumelOut=2097152, Timeout(ms)=600000) ran for 600034 milliseconds before timing out.
Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:635 (most recent call first):
frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f3b2c1e31b6 in /opt/venv/lib/python3.11/site-packages/torch/lib/libc10.so)
frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, std::ratio<1l, 1000l> > >) + 0x2b4 (0x7f3ad95fec74 in /opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so)
"""

CUDA_ILLEGAL_ADDRESS_LOG = """\
[rank3]: Traceback (most recent call last):
[rank3]:   File "/workspace/train.py", line 412, in <module>
[rank3]:     main()
[rank3]:   File "/workspace/train.py", line 388, in main
[rank3]:     loss = train_step(model, batch)
[rank3]:            ^^^^^^^^^^^^^^^^^^^^^^^^
[rank3]:   File "/workspace/train.py", line 201, in train_step
[rank3]:     return loss.item()
[rank3]:            ^^^^^^^^^^^
[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered
[rank3]: CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
[rank3]: For debugging consider passing CUDA_LAUNCH_BLOCKING=1
[rank3]: Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.
[rank3]:[E107 04:01:13.772310594 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered
"""

CUDA_OOM_LOG = """\
iteration     2110/  500000 | consumed samples:      1080320 | elapsed time per iteration (ms): 1843.2 | lm loss: 2.611E+00 |
Traceback (most recent call last):
  File "/workspace/Megatron-LM/pretrain_gpt.py", line 243, in <module>
    pretrain(train_valid_test_datasets_provider,
  File "/workspace/Megatron-LM/megatron/training/training.py", line 1181, in train_step
    losses_reduced = forward_backward_func(
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.10 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process has 77.96 GiB memory in use. Of the allocated memory 74.02 GiB is allocated by PyTorch, and 2.41 GiB is reserved by PyTorch but unallocated.
"""

NCCL_REMOTE_LOG = """\
node07:41877:42210 [2] NCCL INFO Channel 03/0 : 18[2] -> 26[2] [send] via NET/IB/2/GDRDMA
node07:41877:42391 [2] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.20.3.14<48121> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.20.3.7 remoteGid ::ffff:10.20.3.14
node07:41877:42391 [2] NCCL INFO transport/net.cc:1302 -> 6
[rank18]: Traceback (most recent call last):
[rank18]:   File "/workspace/train.py", line 301, in <module>
[rank18]:     dist.all_reduce(grad_norm)
[rank18]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, remote process exited or there was a network error, NCCL version 2.21.5
[rank18]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.
[rank18]: Last error:
[rank18]: NET/IB : Got completion from peer 10.20.3.14<48121> with status=12 opcode=0 len=0 vendor err 129 (Recv)
"""

HOST_OOM_LOG = """\
[Wed Jan  7 05:14:02 2026] python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0
[Wed Jan  7 05:14:02 2026] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,task_memcg=/system.slice/train.service,task=python3,pid=48213,uid=1000
[Wed Jan  7 05:14:02 2026] Out of memory: Killed process 48213 (python3) total-vm:412337712kB, anon-rss:201553308kB, file-rss:131072kB, shmem-rss:0kB, UID:1000 pgtables:402112kB oom_score_adj:0
"""

CHAINED_EXCEPTION_LOG = """\
Traceback (most recent call last):
  File "/workspace/data.py", line 88, in __getitem__
    sample = self.index[idx]
KeyError: 40961
\x20
During handling of the above exception, another exception occurred:
\x20
Traceback (most recent call last):
  File "/workspace/train.py", line 120, in <module>
    batch = next(it)
ValueError: shard /data/shard-00017.bin is truncated at byte 1048576
"""

HEALTHY_LOG = """\
node01:1123:1123 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
node01:1123:1190 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.20.3.2<43155> failed : Software caused connection abort
node01:1123:1190 [0] NCCL INFO Connected all rings
[2026-01-07 06:00:01,002] [INFO] step=100 loss=3.912 grad_norm=1.03 step_time=1.21s
"""


def test_watchdog_timeout_names_the_collective() -> None:
    scan = scan_log(WATCHDOG_LOG.encode())
    v = scan.verdict
    assert v is not None and v.signal is SignalClass.CRASH and v.cause == CAUSE_NCCL_TIMEOUT
    assert v.rule == "log.nccl-timeout" and "Watchdog caught collective operation timeout" in v.evidence
    assert v.value("seq") == 25123 and v.value("op") == "ALLREDUCE" and v.value("timeout_ms") == 600000
    assert v.value("ran_for_ms") == 600034 and v.value("rank") == 5 and v.value("line_no") == 3
    assert "nccl-error" in str(v.value("also"))  # "Some NCCL operations have failed or timed out"
    first = next(f for f in scan.findings if f.cause == CAUSE_NCCL_TIMEOUT)
    assert first.fatal and first.line_no == 3
    status = scan_log(WATCHDOG_LOG.splitlines()[3])
    assert status.verdict is None and not status.findings[0].fatal
    assert dict(status.findings[0].detail) == {
        "work_seq": 25123,
        "last_enqueued": 25124,
        "last_completed": 25122,
    }
    assert dict(scan.counts)[CAUSE_NCCL_TIMEOUT] == 4  # the timeout, two status lines, the what() echo


def test_cuda_illegal_address_outranks_the_python_exception() -> None:
    scan = scan_log(CUDA_ILLEGAL_ADDRESS_LOG)
    v = scan.verdict
    assert v is not None and v.cause == CAUSE_CUDA and v.rule == "log.cuda-error"
    assert v.value("error") == "an illegal memory access was encountered" and v.value("line_no") == 10
    assert v.evidence == "[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered"
    py = next(f for f in scan.findings if f.cause == CAUSE_PYTHON)
    assert dict(py.detail) == {
        "exception": "RuntimeError",
        "message": "CUDA error: an illegal memory access was encountered",
    }
    assert "python-exception" in str(v.value("also"))


def test_cuda_oom_names_the_allocation_and_gpu() -> None:
    v = scan_log(CUDA_OOM_LOG).verdict
    assert v is not None and v.cause == CAUSE_OOM and v.value("kind") == "cuda"
    assert v.value("tried_to_allocate") == "2.00 GiB" and v.value("gpu") == 3
    assert v.evidence.startswith("torch.OutOfMemoryError: CUDA out of memory.")


def test_nccl_remote_error_keeps_the_nccl_warn_as_context() -> None:
    scan = scan_log(NCCL_REMOTE_LOG)
    v = scan.verdict
    assert v is not None and v.cause == CAUSE_NCCL_ERROR and v.value("line_no") == 7
    assert v.value("where") == "/pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268"
    assert "NET/IB : Got completion from peer" in str(v.value("nccl_warn"))
    assert dict(scan.counts)[CAUSE_NCCL_ERROR] == 2  # "NCCL error in:" and the ncclRemoteError line
    py = next(f for f in scan.findings if f.cause == CAUSE_PYTHON)
    assert dict(py.detail)["exception"] == "torch.distributed.DistBackendError"


def test_kernel_oom_killer_line() -> None:
    v = scan_log(HOST_OOM_LOG).verdict
    assert v is not None and v.cause == CAUSE_OOM and v.value("kind") == "host"
    assert v.value("pid") == 48213 and v.value("process") == "python3" and v.value("line_no") == 3


def test_last_python_exception_of_a_chain() -> None:
    v = scan_log(CHAINED_EXCEPTION_LOG).verdict
    assert v is not None and v.cause == CAUSE_PYTHON and v.rule == "log.python-exception"
    assert v.value("exception") == "ValueError" and "truncated at byte 1048576" in str(v.value("message"))
    assert v.value("line_no") == 11


def test_real_xid_kernel_log_is_a_crash_with_the_xid() -> None:
    scan = scan_log((DATA / "kernel-log" / "xid-lines.txt").read_bytes())
    v = scan.verdict
    assert v is not None and v.cause == CAUSE_XID and v.value("xid") == 63
    assert (
        v.value("category") == "hardware" and v.value("action") == "evict" and v.value("pci") == "0000:10:1c"
    )
    assert dict(scan.counts)[CAUSE_XID] == 6  # 63, 64, 48, 64, 31, 31; XID 31 alone is not fatal
    only_31 = scan_log(
        "[  170.053881] NVRM: Xid (PCI:0000:01:00): 31, Ch 00000013, engmask 00000101, intr 10000000"
    )
    assert (
        only_31.verdict is None and only_31.findings[0].cause == CAUSE_XID and not only_31.findings[0].fatal
    )


def test_a_healthy_log_has_no_verdict_but_keeps_the_warning() -> None:
    scan = scan_log(HEALTHY_LOG)
    assert scan.verdict is None
    assert [f.cause for f in scan.findings] == [CAUSE_NCCL_WARN] and not scan.findings[0].fatal
    assert scan_log(b"").verdict is None and scan_log("").lines_read == 0


def test_colour_codes_and_a_cut_traceback() -> None:
    coloured = 'Traceback (most recent call last):\n  File "t.py", line 1, in <module>\n\x1b[31mAssertionError: loss scale underflow\x1b[0m\n'
    v = scan_log(coloured).verdict
    assert (
        v is not None
        and v.value("exception") == "AssertionError"
        and v.evidence == "AssertionError: loss scale underflow"
    )
    cut = 'Traceback (most recent call last):\n  File "t.py", line 1, in <module>\n    step()\n'
    assert scan_log(cut).verdict is None  # the exception line has not been written yet


def test_log_tail_bounds() -> None:
    big = b"x" * (MAX_TAIL_BYTES * 2) + b"\nRuntimeError: CUDA error: device-side assert triggered\n"
    scan = scan_log(big)
    assert scan.cut and scan.bytes_read <= MAX_TAIL_BYTES
    assert scan.verdict is not None and scan.verdict.cause == CAUSE_CUDA
    many = "\n".join(["ok"] * (MAX_LINES + 100) + ["ncclInternalError: Internal check failed."])
    scan = scan_log(many)
    assert scan.cut and scan.lines_read == MAX_LINES and scan.verdict is not None
    one_long = "RuntimeError: CUDA error: " + "y" * 100_000  # one line over MAX_LINE_CHARS
    scan = scan_log(one_long)
    assert scan.verdict is not None and len(scan.verdict.evidence) <= MAX_EVIDENCE_CHARS and scan.cut
    assert scan_log(b"\xff\xfe\x00NCCL WARN \xc3(\n").findings[0].cause == CAUSE_NCCL_WARN


def test_every_log_pattern_is_free_of_nested_repetition() -> None:
    patterns = [v for v in vars(logscan).values() if isinstance(v, re.Pattern)]
    assert len(patterns) >= 15
    for pattern in patterns:
        check_regex(pattern.pattern)  # raises on a repeat inside a repeated group


def test_after_recovery_keeps_the_healthy_pace_and_drops_the_episode() -> None:
    from robustctl.watch.rules import after_recovery

    p = FailSlowParams(persist_steps=5)
    st = FailSlowState()
    verdict = None
    for t in [0.2] * 40 + [0.8] * 10:
        st, verdict = observe_step_time(st, t, p)
    assert verdict is not None and st.slow_since is not None
    fresh = after_recovery(st, p)
    assert fresh.slow_since is None and fresh.candidate is None
    assert fresh.recent and max(fresh.recent) == 0.2  # the slow segment is gone, the healthy pace kept
    cured = fresh
    for t in [3.0] + [0.2] * 20:  # the restart's warm-up step, then the healthy pace
        cured, verdict = observe_step_time(cured, t, p)
        assert verdict is None
    still = fresh
    seen = []
    for t in [3.0] + [0.8] * 20:
        still, verdict = observe_step_time(still, t, p)
        seen.append(verdict is not None)
    assert any(seen), "a slowdown that outlives the recovery is declared again"
    assert after_recovery(FailSlowState()) == FailSlowState()
