"""Debounce and escalation: which CRITICAL findings of a sweep name a host, and when.

Every check belongs to one class (:func:`check_class`), each with its own rule over the history
(:mod:`robustctl.sweep.history`), configured in the inventory's ``sweep:`` section
(:class:`robustctl.config.SweepSettings`, which gives the defaults and their sources):

* ``hardware`` (``host.xid``, ``nvml.*`` except temperature and throttling, ``host.disk``, and any
  check not listed): a CRITICAL result names the host **at once**. These are high-confidence events:
  an XID the catalog calls critical (79 fell off the bus, 48 double-bit ECC, 94/95 contained and
  uncontained ECC, ...), a GPU missing from NVML, uncorrectable ECC, a row-remapping failure, a
  read-only filesystem (ByteRobust, arXiv 2509.16293 §4.1: high-confidence events evict at once).
* ``network`` (``host.nic``, ``host.ib``): a link can flap and recover; the host is named only when
  the check was CRITICAL at least ``flap_count`` times within ``flap_window_s`` (default twice within
  5 minutes, ByteRobust §4.1).
* ``sustained`` (``nvml.temperature``, ``nvml.throttle``, ``host.clock``, ``host.load``,
  ``host.memory``): a hot GPU, a clock step or a busy host passes; the host is named only when the
  check has been CRITICAL without a break for ``sustained_s`` (default 15 minutes) over at least two
  observations.

WARNING, UNKNOWN and OK results never name a host (a check that could not run says nothing). A
CRITICAL finding that does not (yet) meet its rule is *pending*: the sweep's exit code reports it as
a WARNING, so cron mail and Nagios see it without anything being acted on. The host's verdict in
the history is recorded the same way (:func:`record_sweep`): critical only when named, so a host's
*failures* (lemons, ``robustctl_host_failures_total``) are the times it was named.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from robustctl.exit_codes import ExitCode
from robustctl.models import Status
from robustctl.sweep.history import HOST_CHECK, Observation, check_states, record

if TYPE_CHECKING:
    from robustctl.config import SweepSettings
    from robustctl.store import Store
    from robustctl.sweep.history import CheckState, Recorded

__all__ = [
    "CHECK_CLASSES",
    "CheckClass",
    "Decision",
    "Finding",
    "check_class",
    "decide",
    "host_verdict",
    "record_sweep",
    "sweep_exit_code",
]


class CheckClass(str, enum.Enum):
    """How a check's CRITICAL results escalate (see the module docstring)."""

    HARDWARE = "hardware"
    NETWORK = "network"
    SUSTAINED = "sustained"


CHECK_CLASSES: dict[str, CheckClass] = {
    "host.nic": CheckClass.NETWORK,
    "host.ib": CheckClass.NETWORK,
    "nvml.temperature": CheckClass.SUSTAINED,
    "nvml.throttle": CheckClass.SUSTAINED,
    "host.clock": CheckClass.SUSTAINED,
    "host.load": CheckClass.SUSTAINED,
    "host.memory": CheckClass.SUSTAINED,
}
"""The checks that are not ``hardware`` (the default class of every other check)."""


def check_class(check: str) -> CheckClass:
    """The class of ``check`` (a dotted check name); unlisted checks are ``hardware`` (escalate at once)."""
    return CHECK_CLASSES.get(check, CheckClass.HARDWARE)


@dataclass(frozen=True)
class Finding:
    """One CRITICAL check of a host and what the rule of its class says.

    Attributes:
        check, check_class, detail (the result's line); confirmed: the rule names the host;
        why: the rule's reading, e.g. ``"2 failures within 300 s (rule: 2)"``.
    """

    check: str
    check_class: CheckClass
    detail: str
    confirmed: bool
    why: str


@dataclass(frozen=True)
class Decision:
    """What the policy says of one host: confirmed findings name it, pending ones wait.

    Attributes:
        host; findings: its CRITICAL checks, confirmed first.
    """

    host: str
    findings: tuple[Finding, ...]

    @property
    def confirmed(self) -> tuple[Finding, ...]:
        """Findings whose rule names the host."""
        return tuple(f for f in self.findings if f.confirmed)

    @property
    def named(self) -> bool:
        """Whether the host is named (a confirmed finding)."""
        return any(f.confirmed for f in self.findings)

    def summary(self) -> str:
        """The first confirmed finding in one line, e.g. ``host.xid: XID 79 ... (+1 more)`` ("" if none)."""
        conf = self.confirmed
        if not conf:
            return ""
        more = f" (+{len(conf) - 1} more)" if len(conf) > 1 else ""
        return f"{conf[0].check}: {conf[0].detail}{more}"

    def reason(self) -> str:
        """One line for the store and the scheduler, e.g. ``sweep: host.xid: XID 79 ... (+1 more)``."""
        line = self.summary()
        return f"sweep: {line}" if line else ""


def _rule(cls: CheckClass, st: CheckState, now: float, s: SweepSettings) -> tuple[bool, str]:
    if cls is CheckClass.HARDWARE:
        return True, "high-confidence event: at once"
    if cls is CheckClass.NETWORK:
        n = sum(1 for t in st.recent_bad if t >= now - s.flap_window_s)
        return n >= s.flap_count, f"{n} failure(s) within {s.flap_window_s:g} s (rule: {s.flap_count})"
    held = max(0.0, now - st.since)
    ok = st.streak >= 2 and held >= s.sustained_s
    return ok, f"critical for {held:.0f} s over {st.streak} sweep(s) (rule: {s.sustained_s:g} s, 2 sweeps)"


