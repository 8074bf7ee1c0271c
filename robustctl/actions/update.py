"""Hot update of a job's code: stage a change, decide when it is applied, read the job's code history.

* :func:`stage_change` resolves a ref to one commit on every host of the job (a host where the path is
  not a git work tree, the ref is missing, or it names another commit stops it: one line naming the
  host, nothing recorded), then records a ``pending`` change.
* :func:`due_update` says whether the job's pending change is due (a lazy change waits for the next
  restart and is forced once ``code.update_window_s`` passed: ByteRobust §6.1). The restart applies it:
  its ``apply_update`` step (:mod:`robustctl.actions.restart`) checks the change out on every host,
  all or none, inside the restart's own plan, run and audited by
  :func:`~robustctl.actions.plan.apply_plan` like every action. ``update apply`` and an urgent
  ``update stage`` therefore only decide, then run that restart.
* :func:`code_history` folds a fresh progress reading into the newest version (stability) when the
  job has a ``progress:`` section, then lists the job's changes and versions.

The result types of ``update stage``, ``update apply`` and ``update list`` are here; the commands
(:mod:`robustctl.commands.update`) build the requests and call these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from robustctl.exit_codes import ExitCode
from robustctl.jobcode.git import common_commit, current_versions, inspect_job, job_code_hosts
from robustctl.jobcode.records import (
    ChangeState,
    CodeChange,
    JobVersion,
    changes,
    evaluate_stability,
    last_stable_version,
    pending_update,
    record_change,
    versions,
)
from robustctl.models import SCHEMA_VERSION

if TYPE_CHECKING:
    from robustctl.actions import ActionContext

__all__ = [
    "CodeHistory",
    "DueUpdate",
    "StagedChange",
    "UpdateApplyResult",
    "UpdateListResult",
    "UpdateStageResult",
    "code_history",
    "due_update",
    "stage_change",
]


@dataclass(frozen=True)
class UpdateStageResult:
    """The outcome of ``update stage`` (kind ``update-stage``).

    Attributes:
        job. ref. commit: the commit the ref names on every host. from_commit: the commit the job's
        hosts run (None when they disagree: ``disagreeing`` names them). hosts: the job's hosts.
        change: the recorded change (None for a dry run). restart: the restart's JSON document
        (urgent; None otherwise). restart_exit: the restart's exit code. dry_run. schema_version.
    """

    job: str
    ref: str
    commit: str
    from_commit: str | None
    disagreeing: tuple[str, ...]
    hosts: tuple[str, ...]
    change: CodeChange | None
    urgent: bool
    dry_run: bool
    restart: dict[str, Any] | None = None
    restart_exit: int = 0
    schema_version: int = SCHEMA_VERSION
    kind: str = "update-stage"

    @property
    def exit_code(self) -> ExitCode:
        """0 staged (or dry run); the restart's exit code for an urgent change."""
        return ExitCode(self.restart_exit)


@dataclass(frozen=True)
class UpdateApplyResult:
    """The outcome of ``update apply`` (kind ``update-apply``).

    Attributes:
        job. commit: the newest pending change's commit (None: nothing pending). change_ids: the pending
        changes. due: the window of a lazy change has passed (ByteRobust §6.1: lazy updates are forced
        when no failure restarted the job within the window). due_at: when the oldest pending change
        falls due (UNIX s). restarted: a restart ran (it applies the change, see
        :mod:`robustctl.actions.restart`). restart / restart_exit: its JSON document and exit code.
        dry_run.
    """

    job: str
    commit: str | None
    change_ids: tuple[int, ...]
    due: bool
    due_at: float | None
    restarted: bool
    dry_run: bool
    restart: dict[str, Any] | None = None
    restart_exit: int = 0
    schema_version: int = SCHEMA_VERSION
    kind: str = "update-apply"

    @property
    def exit_code(self) -> ExitCode:
        """0 nothing pending, not due yet, or applied (dry run included); else the restart's exit code."""
        return ExitCode(self.restart_exit)


@dataclass(frozen=True)
class UpdateListResult:
    """The job's code history (kind ``update-list``).

    Attributes:
        job. changes: every change, oldest first. versions: every version, oldest first.
        pending_commit / pending_ids / forced: :func:`~robustctl.jobcode.records.pending_update` now.
        last_stable: the version rollback goes back to (None: none). progress_note: why no progress was
        read, or what the reading said (one line). schema_version.
    """

    job: str
    changes: tuple[CodeChange, ...]
    versions: tuple[JobVersion, ...]
    pending_commit: str | None
    pending_ids: tuple[int, ...]
    forced: bool
    last_stable: JobVersion | None
    progress_note: str
    schema_version: int = SCHEMA_VERSION
    kind: str = "update-list"

    @property
    def exit_code(self) -> ExitCode:
        """Always 0: a listing."""
        return ExitCode.OK


# ------------------------------------------------------------------------------------------- stage
@dataclass(frozen=True)
class StagedChange:
    """What :func:`stage_change` found and recorded.

    Attributes:
        commit: the commit the ref names on every host. from_commit: the commit the hosts run (None:
        they disagree). disagreeing: the hosts on another commit. hosts: the job's hosts.
        change: the recorded change (None for a dry run).
    """

    commit: str
    from_commit: str | None
    disagreeing: tuple[str, ...]
    hosts: tuple[str, ...]
    change: CodeChange | None


