"""Judge the two replay rounds: which groups are faulty, and which machine(s) that names.

Pure functions over what each group reported (:class:`GroupRun`). Source: ByteRobust (arXiv
2509.16293) §4.2, Algorithm 1: the faulty machine is the intersection of the failing horizontal
and vertical groups (:mod:`robustctl.sdc.grouping`).

**A group is faulty** when its loss is NaN or infinite at some step, when its machines reported
different results, or when its final-parameter digest differs from the digest held by a strict
majority of the groups of its phase that ran (healthy groups running the same deterministic job on
the same kind of hardware agree bit for bit; the same majority-is-healthy rule as stack
clustering). **A group that could not run** (it did not start, a host was unreachable, it timed
out, its command failed or printed no result) is ``failed_to_run``: never faulty, never healthy.
When no digest holds a strict majority of a phase (or the majority itself has a NaN loss), the
phase cannot tell healthy from faulty and its finite groups are ``undecided``.

**The verdict** (:func:`judge`), with ``I`` the machines whose groups are faulty in both phases:

- ``isolated``: ``I`` is one machine and it explains every faulty group (one per phase);
- ``candidates``: anything else with a faulty group: several intersections (more than one faulty
  machine), or a faulty group that no intersection explains (an intermittent fault that showed in
  one phase only, or a group of the other phase that could not run). For such a group, its machines
  that are not in a healthy group of the other phase are candidates; when there are none (every one
  of them replayed healthy in the other phase: intermittent), all its machines are;
- ``not_reproduced``: every group of both phases ran and none was faulty;
- ``failed_to_run``: no group was faulty but some could not run or were undecided.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from robustctl.exit_codes import ExitCode

__all__ = [
    "GroupJudgement",
    "GroupRun",
    "GroupState",
    "PhaseJudgement",
    "SdcVerdict",
    "Verdict",
    "judge",
    "judge_phase",
    "loss_is_finite",
]


class GroupState(str, Enum):
    """What one group's replay says about its machines."""

    HEALTHY = "healthy"
    FAULTY = "faulty"
    FAILED_TO_RUN = "failed_to_run"
    UNDECIDED = "undecided"


class Verdict(str, Enum):
    """The outcome of both rounds (module docstring); its exit code is :attr:`exit_code`."""

    ISOLATED = "isolated"
    CANDIDATES = "candidates"
    NOT_REPRODUCED = "not_reproduced"
    FAILED_TO_RUN = "failed_to_run"

    @property
    def exit_code(self) -> ExitCode:
        """isolated/candidates 2 (CRITICAL), not_reproduced 1 (WARNING), failed_to_run 3 (UNKNOWN)."""
        return {
            Verdict.ISOLATED: ExitCode.CRITICAL,
            Verdict.CANDIDATES: ExitCode.CRITICAL,
            Verdict.NOT_REPRODUCED: ExitCode.WARNING,
            Verdict.FAILED_TO_RUN: ExitCode.UNKNOWN,
        }[self]


@dataclass(frozen=True)
class GroupRun:
    """What one group's replay produced.

    Attributes:
        phase: 1 or 2. name: ``"H3"``/``"V1"``. machines: machine indices, ascending.
        ran: the replay finished on every machine of the group with a result.
        loss: per-step loss, ``float.hex`` strings (exact bits). digest: the final-parameter digest.
        consistent: every machine of the group reported the same result.
        error: why it could not run (``ran`` false), one line naming the host.
        elapsed_s: wall seconds of the group's replay.
    """

    phase: int
    name: str
    machines: tuple[int, ...]
    ran: bool
    loss: tuple[str, ...] = ()
    digest: str | None = None
    consistent: bool = True
    error: str | None = None
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class GroupJudgement:
    """A group's state and the one-line reason for it."""

    run: GroupRun
    state: GroupState
    reason: str


@dataclass(frozen=True)
class PhaseJudgement:
    """One phase judged: its groups, the majority digest (None when there is none) and a note."""

    phase: int
    groups: tuple[GroupJudgement, ...]
    majority_digest: str | None
    note: str | None = None

    def states(self) -> dict[int, GroupState]:
        """Machine index → the state of its group in this phase."""
        return {x: g.state for g in self.groups for x in g.run.machines}


@dataclass(frozen=True)
class SdcVerdict:
    """Both phases judged.

    Attributes:
        verdict: see :class:`Verdict`. machines: the isolated machine (one) or the candidates,
        ascending; empty otherwise. over_evict: the machines to take out (the candidates, or the
        isolated one). intersections: machines whose groups failed in both phases.
        untested: machines whose groups were not judged (failed to run or undecided) in both phases.
        notes: one line per thing the user should know (intermittent, groups that did not run).
        phases: both :class:`PhaseJudgement`.
    """

    verdict: Verdict
    machines: tuple[int, ...]
    over_evict: tuple[int, ...]
    intersections: tuple[int, ...]
    untested: tuple[int, ...]
    notes: tuple[str, ...]
    phases: tuple[PhaseJudgement, PhaseJudgement]


