"""L4 bitwise alignment: every host runs one step of the reference model alone; the odd digests out.

ByteRobust (arXiv 2509.16293) §4.3, the NaN playbook: before a dual-phase replay
(``robustctl replay-sdc``), every machine runs the same reference step with predefined weights and a
fixed input, and a machine whose bits differ from the others' is a silent-data-corruption suspect.

**What runs.** The ``replay`` probe (``diagnostics/replay.py``) with every rank on the host
(``--nnodes 1``, ranks meeting on its loopback), :data:`STEPS` step, the fixed seed and width:

- a host with at least 8 GPUs in the inventory (``gpus: 8``): 8 NCCL ranks, TP 2 × PP 2 × DP 2
  (:data:`GPU_LAYOUT`), one rank per GPU;
- any other host: :data:`CPU_LAYOUT`, 4 gloo processes, TP 2 × PP 2 (a TP all-reduce and a
  pipeline send/recv in every step).

**Judgement** (:func:`judge_alignment`). Hosts are compared with others of the same kind (backend
and world size: a GPU model's bits are not a CPU's). Within a kind, the majority-is-healthy rule of
:func:`robustctl.sdc.verdict.judge_phase` (the rule of ``replay-sdc`` and stack clustering): a
host whose loss is NaN/Inf or whose ranks disagree, or whose digest differs from the digest a strict
majority of its kind reported, is CRITICAL; a host matching it is OK. A kind with fewer than
:data:`MIN_HOSTS` hosts, or no strict majority, cannot tell healthy from faulty: its hosts are
UNKNOWN and nobody is blamed. Mixed GPU models in one run disagree by design: diagnose them
separately (``--hosts``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from robustctl.models import CheckResult, Status
from robustctl.probes import budget_s
from robustctl.sdc.verdict import GroupRun, GroupState, judge_phase

if TYPE_CHECKING:
    from robustctl.diagnose.engine import Engine
    from robustctl.inventory import Host

__all__ = [
    "CHECK",
    "CPU_LAYOUT",
    "GPU_LAYOUT",
    "LEVEL",
    "MIN_HOSTS",
    "STEPS",
    "AlignmentRun",
    "alignment_args",
    "judge_alignment",
    "run_alignment",
]

CHECK = "sdc.alignment"
LEVEL = 4
MIN_HOSTS = 3
"""Fewest hosts of one kind with which a strict majority can outvote one faulty host."""
STEPS = 1
SEED = 1234
HIDDEN = 64
LAYERS = 2
CPU_LAYOUT = {"tp": 2, "pp": 2, "dp": 1}
GPU_LAYOUT = {"tp": 2, "pp": 2, "dp": 2}
GPU_RANKS = 8


def alignment_args(host: Host) -> list[str]:
    """The ``replay`` probe's arguments for ``host`` (without ``--timeout``), by its inventory GPUs."""
    gpu = host.gpus >= GPU_RANKS
    layout = GPU_LAYOUT if gpu else CPU_LAYOUT
    out = [f"--{k}={v}" for k, v in layout.items()]
    out += ["--nnodes", "1", "--master-addr", "127.0.0.1", "--backend", "nccl" if gpu else "gloo"]
    out += ["--steps", str(STEPS), "--seed", str(SEED), "--hidden", str(HIDDEN), "--layers", str(LAYERS)]
    return out


@dataclass(frozen=True)
class AlignmentRun:
    """One host's reference step.

    Attributes:
        host: its name. kind: ``"<backend>/<world size> ranks"`` (hosts are compared within a kind).
        loss: the step's loss as ``float.hex`` strings. digest: SHA-256 of the parameters after it.
        consistent: every rank of the host reported the same loss.
    """

    host: str
    kind: str
    loss: tuple[str, ...]
    digest: str
    consistent: bool


