"""diagnostics/host.py on simulated host roots (``--root``), as a subprocess and function by function."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from robustctl.checks.host import evaluate_disk, evaluate_ib, evaluate_nic, evaluate_xid
from robustctl.checks.registry import CheckContext
from robustctl.models import Status
from robustctl.probes import load_probe, probe_script
from robustctl.thresholds import Thresholds

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "diagnostics" / "host.py"
XID79 = (
    "Nov 22 03:13:00 node7 kernel: [ 8123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid=2211, "
    "name=python, GPU has fallen off the bus."
)


host_probe = load_probe("host")


def write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def make_root(root: Path, *, kern_log: str = "", eth0: str = "up", ib: bool = False) -> Path:
    """A simulated host: the files the probe reads, nothing else."""
    write(
        root,
        "proc/mounts",
        "sysfs /sys sysfs rw,nosuid 0 0\n"
        "proc /proc proc rw 0 0\n"
        "/dev/sda1 / ext4 rw,relatime 0 0\n"
        "/dev/sdb1 /data ext4 ro,relatime,errors=remount-ro 0 0\n"
        "tmpfs /run tmpfs rw 0 0\n"
        "tmpfs /dev/shm tmpfs rw 0 0\n"
        "nfs:/home /home nfs4 rw 0 0\n"
        "/dev/sdc1 /mnt/my\\040disk xfs rw 0 0\n",
    )
    for d in ("data", "dev/shm", "mnt/my disk"):
        (root / d).mkdir(parents=True, exist_ok=True)
    write(
        root,
        "proc/meminfo",
        "MemTotal:       263842756 kB\nMemFree:         1000000 kB\nMemAvailable:   200000000 kB\n"
        "SwapTotal:             0 kB\nSwapFree:              0 kB\n",
    )
    write(root, "proc/loadavg", "1.50 3.25 2.00 2/1234 5678\n")
    write(root, "proc/stat", "cpu  1 2 3 4\nprocs_running 2\nprocs_blocked 3\n")
    write(root, "sys/devices/system/cpu/online", "0-7\n")
    for name, state, carrier in (("eth0", eth0, "1" if eth0 == "up" else "0"), ("eth1", "up", "1")):
        write(root, f"sys/class/net/{name}/operstate", state + "\n")
        write(root, f"sys/class/net/{name}/carrier", carrier + "\n")
        write(root, f"sys/class/net/{name}/speed", "100000\n")
        write(root, f"sys/class/net/{name}/mtu", "9000\n")
        write(root, f"sys/class/net/{name}/flags", "0x1003\n")
        write(root, f"sys/class/net/{name}/type", "1\n")
    write(root, "sys/class/net/docker0/operstate", "down\n")
    write(root, "sys/class/net/eno2/operstate", "down\n")  # unused port: administratively down
    write(root, "sys/class/net/eno2/flags", "0x1002\n")
    write(root, "sys/class/net/lo/operstate", "unknown\n")
    if ib:
        for port, state, phys in ((1, "4: ACTIVE", "5: LinkUp"), (2, "1: DOWN", "3: Disabled")):
            base = f"sys/class/infiniband/mlx5_0/ports/{port}"
            write(root, f"{base}/state", state + "\n")
            write(root, f"{base}/phys_state", phys + "\n")
            write(root, f"{base}/rate", "400 Gb/sec (4X NDR)\n")
            write(root, f"{base}/link_layer", "InfiniBand\n")
    write(root, "var/log/kern.log", kern_log)
    return root


def run_probe(*args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-", *args], input=probe_script("host"), capture_output=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr.decode()
    lines = proc.stdout.decode().strip().splitlines()
    assert len(lines) == 1
    doc = json.loads(lines[0])
    assert doc["probe"] == "host"
    return doc


def test_simulated_host_document(tmp_path: Path) -> None:
    root = make_root(
        tmp_path / "h1", kern_log="Nov 22 03:12:59 node7 kernel: usb 1-1: new device\n" + XID79 + "\n"
    )
    doc = run_probe("--root", str(root))
    data = doc["data"]
    assert doc["errors"] == []
    mounts = {d["mount"]: d for d in data["disks"]}
    assert set(mounts) == {"/", "/data", "/dev/shm", "/mnt/my disk"}  # no proc/sysfs/run tmpfs/nfs
    assert mounts["/data"]["read_only"] is True and mounts["/"]["read_only"] is False
    assert all(d["total_bytes"] > 0 and d["error"] is None for d in data["disks"])
    assert data["memory"]["total_bytes"] == 263842756 * 1024
    assert data["memory"]["available_pct"] == pytest.approx(75.8, abs=0.1)
    assert data["cpu_count"] == 8 and data["load"]["load5_per_cpu"] == pytest.approx(3.25 / 8, abs=1e-4)
    assert data["load"]["procs_blocked"] == 3
    assert data["xid"]["source"] == "file" and data["xid"]["lines"] == [XID79]
    assert [n["name"] for n in data["nics"]] == ["eno2", "eth0", "eth1"]
    assert sorted(data["nics_skipped"]) == ["docker0", "lo"]
    assert data["infiniband"] == []


SXID_EVENT = (
    "Nov 22 03:14:00 node7 kernel: [ 8183.1] nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): 20034, Fatal, "
    "Link 27 LTSSM Fault Up\n"
    "Nov 22 03:14:00 node7 kernel: [ 8183.1] nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): 20034, "
    "Severity 1 Engine instance 27 Sub-engine instance 00\n"
)


def test_fatal_sxid_in_the_kernel_log_makes_host_xid_critical(tmp_path: Path) -> None:
    root = make_root(
        tmp_path / "h3", kern_log="Nov 22 03:13:59 node7 kernel: usb 1-1: new device\n" + SXID_EVENT
    )
    data = run_probe("--root", str(root))["data"]
    assert data["xid"]["matches"] == 2 and len(data["xid"]["lines"]) == 2  # the probe keeps SXid lines
    (r,) = evaluate_xid(data, Thresholds())
    assert (r.status, r.device) == (Status.CRITICAL, "0000:c4:00.0")
    assert r.evidence["sxid"] == 20034 and r.evidence["count"] == 1 and r.evidence["links"] == [27]


def test_faults_are_found_and_judged(tmp_path: Path) -> None:
    root = make_root(tmp_path / "h2", kern_log=XID79 + "\n", eth0="down", ib=True)
    doc = run_probe("--root", str(root))
    data = doc["data"]
    th = Thresholds()

    disk = evaluate_disk(data, th)
    assert [(r.status, r.device) for r in disk] == [(Status.CRITICAL, "/data")]
    assert "read-only" in disk[0].summary

    nic = evaluate_nic(data, th)
    assert [(r.status, r.device) for r in nic] == [
        (Status.CRITICAL, "eth0")
    ]  # eno2 is admin-down: not judged

    xid = evaluate_xid(data, th)
    assert [(r.status, r.device) for r in xid] == [(Status.CRITICAL, "0000:3b:00")]
    assert "79" in xid[0].summary and xid[0].evidence["action"] == "evict"

    ib = evaluate_ib(data, th)
    assert [(r.status, r.device) for r in ib] == [(Status.CRITICAL, "mlx5_0/2")]
    assert [p["state"] for p in data["infiniband"]] == ["ACTIVE", "DOWN"]
    assert data["infiniband"][0]["rate_gbps"] == 400.0


def test_missing_files_are_errors_with_null_keys(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    doc = run_probe("--root", str(root))
    data = doc["data"]
    for key in ("disks", "memory", "load", "xid", "nics"):
        assert data[key] is None, key
    assert data["infiniband"] == []  # no IB hardware: not an error
    prefixes = sorted(e.split(":")[0] for e in doc["errors"])
    assert prefixes == ["disks", "kernel log", "load", "memory", "nics"]
    judged = evaluate_disk(data, Thresholds(), CheckContext(probe_errors=tuple(doc["errors"])))
    assert judged[0].status is Status.UNKNOWN and "proc/mounts" in judged[0].summary


def test_kernel_log_flag_and_newest_lines_kept(tmp_path: Path) -> None:
    log = tmp_path / "dmesg.txt"
    lines = [f"[{i}.000000] NVRM: Xid (PCI:0000:07:00): 13, pid={i}, Graphics Exception" for i in range(10)]
    log.write_text("\n".join(["[0.1] unrelated", *lines]) + "\n")
    doc = run_probe(
        "--root", str(make_root(tmp_path / "h")), "--kernel-log", str(log), "--xid-max-lines", "3"
    )
    xid = doc["data"]["xid"]
    assert xid["path"] == str(log) and xid["matches"] == 10 and xid["truncated"] is True
    assert xid["lines"] == lines[-3:]


def test_low_disk_from_statvfs(tmp_path: Path) -> None:
    root = make_root(tmp_path / "h")

    def fake_statvfs(path: str) -> SimpleNamespace:
        low = path.endswith("/data")
        blocks = 1_000_000
        free = 20_000 if low else 900_000
        return SimpleNamespace(f_blocks=blocks, f_bavail=free, f_frsize=4096, f_files=1000, f_favail=900)

    disks = host_probe.collect_disks(str(root), statvfs=fake_statvfs)
    data = {"disks": disks}
    th = Thresholds(readonly_allowed_mounts=("/data",))
    judged = evaluate_disk(data, th)
    assert [(r.status, r.device) for r in judged] == [(Status.CRITICAL, "/data")]
    assert "2.0% free" in judged[0].summary


def test_statvfs_that_hangs_times_out(tmp_path: Path) -> None:
    import threading

    release = threading.Event()

    def hanging(path: str) -> Any:
        release.wait(5)
        return os.statvfs(path)

    try:
        with pytest.raises(TimeoutError):
            host_probe.statvfs_with_timeout(str(tmp_path), 0.2, hanging)
    finally:
        release.set()


def test_mount_parsing_rules() -> None:
    text = (
        "overlay / overlay rw 0 0\n"
        "/dev/sda1 /etc/hosts ext4 ro 0 0\n"
        "tmpfs /tmp tmpfs rw 0 0\n"
        "squashfs /snap/core squashfs ro 0 0\n"
        "s3fs /bucket fuse.s3fs rw 0 0\n"
        "lustre@o2ib:/fs /lustre lustre rw 0 0\n"
        "/dev/sda1 /etc/hosts ext4 rw 0 0\n"
    )
    parsed = host_probe.parse_mounts(text)
    assert [(m[1], m[3]) for m in parsed] == [("/", False), ("/tmp", False), ("/etc/hosts", False)]


def test_virtual_interfaces_by_sysfs_link(tmp_path: Path) -> None:
    net = tmp_path / "sys/class/net"
    (tmp_path / "sys/devices/virtual/net/bond0").mkdir(parents=True)
    (tmp_path / "sys/devices/pci0000:00/net/ens1").mkdir(parents=True)
    net.mkdir(parents=True)
    (net / "bond0").symlink_to(tmp_path / "sys/devices/virtual/net/bond0")
    (net / "ens1").symlink_to(tmp_path / "sys/devices/pci0000:00/net/ens1")
    nics, skipped = host_probe.collect_nics(str(tmp_path))
    assert [n["name"] for n in nics] == ["ens1"] and skipped == ["bond0"]
    assert nics[0]["operstate"] is None and nics[0]["speed_mbps"] is None
