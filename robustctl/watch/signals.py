"""The watch's signal readers: one job's signals read from the world into one frozen :class:`JobReading`.

:func:`read_job` reads, for job J of an inventory, each signal the watch rules
(:mod:`robustctl.watch.rules`, :mod:`robustctl.watch.logscan`) judge, every read with a bound and a
deadline; a source that cannot be read is *unknown* with its reason (a signal's ``unknown``, a
:class:`SourceError` per host), never healthy and never an exception out of the reader:

1. **progress** (:func:`read_progress_signal`): the job's ``progress:`` section read on every host by
   :mod:`robustctl.jobcode.progress`'s constant :data:`~robustctl.jobcode.progress.READER`, parsed
   by its own parsers (:func:`~robustctl.jobcode.progress.parse_heartbeat`,
   :func:`~robustctl.jobcode.progress.parse_log_tail`) into the same
   :class:`~robustctl.jobcode.progress.ProgressReading` :func:`~robustctl.jobcode.progress.read_progress`
   gives, plus what the rules need beyond the step: each heartbeat's ``loss`` (a JSON number, or the
   strings ``"NaN"``/``"Infinity"``/``"-Infinity"`` the test-bed jobs write) and ``step_s``, the
   Megatron training-log lines of a ``log:`` tail (:func:`parse_training_line`), and each host's own
   clock (the reader's ``now``), so the age of the newest step is measured on the clock that stamped
   it (:attr:`ProgressSignal.age_s`).
2. **liveness** (:attr:`JobReading.liveness`): the inventory back end: the job's rank processes as
   ``restart`` finds them (:func:`robustctl.jobs.launch.list_ranks`: the ``jobprocs`` probe and
   ``process.match``); Slurm: the job's state and ``ExitCode`` (``squeue --json``, ``scontrol show
   job``, ``sacct`` for a job the controller no longer holds); Kubernetes: the job's pods' phases and
   container exit codes (:func:`pod_liveness`).
3. **log tails** (:attr:`JobReading.logs`): a bounded tail of each rank's log, read on its host by the
   constant :data:`TAIL_READER` (paths are its arguments; it refuses what is not a regular file) and
   fed to :func:`~robustctl.watch.logscan.scan_log`: the logs ``restart`` writes per process (the
   inventory back end, ``launch.log_dir``), Slurm's ``StdOut``/``StdErr`` files, a Kubernetes job's
   running pods' container logs read through the API (the newest :data:`POD_LOG_TAIL_LINES` lines,
   at most :data:`POD_LOG_LIMIT_BYTES`, :data:`POD_LOG_CONCURRENCY` at once, all within
   :data:`LOG_READ_TIMEOUT_S`; a log that cannot be read makes the logs *unknown*, naming its pod)
   and the termination messages of its exited containers, and the progress signal's own ``log:``
   tail. The training-log lines of every tail add to the step-time and loss series.
4. **host findings** (:func:`read_findings`): each host's latest sweep/diagnose verdict from the store
   (:func:`robustctl.sweep.history.check_states`): hosts whose verdict is critical, with the checks
   that are critical now (lost GPU, hardware XID, NIC down, ...).

The parsers of what a host or a scheduler printed (:func:`parse_progress_output`,
:func:`parse_tail_output`, :func:`parse_training_line`, :func:`parse_sacct`,
:func:`parse_slurm_exit_code`, :func:`pod_liveness`, :func:`findings_from_states`) are pure, bounded
and raise nothing but :class:`~robustctl.errors.HostError` (a host's output that is not a document
at all), so any bytes a host prints become a reading or a per-host error.

Series (:class:`StepSample`): one sample per training step, merged over ranks and sources (the worst
loss, the longest step time: in synchronous training the slowest rank sets the step), the newest
:data:`MAX_SAMPLES` kept. :func:`merge_samples` joins the samples of successive readings (the watch
keeps them between evaluations) and derives the step time of a heartbeat-only job from the times of
successive steps.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from enum import Enum
from typing import TYPE_CHECKING, Any

from robustctl.errors import HostError, RobustctlError
from robustctl.jobcode.progress import (
    MAX_STEP,
    HostProgress,
    ProgressReading,
    RankProgress,
    host_progress,
    reader_argv,
    reader_files,
    unix_time,
)
from robustctl.models import Outcome, Status
from robustctl.sweep.history import HOST_CHECK, CheckState, check_states
from robustctl.transport.fanout import fan_out, fan_out_units
from robustctl.watch.logscan import MAX_LINE_CHARS, MAX_LINES, MAX_TAIL_BYTES, LogScan, scan_log
from robustctl.watch.rules import MAX_STEP_TIME_S, Verdict

if TYPE_CHECKING:
    from robustctl.config import DiagnoseSettings, ProgressSpec
    from robustctl.inventory import Host, Job
    from robustctl.schedulers.base import Scheduler
    from robustctl.schedulers.kubernetes import KubeApi
    from robustctl.schedulers.slurm import Slurm
    from robustctl.store import Store
    from robustctl.transport.pool import TransportPool

__all__ = [
    "FINDING_KINDS",
    "LOG_READ_TIMEOUT_S",
    "LOSS_FIELD",
    "MAX_EXITS",
    "MAX_HOST_CHECKS",
    "MAX_HOST_LOG_BYTES",
    "MAX_PODS",
    "MAX_POD_CONTAINERS",
    "MAX_REASON_CHARS",
    "MAX_SAMPLES",
    "MAX_TERMINATION_MESSAGE_CHARS",
    "POD_LOG_CONCURRENCY",
    "POD_LOG_LIMIT_BYTES",
    "POD_LOG_TAIL_LINES",
    "SACCT_WINDOW",
    "STEP_TIME_FIELD",
    "TAIL_READER",
    "CriticalCheck",
    "FindingsSignal",
    "HostFinding",
    "HostProgressSignal",
    "JobReading",
    "Liveness",
    "LivenessSignal",
    "LogSignal",
    "LogTail",
    "ProgressSignal",
    "RankExit",
    "SourceError",
    "StepSample",
    "TailFile",
    "findings_from_states",
    "merge_samples",
    "parse_progress_output",
    "parse_sacct",
    "parse_slurm_exit_code",
    "parse_tail_output",
    "parse_training_line",
    "pod_liveness",
    "progress_age",
    "read_findings",
    "read_job",
    "read_progress_signal",
    "slurm_job_liveness",
    "tail_argv",
    "training_samples",
]

# --------------------------------------------------------------------------------------------- bounds

MAX_SAMPLES = 4096
"""Most training steps a series keeps (the newest): the number of step times the hang rule's p99 is
taken over (:data:`robustctl.watch.rules.MAX_STEP_TIME_SAMPLES`), hours of a large job; the loss rules'
window (50 by default) is far inside it."""
MAX_HOST_LOG_BYTES = 4 << 20
"""Most bytes of log tails read from one host per reading (4 MiB, our choice): each of its ``n`` logs
gets ``min(MAX_TAIL_BYTES, MAX_HOST_LOG_BYTES // n)`` bytes, so a host of 8 ranks gets each rank's
full 256 KiB tail and one of 64 ranks 64 KiB each (a few hundred lines, still the traceback and the
watchdog report); base64 in the reader's JSON keeps the output under 5.4 MiB, well inside the
transport's 16 MiB stdout bound, and the controller holds at most one host's tails per worker."""
LOG_READ_TIMEOUT_S = 30.0
"""Deadline of one host's log-tail read (our choice, the progress reader's default ``timeout_s``):
reading at most :data:`MAX_HOST_LOG_BYTES` from a local disk takes well under a second; 30 s covers
an SSH handshake to a loaded host and a slow network file system, and a host that takes longer is an
error of that host in the reading, not a stalled watcher."""
MAX_EXITS = 64
"""Most rank, pod or job exits a liveness reading lists (rank order; :attr:`LivenessSignal.exits_total`
counts them all): enough to name every failed rank of a job on a few machines; a job-wide failure is
said by the count, and a stored decision stays small."""
MAX_HOST_CHECKS = 32
"""Most critical checks listed per host (by name): the check registry has about 15; a store edited by
hand must not make one host's finding unbounded."""
MAX_REASON_CHARS = 300
"""Longest reason or detail text kept from a host, a scheduler or the store (one line)."""
SACCT_WINDOW = "now-7days"
"""How far back ``sacct`` looks for a job the Slurm controller no longer holds (its ``-S``; our
choice): a job watched now that ended more than a week ago is not this job."""
MAX_TERMINATION_MESSAGE_CHARS = 16_384
"""Longest container termination message scanned: Kubernetes caps one container's message at 4096
bytes and a pod's at 12 KiB (kubernetes.io, "Determine the Reason for Pod Failure", "Customizing the
termination message"); more is not an API server's answer."""
MAX_PODS = 65_536
"""Most pods of one job examined (a job of MAX_WORLD_SIZE ranks at 16 ranks per pod); more is not one
job's. Also the most container logs read per reading."""
MAX_POD_CONTAINERS = 64
"""Most containers of one pod whose logs are read (spec order): a training pod has one or a few (the
trainer, sidecars); the same bound :func:`pod_liveness` puts on a pod's container statuses."""
POD_LOG_TAIL_LINES = 2048
"""Newest lines of a running pod's container log asked of the API server (``tailLines``; our choice):
a crash's evidence (a Python traceback, ProcessGroupNCCL's watchdog report with its C++ frames, about
10 KB or 100 lines per rank in PyTorch 2.x, NCCL's WARN lines) for the 8 ranks of a pod is at most
about a thousand lines; 2048 holds it with interleaved progress output, below logscan's MAX_LINES."""
POD_LOG_LIMIT_BYTES = 4 * MAX_TAIL_BYTES
"""Most bytes of a container log asked (``limitBytes``, 1 MiB; the client's own cap,
:data:`robustctl.schedulers.kubernetes.MAX_POD_LOG_BYTES`). The server applies it *after*
``tailLines`` and keeps the first bytes, so it must hold the :data:`POD_LOG_TAIL_LINES` lines whole
for the newest line to arrive: 2048 lines of 512 bytes on average (a Megatron training-log line is
about 350). Only the newest :data:`~robustctl.watch.logscan.MAX_TAIL_BYTES` are scanned. An answer
that fills it is asked again once with fewer lines (sized from its own lines to fit MAX_TAIL_BYTES);
full again, its newest lines are not known and the logs are *unknown* naming the pod. A pod costs at
most 2 MiB per container and reading, half the :data:`MAX_HOST_LOG_BYTES` an inventory host may."""
POD_LOG_CONCURRENCY = 16
"""Container logs read at once (our choice; at most the diagnose concurrency): ``kubectl logs`` reads
at most 5 streams at once for a selector (``--max-log-requests``); 16 reads a thousand pods' tails
well within :data:`LOG_READ_TIMEOUT_S` at tens of milliseconds each, a small share of the API
server's default 400 read requests in flight (``--max-requests-inflight``)."""