def judge_alignment(runs: list[AlignmentRun]) -> dict[str, CheckResult]:
    """Each host's L4 check, by the majority rule of the module docstring (host name → result)."""
    by_kind: dict[str, list[AlignmentRun]] = {}
    for r in runs:
        by_kind.setdefault(r.kind, []).append(r)
    out: dict[str, CheckResult] = {}
    for kind, members in by_kind.items():
        ev_base: dict[str, Any] = {"kind": kind, "hosts_compared": len(members)}
        if len(members) < MIN_HOSTS:
            for r in members:
                ev = {**ev_base, "digest": r.digest, "loss": list(r.loss)}
                out[r.host] = CheckResult(
                    CHECK, LEVEL, Status.UNKNOWN,
                    f"not judged: {len(members)} host(s) of kind {kind}, a majority needs at least {MIN_HOSTS}",
                    ev, kind,
                )  # fmt: skip
            continue
        phase = judge_phase(
            LEVEL,
            [
                GroupRun(LEVEL, r.host, (i,), ran=True, loss=r.loss, digest=r.digest, consistent=r.consistent)
                for i, r in enumerate(members)
            ],
        )
        held = sum(
            1 for r in members if phase.majority_digest is not None and r.digest == phase.majority_digest
        )
        for g in phase.groups:
            r = members[g.run.machines[0]]
            ev = {
                **ev_base,
                "digest": r.digest,
                "loss": list(r.loss),
                "majority_digest": phase.majority_digest,
            }
            if g.state is GroupState.HEALTHY:
                status, summary = Status.OK, f"digest matches {held} of {len(members)} hosts ({kind})"
            elif g.state is GroupState.FAULTY:
                status = Status.CRITICAL
                if "digest differs" in g.reason:
                    summary = (
                        f"digest {r.digest[:12]} differs from {(phase.majority_digest or '?')[:12]}"
                        f" held by {held} of {len(members)} hosts ({kind}): wrong bits"
                    )
                else:
                    summary = f"{g.reason} ({kind})"
            else:
                status = Status.UNKNOWN
                summary = f"not judged: no digest is held by a majority of the {len(members)} hosts ({kind})"
                if phase.note and "NaN" in phase.note:
                    summary = f"not judged: most of the {len(members)} hosts have a NaN/Inf loss ({kind})"
            out[r.host] = CheckResult(CHECK, LEVEL, status, summary, ev, kind)
    return out


def run_alignment(engine: Engine, hosts: list[Host]) -> str | None:
    """Run L4 on ``hosts``: the reference step on each, then :func:`judge_alignment`.

    Returns why it did not run (fewer than :data:`MIN_HOSTS` hosts left to check), else None.
    A host whose probe failed gets one UNKNOWN check and takes no part in the majority; one
    without torch gets a NOT_APPLICABLE check.
    """
    if len(hosts) < MIN_HOSTS:
        for h in hosts:
            engine.add_check(
                h.name,
                CheckResult(
                    CHECK, LEVEL, Status.NOT_APPLICABLE,
                    f"bitwise alignment needs at least {MIN_HOSTS} hosts (a majority of digests)",
                ),
            )  # fmt: skip
        return f"needs at least {MIN_HOSTS} hosts to form a majority, {len(hosts)} left to check"
    runs: dict[str, AlignmentRun] = {}
    lock = threading.Lock()

    def work(host: Host, deadline: float) -> list[CheckResult]:
        args = [*alignment_args(host), "--timeout", budget_s(deadline)]
        doc, checks = engine.probe_checks(host, "replay", args, deadline, LEVEL)
        if doc is None:
            return checks
        run = alignment_run(host.name, doc.data)
        if isinstance(run, CheckResult):
            return [*checks, run]
        with lock:
            runs[host.name] = run
        return checks

    engine.fan(f"L{LEVEL} alignment", hosts, work, level=LEVEL)
    order = {h.name: i for i, h in enumerate(hosts)}
    judged = judge_alignment(sorted(runs.values(), key=lambda r: order[r.host]))
    for name, check in judged.items():
        engine.add_check(name, check)
    return None


def alignment_run(host: str, data: Mapping[str, Any]) -> AlignmentRun | CheckResult:
    """The :class:`AlignmentRun` in a ``replay`` document, or the check saying why there is none."""
    if data.get("available") is False:
        return CheckResult(
            CHECK, LEVEL, Status.NOT_APPLICABLE, f"not run: {data.get('reason') or 'unavailable'}"
        )
    if data.get("error"):
        return CheckResult(CHECK, LEVEL, Status.UNKNOWN, f"reference step failed: {data['error']}")
    loss, digest = data.get("loss"), data.get("digest")
    if not isinstance(loss, list) or not loss or not isinstance(digest, str) or not digest:
        return CheckResult(CHECK, LEVEL, Status.UNKNOWN, "reference step printed no loss or digest")
    kind = f"{data.get('backend', '?')}/{data.get('world_size', '?')} ranks"
    return AlignmentRun(host, kind, tuple(str(v) for v in loss), digest, data.get("consistent") is True)
