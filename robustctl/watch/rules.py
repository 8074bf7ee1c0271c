"""The watch rules: a job's signals → a signal class, pure and deterministic.

Each rule reads values handed in by its caller (times are UNIX seconds passed in, never read from the
clock here) and returns a :class:`Verdict` naming the class, the rule, the values that triggered it,
bounded evidence text and the rule's source, or ``None`` when the rule sees nothing wrong. A rule that
cannot tell (a source that could not be read, liveness unknown) answers :attr:`SignalClass.UNKNOWN`,
never ``None``: not checked is never healthy.

* **hang** (:func:`judge_hang`): the newest step is older than ``stall_after_s`` while every rank is
  alive. The default ``stall_after_s`` comes from the job's own measured step time
  (:func:`default_stall_after_s`).
* **fail-slow** (:func:`observe_step_time`, a state updated per sample): a lasting rise of the step
  time over its own baseline, found as a change point by Bayesian online change-point detection
  (BOCPD) on the log step time and confirmed by the post-change (lower) median against the pre-change
  median, with a rolling-median rule as a cross-check. :func:`detection_delay_and_false_alarms` measures the
  rule on a trace.
* **nan-loss** (:func:`judge_losses`): a NaN/Inf loss, or a loss spike against the rolling median.

The log classifier (explicit errors in a rank's log: CUDA, XID, NCCL, OOM, the last Python
exception) is :mod:`robustctl.watch.logscan`; it returns the same :class:`Verdict`.

Parameters (thresholds) are validated here as well as in the configuration: a value outside its bound
raises :class:`ValueError` (a programming error once the inventory's ``watch:`` section has been
checked against the same constants). Data (step times, losses, states read back) never raises except
:meth:`FailSlowState.from_json`, which raises :class:`~robustctl.errors.ConfigError` for a damaged
state.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from robustctl.config import SignalClass
from robustctl.errors import ConfigError

__all__ = [
    "CP_PROB_THRESHOLD",
    "DEFAULT_LOSS_WINDOW",
    "DEFAULT_PERSIST_STEPS",
    "DEFAULT_SLOW_FACTOR",
    "DEFAULT_SPIKE_FACTOR",
    "HANG_MAX_DEFAULT_STALL_S",
    "HANG_MIN_STALL_S",
    "HANG_STEP_MULTIPLE",
    "HANG_UNMEASURED_STALL_S",
    "HAZARD_LAMBDA",
    "MAX_EVIDENCE_CHARS",
    "MAX_LOSSES",
    "MAX_LOSS_WINDOW",
    "MAX_PERSIST_STEPS",
    "MAX_SLOW_FACTOR",
    "MAX_SPIKE_FACTOR",
    "MAX_STALL_AFTER_S",
    "MAX_STATE_JSON_CHARS",
    "MAX_STEP_TIME_S",
    "MAX_TRACE_SAMPLES",
    "MIN_BASELINE_STEPS",
    "MIN_LOSS_HISTORY",
    "RUN_LENGTH_MAX",
    "SOURCE_FAIL_SLOW",
    "SOURCE_HANG",
    "SOURCE_LOSS",
    "DetectionReport",
    "FailSlowParams",
    "FailSlowState",
    "SignalClass",
    "Verdict",
    "after_recovery",
    "default_stall_after_s",
    "detection_delay_and_false_alarms",
    "judge_hang",
    "judge_losses",
    "observe_step_time",
    "p99",
    "rolling_median_ratio",
]

Scalar = int | float | str | bool | None
"""A value that triggered a rule: JSON-able once non-finite floats are spelled (see :meth:`Verdict.to_json`)."""


MAX_EVIDENCE_CHARS = 512
"""Longest evidence text of a verdict, in characters (longer text is cut and ends with ``…``): one log
line or one sentence of values; a verdict is stored and printed per decision, so it must stay small
whatever a log line held."""
MAX_VALUES = 16
"""Most ``values`` entries a verdict keeps (the rules here use at most 12); bounds a stored decision."""
MAX_VALUE_CHARS = 256
"""Longest text value of a verdict (a process name, an operation type), in characters."""
_ELLIPSIS = "…"


def _cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the last one replaced by ``…`` when cut."""
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + _ELLIPSIS


@dataclass(frozen=True)
class Verdict:
    """What one rule concluded about a job.

    Attributes:
        signal: the class (:class:`SignalClass`).
        rule: the rule's name, e.g. ``"hang.stall"``, ``"fail-slow.bocpd"``, ``"loss.nonfinite"``,
            ``"log.cuda-error"``.
        values: the values that triggered it, as ``(name, value)`` pairs in a fixed order (at most
            :data:`MAX_VALUES`; text values cut at :data:`MAX_VALUE_CHARS`). Times are UNIX seconds,
            durations seconds, step times seconds.
        evidence: one line saying what was seen (a log line, or the values in words), at most
            :data:`MAX_EVIDENCE_CHARS` characters.
        source: where the rule and its thresholds come from (paper section, vendor source, or "our
            choice" with the reason).
        cause: for :attr:`SignalClass.CRASH` from a log, the kind of error (``"cuda-error"``,
            ``"xid"``, ``"nccl-timeout"``, ``"nccl-error"``, ``"oom"``, ``"python-exception"``); else
            ``None``.
    """

    signal: SignalClass
    rule: str
    values: tuple[tuple[str, Scalar], ...] = ()
    evidence: str = ""
    source: str = ""
    cause: str | None = None

    def __post_init__(self) -> None:
        """Cut evidence and text values to their bounds, whatever the caller passed."""
        values = tuple(
            (str(name)[:64], _cut(value, MAX_VALUE_CHARS) if isinstance(value, str) else value)
            for name, value in self.values[:MAX_VALUES]
        )
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "evidence", _cut(self.evidence, MAX_EVIDENCE_CHARS))
        object.__setattr__(self, "rule", _cut(self.rule, 64))

    def value(self, name: str) -> Scalar:
        """The value called ``name``, or ``None`` when the verdict has none."""
        for key, value in self.values:
            if key == name:
                return value
        return None

    def to_json(self) -> dict[str, Any]:
        """A strict-JSON dict (``signal``, ``rule``, ``values``, ``evidence``, ``source``, ``cause``);
        a non-finite float value is spelled ``"nan"``, ``"inf"`` or ``"-inf"`` (it is often the very
        value that triggered the rule, e.g. a NaN loss, so it is kept rather than made ``null``)."""
        return {
            "signal": self.signal.value,
            "rule": self.rule,
            "values": {name: _json_scalar(value) for name, value in self.values},
            "evidence": self.evidence,
            "source": self.source,
            "cause": self.cause,
        }