LOSS_FIELD = "loss"
"""The heartbeat key holding the step's loss (the test-bed jobs' heartbeats: ``tests/jobs/heartbeat.py``,
``tests/jobs/minimegatron.py``): a JSON number, or ``"NaN"``, ``"Infinity"``, ``"-Infinity"``."""
STEP_TIME_FIELD = "step_s"
"""The heartbeat key holding the step's duration in seconds (minimegatron's heartbeat)."""

FINDING_KINDS: dict[str, str] = {
    "nvml.count": "gpu-lost",
    "host.xid": "xid",
    "host.nic": "nic-down",
    "host.ib": "nic-down",
}
"""What a critical check means for the job, by check name (the kinds issue 22 names for the
``gpu-lost`` playbook); any other critical check is its own name."""

_TEXT = "utf-8"


def _line(text: object, limit: int = MAX_REASON_CHARS) -> str:
    """``text`` as one line (whitespace runs made one space), cut at ``limit`` characters."""
    one = " ".join(str(text).split())
    return one if len(one) <= limit else one[: limit - 1] + "…"


def _int(value: object, lo: int, hi: int) -> int | None:
    """``value`` when it is an int (not a bool) in [lo, hi], else None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if lo <= value <= hi else None


def _step_time(value: object) -> float | None:
    """A step duration in seconds: a finite number in (0, :data:`MAX_STEP_TIME_S`], else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        t = float(value)
    except OverflowError:
        return None
    return t if math.isfinite(t) and 0 < t <= MAX_STEP_TIME_S else None


_FLOAT_RE = re.compile(
    r"[-+]?(?:(?:\d{1,40}(?:\.\d{0,40})?|\.\d{1,40})(?:[eE][-+]?\d{1,4})?|nan|inf(?:inity)?)",
    re.IGNORECASE | re.ASCII,
)


def _loss(value: object) -> float | None:
    """A loss as a heartbeat or a log spells it: a number, or a decimal/``nan``/``inf``/``infinity``
    text (any case, signed); None for anything else (a bool, null, other text, an int too big for a
    float)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            return None
    if isinstance(value, str) and len(value) <= 96 and _FLOAT_RE.fullmatch(value.strip()):
        return float(value.strip())
    return None


# --------------------------------------------------------------------------------------------- series


@dataclass(frozen=True)
class StepSample:
    """What the job's signals say about one training step.

    Attributes:
        step: the step (iteration) number.
        at: UNIX time (host clock) the step was reported done, the latest over ranks; None when no
            source gave one (a log line).
        step_time_s: the step's duration in seconds (the longest over ranks); None when not reported.
        loss: the step's loss, the worst over ranks and sources (a NaN or ±Inf over any finite value,
            else the largest); None when not reported.
        source: where the loss (else the sample) came from: ``"HOST rank R heartbeat"`` or ``"HOST
            PATH"`` (evidence for a decision).
    """

    step: int
    at: float | None = None
    step_time_s: float | None = None
    loss: float | None = None
    source: str = ""


def _loss_key(x: float | None) -> tuple[int, float]:
    """Order of badness of a loss: None < finite (by value) < -Inf < +Inf < NaN."""
    if x is None:
        return (-1, 0.0)
    if math.isnan(x):
        return (4, 0.0)
    if math.isinf(x):
        return (3 if x > 0 else 2, 0.0)
    return (0, x)


def _merge_pair(a: StepSample, b: StepSample) -> StepSample:
    """Two samples of the same step as one (see :class:`StepSample`); ties keep ``a``'s values."""
    ats = [t for t in (a.at, b.at) if t is not None]
    times = [t for t in (a.step_time_s, b.step_time_s) if t is not None]
    worse = b if _loss_key(b.loss) > _loss_key(a.loss) else a
    return StepSample(
        a.step,
        max(ats) if ats else None,
        max(times) if times else None,
        worse.loss,
        worse.source or a.source or b.source,
    )


def _clean(s: StepSample) -> StepSample | None:
    """``s`` with values no reader gives made None (a time that is not a UNIX time, a step time out of
    range, a loss that is not a number); None for a step that is not an integer in 0 … MAX_STEP."""
    if _int(s.step, 0, MAX_STEP) is None:
        return None
    loss = _loss(s.loss) if isinstance(s.loss, (int, float)) else None
    return StepSample(s.step, unix_time(s.at), _step_time(s.step_time_s), loss, str(s.source)[:300])


class _SampleSet:
    """Samples merged by step, thread-safe (the fan-out's workers add to it), the newest ``limit`` kept."""

    def __init__(self, limit: int = MAX_SAMPLES) -> None:
        self.limit = limit
        self._by_step: dict[int, StepSample] = {}
        self._lock = threading.Lock()

    def add(self, samples: Iterable[StepSample]) -> None:
        with self._lock:
            for raw in samples:
                s = _clean(raw)
                if s is None:
                    continue
                held = self._by_step.get(s.step)
                self._by_step[s.step] = s if held is None else _merge_pair(held, s)
            if len(self._by_step) > 2 * self.limit:
                keep = sorted(self._by_step)[-self.limit :]
                self._by_step = {k: self._by_step[k] for k in keep}

    def result(self) -> tuple[StepSample, ...]:
        with self._lock:
            return tuple(self._by_step[k] for k in sorted(self._by_step)[-self.limit :])


def merge_samples(
    old: Sequence[StepSample], new: Sequence[StepSample], *, limit: int = MAX_SAMPLES
) -> tuple[StepSample, ...]:
    """The samples of two readings of the same run as one series, oldest step first.

    Samples of the same step are merged (:class:`StepSample`: the worst loss, the longest step time,
    the latest time). A sample without a step time whose step and the previous step in the series
    both carry a time ``at`` gets the mean step time between them, ``(at - previous at) / (step -
    previous step)`` when positive: a heartbeat-only job (one sample per rank per reading) gains one
    step-time sample per reading. Samples of a run that was stopped since (steps made again after a
    restart) must be dropped by the caller before merging: their steps would merge with the new run's.

    Args:
        old: the series kept so far.
        new: the new reading's samples (:attr:`ProgressSignal.samples`).
        limit: most samples kept (the newest steps), at least 1.

    Returns:
        At most ``limit`` samples, one per step, in step order. Never raises on any samples.
    """
    keep = max(1, int(limit))
    merged = _SampleSet(keep)
    merged.add(old)
    merged.add(new)
    out = list(merged.result())
    for i in range(1, len(out)):
        prev, cur = out[i - 1], out[i]
        if cur.step_time_s is None and cur.at is not None and prev.at is not None:
            derived = _step_time((cur.at - prev.at) / (cur.step - prev.step))
            if derived is not None:
                out[i] = replace(cur, step_time_s=derived)
    return tuple(out)


_ITERATION_RE = re.compile(r"\biteration\s{1,32}(\d{1,16})\s{0,32}/", re.ASCII)
_ELAPSED_RE = re.compile(r"elapsed time per iteration \(ms\):\s{0,32}(\d{1,15}(?:\.\d{0,15})?)", re.ASCII)
_LM_LOSS_RE = re.compile(r"\blm loss:\s{0,32}([^\s|]{1,64})", re.ASCII)


def parse_training_line(line: str, source: str = "") -> StepSample | None:
    """The step sample of one Megatron training-log line, or None when the line is not one.

    Megatron-LM's ``training_log`` (megatron/training/training.py) prints, every ``--log-interval``
    steps on the last rank, ``iteration N/ M | consumed samples: … | elapsed time per iteration (ms):
    X[/mean] | … | lm loss: L | …`` with ``L`` as ``{:.6E}``; the test-bed jobs print the same fields
    (their NaN as ``nan``). The step is ``N`` (0 … :data:`~robustctl.jobcode.progress.MAX_STEP`), the
    step time ``X`` ms (the mean over the log interval), the loss ``L`` (a number, ``nan``, ``inf``).
    A line is read up to :data:`~robustctl.watch.logscan.MAX_LINE_CHARS` characters.

    Args:
        line: one log line.
        source: recorded as the sample's ``source`` (the callers pass ``"HOST PATH"`` of the log).

    Returns:
        A :class:`StepSample` with ``at`` None (a log line's time is not trusted), or None. Never raises.
    """
    line = line[:MAX_LINE_CHARS]
    if "iteration" not in line:
        return None
    m = _ITERATION_RE.search(line)
    if m is None:
        return None
    step = int(m.group(1))
    if step > MAX_STEP:
        return None
    e = _ELAPSED_RE.search(line, m.end())
    step_time = _step_time(float(e.group(1)) / 1000.0) if e is not None else None
    lm = _LM_LOSS_RE.search(line, m.end())
    loss = _loss(lm.group(1)) if lm is not None else None
    if step_time is None and loss is None:
        return None
    return StepSample(step, None, step_time, loss, source)


def training_samples(text: str, source: str) -> list[StepSample]:
    """The step samples of the training-log lines among the newest
    :data:`~robustctl.watch.logscan.MAX_TAIL_BYTES` characters and
    :data:`~robustctl.watch.logscan.MAX_LINES` lines of ``text`` (a log tail), oldest first."""
    if len(text) > MAX_TAIL_BYTES:
        text = text[-MAX_TAIL_BYTES:]
    out: list[StepSample] = []
    for line in text.splitlines()[-MAX_LINES:]:
        sample = parse_training_line(line, source)
        if sample is not None:
            out.append(sample)
    return out


