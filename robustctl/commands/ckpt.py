"""``robustctl ckpt status`` as a library call: :func:`run_ckpt_status`.

Reads the job's checkpoint directory on its current hosts (the scheduler's list, else robustctl's
record, else the inventory's: :func:`robustctl.actions.hosts.job_hosts`) with the ``ckpt`` probe and
reports every iteration listed: complete or not, which shards are missing or unreadable, where each
rank's shards live, and the tracker file against the newest complete iteration. With ``layout``,
also ByteRobust's backup placement rule (arXiv 2509.16293, §6.3): each rank's backup peer shares
none of its TP, PP or DP groups.

Exit codes (:attr:`CkptStatusResult.exit_code`): 0 the newest complete iteration is the tracker's ·
1 WARNING they differ (or there is no tracker), or a backup breaks the layout rule · 2 CRITICAL no
iteration is complete · 3 UNKNOWN a host could not be read (its shards are not known) · 64 an
unknown job · 78 a job without a ``ckpt:`` section, a bad inventory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from robustctl.ckpt.state import BackupViolation, CheckpointState, IterationState, pick_restart_iteration
from robustctl.errors import RobustctlError, UsageError
from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION

if TYPE_CHECKING:
    from robustctl.config import ParallelLayout
    from robustctl.inventory import Inventory
    from robustctl.transport.pool import TransportPool

__all__ = [
    "CkptIteration",
    "CkptStatusRequest",
    "CkptStatusResult",
    "ckpt_status_request",
    "run_ckpt_status",
]

MAX_UNREADABLE_LISTED = 100
"""Unreadable copies listed per iteration in the result (the count is always complete)."""


@dataclass(frozen=True)
class CkptStatusRequest:
    """What ``ckpt status`` was asked.

    Attributes:
        inventory: the resolved inventory. job: the job's name. layout: also check the backup
        placement rule. state: the state store (None: ``$ROBUSTCTL_STATE`` or the XDG default),
        read for the job's current hosts.
    """

    inventory: Inventory
    job: str
    layout: bool = False
    state: Path | None = None


@dataclass(frozen=True)
class CkptIteration:
    """One iteration in the result.

    Attributes:
        iteration: its number. complete: every needed shard readable on a job host.
        present: needed ranks with a readable copy on a job host. missing: needed ranks without one.
        unreadable: ``{rank, host, error}`` of copies present but not readable (at most
        :data:`MAX_UNREADABLE_LISTED`). n_unreadable: their count. why: one phrase when incomplete.
    """

    iteration: int
    complete: bool
    present: int
    missing: tuple[int, ...]
    unreadable: tuple[Mapping[str, object], ...]
    n_unreadable: int
    why: str | None


@dataclass(frozen=True)
class CkptStatusResult:
    """The checkpoints of a job.

    Attributes:
        job, dir, shared, shards (``rank``/``mp_rank``), world_size, needed (shards per iteration).
        hosts: the job's current hosts (rank order); hosts_source: ``scheduler``/``store``/``inventory``;
        hosts_note: why it fell back. unread: ``{host, error}`` of hosts not read in full.
        tracker: the tracker's iteration (None: none). tracker_note: disagreement, bad content.
        newest_complete: None when none. pick: the note a restart would print (None: no complete
        iteration). iterations: newest first. locations_iteration / locations: where each rank's
        readable shards live (``{rank, hosts}``) in the newest complete iteration (else the newest).
        layout_checked, layout_note, violations: the backup placement check (``--layout``).
        notes: shard names that fit no rank, and the like. kind ``"ckpt-status"``, schema_version.
    """

    job: str
    dir: str
    shared: bool
    shards: str
    world_size: int
    needed: int
    hosts: tuple[str, ...]
    hosts_source: str
    hosts_note: str | None
    unread: tuple[Mapping[str, str], ...]
    tracker: int | None
    tracker_note: str | None
    newest_complete: int | None
    pick: str | None
    iterations: tuple[CkptIteration, ...]
    locations_iteration: int | None
    locations: tuple[Mapping[str, object], ...]
    layout_checked: bool
    layout_note: str | None
    violations: tuple[BackupViolation, ...]
    notes: tuple[str, ...] = ()
    kind: str = "ckpt-status"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """3 a host unread · 2 no complete iteration · 1 tracker differs or a layout violation · 0."""
        if self.unread:
            return ExitCode.UNKNOWN
        if self.newest_complete is None:
            return ExitCode.CRITICAL
        if self.tracker != self.newest_complete or self.violations:
            return ExitCode.WARNING
        return ExitCode.OK


def ckpt_status_request(
    *,
    job: str,
    inventory: Path | None = None,
    layout: bool = False,
    state: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> CkptStatusRequest:
    """A :class:`CkptStatusRequest` from command-line values.

    Args:
        job: the job's name in the inventory.
        inventory: the inventory path (None: ``$ROBUSTCTL_INVENTORY`` or the embedded default).
        layout: also check the backup placement rule against the job's layout.
        state: the state store path (None: the default).
        environ: the environment to read (None: ``os.environ``).

    Returns:
        The request :func:`run_ckpt_status` takes, with the inventory loaded.

    Raises:
        ConfigError / InventoryError: invalid inventory, or the job has no ``ckpt:`` section.
        UsageError: an unknown job (a flag value: exit 64).
    """
    from robustctl.ckpt.scan import require_spec
    from robustctl.commands import options
    from robustctl.errors import InventoryError

    inv = options.inventory(inventory, environ)
    try:
        the_job = inv.job(job)
    except InventoryError as exc:
        raise UsageError(str(exc)) from None
    require_spec(the_job, inv.source)
    return CkptStatusRequest(inventory=inv, job=job, layout=layout, state=state)


def run_ckpt_status(request: CkptStatusRequest, *, pool: TransportPool | None = None) -> CkptStatusResult:
    """Read and judge the job's checkpoints (see the module docstring).

    Args:
        request: the job and what to judge its checkpoints against.
        pool: transports (closed by the caller); None: opened and closed here.

    Returns:
        Each checkpoint found, its verdict, and the newest complete one.

    Raises:
        UsageError: unknown job; with ``layout``, a host list that does not fit the layout.
        ConfigError: the job has no ``ckpt:`` section, a bad scheduler section.
        StoreError: the state store cannot be opened.
    """
    from robustctl.actions.hosts import job_hosts
    from robustctl.ckpt import read_checkpoints
    from robustctl.ckpt.scan import require_spec
    from robustctl.commands.options import state_path
    from robustctl.errors import InventoryError
    from robustctl.schedulers import make_scheduler
    from robustctl.store import Store

    inv = request.inventory
    try:
        spec_job = inv.job(request.job)
    except InventoryError as exc:
        raise UsageError(str(exc)) from None
    require_spec(spec_job, inv.source)
    with Store.open(state_path(request.state)) as store:
        sched = make_scheduler(inv.scheduler, inventory=inv, store=store)
        current = job_hosts(request.job, scheduler=sched, store=store, inventory=inv)
    state = read_checkpoints(inv, request.job, current.hosts, pool=pool)
    pick: str | None = None
    if state.newest_complete is not None:
        try:
            pick = pick_restart_iteration(state).note
        except RobustctlError:  # pragma: no cover - a complete iteration is always picked
            pick = None
    shown = state.iteration(state.newest_complete) if state.newest_complete is not None else None
    if shown is None and state.iterations:
        shown = state.iterations[0]
    violations: tuple[BackupViolation, ...] = ()
    layout_note: str | None = None
    if request.layout:
        violations, layout_note = _layout_check(state, shown, spec_job.layout, spec_job.ranks_per_host)
    return CkptStatusResult(
        job=request.job,
        dir=state.dir,
        shared=state.shared,
        shards=state.shards,
        world_size=state.world_size,
        needed=len(state.needed),
        hosts=state.hosts,
        hosts_source=current.source.value,
        hosts_note=current.note(),
        unread=tuple({"host": h, "error": why} for h, why in state.unread),
        tracker=state.tracker,
        tracker_note=state.tracker_note,
        newest_complete=state.newest_complete,
        pick=pick,
        iterations=tuple(_iteration(it, len(state.needed)) for it in state.iterations),
        locations_iteration=shown.iteration if shown is not None else None,
        locations=tuple({"rank": r, "hosts": list(h)} for r, h in shown.locations) if shown else (),
        layout_checked=request.layout,
        layout_note=layout_note,
        violations=violations,
        notes=state.notes,
    )


def _iteration(it: IterationState, needed: int) -> CkptIteration:
    return CkptIteration(
        iteration=it.iteration,
        complete=it.complete,
        present=needed - len(it.missing),
        missing=it.missing,
        unreadable=tuple(
            {"rank": r, "host": h, "error": e} for r, h, e in it.unreadable[:MAX_UNREADABLE_LISTED]
        ),
        n_unreadable=len(it.unreadable),
        why=None if it.complete else it.lacks(),
    )


def _layout_check(
    state: CheckpointState, it: IterationState | None, layout: ParallelLayout, ranks_per_host: int
) -> tuple[tuple[BackupViolation, ...], str | None]:
    """The backup placement rule on ``it`` (per-host directories only)."""
    from robustctl.ckpt.state import check_backups
    from robustctl.inventory.topology import Topology

    if state.shared:
        return (), "shared directory: one copy every host sees, no per-host backups to place"
    if it is None:
        return (), "no iteration to check"
    if len(state.hosts) * ranks_per_host != layout.world_size:
        raise UsageError(
            f"job {state.job}: layout of {layout.world_size} ranks does not match its "
            f"{len(state.hosts)} hosts × {ranks_per_host} ranks"
        )
    topo = Topology(layout, ranks_per_host, state.hosts)
    primary: dict[int, str] = {}
    group_hosts: dict[int, dict[str, set[str]]] = {}
    machines_cache: dict[tuple[str, int], set[str]] = {}
    for rank, _ in it.locations:
        primary[rank] = str(topo.host_of(rank))
        kinds: dict[str, set[str]] = {}
        for kind in ("tp", "pp", "dp"):
            key = (kind, topo.group_index(rank, kind))
            if key not in machines_cache:
                ranks = topo.group_ranks(kind, key[1])
                machines_cache[key] = {topo.machine_name(m) for m in topo.machines_of(ranks)}
            kinds[kind] = machines_cache[key]
        group_hosts[rank] = kinds
    violations = check_backups(it, primary=primary, group_hosts=group_hosts)
    return violations, f"backup placement checked on iteration {it.iteration}"