def _json_scalar(value: Scalar) -> Scalar:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _finite(x: object) -> bool:
    """True for an int or float (not a bool) that is finite."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _fmt_s(x: float) -> str:
    """A duration in seconds for evidence text: ``"734 s"``, ``"1.25 s"``, ``"0.0312 s"``."""
    if abs(x) >= 100:
        return f"{x:.0f} s"
    return f"{x:.3g} s"


def _median(values: Sequence[float]) -> float:
    """The median of a non-empty sequence (the mean of the two middle values for an even count)."""
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    if n % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2.0


def _low_median(values: Sequence[float]) -> float:
    """The lower median of a non-empty sequence: a value that more than half of the values reach or
    exceed (for an even count, the lower of the two middle values). A segment whose lower median is
    slow is slow in most of its samples, so a burst filling half of it does not count."""
    return sorted(values)[(len(values) - 1) // 2]


# --------------------------------------------------------------------------------------------- hang

SOURCE_HANG = (
    "hang: ByteRobust (arXiv 2509.16293) counts job hangs among the failures its controller detects "
    "while the job runs; the stall bound is issue 22's: max(10 x p99 step time, 120 s), and at most "
    "600 s before any step time is measured, PyTorch's default NCCL collective timeout "
    "(kProcessGroupNCCLDefaultTimeout = 10 min, ProcessGroupNCCL.hpp)"
)
"""Source of the hang rule and its thresholds."""
HANG_STEP_MULTIPLE = 10.0
"""``stall_after_s`` default = this × the p99 step time (issue 22): ten steps of the slowest kind the
job makes without a new one is far outside a healthy job's variation, yet detects a hang within
minutes when a step takes seconds."""
HANG_MIN_STALL_S = 120.0
"""Floor of the derived ``stall_after_s`` (issue 22): a job with sub-second steps still pauses for
checkpoint writes, evaluation and data-loader refills; two minutes covers those pauses."""
HANG_UNMEASURED_STALL_S = 600.0
"""``stall_after_s`` before any step time is measured (issue 22: at most 10 minutes): PyTorch's
default NCCL collective timeout (``kProcessGroupNCCLDefaultTimeout``, 10 min), after which the job's
own watchdog would abort a stuck collective anyway."""
HANG_MAX_DEFAULT_STALL_S = 3600.0
"""Ceiling of the derived ``stall_after_s`` (our choice): one slow outlier among few samples (the
first step's compilation, a checkpoint write counted as a step) must not push hang detection out by
hours; a job whose real p99 step exceeds 6 minutes sets ``stall_after_s`` explicitly."""
MAX_STALL_AFTER_S = 7 * 86400.0
"""Largest explicit ``stall_after_s`` accepted (a week, our choice): beyond that hang detection is off
in all but name; the inventory's ``watch:`` section applies the same bound."""
MAX_STEP_TIME_S = 86400.0 * 30
"""Largest step time (seconds) taken as a measurement (30 days, our choice); a larger or non-positive
value is a broken reading (a clock jump, a unit error) and is ignored by every rule here."""
MAX_STEP_TIME_SAMPLES = 4096
"""Most step times (the newest) the p99 is taken over: bounds the sort per evaluation; 4096 steps is
hours of a large job, enough for a stable p99."""
CLOCK_SKEW_TOLERANCE_S = 60.0
"""How far (seconds) the newest step may lie in the future of ``now`` and still be read as "just now"
(our choice: NTP-synchronised hosts agree within well under a second; a minute covers a host whose
clock is being slewed). Further ahead, the clocks disagree and the hang rule answers unknown: a host
clock that runs ahead would otherwise hide a hang for as long as it is ahead."""


def _valid_step_times(step_times: Iterable[float]) -> list[float]:
    """The usable measurements among ``step_times``: finite, > 0 and ≤ :data:`MAX_STEP_TIME_S`."""
    return [float(x) for x in step_times if _finite(x) and 0 < x <= MAX_STEP_TIME_S]


def p99(step_times: Sequence[float]) -> float | None:
    """The 99th percentile (nearest-rank) of the usable step times among the newest
    :data:`MAX_STEP_TIME_SAMPLES`, or ``None`` when there is none.

    Args:
        step_times: seconds per step, oldest first; NaN, infinite, non-positive and absurd values
            (> :data:`MAX_STEP_TIME_S`) are ignored.

    Returns:
        The 99th-percentile step time, seconds (one of the usable values); None when none is usable.
    """
    valid = _valid_step_times(step_times[-MAX_STEP_TIME_SAMPLES:])
    if not valid:
        return None
    valid.sort()
    rank = math.ceil(0.99 * len(valid))
    return valid[max(rank, 1) - 1]


def default_stall_after_s(step_times: Sequence[float]) -> tuple[float, str]:
    """The job's own ``stall_after_s``: max(:data:`HANG_STEP_MULTIPLE` × p99 step time,
    :data:`HANG_MIN_STALL_S`), at most :data:`HANG_MAX_DEFAULT_STALL_S`; :data:`HANG_UNMEASURED_STALL_S`
    when no step time is measured.

    Args:
        step_times: seconds per step, oldest first (unusable values ignored, see :func:`p99`).

    Returns:
        ``(seconds, how)`` where ``how`` says which branch gave it: ``"10 x p99"``, ``"floor"``,
        ``"ceiling"`` or ``"unmeasured"``.
    """
    q = p99(step_times)
    if q is None:
        return HANG_UNMEASURED_STALL_S, "unmeasured"
    derived = HANG_STEP_MULTIPLE * q
    if derived < HANG_MIN_STALL_S:
        return HANG_MIN_STALL_S, "floor"
    if derived > HANG_MAX_DEFAULT_STALL_S:
        return HANG_MAX_DEFAULT_STALL_S, "ceiling"
    return derived, "10 x p99"


def judge_hang(
    newest_step_time: float | None,
    now: float,
    ranks_alive: bool | None,
    step_times: Sequence[float] = (),
    stall_after_s: float | None = None,
) -> Verdict | None:
    """The hang rule: no new step for ``stall_after_s`` while every rank is alive.

    Args:
        newest_step_time: UNIX time of the job's newest step (the heartbeat's time field, else the
            progress file's mtime), or ``None`` when no progress could be read.
        now: UNIX time of the reading (the clock the step time was read against).
        ranks_alive: ``True`` when every rank is known alive, ``False`` when one is known dead,
            ``None`` when liveness could not be read.
        step_times: the job's measured step times (seconds, oldest first) for the default bound.
        stall_after_s: an explicit bound (seconds, in (0, :data:`MAX_STALL_AFTER_S`]); ``None`` for
            :func:`default_stall_after_s`.

    Returns:
        ``None`` when the job made a step within ``stall_after_s`` or a rank is dead (a crash, judged
        by the crash rules, not a hang); a :attr:`SignalClass.HANG` verdict (rule ``hang.stall``)
        when stalled with every rank alive; a :attr:`SignalClass.UNKNOWN` verdict when no step time
        was read (``hang.no-progress``), a time is not finite (``hang.bad-time``), the newest step
        lies more than :data:`CLOCK_SKEW_TOLERANCE_S` in the future (``hang.clock-skew``), or the job
        is stalled and liveness is unknown (``hang.liveness-unknown``). Never raises on data.

    Raises:
        ValueError: ``stall_after_s`` is not a number in (0, :data:`MAX_STALL_AFTER_S`].
    """
    if stall_after_s is not None:
        if not _finite(stall_after_s) or not 0 < stall_after_s <= MAX_STALL_AFTER_S:
            raise ValueError(
                f"stall_after_s must be in (0, {MAX_STALL_AFTER_S:.0f}] seconds, not {stall_after_s!r}"
            )
        bound, how = float(stall_after_s), "set"
    else:
        bound, how = default_stall_after_s(step_times)
    q = p99(step_times)
    base: list[tuple[str, Scalar]] = [("stall_after_s", bound), ("stall_after_from", how), ("p99_step_s", q)]
    if newest_step_time is None:
        return Verdict(
            SignalClass.UNKNOWN,
            "hang.no-progress",
            (*base, ("now", now if _finite(now) else None)),
            "no step time could be read from the job's progress signal",
            SOURCE_HANG,
        )
    if not _finite(newest_step_time) or not _finite(now):
        return Verdict(
            SignalClass.UNKNOWN,
            "hang.bad-time",
            (*base, ("newest_step_time", _scalar_time(newest_step_time)), ("now", _scalar_time(now))),
            f"a time is not a finite number (newest step {newest_step_time!r}, now {now!r})",
            SOURCE_HANG,
        )
    age = float(now) - float(newest_step_time)
    values = (*base, ("age_s", age), ("newest_step_time", float(newest_step_time)), ("now", float(now)))
    if age < -CLOCK_SKEW_TOLERANCE_S:
        return Verdict(
            SignalClass.UNKNOWN,
            "hang.clock-skew",
            values,
            f"the newest step is {_fmt_s(-age)} in the future of now: the clocks disagree",
            SOURCE_HANG,
        )
    if age < bound:
        return None
    if ranks_alive is False:
        return None
    said = f"{how}: {_fmt_s(bound)}" if how != "set" else f"set: {_fmt_s(bound)}"
    if ranks_alive is None:
        return Verdict(
            SignalClass.UNKNOWN,
            "hang.liveness-unknown",
            values,
            f"no new step for {_fmt_s(age)} (stall_after_s {said}) and the ranks' liveness is unknown",
            SOURCE_HANG,
        )
    return Verdict(
        SignalClass.HANG,
        "hang.stall",
        values,
        f"no new step for {_fmt_s(age)} (stall_after_s {said}) while every rank is alive",
        SOURCE_HANG,
    )


def _scalar_time(x: object) -> Scalar:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x)


