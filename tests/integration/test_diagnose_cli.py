"""``robustctl diagnose`` end to end: the real CLI, real sshd per host, simulated hardware faults."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from robustctl.probes import STREAM_BOOT
from robustctl.store import MachineState, Store
from robustctl.testing.fake_nvml import RemappedRows, healthy_gpus
from tests.support.needs import needed

from .testbed import FaultUnsupported, Testbed

GPUS = 2


def robustctl(*args: str, timeout: float = 300, state: Path | None = None) -> tuple[int, dict[str, Any], str]:
    """Run the CLI as a user would; return (exit code, --json document, stderr).

    Suspects are recorded in ``state`` when given, else not at all (``--no-record``).
    """
    record = ["--state", str(state)] if state is not None else ["--no-record"]
    proc = subprocess.run(
        [sys.executable, "-m", "robustctl", *args, *record, "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "HOME": "/nonexistent"},
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, doc, proc.stderr


def by_host(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {h["host"]: h for h in doc["hosts"]}


def failing_checks(host: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in host["checks"] if c["status"] in ("critical", "warning", "unknown")}


def test_all_healthy_through_every_level(testbed: Testbed, tmp_path: Path) -> None:
    inv = testbed.write_inventory(
        tmp_path / "inv.yaml",
        # The hosts share this machine's two cores, each measured in turn while other work may run:
        # the peer rules flag only a host at under a fifth of the fleet median here (the slow-host
        # test below names one at 0.15 of a core against the rule's default).
        thresholds={"allreduce_peer_ratio": 0.2, "burn_peer_ratio": 0.2},
        diagnose={
            "burn": {"seconds": 1, "size": 256, "threads": 1, "concurrency": 1},
            "allreduce": {"sizes": [1048576], "iters": 3, "concurrency": 1},
        },
    )
    code, doc, err = robustctl("diagnose", "-i", str(inv), timeout=600)
    assert code == 0, err
    assert doc["schema_version"] == 1 and doc["status"] == "ok" and doc["exit_code"] == 0
    assert [lv["ran"] for lv in doc["levels"]] == [True, True, True, True]
    hosts = by_host(doc)
    assert sorted(hosts) == testbed.names
    for name, h in hosts.items():
        assert h["status"] == "ok", (name, failing_checks(h))
        names = {c["name"] for c in h["checks"]}
        assert {"host.xid", "burn.verify", "allreduce.pair"} <= names
        # No GPU here: NVML checks say so, they are not "ok".
        assert all(c["status"] == "not_applicable" for c in h["checks"] if c["name"].startswith("nvml."))
    assert doc["suspects"] == [] and doc["unknown"] == []


def test_l0_names_exactly_the_faulty_hosts(testbed: Testbed, tmp_path: Path) -> None:
    for i in range(testbed.n_hosts):
        testbed.set_nvml(i, healthy_gpus(GPUS))
    xid_line = testbed.inject_xid(0, 79, pci="0000:3b:00")
    sick = list(healthy_gpus(GPUS))
    sick[1] = dataclasses.replace(sick[1], remapped_rows=RemappedRows(uncorrectable=1, pending=True))
    testbed.set_nvml(1, sick)
    testbed.degrade_nic(2)
    inv = testbed.write_inventory(tmp_path / "inv.yaml", gpus_per_host=GPUS)
    db = tmp_path / "state.db"
    code, doc, err = robustctl("diagnose", "-i", str(inv), state=db)
    assert code == 2, err
    names = testbed.names
    assert doc["suspects"] == names[:3]
    # Recorded as suspects in the state store; the healthy hosts stay unrecorded (the run stopped at
    # L0, so nobody was verified at every level).
    assert doc["recorded"]["marked"] == names[:3] and doc["recorded"]["cleared"] == []
    with Store.open(db) as s:
        assert [m.host for m in s.machines()] == sorted(names[:3])
        rec = s.machine(names[0])
        assert (
            rec is not None and rec.state is MachineState.SUSPECT and rec.reason.startswith("diagnose L0: ")
        )
        assert "79" in rec.reason
    assert [lv["ran"] for lv in doc["levels"]] == [True, False, False, False]  # stopped at L0
    hosts = by_host(doc)
    xid = failing_checks(hosts[names[0]])
    assert set(xid) == {"host.xid"}
    assert xid["host.xid"]["status"] == "critical"
    assert "79" in xid["host.xid"]["summary"]
    assert "0000:3b:00" in json.dumps(xid["host.xid"]["evidence"])
    remap = failing_checks(hosts[names[1]])
    assert set(remap) == {"nvml.row_remap"}
    assert remap["nvml.row_remap"]["device"] in ("1", "GPU 1", "gpu1") or "1" in str(
        remap["nvml.row_remap"]["device"]
    )
    nic = failing_checks(hosts[names[2]])
    assert set(nic) == {"host.nic"} and "eth0" in json.dumps(nic["host.nic"])
    for name in names[3:]:
        assert hosts[name]["status"] == "ok", failing_checks(hosts[name])
    assert xid_line  # the injected line is what the evidence came from


def test_stopped_and_frozen_sshd_are_unknown_within_the_deadline(testbed: Testbed, tmp_path: Path) -> None:
    testbed.stop_host(3)
    testbed.freeze_host(4)
    inv = testbed.write_inventory(
        tmp_path / "inv.yaml",
        ssh={"connect_timeout_s": 2},
        diagnose={"deadline_s": 30, "host_timeout_s": 20, "retries": 1, "retry_backoff_s": 0.1},
    )
    t0 = time.monotonic()
    code, doc, err = robustctl("diagnose", "-i", str(inv), "--level", "0")
    elapsed = time.monotonic() - t0
    assert code == 3, err
    assert elapsed < 30
    names = testbed.names
    hosts = by_host(doc)
    assert doc["unknown"] == [names[3], names[4]] and doc["suspects"] == []
    assert hosts[names[3]]["outcome"] == "unreachable" and "refused" in hosts[names[3]]["error"]
    assert hosts[names[4]]["outcome"] == "unreachable" and "banner" in hosts[names[4]]["error"]
    for i in (0, 1, 2, 5, 6, 7):
        assert hosts[names[i]]["status"] == "ok"


def test_slow_host_named_by_the_peer_rule(testbed: Testbed, tmp_path: Path) -> None:
    try:
        testbed.slow_host(5, cpu_fraction=0.15)
    except FaultUnsupported as exc:
        needed(str(exc))
    # The cgroup caps host 5 at 0.15 of a core; a healthy host's serial burn gets a whole core on an
    # idle machine and about two thirds of one beside a busy loop on each of the two cores. The rule
    # is set at half the fleet median: a 3x margin for the slowed host at that load, and a healthy
    # host would have to lose half its share during its own 2 s to be named.
    inv = testbed.write_inventory(
        tmp_path / "inv.yaml",
        thresholds={"burn_peer_ratio": 0.5},
        diagnose={"burn": {"seconds": 2, "size": 256, "threads": 1, "concurrency": 1}},
    )
    code, doc, err = robustctl("diagnose", "-i", str(inv), "--level", "1")
    assert code == 2, err
    name = testbed.names[5]
    assert doc["suspects"] == [name]
    peer = failing_checks(by_host(doc)[name])["burn.peer"]
    assert peer["evidence"]["value"] < 0.9 * peer["evidence"]["fleet_median"]


def test_probe_crash_on_one_host_loses_no_other_result(testbed: Testbed, tmp_path: Path) -> None:
    base = testbed.inventory_dict()
    entries = testbed.host_entries(range(1, testbed.n_hosts))
    broken = {"name": testbed.names[0], "address": testbed.address(0), "python": {"path": "/bin/false"}}
    inv = testbed.write_inventory(tmp_path / "inv.yaml", hosts=[broken, *entries])
    assert base["hosts"]
    code, doc, err = robustctl("diagnose", "-i", str(inv), "--level", "0")
    assert code == 3, err
    hosts = by_host(doc)
    assert hosts[testbed.names[0]]["status"] == "unknown"
    assert "probes host, nvml failed" in json.dumps(hosts[testbed.names[0]]["checks"])
    assert all(hosts[n]["status"] == "ok" for n in testbed.names[1:])


def test_hosts_selection_and_output_file(testbed: Testbed, tmp_path: Path) -> None:
    inv = testbed.write_inventory(tmp_path / "inv.yaml")
    out = tmp_path / "report.json"
    pattern = f"{testbed.names[0]},{testbed.names[2]}"
    code, doc, err = robustctl("diagnose", "-i", str(inv), "--hosts", pattern, "--level", "0", "-o", str(out))
    assert code == 0, err
    assert [h["host"] for h in doc["hosts"]] == [testbed.names[0], testbed.names[2]]
    assert json.loads(out.read_text()) == doc


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_the_remote_probes_and_exits_130(testbed: Testbed, tmp_path: Path, sig: int) -> None:
    # The burn runs on two hosts over SSH; the signal closes the connections, each probe's lifeline
    # (its standard input) ends, and the probe kills its own process group on the host. The hosts'
    # sshd run here, so their processes are seen here (told apart by the host's probe root).
    inv = testbed.write_inventory(
        tmp_path / "inv.yaml",
        hosts=[0, 1],
        diagnose={"burn": {"seconds": 120, "size": 64, "threads": 1}, "host_timeout_s": 300},
    )
    roots = {str(testbed.hosts[i].root) for i in (0, 1)}

    def remote_burns() -> list[int]:
        found = []
        for p in psutil.process_iter(["pid", "cmdline"]):
            argv = p.info["cmdline"] or []
            if STREAM_BOOT in argv and "--seconds" in argv:
                try:
                    if p.environ().get("ROBUSTCTL_PROBE_ROOT") in roots:
                        found.append(p.info["pid"])
                except psutil.Error:
                    pass
        return found

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "robustctl",
            "diagnose",
            "-i",
            str(inv),
            "-l",
            "1",
            "--all-levels",
            "--no-record",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "HOME": "/nonexistent"},
    )
    try:
        deadline = time.monotonic() + 120
        while len(remote_burns()) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        burns = remote_burns()
        assert len(burns) == 2, proc.stderr.read() if proc.poll() is not None else "burns never started"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    lines = [ln for ln in err.splitlines() if "interrupted" in ln]
    assert len(lines) == 1 and lines[0].startswith(
        f"robustctl: diagnose interrupted by {signal.Signals(sig).name}; "
    )
    assert lines[0].endswith("stopped what was running on 2 host(s): node[01-02]") and "Traceback" not in err
    deadline = time.monotonic() + 15
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in burns):
        assert time.monotonic() < deadline, f"remote burns still running: {burns}"
        time.sleep(0.1)
