"""``robustctl replay-sdc`` as a library call: :func:`run_replay_sdc` and, for ``--plan``, :func:`plan_replay_sdc`.

Dual-phase replay (ByteRobust, arXiv 2509.16293, §4.2): two rounds of group replays that name the
machine computing wrong bits (:mod:`robustctl.sdc`). :func:`replay_sdc_request` builds the request
from command-line values; code that holds an inventory builds :class:`ReplaySdcRequest` directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from robustctl.errors import UsageError
from robustctl.sdc.result import ReplaySdcPlan, ReplaySdcResult, grouping_doc
from robustctl.sdc.run import (
    MAX_COMMAND_CHARS,
    layout_for_hosts,
    parse_command,
    plan_document,
    replay_rounds,
    suspect_reasons,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from robustctl.config import DiagnoseSettings, ParallelLayout
    from robustctl.inventory import Host, Inventory
    from robustctl.sdc.grouping import SdcGrouping
    from robustctl.sdc.replay import ReplaySpec
    from robustctl.sdc.verdict import GroupRun
    from robustctl.transport.pool import TransportPool

__all__ = [
    "MAX_COMMAND_CHARS",
    "MAX_STEPS",
    "ReplaySdcPlan",
    "ReplaySdcRequest",
    "ReplaySdcResult",
    "plan_replay_sdc",
    "replay_sdc_request",
    "run_replay_sdc",
]

MAX_STEPS = 10_000
"""Most replay steps ``--steps`` accepts."""


@dataclass(frozen=True)
class ReplaySdcRequest:
    """Everything a replay-sdc run needs, after layering.

    Attributes:
        inventory: the resolved inventory. job: the job's name (None with ``--hosts``).
        hosts: the machines in rank order (the job's, or ``--hosts`` in inventory order).
        grouping: both phases' groups. steps, seed: the replay's steps and seed.
        command: the user's training command as argv (None: the built-in replay probe).
        settings: fan-out settings (concurrency, per-group budget ``host_timeout_s``, port base).
        round_deadline_s: deadline of each round. record / state: suspect recording.
    """

    inventory: Inventory
    hosts: tuple[Host, ...]
    grouping: SdcGrouping
    settings: DiagnoseSettings
    round_deadline_s: float
    job: str | None = None
    steps: int = 4
    seed: int = 1234
    command: tuple[str, ...] | None = None
    accept_new_host_keys: bool = False
    record: bool = True
    state: Path | None = None


def _job_machines(
    inv: Inventory, job: str, flags: tuple[int | None, int | None, int | None], state: Path | None
) -> tuple[tuple[Host, ...], ParallelLayout, int]:
    """``job``'s machines now (rank order, after standby swaps), its layout and ranks per host.

    Args:
        inv: the resolved inventory.
        job: the inventory job.
        flags: ``(--tp, --pp, --dp)`` as given (None: not given; any given is refused with a job).
        state: the store file whose record of the job's hosts is read (None: the default).

    Returns:
        ``(hosts, layout, ranks_per_host)``: the job's current machines in rank order, its layout and
        ranks per host.

    Raises:
        UsageError: a layout flag given with ``--job``.
        ConfigError: an unknown job (the inventory's error, 78).
    """
    from robustctl.actions.hosts import current_job

    given = [f for f, v in zip(("--tp", "--pp", "--dp"), flags, strict=True) if v is not None]
    if given:
        raise UsageError(f"{', '.join(given)} cannot be used with --job: the job's layout is in {inv.source}")
    inv.job(job)  # an unknown job is the inventory's error (78)
    the_job, _ = current_job(inv, job, state=state)  # its machines now, after standby swaps
    return tuple(the_job.hosts), the_job.layout, the_job.ranks_per_host


def replay_sdc_request(
    *,
    inventory: Path | None = None,
    job: str | None = None,
    hosts: str | None = None,
    tp: int | None = None,
    pp: int | None = None,
    dp: int | None = None,
    k: int | None = None,
    steps: int = 4,
    command: str | None = None,
    deadline_s: float | None = None,
    concurrency: int | None = None,
    accept_new_host_keys: bool = False,
    state: Path | None = None,
    record: bool = True,
    environ: Mapping[str, str] | None = None,
) -> ReplaySdcRequest:
    """A :class:`ReplaySdcRequest` from command-line values (``None``: not given).

    Machines: ``job``'s current hosts in rank order (after standby swaps:
    :func:`robustctl.actions.hosts.current_job`, which reads the store at ``state``) with its layout
    and ranks per host; or ``hosts`` (in
    inventory order) with ``--pp``/``--dp`` and ``--tp`` (default: the ranks on one machine, the
    hosts' ``gpus_per_host`` or 1 on CPU-only hosts, ByteRobust's TP = GPUs per machine).

    Args:
        inventory: the ``--inventory`` file (None: ``$ROBUSTCTL_INVENTORY``, else the embedded default).
        job: the inventory job whose machines and layout are replayed (None: ``hosts`` instead).
        hosts: the machines as a host range, in rank order (None: ``job`` instead).
        tp: the tensor-parallel size, with ``hosts`` (None: the ranks per host).
        pp: the pipeline-parallel size, with ``hosts``.
        dp: the data-parallel size, with ``hosts``.
        k: the pipelines per group, m = k·PP (None: the smallest k >= 2 that fits,
            :func:`robustctl.sdc.grouping.choose_k`).
        steps: the training steps each group replays (1 … :data:`MAX_STEPS`).
        command: the operator's own replay command, shell-style words (None: the built-in replay probe).
        deadline_s: the deadline of each round, seconds (None: the ``diagnose:`` settings').
        concurrency: hosts contacted at once (None: the ``diagnose:`` settings').
        accept_new_host_keys: record unknown host keys in known_hosts (OpenSSH's ``accept-new``).
        state: the store file: the job's current hosts are read from it and suspects recorded in it
            (None: the default).
        record: record the suspects in the store.
        environ: the environment read (None: ``os.environ``).

    Returns:
        The request, layered.

    Raises:
        ConfigError / InventoryError: invalid inventory or environment; unknown job (78).
        UsageError: neither or both of ``job`` and ``hosts``; layout flags with ``job``; a layout
            that does not fit the machines or whose world size is past the largest; an invalid ``k``
            or none; a bad ``command`` (64).
    """
    from robustctl.commands import options
    from robustctl.sdc.grouping import plan_grouping

    if (job is None) == (hosts is None):
        raise UsageError("give either --job (a job of the inventory) or --hosts with --pp and --dp")
    if not 1 <= steps <= MAX_STEPS:
        raise UsageError(f"--steps {steps}: expected 1 to {MAX_STEPS}")
    inv = options.inventory(inventory, environ)
    if job is not None:
        machines, layout, g = _job_machines(inv, job, (tp, pp, dp), state)
    else:
        machines = tuple(options.select_hosts(inv, hosts))
        if not machines:
            raise UsageError(f"no hosts selected by {hosts!r}")
        layout, g = layout_for_hosts(machines, tp, pp, dp)
    grouping = plan_grouping(len(machines), layout, g, k)
    argv = parse_command(command)
    settings = options.diagnose_settings(
        inv.diagnose, options.DiagnoseFlags(concurrency=concurrency), environ
    )
    return ReplaySdcRequest(
        inventory=inv,
        hosts=machines,
        grouping=grouping,
        settings=settings,
        round_deadline_s=deadline_s if deadline_s is not None else settings.deadline_s,
        job=job,
        steps=steps,
        command=argv,
        accept_new_host_keys=accept_new_host_keys,
        record=record,
        state=state,
    )


def _spec(request: ReplaySdcRequest) -> ReplaySpec:
    from robustctl.sdc.replay import ReplaySpec, Workload

    return ReplaySpec(
        hosts=request.hosts,
        grouping=request.grouping,
        workload=Workload(steps=request.steps, seed=request.seed, command=request.command),
        settings=request.settings,
        round_deadline_s=request.round_deadline_s,
    )


def plan_replay_sdc(request: ReplaySdcRequest) -> ReplaySdcPlan:
    """Both phases' groups, the replay layout and the cost of :func:`run_replay_sdc`; connects to nothing
    (:func:`robustctl.sdc.run.plan_document`).

    Args:
        request: the machines, grouping, workload and settings.

    Returns:
        The plan document.
    """
    spec = _spec(request)
    return ReplaySdcPlan(plan_document(spec, grouping_doc(spec, request.job)))


def run_replay_sdc(
    request: ReplaySdcRequest,
    *,
    pool: TransportPool | None = None,
    on_group: Callable[[GroupRun], None] | None = None,
) -> ReplaySdcResult:
    """Run both rounds, judge them, record the suspects (unless ``record`` is off).

    Recording: the isolated machine or the candidates become suspect (never evicted or standby
    hosts; nothing is cleared: a replay that did not reproduce says nothing of the hardware). The
    store is best effort: an error lands in ``recorded.error``.

    Args:
        request: the machines, grouping, workload, settings and recording.
        pool: the transports (closed by the caller); None: a pool opened and closed here.
        on_group: called as each group finishes (progress).

    Returns:
        Both rounds, the verdict, the machines' names and, when recorded, what the store took.
    """
    from robustctl.sdc.verdict import judge

    spec = _spec(request)
    r1, r2 = replay_rounds(spec, pool, accept_new_host_keys=request.accept_new_host_keys, on_group=on_group)
    verdict = judge(request.grouping.machines, r1.groups, r2.groups)
    names = tuple(h.name for h in request.hosts)
    result = ReplaySdcResult(grouping_doc(spec, request.job), (r1, r2), verdict, names)
    if not request.record:
        return result
    from robustctl.commands.record import record_findings

    named = suspect_reasons(verdict, request.grouping, names)
    recorded = record_findings(request.state, named, source="replay-sdc", inventory=request.inventory)
    return ReplaySdcResult(result.grouping, result.rounds, verdict, names, recorded)