# ---------------------------------------------------------------------------------------- fail-slow

SOURCE_FAIL_SLOW = (
    "fail-slow: Bayesian online change-point detection (Adams & MacKay 2007, arXiv 0710.3742) on the "
    "log step time, Normal-Gamma model, constant hazard, as Greyhound (Wu et al., USENIX ATC '25, "
    "section 4.1; preprint 'FALCON', arXiv 2410.12588) tracks iteration times; a change point counts "
    "only when the post-change median exceeds the pre-change median by slow_factor for persist_steps "
    "samples (Greyhound validates a change point by the size of the slowdown and the length of the "
    "segment); a rolling-median rule cross-checks it"
)
"""Source of the fail-slow rule."""
DEFAULT_SLOW_FACTOR = 1.2
"""Post-change median / pre-change median that counts as fail-slow (our choice, a 20 % slowdown).
Greyhound keeps change points across which the mean iteration time moved by more than 10 % of the
larger mean (``degradation_thresh=0.1`` in its artefact, ``detector/control_plane/slow_detection.py``,
``validate_performance_drop``); here a verdict starts a recovery (stack
voting, possibly an over-eviction) rather than an alert, so the margin is doubled to stay clear of the
few-per-cent drift a healthy job shows (data-dependent sequence lengths, evaluation and logging
steps)."""
MAX_SLOW_FACTOR = 100.0
"""Largest ``slow_factor`` accepted (a 100× slowdown is a hang in all but name)."""
DEFAULT_PERSIST_STEPS = 10
"""Samples the slowdown must last before it is declared: Greyhound's artefact keeps a change point
only when it lies more than 10 iterations from the previous one (``length_thresh=10`` in
``validate_performance_drop``), which keeps a checkpoint write or a single slow batch from counting."""
MAX_PERSIST_STEPS = 32
"""Largest ``persist_steps`` accepted: the post-change segment and a baseline of
:data:`MIN_BASELINE_STEPS` must fit in the window of :data:`RUN_LENGTH_MAX` samples the state keeps."""
MIN_BASELINE_STEPS = 10
"""Pre-change samples needed for a baseline median (our choice, as many as ``persist_steps``'
default): a median of fewer samples is itself noise."""
RUN_LENGTH_MAX = 64
"""Run lengths the BOCPD posterior keeps (0 … 63, the last one meaning "63 or more"), and step times the
state keeps (the newest 64): memory and work per sample are constant (our choice: 64 holds the
longest post-change segment, ``MAX_PERSIST_STEPS`` = 32, plus a baseline; longer runs add nothing to
the decision, their statistics are merged)."""
HAZARD_LAMBDA = 200.0
"""Expected run length between change points (samples) of the constant hazard H = 1/λ (our choice; it is
also the value of the Gaussian demonstration code published with Adams & MacKay's paper,
``gaussdemo.m``): the rule's false alarms are held down by the median confirmation, not by the hazard."""
CP_PROB_THRESHOLD = 0.8
"""Posterior probability that the current run began after the baseline (a change point happened) at
which a change point becomes a candidate: Greyhound's artefact keeps change points whose posterior
probability is above 0.8 (``thresh_prob=0.8`` in ``find_performance_drop``; its probabilities come from
a Bayesian change-point model of the whole trace, here from BOCPD's run-length posterior)."""
PRIOR_KAPPA = 0.01
"""Normal-Gamma prior pseudo-count on the mean (log step time): weak, so a new run's mean is its data's
within one sample (our choice)."""
PRIOR_ALPHA = 1.0
"""Normal-Gamma prior shape: the predictive is a Student-t with 2 degrees of freedom before data,
heavy-tailed so that one odd sample does not open a run (our choice)."""
PRIOR_BETA = 0.01
"""Normal-Gamma prior rate, 0.1² in log units: a prior noise scale of about 10 % of the step time,
above the few-per-cent jitter of a healthy job, that the data overrides within a few samples (our
choice)."""
_LOG_PROB_FLOOR = -1000.0
"""Log probabilities below this are held at it (e^-1000 is 0 in a float): keeps the state finite for JSON."""
MAX_TRACE_SAMPLES = 200_000
"""Longest trace :func:`detection_delay_and_false_alarms` measures (each sample costs O(RUN_LENGTH_MAX))."""
MAX_STATE_JSON_CHARS = 16_384
"""Upper bound of ``json.dumps(state.to_json())`` in characters: 6 arrays of at most
:data:`RUN_LENGTH_MAX` floats (at most 24 characters each as Python writes them) and a few scalars."""
_STATE_VERSION = 1
_MAX_COUNT = 10**15
_LOG_MIN = math.log(5e-324) - 5.0
"""Smallest log step time a state may hold: the log of the smallest positive float, less a margin."""
_LOG_MAX = math.log(MAX_STEP_TIME_S) + 5.0
"""Largest log step time a state may hold: the log of :data:`MAX_STEP_TIME_S`, plus a margin."""
_STAT_MAX = 1e16
"""Largest kappa or alpha a state may hold (each grows by at most 1 per sample; samples ≤ 10^15)."""
_BETA_MAX = 1e250
"""Largest beta a state may hold: far above what any trace accumulates, far enough below the float
range that the predictive's arithmetic stays finite."""