def decide(
    states: Mapping[tuple[str, str], CheckState], hosts: Iterable[str], now: float, settings: SweepSettings
) -> list[Decision]:
    """The decision for each of ``hosts`` from the current check states (after the sweep was recorded).

    Args:
        states: ``check_state`` rows by (host, check) (:func:`robustctl.sweep.history.check_states`).
        hosts: the hosts to decide on, in the order the decisions are returned.
        now: the time the sweep was recorded at (UNIX s).
        settings: the ``sweep:`` section.

    Returns:
        One :class:`Decision` per host that has a CRITICAL check, in ``hosts`` order.
    """
    by_host: dict[str, list[CheckState]] = {}
    for (host, check), st in states.items():
        # only what this sweep observed: an unreachable host's old findings are not acted on again
        if check != HOST_CHECK and st.status == Status.CRITICAL.value and st.last_seen >= now:
            by_host.setdefault(host, []).append(st)
    out: list[Decision] = []
    for host in hosts:
        found: list[Finding] = []
        for st in sorted(by_host.get(host, ()), key=lambda x: x.check):
            cls = check_class(st.check)
            ok, why = _rule(cls, st, now, settings)
            found.append(Finding(st.check, cls, st.detail, ok, why))
        if found:
            found.sort(key=lambda f: not f.confirmed)
            out.append(Decision(host, tuple(found)))
    return out


def host_verdict(observed: Observation, decision: Decision | None) -> Observation:
    """A host's verdict after the policy, from its :data:`~robustctl.sweep.history.HOST_CHECK`
    observation (the worst of its checks) and its :class:`Decision` (None: no CRITICAL check).

    CRITICAL stays CRITICAL only when the policy names the host (its line: the confirmed finding);
    CRITICAL with every finding pending becomes WARNING (``pending: CHECK: DETAIL [rule reading]``),
    as the sweep's exit code reports it. A CRITICAL verdict with no CRITICAL check observed (none
    today: a host's verdict is the worst of its checks) is kept. Other verdicts are kept as they are.
    """
    if observed.status is not Status.CRITICAL or decision is None:
        return observed
    if decision.named:
        return Observation(observed.host, HOST_CHECK, Status.CRITICAL, decision.summary())
    f = decision.findings[0]
    more = f" (+{len(decision.findings) - 1} more)" if len(decision.findings) > 1 else ""
    return Observation(
        observed.host, HOST_CHECK, Status.WARNING, f"pending: {f.check}: {f.detail} [{f.why}]{more}"
    )


def record_sweep(
    store: Store,
    observations: Iterable[Observation],
    settings: SweepSettings,
    *,
    started_at: float | None = None,
    sweep: bool = True,
    hosts_swept: int | None = None,
) -> tuple[Recorded, list[Decision]]:
    """Record a sweep's observations with each host's verdict taken after the debounce, in one transaction.

    The checks' rows are written first, :func:`decide` reads them, and each host's
    :data:`~robustctl.sweep.history.HOST_CHECK` is recorded as :func:`host_verdict` says: a host's
    *failures* (what :mod:`robustctl.sweep.lemons` counts, ``host_counters.failures``,
    ``robustctl_host_failures_total``) are then the times the policy named it, never a pending flap.

    Args:
        store: the open store (its clock dates the rows).
        observations: per (host, check), as :func:`robustctl.sweep.history.observations_of` gives them.
        settings: the ``sweep:`` section.
        started_at: when the sweep started (UNIX s; None: now), as :func:`robustctl.sweep.history.record`.
        sweep: also write a ``sweeps`` row, as :func:`robustctl.sweep.history.record`.
        hosts_swept: the host count of the ``sweeps`` row (None: the hosts observed), as
            :func:`robustctl.sweep.history.record`.

    Returns:
        (what was recorded, one :class:`Decision` per observed host with a CRITICAL check).

    Raises:
        StoreError: the store cannot be read or written.
    """
    decisions: list[Decision] = []

    def verdicts(at: float, hosts: list[Observation]) -> list[Observation]:
        names = [o.host for o in hosts]
        decisions[:] = decide(check_states(store, names), names, at, settings)
        by = {d.host: d for d in decisions}
        return [host_verdict(o, by.get(o.host)) for o in hosts]

    rec = record(
        store,
        observations,
        source="sweep",
        started_at=started_at,
        sweep=sweep,
        hosts_swept=hosts_swept,
        host_verdict=verdicts,
    )
    return rec, decisions


def sweep_exit_code(*, named: bool, unchecked: bool, pending: bool) -> ExitCode:
    """The exit code of a sweep or a node's health check, from what it found (the design's table).

    Args:
        named: the policy names a host (a confirmed finding).
        unchecked: a host could not be checked (or, for ``sweep --local``, Slurm could not be read or
            changed).
        pending: a CRITICAL finding waits on its rule, or a check warns.

    Returns:
        2 (CRITICAL) when ``named``, else 3 (UNKNOWN) when ``unchecked``, else 1 (WARNING) when
        ``pending``, else 0: a confirmed finding outranks a host that could not be checked.
    """
    if named:
        return ExitCode.CRITICAL
    if unchecked:
        return ExitCode.UNKNOWN
    if pending:
        return ExitCode.WARNING
    return ExitCode.OK
