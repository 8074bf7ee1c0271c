"""Fixtures of the SSH testbed (see ``testbed.py``), shared by every integration test.

Fixtures:
    ``testbed_session`` (session): one started :class:`Testbed` of 8 hosts (``ROBUSTCTL_TESTBED_HOSTS``
        overrides), reused by the whole run, stopped at its end.
    ``testbed`` (function): the same testbed, healthy at the start of the test;
        :meth:`Testbed.reset_faults` runs after the test, failed or not.
    ``inventory`` (function): a YAML inventory file naming every host of ``testbed``.
    ``slurm_bed`` (session) and ``slurm_cluster`` (function): one 5-node Slurm bed for the run
        (``slurmbed.py``), idle with no job at the start of each test.
    ``stacks_job`` (session) and ``training_stacks_job`` (function): one 16-rank minimegatron job
        (tp=2, pp=2, dp=4, 4 ranks on each of node01-node04) for every stacks test; it runs from its
        first test to the last test in a row that uses it (:func:`pytest_runtest_teardown` stops it),
        and ``training_stacks_job`` hands it over with no fault and training, relaunched if needed.

Every test under ``tests/integration`` is marked ``integration``. Where the testbed cannot run (not
root, no sshd) the tests skip with the reason; with ``ROBUSTCTL_REQUIRE_TESTBED=1`` (set by ``.ci/run``)
they fail instead, so CI can never pass by skipping them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.needs import needed

from .jobrunner import MiniJob
from .slurmbed import slurm_bed, slurm_cluster
from .testbed import Testbed, unavailable_reason

__all__ = ["slurm_bed", "slurm_cluster"]  # the run's one 5-node Slurm bed (slurmbed.py), for every module

_HERE = Path(__file__).parent
_started: list[Testbed] = []
_shared_jobs: dict[str, MiniJob] = {}  # fixture name -> the session job it yields


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test in this directory ``integration``."""
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)


def require_testbed() -> None:
    """Skip the test when the testbed cannot run; fail it in CI (:func:`tests.support.needs.needed`)."""
    needed(unavailable_reason())


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


@pytest.fixture(scope="session")
def stacks_job(testbed_session: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniJob]:
    """The 16-rank job of the stacks tests (tp=2, pp=2, dp=4, 4 ranks per host on node01-node04),
    past its second step. Little host-side pacing (``--idle-ms 30``): a straggler stands out by its
    compute, not hidden in idle time."""
    if testbed_session.n_hosts < 4:
        needed("needs a testbed of at least 4 hosts (ROBUSTCTL_TESTBED_HOSTS)")
    workdir = tmp_path_factory.mktemp("stacks-job")
    job = MiniJob(
        testbed_session,
        workdir,
        tp=2,
        pp=2,
        dp=4,
        ranks_per_host=4,
        ckpt_every=3,
        job_args=["--idle-ms", "30"],
    )
    _shared_jobs["stacks_job"] = job
    try:
        job.start(timeout=150)
        job.wait_step(2, timeout=60)
        yield job
    finally:
        _shared_jobs.pop("stacks_job", None)
        job.stop()


@pytest.fixture
def training_stacks_job(stacks_job: MiniJob) -> Iterator[MiniJob]:
    """The stacks job with no fault and training when the test starts (relaunched from its newest
    checkpoint when an earlier test left it stopped or stuck); its faults are cleared after the test."""
    stacks_job.ensure_training()
    try:
        yield stacks_job
    finally:
        stacks_job.clear_faults()


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop a shared job after the last test in a row that uses it: it would otherwise train on
    (16 ranks' worth of CPU) under every later test. A later user relaunches it
    (:meth:`MiniJob.ensure_training`)."""
    for name, job in _shared_jobs.items():
        if name in getattr(item, "fixturenames", ()) and (
            nextitem is None or name not in getattr(nextitem, "fixturenames", ())
        ):
            job.stop()
