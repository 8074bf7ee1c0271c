"""Checkpoint discovery and completeness (Megatron layout first), and the cross-group backup check.

The one call a restart makes is :func:`resolve_checkpoint`: read the job's checkpoint directory on
its current hosts and return the iteration to load (:class:`CheckpointPick`). The pieces:

* :mod:`robustctl.ckpt.scan`: the node-side ``ckpt`` probe fanned out to the hosts, parsed;
* :mod:`robustctl.ckpt.state`: completeness, the restart pick, the backup placement rule and the
  survival of an eviction (pure functions).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from robustctl.ckpt.state import (
    CheckpointError,
    CheckpointPick,
    CheckpointState,
    CheckpointSurvival,
    CheckpointUnknown,
    SurvivalStatus,
    pick_restart_iteration,
)
from robustctl.errors import UsageError

if TYPE_CHECKING:
    from robustctl.inventory import Inventory
    from robustctl.transport.pool import TransportPool

__all__ = [
    "CheckpointError",
    "CheckpointPick",
    "CheckpointState",
    "CheckpointSurvival",
    "CheckpointUnknown",
    "SurvivalStatus",
    "parse_want",
    "pick_restart_iteration",
    "read_checkpoints",
    "resolve_checkpoint",
]


def parse_want(text: str | int) -> str | int:
    """A ``--from-checkpoint`` value: ``latest-complete``, ``none`` or an iteration number (``30``).

    Args:
        text: the value as given (any case, surrounding whitespace ignored), or an iteration number.

    Returns:
        ``"latest-complete"``, ``"none"`` or the iteration number (≥ 0).

    Raises:
        UsageError: anything else.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise UsageError(f"checkpoint iteration {text}: expected a non-negative number")
        return text
    value = str(text).strip().lower()
    if value in ("latest-complete", "none"):
        return value
    if value.isascii() and value.isdigit() and len(value) <= 12:
        return int(value)
    raise UsageError(
        f"--from-checkpoint {str(text)[:40]!r}: expected latest-complete, none or an iteration number"
    )


def read_checkpoints(
    inventory: Inventory, job: str, hosts: Sequence[str], *, pool: TransportPool | None = None
) -> CheckpointState:
    """Read job ``job``'s checkpoint directory on ``hosts`` and judge every iteration.

    Args:
        inventory: the inventory (the job's ``ckpt:`` section, layout and host settings).
        job: the job's name.
        hosts: the job's current hosts in rank order (``ActionContext.job_hosts(job).hosts``).
        pool: transports (closed by the caller); None: one opened and closed here.

    Returns:
        The job's checkpoints, every iteration judged complete or not, newest first.

    Raises:
        UsageError: unknown job.
        ConfigError: the job has no ``ckpt:`` section.
        InventoryError: a host not in the inventory.
    """
    from robustctl.ckpt.scan import evaluate_scan, require_spec, scan_checkpoints
    from robustctl.errors import InventoryError

    try:
        spec_job = inventory.job(job)
    except InventoryError as exc:
        raise UsageError(str(exc)) from None
    targets = [inventory.by_name(h) for h in hosts]  # InventoryError (78): a job host the inventory lacks
    require_spec(spec_job, inventory.source)
    own = pool is None
    if pool is None:
        from robustctl.transport.pool import TransportPool

        pool = TransportPool()
    try:
        scan = scan_checkpoints(
            spec_job, targets, pool=pool, settings=inventory.diagnose, source=inventory.source
        )
    finally:
        if own:
            pool.close()
    return evaluate_scan(scan, hosts)


def resolve_checkpoint(
    inventory: Inventory,
    job: str,
    hosts: Sequence[str],
    want: str | int = "latest-complete",
    *,
    pool: TransportPool | None = None,
) -> CheckpointPick:
    """The checkpoint iteration a restart of ``job`` on ``hosts`` loads.

    Args:
        inventory: the inventory holding the job (its ``ckpt:`` section says where to look).
        job: the job's name.
        hosts: its current hosts in rank order (a copy of a shard counts only on one of them, unless
            the directory is shared).
        want: ``"latest-complete"`` (the newest complete iteration; the tracker file is read but
            never trusted alone), an iteration number (it must be complete), or ``"none"`` (no
            checkpoint: nothing is read). A string is parsed with :func:`parse_want`.
        pool: transports (closed by the caller); None: opened and closed here.

    Returns:
        :class:`CheckpointPick` ``(iteration, tracker, note)``; ``note`` says when the iteration is
        not the tracker's, e.g. ``"tracker says 30, iteration 30 lacks rank 5's shard: using 25
        (newest complete)"``.

    Raises:
        UsageError: a bad ``want``, an unknown job.
        ConfigError: the job has no ``ckpt:`` section; InventoryError: a host not in the inventory.
        CheckpointError (exit 2): the asked-for iteration is absent or incomplete, or none is complete.
        CheckpointUnknown (exit 3): the same, while some hosts could not be read.
    """
    wanted = parse_want(want)
    if wanted == "none":
        return CheckpointPick(None, None, "starting without a checkpoint (none asked for)")
    state = read_checkpoints(inventory, job, hosts, pool=pool)
    return pick_restart_iteration(state, wanted)
