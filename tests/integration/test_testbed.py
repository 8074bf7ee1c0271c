"""Tests of the SSH testbed itself, with plain paramiko (not robustctl's transport)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import socket
import time
from pathlib import Path

import paramiko
import psutil
import pytest
import yaml

from tests.support.needs import needed

from .testbed import FaultUnsupported, Testbed, running_testbed

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

PRINT_ENV = (
    "import importlib.util, json, os, sys; print(json.dumps({"
    "'root': os.environ.get('ROBUSTCTL_PROBE_ROOT'), 'nvml': os.environ.get('ROBUSTCTL_NVML_INJECTION'),"
    "'python': sys.executable, 'torch': importlib.util.find_spec('torch') is not None}))"
)

# About 0.1 s of CPU; prints the wall and CPU seconds the loop took, then /proc/self/cgroup.
CPU_LOOP = (
    "import time; w = time.perf_counter(); c = time.process_time(); n = 0\n"
    "for i in range(1_500_000): n += i * i\n"
    "print(time.perf_counter() - w, time.process_time() - c)\n"
    "print(open('/proc/self/cgroup').read())"
)


def _client(
    tb: Testbed, i: int, *, known_hosts: Path | None = None, timeout: float = 5.0
) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts or tb.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.connect(
            tb.address(i),
            port=tb.port,
            username=tb.user,
            key_filename=str(tb.identity_file),
            look_for_keys=False,
            allow_agent=False,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
        )
    except BaseException:
        client.close()
        raise
    return client


def test_every_host_has_its_own_probe_root_and_the_venv_python(testbed: Testbed) -> None:
    def ask(i: int) -> dict[str, object]:
        r = testbed.exec(i, ["python3", "-c", PRINT_ENV], timeout=30)
        assert r.exit_status == 0, r.stderr.decode()
        assert r.stderr == b"", r.stderr.decode()  # e.g. no "Could not chdir to home directory"
        return json.loads(r.stdout)

    with concurrent.futures.ThreadPoolExecutor(testbed.n_hosts) as pool:
        answers = list(pool.map(ask, range(testbed.n_hosts)))
    for i, env in enumerate(answers):
        assert env["root"] == str(testbed.host_root(i))
        assert env["nvml"] == str(testbed.nvml_path(i))
        assert env["python"] == str(Path(testbed.python).parent / "python3")
        assert env["torch"] is True, "python3 on a host must have torch for the burn/allreduce probes"
    assert len({a["root"] for a in answers}) == testbed.n_hosts


def test_host_roots_are_seeded_with_real_formats(testbed: Testbed) -> None:
    root = testbed.host_root(0)
    meminfo = dict(line.split(":", 1) for line in (root / "proc/meminfo").read_text().splitlines())
    assert meminfo["MemTotal"].split()[1] == "kB"
    assert len((root / "proc/loadavg").read_text().split()) == 5
    for line in (root / "proc/mounts").read_text().splitlines():
        _dev, mnt, _fstype, _opts, _, _ = line.split()
        assert (root / mnt.lstrip("/")).is_dir(), mnt
        os.statvfs(root / mnt.lstrip("/"))
    assert (root / "sys/class/net/eth0/operstate").read_text() == "up\n"
    assert (root / "sys/class/infiniband/mlx5_0/ports/1/state").read_text() == "4: ACTIVE\n"
    assert "NVRM: Xid" not in testbed.kern_log(0).read_text()


def test_fault_helpers_write_real_formats_and_reset_restores(testbed: Testbed) -> None:
    line = testbed.inject_xid(2)
    assert line.endswith(
        "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    )
    assert f" {testbed.name(2)} kernel: [" in line
    testbed.degrade_nic(3)
    testbed.degrade_ib(3)
    testbed.set_mount_readonly(4, "/raid")
    eth = testbed.host_root(3) / "sys/class/net/eth0"
    assert (eth / "operstate").read_text() == "down\n" and (eth / "carrier").read_text() == "0\n"
    assert " /raid xfs ro," in (testbed.host_root(4) / "proc/mounts").read_text()

    testbed.reset_faults()
    assert "Xid" not in testbed.kern_log(2).read_text()
    assert (eth / "operstate").read_text() == "up\n"
    assert " /raid xfs rw," in (testbed.host_root(4) / "proc/mounts").read_text()


def test_known_hosts_verifies_with_reject_policy(testbed: Testbed, tmp_path: Path) -> None:
    client = _client(testbed, 0)
    client.close()

    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        _client(testbed, 0, known_hosts=empty)

    # host 1 presenting a key that is not the one recorded for it
    swapped = tmp_path / "swapped_known_hosts"
    lines = testbed.known_hosts.read_text().splitlines()
    key0 = lines[0].split(" ", 1)[1]
    swapped.write_text(f"[{testbed.address(1)}]:{testbed.port} {key0}\n")
    with pytest.raises(paramiko.BadHostKeyException):
        _client(testbed, 1, known_hosts=swapped)


def test_stopped_host_refuses_and_restarts(testbed: Testbed) -> None:
    testbed.stop_host(1)
    t0 = time.monotonic()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((testbed.address(1), testbed.port), timeout=5).close()
    assert time.monotonic() - t0 < 4.0  # refused at once: a dropped SYN would wait out the 5 s instead
    with pytest.raises(paramiko.ssh_exception.NoValidConnectionsError):
        _client(testbed, 1)
    assert testbed.exec(0, ["true"]).exit_status == 0  # the others are untouched

    testbed.start_host(1)
    assert testbed.exec(1, ["true"]).exit_status == 0


def test_frozen_host_times_out_at_the_banner(testbed: Testbed) -> None:
    testbed.freeze_host(2)
    t0 = time.monotonic()
    with pytest.raises(paramiko.SSHException):  # SSHClient reports it as "No existing session"
        _client(testbed, 2, timeout=1.0)
    elapsed = time.monotonic() - t0
    assert 0.9 < elapsed < 5.0, elapsed

    sock = socket.create_connection((testbed.address(2), testbed.port), timeout=2)
    transport = paramiko.Transport(sock)
    transport.banner_timeout = 1.0
    try:
        with pytest.raises(paramiko.SSHException, match="banner"):
            transport.start_client(timeout=5)
    finally:
        transport.close()
    # TCP itself still connects: the kernel completes the handshake for the stopped listener
    socket.create_connection((testbed.address(2), testbed.port), timeout=2).close()

    testbed.thaw_host(2)
    assert testbed.exec(2, ["true"]).exit_status == 0


def test_slow_host_runs_slower(testbed: Testbed) -> None:
    needed(testbed.slow_unsupported_reason())
    testbed.slow_host(3, cpu_fraction=0.1)
    cgroup = testbed.host(3).cgroup
    assert cgroup is not None

    def loop(i: int) -> tuple[float, float, str]:
        """(wall s, CPU s, /proc/self/cgroup) of CPU_LOOP run on host ``i``."""
        r = testbed.exec(i, ["python3", "-c", CPU_LOOP], timeout=60)
        assert r.exit_status == 0, r.stderr.decode()
        first, cgroups = r.stdout.decode().split("\n", 1)
        wall, cpu = (float(x) for x in first.split())
        return wall, cpu, cgroups

    # What host 3's sshd starts runs in its cgroup, held to 0.1 CPU: a cap, which other load on the
    # machine only pushes further down. The loop's ~0.1 s of CPU at 10 ms per 100 ms period spans ~10
    # periods (over 5 even on a CPU twice as fast): at most 6/5 x 0.1 of its wall time; 0.2 is the margin.
    wall, cpu, cgroups = loop(3)
    assert cgroup.path.name in cgroups, cgroups
    assert cpu / wall < 0.2, f"slow host: {cpu:.3f} s of CPU in {wall:.3f} s"
    assert cgroup.path.name not in loop(0)[2]  # the other hosts are not held

    testbed.unslow_host(3)
    assert cgroup.path.name not in loop(3)[2] and not cgroup.path.exists()  # the quota is gone


def test_blocked_host_times_out_at_connect(testbed: Testbed) -> None:
    try:
        testbed.block_host(4)
    except FaultUnsupported as exc:
        needed(str(exc))
    t0 = time.monotonic()
    with pytest.raises((TimeoutError, socket.timeout)):
        socket.create_connection((testbed.address(4), testbed.port), timeout=1.0).close()
    assert time.monotonic() - t0 < 10.0  # the 1 s timeout, not the kernel's SYN retries (about 2 min)
    assert testbed.exec(5, ["true"]).exit_status == 0  # same port, other address: not blocked

    testbed.unblock_host(4)
    assert testbed.exec(4, ["true"]).exit_status == 0


def test_many_concurrent_logins_to_every_host(testbed: Testbed) -> None:
    jobs = [i for i in range(testbed.n_hosts) for _ in range(4)]
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda i: testbed.exec(i, ["echo", testbed.name(i)], timeout=30), jobs))
    assert [r.stdout.decode().strip() for r in results] == [testbed.name(i) for i in jobs]


def test_inventory_names_every_host_in_the_agreed_schema(testbed: Testbed, tmp_path: Path) -> None:
    path = testbed.write_inventory(tmp_path / "inv.yaml", diagnose={"deadline_s": 30}, gpus_per_host=8)
    inv = yaml.safe_load(path.read_text())
    assert set(inv) == {"ssh", "python", "gpus_per_host", "hosts", "diagnose"}
    assert inv["ssh"]["port"] == testbed.port and inv["ssh"]["user"] == testbed.user
    assert inv["python"]["path"] == testbed.python
    assert inv["gpus_per_host"] == 8
    assert inv["diagnose"] == {"concurrency": 64, "host_timeout_s": 60, "deadline_s": 30, "retries": 1}
    assert inv["hosts"][0]["name"] == "node[01-08]" and inv["hosts"][0]["address"] == "127.0.0.[2-9]"

    subset = testbed.inventory_dict([0, 2, 3])["hosts"]
    assert [(h["name"], h["address"]) for h in subset] == [
        ("node01", "127.0.0.2"),
        ("node[03-04]", "127.0.0.[4-5]"),
    ]


def test_close_leaves_no_sshd_even_when_frozen(tmp_path: Path) -> None:
    from .conftest import require_testbed

    require_testbed()
    with running_testbed(tmp_path, 3) as tb:
        assert tb.exec(0, ["true"]).exit_status == 0
        tb.freeze_host(1)
        pids = [h.pid for h in tb.hosts]
        port = tb.port
    # close() has returned, and it waits for every process it stopped: none may be left now
    assert not [
        p for p in pids if p is not None and psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
    ]
    for i in range(3):
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((f"127.0.0.{i + 2}", port), timeout=2).close()


def test_probes_see_each_hosts_own_hardware(testbed: Testbed) -> None:
    from robustctl.probes import probe_script
    from robustctl.testing.fake_nvml import healthy_gpus

    testbed.inject_xid(1, 79)
    testbed.degrade_nic(1)
    testbed.set_nvml(1, healthy_gpus(2))
    host_src = probe_script("host")  # the prelude, then the probe, as robustctl streams it
    nvml_src = probe_script("nvml")

    def probe(i: int, src: bytes) -> dict[str, object]:
        r = testbed.exec(i, ["python3", "-"], stdin=src, timeout=60)
        assert r.exit_status == 0, r.stderr.decode()
        doc = json.loads(r.stdout)
        assert doc["errors"] == [], doc["errors"]
        return doc["data"]

    healthy, sick = probe(0, host_src), probe(1, host_src)
    assert healthy["xid"]["lines"] == [] and healthy["nics"][0]["operstate"] == "up"
    assert healthy["infiniband"][0]["state"] == "ACTIVE"
    assert all(d["error"] is None for d in healthy["disks"])
    assert len(sick["xid"]["lines"]) == 1 and ": 79, " in sick["xid"]["lines"][0]
    assert sick["nics"][0]["operstate"] == "down" and sick["nics"][0]["carrier"] == 0

    # default NVML state is a machine without a driver, as pynvml reports it here
    assert probe(0, nvml_src)["reason_code"] == "library_not_found"
    assert probe(1, nvml_src)["count"] == 2


def test_cgroup_v2_quota_climbs_to_a_parent_with_the_cpu_controller(tmp_path: Path, monkeypatch) -> None:
    """cgroup v2 path (CI machines may have it; this one has v1): simulated in a plain directory tree."""
    from . import testbed as tbmod

    mnt = tmp_path / "cgroup2"
    own = mnt / "system.slice" / "ci.scope"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("memory pids\n")  # cpu not delegated down here
    (own.parent / "cgroup.controllers").write_text("cpu memory pids\n")
    (own.parent / "cgroup.subtree_control").write_text("memory\n")
    monkeypatch.setattr(tbmod, "_mountinfo", lambda: [("/", str(mnt), "cgroup2", ["rw"])])
    monkeypatch.setattr(tbmod, "_own_cgroup", lambda match: None if match else "/system.slice/ci.scope")

    cg = tbmod.make_cpu_cgroup("robustctl-testbed-1_x-node01", 0.25)
    assert cg.version == 2 and cg.path == own.parent / "robustctl-testbed-1_x-node01"
    assert (cg.path / "cpu.max").read_text() == "25000 100000\n"
    assert (own.parent / "cgroup.subtree_control").read_text() == "+cpu\n"
    assert cg.home == own

    monkeypatch.setattr(tbmod, "_mountinfo", lambda: [])
    with pytest.raises(FaultUnsupported, match="no cgroup mount with the cpu controller"):
        tbmod.make_cpu_cgroup("x", 0.5)
