"""``robustctl sweep`` (and ``sweep --local``) as library calls; ``history`` and ``lemons`` are in
:mod:`robustctl.commands.history`.

:func:`run_sweep` runs the quick diagnose level (L0: host and NVML checks, no GPU load, safe on
hosts running a job) on every host in service (active, standby, suspect, returned; never evicted),
deeper levels up to ``level`` only on hosts no job holds (unless ``include_busy``), records every
host's checks in the history (:mod:`robustctl.sweep.history`), applies the debounce policy
(:mod:`robustctl.sweep.policy`) and, with ``act``, records the confirmed hosts suspect or drains them
through ``robustctl evict`` (rails and audit apply). One sweep at a time (:mod:`robustctl.sweep.lock`).
The orchestration is :func:`robustctl.sweep.run.sweep_fleet`; this module turns the request into its
:class:`~robustctl.sweep.run.SweepSpec`, hands it ``evict`` as the drain, adds each job's ETTR and
returns the :class:`SweepResult`.

Exit code of a sweep: 2 when the policy names a host (a confirmed finding), else 3 when a host could
not be checked, else 1 when a finding is pending (CRITICAL but debounced) or a check warns, else 0.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustctl.errors import ConfigError, UsageError
from robustctl.exit_codes import ExitCode
from robustctl.models import SCHEMA_VERSION, Status
from robustctl.sweep.healthcheck import local_request
from robustctl.sweep.policy import sweep_exit_code
from robustctl.sweep.run import (
    RECENT_CHANGES,
    SWEPT_STATES,
    TRANSPORTS,
    SweepHost,
    SweepOutcome,
    with_transport,
)

if TYPE_CHECKING:
    from robustctl.commands.ettr import JobEttr
    from robustctl.diagnose import ProgressSink
    from robustctl.inventory import Inventory
    from robustctl.store import Store
    from robustctl.sweep.healthcheck import LocalCheckRequest, LocalCheckResult
    from robustctl.sweep.run import Drainer
    from robustctl.transport.pool import TransportPool

__all__ = [
    "RECENT_CHANGES",
    "SWEPT_STATES",
    "TRANSPORTS",
    "SweepHost",
    "SweepRequest",
    "SweepResult",
    "check_output_path",
    "local_request",
    "run_local",
    "run_sweep",
    "sweep_request",
    "with_transport",
]


@dataclass(frozen=True)
class SweepRequest:
    """What a sweep does.

    Attributes:
        inventory: the resolved inventory. state: the store file (None: ``$ROBUSTCTL_STATE``/XDG).
        hosts: a host range restricting the sweep (None: every host in service).
        level: highest diagnose level (0: quick checks only). include_busy: run levels above 0 on
            hosts a job holds too. act: apply the policy (``sweep.act``: suspect or drain).
        textfile / html: where the caller writes the Prometheus textfile / HTML report
            (:func:`robustctl.report.sweep.write_sweep_files`, atomically; checked writable here
            before the sweep runs). :func:`run_sweep` itself writes no artefact.
        accept_new_host_keys: as diagnose. (``--transport srun`` is applied to ``inventory``'s hosts by
        :func:`sweep_request`.)
    """

    inventory: Inventory
    state: Path | None = None
    hosts: str | None = None
    level: int = 0
    include_busy: bool = False
    act: bool = False
    textfile: Path | None = None
    html: Path | None = None
    accept_new_host_keys: bool = False


@dataclass(frozen=True)
class SweepResult(SweepOutcome):
    """A sweep's outcome (the ``--json`` document): the domain's :class:`SweepOutcome` and each job's ETTR.

    Attributes:
        started_at / finished_at (UNIX s, the store's clock), duration_s; hosts: one per swept host;
        skipped: hosts not swept (evicted); decisions: the policy's reading of each host with a
        CRITICAL check; acted: what ``--act`` did (None without it), ``{"suspect": [...], "drained":
        [...], "skipped": [...], "error": str|None}``; lemons: lemons now (the ``sweep:`` window);
        recent: each host's newest state changes; counters: each host's counters; warnings: one line each (clock went backwards,
        a job's ETTR ledger that could not be read); state: the store file; report: the diagnose engine's report;
        ettr: the ETTR of each job of the inventory that has ledger data (:func:`_job_ettrs`, best effort).
    """

    ettr: tuple[JobEttr, ...] = ()
    kind: str = "sweep"
    schema_version: int = SCHEMA_VERSION

    @property
    def duration_s(self) -> float:
        """Wall seconds of the sweep."""
        return max(0.0, self.finished_at - self.started_at)

    @property
    def exit_code(self) -> ExitCode:
        """2 a host named, 3 a host not checked, 1 pending or warning, 0 healthy."""
        return sweep_exit_code(
            named=any(h.named for h in self.hosts),
            unchecked=any(h.status is Status.UNKNOWN for h in self.hosts),
            pending=any(h.pending or h.status is Status.WARNING for h in self.hosts),
        )


def check_output_path(path: Path, flag: str) -> None:
    """Refuse an output file whose directory is missing or not writable, or that is not a regular file.

    Args:
        path: the output file (it need not exist yet).
        flag: the option that named it (``--textfile``, ``--html``), for the message.

    Raises:
        ConfigError: one line naming ``flag`` and the path (exit 78), before anything runs.
    """
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(f"{flag} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: directory {parent} is not writable")
    if path.exists() and not path.is_file():
        raise ConfigError(f"{flag} {path}: not a regular file")


def sweep_request(
    *,
    inventory: Path | None = None,
    state: Path | None = None,
    hosts: str | None = None,
    level: int = 0,
    include_busy: bool = False,
    act: bool = False,
    textfile: Path | None = None,
    html: Path | None = None,
    accept_new_host_keys: bool = False,
    transport: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> SweepRequest:
    """A :class:`SweepRequest` from command-line values; the output paths are checked here.

    ``transport`` (``--transport``): reach every host through it (``srun``: each host is the Slurm
    node of its name, all in one step; ``ssh``/``local`` as the inventory's ``transport:``).

    Args:
        inventory: the ``--inventory`` file (None: ``$ROBUSTCTL_INVENTORY``, else the embedded default).
        state: the store file (None: ``$ROBUSTCTL_STATE``, else the XDG default; resolved here).
        hosts: a host range restricting the sweep (None: every host in service).
        level: the highest diagnose level, 0-3 (0: quick checks only).
        include_busy: run levels above 0 on hosts a job holds too.
        act: apply the policy (``sweep.act``: suspect or drain).
        textfile: where the caller writes the Prometheus textfile (None: nowhere; checked writable).
        html: where the caller writes the HTML report (None: nowhere; checked writable).
        accept_new_host_keys: record unknown host keys in known_hosts, as diagnose.
        transport: ``--transport`` (None: each host's own transport).
        environ: the environment read (None: ``os.environ``).

    Returns:
        The request, layered.

    Raises:
        ConfigError / InventoryError: bad inventory; an output directory missing or not writable.
        UsageError: a bad ``hosts`` range or level.
    """
    from robustctl.commands import options

    if not 0 <= level <= 3:
        raise UsageError(f"bad --level {level}: a sweep runs levels 0-3")
    inv = options.inventory(inventory, environ)
    if transport is not None:
        inv = with_transport(inv, transport)
    if hosts is not None:
        options.select_hosts(inv, hosts)
    for path, flag in ((textfile, "--textfile"), (html, "--html")):
        if path is not None:
            check_output_path(path, flag)
    return SweepRequest(
        inventory=inv,
        state=options.state_path(state, environ),
        hosts=hosts,
        level=level,
        include_busy=include_busy,
        act=act,
        textfile=textfile,
        html=html,
        accept_new_host_keys=accept_new_host_keys,
    )


def run_sweep(
    request: SweepRequest,
    *,
    pool: TransportPool | None = None,
    progress: ProgressSink | None = None,
    clock: Callable[[], float] = time.time,
) -> SweepResult:
    """Sweep the fleet once (see the module docstring); the caller writes the asked outputs
    (:func:`robustctl.report.sweep.write_sweep_files`).

    Args:
        request: the sweep.
        pool: the transports (closed by the caller); None: one opened and closed here.
        progress: the diagnose engine's progress sink.
        clock: UNIX seconds for the history (tests pass a fake clock).

    Returns:
        The :class:`SweepResult` (its ``exit_code``: see the module docstring).

    Raises:
        SweepBusy: another sweep runs (exit 3).
        StoreError: the store cannot be opened or written (exit 78).
        UsageError: ``request.hosts`` is a bad host range (exit 64).
    """
    from robustctl.commands.options import select_hosts, state_path
    from robustctl.sweep.run import SweepSpec, sweep_fleet, sweep_session

    inv = request.inventory
    spec = SweepSpec(
        inventory=inv,
        state=state_path(request.state),
        hosts=tuple(select_hosts(inv, request.hosts) if request.hosts else inv.hosts),
        level=request.level,
        include_busy=request.include_busy,
        act=request.act,
        accept_new_host_keys=request.accept_new_host_keys,
    )
    with sweep_session(spec.state, clock) as store:
        outcome = sweep_fleet(
            spec, store, pool=pool, progress=progress, clock=clock, drain=_evict_drainer(request)
        )
        warnings = list(outcome.warnings)
        ettrs = _job_ettrs(inv, store, outcome.finished_at, warnings)
    return _result(outcome, ettrs, warnings)


def _result(outcome: SweepOutcome, ettrs: tuple[JobEttr, ...], warnings: list[str]) -> SweepResult:
    """The command's result: ``outcome`` with the jobs' ETTR and every warning line."""
    fields = {f.name: getattr(outcome, f.name) for f in dataclasses.fields(outcome)}
    return SweepResult(**{**fields, "warnings": tuple(warnings)}, ettr=ettrs)


def _evict_drainer(request: SweepRequest) -> Drainer:
    """The sweep's drain: ``robustctl evict`` of the hosts with the reason, confirmed (the sweep's
    ``--act`` is the operator's confirmation), through its rails and audit log.

    Args:
        request: the sweep (its inventory and store are the eviction's).

    Returns:
        The drain: ``drain(hosts, reason)`` evicts ``hosts`` and returns the eviction's exit code.
    """

    def drain(hosts: Sequence[str], reason: str) -> int:
        from robustctl.commands.actions import always
        from robustctl.commands.evict import EvictRequest, run_evict
        from robustctl.inventory.hostrange import collapse

        source = request.inventory.source
        res = run_evict(
            EvictRequest(
                inventory=None if source.startswith("<") else Path(source),
                state=request.state,
                hosts=collapse(list(hosts)),
                reason=reason,
            ),
            confirm=always,
        )
        return int(res.exit_code)

    return drain


def _job_ettrs(inventory: Inventory, store: Store, now: float, warnings: list[str]) -> tuple[JobEttr, ...]:
    """The cumulative ETTR ledger of each job of the inventory, for the textfile and the page's
    timeline (issue 22, item 4): :func:`robustctl.commands.ettr.ettr_of_store` over all the store
    holds for the job, summed up and bounded by :meth:`~robustctl.commands.ettr.EttrResult.summary`.
    Best effort: a job without data is left out; a store or ledger error is one warning line, never a
    failed sweep.

    Args:
        inventory: the inventory whose jobs are read.
        store: the open store.
        now: the ledgers' end, UNIX s (the sweep's finish).
        warnings: the sweep's warnings; one line is appended for each job whose ledger could not be read.

    Returns:
        Each job's ETTR summary, job name order, the jobs without data left out.
    """
    from robustctl.commands.ettr import ettr_of_store

    out: list[JobEttr] = []
    for job in sorted(inventory.jobs):
        try:
            summary = ettr_of_store(store, job, now=now).summary()
        except ConfigError as exc:  # StoreError, LedgerInputError, WatchStoreInputError: all exit 78
            warnings.append(f"robustctl: warning: job {job!r}: no ETTR in the textfile: {exc}")
            continue
        if summary is not None:
            out.append(summary)
    return tuple(out)


# --- this node (sweep --local [--slurm]) ----------------------------------------------------------


def run_local(request: LocalCheckRequest, **kwargs: Any) -> LocalCheckResult:
    """``robustctl sweep --local [--slurm]``: :func:`robustctl.sweep.healthcheck.run_local_check`."""
    from robustctl.sweep.healthcheck import run_local_check

    return run_local_check(request, **kwargs)
