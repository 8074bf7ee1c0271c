"""Which checkpoint iterations are complete, which one a restart uses, and where each rank's shards live.

Pure functions over what the ``ckpt`` probe read on the hosts (:class:`~robustctl.ckpt.scan.CheckpointScan`):

* :func:`evaluate`: an iteration is **complete** only when every shard the job's layout needs (one per
  rank ``0 … W-1``, or one per tensor- and pipeline-parallel rank for Megatron's ``mp_rank``
  naming) is present and readable on a host that is still in the job (any host that read a shared
  directory). The tracker file (``latest_checkpointed_iteration.txt``) is read and reported, never
  trusted alone: a save that a crash cut short leaves it pointing at a torn iteration, or behind it.
* :func:`pick_restart_iteration`: the newest complete iteration, with a note when it is not the
  tracker's ("tracker says 30, iteration 30 lacks rank 5's shard: using 25").
* :func:`check_backups`: ByteRobust's placement rule for in-memory/peer checkpoint backups (arXiv
  2509.16293, §6.3, Fig. 9): a rank's backup peer (another host holding a copy of its shard) shares
  none of its TP, PP or DP groups, so over-evicting any one of those groups never takes a shard and
  its backup at once.
* :func:`survival`: whether the newest complete iteration survives evicting some hosts, or which
  older one the job falls back to.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from robustctl.errors import RobustctlError
from robustctl.exit_codes import ExitCode
from robustctl.inventory.hostrange import compact_ranges

__all__ = [
    "BackupViolation",
    "CheckpointError",
    "CheckpointPick",
    "CheckpointState",
    "CheckpointSurvival",
    "CheckpointUnknown",
    "IterationState",
    "ShardCopy",
    "SurvivalStatus",
    "check_backups",
    "evaluate",
    "pick_restart_iteration",
    "survival",
    "unknown_survival",
]

MAX_LISTED = 8
"""Ranks or copies named one by one in a note before "and N more"."""


class CheckpointError(RobustctlError):
    """No checkpoint a restart can use: the asked-for iteration is incomplete or absent, or no
    iteration is complete. Exit 2 (CRITICAL)."""

    exit_code = ExitCode.CRITICAL


class CheckpointUnknown(RobustctlError):
    """The checkpoints could not be judged: the hosts that might hold the missing shards could not
    be read. Exit 3 (UNKNOWN)."""

    exit_code = ExitCode.UNKNOWN


@dataclass(frozen=True)
class ShardCopy:
    """One shard file as a host saw it.

    Attributes:
        host: the host that read it. rank: the rank whose shard it is (``mp_rank`` naming: the rank
        at (tp, pp) with every other coordinate 0, Megatron's data-parallel rank 0 that saves it).
        name: its path in the iteration directory. size: bytes (None: not statted).
        readable: a regular file whose first bytes read back. error: why not readable.
    """

    host: str
    rank: int
    name: str
    size: int | None
    readable: bool
    error: str | None = None


@dataclass(frozen=True)
class HostRead:
    """What one host's read of the checkpoint directory gave.

    Attributes:
        host: inventory name. ok: the directory was listed in full. error: why not (unreachable,
        probe failed or ran out of time, no such directory, listing cut short). tracker: the
        iteration the tracker names (None: absent, ``release``, or not a number). tracker_raw: its
        text (bounded). iterations: iteration numbers listed (newest first). copies:
        ``(iteration, copy)`` of every shard listed. notes: shard names that do not fit the layout.
    """

    host: str
    ok: bool
    error: str | None = None
    tracker: int | None = None
    tracker_raw: str | None = None
    iterations: tuple[int, ...] = ()
    copies: tuple[tuple[int, ShardCopy], ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class IterationState:
    """One iteration, judged against the job's layout and current hosts.

    Attributes:
        iteration: its number. complete: every needed shard readable on a job host.
        missing: needed ranks with no readable copy on a job host (ascending).
        unreadable: ``(rank, host, why)`` of copies present but not readable.
        locations: ``(rank, hosts)`` for every rank with a readable copy on a job host (hosts in
        job order). outside: ``(rank, hosts)`` of readable copies only on hosts no longer in the job.
        files: ``(rank, name, size)`` of a readable copy of each rank that has one (name: its path in
        the iteration directory; size: bytes, None when not statted).
    """

    iteration: int
    complete: bool
    missing: tuple[int, ...]
    unreadable: tuple[tuple[int, str, str], ...]
    locations: tuple[tuple[int, tuple[str, ...]], ...]
    outside: tuple[tuple[int, tuple[str, ...]], ...] = ()
    files: tuple[tuple[int, str, int | None], ...] = ()

    def lacks(self) -> str:
        """Why it is incomplete, one phrase: ``lacks rank 5's shard``, ``lacks the shards of ranks 5, 7-9``."""
        parts: list[str] = []
        if self.missing:
            if len(self.missing) == 1:
                parts.append(f"lacks rank {self.missing[0]}'s shard")
            else:
                parts.append(f"lacks the shards of ranks {compact_ranges(self.missing)}")
        bad = [u for u in self.unreadable if u[0] in set(self.missing)]
        if bad:
            rank, host, why = bad[0]
            more = f" (and {len(bad) - 1} more unreadable)" if len(bad) > 1 else ""
            parts.append(f"rank {rank}'s shard on {host} is unreadable: {why}{more}")
        gone = [o for o in self.outside if o[0] in set(self.missing)]
        if gone:
            rank, hosts = gone[0]
            parts.append(f"rank {rank}'s shard is only on {', '.join(hosts)}, no longer in the job")
        return "; ".join(parts) or "is complete"


@dataclass(frozen=True)
class CheckpointState:
    """A job's checkpoints, judged.

    Attributes:
        job: name. dir: the configured directory. shared: one file system for every host.
        shards: ``rank`` or ``mp_rank``. world_size: W. needed: the ranks whose shards make an
        iteration complete. hosts: the job's current hosts (rank order). unread: ``(host, why)`` of
        hosts that could not be read in full. tracker: the tracker's iteration (the first job host,
        in rank order, that has one; rank 0's under Megatron). tracker_note: a disagreement or a
        tracker that is not a number. iterations: newest first. newest_complete: None when none is.
    """

    job: str
    dir: str
    shared: bool
    shards: str
    world_size: int
    needed: tuple[int, ...]
    hosts: tuple[str, ...]
    unread: tuple[tuple[str, str], ...]
    tracker: int | None
    tracker_note: str | None
    iterations: tuple[IterationState, ...]
    notes: tuple[str, ...] = ()

    @property
    def newest_complete(self) -> int | None:
        """The newest complete iteration, or None."""
        return next((it.iteration for it in self.iterations if it.complete), None)

    def iteration(self, number: int) -> IterationState | None:
        """The state of iteration ``number``, None when no host listed it."""
        return next((it for it in self.iterations if it.iteration == number), None)


def evaluate(
    reads: Sequence[HostRead],
    *,
    job: str,
    dir: str,
    shared: bool,
    shards: str,
    world_size: int,
    needed: Sequence[int],
    hosts: Sequence[str],
) -> CheckpointState:
    """Judge every iteration listed in ``reads`` against the ``needed`` ranks and the job's ``hosts``.

    Args:
        reads: one per host read (partial reads count: a readable shard seen is evidence).
        job: the job's name.
        dir: the configured checkpoint directory.
        shared: the directory is one file system for every host.
        shards: the shard naming, ``rank`` or ``mp_rank``.
        world_size: the job's number of ranks.
        needed: ranks whose shards make an iteration complete.
        hosts: the job's current hosts, rank order; a copy counts only on one of them, except in a
            ``shared`` directory.

    Returns:
        The :class:`CheckpointState` (iterations newest first).
    """
    in_job = {h: i for i, h in enumerate(hosts)}
    need = tuple(sorted(set(needed)))
    need_set = set(need)
    by_iter: dict[int, list[ShardCopy]] = {}
    for r in reads:
        for number in r.iterations:
            by_iter.setdefault(number, [])
        for number, copy in r.copies:
            by_iter.setdefault(number, []).append(copy)
    states: list[IterationState] = []
    for number in sorted(by_iter, reverse=True):
        where: dict[int, set[str]] = {}
        away: dict[int, set[str]] = {}
        bad: list[tuple[int, str, str]] = []
        files: dict[int, tuple[str, int | None]] = {}
        for c in by_iter[number]:
            if not c.readable:
                bad.append((c.rank, c.host, c.error or "not readable"))
                continue
            files.setdefault(c.rank, (c.name, c.size))
            if shared or c.host in in_job:
                where.setdefault(c.rank, set()).add(c.host)
            else:
                away.setdefault(c.rank, set()).add(c.host)
        missing = tuple(r for r in need if r not in where)
        states.append(
            IterationState(
                iteration=number,
                complete=not missing,
                missing=missing,
                unreadable=tuple(sorted(set(bad))),
                locations=tuple(
                    (r, tuple(sorted(where[r], key=lambda h: (in_job.get(h, len(in_job)), h))))
                    for r in sorted(where)
                    if r in need_set
                ),
                outside=tuple((r, tuple(sorted(away[r]))) for r in sorted(away) if r not in where),
                files=tuple((r, *files[r]) for r in sorted(files) if r in need_set),
            )
        )
    tracker, tracker_note = _tracker(reads, hosts)
    notes = tuple(dict.fromkeys(n for r in reads for n in r.notes))
    return CheckpointState(
        job=job,
        dir=dir,
        shared=shared,
        shards=shards,
        world_size=world_size,
        needed=need,
        hosts=tuple(hosts),
        unread=tuple((r.host, r.error or "not read") for r in reads if not r.ok),
        tracker=tracker,
        tracker_note=tracker_note,
        iterations=tuple(states),
        notes=notes,
    )


def _tracker(reads: Sequence[HostRead], hosts: Sequence[str]) -> tuple[int | None, str | None]:
    """The tracker of the first job host (rank order) that has one, and a note when hosts disagree."""
    order = {h: i for i, h in enumerate(hosts)}
    seen = sorted(
        (r for r in reads if r.tracker is not None or r.tracker_raw),
        key=lambda r: order.get(r.host, len(order)),
    )
    if not seen:
        return None, None
    first = seen[0]
    note = None
    if first.tracker is None:
        note = f"tracker on {first.host} names no iteration ({(first.tracker_raw or '')[:20]!r})"
    others = {r.tracker for r in seen if r.tracker is not None and r.tracker != first.tracker}
    if others:
        values = ", ".join(str(v) for v in sorted(others))
        note = f"trackers disagree: {first.host} says {first.tracker}, other hosts say {values}"
    return first.tracker, note


# ------------------------------------------------------------------------------------------ pick


@dataclass(frozen=True)
class CheckpointPick:
    """The iteration a restart loads.

    Attributes:
        iteration: the iteration to load (None: start without a checkpoint, ``want="none"``).
        tracker: what the tracker file says (None: absent or not read).
        note: one line saying why, and how it differs from the tracker.
    """

    iteration: int | None
    tracker: int | None
    note: str


def pick_restart_iteration(state: CheckpointState, want: str | int = "latest-complete") -> CheckpointPick:
    """The iteration a restart should load.

    Args:
        state: the job's checkpoints, judged (:func:`evaluate`).
        want: ``"latest-complete"`` (the newest complete iteration, whatever the tracker says), an
            iteration number (it must be complete), or ``"none"`` (no checkpoint).

    Returns:
        ``(iteration, tracker, note)``: the iteration to load (None: start without a checkpoint), the
        tracker's iteration, and a note on the choice (e.g. when it is not the tracker's).

    Raises:
        CheckpointError: the asked-for iteration is absent or incomplete, or no iteration is complete.
        CheckpointUnknown: as CheckpointError, but hosts that could not be read might hold what is missing.
        ValueError: ``want`` is none of the above.
    """
    if want == "none":
        return CheckpointPick(None, state.tracker, "starting without a checkpoint (none asked for)")
    unread = _unread_clause(state)
    if isinstance(want, int) and not isinstance(want, bool):
        it = state.iteration(want)
        if it is None:
            found = ", ".join(str(i.iteration) for i in state.iterations[:MAX_LISTED]) or "none"
            raise _failure(state, f"no iteration {want} in {state.dir} (found: {found}){unread}")
        if not it.complete:
            raise _failure(state, f"iteration {want} is incomplete: it {it.lacks()}{unread}")
        return CheckpointPick(want, state.tracker, _tracker_note(state, want, asked=True))
    if want != "latest-complete":
        raise ValueError(f"want must be 'latest-complete', an iteration number or 'none', not {want!r}")
    newest = state.newest_complete
    if newest is None:
        listed = len(state.iterations)
        why = f"none of the {listed} iterations listed is complete" if listed else "no iteration found"
        if state.iterations:
            why += f" (the newest, {state.iterations[0].iteration}, {state.iterations[0].lacks()})"
        raise _failure(state, f"no complete checkpoint of job {state.job} in {state.dir}: {why}{unread}")
    return CheckpointPick(newest, state.tracker, _tracker_note(state, newest, asked=False))


def _unread_clause(state: CheckpointState) -> str:
    if not state.unread:
        return ""
    host, why = state.unread[0]
    more = f" and {len(state.unread) - 1} more" if len(state.unread) > 1 else ""
    return f"; not read: {host} ({why}){more}"


def _failure(state: CheckpointState, message: str) -> RobustctlError:
    return CheckpointUnknown(message) if state.unread else CheckpointError(message)


def _tracker_note(state: CheckpointState, chosen: int, *, asked: bool) -> str:
    t = state.tracker
    how = "asked for" if asked else "newest complete"
    extra = f" ({state.tracker_note})" if state.tracker_note else ""
    newer = "" if asked else _newer_incomplete(state, chosen, t)
    if t is None:
        return f"no tracker iteration{extra}: using {chosen} ({how}){newer}"
    if t == chosen:
        return f"tracker says {t}, complete: using {t}{extra}{newer}"
    tracked = state.iteration(t)
    if tracked is None:
        return f"tracker says {t}, but no host has iteration {t}: using {chosen} ({how}){extra}{newer}"
    if not tracked.complete:
        return f"tracker says {t}, iteration {t} {tracked.lacks()}: using {chosen} ({how}){extra}{newer}"
    return f"tracker says {t} (complete): using {chosen} ({how}){extra}{newer}"


def _newer_incomplete(state: CheckpointState, chosen: int, tracker: int | None) -> str:
    """``; newer iteration N lacks ...``: the newest iteration above ``chosen`` that is incomplete and
    that the tracker does not name (an asynchronous save updates the tracker only once the next save
    starts, so a torn newest iteration is often one the tracker does not point at yet); else ''."""
    newer = [
        i for i in state.iterations if i.iteration > chosen and not i.complete and i.iteration != tracker
    ]
    if not newer:
        return ""
    more = f" (and {len(newer) - 1} more incomplete)" if len(newer) > 1 else ""
    return f"; newer iteration {newer[0].iteration} {newer[0].lacks()}{more}"


# --------------------------------------------------------------------------------------- backups


@dataclass(frozen=True)
class BackupViolation:
    """A rank whose shard copies break the placement rule.

    Attributes:
        rank: the rank. host: the backup host (None: the rank has no backup at all).
        groups: the kinds (``tp``, ``pp``, ``dp``) of the rank's groups that also run on ``host``.
        detail: one line.
    """

    rank: int
    host: str | None
    groups: tuple[str, ...]
    detail: str


def check_backups(
    it: IterationState,
    *,
    primary: Mapping[int, str],
    group_hosts: Mapping[int, Mapping[str, Collection[str]]],
) -> tuple[BackupViolation, ...]:
    """Check ByteRobust's backup placement rule (§6.3, Fig. 9) on one iteration.

    Args:
        it: the iteration (per-host directories).
        primary: rank → the host that runs it.
        group_hosts: rank → {``"tp"``/``"pp"``/``"dp"``: hosts running a rank of that group}.

    Returns:
        One violation per (rank, backup host) whose host runs a rank of the same TP, PP or DP group,
        and one per rank with no copy on any host other than its own (no backup), rank order.
    """
    out: list[BackupViolation] = []
    for rank, hosts in it.locations:
        own = primary.get(rank)
        backups = [h for h in hosts if h != own]
        if not backups:
            where = f"only on {own}" if own in hosts else f"only on {', '.join(hosts)}"
            out.append(BackupViolation(rank, None, (), f"rank {rank}: no backup copy ({where})"))
            continue
        groups = group_hosts.get(rank, {})
        for b in backups:
            shared = tuple(k for k in ("tp", "pp", "dp") if b in groups.get(k, ()))
            if shared:
                out.append(
                    BackupViolation(
                        rank,
                        b,
                        shared,
                        f"rank {rank}: backup on {b} shares its {'/'.join(g.upper() for g in shared)} "
                        f"group: over-evicting that group loses both copies",
                    )
                )
    return tuple(out)


# -------------------------------------------------------------------------------------- survival


class SurvivalStatus(str, enum.Enum):
    """Whether the newest complete checkpoint survives an eviction."""

    SURVIVES = "survives"
    FALLS_BACK = "falls-back"
    NONE_SURVIVES = "none-survives"
    UNKNOWN = "unknown"
    NOT_AFFECTED = "not-affected"
    """No evicted host is in the job."""


@dataclass(frozen=True)
class CheckpointSurvival:
    """What evicting hosts does to a job's checkpoints (ByteRobust §6.3, Fig. 9: over-eviction).

    Attributes:
        job: the job. status: see :class:`SurvivalStatus`. latest: the newest complete iteration
        before the eviction. after: the newest complete one on the hosts left (None: none).
        summary: one line, ``checkpoint survival: ...``.
    """

    job: str
    status: SurvivalStatus
    latest: int | None
    after: int | None
    summary: str


def survival(before: CheckpointState, after: CheckpointState, evicted: Iterable[str]) -> CheckpointSurvival:
    """Compare the newest complete iteration on the job's hosts (``before``) with the one on the
    hosts left once ``evicted`` are gone (``after``: the same reads, evaluated on the rest)."""
    gone = sorted(set(evicted) & set(before.hosts))
    job = before.job
    latest, left = before.newest_complete, after.newest_complete
    why = f"; not read: {', '.join(h for h, _ in before.unread)}" if before.unread else ""
    status: SurvivalStatus
    if not gone:
        return CheckpointSurvival(
            job, SurvivalStatus.NOT_AFFECTED, latest, latest, f"checkpoint survival: job {job} loses no host"
        )
    if latest is None:
        return CheckpointSurvival(
            job,
            SurvivalStatus.NONE_SURVIVES,
            None,
            None,
            f"checkpoint survival: job {job} has no complete checkpoint even before the eviction{why}",
        )
    if before.shared:
        return CheckpointSurvival(
            job,
            SurvivalStatus.SURVIVES,
            latest,
            left,
            f"checkpoint survival: iteration {latest} survives (shared directory {before.dir})",
        )
    if left == latest:
        status, text = (
            SurvivalStatus.SURVIVES,
            f"iteration {latest} survives: every evicted rank's shard has a copy on a host that stays",
        )
    elif left is not None:
        lacks = after.iteration(latest)
        reason = lacks.lacks() if lacks is not None else "is gone"
        status = SurvivalStatus.FALLS_BACK
        text = f"iteration {latest} is lost (without {', '.join(gone)} it {reason}): falls back to {left}"
    else:
        status, text = (
            SurvivalStatus.NONE_SURVIVES,
            f"no complete checkpoint survives evicting {', '.join(gone)}",
        )
    if before.unread:  # a host not read may hold the copies that decide it
        host, reason = before.unread[0]
        more = f" and {len(before.unread) - 1} more" if len(before.unread) > 1 else ""
        return CheckpointSurvival(
            job,
            SurvivalStatus.UNKNOWN,
            latest,
            left,
            f"checkpoint survival: job {job}: unknown ({host} not read: {reason}{more}); "
            f"from the hosts read: {text}",
        )
    return CheckpointSurvival(job, status, latest, left, f"checkpoint survival: job {job}: {text}")


def unknown_survival(job: str, why: str) -> CheckpointSurvival:
    """The survival of a job whose checkpoints could not be read: ``checkpoint survival: unknown (why)``."""
    return CheckpointSurvival(
        job, SurvivalStatus.UNKNOWN, None, None, f"checkpoint survival: job {job}: unknown ({why})"
    )
