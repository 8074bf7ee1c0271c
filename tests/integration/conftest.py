"""Fixtures of the SSH testbed (see ``testbed.py``), shared by every integration test.

Fixtures:
    ``testbed_session`` (session): one started :class:`Testbed` of 8 hosts (``ROBUSTCTL_TESTBED_HOSTS``
        overrides), reused by the whole run, stopped at its end.
    ``testbed`` (function): the same testbed, healthy at the start of the test;
        :meth:`Testbed.reset_faults` runs after the test, failed or not.
    ``inventory`` (function): a YAML inventory file naming every host of ``testbed``.

Every test under ``tests/integration`` is marked ``integration``. Where the testbed cannot run (not
root, no sshd) the tests skip with the reason; with ``ROBUSTCTL_REQUIRE_TESTBED=1`` (set by ``.ci/run``)
they fail instead, so CI can never pass by skipping them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .testbed import Testbed, unavailable_reason

_HERE = Path(__file__).parent
_started: list[Testbed] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test in this directory ``integration``."""
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)


def require_testbed() -> None:
    """Skip (or, under ``ROBUSTCTL_REQUIRE_TESTBED=1``, fail) the test when the testbed cannot run."""
    reason = unavailable_reason()
    if reason is None:
        return
    if os.environ.get("ROBUSTCTL_REQUIRE_TESTBED") == "1":
        pytest.fail(f"ROBUSTCTL_REQUIRE_TESTBED=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def testbed_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """A started testbed of ``ROBUSTCTL_TESTBED_HOSTS`` (default 8) hosts for the whole session."""
    require_testbed()
    n = int(os.environ.get("ROBUSTCTL_TESTBED_HOSTS", "8"))
    tb = Testbed(tmp_path_factory.mktemp("testbed"), n)
    try:
        tb.start()
        _started.append(tb)
        yield tb
    finally:
        tb.close()


@pytest.fixture
def testbed(testbed_session: Testbed) -> Iterator[Testbed]:
    """The session testbed, healthy when the test starts; its faults are reset after the test."""
    tb = testbed_session
    try:
        yield tb
    finally:
        tb.reset_faults()


@pytest.fixture
def inventory(testbed: Testbed, tmp_path: Path) -> Path:
    """A YAML inventory of every testbed host (``Testbed.write_inventory`` defaults)."""
    return testbed.write_inventory(tmp_path / "inventory.yaml")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line per testbed started in this run: hosts, port, startup wall time."""
    for tb in _started:
        terminalreporter.write_line(
            f"ssh testbed: {tb.n_hosts} hosts on 127.0.0.2-{tb.address(-1)}:{tb.port}, "
            f"started in {tb.startup_s:.2f}s"
        )
