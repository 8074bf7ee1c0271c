"""L3 inter-host all-reduce on hosts known only by their names, as on a real cluster.

The inventory gives names (``node01``…) and no addresses, so every address is a name to resolve.

**Names.** Each name resolves to its host's 127.0.0.x address through a hosts file bind-mounted over
``/etc/hosts`` in a private mount namespace (``unshare -m``): the control side (the CLI, paramiko)
runs in one, and every command on a simulated host runs in one through the inventory's python
wrapper, the way a real host's commands enter its training container. glibc's resolver reads the
file, so paramiko, Python's ``socket``, torch's TCPStore and gloo (``getaddrinfo``) all see the
names; nothing outside the namespaces changes. (``HOSTALIASES`` cannot do this: it maps names to
other names, only on glibc's DNS path, and sshd does not pass the client's environment through.)

**One loopback for all.** The simulated hosts share this machine's loopback, so a rank that dials
``127.0.0.1`` would reach another simulated host's rank 0 and L3 would pass even with a wrong
rendezvous address. :meth:`Testbed.refuse_loopback_ports` refuses 127.0.0.1 on the L3 rendezvous
ports, as a real host refuses a connection to its own loopback where nothing listens: rank 0 is
reachable only at its host's own address.

**The slow host.** The testbed can shape only the flows a host *accepts* (on one loopback, a
host's outgoing connections leave from 127.0.0.1). In an L3 pair the second rank dials the first
(the TCPStore, then gloo), so the flows of host S's two pairs are those accepted by S (from its ring
successor) and by its predecessor (from S): :meth:`Testbed.throttle_inbound` on those two addresses
slows exactly S's pairs, and L3 must name S alone. Nothing else is slowed: sshd's port is exempt and
L2 runs on each host's own loopback. (A CPU quota is no substitute: the slow host's torch import
makes its healthy peers' rendezvous time out, and gloo on loopback barely slows down.) The fleet
peer rule of L1 and L2 is switched off (``peer_min_peers`` above the host count) so that a noisy
2-core machine cannot stop the run before L3; L3's pair blame has its own minimum.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.needs import needed

from .testbed import FaultUnsupported, Testbed, find_free_port

REPO = Path(__file__).resolve().parents[2]
N_HOSTS = 5
SLOW = 2
# sh -c SCRIPT HOSTS_FILE ARGV...: $0 is the hosts file, "$@" the command to run with it.
IN_NAMESPACE = 'mount --bind "$0" /etc/hosts && exec "$@"'


def namespace_prefix(hosts_file: Path) -> list[str]:
    """argv prefix running a command in a private mount namespace where ``hosts_file`` is /etc/hosts."""
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", IN_NAMESPACE, str(hosts_file)]


def write_hosts_file(tb: Testbed, path: Path) -> Path:
    """This machine's /etc/hosts plus one line per simulated host: ``127.0.0.N nodeNN``."""
    base = Path("/etc/hosts").read_text()
    path.write_text(base.rstrip("\n") + "\n" + "".join(f"{h.address} {h.name}\n" for h in tb.hosts))
    return path


def write_known_hosts(tb: Testbed, path: Path) -> Path:
    """Host keys under the names the control side dials (``[node01]:PORT``)."""
    lines = []
    for h in tb.hosts:
        key_type, key = h.host_key.with_name(h.host_key.name + ".pub").read_text().split()[:2]
        lines.append(f"[{h.name}]:{tb.port} {key_type} {key}\n")
    path.write_text("".join(lines))
    return path


