"""A healthy simulated host's system files under a root directory, in real Linux formats.

The node-side host probe (``diagnostics/host.py --root ROOT``) reads them as it reads ``/`` on a real
host: the SSH testbed (``tests/integration/testbed.py``) seeds one root per simulated host and injects
faults into these files; unit tests run the probe over one root for a healthy host's data.

Example::

    seed_healthy_root(tmp_path / "root", "node01", 0)
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

# Host ``index``'s eth0 MAC ends in ``index + 2``: the last octet of its testbed address 127.0.0.(index + 2).
_MAC_OFFSET = 2

# A 2 TiB training node, Linux 6.1 /proc/meminfo layout (values in kB).
_MEMINFO = """\
MemTotal:       2113407488 kB
MemFree:        1843511224 kB
MemAvailable:   2025104312 kB
Buffers:          1123456 kB
Cached:         176543212 kB
SwapCached:            0 kB
Active:          61234544 kB
Inactive:       142345672 kB
Active(anon):    24567800 kB
Inactive(anon):    123456 kB
Active(file):    36666744 kB
Inactive(file): 142222216 kB
Unevictable:        65536 kB
Mlocked:            65536 kB
SwapTotal:             0 kB
SwapFree:              0 kB
Zswap:                 0 kB
Zswapped:              0 kB
Dirty:               1236 kB
Writeback:              0 kB
AnonPages:       24501234 kB
Mapped:           2345678 kB
Shmem:             190022 kB
KReclaimable:    12345678 kB
Slab:            18765432 kB
SReclaimable:    12345678 kB
SUnreclaim:       6419754 kB
KernelStack:       123456 kB
PageTables:        234567 kB
SecPageTables:          0 kB
NFS_Unstable:           0 kB
Bounce:                 0 kB
WritebackTmp:           0 kB
CommitLimit:    1056703744 kB
Committed_AS:    45678912 kB
VmallocTotal:   34359738367 kB
VmallocUsed:      1234567 kB
VmallocChunk:           0 kB
Percpu:            456789 kB
HardwareCorrupted:      0 kB
AnonHugePages:   20480000 kB
ShmemHugePages:         0 kB
ShmemPmdMapped:         0 kB
FileHugePages:          0 kB
FilePmdMapped:          0 kB
HugePages_Total:        0
HugePages_Free:         0
HugePages_Rsvd:         0
HugePages_Surp:         0
Hugepagesize:       2048 kB
Hugetlb:                0 kB
DirectMap4k:      3456789 kB
DirectMap2M:    123456789 kB
DirectMap1G:    2021654528 kB
"""

# /proc/mounts: (device, mount point, fstype, options). Mount points of real block filesystems exist
# under the host root so a probe's statvfs(root + mount point) works.
_MOUNTS: tuple[tuple[str, str, str, str], ...] = (
    ("sysfs", "/sys", "sysfs", "rw,nosuid,nodev,noexec,relatime"),
    ("proc", "/proc", "proc", "rw,nosuid,nodev,noexec,relatime"),
    ("udev", "/dev", "devtmpfs", "rw,nosuid,relatime,size=1056669744k,nr_inodes=264167436,mode=755"),
    ("tmpfs", "/run", "tmpfs", "rw,nosuid,nodev,noexec,relatime,size=211340748k,mode=755"),
    ("/dev/nvme0n1p2", "/", "ext4", "rw,relatime,errors=remount-ro"),
    ("tmpfs", "/dev/shm", "tmpfs", "rw,nosuid,nodev"),
    (
        "/dev/nvme0n1p1",
        "/boot/efi",
        "vfat",
        "rw,relatime,fmask=0077,dmask=0077,codepage=437,errors=remount-ro",
    ),
    ("/dev/md0", "/raid", "xfs", "rw,noatime,attr2,inode64,logbufs=8,logbsize=32k,sunit=1024,swidth=8192"),
)

_KERN_LOG_HEALTHY = (
    "[    0.000000] Linux version 6.1.0-27-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14) "
    "12.2.0, GNU ld (GNU Binutils for Debian) 2.40) #1 SMP PREEMPT_DYNAMIC Debian 6.1.115-1 (2024-11-01)",
    "[    0.000000] Command line: BOOT_IMAGE=/vmlinuz-6.1.0-27-amd64 root=/dev/nvme0n1p2 ro quiet",
    "[    4.123456] mlx5_core 0000:0c:00.0: firmware version: 28.39.1002",
    "[    5.234567] mlx5_core 0000:0c:00.0 eth0: Link up",
    "[   12.345678] nvidia: loading out-of-tree module taints kernel.",
    "[   12.456789] nvidia-nvlink: Nvlink Core is being initialized, major device number 237",
    "[   12.567890] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024",
    "[   13.678901] nvidia-uvm: Loaded the UVM driver, major device number 235.",
    "[   20.789012] IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready",
)

_NET_HEALTHY = {
    "operstate": "up",
    "carrier": "1",
    "speed": "100000",
    "duplex": "full",
    "mtu": "9000",
    "type": "1",
    "flags": "0x1003",
    "carrier_changes": "2",
}

_IB_HEALTHY = {
    "state": "4: ACTIVE",
    "phys_state": "5: LinkUp",
    "rate": "400 Gb/sec (4X NDR)",
    "link_layer": "InfiniBand",
    "lid": "0x12",
    "sm_lid": "0x1",
}
_IB_COUNTERS = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_xmit_discards",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
)


def syslog_prefix(hostname: str, when: float) -> str:
    """Traditional rsyslog kern.log prefix: ``Nov 22 03:14:01 node01 kernel: ``."""
    t = time.localtime(when)
    month = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")[t.tm_mon - 1]
    return f"{month} {t.tm_mday:2d} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} {hostname} kernel: "


def write_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, creating its parent directories."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def seed_healthy_root(root: Path, hostname: str, index: int, *, infiniband: bool = True) -> None:
    """Write a healthy host's system files under ``root`` (removing whatever was there).

    Layout (real Linux formats): ``proc/meminfo``, ``proc/loadavg``, ``proc/uptime``, ``proc/mounts``
    (with the block filesystems' mount points created), ``proc/sys/kernel/hostname``, ``etc/hostname``,
    ``sys/class/net/{lo,eth0}/…``, ``sys/class/infiniband/mlx5_0/ports/1/…`` (when ``infiniband``),
    ``var/log/kern.log`` (ordinary boot lines, no XID).
    """
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    proc = root / "proc"
    write_file(proc / "meminfo", _MEMINFO)
    write_file(proc / "loadavg", f"0.{52 + index % 40:02d} 0.58 0.59 1/1234 {56789 + index}\n")
    write_file(proc / "uptime", "350123.45 5498765.43\n")
    write_file(proc / "mounts", "".join(f"{dev} {mnt} {fs} {opts} 0 0\n" for dev, mnt, fs, opts in _MOUNTS))
    write_file(proc / "sys/kernel/hostname", hostname + "\n")
    write_file(root / "etc/hostname", hostname + "\n")
    for _, mnt, _, _ in _MOUNTS:
        (root / mnt.lstrip("/")).mkdir(parents=True, exist_ok=True)

    net = root / "sys/class/net"
    lo = {"operstate": "unknown", "carrier": "1", "mtu": "65536", "type": "772", "flags": "0x9"}
    lo["address"] = "00:00:00:00:00:00"
    for key, value in lo.items():
        write_file(net / "lo" / key, value + "\n")
    eth = dict(_NET_HEALTHY, address=f"02:00:7f:00:00:{(index + _MAC_OFFSET) & 0xFF:02x}")
    for key, value in eth.items():
        write_file(net / "eth0" / key, value + "\n")

    if infiniband:
        port = root / "sys/class/infiniband/mlx5_0/ports/1"
        for key, value in _IB_HEALTHY.items():
            write_file(port / key, value + "\n")
        for counter in _IB_COUNTERS:
            write_file(port / "counters" / counter, "0\n")
        write_file(root / "sys/class/infiniband/mlx5_0/fw_ver", "28.39.1002\n")
        write_file(root / "sys/class/infiniband/mlx5_0/node_type", "1: CA\n")

    boot = time.time() - 350123.45
    lines = [syslog_prefix(hostname, boot + float(line[1:13])) + line for line in _KERN_LOG_HEALTHY]
    write_file(root / "var/log/kern.log", "\n".join(lines) + "\n")