@dataclass(frozen=True)
class FailSlowParams:
    """The fail-slow rule's parameters.

    Attributes:
        slow_factor: post-change median / baseline median that counts, in (1, :data:`MAX_SLOW_FACTOR`].
        persist_steps: samples the slowdown must last, in [1, :data:`MAX_PERSIST_STEPS`].
        cp_threshold: posterior probability of a change point that makes a candidate, in (0, 1).
        hazard_lambda: expected samples between change points, in [2, 1e6].

    Raises:
        ValueError: a parameter is outside its range.
    """

    slow_factor: float = DEFAULT_SLOW_FACTOR
    persist_steps: int = DEFAULT_PERSIST_STEPS
    cp_threshold: float = CP_PROB_THRESHOLD
    hazard_lambda: float = HAZARD_LAMBDA

    def __post_init__(self) -> None:
        if not _finite(self.slow_factor) or not 1.0 < self.slow_factor <= MAX_SLOW_FACTOR:
            raise ValueError(f"slow_factor must be in (1, {MAX_SLOW_FACTOR:g}], not {self.slow_factor!r}")
        if (
            isinstance(self.persist_steps, bool)
            or not isinstance(self.persist_steps, int)
            or not 1 <= self.persist_steps <= MAX_PERSIST_STEPS
        ):
            raise ValueError(
                f"persist_steps must be an integer in [1, {MAX_PERSIST_STEPS}], not {self.persist_steps!r}"
            )
        if not _finite(self.cp_threshold) or not 0.0 < self.cp_threshold < 1.0:
            raise ValueError(f"cp_threshold must be in (0, 1), not {self.cp_threshold!r}")
        if not _finite(self.hazard_lambda) or not 2.0 <= self.hazard_lambda <= 1e6:
            raise ValueError(f"hazard_lambda must be in [2, 1e6], not {self.hazard_lambda!r}")


