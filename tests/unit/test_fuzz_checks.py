"""Property-based tests of the checks' ``evaluate`` side: whatever document a host's probe sends back
(random JSON values under the probe's keys), :func:`robustctl.diagnose.engine.evaluate_probe` gives
results without its catch-all firing ("check failed: ...", a check that raised on its input).
Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.checks.registry import all_checks
from robustctl.config import Thresholds
from robustctl.diagnose.engine import evaluate_probe

pytestmark = pytest.mark.fuzz

PROBES = sorted({spec.probe for spec in all_checks()})
# The keys the checks read (grep of robustctl/checks), so that generated documents reach their code.
KEYS = st.sampled_from(
    ("accessible", "active", "admin_up", "available", "available_bytes", "available_pct", "backend",
     "busbw_gbps", "carrier", "checked", "clock", "clocks_event_reason_names", "correct", "count",
     "cuda_available", "device", "devices", "disks", "driver_version", "dtype", "error", "error_code",
     "free_bytes", "free_pct", "gpus", "infiniband", "inodes_free_pct", "kind", "lines", "link", "load",
     "matches", "max_rel_error", "memory", "mismatches", "mode", "mount", "mtu", "name", "nics", "nvlink",
     "nvml_error", "operstate", "path", "pci_bus_id", "peak_busbw_gbps", "peer_outliers", "phys_state",
     "procs_blocked", "query_errors", "rate_gbps", "read_only", "reason", "remapped_rows_failure",
     "remapped_rows_pending", "results", "retired_pages_pending", "returncode", "size", "speed_mbps",
     "state", "stdout", "tflops", "time", "total_bytes", "truncated", "uuid", "world_size", "xid")
) | st.text(max_size=6)  # fmt: skip
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=30,
)


@given(st.sampled_from(PROBES), st.dictionaries(KEYS, JSON, max_size=8))
def test_evaluate_never_crashes_on_host_documents(probe: str, data: dict[str, Any]) -> None:
    for result in evaluate_probe(probe, data, Thresholds(), 0):
        assert not result.summary.startswith("check failed:"), result.summary
