"""Lemon nodes: machines that keep failing, or keep coming back from repair.

Kokolis et al., "Revisiting Reliability in Large-Scale ML Research Clusters" (HPCA 2025) find that a
small set of "lemon" nodes cause a large share of job failures on Meta's research clusters, and that
detecting and removing them cut the failure rate of 512+-GPU jobs from 14% to 4%. Their detector
scores nodes on repeated failure signals (health-check failures, jobs that failed on the node, times
it was taken out); robustctl keeps the two it records itself:

* **failures**: times the host was named within the window, at least ``lemon_failures`` (3): changes
  of its verdict (:data:`robustctl.sweep.history.HOST_CHECK`) into CRITICAL, which a sweep records
  only when its debounce policy names the host (:func:`robustctl.sweep.policy.record_sweep`: a
  hardware event at once, a network check seen failing twice within 5 minutes, a sustained thermal
  or clock finding) and a ``diagnose`` run when it names the host a suspect. A NIC that flaps once
  and is left pending is not a failure;
* **returns**: times the host went from ``evicted`` back to service (``returned``, the store's
  ``machine_history``) within the window, at least ``lemon_returns`` (2).

The window is ``lemon_days`` (30) or the ``--since`` of ``robustctl lemons``
(:class:`robustctl.config.SweepSettings` gives the defaults).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from robustctl.store import MachineState
from robustctl.sweep.history import failures_since

if TYPE_CHECKING:
    from robustctl.store import Store

__all__ = ["Evidence", "Lemon", "find_lemons"]

MAX_EVIDENCE = 8
"""Evidence lines kept per lemon (the newest)."""


@dataclass(frozen=True)
class Evidence:
    """One event behind a lemon: ``what`` (``failure`` or ``returned``) at ``at`` (UNIX s), its line."""

    what: str
    at: float
    detail: str


@dataclass(frozen=True)
class Lemon:
    """A host that meets a lemon rule.

    Attributes:
        host; failures / returns: counts within the window; rules: which rules it meets
        (``failures``, ``returns``); evidence: the newest events, oldest first.
    """

    host: str
    failures: int
    returns: int
    rules: tuple[str, ...]
    evidence: tuple[Evidence, ...]


def find_lemons(store: Store, *, since: float, min_failures: int, min_returns: int) -> list[Lemon]:
    """Hosts with ≥ ``min_failures`` failures or ≥ ``min_returns`` returns at or after ``since``.

    Args:
        store: the open state store.
        since: the window's start, UNIX s (failures and returns before it are not counted).
        min_failures: the failures rule's threshold (``lemon_failures``).
        min_returns: the returns rule's threshold (``lemon_returns``).

    Returns:
        Lemons, most failures (then returns) first, then by name.

    Raises:
        StoreError: the store cannot be read, or a failure or return read holds a bad field (a time
            out of range, text in a time column: :class:`~robustctl.store.StoreRow`).
    """
    fails = failures_since(store, since)
    returns: dict[str, list[Evidence]] = {}
    for row in store.history(since=since):
        if row.to_state == MachineState.RETURNED.value and row.from_state == MachineState.EVICTED.value:
            returns.setdefault(row.host, []).append(Evidence("returned", row.at, row.reason))
    out: list[Lemon] = []
    for host in sorted(set(fails) | set(returns)):
        f = fails.get(host, [])
        r = returns.get(host, [])
        rules = tuple(
            name
            for name, hit in (("failures", len(f) >= min_failures), ("returns", len(r) >= min_returns))
            if hit
        )
        if not rules:
            continue
        ev = [Evidence("failure", c.at, f"{c.source}: {c.detail}") for c in f] + r
        ev.sort(key=lambda e: e.at)
        out.append(Lemon(host, len(f), len(r), rules, tuple(ev[-MAX_EVIDENCE:])))
    out.sort(key=lambda lm: (-lm.failures, -lm.returns, lm.host))
    return out
