"""The diagnose engine: the level ladder (L0 quick → L1 burn → L2 intra-host → L3 inter-host all-reduce).

``run_levels(spec, pool) -> RunReport`` runs it; ``plan_levels(spec)`` describes it without
connecting. The ``robustctl diagnose`` command (:mod:`robustctl.commands.diagnose`) layers the
options into a :class:`DiagnoseSpec` and calls these.
"""

from __future__ import annotations

from robustctl.diagnose.engine import (
    LEVEL_NAMES,
    MAX_LEVEL,
    DiagnoseSpec,
    PairResult,
    ProgressSink,
    allreduce_peak_busbw,
    blame_pairs,
    burn_device_tflops,
    evaluate_probe,
    pair_result,
    plan_levels,
    ring_pairs,
    run_levels,
    schedule_rounds,
)

__all__ = [
    "LEVEL_NAMES",
    "MAX_LEVEL",
    "DiagnoseSpec",
    "PairResult",
    "ProgressSink",
    "allreduce_peak_busbw",
    "blame_pairs",
    "burn_device_tflops",
    "evaluate_probe",
    "pair_result",
    "plan_levels",
    "ring_pairs",
    "run_levels",
    "schedule_rounds",
]