# --------------------------------------------------------------------------------------------- errors


@dataclass(frozen=True)
class SourceError:
    """A host (or a scheduler) one signal could not be read from.

    Attributes:
        signal: ``"progress"``, ``"liveness"``, ``"logs"``. host: inventory name (or the scheduler's
        name). reason: one line.
    """

    signal: str
    host: str
    reason: str

    def line(self) -> str:
        """``"HOST: SIGNAL: reason"``."""
        return f"{self.host}: {self.signal}: {self.reason}"


# ------------------------------------------------------------------------------------------- progress


@dataclass(frozen=True)
class HostProgressSignal:
    """What one host's progress reader printed, parsed (:func:`parse_progress_output`).

    Attributes:
        progress: the host's entries as :mod:`robustctl.jobcode.progress` reads them.
        samples: the step samples of its heartbeats (loss, ``step_s``) and log lines.
        tails: the scanned ``log:`` tail (log mode; empty for heartbeat files).
        now: the host's clock when the reader ran (UNIX s), None when it printed none.
    """

    progress: HostProgress
    samples: tuple[StepSample, ...] = ()
    tails: tuple[LogTail, ...] = ()
    now: float | None = None


def _heartbeat_sample(entry: RankProgress, text: str) -> StepSample:
    """``entry``'s sample with the heartbeat's :data:`LOSS_FIELD` and :data:`STEP_TIME_FIELD`."""
    loss: float | None = None
    step_time: float | None = None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict):
        loss = _loss(doc.get(LOSS_FIELD))
        step_time = _step_time(doc.get(STEP_TIME_FIELD))
    who = f"rank {entry.rank}" if entry.rank is not None else entry.source
    return StepSample(entry.step, entry.at, step_time, loss, _line(f"{entry.host} {who} heartbeat", 200))


def parse_progress_output(
    host: str, stdout: bytes, spec: ProgressSpec, pattern: re.Pattern[str] | None
) -> HostProgressSignal:
    """One host's progress-reader output (:data:`~robustctl.jobcode.progress.READER`), parsed.

    The entries and problems are exactly those :func:`~robustctl.jobcode.progress.read_progress`
    reads (same parsers, same bounds: at most ``spec.max_files`` files, 64 problems); besides them
    each heartbeat's loss and step time, each log tail's training-log lines
    (:func:`training_samples`) and its scan (:func:`~robustctl.watch.logscan.scan_log`), and the
    host's clock.

    Args:
        host: inventory name.
        stdout: what the reader printed.
        spec: the job's ``progress:`` section.
        pattern: ``spec.pattern`` compiled (None for heartbeat files).

    Returns:
        The :class:`HostProgressSignal`.

    Raises:
        HostError: the output is not the reader's JSON document (one line naming the host).
    """
    try:
        doc = json.loads(stdout.decode(_TEXT, "replace"))
    except (ValueError, RecursionError):
        raise HostError(host, "the progress reader printed no JSON document") from None
    entries: list[RankProgress] = []
    problems: list[str] = []
    samples: list[StepSample] = []
    tails: list[LogTail] = []
    for f in reader_files(host, doc, spec, pattern):
        if isinstance(f, str):
            problems.append(f)
            continue
        if f.entry is not None:
            entries.append(f.entry)
        elif f.problem is not None:
            problems.append(f.problem)
        if not f.is_log:
            if f.entry is not None:
                samples.append(_heartbeat_sample(f.entry, f.text))
            continue
        samples.extend(training_samples(f.text, _line(f"{host} {f.path}", 200)))
        size = _int(f.size, 0, 2**63)
        tails.append(LogTail(host, f.path, (), scan_log(f.text[-MAX_TAIL_BYTES:]), size, len(f.text)))
    return HostProgressSignal(
        host_progress(host, doc, entries, problems),
        tuple(samples[-MAX_SAMPLES:]),
        tuple(tails),
        unix_time(doc.get("now")),
    )


def progress_age(reading: ProgressReading, clocks: Mapping[str, float]) -> float | None:
    """Seconds since the job's slowest progress entry was written, each measured on its own host's
    clock: the largest ``clocks[host] - entry.at`` over every entry of ``reading`` (its ``read_at``
    for a host without a clock); None when it has no entry. Negative when every entry's time lies
    ahead of its host's clock (the hang rule then answers unknown past its clock tolerance)."""
    ages = [clocks.get(e.host, reading.read_at) - e.at for e in reading.entries]
    return max(ages) if ages else None


@dataclass(frozen=True)
class ProgressSignal:
    """The progress signal of one reading.

    Attributes:
        reading: the steps per rank, as :func:`~robustctl.jobcode.progress.read_progress` gives them
            (None when the job has no ``progress:`` section).
        samples: step samples (loss, step time) of every rank and log read, merged per step, the newest
            :data:`MAX_SAMPLES`, oldest first.
        unknown: why the signal says nothing (no ``progress:`` section, no host read, no entry found);
            None when at least one entry was read (hosts that failed are :attr:`errors`).
        tails: the ``log:`` tails read (log mode), scanned like the ranks' logs.
        clocks: ``(host, UNIX s)``: each host's own clock when its reader ran (hosts that printed one).
    """

    reading: ProgressReading | None
    samples: tuple[StepSample, ...] = ()
    unknown: str | None = None
    tails: tuple[LogTail, ...] = ()
    clocks: tuple[tuple[str, float], ...] = ()

    @property
    def age_s(self) -> float | None:
        """Seconds since the job's slowest entry was written, on the hosts' own clocks
        (:func:`progress_age`); None when no entry was read."""
        return None if self.reading is None else progress_age(self.reading, dict(self.clocks))

    def since(self, started_at: float) -> ProgressSignal:
        """This signal with only the entries, and the samples with a time, made at or after
        ``started_at`` (a restart's time: a former run's heartbeat files do not count); samples
        without a time (log lines) are kept."""
        return replace(
            self,
            reading=self.reading.since(started_at) if self.reading is not None else None,
            samples=tuple(s for s in self.samples if s.at is None or s.at >= started_at),
        )

    @property
    def errors(self) -> tuple[SourceError, ...]:
        """One per host that could not be read."""
        if self.reading is None:
            return ()
        return tuple(
            SourceError("progress", h.host, h.error) for h in self.reading.hosts if h.error is not None
        )

    @property
    def step(self) -> int | None:
        """The job's step: the minimum over every rank read (None: none read)."""
        return self.reading.step if self.reading is not None else None

    @property
    def step_times(self) -> tuple[float, ...]:
        """The step times (seconds) of the samples that have one, in step order."""
        return tuple(s.step_time_s for s in self.samples if s.step_time_s is not None)

    @property
    def losses(self) -> tuple[float, ...]:
        """The losses of the samples that have one, in step order."""
        return tuple(s.loss for s in self.samples if s.loss is not None)


def _knobs(diagnose: DiagnoseSettings | None) -> tuple[int, int, float]:
    """``(concurrency, retries, backoff_s)`` of the fan-outs: the inventory's diagnose settings."""
    if diagnose is None:
        return 64, 1, 0.5
    return diagnose.concurrency, diagnose.retries, diagnose.retry_backoff_s


def read_progress_signal(
    pool: TransportPool,
    job: Job,
    hosts: Sequence[Host],
    *,
    diagnose: DiagnoseSettings | None = None,
    clock: Callable[[], float] = time.time,
) -> tuple[ProgressSignal, float]:
    """Read ``job``'s progress signal on ``hosts`` (module docstring, item 1).

    Each host runs :data:`~robustctl.jobcode.progress.READER` under ``progress.timeout_s`` (one retry
    after a connection error, as :func:`~robustctl.jobcode.progress.read_progress` does).

    Args:
        pool: the transports.
        job: the inventory job.
        hosts: its machines, rank order.
        diagnose: fan-out settings (concurrency, retries); None: 64 hosts at once, one retry.
        clock: the control side's UNIX clock.

    Returns:
        ``(signal, read_at)``: the :class:`ProgressSignal` and the control-side time of the reading.
        Never raises for a host or a file; a job without ``progress:`` is :attr:`ProgressSignal.unknown`.
    """
    spec = job.progress
    if spec is None:
        return (
            ProgressSignal(None, unknown=f"jobs.{job.name} has no progress: section (no step signal)"),
            float(clock()),
        )
    pattern = re.compile(spec.pattern) if spec.pattern is not None else None
    concurrency, _, backoff = _knobs(diagnose)

    def work(host: Host, deadline: float) -> HostProgressSignal:
        timeout = max(0.5, deadline - time.monotonic())
        res = pool.run(host, reader_argv(host, spec), timeout_s=timeout)
        if res.exit_status != 0:
            raise HostError(host.name, f"progress reader exited {res.exit_status}: {res.stderr_tail()}")
        return parse_progress_output(host.name, res.stdout, spec, pattern)

    fan = fan_out(
        list(hosts),
        work,
        concurrency=concurrency,
        host_timeout_s=spec.timeout_s,
        retries=1,
        backoff_s=backoff,
    )
    read_at = float(clock())
    parsed = [o.value if o.ok and o.value is not None else None for o in fan.outcomes]
    rows = tuple(
        p.progress if p is not None else HostProgress(o.host.name, error=_line(o.error or o.outcome.value))
        for p, o in zip(parsed, fan.outcomes, strict=True)
    )
    reading = ProgressReading(job.name, rows, read_at)
    ok = [p for p in parsed if p is not None]
    merged = _SampleSet()
    for p in ok:
        merged.add(p.samples)
    clocks = tuple((p.progress.host, p.now) for p in ok if p.now is not None)
    unknown: str | None = None
    if hosts and not ok:
        unknown = "no host could be read: " + "; ".join(reading.errors[:3])
    elif not reading.entries:
        problems = [p for h in rows for p in h.problems]
        unknown = "no progress entry on any host" + (
            f" ({problems[0]})" if problems else " (nothing matched)"
        )
    tails = tuple(t for p in ok for t in p.tails)
    return ProgressSignal(reading, merged.result(), unknown, tails, clocks), read_at


