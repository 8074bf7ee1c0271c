"""The results of ``robustctl replay-sdc``: the plan (``--plan``) and the run, and their JSON documents.

:func:`grouping_doc` is the grouping both documents carry (both phases' groups, the replay layout).
The command (:mod:`robustctl.commands.replay_sdc`) re-exports these types.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from robustctl.models import SCHEMA_VERSION, to_jsonable

if TYPE_CHECKING:
    from robustctl.exit_codes import ExitCode
    from robustctl.sdc.replay import ReplaySpec, RoundResult
    from robustctl.sdc.verdict import SdcVerdict
    from robustctl.suspects import RecordResult

__all__ = ["ReplaySdcPlan", "ReplaySdcResult", "grouping_doc"]


def grouping_doc(spec: ReplaySpec, job: str | None) -> dict[str, Any]:
    """The grouping document of a run of ``spec`` (``job``: the job's name, None with ``--hosts``).

    Args:
        spec: the replay (machines, grouping, workload).
        job: the job's name, recorded as given (None: the machines came from ``--hosts``).

    Returns:
        machines, ranks per machine, layout, unit, k (and why), m, n, the replay's tp/pp/dp, steps,
        workload (``command`` or ``built-in``) and both phases' groups (machine indices and names).
    """
    g = spec.grouping
    names = [h.name for h in spec.hosts]
    return {
        "job": job,
        "machines": g.machines,
        "ranks_per_machine": g.ranks_per_machine,
        "layout": {d: getattr(g.layout, d) for d in ("tp", "pp", "dp", "cp", "ep")},
        "unit": {"machines": g.unit.machines, "pipelines": g.unit.replicas},
        "k": g.k,
        "k_chosen_by": g.k_chosen_by,
        "m": g.m,
        "n": g.n,
        "replay": {"tp": g.layout.tp * g.layout.cp * g.layout.ep, "pp": g.layout.pp, "dp": g.replay_dp},
        "steps": spec.workload.steps,
        "workload": "command" if spec.workload.command else "built-in",
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
