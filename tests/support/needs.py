"""What a test needs from this machine: skip where it is missing, fail in CI; and the skips CI accepts.

A test that needs something of the machine (root, sshd, the Slurm daemons, cgroups, nftables, enough
testbed hosts, Chromium) calls :func:`needed` with the reason it cannot run, or None when it can.
Outside CI the test is skipped with that reason; under ``ROBUSTCTL_REQUIRE_TESTBED=1`` (set by
``.ci/run``) it fails instead, so CI never passes by skipping what it is meant to run.

Some skips stay skips in CI too, because a CI machine cannot have what they need (a GPU, a non-root
user, Python 3.8): :data:`ALLOWED_SKIPS` lists them, and ``.ci/run`` fails when the run skipped any
other test (:func:`skipped_tests`, :func:`allowed_skip`).

Example::

    try:
        testbed.block_host(4)
    except FaultUnsupported as exc:
        needed(str(exc))
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from typing import NoReturn, overload

import pytest

REQUIRE_ENV = "ROBUSTCTL_REQUIRE_TESTBED"

# (regular expression searched in a skip's message, why CI may skip it). Messages are those of the
# tests' own skips; keep each entry next to the reason it matches when either changes.
ALLOWED_SKIPS: tuple[tuple[str, str], ...] = (
    # tests/conftest.py gpu_unavailable_reason(): CI machines have no GPU
    (r"^no NVIDIA GPU here\b", "gpu tests: no GPU on a CI machine"),
    (r"nvidia-smi lists no GPU", "gpu tests: no GPU on a CI machine"),
    (r"^one GPU: no intra-host all-reduce$", "gpu test: needs two GPUs in one machine"),
    (r"^this machine has a working NVML$", "checks the no-driver path: only where there is no GPU"),
    # CI runs as root
    (r"^root reads files regardless of permissions$", "an unreadable file cannot be made for root"),
    # Debian 12 has Python 3.11 only; developers' machines may have a 3.8 (pyenv)
    (r"^no Python 3\.8 interpreter here$", "Debian 12 ships no Python 3.8"),
    # platform guards: never skip on Linux, where CI runs
    (r"^RLIMIT_AS as a memory bound: Linux$", "platform: not Linux"),
    (r"^ru_maxrss units and /proc are Linux's$", "platform: not Linux"),
    (r"^no /dev/zero$", "platform: no /dev/zero"),
    (r"^needs /dev/full$", "platform: no /dev/full"),
    (r"^no FIFOs( on this platform)?$", "platform: no FIFOs"),
)


@overload
def needed(reason: None) -> None: ...
@overload
def needed(reason: str) -> NoReturn: ...
def needed(reason: str | None) -> None:
    """Let the test go on when ``reason`` is None; else skip it, or fail it in CI.

    Args:
        reason: why the test cannot run here, saying what is missing (the skip's message), or None
            when it can.

    Raises:
        pytest.fail.Exception: ``reason`` is set and ``ROBUSTCTL_REQUIRE_TESTBED=1``.
        pytest.skip.Exception: ``reason`` is set, outside CI.
    """
    if reason is None:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def allowed_skip(message: str) -> str | None:
    """Why CI may skip a test with this skip message (from :data:`ALLOWED_SKIPS`), or None."""
    for pattern, why in ALLOWED_SKIPS:
        if re.search(pattern, message):
            return why
    return None


def skipped_tests(report: ET.Element) -> list[tuple[str, str]]:
    """(test, message) of every test case a pytest JUnit report shows skipped: skips and xfails alike
    (an expected failure proves no more than a skip). ``test`` is ``classname::name``; an xfail's
    message is prefixed with ``xfail: ``."""
    found = []
    for case in report.iter("testcase"):
        for skipped in case.findall("skipped"):
            message = skipped.get("message", "")
            if skipped.get("type") == "pytest.xfail":
                message = f"xfail: {message}"
            found.append((f"{case.get('classname', '')}::{case.get('name', '')}", message))
    return found
