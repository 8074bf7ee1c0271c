"""``robustctl sweep`` end to end on the SSH test bed: real sshd per loopback host, simulated faults.

Four hosts of the session test bed (node01-node04 on 127.0.0.2-5; node04 a standby). The first sweep
finds node02's kernel log reporting XID 79 (hardware class: named at once) and node03's NIC down
(network class, seen once: pending, not named); the history records both, the Prometheus textfile
parses with the official client and says so. The faults are removed; the second sweep finds every
host healthy and the history records the state changes back, the failure counted once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from robustctl.store import Store
from robustctl.sweep import history

from .testbed import Testbed

HOSTS = range(4)


def robustctl(*args: str, home: Path, timeout: float = 300) -> tuple[int, dict[str, Any], str]:
    """Run the CLI as a user would; return (exit code, --json document, stderr)."""
    proc = subprocess.run(
        [sys.executable, "-m", "robustctl", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "HOME": str(home)},
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, doc, proc.stderr


def metrics(path: Path) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """The textfile through prometheus_client's parser: {sample name: {sorted labels: value}}."""
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(path.read_text()):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def per_host(m: dict[str, dict[tuple[tuple[str, str], ...], float]], name: str) -> dict[str, float]:
    return {dict(k)["host"]: v for k, v in m[name].items()}


def test_sweep_names_the_fault_records_it_and_the_recovery(testbed: Testbed, tmp_path: Path) -> None:
    n = [testbed.name(i) for i in HOSTS]
    entries = testbed.host_entries(range(3)) + testbed.host_entries([3], state="standby")
    inv = testbed.write_inventory(tmp_path / "inv.yaml", entries)
    state, prom, page = tmp_path / "state.db", tmp_path / "robustctl.prom", tmp_path / "index.html"
    sweep = ("sweep", "-i", str(inv), "--state", str(state), "--textfile", str(prom), "--html", str(page))

    xid_line = testbed.inject_xid(1, 79)
    testbed.degrade_nic(2)
    code, doc, err = robustctl(*sweep, home=tmp_path)
    assert code == 2, err
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert sorted(hosts) == n
    # the verdicts after the policy: hardware (XID 79) named at once; network (NIC down, seen once)
    # pending, not named, so that host is a warning
    assert {h: v["status"] for h, v in hosts.items()} == dict(zip(n, ["ok", "critical", "warning", "ok"]))
    assert [h for h, v in hosts.items() if v["named"]] == [n[1]]
    assert hosts[n[1]]["checks"]["host.xid"] == "critical"
    assert hosts[n[2]]["pending"] == ["host.nic"] and not hosts[n[2]]["named"]
    decisions = {d["host"]: d for d in doc["decisions"]}
    assert [(f["check"], f["check_class"], f["confirmed"]) for f in decisions[n[1]]["findings"]] == [
        ("host.xid", "hardware", True)
    ]
    assert [(f["check"], f["check_class"], f["confirmed"]) for f in decisions[n[2]]["findings"]] == [
        ("host.nic", "network", False)
    ]
    assert all(h["max_level"] == 0 for h in doc["hosts"])

    m = metrics(prom)
    assert per_host(m, "robustctl_host_named") == {n[0]: 0, n[1]: 1, n[2]: 0, n[3]: 0}
    assert per_host(m, "robustctl_host_failures_total") == {n[0]: 0, n[1]: 1, n[2]: 0, n[3]: 0}
    assert m["robustctl_check_status"][(("check", "host.xid"), ("host", n[1]), ("status", "critical"))] == 1
    assert m["robustctl_check_status"][(("check", "host.nic"), ("host", n[2]), ("status", "critical"))] == 1
    assert m["robustctl_sweep_hosts"][(("status", "critical"),)] == 1
    first_run = m["robustctl_sweep_last_run_timestamp_seconds"][()]

    with Store.open(state) as store:
        xid = [c for c in history.changes(store, host=n[1]) if c.check == "host.xid"]
        assert [(c.from_status, c.to_status) for c in xid] == [(None, "critical")]
        assert "XID 79" in xid[0].detail and "0000:3b:00" in xid_line and "0000:3b:00" in xid[0].detail
        assert xid[0].source == "sweep"
        assert history.counters(store)[n[1]].failures == 1
    assert 'data-host="' + n[1] + '" data-check="host.xid"' in page.read_text()

    # faults removed: the next sweep records the recovery
    testbed.reset_faults()
    code, doc2, err = robustctl(*sweep, home=tmp_path)
    assert code == 0, err
    assert {h["host"]: h["status"] for h in doc2["hosts"]} == dict.fromkeys(n, "ok")
    assert not any(h["named"] or h["pending"] for h in doc2["hosts"])
    m = metrics(prom)
    assert per_host(m, "robustctl_host_named") == dict.fromkeys(n, 0)
    assert per_host(m, "robustctl_host_failures_total") == {n[0]: 0, n[1]: 1, n[2]: 0, n[3]: 0}
    assert per_host(m, "robustctl_host_observations_total") == dict.fromkeys(n, 2)
    assert m["robustctl_sweep_last_run_timestamp_seconds"][()] > first_run

    code, hist, err = robustctl("history", n[1], "--since", "1d", "--state", str(state), home=tmp_path)
    assert code == 0, err
    xid_changes = [(c["from_status"], c["to_status"]) for c in hist["changes"] if c["check"] == "host.xid"]
    assert xid_changes == [(None, "critical"), ("critical", "ok")]
    assert [(c["from_status"], c["to_status"]) for c in hist["changes"] if c["check"] == "(host)"] == [
        (None, "critical"),
        ("critical", "ok"),
    ]
    assert hist["counters"]["seen"] == 2 and hist["counters"]["failures"] == 1
    code, hist3, err = robustctl("history", n[2], "--since", "1d", "--state", str(state), home=tmp_path)
    assert [(c["from_status"], c["to_status"]) for c in hist3["changes"] if c["check"] == "host.nic"] == [
        (None, "critical"),
        ("critical", "ok"),
    ]
    with Store.open(state) as store:
        sweeps = history.last_sweeps(store, 5)
        assert [(s.hosts, s.status) for s in sweeps] == [(4, "ok"), (4, "critical")]
