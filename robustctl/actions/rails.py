"""Safety rails of destructive actions: evaluated on every plan, before anything is applied.

Rules (each a :class:`~robustctl.actions.plan.RailCheck`; limits from the inventory's ``policy:``
section, :class:`~robustctl.config.PolicySettings`):

``non-empty-targets``
    An empty or unresolved target set aborts; ``--force`` cannot override it. Google's "Diskerase"
    post-mortem: an automation given an empty set of machines treated it as "all" and erased a fleet.
``max-evictions-per-hour``
    At most ``max_evictions_per_hour`` machines evicted in any hour (history in the store + this plan);
    Kubernetes' node-lifecycle controller rate-limits evictions the same way (``--node-eviction-rate``).
``max-cluster-fraction`` / ``max-job-fraction``
    At most ``max_cluster_fraction`` of the inventory's hosts, and ``max_job_fraction`` of each
    affected job's machines, evicted within ``window_s`` (Cluster API MachineHealthCheck
    ``maxUnhealthy``: stop remediating when too much of a set is unhealthy).
``circuit-breaker``
    Refuse when more than ``circuit_breaker_fraction`` of the hosts look bad at once (already suspect
    or evicted, plus the suspects this plan names; over-eviction's healthy extras do not count): a
    monitoring or network fault is more likely than that many broken machines (Kubernetes stops
    evicting in a zone past ``--unhealthy-zone-threshold``).

Every limit allows at least one machine (``max(1, floor(fraction × n))``), so a small cluster can still
take out its one broken host. Every failing rule says how to override it: raise the policy in the
inventory, or ``--force --force-reason "..."`` (recorded in the audit log).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from robustctl.actions.plan import RailCheck
from robustctl.config import PolicySettings
from robustctl.store import MachineState, Store

__all__ = ["evaluate_rails", "limit", "non_empty"]

FORCE_HINT = '--force --force-reason "..."'


def limit(fraction: float, n: int) -> int:
    """The machine limit of ``fraction`` of ``n``: ``max(1, floor(fraction × n))``."""
    return max(1, math.floor(fraction * n + 1e-9))


def non_empty(targets: Sequence[str], what: str) -> RailCheck:
    """The ``non-empty-targets`` rule on ``targets`` (``what``: where they came from, for the message)."""
    if targets:
        return RailCheck("non-empty-targets", True, f"{len(targets)} target(s)", "none needed")
    return RailCheck(
        "non-empty-targets",
        False,
        f"no machine to act on ({what} resolved to nothing); refusing rather than guessing",
        "cannot be overridden: name the machines, or give a report that names suspects",
        overridable=False,
    )


def evaluate_rails(
    *,
    new_evictions: Sequence[str],
    suspects: Iterable[str],
    cluster_hosts: Sequence[str],
    jobs: Mapping[str, Sequence[str]],
    store: Store,
    policy: PolicySettings,
    now: float,
) -> tuple[RailCheck, ...]:
    """Evaluate the rate, fraction and circuit-breaker rules on a plan that evicts ``new_evictions``.

    Args:
        new_evictions: hosts the plan evicts that are not evicted yet.
        suspects: hosts named bad by the operator or a report (before over-eviction).
        cluster_hosts: every host of the inventory.
        jobs: each job's current hosts, by job name.
        store: eviction history and current states.
        policy: the inventory's ``policy:`` limits (per hour, fractions, window, circuit breaker).
        now: UNIX seconds.

    Returns:
        One check per rule (``max-evictions-per-hour``, ``max-cluster-fraction``, one
        ``max-job-fraction`` per job that loses a machine, ``circuit-breaker``).
    """
    new = list(dict.fromkeys(new_evictions))
    checks: list[RailCheck] = []
    hour = {h.host for h in store.evictions_since(now - 3600.0)}
    n_hour = len(hour) + len([h for h in new if h not in hour])
    cap = policy.max_evictions_per_hour
    checks.append(
        RailCheck(
            "max-evictions-per-hour",
            n_hour <= cap,
            f"{n_hour} machine(s) evicted in the last hour with this plan ({len(hour)} before it), limit {cap}",
            f"raise policy.max_evictions_per_hour in the inventory, or {FORCE_HINT}",
        )
    )
    window = {h.host for h in store.evictions_since(now - policy.window_s)} | set(new)
    n = len(cluster_hosts)
    cap = limit(policy.max_cluster_fraction, n)
    in_cluster = window & set(cluster_hosts)
    checks.append(
        RailCheck(
            "max-cluster-fraction",
            len(in_cluster) <= cap,
            f"{len(in_cluster)} of {n} hosts evicted within {policy.window_s:g} s with this plan, "
            f"limit {cap} ({policy.max_cluster_fraction:.0%})",
            f"raise policy.max_cluster_fraction in the inventory, or {FORCE_HINT}",
        )
    )
    for job, hosts in sorted(jobs.items()):
        if not set(new) & set(hosts):
            continue
        cap = limit(policy.max_job_fraction, len(hosts))
        lost = window & set(hosts)
        checks.append(
            RailCheck(
                "max-job-fraction",
                len(lost) <= cap,
                f"job {job}: {len(lost)} of its {len(hosts)} machines evicted within {policy.window_s:g} s "
                f"with this plan, limit {cap} ({policy.max_job_fraction:.0%})",
                f"raise policy.max_job_fraction in the inventory, or {FORCE_HINT}",
            )
        )
    bad_states = {MachineState.SUSPECT, MachineState.EVICTED}
    bad = {m.host for m in store.machines(bad_states)} | set(suspects)
    bad &= set(cluster_hosts)
    cap = limit(policy.circuit_breaker_fraction, n)
    tripped = len(bad) > cap
    checks.append(
        RailCheck(
            "circuit-breaker",
            not tripped,
            f"{len(bad)} of {n} hosts look bad at once (suspect or evicted), limit {cap} "
            f"({policy.circuit_breaker_fraction:.0%})"
            + (": more likely an observer fault than broken machines" if tripped else ""),
            f"check the monitoring first; then raise policy.circuit_breaker_fraction, or {FORCE_HINT}",
        )
    )
    return tuple(checks)