@dataclass(frozen=True)
class FailSlowState:
    """What the fail-slow rule keeps between samples; bounded (:data:`RUN_LENGTH_MAX`) and JSON-able.

    Attributes:
        seen: usable step times observed so far (the index of the next one).
        skipped: unusable step times ignored (NaN, infinite, ≤ 0, > :data:`MAX_STEP_TIME_S`).
        origin: log of the first usable step time (the prior's mean), ``None`` before it.
        log_probs: the run-length posterior, log P(r | data) for r = 0 … len-1 (the last entry of a full
            array means "that long or longer").
        mu, kappa, alpha, beta: the Normal-Gamma posterior of each run length, on log step time.
        recent: the newest usable step times (seconds), at most :data:`RUN_LENGTH_MAX`, oldest first.
        candidate: index (in ``seen`` numbering) of the first sample of a suspected slow segment, or
            ``None``.
        baseline: median step time (seconds) before ``candidate``.
        change_prob: the posterior probability of the change point when the candidate was taken.
        slow_since: index of the sample at which the slowdown was declared (a fail-slow episode is
            ongoing), or ``None``.
    """

    seen: int = 0
    skipped: int = 0
    origin: float | None = None
    log_probs: tuple[float, ...] = ()
    mu: tuple[float, ...] = ()
    kappa: tuple[float, ...] = ()
    alpha: tuple[float, ...] = ()
    beta: tuple[float, ...] = ()
    recent: tuple[float, ...] = field(default=())
    candidate: int | None = None
    baseline: float | None = None
    change_prob: float | None = None
    slow_since: int | None = None

    def to_json(self) -> dict[str, Any]:
        """A small strict-JSON dict (at most :data:`MAX_STATE_JSON_CHARS` once dumped) that
        :meth:`from_json` reads back to an equal state."""
        return {
            "v": _STATE_VERSION,
            "seen": self.seen,
            "skipped": self.skipped,
            "origin": self.origin,
            "log_probs": list(self.log_probs),
            "mu": list(self.mu),
            "kappa": list(self.kappa),
            "alpha": list(self.alpha),
            "beta": list(self.beta),
            "recent": list(self.recent),
            "candidate": self.candidate,
            "baseline": self.baseline,
            "change_prob": self.change_prob,
            "slow_since": self.slow_since,
        }

    @classmethod
    def from_json(cls, doc: object) -> FailSlowState:
        """Read a state written by :meth:`to_json` (e.g. kept in the store between ``watch --once`` runs).

        Args:
            doc: the decoded JSON document (an object with every key :meth:`to_json` writes).

        Returns:
            The state. A state it accepts can be fed further samples without error. The run-length
            posterior is renormalised when its total is off.

        Raises:
            ConfigError: ``doc`` is not such a state (wrong version, a missing or extra key, a value of
                the wrong type, a non-finite number or one outside what the rule can produce, arrays of
                different lengths or longer than :data:`RUN_LENGTH_MAX`): one line saying which field
                and why.
        """
        if not isinstance(doc, Mapping):
            raise ConfigError(f"fail-slow state: not a JSON object but {type(doc).__name__}")
        keys = set(cls().to_json())
        extra = sorted(str(k)[:40] for k in doc if k not in keys)
        missing = sorted(k for k in keys if k not in doc)
        if extra or missing:
            raise ConfigError(f"fail-slow state: unknown keys {extra} / missing keys {missing}")
        if doc["v"] != _STATE_VERSION or isinstance(doc["v"], bool):
            raise ConfigError(f"fail-slow state: version {str(doc['v'])[:20]!r}, expected {_STATE_VERSION}")
        seen = _state_int(doc, "seen")
        skipped = _state_int(doc, "skipped")
        arrays = {name: _state_floats(doc, name) for name in ("log_probs", "mu", "kappa", "alpha", "beta")}
        n = len(arrays["log_probs"])
        if any(len(a) != n for a in arrays.values()):
            raise ConfigError("fail-slow state: log_probs, mu, kappa, alpha and beta differ in length")
        if n > min(RUN_LENGTH_MAX, seen + 1):
            raise ConfigError(
                f"fail-slow state: {n} run lengths after {seen} samples (at most {RUN_LENGTH_MAX})"
            )
        bounds = {
            "log_probs": (_LOG_PROB_FLOOR, 1e-6),
            "mu": (_LOG_MIN, _LOG_MAX),
            "kappa": (PRIOR_KAPPA, _STAT_MAX),
            "alpha": (PRIOR_ALPHA, _STAT_MAX),
            "beta": (PRIOR_BETA, _BETA_MAX),
        }
        for name, (low, high) in bounds.items():
            if any(not low <= x <= high for x in arrays[name]):
                raise ConfigError(f"fail-slow state: {name} holds a value outside [{low:g}, {high:g}]")
        recent = _state_floats(doc, "recent")
        if len(recent) > min(RUN_LENGTH_MAX, seen) or any(not 0 < x <= MAX_STEP_TIME_S for x in recent):
            raise ConfigError("fail-slow state: recent holds too many step times, or one out of range")
        origin = _state_opt_float(doc, "origin")
        if origin is not None and not _LOG_MIN <= origin <= _LOG_MAX:
            raise ConfigError(f"fail-slow state: origin outside [{_LOG_MIN:g}, {_LOG_MAX:g}]")
        if (seen == 0) != (origin is None) or (seen == 0) != (n == 0):
            raise ConfigError(
                "fail-slow state: origin and run lengths must be set exactly when samples were seen"
            )
        candidate = _state_opt_int(doc, "candidate")
        slow_since = _state_opt_int(doc, "slow_since")
        baseline = _state_opt_float(doc, "baseline")
        change_prob = _state_opt_float(doc, "change_prob")
        if (candidate is None) != (baseline is None) or (candidate is None) != (change_prob is None):
            raise ConfigError("fail-slow state: candidate, baseline and change_prob go together")
        if candidate is not None and (
            candidate > seen or baseline is None or not 0 < baseline <= MAX_STEP_TIME_S
        ):
            raise ConfigError("fail-slow state: candidate beyond the samples seen, or baseline out of range")
        if change_prob is not None and not 0 <= change_prob <= 1:
            raise ConfigError("fail-slow state: change_prob out of [0, 1]")
        if slow_since is not None and (candidate is None or not candidate <= slow_since < seen):
            raise ConfigError("fail-slow state: slow_since without a candidate, or out of range")
        log_probs = arrays["log_probs"]
        if n:
            total = _logsumexp(log_probs)
            if abs(total) > 1e-9:
                log_probs = tuple(max(x - total, _LOG_PROB_FLOOR) for x in log_probs)
        return cls(
            seen=seen,
            skipped=skipped,
            origin=origin,
            log_probs=log_probs,
            mu=arrays["mu"],
            kappa=arrays["kappa"],
            alpha=arrays["alpha"],
            beta=arrays["beta"],
            recent=recent,
            candidate=candidate,
            baseline=baseline,
            change_prob=change_prob,
            slow_since=slow_since,
        )


def _state_int(doc: Mapping[Any, Any], key: str) -> int:
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_COUNT:
        raise ConfigError(f"fail-slow state: {key} is not an integer in [0, {_MAX_COUNT}]")
    return value


def _state_opt_int(doc: Mapping[Any, Any], key: str) -> int | None:
    return None if doc[key] is None else _state_int(doc, key)


def _state_opt_float(doc: Mapping[Any, Any], key: str) -> float | None:
    value = doc[key]
    if value is None:
        return None
    if not _finite(value) or abs(value) > 1e300:
        raise ConfigError(f"fail-slow state: {key} is not a finite number")
    return float(value)


def _state_floats(doc: Mapping[Any, Any], key: str) -> tuple[float, ...]:
    value = doc[key]
    if not isinstance(value, list) or len(value) > RUN_LENGTH_MAX:
        raise ConfigError(f"fail-slow state: {key} is not a list of at most {RUN_LENGTH_MAX} numbers")
    if not all(_finite(x) and abs(x) <= 1e300 for x in value):
        raise ConfigError(f"fail-slow state: {key} holds something that is not a finite number")
    return tuple(float(x) for x in value)