def loss_is_finite(value: str) -> bool:
    """False for a ``float.hex`` string (or decimal) that is NaN or infinite, or not a number at all."""
    try:
        v = float.fromhex(value)
    except (ValueError, OverflowError):
        try:
            v = float(value)
        except ValueError:
            return False
    return math.isfinite(v)


def judge_phase(phase: int, runs: Sequence[GroupRun]) -> PhaseJudgement:
    """Judge the groups of one phase (module docstring)."""
    ran = [r for r in runs if r.ran]
    counts = Counter(r.digest for r in ran)
    majority: str | None = None
    note: str | None = None
    diverges = False
    if ran:
        digest, count = counts.most_common(1)[0]
        nonfinite = sum(1 for r in ran if not all(loss_is_finite(v) for v in r.loss))
        if nonfinite * 2 > len(ran):
            diverges = True
            note = f"phase {phase}: most groups have a NaN/Inf loss: the replay itself diverges"
        elif count * 2 > len(ran):
            majority = digest
        else:
            note = f"phase {phase}: no digest is held by a majority of the {len(ran)} groups that ran"
    out: list[GroupJudgement] = []
    for r in runs:
        if not r.ran:
            out.append(GroupJudgement(r, GroupState.FAILED_TO_RUN, r.error or "did not run"))
            continue
        bad = [i for i, v in enumerate(r.loss) if not loss_is_finite(v)]
        if bad and not diverges:
            out.append(GroupJudgement(r, GroupState.FAULTY, f"loss is {r.loss[bad[0]]} at step {bad[0]}"))
        elif not r.consistent:
            out.append(GroupJudgement(r, GroupState.FAULTY, "its machines reported different results"))
        elif majority is None:
            out.append(GroupJudgement(r, GroupState.UNDECIDED, note or "no majority digest"))
        elif r.digest != majority:
            held = counts[majority]
            out.append(
                GroupJudgement(
                    r, GroupState.FAULTY, f"digest differs from the majority's ({held} of {len(ran)} groups)"
                )
            )
        else:
            out.append(GroupJudgement(r, GroupState.HEALTHY, "digest matches the majority"))
    return PhaseJudgement(phase, tuple(out), majority, note)


def judge(machines: int, phase1: Sequence[GroupRun], phase2: Sequence[GroupRun]) -> SdcVerdict:
    """The verdict of both rounds over ``machines`` machines (module docstring)."""
    p1, p2 = judge_phase(1, phase1), judge_phase(2, phase2)
    s1, s2 = p1.states(), p2.states()
    faulty = [[g for g in p.groups if g.state is GroupState.FAULTY] for p in (p1, p2)]
    notes: list[str] = [n for n in (p1.note, p2.note) if n]
    unjudged = (GroupState.FAILED_TO_RUN, GroupState.UNDECIDED)
    untested = tuple(x for x in range(machines) if s1.get(x) in unjudged and s2.get(x) in unjudged)
    for p in (p1, p2):
        for g in p.groups:
            if g.state is GroupState.FAILED_TO_RUN:
                notes.append(f"group {g.run.name} did not run: {g.reason}")
    both = tuple(
        x for x in range(machines) if s1.get(x) is GroupState.FAULTY and s2.get(x) is GroupState.FAULTY
    )
    if untested:
        notes.append(f"{len(untested)} machine(s) not judged in either phase")
    if not faulty[0] and not faulty[1]:
        any_unjudged = any(g.state in unjudged for p in (p1, p2) for g in p.groups)
        verdict = Verdict.FAILED_TO_RUN if any_unjudged else Verdict.NOT_REPRODUCED
        return SdcVerdict(verdict, (), (), (), untested, tuple(notes), (p1, p2))
    candidates = set(both)
    unexplained = False
    for phase_no, groups in ((1, faulty[0]), (2, faulty[1])):
        other = s2 if phase_no == 1 else s1
        for g in groups:
            if set(g.run.machines) & set(both):
                continue
            unexplained = True
            open_ = [x for x in g.run.machines if other.get(x) is not GroupState.HEALTHY]
            if open_:
                candidates.update(open_)
                notes.append(
                    f"group {g.run.name} is faulty but no faulty group of phase {3 - phase_no} meets it; "
                    f"its machines not replayed healthy there are candidates"
                )
            else:
                candidates.update(g.run.machines)
                notes.append(
                    f"group {g.run.name} is faulty but every one of its machines replayed healthy in "
                    f"phase {3 - phase_no}: an intermittent fault (or one these steps trigger only "
                    f"sometimes); all its machines are candidates"
                )
    if len(both) == 1 and not unexplained and len(faulty[0]) == 1 and len(faulty[1]) == 1:
        return SdcVerdict(Verdict.ISOLATED, both, both, both, untested, tuple(notes), (p1, p2))
    if len(both) > 1:
        notes.append(
            f"{len(both)} intersections of faulty groups: more than one faulty machine "
            "(some intersections may be healthy machines sharing both groups with faulty ones)"
        )
    cand = tuple(sorted(candidates))
    return SdcVerdict(Verdict.CANDIDATES, cand, cand, both, untested, tuple(notes), (p1, p2))
