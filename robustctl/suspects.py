"""Record the suspects a diagnosis names in the state store (the only writer of ``suspect``).

``robustctl diagnose`` and live ``robustctl stacks`` (hang mode) call :func:`record_in_store` after
their run; the evict and standby commands read the result: the circuit breaker
(:mod:`robustctl.actions.rails`) counts suspect hosts as looking bad, and ``standby activate`` may
replace a suspect host.

Rules (:func:`record_suspects`):

* a named host becomes :attr:`~robustctl.store.MachineState.SUSPECT` with a one-line reason taken
  from the report (``diagnose L0: XID 79 ...``, ``stacks: rank 5 hung in compute (pp group 1)``);
  a host already suspect is left as it is (no new history row);
* an :attr:`~robustctl.store.MachineState.EVICTED` host stays evicted and a
  :attr:`~robustctl.store.MachineState.STANDBY` host stays a standby (its readiness is ``standby
  check``'s business): both are reported as skipped, with their state;
* a *cleared* host (diagnose only: verified healthy at every level up to the requested one, see
  :func:`diagnose_findings`) that is suspect goes back to ``active``; any other cleared host is left
  alone. Stacks never clears: a healthy stack says nothing of the hardware.

The check and the write of each host are one store transaction, so a concurrent ``evict`` is never
overwritten.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from robustctl.models import Outcome, Status
from robustctl.store import MachineState, Store, StoreError, default_path

if TYPE_CHECKING:
    from robustctl.models import HostReport, RunReport
    from robustctl.stacks.result import StacksReport

__all__ = [
    "PROTECTED_STATES",
    "DiagnoseFindings",
    "RecordResult",
    "SkippedHost",
    "diagnose_findings",
    "record_in_store",
    "record_suspects",
    "stacks_findings",
    "verified_healthy",
]

PROTECTED_STATES = frozenset({MachineState.EVICTED, MachineState.STANDBY})
"""States a recorded suspect never overwrites."""

MAX_REASON = 200
"""Longest reason recorded (characters); longer ones are cut with an ellipsis."""

_MARKABLE = frozenset(MachineState) - PROTECTED_STATES


@dataclass(frozen=True)
class SkippedHost:
    """A named host left unchanged because of its state (``evicted`` or ``standby``)."""

    host: str
    state: MachineState


@dataclass(frozen=True)
class RecordResult:
    """What :func:`record_suspects` did (the ``recorded`` object of ``diagnose``/``stacks --json``).

    Attributes:
        source: the command that named the hosts (``"diagnose"``, ``"stacks"``).
        state: the store file.
        marked: hosts newly recorded suspect (one history row each), in the order named.
        unchanged: named hosts that were already suspect (nothing written).
        cleared: suspect hosts set back to active.
        skipped: named hosts left alone because they are evicted or standby.
        error: why nothing was recorded (the store could not be opened or written), else None.
    """

    source: str
    state: str = ""
    marked: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    cleared: tuple[str, ...] = ()
    skipped: tuple[SkippedHost, ...] = ()
    error: str | None = None

    @property
    def suspects(self) -> tuple[str, ...]:
        """Every named host that is suspect in the store now (``marked`` then ``unchanged``)."""
        return self.marked + self.unchanged

    def summary(self) -> str:
        """One line, e.g. ``recorded 2 suspects (node01, node03) in /s/state.db; cleared 1 (node04)``."""
        if self.error is not None:
            return f"robustctl: warning: suspects not recorded: {self.error}"
        sus = self.suspects
        if not (sus or self.cleared or self.skipped):
            return "no suspects: no machine marked suspect in the state store"
        line = f"recorded {len(sus)} suspect{'' if len(sus) == 1 else 's'}"
        if sus:
            line += f" ({_names(sus)})"
        line += f" in {self.state}"
        if self.unchanged:
            line += f" ({len(self.unchanged)} already suspect)"
        if self.cleared:
            line += f"; cleared {len(self.cleared)} ({_names(self.cleared)})"
        if self.skipped:
            line += "; left alone: " + _names([f"{s.host} ({s.state.value})" for s in self.skipped])
        return line


def record_suspects(
    store: Store,
    named: Mapping[str, str],
    *,
    cleared: Iterable[str] = (),
    source: str,
    clear_reason: str | None = None,
    inventory_states: Mapping[str, MachineState] | None = None,
) -> RecordResult:
    """Mark ``named`` hosts suspect and set ``cleared`` suspects back to active (see the module rules).

    Args:
        store: an open, writable store.
        named: host → reason, the reason as it should be recorded, e.g. ``{"node03": "diagnose L0:
            XID 79 on 0000:3b:00.0"}`` (whitespace collapsed to one line, cut at :data:`MAX_REASON`;
            an empty reason becomes ``"<source>: named suspect"``).
        cleared: hosts verified healthy; only those recorded suspect change (to active).
        source: the naming command, e.g. ``"diagnose"``, ``"stacks"``.
        clear_reason: the reason recorded for cleared hosts (default ``"<source>: verified healthy"``).
        inventory_states: the inventory state of hosts the store has no row for (a host missing from
            both is active), so that an inventory standby or evicted host is never marked.

    Returns:
        A :class:`RecordResult` (marked, unchanged, cleared, skipped; ``error`` None).

    Raises:
        ValueError: a host is both named and cleared.
        StoreError: the store cannot be read or written (hosts recorded before the failure stay
            recorded: each host is its own transaction).
    """
    clear_list = list(dict.fromkeys(cleared))
    both = sorted(set(named) & set(clear_list))
    if both:
        raise ValueError(f"host {both[0]!r} is both named suspect and cleared")
    base = inventory_states or {}
    marked: list[str] = []
    unchanged: list[str] = []
    skipped: list[SkippedHost] = []
    for host, reason in named.items():
        line = _one_line(reason) or f"{source}: named suspect"
        before, changed = store.transition(
            host,
            MachineState.SUSPECT,
            line,
            allowed_from=_MARKABLE,
            absent=base.get(host, MachineState.ACTIVE),
        )
        if changed:
            marked.append(host)
        elif before is MachineState.SUSPECT:
            unchanged.append(host)
        else:
            skipped.append(SkippedHost(host, before))
    done: list[str] = []
    if clear_list:
        suspect_now = {m.host for m in store.machines([MachineState.SUSPECT])}
        why = _one_line(clear_reason or "") or f"{source}: verified healthy"
        for host in clear_list:
            if host not in suspect_now:
                continue
            _, changed = store.transition(host, MachineState.ACTIVE, why, allowed_from=[MachineState.SUSPECT])
            if changed:
                done.append(host)
    return RecordResult(source, str(store.path), tuple(marked), tuple(unchanged), tuple(done), tuple(skipped))


def record_in_store(
    path: Path | None,
    named: Mapping[str, str],
    *,
    cleared: Iterable[str] = (),
    source: str,
    clear_reason: str | None = None,
    inventory_states: Mapping[str, MachineState] | None = None,
    clock: Callable[[], float] = time.time,
) -> RecordResult:
    """Open the store at ``path`` (``None``: :func:`robustctl.store.default_path`), :func:`record_suspects`, close.

    With nothing named, and nothing cleared or no store file yet (so no host can be suspect), the
    store is not opened (nor created) and the result is empty.

    Args:
        path: the store file; None: :func:`robustctl.store.default_path`.
        named: host → reason to record suspect (as :func:`record_suspects`).
        cleared: hosts verified healthy; only those recorded suspect change (to active).
        source: the naming command, e.g. ``"diagnose"``, ``"stacks"``.
        clear_reason: the reason recorded for cleared hosts (None: ``"<source>: verified healthy"``).
        inventory_states: the inventory state of hosts the store has no row for (as
            :func:`record_suspects`).
        clock: the store's clock, UNIX seconds (a fake in tests).

    Returns:
        A :class:`RecordResult` (marked, unchanged, cleared, skipped), with ``state`` the store file.

    Raises:
        StoreError: the store cannot be opened, read or written (the message names the file).
    """
    p = path if path is not None else default_path()
    clear_list = list(cleared)
    if not named and (not clear_list or not p.exists()):
        return RecordResult(source, str(p))  # nothing to write: the store is not even created
    try:
        store = Store.open(p, clock=clock)
    except OSError as exc:  # e.g. a directory on the way that cannot be searched
        raise StoreError(f"{p}: cannot open the state store ({exc.strerror or exc})") from None
    with store:
        return record_suspects(
            store,
            named,
            cleared=clear_list,
            source=source,
            clear_reason=clear_reason,
            inventory_states=inventory_states,
        )


# --- what a report names --------------------------------------------------------------------------


@dataclass(frozen=True)
class DiagnoseFindings:
    """What a diagnose report says about the store's states.

    Attributes:
        named: CRITICAL host → reason (``diagnose L<level>: <first critical check's summary>``).
        cleared: hosts verified healthy at every level up to ``max_level`` (:func:`verified_healthy`).
        clear_reason: ``diagnose: healthy at levels L0–L<max_level>`` (``at level L0`` for 0).
    """

    named: Mapping[str, str]
    cleared: tuple[str, ...]
    clear_reason: str


def verified_healthy(host: HostReport, report: RunReport, max_level: int) -> bool:
    """Whether ``host`` was checked OK at every level 0..``max_level`` of ``report``.

    True only when the host's status and outcome are OK, every one of those levels ran, and at each
    the host has at least one OK check and nothing but OK or not-applicable checks. A run that
    stopped early (another host's suspects, the deadline), an unreachable or unchecked host, a
    warning, or a level with nothing applicable (inter-host all-reduce of a lone host) is not verified.
    """
    if host.status is not Status.OK or host.outcome is not Outcome.OK:
        return False
    ran = {lv.level for lv in report.levels if lv.ran}
    for level in range(max_level + 1):
        if level not in ran:
            return False
        at = [c.status for c in host.checks if c.level == level]
        if Status.OK not in at or any(s not in (Status.OK, Status.NOT_APPLICABLE) for s in at):
            return False
    return True


def diagnose_findings(report: RunReport, max_level: int) -> DiagnoseFindings:
    """The hosts ``report`` names (CRITICAL) and those it verified healthy up to ``max_level`` (0-4).

    UNKNOWN (unreachable, timed out, probe failed) and WARNING hosts are in neither.
    """
    named: dict[str, str] = {}
    for h in report.hosts:
        if h.status is not Status.CRITICAL:
            continue
        crit = [c for c in h.checks if c.status is Status.CRITICAL]
        if not crit:
            named[h.host] = f"diagnose: {h.error or 'critical'}"
            continue
        first = crit[0]
        more = f" (+{len(crit) - 1} more)" if len(crit) > 1 else ""
        named[h.host] = f"diagnose L{first.level}: {first.summary}{more}"
    cleared = tuple(h.host for h in report.hosts if verified_healthy(h, report, max_level))
    levels = "level L0" if max_level == 0 else f"levels L0–L{max_level}"
    return DiagnoseFindings(named, cleared, f"diagnose: healthy at {levels}")


def stacks_findings(report: StacksReport) -> dict[str, str]:
    """Suspect host → reason of a stacks report, e.g. ``stacks: rank 5 hung in compute (pp group 1)``.

    Only ``report.suspect_hosts`` are named (empty when the report is ambiguous, OK or unknown).
    """
    by_host: dict[str, dict[str, set[int]]] = {}
    for s in report.suspects:
        if s.host is None:
            continue
        cats = by_host.setdefault(s.host, {})
        cats.setdefault(s.category.value, set())
        if s.rank is not None:
            cats[s.category.value].add(s.rank)
    group = ""
    if report.group is not None and report.group.kind not in ("rank", "job"):
        group = f" ({report.group.kind} group {report.group.index})"
    out: dict[str, str] = {}
    for host in report.suspect_hosts:
        parts = []
        for cat, ranks in by_host.get(host, {}).items():
            who = _ranks(ranks)
            parts.append(f"{who} could not be read" if cat == "unreadable" else f"{who} hung in {cat}")
        out[host] = f"stacks: {'; '.join(parts) or 'outlier stacks'}{group}"
    return out


def _ranks(ranks: set[int]) -> str:
    from robustctl.inventory.hostrange import compact_ranges

    if not ranks:
        return "a process"
    return f"rank{'' if len(ranks) == 1 else 's'} {compact_ranges(ranks)}"


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_REASON else line[: MAX_REASON - 1] + "…"


def _names(items: Iterable[str], limit: int = 8) -> str:
    xs = list(items)
    shown = ", ".join(xs[:limit])
    return shown + (f", +{len(xs) - limit} more" if len(xs) > limit else "")