def _logsumexp(values: Sequence[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def _student_t_logpdf(x: float, mu: float, kappa: float, alpha: float, beta: float) -> float:
    """Log density at ``x`` of the Normal-Gamma posterior predictive: Student-t with 2α degrees of
    freedom, location μ, scale² β(κ+1)/(ακ) (Murphy, "Conjugate Bayesian analysis of the Gaussian
    distribution", 2007, eq. 110)."""
    nu = 2.0 * alpha
    scale2 = beta * (kappa + 1.0) / (alpha * kappa)
    z2 = (x - mu) ** 2 / (nu * scale2)
    return (
        math.lgamma((nu + 1.0) / 2.0)
        - math.lgamma(nu / 2.0)
        - 0.5 * math.log(nu * math.pi * scale2)
        - (nu + 1.0) / 2.0 * math.log1p(z2)
    )


def _usable(step_time: object) -> bool:
    """True for a step time the rules take as a measurement: finite, > 0, ≤ :data:`MAX_STEP_TIME_S`."""
    return isinstance(step_time, (int, float)) and _finite(step_time) and 0 < step_time <= MAX_STEP_TIME_S


def _bocpd_update(state: FailSlowState, x: float, hazard_lambda: float) -> FailSlowState:
    """One BOCPD step (Adams & MacKay 2007, Algorithm 1) on ``x`` = log step time, run lengths
    truncated to :data:`RUN_LENGTH_MAX` (the longest bucket absorbs longer runs, keeping the statistics
    of whichever of the two merged runs is more probable)."""
    if state.seen == 0:
        origin = x
        lp: tuple[float, ...] = (0.0,)
        mu: tuple[float, ...] = (origin,)
        kappa: tuple[float, ...] = (PRIOR_KAPPA,)
        alpha: tuple[float, ...] = (PRIOR_ALPHA,)
        beta: tuple[float, ...] = (PRIOR_BETA,)
    else:
        origin = state.origin if state.origin is not None else x
        lp, mu, kappa, alpha, beta = state.log_probs, state.mu, state.kappa, state.alpha, state.beta
    log_h = -math.log(hazard_lambda)
    log_1mh = math.log1p(-1.0 / hazard_lambda)
    joint = [lp[r] + _student_t_logpdf(x, mu[r], kappa[r], alpha[r], beta[r]) for r in range(len(lp))]
    new_lp = [_logsumexp(joint) + log_h] + [j + log_1mh for j in joint]
    new_mu = [origin] + [(k * m + x) / (k + 1.0) for m, k in zip(mu, kappa, strict=True)]
    new_kappa = [PRIOR_KAPPA] + [k + 1.0 for k in kappa]
    new_alpha = [PRIOR_ALPHA] + [a + 0.5 for a in alpha]
    new_beta = [PRIOR_BETA] + [
        b + k * (x - m) ** 2 / (2.0 * (k + 1.0)) for m, k, b in zip(mu, kappa, beta, strict=True)
    ]
    if len(new_lp) > RUN_LENGTH_MAX:
        keep = -1 if new_lp[-1] >= new_lp[-2] else -2
        for arr in (new_mu, new_kappa, new_alpha, new_beta):
            arr[-2] = arr[keep]
            del arr[-1]
        new_lp[-2] = _logsumexp(new_lp[-2:])
        del new_lp[-1]
    total = _logsumexp(new_lp)
    return replace(
        state,
        origin=origin,
        log_probs=tuple(max(v - total, _LOG_PROB_FLOOR) for v in new_lp),
        mu=tuple(new_mu),
        kappa=tuple(new_kappa),
        alpha=tuple(new_alpha),
        beta=tuple(new_beta),
    )


def rolling_median_ratio(samples: Sequence[float], persist_steps: int) -> float | None:
    """The rolling-median rule's ratio: the lower median of the newest ``persist_steps`` samples (a value
    more than half of them reach) over the median of the samples before them; ``None`` when fewer than
    :data:`MIN_BASELINE_STEPS` samples precede them or their median is not > 0.

    Args:
        samples: usable step times (seconds), oldest first (the state's window).
        persist_steps: how many newest samples form the recent segment (≥ 1).

    Returns:
        The ratio (recent lower median / earlier median; > 1: slower), or None as said above.
    """
    if persist_steps < 1 or len(samples) - persist_steps < MIN_BASELINE_STEPS:
        return None
    before = _median(samples[:-persist_steps])
    return _low_median(samples[-persist_steps:]) / before if before > 0 else None


def _slow_verdict(state: FailSlowState, params: FailSlowParams, ratio: float, roll: float | None) -> Verdict:
    recent_median = _low_median(state.recent[-params.persist_steps :])
    baseline = state.baseline if state.baseline is not None else recent_median
    return Verdict(
        SignalClass.FAIL_SLOW,
        "fail-slow.bocpd",
        (
            ("ratio", ratio),
            ("rolling_ratio", roll),
            ("recent_median_s", recent_median),
            ("baseline_median_s", baseline),
            ("change_index", state.candidate),
            ("change_prob", state.change_prob),
            ("slow_since_index", state.slow_since),
            ("slow_factor", params.slow_factor),
            ("persist_steps", params.persist_steps),
        ),
        (
            f"step time (lower) median {_fmt_s(recent_median)} over the last {params.persist_steps} steps is "
            f"{ratio:.2f}x the baseline {_fmt_s(baseline)} before sample {state.candidate} "
            f"(change point P={state.change_prob:.2f}; slow_factor {params.slow_factor:g})"
        ),
        SOURCE_FAIL_SLOW,
    )


def observe_step_time(
    state: FailSlowState, step_time: float, params: FailSlowParams | None = None
) -> tuple[FailSlowState, Verdict | None]:
    """Feed one step time to the fail-slow rule.

    Per usable sample (finite, > 0, ≤ :data:`MAX_STEP_TIME_S`; others are counted in ``skipped`` and
    change nothing else), in O(:data:`RUN_LENGTH_MAX`) time and memory:

    1. BOCPD (Adams & MacKay 2007) on the log step time: Normal-Gamma model, constant hazard
       1/``hazard_lambda``, run lengths truncated to :data:`RUN_LENGTH_MAX`.
    2. With no candidate pending: when the posterior probability that the current run began after at
       least :data:`MIN_BASELINE_STEPS` kept samples (a change point inside the window) reaches
       ``cp_threshold``, the most probable such run start becomes the candidate, and the median of the
       kept samples before it the baseline.
    3. Once ``persist_steps`` samples follow the candidate: it is confirmed, and a fail-slow episode
       starts, when the lower median of the samples since the candidate (a value more than half of
       them reach, so a burst filling half of the segment does not count) is ≥ ``slow_factor`` × the
       baseline *and* the rolling-median rule agrees (:func:`rolling_median_ratio` ≥ ``slow_factor``);
       otherwise it is dropped (a transient).
    4. During an episode, it lasts while the lower median of the newest ``persist_steps`` samples stays
       ≥ ``slow_factor`` × the baseline; when it falls below, the episode ends (the job recovered).

    A slow drift (a few per cent per hundred steps) is not a change point, and the kept window's
    baseline drifts with it: neither rule reports it (measure it with
    :func:`detection_delay_and_false_alarms` before relying on it).

    Args:
        state: the state after the previous sample (``FailSlowState()`` to start).
        step_time: the new step's duration in seconds.
        params: the rule's parameters (defaults when ``None``).

    Returns:
        ``(new state, verdict)``: a :attr:`SignalClass.FAIL_SLOW` verdict (rule ``fail-slow.bocpd``)
        while an episode is ongoing, else ``None``. Never raises on any ``step_time``; a constant
        trace never gives a verdict (its medians never differ).
    """
    p = params if params is not None else FailSlowParams()
    if not _usable(step_time):
        state = replace(state, skipped=min(state.skipped + 1, _MAX_COUNT))
        return state, _episode_verdict(state, p)
    t = float(step_time)
    state = _bocpd_update(state, math.log(t), p.hazard_lambda)
    recent = (*state.recent, t)[-RUN_LENGTH_MAX:]
    state = replace(state, recent=recent, seen=min(state.seen + 1, _MAX_COUNT))
    n = state.seen
    if state.slow_since is not None and state.baseline is not None:
        ratio = _low_median(recent[-p.persist_steps :]) / state.baseline
        if ratio >= p.slow_factor:
            return state, _slow_verdict(state, p, ratio, rolling_median_ratio(recent, p.persist_steps))
        return replace(state, candidate=None, baseline=None, change_prob=None, slow_since=None), None
    if state.candidate is None:
        longest = len(recent) - MIN_BASELINE_STEPS
        if longest >= 1:
            probs = [math.exp(v) for v in state.log_probs[1 : longest + 1]]
            change_prob = min(sum(probs), 1.0)
            if probs and change_prob >= p.cp_threshold:
                run = 1 + max(range(len(probs)), key=probs.__getitem__)
                baseline = _median(recent[: len(recent) - run])
                state = replace(state, candidate=n - run, baseline=baseline, change_prob=change_prob)
    if state.candidate is not None and state.baseline is not None:
        post = n - state.candidate
        if post >= p.persist_steps:
            ratio = _low_median(recent[-min(post, len(recent)) :]) / state.baseline
            roll = rolling_median_ratio(recent, p.persist_steps)
            if ratio >= p.slow_factor and roll is not None and roll >= p.slow_factor:
                state = replace(state, slow_since=n - 1)
                return state, _slow_verdict(state, p, ratio, roll)
            state = replace(state, candidate=None, baseline=None, change_prob=None)
    return state, None


def after_recovery(state: FailSlowState, params: FailSlowParams | None = None) -> FailSlowState:
    """The fail-slow state to judge a recovered job by: the healthy pace before the episode, no episode.

    A recovery (evict the degrader group, restart) ends the episode, but the state still holds the
    slow samples in its window: fed the restarted job's steps, it would keep the episode going (or,
    with the restart's warm-up step, start one) and the watcher would open a second incident the
    moment the first one closed. Starting from nothing instead would make the restarted job's pace the
    new baseline, and a recovery that did not cure the slowdown (the wrong group evicted) would never
    be seen again. So the samples before the episode's candidate (all of them when there was none)
    are replayed into a fresh state: the baseline is the healthy pace, the slow segment is gone, and a
    slowdown that outlives the recovery is a new change point, declared after ``persist_steps``.

    Args:
        state: the state when the recovery ended.
        params: the rule's parameters (None: the defaults, :class:`FailSlowParams`).

    Returns:
        A state with no candidate and no episode, ``skipped`` kept. O(:data:`RUN_LENGTH_MAX`²) time.
    """
    p = params if params is not None else FailSlowParams()
    recent = state.recent
    if state.candidate is not None:
        recent = recent[: max(0, len(recent) - (state.seen - state.candidate))]
    fresh = FailSlowState(skipped=state.skipped)
    for t in recent:
        fresh, _ = observe_step_time(fresh, t, p)
    return replace(fresh, candidate=None, baseline=None, change_prob=None, slow_since=None)


def _episode_verdict(state: FailSlowState, params: FailSlowParams) -> Verdict | None:
    """The ongoing episode's verdict (for a sample that changed nothing), else ``None``."""
    if state.slow_since is None or state.baseline is None or len(state.recent) < params.persist_steps:
        return None
    ratio = _low_median(state.recent[-params.persist_steps :]) / state.baseline
    return _slow_verdict(state, params, ratio, rolling_median_ratio(state.recent, params.persist_steps))


@dataclass(frozen=True)
class DetectionReport:
    """How the fail-slow rule did on one step-time trace.

    Attributes:
        samples: trace length. onset_index: the first slow sample given (``None``: a healthy trace).
        detected_index: the sample at which the first episode starting at or after the onset was
            declared, or ``None`` (missed, or no onset).
        delay_steps: ``detected_index - onset_index``; ``None`` when not detected.
        delay_s: the step time summed from the onset through the detecting sample (the job's own
            seconds to detection); ``None`` when not detected.
        false_alarms: episodes declared before the onset (all of them for a healthy trace).
        episodes: indices at which every episode was declared, in order.
        median_rule_detected_index, median_rule_delay_steps, median_rule_false_alarms: the same for
            the rolling-median rule alone (ratio ≥ ``slow_factor`` over a window of the newest
            :data:`RUN_LENGTH_MAX` samples), for comparison.
    """

    samples: int
    onset_index: int | None
    detected_index: int | None
    delay_steps: int | None
    delay_s: float | None
    false_alarms: int
    episodes: tuple[int, ...]
    median_rule_detected_index: int | None
    median_rule_delay_steps: int | None
    median_rule_false_alarms: int


def _first_at_or_after(starts: Sequence[int], onset: int | None) -> int | None:
    if onset is None:
        return None
    return next((i for i in starts if i >= onset), None)


def detection_delay_and_false_alarms(
    trace: Sequence[float], onset_index: int | None, params: FailSlowParams | None = None
) -> DetectionReport:
    """Run the fail-slow rule over a step-time trace from a fresh state and measure it.

    Args:
        trace: step times in seconds, oldest first (at most :data:`MAX_TRACE_SAMPLES`; unusable values
            are fed too and skipped by the rule, as in production).
        onset_index: index of the first slow sample (a fault injected there), or ``None`` for a trace
            without one (every episode is then a false alarm).
        params: the rule's parameters (defaults when ``None``).

    Returns:
        The :class:`DetectionReport`.

    Raises:
        ValueError: the trace is longer than :data:`MAX_TRACE_SAMPLES`, or ``onset_index`` is not an
            index of it.
    """
    p = params if params is not None else FailSlowParams()
    if len(trace) > MAX_TRACE_SAMPLES:
        raise ValueError(f"a trace of at most {MAX_TRACE_SAMPLES} samples, not {len(trace)}")
    if onset_index is not None and (
        isinstance(onset_index, bool) or not isinstance(onset_index, int) or not 0 <= onset_index < len(trace)
    ):
        raise ValueError(f"onset_index {onset_index!r} is not an index of a {len(trace)}-sample trace")
    state = FailSlowState()
    starts: list[int] = []
    median_starts: list[int] = []
    window: list[float] = []
    previous = False
    median_previous = False
    for i, x in enumerate(trace):
        state, verdict = observe_step_time(state, x, p)
        active = verdict is not None
        if active and not previous:
            starts.append(i)
        previous = active
        if _usable(x):
            window = [*window, float(x)][-RUN_LENGTH_MAX:]
            roll = rolling_median_ratio(window, p.persist_steps)
            median_active = roll is not None and roll >= p.slow_factor
            if median_active and not median_previous:
                median_starts.append(i)
            median_previous = median_active
    detected = _first_at_or_after(starts, onset_index)
    median_detected = _first_at_or_after(median_starts, onset_index)
    limit = onset_index if onset_index is not None else len(trace)
    delay_s: float | None = None
    if detected is not None and onset_index is not None:
        delay_s = sum(float(x) for x in trace[onset_index : detected + 1] if _usable(x))
    return DetectionReport(
        samples=len(trace),
        onset_index=onset_index,
        detected_index=detected,
        delay_steps=None if detected is None or onset_index is None else detected - onset_index,
        delay_s=delay_s,
        false_alarms=sum(1 for i in starts if i < limit),
        episodes=tuple(starts),
        median_rule_detected_index=median_detected,
        median_rule_delay_steps=(
            None if median_detected is None or onset_index is None else median_detected - onset_index
        ),
        median_rule_false_alarms=sum(1 for i in median_starts if i < limit),
    )


# --------------------------------------------------------------------------------------------- loss

SOURCE_LOSS = (
    "nan-loss: ByteRobust (arXiv 2509.16293) counts NaN values among the failures its controller "
    "handles; a non-finite loss is IEEE 754 NaN/Inf; the spike rule (loss >= spike_factor x the "
    "rolling median of the previous losses) and its defaults are issue 22's and our choice"
)
"""Source of the loss rules."""
DEFAULT_SPIKE_FACTOR = 5.0
"""A loss ≥ this × the rolling median of the previous losses is a spike (our choice): after warm-up a
training loss moves by a few per cent per hundred steps and single-batch noise stays well under 2×,
so 5× trips only on a divergence, not on a hard batch; a language model's cross-entropy starts near
ln(vocabulary size) (about 11 for 50k-130k tokens) and falls, and does not climb back to 5× its
recent median without diverging."""
MAX_SPIKE_FACTOR = 1e6
"""Largest ``spike_factor`` accepted (beyond it the spike rule is off in all but name)."""
DEFAULT_LOSS_WINDOW = 50
"""Previous finite losses the rolling median is taken over (our choice): enough that one odd value
does not move it, short enough to follow the loss's descent."""
MAX_LOSS_WINDOW = 10_000
"""Largest ``window`` accepted: bounds the sorted window kept while scanning."""
MIN_LOSS_HISTORY = 5
"""Previous finite losses needed before the spike rule applies (our choice): a median of fewer is
noise, and the first steps' loss falls fast."""
MAX_LOSSES = 100_000
"""Most losses judged per call (the newest); older ones are neither judged nor history."""


def judge_losses(
    losses: Sequence[float],
    *,
    start: int = 0,
    spike_factor: float = DEFAULT_SPIKE_FACTOR,
    window: int = DEFAULT_LOSS_WINDOW,
) -> Verdict | None:
    """The nan-loss rules over a sequence of losses (oldest first).

    Judges each loss at index ≥ ``start`` (earlier ones are history only), in order, and returns the
    first that trips a rule:

    * ``loss.nonfinite``: the loss is NaN or ±Inf;
    * ``loss.spike``: the loss is ≥ ``spike_factor`` × the median of the (at most ``window``) previous
      finite losses, when at least :data:`MIN_LOSS_HISTORY` precede it and their median is > 0 (the
      rule is not applied to a loss whose median is ≤ 0: a ratio of such losses means nothing).

    Args:
        losses: loss values, oldest first; the newest :data:`MAX_LOSSES` are read (indices in the
            verdict are into ``losses`` as given).
        start: index of the first loss to judge (the losses new since the last reading).
        spike_factor: in (1, :data:`MAX_SPIKE_FACTOR`].
        window: in [1, :data:`MAX_LOSS_WINDOW`].

    Returns:
        A :attr:`SignalClass.NAN_LOSS` verdict, or ``None``. Never raises on any loss values.

    Raises:
        ValueError: ``spike_factor``, ``window`` or ``start`` out of range.
    """
    if not _finite(spike_factor) or not 1.0 < spike_factor <= MAX_SPIKE_FACTOR:
        raise ValueError(f"spike_factor must be in (1, {MAX_SPIKE_FACTOR:g}], not {spike_factor!r}")
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_LOSS_WINDOW:
        raise ValueError(f"window must be an integer in [1, {MAX_LOSS_WINDOW}], not {window!r}")
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ValueError(f"start must be a non-negative integer, not {start!r}")
    first = max(len(losses) - MAX_LOSSES, 0)
    history: deque[float] = deque()  # the previous finite losses, in arrival order (at most `window`)
    ordered: list[float] = []  # the same, sorted
    for i in range(first, len(losses)):
        raw = losses[i]
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            continue
        x = float(raw)
        if i >= start:
            if not math.isfinite(x):
                return Verdict(
                    SignalClass.NAN_LOSS,
                    "loss.nonfinite",
                    (("index", i), ("loss", x)),
                    f"loss {x!r} at index {i}",
                    SOURCE_LOSS,
                )
            if len(history) >= MIN_LOSS_HISTORY:
                median = _sorted_median(ordered)
                if median > 0 and x >= spike_factor * median:
                    return Verdict(
                        SignalClass.NAN_LOSS,
                        "loss.spike",
                        (
                            ("index", i),
                            ("loss", x),
                            ("median", median),
                            ("ratio", x / median),
                            ("spike_factor", float(spike_factor)),
                            ("window", len(history)),
                        ),
                        (
                            f"loss {x:.6g} at index {i} is {x / median:.3g}x the median {median:.6g} of "
                            f"the previous {len(history)} losses (spike_factor {spike_factor:g})"
                        ),
                        SOURCE_LOSS,
                    )
        if math.isfinite(x):
            history.append(x)
            bisect.insort(ordered, x)
            if len(history) > window:
                old = history.popleft()
                del ordered[bisect.bisect_left(ordered, old)]
    return None


def _sorted_median(ordered: Sequence[float]) -> float:
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0
