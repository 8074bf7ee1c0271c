"""Over-eviction-aware evict plans (ByteRobust, arXiv 2509.16293, §6.3, Fig. 9).

Evicting a whole parallel group takes the shards stored on its machines with it. For every job with a
``ckpt:`` section that loses a host, :func:`evict_survival` reads the job's checkpoints once and says
whether the newest complete iteration survives the eviction (every evicted rank's shard also has a
readable copy on a host that stays, or the directory is shared), which older iteration the job falls
back to, or that none survives. This is information in the plan, not a rail: a read that fails makes
the answer ``unknown (why)`` and the eviction goes on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from robustctl.ckpt.state import CheckpointSurvival, survival, unknown_survival

if TYPE_CHECKING:
    from robustctl.actions import ActionContext
    from robustctl.transport.pool import TransportPool

__all__ = ["evict_survival"]


def evict_survival(
    ctx: ActionContext, targets: Sequence[str], *, pool: TransportPool | None = None
) -> tuple[CheckpointSurvival, ...]:
    """The checkpoint survival of every inventory job with a ``ckpt:`` section that ``targets`` touch.

    Args:
        ctx: the action context (inventory, scheduler and store for the jobs' current hosts).
        targets: the hosts the plan evicts.
        pool: transports (None: opened and closed here).

    Returns:
        One :class:`CheckpointSurvival` per such job, inventory order. Never raises: a job whose
        checkpoints cannot be read gets status ``unknown`` with the reason.
    """
    from robustctl.ckpt.scan import evaluate_scan, scan_checkpoints

    gone = set(targets)
    out: list[CheckpointSurvival] = []
    own = pool is None
    try:
        for name, job in ctx.inventory.jobs.items():
            if job.ckpt is None:
                continue
            try:
                hosts = tuple(ctx.job_hosts(name).hosts)
                if not gone & set(hosts):
                    continue
                if pool is None:
                    from robustctl.transport.pool import TransportPool

                    pool = TransportPool()
                scan = scan_checkpoints(
                    job,
                    [ctx.inventory.by_name(h) for h in hosts],
                    pool=pool,
                    settings=ctx.inventory.diagnose,
                    source=ctx.inventory.source,
                )
                before = evaluate_scan(scan, hosts)
                if not any(r.ok for r in scan.reads):
                    host, why = before.unread[0] if before.unread else ("?", "no host read")
                    out.append(unknown_survival(name, f"no host could be read: {host}: {why}"))
                    continue
                after = evaluate_scan(scan, [h for h in hosts if h not in gone])
                out.append(survival(before, after, gone))
            except Exception as exc:  # information only: the eviction must not fail on it
                out.append(unknown_survival(name, f"{type(exc).__name__}: {exc}"[:300]))
    finally:
        if own and pool is not None:
            pool.close()
    return tuple(out)
