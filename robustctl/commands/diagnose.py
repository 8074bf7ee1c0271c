"""``robustctl diagnose`` as a library call: :func:`run_diagnose` and, for ``--dry-run``, :func:`plan_diagnose`.

:func:`diagnose_request` builds the request from command-line values (the layering of
:mod:`robustctl.commands.options`); code that already holds an inventory builds
:class:`DiagnoseRequest` directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustctl.errors import UsageError
from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION, Outcome, RunReport, to_jsonable

if TYPE_CHECKING:
    from collections.abc import Mapping

    from robustctl.config import DiagnoseSettings
    from robustctl.diagnose import DiagnoseSpec, ProgressSink
    from robustctl.inventory import Host, Inventory
    from robustctl.suspects import RecordResult
    from robustctl.transport.pool import TransportPool

__all__ = [
    "DiagnosePlan",
    "DiagnoseRequest",
    "DiagnoseResult",
    "diagnose_request",
    "plan_diagnose",
    "run_diagnose",
]


@dataclass(frozen=True)
class DiagnoseRequest:
    """Everything a diagnose run needs, after layering.

    Attributes:
        inventory: the resolved inventory (its host states protect standby/evicted hosts from being
            recorded suspect). hosts: the targets, in inventory order (non-empty).
        settings: fan-out and level settings (inventory < environment < flags).
        max_level: highest level (0-4; L4 only when asked). all_levels: do not stop at the first level naming suspects.
        accept_new_host_keys: record unknown SSH host keys (changed keys are still refused).
        record: record suspects (and clear verified ones) in the state store.
        state: the state store file (None: ``$ROBUSTCTL_STATE`` or the XDG default).
    """

    inventory: Inventory
    hosts: tuple[Host, ...]
    settings: DiagnoseSettings
    max_level: int = 3
    all_levels: bool = False
    accept_new_host_keys: bool = False
    record: bool = True
    state: Path | None = None


@dataclass(frozen=True)
class DiagnoseResult:
    """A diagnose run: the engine's report plus what was recorded in the state store.

    Attributes:
        report: the :class:`~robustctl.models.RunReport`.
        recorded: what was recorded (:class:`~robustctl.suspects.RecordResult`, ``error`` set when
            the store could not be written); None when recording was not asked for.
        kind: ``"diagnose"``. schema_version: :data:`~robustctl.models.SCHEMA_VERSION`.
    """

    report: RunReport
    recorded: RecordResult | None = None
    kind: str = "diagnose"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """The report's exit code: CRITICAL 2 > UNKNOWN 3 > WARNING 1 > OK 0 (the store never changes it)."""
        return self.report.exit_code

    @property
    def unreachable(self) -> tuple[str, ...]:
        """The hosts no connection reached (refused, no route, authentication): a subset of
        ``unknown``. A job's recovery cannot restart on them (the ``job-failed`` playbook evicts
        them: a lost host), though no check named them."""
        return tuple(h.host for h in self.report.hosts if h.outcome is Outcome.UNREACHABLE)

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document: the report's fields at the top level plus ``unreachable`` and
        ``recorded`` (null when nothing was asked to be recorded)."""
        doc: dict[str, Any] = to_jsonable(self.report)
        doc["unreachable"] = list(self.unreachable)
        doc["recorded"] = to_jsonable(self.recorded)
        return doc


@dataclass(frozen=True)
class DiagnosePlan:
    """What a diagnose run would do (``--dry-run``): the engine's plan, connecting to nothing.

    Attributes:
        plan: :func:`robustctl.diagnose.plan_levels`'s document (levels, limits, each host's command).
        kind: ``"diagnose-plan"``. schema_version: :data:`~robustctl.models.SCHEMA_VERSION`.
    """

    plan: Mapping[str, Any]
    kind: str = "diagnose-plan"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """Always OK: a plan is not a verdict."""
        return ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        """The ``--dry-run --json`` document (the plan as the engine built it)."""
        doc: dict[str, Any] = to_jsonable(self.plan)
        doc.setdefault("kind", self.kind)
        doc.setdefault("schema_version", self.schema_version)
        doc.setdefault("exit_code", int(self.exit_code))
        return doc


def diagnose_request(
    *,
    inventory: Path | None = None,
    hosts: str | None = None,
    level: int = 3,
    all_levels: bool = False,
    concurrency: int | None = None,
    host_timeout_s: float | None = None,
    deadline_s: float | None = None,
    burn_seconds: float | None = None,
    accept_new_host_keys: bool = False,
    state: Path | None = None,
    record: bool = True,
    environ: Mapping[str, str] | None = None,
) -> DiagnoseRequest:
    """A :class:`DiagnoseRequest` from command-line values (``None``: not given), layered by
    :mod:`robustctl.commands.options`.

    Args:
        inventory: the inventory path (None: ``$ROBUSTCTL_INVENTORY`` or the embedded default).
        hosts: a host range (None: every active host of the inventory).
        level: the highest level to run (0 host checks … 4 bitwise alignment).
        all_levels: run every level up to ``level`` even after one names suspects.
        concurrency: hosts checked at once (None: the inventory's, else the default).
        host_timeout_s: seconds per host and probe (None: the inventory's, else the default).
        deadline_s: seconds for the whole run (None: the inventory's, else the default).
        burn_seconds: seconds of the L1 GPU burn (None: the inventory's, else the default).
        accept_new_host_keys: add unknown SSH host keys instead of refusing the host.
        state: the state store path (None: the default).
        record: record the suspects in the store.
        environ: the environment that layers over the inventory (None: ``os.environ``).

    Returns:
        The request :func:`run_diagnose` takes, with the inventory loaded and the settings layered.

    Raises:
        ConfigError / InventoryError: the inventory or an environment variable is invalid.
        UsageError: ``hosts`` is a malformed range or names a host the inventory does not have; no
            active host is selected.
    """
    from robustctl.commands import options

    inv = options.inventory(inventory, environ)
    targets = options.select_hosts(inv, hosts)  # --hosts is a flag: a bad value exits 64
    if not targets:
        raise UsageError(f"no active hosts selected from {inv.source}" + (f" by {hosts!r}" if hosts else ""))
    flags = options.DiagnoseFlags(concurrency, host_timeout_s, deadline_s, burn_seconds)
    return DiagnoseRequest(
        inventory=inv,
        hosts=tuple(targets),
        settings=options.diagnose_settings(inv.diagnose, flags, environ),
        max_level=level,
        all_levels=all_levels,
        accept_new_host_keys=accept_new_host_keys,
        record=record,
        state=state,
    )


def _spec(request: DiagnoseRequest) -> DiagnoseSpec:
    from robustctl.diagnose import DiagnoseSpec

    return DiagnoseSpec(
        hosts=request.hosts,
        settings=request.settings,
        thresholds=request.inventory.thresholds,
        max_level=request.max_level,
        all_levels=request.all_levels,
    )


def plan_diagnose(request: DiagnoseRequest) -> DiagnosePlan:
    """The hosts, levels and per-host commands :func:`run_diagnose` would run; connects to nothing."""
    from robustctl.diagnose import plan_levels

    return DiagnosePlan(plan_levels(_spec(request)))


def run_diagnose(
    request: DiagnoseRequest,
    *,
    pool: TransportPool | None = None,
    progress: ProgressSink | None = None,
) -> DiagnoseResult:
    """Run the diagnose levels on ``request.hosts``, then record the suspects (unless ``record`` is off).

    Recording (:func:`robustctl.suspects.diagnose_findings`): CRITICAL hosts become suspect, suspect
    hosts verified healthy at every level up to ``max_level`` go back to active; evicted and standby
    hosts never change. The store is best effort: an error lands in ``recorded.error``.

    Args:
        request: the hosts, the levels and the settings.
        pool: the transports to use (closed by the caller); None: a pool opened and closed here.
        progress: receives per-level progress (see :class:`robustctl.diagnose.ProgressSink`).

    Returns:
        The run's report (each level's per-host results and the suspects) and what was recorded.

    Raises:
        RobustctlError: as :func:`robustctl.diagnose.run_levels` (hosts that cannot be checked are
            UNKNOWN entries of the report, not errors).
    """
    from robustctl.diagnose import run_levels

    own = pool is None
    if pool is None:
        from robustctl.transport.pool import TransportPool

        pool = TransportPool(
            accept_new_host_keys=request.accept_new_host_keys, scheduler=request.inventory.scheduler
        )
    try:
        report = run_levels(_spec(request), pool, progress=progress)
    finally:
        if own:
            pool.close()
    if not request.record:
        return DiagnoseResult(report)
    from robustctl.sweep.history import record_report

    record_report(request.state, report, source="diagnose")  # best effort; record_findings reports the store
    from robustctl.commands.record import record_findings
    from robustctl.suspects import diagnose_findings

    found = diagnose_findings(report, request.max_level)
    recorded = record_findings(
        request.state,
        found.named,
        cleared=found.cleared,
        source="diagnose",
        clear_reason=found.clear_reason,
        inventory=request.inventory,
    )
    return DiagnoseResult(report, recorded)
