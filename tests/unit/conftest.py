"""Fixtures shared by the unit tests.

``healthy_host_data``: what the real host probe (``diagnostics/host.py``) reports for a healthy
simulated host (:func:`tests.support.hostroot.seed_healthy_root`), its clock's time unset: a fake
transport stamps each answer with the time of the call. The probe runs once per session; each test
gets its own copy to change.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from robustctl.testing import fake_nvml
from tests.support.hostroot import seed_healthy_root

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def _healthy_host_probe(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("healthy-root")
    seed_healthy_root(root, "node01", 0)
    out = subprocess.run(
        [sys.executable, str(REPO / "diagnostics/host.py"), "--root", str(root)],
        capture_output=True,
        check=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    ).stdout
    data: dict[str, Any] = json.loads(out)["data"]
    data["clock"]["time"] = None  # judged against the control clock at run time; see host.clock
    return data


@pytest.fixture(scope="session")
def healthy_nvml_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What the real NVML probe (``diagnostics/nvml.py``) reports for two healthy fake-NVML GPUs
    (:mod:`robustctl.testing.fake_nvml` injection). Shared by the session: do not change it."""
    path = fake_nvml.write_injection(
        tmp_path_factory.mktemp("nvml") / "nvml.json", list(fake_nvml.healthy_gpus(2))
    )
    out = subprocess.run(
        [sys.executable, str(REPO / "diagnostics/nvml.py"), "--nvml-injection", str(path)],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    data: dict[str, Any] = json.loads(out)["data"]
    return data


@pytest.fixture
def healthy_host_data(_healthy_host_probe: dict[str, Any]) -> dict[str, Any]:
    """The host probe's ``data`` for a healthy simulated host (``node01``), a copy for this test."""
    return copy.deepcopy(_healthy_host_probe)