def stage_change(
    ctx: ActionContext,
    job: str,
    ref: str,
    reason: str,
    *,
    urgent: bool,
    dry_run: bool,
    lock_timeout_s: float | None,
) -> StagedChange:
    """Resolve ``ref`` on every host of ``job``, then (unless ``dry_run``) record a pending change.

    The store's lock (``update-stage``) is taken after the hosts were read, only to record.

    Args:
        ctx: an open action context (not locked).
        job: the inventory job, as asked.
        ref: the git ref to stage, as asked (checked).
        reason: why, as asked (recorded with the change).
        urgent: as asked (recorded with the change; the command restarts the job at once for an
            urgent one).
        dry_run: read only.
        lock_timeout_s: the lock's wait, seconds (None: the policy's).

    Returns:
        The :class:`StagedChange`.

    Raises:
        UsageError: unknown job, ref missing on a host.
        ConfigError: no ``code:``; not a work tree.
        HostError: a host could not be read.
        StoreError: the store cannot be written.
        StoreLocked: another robustctl holds the store's lock past the wait.
    """
    spec, hosts, codes = inspect_job(ctx, job, ref)
    commit = common_commit(codes, ref)
    head, disagree = current_versions(codes)
    from_commit = None if disagree else head
    names = tuple(h.name for h in hosts)
    if dry_run:
        return StagedChange(commit, from_commit, disagree, names, None)
    ctx.lock("update-stage", lock_timeout_s)
    change = record_change(
        ctx.store,
        job,
        ref=ref,
        commit=commit,
        from_ref=from_commit,
        reason=reason,
        urgent=urgent,
        window_s=spec.update_window_s,
    )
    return StagedChange(commit, from_commit, disagree, names, change)


# ------------------------------------------------------------------------------------------- apply
@dataclass(frozen=True)
class DueUpdate:
    """The job's pending code change now.

    Attributes:
        commit: the newest pending change's commit (None: nothing pending). change_ids: the pending
        changes. due: a lazy change's window passed. due_at: when the oldest lazy pending change falls
        due (UNIX s; None: none).
    """

    commit: str | None
    change_ids: tuple[int, ...]
    due: bool
    due_at: float | None

    def restart_reason(self, asked: str) -> str:
        """The reason the restart that applies it records: ``asked``, else one naming the commit."""
        if asked:
            return asked
        why = "due: its update window passed" if self.due else "applied now"
        return f"pending code update {str(self.commit)[:12]} {why}"


def due_update(ctx: ActionContext, job: str) -> DueUpdate:
    """Whether ``job``'s pending code change is due now (:func:`~robustctl.jobcode.records.pending_update`).

    Args:
        ctx: an open action context.
        job: the inventory job.

    Returns:
        The :class:`DueUpdate`.

    Raises:
        UsageError: unknown job.
        ConfigError: no ``code:`` section.
        StoreError: the store cannot be read.
    """
    job_code_hosts(ctx, job)
    commit, ids, due = pending_update(ctx.store, job, ctx.clock())
    pend = changes(ctx.store, job, states=(ChangeState.PENDING,))
    due_at = min((c.due_at for c in pend if not c.urgent), default=None)
    return DueUpdate(commit, ids, due, due_at)


# -------------------------------------------------------------------------------------------- list
@dataclass(frozen=True)
class CodeHistory:
    """The job's code history now: :class:`UpdateListResult`'s fields after ``job``."""

    changes: tuple[CodeChange, ...]
    versions: tuple[JobVersion, ...]
    pending_commit: str | None
    pending_ids: tuple[int, ...]
    forced: bool
    last_stable: JobVersion | None
    progress_note: str


def _fold_progress(ctx: ActionContext, job: str, read: bool) -> str:
    """Read the job's progress (when ``read`` and it has a ``progress:`` section) and fold it into its
    newest version's stability.

    Args:
        ctx: an open action context.
        job: the inventory job.
        read: read the progress signal (False: ``--no-progress``).

    Returns:
        The one-line ``progress_note`` of :class:`UpdateListResult`.
    """
    from robustctl.jobcode.progress import read_progress
    from robustctl.transport.pool import TransportPool

    spec, hosts = job_code_hosts(ctx, job)
    progress = ctx.inventory.job(job).progress
    if not read:
        return "progress not read (--no-progress)"
    if progress is None:
        return "the job has no progress: section; stability cannot be evaluated"
    pool = TransportPool()
    try:
        reading = read_progress(pool, job, hosts, progress, clock=ctx.clock)
    finally:
        pool.close()
    evaluate_stability(ctx.store, job, spec, reading)
    return f"progress: step {reading.step} on {len(reading.entries)} rank(s)" + (
        f"; unreadable: {'; '.join(reading.errors[:3])}" if reading.errors else ""
    )


def code_history(ctx: ActionContext, job: str, *, read_progress: bool) -> CodeHistory:
    """The job's changes and versions, stability evaluated first from a progress reading.

    Args:
        ctx: an open action context.
        job: the inventory job.
        read_progress: read the progress signal first (when the job has a ``progress:`` section).

    Returns:
        The :class:`CodeHistory`.

    Raises:
        UsageError: unknown job.
        ConfigError: bad inventory, no ``code:``.
        StoreError: the store cannot be read or written.
    """
    note = _fold_progress(ctx, job, read_progress)
    commit, ids, forced = pending_update(ctx.store, job, ctx.clock())
    return CodeHistory(
        tuple(changes(ctx.store, job)),
        tuple(versions(ctx.store, job)),
        commit,
        ids,
        forced,
        last_stable_version(ctx.store, job),
        note,
    )
