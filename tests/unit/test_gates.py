"""Gates of the project itself: the control side imports no heavy module at start-up.

ruff's TID253 (``banned-module-level-imports`` in pyproject.toml) keeps ``import torch`` and friends out
of module level; this checks the outcome, including imports ruff cannot see (a module-level import of a
robustctl module that imports them).
"""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "paramiko", "pynvml", "kubernetes", "numpy")

# Allowed to import a heavy module when imported, because nothing on the control side imports them at
# module level: the SSH transport (paramiko; ruff bans importing it at module level) and the test fakes
# (the fake NVML builds pynvml's error classes). The probe sources under robustctl/_probes run on hosts.
EXEMPT = ("robustctl.transport.ssh", "robustctl.testing", "robustctl._")


def test_no_robustctl_module_imports_a_heavy_one_at_import() -> None:
    code = f"""
import importlib, pkgutil, sys
import robustctl
names = sorted(m.name for m in pkgutil.walk_packages(robustctl.__path__, "robustctl."))
for name in names:
    if not name.startswith({EXEMPT!r}):
        importlib.import_module(name)
print(len(names), ",".join(m for m in {HEAVY + EXEMPT[:1]!r} if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    n, loaded = out.split(" ", 1)
    assert int(n) > 50  # the walk did find the package's modules
    assert loaded.strip() == ""
