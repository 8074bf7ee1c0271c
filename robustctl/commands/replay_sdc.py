"""``robustctl replay-sdc`` as a library call: :func:`run_replay_sdc` and, for ``--plan``, :func:`plan_replay_sdc`.

Dual-phase replay (ByteRobust, arXiv 2509.16293, §4.2): two rounds of group replays that name the
machine computing wrong bits (:mod:`robustctl.sdc`). :func:`replay_sdc_request` builds the request
from command-line values; code that holds an inventory builds :class:`ReplaySdcRequest` directly.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustctl.errors import UsageError
from robustctl.models import SCHEMA_VERSION, to_jsonable

if TYPE_CHECKING:
    from collections.abc import Callable

    from robustctl.config import DiagnoseSettings
    from robustctl.exit_codes import ExitCode
    from robustctl.inventory import Host, Inventory
    from robustctl.sdc.grouping import SdcGrouping
    from robustctl.sdc.replay import RoundResult
    from robustctl.sdc.verdict import GroupRun, SdcVerdict
    from robustctl.suspects import RecordResult
    from robustctl.transport.pool import TransportPool

__all__ = [
    "ReplaySdcPlan",
    "ReplaySdcRequest",
    "ReplaySdcResult",
    "plan_replay_sdc",
    "replay_sdc_request",
    "run_replay_sdc",
]

MAX_STEPS = 10_000
"""Most replay steps ``--steps`` accepts."""
MAX_COMMAND_CHARS = 8192
"""Longest ``--command``."""


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


def _grouping_doc(request: ReplaySdcRequest) -> dict[str, Any]:
    g = request.grouping
    names = [h.name for h in request.hosts]
    return {
        "job": request.job,
        "machines": g.machines,
        "ranks_per_machine": g.ranks_per_machine,
        "layout": {d: getattr(g.layout, d) for d in ("tp", "pp", "dp", "cp", "ep")},
        "unit": {"machines": g.unit.machines, "pipelines": g.unit.replicas},
        "k": g.k,
        "k_chosen_by": g.k_chosen_by,
        "m": g.m,
        "n": g.n,
        "replay": {"tp": g.layout.tp * g.layout.cp * g.layout.ep, "pp": g.layout.pp, "dp": g.replay_dp},
        "steps": request.steps,
        "workload": "command" if request.command else "built-in",
        "phases": [
            {
                "phase": p.number,
                "kind": "horizontal" if p.number == 1 else "vertical",
                "groups": [
                    {
                        "name": grp.name,
                        "machines": list(grp.machines),
                        "hosts": [names[x] for x in grp.machines],
                    }
                    for grp in p.groups
                ],
            }
            for p in g.phases
        ],
    }


@dataclass(frozen=True)
class ReplaySdcPlan:
    """What a replay-sdc run would do (``--plan``), connecting to nothing.

    Attributes:
        plan: groups of both phases, the replay layout, the cost (rounds, groups at once, machine
            runs) and the first machine's command. kind: ``"replay-sdc-plan"``. schema_version.
    """

    plan: Mapping[str, Any]
    kind: str = "replay-sdc-plan"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """Always OK: a plan is not a verdict."""
        from robustctl.exit_codes import ExitCode

        return ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        """The ``--plan --json`` document."""
        doc: dict[str, Any] = to_jsonable(self.plan)
        doc.update(kind=self.kind, schema_version=self.schema_version, exit_code=int(self.exit_code))
        return doc


@dataclass(frozen=True)
class ReplaySdcResult:
    """Both rounds, their verdict, and what was recorded in the state store.

    Attributes:
        grouping: the plan's grouping document. rounds: both :class:`~robustctl.sdc.replay.RoundResult`.
        verdict: :class:`~robustctl.sdc.verdict.SdcVerdict` (machine indices). hosts: machine names.
        recorded: what was recorded (None when not asked). kind: ``"replay-sdc"``. schema_version.
    """

    grouping: Mapping[str, Any]
    rounds: tuple[RoundResult, RoundResult]
    verdict: SdcVerdict
    hosts: tuple[str, ...]
    recorded: RecordResult | None = None
    kind: str = "replay-sdc"
    schema_version: int = SCHEMA_VERSION

    @property
    def exit_code(self) -> ExitCode:
        """isolated/candidates 2, not_reproduced 1, failed_to_run 3."""
        return self.verdict.verdict.exit_code

    def names(self, machines: tuple[int, ...]) -> list[str]:
        """Host names of machine indices."""
        return [self.hosts[x] for x in machines]

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document: verdict, machines (names and indices), both phases' groups with
        state, reason, digest, per-step loss bits and timings, round timings, ``recorded``."""
        v = self.verdict
        phases = []
        for rnd, pj in zip(self.rounds, v.phases, strict=True):
            phases.append(
                {
                    "phase": pj.phase,
                    "elapsed_s": rnd.elapsed_s,
                    "majority_digest": pj.majority_digest,
                    "note": pj.note,
                    "groups": [
                        {
                            "name": g.run.name,
                            "machines": list(g.run.machines),
                            "hosts": self.names(g.run.machines),
                            "state": g.state.value,
                            "reason": g.reason,
                            "digest": g.run.digest,
                            "loss": list(g.run.loss),
                            "consistent": g.run.consistent,
                            "elapsed_s": g.run.elapsed_s,
                        }
                        for g in pj.groups
                    ],
                }
            )
        return {
            "kind": self.kind,
            "schema_version": self.schema_version,
            "exit_code": int(self.exit_code),
            "verdict": v.verdict.value,
            "machines": self.names(v.machines),
            "machine_indices": list(v.machines),
            "over_evict": self.names(v.over_evict),
            "intersections": self.names(v.intersections),
            "untested": self.names(v.untested),
            "notes": list(v.notes),
            "grouping": {k: val for k, val in self.grouping.items() if k != "phases"},
            "phases": phases,
            "recorded": to_jsonable(self.recorded),
        }


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

    Raises:
        ConfigError / InventoryError: invalid inventory or environment; unknown job (78).
        UsageError: neither or both of ``job`` and ``hosts``; layout flags with ``job``; a layout
            that does not fit the machines or whose world size is past the largest; an invalid ``k``
            or none; a bad ``command`` (64).
    """
    from pydantic import ValidationError

    from robustctl.commands import options
    from robustctl.config import ParallelLayout
    from robustctl.sdc.grouping import plan_grouping

    if (job is None) == (hosts is None):
        raise UsageError("give either --job (a job of the inventory) or --hosts with --pp and --dp")
    if not 1 <= steps <= MAX_STEPS:
        raise UsageError(f"--steps {steps}: expected 1 to {MAX_STEPS}")
    inv = options.inventory(inventory, environ)
    if job is not None:
        given = [f for f, v in (("--tp", tp), ("--pp", pp), ("--dp", dp)) if v is not None]
        if given:
            raise UsageError(
                f"{', '.join(given)} cannot be used with --job: the job's layout is in {inv.source}"
            )
        from robustctl.actions.hosts import current_job

        inv.job(job)  # an unknown job is the inventory's error (78)
        the_job, _ = current_job(inv, job, state=state)  # its machines now, after standby swaps
        machines = tuple(the_job.hosts)
        layout, g = the_job.layout, the_job.ranks_per_host
    else:
        machines = tuple(options.select_hosts(inv, hosts))
        if not machines:
            raise UsageError(f"no hosts selected by {hosts!r}")
        if pp is None or dp is None:
            raise UsageError("--hosts needs --pp and --dp (the job's pipeline and data-parallel sizes)")
        per = {h.gpus or 1 for h in machines}
        if len(per) > 1:
            raise UsageError(
                f"the selected hosts have different GPU counts ({sorted(per)}): give --job instead"
            )
        g = per.pop()
        ranks = len(machines) * g
        if tp is None:
            if ranks % (pp * dp):
                raise UsageError(
                    f"{len(machines)} machines x {g} ranks = {ranks} ranks are not divisible by pp*dp = {pp * dp}"
                )
            tp = ranks // (pp * dp)
        try:
            layout = ParallelLayout(tp=tp, pp=pp, dp=dp)
        except ValidationError as exc:  # each size in range, their product past the largest world
            why = str(exc.errors()[0].get("msg", "invalid layout")).removeprefix("Value error, ")
            raise UsageError(f"--tp {tp} --pp {pp} --dp {dp}: {why}") from None
    grouping = plan_grouping(len(machines), layout, g, k)
    argv: tuple[str, ...] | None = None
    if command is not None:
        if len(command) > MAX_COMMAND_CHARS:
            raise UsageError(f"--command is longer than {MAX_COMMAND_CHARS} characters")
        try:
            argv = tuple(shlex.split(command))
        except ValueError as exc:
            raise UsageError(f"--command: {exc}") from None
        if not argv:
            raise UsageError("--command is empty")
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


def _spec(request: ReplaySdcRequest) -> Any:
    from robustctl.sdc.replay import ReplaySpec, Workload

    return ReplaySpec(
        hosts=request.hosts,
        grouping=request.grouping,
        workload=Workload(steps=request.steps, seed=request.seed, command=request.command),
        settings=request.settings,
        round_deadline_s=request.round_deadline_s,
    )


def plan_replay_sdc(request: ReplaySdcRequest) -> ReplaySdcPlan:
    """Both phases' groups, the replay layout and the cost of :func:`run_replay_sdc`; connects to nothing."""
    from robustctl.sdc.replay import command_argv, groups_at_once, probe_args, rounds_needed

    spec = _spec(request)
    doc = _grouping_doc(request)
    g = request.grouping
    at_once = groups_at_once(spec)
    first = request.hosts[g.phases[0].groups[0].machines[0]]
    port = request.settings.allreduce.master_port + 1
    if request.command:
        sample = command_argv(
            spec, first, node_rank=0, master="<address of the group's first machine>", port=port
        )
    else:
        sample = [
            "replay",
            *probe_args(spec, node_rank=0, master="<address of the group's first machine>", port=port,
                        bind="<its own address>", timeout=f"{request.settings.host_timeout_s:g}"),
        ]  # fmt: skip
    doc["cost"] = {
        "rounds": rounds_needed(g.machines),
        "groups_per_round": g.n,
        "groups_at_once": at_once,
        "waves_per_round": -(-g.n // at_once),
        "machine_runs": 2 * g.machines,
        "group_timeout_s": request.settings.host_timeout_s,
        "round_deadline_s": request.round_deadline_s,
    }
    doc["first_machine_command"] = sample
    return ReplaySdcPlan(doc)


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
        pool: the transports (closed by the caller); None: a pool opened and closed here.
        on_group: called as each group finishes (progress).
    """
    from robustctl.sdc.replay import resolve, run_round
    from robustctl.sdc.verdict import Verdict, judge

    own = pool is None
    if pool is None:
        from robustctl.transport.pool import TransportPool

        pool = TransportPool(accept_new_host_keys=request.accept_new_host_keys)
    spec = _spec(request)
    try:
        pool.preflight(request.hosts)
        addresses, missing = resolve(spec, pool)
        r1 = run_round(spec, pool, 1, addresses=addresses, missing=missing, on_group=on_group)
        r2 = run_round(spec, pool, 2, addresses=addresses, missing=missing, on_group=on_group)
    finally:
        if own:
            pool.close()
    verdict = judge(request.grouping.machines, r1.groups, r2.groups)
    names = tuple(h.name for h in request.hosts)
    result = ReplaySdcResult(_grouping_doc(request), (r1, r2), verdict, names)
    if not request.record:
        return result
    from robustctl.commands.record import record_findings

    named: dict[str, str] = {}
    g = request.grouping
    for x in verdict.over_evict:
        h, v = g.group_of(1, x).name, g.group_of(2, x).name
        what = "isolated" if verdict.verdict is Verdict.ISOLATED else "candidate"
        named[names[x]] = f"replay-sdc: {what} by dual-phase replay ({h} x {v})"
    recorded = record_findings(request.state, named, source="replay-sdc", inventory=request.inventory)
    return ReplaySdcResult(result.grouping, result.rounds, verdict, names, recorded)
