"""``robustctl sweep --local --slurm`` as the real slurmd's HealthCheckProgram (Slurm 22.05 on 127.0.0.1).

Each of the 3 slurmd runs ``hc.sh`` every 5 s (``HealthCheckInterval=5``) with only
``SLURMD_NODENAME`` in its environment, as slurmd does; the script runs robustctl from this
checkout's virtual environment with a simulated NVML (``ROBUSTCTL_NVML_INJECTION``): a node whose
name is a file in ``faults/`` has one of its 2 GPUs missing. Every effect is read back through
``sinfo`` (the test bed's own commands), never through robustctl.

Every node is this one machine, so the ``host.load`` check reads the load of the whole test run: a run
whose only warning is that one counts as healthy (:func:`_code`), so no assertion depends on the load.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from robustctl.testing.fake_nvml import healthy_gpus, write_injection

from .slurmbed import STD_PATH, SlurmBed, require_slurmbed

pytestmark = pytest.mark.timeout(150)

INTERVAL_S = 5


def _wrapper(base: Path, conf: Path) -> Path:
    faults = base / "faults"
    faults.mkdir(exist_ok=True)
    write_injection(faults / "good.json", healthy_gpus(2))
    write_injection(faults / "bad.json", healthy_gpus(1))
    script = base / "hc.sh"
    script.write_text(
        "#!/bin/sh\n"
        "# HealthCheckProgram of the test bed: robustctl's own health check, with a simulated NVML.\n"
        f"export PATH={STD_PATH}\n"
        f"export SLURM_CONF={conf}\n"
        f"export ROBUSTCTL_SLURMBED={base}\n"
        f'inj={faults}/good.json; [ -e "{faults}/$SLURMD_NODENAME" ] && inj={faults}/bad.json\n'
        'export ROBUSTCTL_NVML_INJECTION="$inj"\n'
        f'echo "$(date +%s.%N) $SLURMD_NODENAME start" >> {base}/hc-runs.log\n'
        f'out={base}/runs/"$SLURMD_NODENAME-$(date +%s.%N).json"\n'
        f'{sys.executable} -m robustctl sweep --local --slurm --gpus 2 --quiet --json > "$out"\n'
        "rc=$?\n"
        f'echo "$(date +%s.%N) $SLURMD_NODENAME exit $rc $out" >> {base}/hc-runs.log\n'
        "exit $rc\n"
    )
    script.chmod(0o755)
    (base / "runs").mkdir(exist_ok=True)
    return script


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmBed]:
    """3 slurmd whose HealthCheckProgram is robustctl, every 5 s."""
    require_slurmbed()
    base = tmp_path_factory.mktemp("slurmhc")
    conf = base / "slurm.conf"
    script = _wrapper(base, conf)
    b = SlurmBed(
        base,
        3,
        extra_conf=[
            f"HealthCheckProgram={script}",
            f"HealthCheckInterval={INTERVAL_S}",
            "HealthCheckNodeState=ANY",
        ],
    )
    try:
        b.start(timeout_s=60)
        yield b
    finally:
        b.close()


def _code(rc: int, report: Path) -> int:
    """A run's exit code, a WARNING (1) raised by ``host.load`` alone read as healthy (0).

    Every node of the bed is this one machine: its load average is the whole test run's, not a node's.
    The other Slurm-bed tests switch that check off in their inventories (``slurmbed.LOAD_CHECK_OFF``);
    ``sweep --local`` reads no inventory, so the run's own report (``--json``) says which checks warned.
    """
    if rc != 1:
        return rc
    try:
        doc = json.loads(report.read_text())
    except (OSError, ValueError):
        return rc
    raised = {c["name"] for c in doc["checks"] if c["status"] not in ("ok", "not_applicable")}
    return 0 if raised == {"host.load"} and not doc["pending"] and not doc["findings"] else rc


def _runs(bed: SlurmBed, node: str, *, since: float = 0.0) -> list[int]:
    """Exit codes (:func:`_code`) of the health checks ``node`` finished after ``since`` (UNIX s)."""
    log = bed.base / "hc-runs.log"
    out = []
    for line in log.read_text().splitlines() if log.exists() else []:
        t, name, what, *rest = line.split()
        if name == node and what == "exit" and float(t) >= since:
            out.append(_code(int(rest[0]), Path(rest[1])))
    return out


def _exited(bed: SlurmBed, node: str, code: int, *, since: float, timeout_s: float = 15.0) -> list[int]:
    """The exit codes of ``node``'s runs since ``since`` once one is ``code``: the node's state changes
    inside a run (scontrol), and the wrapper logs the run's exit only after it returns."""
    deadline = time.monotonic() + timeout_s
    while code not in (runs := _runs(bed, node, since=since)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return runs


def _wait(bed: SlurmBed, node: str, want: tuple[str, str] | str, timeout_s: float = 40.0) -> tuple[str, str]:
    deadline = time.monotonic() + timeout_s
    seen = ("", "")
    while time.monotonic() < deadline:
        seen = bed.node_states()[node]
        if (seen[0] == want) if isinstance(want, str) else (seen == want):
            return seen
        time.sleep(0.2)
    raise AssertionError(
        f"{node} not {want} after {timeout_s:g} s: {seen}\n{(bed.base / 'hc-runs.log').read_text()}"
    )


def test_health_check_drains_a_faulty_node_resumes_it_and_never_clears_an_admin_drain(bed: SlurmBed) -> None:
    assert bed.node_states() == {n: ("idle", "none") for n in bed.nodes}
    admin = "admin: PSU swap scheduled"
    bed.cmd("scontrol", "update", "nodename=sn3", "state=drain", f"reason={admin}")

    t_fault = time.time()
    (bed.base / "faults" / "sn2").touch()
    _, reason = _wait(bed, "sn2", "drained")
    assert reason.startswith("robustctl: health check: nvml.count: 1 of 2 expected GPUs visible"), reason
    assert 2 in _exited(bed, "sn2", 2, since=t_fault)  # the drain came from a run that exited CRITICAL
    assert bed.node_states()["sn1"] == ("idle", "none")
    assert bed.node_states()["sn3"] == ("drained", admin)

    t_fixed = time.time()
    (bed.base / "faults" / "sn2").unlink()
    _wait(bed, "sn2", ("idle", "none"))
    assert 0 in _exited(bed, "sn2", 0, since=t_fixed)

    # Two more health-check rounds on the admin-drained node: healthy (exit 0), still drained as the admin left it.
    deadline = time.monotonic() + 4 * INTERVAL_S + 10
    while len(_runs(bed, "sn3", since=t_fixed)) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _runs(bed, "sn3", since=t_fixed)[:2] == [0, 0]
    assert bed.node_states()["sn3"] == ("drained", admin)
    assert bed.node_states()["sn1"] == ("idle", "none")
    # Every finished run took less than robustctl's 45 s budget (Slurm kills at 60 s).
    started: dict[str, float] = {}
    took: list[float] = []
    for line in (bed.base / "hc-runs.log").read_text().splitlines():
        t, name, what, *_ = line.split()
        if what == "start":
            started[name] = float(t)
        elif name in started:
            took.append(float(t) - started.pop(name))
    assert took and max(took) < 45, took
    print(f"health check runs: {len(took)}, longest {max(took):.2f} s")
