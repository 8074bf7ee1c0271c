"""``robustctl stacks`` as a library call: :func:`run_stacks` (hang snapshot, or fail-slow voting).

:func:`stacks_request` builds the request from command-line values; code that holds an inventory
builds :class:`StacksRequest` directly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustctl.models import SCHEMA_VERSION, to_jsonable

if TYPE_CHECKING:
    from robustctl.exit_codes import ExitCode
    from robustctl.inventory import Host, Inventory, Job
    from robustctl.stacks.collect import CollectSettings, StackCollection
    from robustctl.stacks.live import LiveFailSlow, LiveStacks
    from robustctl.suspects import RecordResult
    from robustctl.transport.pool import TransportPool

__all__ = [
    "SampleProgress",
    "StacksFailSlowResult",
    "StacksRequest",
    "StacksResult",
    "run_stacks",
    "stacks_request",
]

SampleProgress = Callable[[int, "StackCollection"], None]
"""Called after each collection with its 0-based index (sample in hang mode, round in fail-slow)."""


@dataclass(frozen=True)
class StacksRequest:
    """Everything a live stacks run needs, after layering.

    Attributes:
        inventory: the resolved inventory. job: the job whose ranks are dumped (its hosts as the
            inventory lists them; :func:`run_stacks` uses the job's current hosts, after standby swaps).
        hosts: only these hosts (those of them in the job when it runs; None: all of the job's).
        settings: collection settings (fan-out knobs from the layered ``diagnose:`` settings, py-spy
            mode, per-host probe budget).
        slow: fail-slow voting over ``rounds`` rounds ``interval_s`` apart, instead of a hang snapshot.
        samples / sample_interval_s: hang mode: collections taken and seconds between them.
        record: record the named suspect hosts in the state store (hang mode only; never clears).
        state: the state store file (None: ``$ROBUSTCTL_STATE`` or the XDG default).
    """

    inventory: Inventory
    job: Job
    settings: CollectSettings
    hosts: tuple[Host, ...] | None = None
    slow: bool = False
    rounds: int = 5
    interval_s: float = 10.0
    samples: int = 2
    sample_interval_s: float = 1.0
    record: bool = True
    state: Path | None = None


@dataclass(frozen=True)
class StacksResult:
    """A live hang analysis plus what was recorded in the state store.

    Attributes:
        live: the report on the last sample and every collection.
        recorded: what was recorded (None when recording was not asked for).
        kind: ``"stacks"``. schema_version: :data:`~robustctl.models.SCHEMA_VERSION`.
    """

    live: LiveStacks
    recorded: RecordResult | None = None
    kind: str = "stacks"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """2 suspects, 1 ambiguous, 3 nothing could be read, 0 OK (the store never changes it)."""
        return self.live.exit_code

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document: the StacksReport fields, ``collection`` and ``recorded``."""
        doc = self.live.to_json()
        doc["recorded"] = to_jsonable(self.recorded)
        return doc


@dataclass(frozen=True)
class StacksFailSlowResult:
    """A fail-slow vote over live rounds (``stacks --slow``); nothing is recorded.

    Attributes:
        live: the vote and the collections. kind: ``"stacks-failslow"``. schema_version.
    """

    live: LiveFailSlow
    kind: str = "stacks-failslow"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """2 a degrader named, 1 ambiguous, 3 no round could be read, 0 OK."""
        return self.live.exit_code

    def to_json(self) -> dict[str, Any]:
        """The ``--slow --json`` document."""
        return self.live.to_json()


def stacks_request(
    *,
    job: str,
    inventory: Path | None = None,
    hosts: str | None = None,
    slow: bool = False,
    rounds: int = 5,
    interval_s: float = 10.0,
    samples: int = 2,
    sample_interval_s: float = 1.0,
    native: bool = False,
    blocking: bool = False,
    timeout_s: float = 30.0,
    state: Path | None = None,
    record: bool = True,
    debug_server: bool = True,
    environ: Mapping[str, str] | None = None,
) -> StacksRequest:
    """A :class:`StacksRequest` from command-line values, layered by :mod:`robustctl.commands.options`.

    Args:
        job: the inventory job whose ranks are dumped.
        inventory: the ``--inventory`` file (None: ``$ROBUSTCTL_INVENTORY``, else the embedded default).
        hosts: only these hosts of the job, a host range (None: all of the job's).
        slow: fail-slow voting over ``rounds`` rounds instead of a hang snapshot.
        rounds: fail-slow: the rounds voted over.
        interval_s: fail-slow: seconds between rounds.
        samples: hang mode: the collections taken (with 2+, a job whose ranks change stack between
            samples is progressing, not hung).
        sample_interval_s: hang mode: seconds between samples.
        native: include C/C++ frames (``py-spy --native``; pauses each process).
        blocking: pause each process while dumping (``py-spy`` without ``--nonblocking``).
        timeout_s: the probe's own budget on a host, seconds.
        state: the state store file (None: ``$ROBUSTCTL_STATE`` or the XDG default).
        record: hang mode: record the named suspect hosts in the state store.
        debug_server: read each rank through its in-job agent's debug server when it has one
            (False: py-spy for every rank).
        environ: the environment read (None: ``os.environ``).

    Returns:
        The request, layered.

    Raises:
        ConfigError / InventoryError: invalid inventory or environment, unknown job.
        UsageError: ``hosts`` is a bad range or names an unknown host (a flag: exit 64).
    """
    from robustctl.commands import options
    from robustctl.stacks.collect import CollectSettings

    inv = options.inventory(inventory, environ)
    the_job = inv.job(job)
    targets = None
    if hosts is not None:
        targets = tuple(options.select_hosts(inv, hosts))
    settings = CollectSettings.from_diagnose(
        options.diagnose_settings(inv.diagnose, environ=environ),
        native=native,
        nonblocking=not blocking,
        probe_timeout_s=timeout_s,
        debug_server=debug_server,
    )
    return StacksRequest(
        inventory=inv,
        job=the_job,
        settings=settings,
        hosts=targets,
        slow=slow,
        rounds=rounds,
        interval_s=interval_s,
        samples=samples,
        sample_interval_s=sample_interval_s,
        record=record,
        state=state,
    )


def run_stacks(
    request: StacksRequest,
    *,
    pool: TransportPool | None = None,
    progress: SampleProgress | None = None,
) -> StacksResult | StacksFailSlowResult:
    """Dump the job's ranks (through the in-job agent's debug server where a rank runs one, py-spy
    otherwise) and judge them: hang snapshot, or fail-slow vote (``slow``).

    Hang mode records the suspect hosts (:func:`robustctl.suspects.stacks_findings`) in the store
    unless ``record`` is off: never evicted or standby hosts, nothing cleared, best effort (an error
    lands in ``recorded.error``). Fail-slow names a group, not machines: nothing is recorded.

    Args:
        request: the job, the hosts, the collection settings and the mode.
        pool: the transports to use (closed by the caller); None: a pool opened and closed here.
        progress: called after each collection (:data:`SampleProgress`).

    Returns:
        A :class:`StacksResult` (hang snapshot, with what was recorded) or, with ``slow``, a
        :class:`StacksFailSlowResult`.

    Raises:
        ConfigError: the job has no ``process:`` spec, or its current hosts (scheduler, store) do not
            fit its layout.
        UsageError: the dumps do not fit the layout, or none of ``hosts`` is in the job now.
    """
    from robustctl.errors import UsageError
    from robustctl.stacks.live import stacks_failslow, stacks_hang

    own = pool is None
    if pool is None:
        from robustctl.transport.pool import TransportPool

        pool = TransportPool()
    from robustctl.actions.hosts import current_job

    job, _ = current_job(request.inventory, request.job.name, state=request.state)
    hosts = None
    if request.hosts is not None:
        wanted = {h.name for h in request.hosts}
        hosts = [h for h in job.hosts if h.name in wanted]
        if not hosts:
            raise UsageError(
                f"none of {', '.join(sorted(wanted))} is a host of job {job.name} now "
                f"({', '.join(h.name for h in job.hosts)})"
            )
    try:
        if request.slow:
            fs = stacks_failslow(
                job,
                pool,
                hosts=hosts,
                settings=request.settings,
                rounds=request.rounds,
                interval_s=request.interval_s,
                on_round=progress,
            )
            return StacksFailSlowResult(fs)
        live = stacks_hang(
            job,
            pool,
            hosts=hosts,
            settings=request.settings,
            samples=request.samples,
            interval_s=request.sample_interval_s,
            on_sample=progress,
        )
    finally:
        if own:
            pool.close()
    if not request.record:
        return StacksResult(live)
    from robustctl.commands.record import record_findings
    from robustctl.suspects import stacks_findings

    recorded = record_findings(
        request.state, stacks_findings(live.report), source="stacks", inventory=request.inventory
    )
    return StacksResult(live, recorded)