def robustctl_named(hosts_file: Path, *args: str, timeout: float = 600) -> tuple[int, dict[str, Any], str]:
    """Run the CLI of this checkout inside a namespace where the testbed's names resolve."""
    proc = subprocess.run(
        [*namespace_prefix(hosts_file), sys.executable, "-m", "robustctl", *args, "--no-record", "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "HOME": "/nonexistent", "PYTHONPATH": str(REPO)},
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, doc, proc.stderr


def problems(doc: dict[str, Any]) -> dict[str, list[str]]:
    """Per host, its checks that are not ok (for assertion messages)."""
    return {
        h["host"]: [
            f"{c['name']} {c['status']}: {c['summary']}"
            for c in h["checks"]
            if c["status"] not in ("ok", "not_applicable")
        ]
        for h in doc.get("hosts", [])
    }


def pair_check(doc: dict[str, Any], host: str) -> dict[str, Any]:
    checks = next(h for h in doc["hosts"] if h["host"] == host)["checks"]
    return next(c for c in checks if c["name"] == "allreduce.pair")


@pytest.fixture
def named(testbed: Testbed, tmp_path: Path) -> tuple[Testbed, Path, Path]:
    """(testbed, hosts file, inventory naming hosts 0-4 by name only)."""
    if testbed.n_hosts < N_HOSTS:
        needed(f"needs a testbed of at least {N_HOSTS} hosts (ROBUSTCTL_TESTBED_HOSTS)")
    probe = subprocess.run(
        [*namespace_prefix(Path("/etc/hosts")), "true"], capture_output=True, text=True, timeout=30
    )
    if probe.returncode != 0:
        needed(f"no private mount namespace here: {probe.stderr.strip()}")
    hosts_file = write_hosts_file(testbed, tmp_path / "hosts")
    known = write_known_hosts(testbed, tmp_path / "known_hosts")
    master_port = find_free_port(["127.0.0.1", *testbed.addresses[:N_HOSTS]], attempts=50)
    inv = testbed.write_inventory(
        tmp_path / "inv.yaml",
        hosts=[{"name": testbed.name(i)} for i in range(N_HOSTS)],  # no address: the name is the address
        ssh={"known_hosts": str(known)},
        python={"path": testbed.python, "wrapper": namespace_prefix(hosts_file)},
        thresholds={"allreduce_peer_ratio": 0.5, "peer_min_peers": 100},
        diagnose={
            "host_timeout_s": 40,
            "deadline_s": 500,
            "burn": {"seconds": 0.5, "size": 128, "threads": 1, "concurrency": 1},
            "allreduce": {
                "sizes": [1 << 20, 4 << 20],
                "iters": 2,
                "concurrency": 1,
                "master_port": master_port,
            },
        },
    )
    try:
        testbed.refuse_loopback_ports(master_port + 1, master_port + N_HOSTS)
    except FaultUnsupported as exc:
        needed(str(exc))
    return testbed, hosts_file, inv


def test_l3_on_named_hosts_passes_the_healthy_and_names_the_slow_one(
    named: tuple[Testbed, Path, Path],
) -> None:
    tb, hosts_file, inv = named
    tb.throttle_inbound(SLOW)  # flows of pair (SLOW, SLOW+1)
    tb.throttle_inbound(SLOW - 1)  # flows of pair (SLOW-1, SLOW)
    code, doc, err = robustctl_named(hosts_file, "diagnose", "-i", str(inv), "--level", "3")
    names = tb.names[:N_HOSTS]
    slow = names[SLOW]
    summary = json.dumps([problems(doc), doc.get("levels")], indent=1) if doc.get("hosts") else err
    assert code == 2, summary
    assert [lv["ran"] for lv in doc["levels"]] == [True, True, True, True], doc["levels"]
    assert doc["suspects"] == [slow], summary
    assert doc["levels"][3]["suspects"] == [slow]
    bad = pair_check(doc, slow)
    assert bad["status"] == "critical" and "every neighbour" in bad["summary"] and "slow" in bad["summary"]
    for name in names:
        if name != slow:
            check = pair_check(doc, name)
            assert check["status"] == "ok", (name, check["summary"])
            assert all(p["ok"] for p in check["evidence"]["pairs"] if p["peer"] != slow), check
    assert os.path.exists(hosts_file)  # the machine's own /etc/hosts was never touched
    assert not any(n in Path("/etc/hosts").read_text().split() for n in names)


def interface_inventory(tb: Testbed, path: Path, interface: str) -> Path:
    return tb.write_inventory(
        path,
        hosts=[0, 1],
        thresholds={"peer_min_peers": 100},
        diagnose={
            "host_timeout_s": 40,
            "burn": {"seconds": 0.5, "size": 128, "threads": 1},
            "allreduce": {"sizes": [1 << 20], "iters": 2, "interface": interface},
        },
    )


def robustctl_plain(*args: str, timeout: float = 600) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "robustctl", *args, "--no-record", "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "HOME": "/nonexistent", "PYTHONPATH": str(REPO)},
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {}, proc.stderr


def test_l3_on_an_interface_asks_each_host_for_its_address(testbed: Testbed, tmp_path: Path) -> None:
    """Over real SSH: ``lo`` exists on every simulated host (all share this machine's), so L3 meets
    on the 127.0.0.1 each host reports; a missing interface is UNKNOWN with the reason, not loopback."""
    inv = interface_inventory(testbed, tmp_path / "lo.yaml", "lo")
    code, doc, err = robustctl_plain("diagnose", "-i", str(inv), "--level", "3")
    assert code == 0, json.dumps(problems(doc), indent=1) if doc else err
    assert doc["levels"][3]["ran"] is True
    for name in testbed.names[:2]:
        assert pair_check(doc, name)["status"] == "ok"

    inv = interface_inventory(testbed, tmp_path / "none.yaml", "nosuch0")
    code, doc, err = robustctl_plain("diagnose", "-i", str(inv), "--level", "3")
    assert code == 3, json.dumps(problems(doc), indent=1) if doc else err
    for name in testbed.names[:2]:
        check = pair_check(doc, name)
        assert check["status"] == "unknown"
        assert check["summary"].startswith("not run: no address for interface nosuch0:"), check
        assert "No such device" in check["summary"]
