"""The diagnose level ladder (L0 quick → L1 burn → L2 intra-host → L3 inter-host all-reduce → L4 alignment).

``run_levels(spec, pool) -> RunReport`` runs it; ``plan_levels(spec)`` describes it without
connecting. The ``robustctl diagnose`` command (:mod:`robustctl.commands.diagnose`) layers the
options into a :class:`DiagnoseSpec` and calls these.

Modules: :mod:`~robustctl.diagnose.engine` (driver, per-host state, fan-out helper),
:mod:`~robustctl.diagnose.levels` (L0-L2 and their probe arguments),
:mod:`~robustctl.diagnose.pairs` (L3: ring pairs, rounds, rendezvous addresses, blame),
:mod:`~robustctl.diagnose.alignment` (L4: one reference step per host, majority of digests),
:mod:`~robustctl.diagnose.plan` (the dry-run plan).
"""

from __future__ import annotations

from robustctl.diagnose.engine import DiagnoseSpec, ProgressSink, evaluate_probe, run_levels
from robustctl.diagnose.levels import LEVEL_NAMES, MAX_LEVEL, allreduce_peak_busbw, burn_device_tflops
from robustctl.diagnose.pairs import PairResult, blame_pairs, pair_result, ring_pairs, schedule_rounds
from robustctl.diagnose.plan import plan_levels

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