# ------------------------------------------------------------------------------------------ log tails

TAIL_READER = r"""
import base64, json, os, stat, sys, time
nbytes, out = int(sys.argv[1]), []
for path in sys.argv[2:]:
    try:
        fd = os.open(os.path.expanduser(path), os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        out.append({"path": path, "error": e.strerror or str(e), "missing": e.errno == 2})
        continue
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            out.append({"path": path, "error": "not a regular file"})
            continue
        start = max(st.st_size - nbytes, 0)
        os.lseek(fd, start, 0)
        chunks, left = [], nbytes
        while left > 0:
            b = os.read(fd, min(left, 1 << 16))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        data = b"".join(chunks)
        out.append({"path": path, "size": st.st_size, "start": start,
                    "data": base64.b64encode(data).decode("ascii")})
    except OSError as e:
        out.append({"path": path, "error": e.strerror or str(e)})
    finally:
        os.close(fd)
sys.stdout.write(json.dumps({"now": time.time(), "files": out}))
"""
"""The node-side log-tail reader, run as ``python -c TAIL_READER MAX_BYTES PATH...``: for each path
(a leading ``~`` is the login's home), the last ``MAX_BYTES`` bytes of the file, base64-encoded,
never more; a path that is not a regular file (a FIFO, a device) is refused unread, and a file that
cannot be opened is an error of that file. Prints one JSON object ``{now, files: [{path, size, start,
data} | {path, error[, missing]}]}`` in argument order."""


def tail_argv(host: Host, paths: Sequence[str], nbytes: int) -> list[str]:
    """The argv that reads the tails of ``paths`` on ``host`` (its Python, with its wrapper)."""
    return [*host.python.wrapper, host.python.path, "-c", TAIL_READER, str(int(nbytes)), *paths]


@dataclass(frozen=True)
class TailFile:
    """One file of the tail reader's output.

    Attributes:
        path: as asked. data: the tail's bytes (None when not read). size: the file's size in bytes.
        start: offset of the tail in the file (> 0: the tail starts mid-file). error: why it was not
        read (None: read). missing: the file does not exist.
    """

    path: str
    data: bytes | None = None
    size: int | None = None
    start: int = 0
    error: str | None = None
    missing: bool = False


