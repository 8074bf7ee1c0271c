"""Suite-wide pytest configuration: ``gpu`` tests run only where a CUDA GPU is present, and no test
writes the real state store (``$ROBUSTCTL_STATE`` points at a temporary file).

The GPU check runs only when a collected test carries the ``gpu`` marker, and it imports torch only
when there are signs of an NVIDIA driver (``nvidia-smi``, ``/dev/nvidia*``, ``/proc/driver/nvidia``):
importing torch costs about a second of CPU.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, settings

# Property-based tests (Hypothesis): seeded and bounded in `make test` ("ci", the default), fewer
# examples in `make test-fast` ("fast"), many more in `make fuzz` (HYPOTHESIS_PROFILE=fuzz). No
# example database: nothing is written beside the checkout.
for name, examples, seeded in (("ci", 60, True), ("fast", 15, True), ("fuzz", 2000, False)):
    settings.register_profile(
        name,
        max_examples=examples,
        derandomize=seeded,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        print_blob=True,
    )
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@functools.cache
def gpu_unavailable_reason() -> str | None:
    """Why ``gpu`` tests cannot run here, or None when a CUDA GPU answers."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
            if out.returncode == 0 and "GPU" in out.stdout:
                return None
        except (OSError, subprocess.TimeoutExpired):
            pass
    if not (smi or glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/proc/driver/nvidia")):
        return "no NVIDIA GPU here (no nvidia-smi, /dev/nvidia*, /proc/driver/nvidia)"
    try:
        import torch
    except ImportError:
        return "nvidia-smi lists no GPU and torch is not installed"
    if torch.cuda.is_available():
        return None
    return "torch.cuda.is_available() is False and nvidia-smi lists no GPU"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``gpu``-marked tests with the reason when no GPU is present."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    reason = gpu_unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(autouse=True)
def _test_state_store(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point ``$ROBUSTCTL_STATE`` at a throw-away file: ``diagnose`` and ``stacks`` record suspects in
    the state store by default, and a test must never write the developer's own store."""
    monkeypatch.setenv("ROBUSTCTL_STATE", str(tmp_path_factory.getbasetemp() / "robustctl-state.db"))
