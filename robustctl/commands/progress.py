"""``run_wait_progress``: wait until a job makes new training steps (the playbook step ``wait-for-progress``).

Reads the job's progress signal (:func:`robustctl.jobcode.progress.read_progress`) every
``poll_s`` seconds until the job's step (the minimum over its ranks) is ``min_new_steps`` past the
baseline (``since_step``, else the first reading that shows a step), or ``timeout_s`` passed. Only
entries written since robustctl last started the job (the launch or requeue step of its newest
``restart`` in the audit log, :func:`robustctl.actions.restart.last_start`) are counted: a rank that
has not written since then still shows the run that was stopped, whose step says nothing about the new
one (it may be past the checkpoint the new run resumed from, or be the bad run's last step). Each
reading is folded into the job's newest version (:func:`robustctl.jobcode.records.evaluate_stability`)
when the job has a ``code:`` section, so a wait after a restart is also what makes a version stable.

A job that robustctl launches itself (the ``inventory`` back end, a ``launch:`` and a ``process:``
section) is also looked at on every host at each reading (:func:`robustctl.jobs.launch.list_ranks`):
when a rank's process is gone the job cannot make steps any more, and the wait ends at once with
``exited`` (exit 2), also when the progress signal had just advanced (a job that fails again a few steps
after a restart wrote those steps before it died: ByteRobust §4.2 rolls the code back then). A scan
that could not check some host decides nothing (the progress signal alone does).

Exit codes (:attr:`WaitProgressResult.exit_code`): 0 progress seen · 2 no progress within the timeout
(every host was read), or the job's processes exited · 3 the signal could not be read (a host unreachable or its reader failed at the
last reading, or no entry was ever read) · 64 bad request · 78 the job has no ``progress:`` section, or
a bad inventory or state store.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from robustctl.errors import ConfigError, UsageError
from robustctl.exit_codes import ExitCode
from robustctl.jobcode.progress import HostProgress, ProgressReading, read_progress
from robustctl.models import SCHEMA_VERSION

if TYPE_CHECKING:
    from robustctl.config import DiagnoseSettings
    from robustctl.inventory import Host, Job
    from robustctl.transport.pool import TransportPool

__all__ = ["MAX_WAIT_S", "WaitOutcome", "WaitProgressRequest", "WaitProgressResult", "run_wait_progress"]

MAX_WAIT_S = 7 * 86_400.0
"""Longest wait accepted (a week): a step of the slowest jobs takes minutes, not days."""


class WaitOutcome(str, enum.Enum):
    """How a wait for progress ended."""

    PROGRESS = "progress"
    NO_PROGRESS = "no-progress"
    EXITED = "exited"
    UNREADABLE = "unreadable"


@dataclass(frozen=True, kw_only=True)
class WaitProgressRequest:
    """What a wait for progress was asked.

    Attributes:
        job: the inventory job. min_new_steps: steps past the baseline that count as progress (≥ 1).
        timeout_s: how long to wait (0 < t ≤ :data:`MAX_WAIT_S`). since_step: the baseline step
        (None: the first reading that shows one). poll_s: seconds between readings.
        inventory / state: paths (None: ``$ROBUSTCTL_INVENTORY`` / ``$ROBUSTCTL_STATE`` / defaults).
    """

    job: str
    min_new_steps: int = 1
    timeout_s: float = 600.0
    since_step: int | None = None
    poll_s: float = 5.0
    inventory: Path | None = None
    state: Path | None = None


@dataclass(frozen=True)
class WaitProgressResult:
    """The outcome of a wait (kind ``wait-for-progress``).

    Attributes:
        job. outcome: :class:`WaitOutcome`. baseline_step: the step counted from (None: no step was
        ever read). last_step: the job's step at the last reading. new_steps: last − baseline (0 when
        unknown). min_new_steps / timeout_s: as asked. elapsed_s: wall seconds waited. readings: how
        many readings were taken. hosts: the last reading, per host. errors: ``HOST: why`` of the last
        reading. exited: for ``exited``, ``HOST: rank(s) R not running`` per host ('' otherwise).
        counted_since: UNIX s; entries older than this were ignored (the job's last start by
        robustctl; None: every entry counted). schema_version.
    """

    job: str
    outcome: WaitOutcome
    baseline_step: int | None
    last_step: int | None
    new_steps: int
    min_new_steps: int
    timeout_s: float
    elapsed_s: float
    readings: int
    hosts: tuple[HostProgress, ...]
    errors: tuple[str, ...]
    exited: str = ""
    counted_since: float | None = None
    schema_version: int = SCHEMA_VERSION
    kind: str = "wait-for-progress"

    @property
    def exit_code(self) -> ExitCode:
        """0 progress, 2 no progress within the timeout or the job exited, 3 could not read the signal."""
        if self.outcome is WaitOutcome.PROGRESS:
            return ExitCode.OK
        if self.outcome in (WaitOutcome.NO_PROGRESS, WaitOutcome.EXITED):
            return ExitCode.CRITICAL
        return ExitCode.UNKNOWN


Reader = Callable[[], ProgressReading]
Gone = Callable[[], str | None]
"""Looks at the job's processes: a line naming the ranks that no longer run, or None (all run, or it
could not tell)."""


def _check(req: WaitProgressRequest) -> None:
    if not 1 <= req.min_new_steps <= 10_000_000:
        raise UsageError(f"min_new_steps must be 1 … 10000000, got {req.min_new_steps}")
    for name, value, top in (("timeout_s", req.timeout_s, MAX_WAIT_S), ("poll_s", req.poll_s, 3600.0)):
        if not (math.isfinite(value) and 0 < value <= top):
            raise UsageError(f"{name} must be > 0 and at most {top:g} seconds, got {value}")
    if req.since_step is not None and not 0 <= req.since_step <= 10**15:
        raise UsageError(f"since_step must be 0 … 10^15, got {req.since_step}")


def wait_for_progress(
    req: WaitProgressRequest,
    reader: Reader,
    *,
    on_reading: Callable[[ProgressReading], None] | None = None,
    gone: Gone | None = None,
    counted_since: float | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> WaitProgressResult:
    """The waiting loop over any ``reader`` (tests pass readings; :func:`run_wait_progress` reads hosts).

    ``on_reading`` is called with every reading, whole (stability bookkeeping). ``gone`` is asked after
    every reading (also one that shows progress): a line from it ends the wait as ``exited``.
    ``counted_since`` (UNIX s): only entries made at or after it count (:meth:`ProgressReading.since`).
    Raises UsageError for a bad request.
    """
    _check(req)
    start = monotonic()
    deadline = start + req.timeout_s
    baseline = req.since_step
    readings = 0
    last: ProgressReading | None = None
    ever_read = False
    while True:
        last = reader()
        readings += 1
        if on_reading is not None:
            on_reading(last)
        if counted_since is not None:
            last = last.since(counted_since)
        step = last.step
        ever_read = ever_read or step is not None
        if baseline is None and step is not None and last.complete:
            baseline = step
        elif (
            baseline is not None
            and step is not None
            and last.complete
            and step - baseline >= req.min_new_steps
        ):
            why = gone() if gone is not None else None
            outcome = WaitOutcome.PROGRESS if why is None else WaitOutcome.EXITED
            return _result(
                req, outcome, baseline, last, readings, monotonic() - start, counted_since, why or ""
            )
        why = gone() if gone is not None else None
        if why is not None:
            return _result(
                req, WaitOutcome.EXITED, baseline, last, readings, monotonic() - start, counted_since, why
            )
        now = monotonic()
        if now >= deadline:
            break
        sleep(min(req.poll_s, max(0.0, deadline - now)))
    outcome = WaitOutcome.NO_PROGRESS if last.complete and ever_read else WaitOutcome.UNREADABLE
    return _result(req, outcome, baseline, last, readings, monotonic() - start, counted_since)


def _result(
    req: WaitProgressRequest,
    outcome: WaitOutcome,
    baseline: int | None,
    last: ProgressReading,
    readings: int,
    elapsed: float,
    counted_since: float | None,
    exited: str = "",
) -> WaitProgressResult:
    step = last.step
    new = step - baseline if step is not None and baseline is not None else 0
    return WaitProgressResult(
        job=req.job,
        outcome=outcome,
        baseline_step=baseline,
        last_step=step,
        new_steps=max(0, new),
        min_new_steps=req.min_new_steps,
        timeout_s=req.timeout_s,
        elapsed_s=round(elapsed, 3),
        readings=readings,
        hosts=last.hosts,
        errors=last.errors,
        exited=exited,
        counted_since=counted_since,
    )


def run_wait_progress(req: WaitProgressRequest) -> WaitProgressResult:
    """Wait for ``req.min_new_steps`` new steps of ``req.job`` over its hosts' transports.

    Args:
        req: the job, how many new steps to wait for, the timeout and the poll interval (seconds).

    Returns:
        The steps seen when the wait ended, and whether the job made the progress asked for.

    Raises:
        UsageError: a bad request, or a job not in the inventory.
        ConfigError: the job has no ``progress:`` section; a bad inventory. StoreError: a bad store.
    """
    from robustctl.actions import open_context
    from robustctl.actions.restart import last_start
    from robustctl.jobcode.records import evaluate_stability
    from robustctl.transport.pool import TransportPool

    _check(req)
    ctx = open_context(req.inventory, req.state)
    pool = TransportPool()
    try:
        try:
            spec = ctx.inventory.job(req.job)
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
        if spec.progress is None:
            raise ConfigError(
                f"{ctx.inventory.source}: job {req.job} has no progress: section "
                "(progress: {files: /path/rank*.json} or {log: /path/train.log, pattern: ...})"
            )
        progress = spec.progress
        hosts = [ctx.inventory.by_name(n) for n in ctx.job_hosts(req.job).hosts]
        code = spec.code

        def reader() -> ProgressReading:
            return read_progress(
                pool,
                req.job,
                hosts,
                progress,
                concurrency=ctx.inventory.diagnose.concurrency,
                clock=ctx.clock,
            )

        def fold(reading: ProgressReading) -> None:  # the whole reading: it filters by the version's start
            if code is not None:
                evaluate_stability(ctx.store, req.job, code, reading)

        gone = None
        if ctx.scheduler.name == "inventory" and spec.launch is not None and spec.process is not None:
            gone = _gone(spec, hosts, pool, ctx.inventory.diagnose)
        return wait_for_progress(
            req, reader, on_reading=fold, gone=gone, counted_since=last_start(ctx.store, req.job)
        )
    finally:
        pool.close()
        ctx.close()


def _gone(job: Job, hosts: Sequence[Host], pool: TransportPool, diagnose: DiagnoseSettings) -> Gone:
    """The ``gone`` check of a job robustctl launched: its ranks' processes, scanned on every host."""
    from robustctl.inventory.hostrange import compact_ranges
    from robustctl.jobs.launch import list_ranks

    def gone() -> str | None:
        scan = list_ranks(job, hosts, pool, diagnose=diagnose)
        if any(h.error is not None for h in scan) or not any(h.missing for h in scan):
            return None
        return "; ".join(
            f"{h.host}: rank(s) {compact_ranges(h.missing)} not running" for h in scan if h.missing
        )

    return gone