def parse_tail_output(
    host: str, stdout: bytes, paths: Sequence[str], nbytes: int
) -> tuple[tuple[TailFile, ...], float | None]:
    """The tail reader's output (:data:`TAIL_READER`) on ``host``, parsed.

    Args:
        host: inventory name.
        stdout: what the reader printed.
        paths: the paths asked, in order.
        nbytes: the most bytes asked per file.

    Returns:
        ``(files, now)``: one :class:`TailFile` per path asked, in order (a path the output does not
        answer, or answers with more than ``nbytes`` or with bad base64, is a file with ``error``);
        and the host's clock (None: not printed).

    Raises:
        HostError: the output is not the reader's JSON document.
    """
    try:
        doc = json.loads(stdout.decode(_TEXT, "replace"))
    except (ValueError, RecursionError):
        raise HostError(host, "the log-tail reader printed no JSON document") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
        raise HostError(host, "the log-tail reader printed no document")
    answers = doc["files"]
    longest = 4 * ((nbytes + 2) // 3)
    out: list[TailFile] = []
    for i, path in enumerate(paths):
        f = answers[i] if i < len(answers) else None
        if not isinstance(f, dict) or f.get("path") != path:
            out.append(TailFile(path, error="the reader printed nothing for this file"))
            continue
        if "error" in f:
            out.append(TailFile(path, error=_line(f["error"], 200), missing=f.get("missing") is True))
            continue
        raw = f.get("data")
        if not isinstance(raw, str) or len(raw) > longest:
            out.append(TailFile(path, error=f"the reader printed no tail of at most {nbytes} bytes"))
            continue
        try:
            data = base64.b64decode(raw.encode("ascii"), validate=True)
        except (binascii.Error, ValueError, UnicodeEncodeError):
            out.append(TailFile(path, error="the reader printed a tail that is not base64"))
            continue
        if len(data) > nbytes:
            out.append(TailFile(path, error=f"the reader printed more than the {nbytes} bytes asked"))
            continue
        size = _int(f.get("size"), 0, 2**63)
        start = _int(f.get("start"), 0, 2**63)
        out.append(TailFile(path, data, size, start or 0))
    return tuple(out), unix_time(doc.get("now"))


@dataclass(frozen=True)
class LogTail:
    """One log's tail as read and scanned.

    Attributes:
        host: where it was read (inventory name; a pod's node for a termination message). path: the
        file (or ``"pod NS/NAME container C termination message"``). ranks: the ranks that write it
        (empty: not known, a whole job's or host's log). scan: what
        :func:`~robustctl.watch.logscan.scan_log` found (None when not read). size: the file's size in
        bytes (None: not known). read_bytes: bytes of the tail scanned. error: why it was not read (None:
        read).
    """

    host: str
    path: str
    ranks: tuple[int, ...] = ()
    scan: LogScan | None = None
    size: int | None = None
    read_bytes: int = 0
    error: str | None = None

    @property
    def verdict(self) -> Verdict | None:
        """The crash verdict of the scan, if any."""
        return self.scan.verdict if self.scan is not None else None


def _scan_file(host: str, ranks: tuple[int, ...], f: TailFile, samples: _SampleSet) -> LogTail:
    """A read file's :class:`LogTail` (its partial first line dropped when the tail starts mid-file);
    its training-log lines are added to ``samples``."""
    if f.data is None:
        return LogTail(host, f.path, ranks, None, f.size, 0, f.error or "not read")
    data = f.data
    if f.start > 0:
        newline = data.find(b"\n")
        if 0 <= newline < len(data) - 1:
            data = data[newline + 1 :]
    text = data.decode(_TEXT, "replace")
    samples.add(training_samples(text, _line(f"{host} {f.path}", 200)))
    return LogTail(host, f.path, ranks, scan_log(text), f.size, len(data))


@dataclass(frozen=True)
class LogSignal:
    """The log tails of one reading.

    Attributes:
        tails: every log read or tried, in host order.
        errors: hosts whose logs could not be read at all.
        unknown: why some log source of the job was not read (no ``launch:`` section, a pod's log the
            API did not answer, a Slurm job without an output file); None when every source the back
            end has was read.
    """

    tails: tuple[LogTail, ...] = ()
    errors: tuple[SourceError, ...] = ()
    unknown: str | None = None

    @property
    def verdicts(self) -> tuple[tuple[LogTail, Verdict], ...]:
        """Each tail whose scan gives a crash verdict, with it."""
        return tuple((t, t.verdict) for t in self.tails if t.verdict is not None)


def _read_tails(
    pool: TransportPool,
    wanted: Sequence[tuple[Host, Sequence[tuple[str, tuple[int, ...]]]]],
    samples: _SampleSet,
    diagnose: DiagnoseSettings | None,
) -> tuple[list[LogTail], list[SourceError]]:
    """Read and scan the tails of ``wanted`` (per host: ``(path, ranks)`` pairs), one reader per
    host at once, each under :data:`LOG_READ_TIMEOUT_S`; the bytes are scanned in the worker and
    dropped, so at most one host's tails per worker are held."""
    items = [(h, list(files)) for h, files in wanted if files]
    by_name = {h.name: files for h, files in items}
    concurrency, retries, backoff = _knobs(diagnose)

    def work(host: Host, deadline: float) -> list[LogTail]:
        files = by_name[host.name]
        nbytes = max(1, min(MAX_TAIL_BYTES, MAX_HOST_LOG_BYTES // len(files)))
        paths = [p for p, _ in files]
        timeout = max(0.5, deadline - time.monotonic())
        res = pool.run(host, tail_argv(host, paths, nbytes), timeout_s=timeout)
        if res.exit_status != 0:
            raise HostError(host.name, f"log-tail reader exited {res.exit_status}: {res.stderr_tail()}")
        read, _ = parse_tail_output(host.name, res.stdout, paths, nbytes)
        return [_scan_file(host.name, ranks, f, samples) for (_, ranks), f in zip(files, read, strict=True)]

    fan = fan_out(
        [h for h, _ in items],
        work,
        concurrency=concurrency,
        host_timeout_s=LOG_READ_TIMEOUT_S,
        retries=retries,
        backoff_s=backoff,
    )
    tails: list[LogTail] = []
    errors: list[SourceError] = []
    for o in fan.outcomes:
        if o.ok and o.value is not None:
            tails.extend(o.value)
            continue
        why = _line(o.error or o.outcome.value)
        errors.append(SourceError("logs", o.host.name, why))
        tails.extend(LogTail(o.host.name, p, r, error=why) for p, r in by_name[o.host.name])
    return tails, errors


# ------------------------------------------------------------------------------------------- liveness


class Liveness(str, Enum):
    """Whether the job's ranks run, as its back end says."""

    ALIVE = "alive"
    """Every rank runs (processes found; Slurm RUNNING; every pod Running)."""
    DEAD = "dead"
    """A rank, a pod or the job is gone or failed: a process not found, a container or the job exited
    non-zero or was killed, the job left the running state (issue 22: class ``crash``)."""
    WAITING = "waiting"
    """The job neither runs nor has ended: pending, requeued, suspended, pods being recreated."""
    ENDED = "ended"
    """The back end says the job completed successfully (exit 0 everywhere)."""
    UNKNOWN = "unknown"
    """The back end could not say (a host unreachable, the scheduler failed, nothing configured)."""


@dataclass(frozen=True)
class RankExit:
    """A rank, a pod or the job that does not run (or ran and exited).

    Attributes:
        where: the host, ``"pod NAME"`` or ``"slurm job ID"``. ranks: the ranks it held (empty: not
        known or the whole job). exit_code: the exit status when the back end reports one (Slurm's
        ``ExitCode`` first number, a container's ``exitCode``). signal: the signal that ended it, when
        reported. reason: one line (the scheduler's state or reason, "no process found"). at: when it
        ended (UNIX s), when reported.
    """

    where: str
    ranks: tuple[int, ...] = ()
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    at: float | None = None


@dataclass(frozen=True)
class LivenessSignal:
    """The ranks' liveness in one reading.

    Attributes:
        backend: ``"inventory"``, ``"slurm"`` or ``"kubernetes"``. state: :class:`Liveness`.
        ranks_expected: the job's world size. ranks_running: ranks known to run (None: not known).
        exits: what does not run, rank order, at most :data:`MAX_EXITS`. exits_total: all of them.
        errors: hosts (or the scheduler) that could not be asked. detail: one line saying what was
        seen. unknown: why the state is UNKNOWN (None otherwise).
    """

    backend: str
    state: Liveness
    ranks_expected: int
    ranks_running: int | None = None
    exits: tuple[RankExit, ...] = ()
    exits_total: int = 0
    errors: tuple[SourceError, ...] = ()
    detail: str = ""
    unknown: str | None = None

    @property
    def ranks_alive(self) -> bool | None:
        """The hang rule's ``ranks_alive``: True when every rank runs, False when one is known dead,
        None otherwise (waiting, ended, unknown: a hang cannot be judged)."""
        if self.state is Liveness.ALIVE:
            return True
        if self.state is Liveness.DEAD:
            return False
        return None


def _unknown_liveness(
    backend: str, ranks: int, why: str, errors: Sequence[SourceError] = ()
) -> LivenessSignal:
    why = _line(why)
    return LivenessSignal(backend, Liveness.UNKNOWN, ranks, errors=tuple(errors), detail=why, unknown=why)


def _inventory_liveness(
    job: Job, hosts: Sequence[Host], pool: TransportPool, diagnose: DiagnoseSettings | None
) -> LivenessSignal:
    """The inventory back end: the job's rank processes on each host (:func:`list_ranks`)."""
    from robustctl.jobs.launch import list_ranks

    g = job.ranks_per_host
    expected = len(hosts) * g
    if not hosts:
        return _unknown_liveness("inventory", 0, f"job {job.name} has no hosts to look for its ranks on")
    if job.process is None:
        return _unknown_liveness(
            "inventory",
            expected,
            f"jobs.{job.name} has no process: section: its rank processes cannot be found",
        )
    found = list_ranks(job, hosts, pool, diagnose=diagnose)
    errors = tuple(SourceError("liveness", h.host, _line(h.error)) for h in found if h.error is not None)
    exits = [
        RankExit(h.host, h.missing, reason="no rank process found (process.match)")
        for h in found
        if h.error is None and h.missing
    ]
    running = sum(len(h.found) for h in found if h.error is None)
    dead = sum(len(e.ranks) for e in exits)
    if exits:
        detail = f"{dead} of {expected} rank(s) not running" + (
            f"; {len(errors)} host(s) not read" if errors else ""
        )
        return LivenessSignal(
            "inventory",
            Liveness.DEAD,
            expected,
            running,
            tuple(exits[:MAX_EXITS]),
            len(exits),
            errors,
            detail,
        )
    if errors:
        return _unknown_liveness(
            "inventory",
            expected,
            f"{len(errors)} host(s) not read: " + "; ".join(f"{e.host}: {e.reason}" for e in errors[:3]),
            errors,
        )
    return LivenessSignal(
        "inventory", Liveness.ALIVE, expected, running, detail=f"all {expected} rank(s) running"
    )


def parse_slurm_exit_code(text: str) -> tuple[int | None, int | None]:
    """Slurm's ``ExitCode`` (``scontrol``, ``sacct``): ``"EXIT:SIGNAL"`` → ``(exit, signal)``.

    Slurm's sacct manual: "the exit code returned by the job script ... Following the colon is the
    signal that caused the process to terminate if it was terminated by a signal". Returns
    ``(None, None)`` for text that is not two integers 0 … 255 separated by ``:``.
    """
    m = re.fullmatch(r"\s*(\d{1,3}):(\d{1,3})\s*", text[:32], re.ASCII)
    if m is None:
        return None, None
    code, sig = int(m.group(1)), int(m.group(2))
    if code > 255 or sig > 255:
        return None, None
    return code, sig


_SLURM_ALIVE = frozenset({"RUNNING", "CONFIGURING", "STAGE_OUT", "SIGNALING"})
_SLURM_WAITING = frozenset(
    {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED", "SPECIAL_EXIT", "STOPPED"}
)
_SLURM_DEAD = frozenset(
    {"BOOT_FAIL", "CANCELLED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT"}
)


def slurm_job_liveness(
    job_id: str, state: str, exit_code: str, ranks: int, reason: str = ""
) -> LivenessSignal:
    """The liveness a Slurm job's state and ``ExitCode`` say (Slurm's squeue manual, "JOB STATE CODES").

    RUNNING, CONFIGURING, STAGE_OUT, SIGNALING: alive. PENDING, REQUEUED, REQUEUE_HOLD, REQUEUE_FED,
    RESIZING, SUSPENDED, SPECIAL_EXIT, STOPPED: waiting (neither running nor ended). COMPLETED: ended
    with ``ExitCode`` 0:0, else dead. COMPLETING: dead when the exit code or signal is non-zero, else
    waiting (the next reading says how it ended). BOOT_FAIL, CANCELLED, DEADLINE, FAILED, NODE_FAIL,
    OUT_OF_MEMORY, PREEMPTED, TIMEOUT: dead (the job left the running state). Anything else: unknown.

    Args:
        job_id: Slurm job id.
        state: its state (``CANCELLED by 0`` is read as CANCELLED).
        exit_code: its ``ExitCode`` text (``CODE:SIGNAL``).
        ranks: the job's world size.
        reason: Slurm's state reason (empty, ``None`` or ``(null)``: none).

    Returns:
        A ``slurm`` :class:`LivenessSignal` whose ``detail`` names the job and its state: ``ALIVE``
        with every rank running; ``DEAD`` with one :class:`RankExit` for the job; ``ENDED`` or
        ``WAITING`` with no rank running; ``UNKNOWN`` (a state robustctl does not know) with the
        running ranks not known.
    """
    words = state.strip().upper().split()
    base = words[0].rstrip("+") if words else ""
    code, sig = parse_slurm_exit_code(exit_code)
    where = f"slurm job {_line(job_id, 40)}"
    why = _line(f"{base or '?'}" + (f" ({reason})" if reason and reason not in ("None", "(null)") else ""))
    shown = f"exit code {exit_code.strip()[:16]}" if code is not None else "no exit code"
    failed = (code or 0) != 0 or (sig or 0) != 0
    if base in _SLURM_ALIVE:
        return LivenessSignal("slurm", Liveness.ALIVE, ranks, ranks, detail=f"{where} {why}")
    if base in _SLURM_DEAD or (base in ("COMPLETED", "COMPLETING") and failed):
        ex = RankExit(where, (), code, sig or None, why)
        return LivenessSignal("slurm", Liveness.DEAD, ranks, 0, (ex,), 1, detail=f"{where} {why}, {shown}")
    if base == "COMPLETED":
        return LivenessSignal("slurm", Liveness.ENDED, ranks, 0, detail=f"{where} COMPLETED, {shown}")
    if base in _SLURM_WAITING or base == "COMPLETING":
        return LivenessSignal("slurm", Liveness.WAITING, ranks, 0, detail=f"{where} {why}")
    return _unknown_liveness("slurm", ranks, f"{where} is in state {why!r}, which robustctl does not know")


def parse_sacct(text: str) -> list[tuple[str, str, str, str]]:
    """``sacct -n -P -X -o JobID,JobName,State,ExitCode`` output → ``(id, name, state, exit code)`` per
    job, in sacct's order; lines that do not have the four ``|``-separated fields are skipped."""
    out: list[tuple[str, str, str, str]] = []
    for line in text.splitlines()[:10_000]:
        parts = line.strip().split("|")
        if len(parts) == 4 and parts[0]:
            out.append((parts[0][:64], parts[1][:256], parts[2][:64], parts[3][:16]))
    return out


def _job_id_key(job_id: str) -> tuple[int, int]:
    """Sort key of a Slurm job id (``"123"`` or ``"123_4"``): newest last."""
    m = re.fullmatch(r"(\d{1,18})(?:_(\d{1,18}))?", job_id, re.ASCII)
    if m is None:
        return (-1, -1)
    return int(m.group(1)), int(m.group(2) or 0)


@dataclass(frozen=True)
class _SlurmRecord:
    """What the Slurm liveness read found out about the job's output files."""

    job_id: str
    stdout: str | None
    stderr: str | None
    batch_host: str | None


def _slurm_path(value: str | None) -> str | None:
    if not value or value in ("(null)", "/dev/null") or not value.startswith("/") or "\x00" in value:
        return None
    return value[:4096]


def _slurm_liveness(slurm: Slurm, name: str, ranks: int) -> tuple[LivenessSignal, _SlurmRecord | None]:
    """The Slurm job named (or numbered) ``name``: squeue to find it, scontrol for its state and
    exit code, sacct when the controller no longer holds it. Raises SchedulerError."""
    from robustctl.schedulers.base import SchedulerError
    from robustctl.schedulers.slurm import job_from_scontrol, parse_scontrol_records

    jobs = [j for j in slurm.jobs() if j.name == name or j.job_id == name]
    live = [j for j in jobs if not j.finished]
    if len(live) > 1:
        ids = ", ".join(j.job_id for j in live[:8])
        return _unknown_liveness("slurm", ranks, f"{len(live)} Slurm jobs are named {name!r} ({ids})"), None
    chosen = live[0] if live else (max(jobs, key=lambda j: _job_id_key(j.job_id)) if jobs else None)
    if chosen is not None:
        try:
            records = parse_scontrol_records(
                slurm.run(["scontrol", "show", "job", "-o", chosen.job_id]).stdout
            )
            record = records[0] if records else None
        except (SchedulerError, ValueError):
            record = None
        if record is not None:
            try:
                info = job_from_scontrol(record)
            except ValueError:
                info = chosen
            signal = slurm_job_liveness(
                info.job_id, info.state, record.get("ExitCode", ""), ranks, info.reason
            )
            out = _SlurmRecord(
                info.job_id,
                _slurm_path(record.get("StdOut")),
                _slurm_path(record.get("StdErr")),
                record.get("BatchHost") or None,
            )
            return signal, out
    argv = ["sacct", "-n", "-P", "-X", "-o", "JobID,JobName,State,ExitCode"]
    argv += ["-j", chosen.job_id] if chosen is not None else ["--name", name, "-S", SACCT_WINDOW]
    rows = [
        r for r in parse_sacct(slurm.run(argv).stdout) if r[1] == name or r[0] == name or chosen is not None
    ]
    if not rows:
        return _unknown_liveness(
            "slurm", ranks, f"Slurm knows no job named {name!r} (squeue, sacct since {SACCT_WINDOW})"
        ), None
    job_id, _, state, code = max(rows, key=lambda r: _job_id_key(r[0]))
    return slurm_job_liveness(job_id, state, code, ranks), _SlurmRecord(job_id, None, None, None)


def _rfc3339(value: object) -> float | None:
    """A Kubernetes time (``2025-01-01T00:00:00Z``) as UNIX seconds, or None."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    try:
        return unix_time(dt.timestamp())
    except (OverflowError, OSError, ValueError):
        return None


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class _PodSeen:
    """One pod as :func:`pod_liveness` reads it: its index (None: no valid one), its place among the
    exits (``order``), phase, whether it is being deleted, its exits and its termination messages."""

    index: int | None
    order: int
    phase: object
    deleting: bool
    exits: tuple[RankExit, ...]
    tails: tuple[LogTail, ...]


def _pod_index(meta: Mapping[str, Any], index_label: str) -> int | None:
    """The pod's completion index from ``index_label`` (a label, else an annotation), or None."""
    raw = _mapping(meta.get("labels")).get(index_label, _mapping(meta.get("annotations")).get(index_label))
    if isinstance(raw, str) and raw.isascii() and raw.isdigit() and len(raw) <= 9:
        return int(raw)
    return None


def _container(
    cs_raw: object, pod: str, node: str, namespace: str, ranks: tuple[int, ...]
) -> tuple[RankExit | None, LogTail | None]:
    """One container status: its exit (a non-zero exit code or a signal, now or before a
    ``CrashLoopBackOff``) and the scan of its termination message, each None when there is none."""
    cs = _mapping(cs_raw)
    cname = _line(cs.get("name", "?"), 63)
    state = _mapping(cs.get("state"))
    term = _mapping(state.get("terminated"))
    waiting = _mapping(state.get("waiting"))
    if not term and waiting.get("reason") == "CrashLoopBackOff":
        term = _mapping(_mapping(cs.get("lastState")).get("terminated"))
    if not term:
        return None, None
    code = _int(term.get("exitCode"), -(2**31), 2**31)
    sig = _int(term.get("signal"), 0, 255)
    message = term.get("message")
    tail = None
    if isinstance(message, str) and message.strip():
        text = message[-MAX_TERMINATION_MESSAGE_CHARS:]
        where = f"pod {namespace}/{pod} container {cname} termination message"
        tail = LogTail(node, where, ranks, scan_log(text), None, len(text))
    exit_ = None
    if (code or 0) != 0 or (sig or 0) != 0:
        why = _line(f"container {cname} {term.get('reason') or 'terminated'}", 200)
        exit_ = RankExit(f"pod {pod}", ranks, code, sig, why, _rfc3339(term.get("finishedAt")))
    return exit_, tail


def _pod(
    raw: Mapping[str, Any], seen: int, expected_pods: int, per_pod: int, index_label: str, namespace: str
) -> _PodSeen:
    """Read one pod (the ``seen``-th JSON object among the pods)."""
    meta = _mapping(raw.get("metadata"))
    status = _mapping(raw.get("status"))
    name = _line(meta.get("name", "?"), 253)
    node = _line(_mapping(raw.get("spec")).get("nodeName") or "?", 253)
    index = _pod_index(meta, index_label)
    ranks = tuple(range(index * per_pod, (index + 1) * per_pod)) if index is not None and per_pod else ()
    exits: list[RankExit] = []
    tails: list[LogTail] = []
    statuses = status.get("containerStatuses")
    for cs_raw in (statuses if isinstance(statuses, list) else [])[:MAX_POD_CONTAINERS]:
        exit_, tail = _container(cs_raw, name, node, namespace, ranks)
        tails.extend([tail] if tail is not None else [])
        exits.extend([exit_] if exit_ is not None else [])
    phase = status.get("phase")
    if phase == "Failed" and not exits:
        why = _line(f"pod Failed: {status.get('reason') or ''} {status.get('message') or ''}".strip(), 200)
        exits.append(RankExit(f"pod {name}", ranks, None, None, why))
    order = index if index is not None else expected_pods + seen
    return _PodSeen(index, order, phase, bool(meta.get("deletionTimestamp")), tuple(exits), tuple(tails))


def _pods_signal(
    exits: list[tuple[int, RankExit]],
    running: int,
    succeeded: int,
    seen: int,
    expected_pods: int,
    ranks: int,
    per_rank: int,
) -> LivenessSignal:
    """The job's liveness from what its pods said (:func:`pod_liveness`'s rule)."""
    if exits:
        exits.sort(key=lambda x: x[0])
        listed = tuple(e for _, e in exits[:MAX_EXITS])
        detail = f"{len(exits)} container/pod exit(s); {running} of {expected_pods} pod(s) running"
        return LivenessSignal(
            "kubernetes", Liveness.DEAD, ranks, running * per_rank, listed, len(exits), detail=detail
        )
    if seen == 0:
        return _unknown_liveness("kubernetes", ranks, "no pod of the job found")
    if expected_pods and running == expected_pods:
        return LivenessSignal(
            "kubernetes", Liveness.ALIVE, ranks, ranks, detail=f"all {expected_pods} pod(s) running"
        )
    if expected_pods and succeeded == expected_pods:
        return LivenessSignal(
            "kubernetes", Liveness.ENDED, ranks, 0, detail=f"all {expected_pods} pod(s) succeeded"
        )
    return LivenessSignal(
        "kubernetes",
        Liveness.WAITING,
        ranks,
        running * per_rank,
        detail=f"{running} of {expected_pods} pod(s) running, {seen} pod(s) found",
    )


def pod_liveness(
    pods: Sequence[object],
    *,
    machines: int,
    ranks_per_host: int,
    pods_per_host: int = 1,
    index_label: str = "batch.kubernetes.io/job-completion-index",
    namespace: str = "default",
) -> tuple[LivenessSignal, tuple[LogTail, ...]]:
    """The liveness a Kubernetes job's pods say, and the scans of their containers' termination messages.

    Per pod (its index from ``index_label``, a label or an annotation, holds ranks ``i·R … i·R+R-1``
    with R = ``ranks_per_host / pods_per_host``): a container whose current state is ``terminated``
    with a non-zero ``exitCode`` (or a ``signal``), or that waits in ``CrashLoopBackOff`` after such an
    exit (``lastState``), or a pod in phase ``Failed``, is an exit (Kubernetes API, PodStatus and
    ContainerStatus). The job is DEAD with any exit; ALIVE when every one of the ``machines ×
    pods_per_host`` indices has a Running pod that is not being deleted; ENDED when every index has a
    Succeeded pod; UNKNOWN with no pod; else WAITING (pods pending or being recreated). A terminated
    container's ``message`` (the termination message, or with ``terminationMessagePolicy:
    FallbackToLogsOnError`` the last 2048 bytes or 80 lines of its log: kubernetes.io, "Determine the
    Reason for Pod Failure", "Customizing the termination message") is scanned like a log tail.

    Args:
        pods: the job's pods as the API returns them (JSON objects; anything else is skipped).
        machines: the job's machine count.
        ranks_per_host: G.
        pods_per_host: P.
        index_label: the scheduler's ``index_label``.
        namespace: for the tails' names.

    Returns:
        ``(signal, tails)``. Never raises on any input.
    """
    expected_pods = max(0, machines) * max(1, pods_per_host)
    ranks = max(0, machines) * max(0, ranks_per_host)
    per_pod = (
        ranks_per_host // pods_per_host if pods_per_host > 0 and ranks_per_host % pods_per_host == 0 else 0
    )
    exits: list[tuple[int, RankExit]] = []
    tails: list[LogTail] = []
    running: set[int] = set()
    succeeded: set[int] = set()
    seen = 0
    for raw in pods[:MAX_PODS]:
        if not isinstance(raw, Mapping):
            continue
        seen += 1
        pod = _pod(raw, seen, expected_pods, per_pod, index_label, namespace)
        tails.extend(pod.tails)
        exits.extend((pod.order, e) for e in pod.exits)
        if pod.index is not None and 0 <= pod.index < expected_pods:
            if pod.phase == "Running" and not pod.deleting and not pod.exits:
                running.add(pod.index)
            elif pod.phase == "Succeeded":
                succeeded.add(pod.index)
    per_rank = per_pod or (ranks // expected_pods if expected_pods else 0)
    return _pods_signal(exits, len(running), len(succeeded), seen, expected_pods, ranks, per_rank), tuple(
        tails
    )


# ------------------------------------------------------------------------------------------- findings


@dataclass(frozen=True)
class CriticalCheck:
    """A check of a host that is CRITICAL now.

    Attributes:
        check: its name (``nvml.count``, ``host.xid``, ...). kind: what it means (:data:`FINDING_KINDS`,
        else the name). detail: the worst result's line. since: UNIX s it has been critical since.
    """

    check: str
    kind: str
    detail: str
    since: float


@dataclass(frozen=True)
class HostFinding:
    """One host's latest sweep/diagnose verdict.

    Attributes:
        host: inventory name. status: its verdict (``ok``, ``warning``, ``critical``, ``unknown``):
        a sweep records ``critical`` only for a host its debounce policy names (a confirmed finding),
        a diagnose run its own verdict (:mod:`robustctl.sweep.history`). since / last_seen: UNIX s the
        verdict holds since and was last observed (a caller may ignore a stale one). checks: its checks
        that are critical now, by name (at most :data:`MAX_HOST_CHECKS`; pending ones included when the
        verdict is not critical yet).
    """

    host: str
    status: str
    since: float
    last_seen: float
    checks: tuple[CriticalCheck, ...] = ()

    @property
    def critical(self) -> bool:
        """The host's verdict is critical (issue 22: class ``host-critical``, playbook ``gpu-lost``)."""
        return self.status == Status.CRITICAL.value


@dataclass(frozen=True)
class FindingsSignal:
    """The host findings of one reading.

    Attributes:
        hosts: the job's hosts with a recorded verdict, rank order. unseen: hosts never swept or
        diagnosed. unknown: why the store could not be read (None: read).
    """

    hosts: tuple[HostFinding, ...] = ()
    unseen: tuple[str, ...] = ()
    unknown: str | None = None

    @property
    def critical(self) -> tuple[HostFinding, ...]:
        """The hosts whose verdict is critical."""
        return tuple(h for h in self.hosts if h.critical)


def findings_from_states(
    states: Mapping[tuple[str, str], CheckState], hosts: Sequence[str]
) -> FindingsSignal:
    """The :class:`FindingsSignal` of ``hosts`` from ``check_state`` rows (keyed by (host, check), as
    :func:`robustctl.sweep.history.check_states` returns them). Pure; never raises."""
    per_host: dict[str, list[CheckState]] = {}
    for (host, _), st in states.items():
        per_host.setdefault(host, []).append(st)
    found: list[HostFinding] = []
    unseen: list[str] = []
    for host in dict.fromkeys(hosts):
        rows = per_host.get(host, [])
        verdict = next((s for s in rows if s.check == HOST_CHECK), None)
        if verdict is None:
            unseen.append(host)
            continue
        bad = sorted(
            (s for s in rows if s.check != HOST_CHECK and s.status == Status.CRITICAL.value),
            key=lambda s: s.check,
        )
        checks = tuple(
            CriticalCheck(
                s.check[:128], FINDING_KINDS.get(s.check, s.check[:128]), _line(s.detail, 200), s.since
            )
            for s in bad[:MAX_HOST_CHECKS]
        )
        found.append(HostFinding(host, verdict.status[:32], verdict.since, verdict.last_seen, checks))
    return FindingsSignal(tuple(found), tuple(unseen))


def read_findings(store: Store | None, hosts: Sequence[str]) -> FindingsSignal:
    """The latest sweep/diagnose verdict of each of ``hosts`` from ``store`` (module docstring, item 4).

    Args:
        store: the open store (None: none, the findings are ``unknown``).
        hosts: the job's machines, inventory names.

    Returns:
        The :class:`FindingsSignal`; ``unknown`` set (nothing raised) when there is no store or it
        cannot be read (a damaged row is a :class:`~robustctl.store.StoreError`, said in one line).
    """
    if store is None:
        return FindingsSignal(unseen=tuple(hosts), unknown="no state store: host findings not read")
    try:
        states = check_states(store, hosts)
    except RobustctlError as exc:
        return FindingsSignal(unseen=tuple(hosts), unknown=_line(f"host findings not read: {exc}"))
    return findings_from_states(states, hosts)


# --------------------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class JobReading:
    """One reading of a job's signals: what the watch rules judge.

    Feed it to the rules as ``judge_hang(r.newest_step_time, r.read_at, r.ranks_alive, r.step_times)``,
    ``observe_step_time`` per new step time, ``judge_losses(losses, start=start)`` with ``losses, start
    = r.losses_after(last_step)``, the crash
    verdicts of :attr:`log_verdicts`, :attr:`liveness` (``DEAD``: class ``crash``) and
    :attr:`findings` (``critical``: class ``host-critical``).

    Attributes:
        job: the job's name. backend: the scheduler back end read (``inventory``, ``slurm``,
        ``kubernetes``). hosts: the job's machines read, rank order. read_at: control-side UNIX time
        of the reading (taken once the progress signal was read).
        progress, liveness, logs, findings: the four signals (module docstring).
    """

    job: str
    backend: str
    hosts: tuple[str, ...]
    read_at: float
    progress: ProgressSignal
    liveness: LivenessSignal
    logs: LogSignal
    findings: FindingsSignal

    @property
    def newest_step_time(self) -> float | None:
        """The time of the job's newest step on the control clock: ``read_at`` minus the age measured
        on the hosts' own clocks (:attr:`ProgressSignal.age_s`), so a host clock that is off does not
        make or hide a hang; None when no step was read."""
        age = self.progress.age_s
        return None if age is None else self.read_at - age

    @property
    def ranks_alive(self) -> bool | None:
        """True: every rank runs; False: one is known dead; None: not known (:class:`LivenessSignal`)."""
        return self.liveness.ranks_alive

    @property
    def step_times(self) -> tuple[float, ...]:
        """The step times read (seconds), in step order."""
        return self.progress.step_times

    def losses_after(self, step: int | None) -> tuple[tuple[float, ...], int]:
        """``(losses, start)`` for :func:`~robustctl.watch.rules.judge_losses`: every loss read, in
        step order, and the index of the first one of a step after ``step`` (the newest step judged
        before; None: all are new)."""
        with_loss = [s for s in self.progress.samples if s.loss is not None]
        losses = tuple(s.loss for s in with_loss if s.loss is not None)
        if step is None:
            return losses, 0
        start = next((i for i, s in enumerate(with_loss) if s.step > step), len(with_loss))
        return losses, start

    @property
    def log_verdicts(self) -> tuple[tuple[LogTail, Verdict], ...]:
        """Each log tail whose scan shows a fatal error, with its crash verdict."""
        return self.logs.verdicts

    @property
    def errors(self) -> tuple[SourceError, ...]:
        """Every host (or scheduler) a signal could not be read from."""
        return (*self.progress.errors, *self.liveness.errors, *self.logs.errors)

    @property
    def unknown(self) -> tuple[tuple[str, str], ...]:
        """``(signal, why)`` for each signal that could not be read."""
        pairs = (
            ("progress", self.progress.unknown),
            ("liveness", self.liveness.unknown),
            ("logs", self.logs.unknown),
            ("findings", self.findings.unknown),
        )
        return tuple((name, why) for name, why in pairs if why is not None)


def _launch_logs(job: Job, hosts: Sequence[Host]) -> list[tuple[Host, list[tuple[str, tuple[int, ...]]]]]:
    """Per host, the logs ``restart`` writes for ``job`` (:func:`robustctl.jobs.launch.render_launch`,
    ``{ckpt_iter}`` as ``none``). Raises ConfigError when a template cannot be filled."""
    from robustctl.jobs.launch import render_launch

    by_host: dict[str, list[tuple[str, tuple[int, ...]]]] = {}
    for p in render_launch(job, hosts, None):
        files = by_host.setdefault(p.host, [])
        if all(path != p.log for path, _ in files):
            files.append((p.log, p.ranks))
    return [(h, by_host.get(h.name, [])) for h in hosts]


# ------------------------------------------------------------------------------------------- pod logs


@dataclass(frozen=True)
class _PodLog:
    """One container log of a running pod to read: the pod (namespace, name, node, ranks) and the
    container (None: the pod names none, the server picks its only one)."""

    namespace: str
    pod: str
    node: str
    ranks: tuple[int, ...]
    container: str | None

    @property
    def path(self) -> str:
        """The log's name in a :class:`LogTail`: ``"pod NS/NAME container C log"``."""
        return f"pod {self.namespace}/{self.pod} container {self.container or '(only)'} log"


def _pod_ranks(meta: Mapping[str, Any], index_label: str, per_pod: int) -> tuple[int, ...]:
    """A pod's ranks from its index (``index_label``, a label or an annotation): ``i·R … i·R+R-1``
    with R = ``per_pod``, as :func:`pod_liveness` maps them; () without an index."""
    raw = _mapping(meta.get("labels")).get(index_label, _mapping(meta.get("annotations")).get(index_label))
    if per_pod <= 0 or not (isinstance(raw, str) and raw.isascii() and raw.isdigit() and len(raw) <= 9):
        return ()
    i = int(raw)
    return tuple(range(i * per_pod, (i + 1) * per_pod))


def _pod_logs_of(
    pods: Sequence[object], *, namespace: str, index_label: str, ranks_per_host: int, pods_per_host: int
) -> tuple[list[_PodLog], int]:
    """The container logs to read: each container (``spec.containers``, at most
    :data:`MAX_POD_CONTAINERS`) of each pod in phase Running and not being deleted, at most
    :data:`MAX_PODS` in all; and how many were left out past that bound. Never raises."""
    per_pod = (
        ranks_per_host // pods_per_host if pods_per_host > 0 and ranks_per_host % pods_per_host == 0 else 0
    )
    out: list[_PodLog] = []
    left = 0
    for raw in pods[:MAX_PODS]:
        if not isinstance(raw, Mapping):
            continue
        meta = _mapping(raw.get("metadata"))
        name = meta.get("name")
        if _mapping(raw.get("status")).get("phase") != "Running" or meta.get("deletionTimestamp"):
            continue
        if not isinstance(name, str) or not name:
            continue
        spec = _mapping(raw.get("spec"))
        node = _line(spec.get("nodeName") or "?", 253)
        ranks = _pod_ranks(meta, index_label, per_pod)
        specs = spec.get("containers")
        names: list[str | None] = [
            c["name"]
            for c in (specs if isinstance(specs, list) else [])[:MAX_POD_CONTAINERS]
            if isinstance(c, Mapping) and isinstance(c.get("name"), str) and c["name"]
        ]
        for container in names or [None]:
            if len(out) >= MAX_PODS:
                left += 1
                continue
            out.append(_PodLog(namespace, name, node, ranks, container))
    return out, left


def _pod_log_full(text: str) -> tuple[int, bool]:
    """``(bytes, full)``: the answer's size as UTF-8, and whether it reached :data:`POD_LOG_LIMIT_BYTES`
    (within one examined line: the server may stop slightly short), so its newest lines may be cut."""
    size = len(text.encode(_TEXT, "replace"))
    return size, size >= POD_LOG_LIMIT_BYTES - MAX_LINE_CHARS


def _read_pod_log(
    api: KubeApi, log: _PodLog, deadline: float, samples: _SampleSet
) -> tuple[LogTail, str | None]:
    """Read and scan one container's log tail: ``(tail, problem)``, problem saying why its newest
    lines are not known (None: read whole). An answer that fills :data:`POD_LOG_LIMIT_BYTES` is asked
    again once, before ``deadline``, with the lines that fit :data:`~robustctl.watch.logscan.MAX_TAIL_BYTES`
    at its own line lengths. A failed request is the tail's error and the problem."""
    from robustctl.schedulers.base import SchedulerError

    lines = POD_LOG_TAIL_LINES
    try:
        text = api.read_pod_log(
            log.namespace, log.pod, container=log.container, limit_bytes=POD_LOG_LIMIT_BYTES, tail_lines=lines
        )[-POD_LOG_LIMIT_BYTES:]
        size, full = _pod_log_full(text)
        if full and time.monotonic() < deadline:
            lines = max(1, min(lines - 1, max(1, text.count("\n")) * MAX_TAIL_BYTES // max(1, size)))
            text = api.read_pod_log(
                log.namespace,
                log.pod,
                container=log.container,
                limit_bytes=POD_LOG_LIMIT_BYTES,
                tail_lines=lines,
            )[-POD_LOG_LIMIT_BYTES:]
            size, full = _pod_log_full(text)
    except SchedulerError as exc:
        why = _line(exc.reason, 200)
        return LogTail(log.node, log.path, log.ranks, error=why), why
    problem = (
        f"its newest {lines} line(s) hold over {POD_LOG_LIMIT_BYTES} bytes: the newest were not read"
        if full
        else None
    )
    samples.add(training_samples(text, _line(f"{log.node} {log.path}", 200)))
    scan = scan_log(text)
    return LogTail(log.node, log.path, log.ranks, scan, None, scan.bytes_read), problem


def _read_pod_logs(
    api: KubeApi,
    logs: Sequence[_PodLog],
    left: int,
    samples: _SampleSet,
    diagnose: DiagnoseSettings | None,
) -> tuple[list[LogTail], list[SourceError], str | None]:
    """Read and scan ``logs`` through the API (:func:`_read_pod_log`), :data:`POD_LOG_CONCURRENCY`
    at once (at most the diagnose concurrency), all within :data:`LOG_READ_TIMEOUT_S`:
    ``(tails, errors, unknown)``. Each log not read, or whose newest lines were not, is named in
    ``unknown`` (with ``left``, the logs past :data:`MAX_PODS`); a failed one is also an error of its
    pod. Never raises."""
    concurrency = max(1, min(POD_LOG_CONCURRENCY, _knobs(diagnose)[0]))
    outcomes = fan_out_units(
        list(logs),
        lambda log, deadline: _read_pod_log(api, log, deadline, samples),
        concurrency=concurrency,
        unit_timeout_s=LOG_READ_TIMEOUT_S,
        deadline=time.monotonic() + LOG_READ_TIMEOUT_S,
        retries=0,
        backoff_s=0.0,
    )
    tails: list[LogTail] = []
    errors: list[SourceError] = []
    problems: list[str] = []
    for o in outcomes:
        log = o.unit
        if o.ok and o.value is not None:
            tail, problem = o.value
        else:
            problem = (
                f"not read within the {LOG_READ_TIMEOUT_S:g} s deadline"
                if o.outcome is Outcome.TIMED_OUT
                else _line(o.error or o.outcome.value, 200)
            )
            tail = LogTail(log.node, log.path, log.ranks, error=problem)
        tails.append(tail)
        if problem is None:
            continue
        problems.append(f"pod {log.pod} container {log.container or '(only)'}: {problem}")
        if tail.error is not None:
            errors.append(SourceError("logs", f"pod {log.pod}", _line(f"{log.path}: {problem}")))
    if left:
        problems.append(f"{left} container log(s) past the {MAX_PODS} read per reading were left out")
    if not problems:
        return tails, errors, None
    n = len(problems) - (1 if left else 0)
    head = f"pod logs: {n} of {len(logs)} container log(s) not read whole"
    return tails, errors, _line(f"{head}: {'; '.join(problems)}")


def _scheduler_reads(
    job: Job,
    hosts: Sequence[Host],
    pool: TransportPool,
    scheduler: Scheduler,
    samples: _SampleSet,
    diagnose: DiagnoseSettings | None,
) -> tuple[LivenessSignal, list[LogTail], list[SourceError], str | None]:
    """Liveness and log tails from a Slurm or Kubernetes back end: ``(liveness, tails, errors,
    unknown)``. Raises RobustctlError (SchedulerError) when the scheduler cannot be asked."""
    ranks = len(hosts) * job.ranks_per_host
    from robustctl.schedulers.kubernetes import Kubernetes
    from robustctl.schedulers.slurm import Slurm

    if isinstance(scheduler, Slurm):
        liveness, record = _slurm_liveness(scheduler, job.name, ranks)
        paths = list(dict.fromkeys(p for p in (record.stdout, record.stderr) if p)) if record else []
        if not paths:
            return liveness, [], [], "the Slurm job names no output file that can be read"
        where = next((h for h in hosts if record is not None and h.name == record.batch_host), None)
        host = where or (hosts[0] if hosts else None)
        if host is None:
            return liveness, [], [], "the job has no host to read its Slurm output file on"
        tails, errors = _read_tails(pool, [(host, [(p, ()) for p in paths])], samples, diagnose)
        return liveness, tails, errors, None
    if isinstance(scheduler, Kubernetes):
        s = scheduler.settings
        pods = scheduler.api.list_pods(s.namespace, label_selector=f"{s.job_label}={job.name}")
        liveness, k8s_tails = pod_liveness(
            pods,
            machines=len(hosts),
            ranks_per_host=job.ranks_per_host,
            pods_per_host=s.pods_per_host,
            index_label=s.index_label,
            namespace=s.namespace,
        )
        logs, left = _pod_logs_of(
            pods,
            namespace=s.namespace,
            index_label=s.index_label,
            ranks_per_host=job.ranks_per_host,
            pods_per_host=s.pods_per_host,
        )
        log_tails, log_errors, unknown = _read_pod_logs(scheduler.api, logs, left, samples, diagnose)
        return liveness, [*k8s_tails, *log_tails], log_errors, unknown
    return (
        _unknown_liveness(scheduler.name, ranks, f"scheduler {scheduler.name} cannot report the job's state"),
        [],
        [],
        f"scheduler {scheduler.name}: the job's logs are not known",
    )


def read_job(
    job: Job,
    pool: TransportPool,
    *,
    hosts: Sequence[Host] | None = None,
    scheduler: Scheduler | None = None,
    store: Store | None = None,
    diagnose: DiagnoseSettings | None = None,
    clock: Callable[[], float] = time.time,
) -> JobReading:
    """Read every signal of ``job`` once (module docstring): progress, liveness, log tails, findings.

    The reads run one after the other, each bounded: the progress reader by ``progress.timeout_s``
    per host, the process scan by :func:`robustctl.jobs.launch.list_ranks`'s deadline, the log tails by
    :data:`LOG_READ_TIMEOUT_S` per host, a scheduler by its ``timeout_s`` per command or request.

    Args:
        job: the inventory job.
        pool: the transports.
        hosts: its current machines in rank order (after standby swaps; None: the inventory's list).
        scheduler: the back end (None or ``inventory``: the job's processes through the transports).
        store: for host findings (None: unknown).
        diagnose: fan-out settings (concurrency, retries).
        clock: the control side's UNIX clock.

    Returns:
        The :class:`JobReading`. Never raises for a host, a file, the scheduler or the store that
        cannot be read: each is an error or an ``unknown`` of its signal.
    """
    machines = tuple(job.hosts if hosts is None else hosts)
    names = tuple(h.name for h in machines)
    backend = scheduler.name if scheduler is not None else "inventory"
    ranks = len(machines) * job.ranks_per_host
    samples = _SampleSet()
    progress, read_at = read_progress_signal(pool, job, machines, diagnose=diagnose, clock=clock)
    samples.add(progress.samples)
    tails: list[LogTail] = []
    log_errors: list[SourceError] = []
    log_unknown: str | None = None
    tails.extend(progress.tails)
    if scheduler is None or backend == "inventory":
        try:
            liveness = _inventory_liveness(job, machines, pool, diagnose)
        except RobustctlError as exc:
            liveness = _unknown_liveness(backend, ranks, f"rank processes not read: {exc}")
        if job.launch is None:
            log_unknown = f"jobs.{job.name} has no launch: section: the logs of its ranks are not known"
        else:
            try:
                read, log_errors = _read_tails(pool, _launch_logs(job, machines), samples, diagnose)
                tails.extend(read)
            except RobustctlError as exc:
                log_unknown = _line(f"rank logs not read: {exc}")
    else:
        try:
            liveness, read, log_errors, log_unknown = _scheduler_reads(
                job, machines, pool, scheduler, samples, diagnose
            )
            tails.extend(read)
        except RobustctlError as exc:
            why = _line(f"scheduler {backend}: {exc}")
            liveness = _unknown_liveness(backend, ranks, why, (SourceError("liveness", backend, why),))
            log_unknown = why
    findings = read_findings(store, names)
    return JobReading(
        job=job.name,
        backend=backend,
        hosts=names,
        read_at=read_at,
        progress=replace(progress, samples=samples.result()),
        liveness=liveness,
        logs=LogSignal(tuple(tails), tuple(log_errors), log_unknown),
        findings=findings,
    )
