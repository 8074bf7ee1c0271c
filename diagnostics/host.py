#!/usr/bin/env python3
"""robustctl node-side probe ``host``: disks, memory, load, NVIDIA XID lines, NICs, InfiniBand, clock.

Standalone with the shared prelude ``_prelude.py``
(Python >= 3.8, stdlib only); never imports robustctl. Prints exactly one JSON document
(see ``diagnostics/README.md``). Every system file is read under ``--root`` (default ``/``).

``data`` (a key is ``null`` when its sub-collection failed; the reason is in ``errors``)::

    cpu_count: int                      # CPUs of the host (sysfs cpu/online, cpuinfo, os.cpu_count)
    disks: [ {mount: str, device: str, fstype: str, read_only: bool,
              total_bytes: int|null, free_bytes: int|null,   # free = available to non-root (f_bavail)
              free_pct: float|null, inodes_total: int|null, inodes_free: int|null,
              inodes_free_pct: float|null, error: str|null} ] | null
    memory: {total_bytes: int, available_bytes: int, available_pct: float,
             swap_total_bytes: int|null, swap_free_bytes: int|null} | null
    load: {load1: float, load5: float, load15: float, cpu_count: int,
           load5_per_cpu: float, procs_blocked: int|null} | null   # blocked: D-state tasks now
    xid: {source: "file"|"dmesg"|"journalctl", path: str|null, lines: [str],   # newest last
          matches: int, truncated: bool, notes: [str]} | null
    nics: [ {name: str, operstate: str|null, carrier: int|null, speed_mbps: int|null,
             mtu: int|null, admin_up: bool|null, type: int|null} ] | null
    nics_skipped: [str]                 # lo and virtual interfaces (bridges, veth, docker, ...)
    infiniband: [ {device: str, port: int, state: str|null, state_code: int|null,
                   phys_state: str|null, phys_state_code: int|null, rate: str|null,
                   rate_gbps: float|null, link_layer: str|null} ] | null   # [] = no IB hardware
    clock: {time: float}                # this host's time.time() when collected

Which filesystems count: local ones (ext4, xfs, btrfs, zfs, overlay, ...) plus tmpfs at ``/dev/shm``
and ``/tmp``; pseudo filesystems (proc, sysfs, cgroup, other tmpfs, squashfs, ...) and network
filesystems (nfs, lustre, gpfs, fuse.*, ...) are skipped: a full shared filesystem is not a fault
of this host, and ``statvfs`` on a hung NFS mount would block. ``statvfs`` runs with a timeout.

Which NICs count: every interface of ``<root>/sys/class/net`` except ``lo`` and virtual ones: a
sysfs link into ``/devices/virtual/``, a ``bridge``/``bonding`` directory, or a virtual name
prefix (docker, veth, br-, virbr, cni, flannel, cali, vxlan, tun, tap, wg, ifb, dummy, ...).

XID source: ``--kernel-log FILE`` when given; else with ``--root`` other than ``/``
``<root>/var/log/kern.log`` (then ``syslog``, ``messages``); else ``dmesg``, then
``journalctl -k -b``, then ``/var/log/kern.log``. Only lines containing ``NVRM: Xid`` (GPU) or
``SXid`` (NVSwitch: ``nvidia-nvswitchN: SXid (PCI:...): CODE, Fatal|Non-fatal, ...`` and its
``Severity``/``Data`` continuation lines) are returned (raw, newest ``--xid-max-lines`` kept); the
control side parses them (robustctl.analysis.xid and robustctl.analysis.sxid).
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Sequence

from _prelude import Document, describe, probe_main

PROBE = "host"

XID_MARKERS = (b"NVRM: Xid", b"SXid")
"""A kernel-log line is kept when it holds one of these: a GPU Xid or an NVSwitch SXid line."""

PSEUDO_FS = frozenset(
    (
        "proc sysfs devtmpfs devpts cgroup cgroup2 securityfs debugfs tracefs configfs fusectl mqueue "
        "hugetlbfs pstore bpf autofs binfmt_misc rpc_pipefs nsfs efivarfs selinuxfs ramfs squashfs "
        "iso9660 udf nfsd sockfs pipefs anon_inodefs devfs cpuset none rootfs"
    ).split()
)
NETWORK_FS = frozenset(
    (
        "nfs nfs4 cifs smb3 smbfs lustre gpfs beegfs ceph cephfs glusterfs 9p afs panfs wekafs "
        "virtiofs ocfs2 gfs2 davfs"
    ).split()
)
TMPFS_MOUNTS = ("/dev/shm", "/tmp")
VIRTUAL_NIC_PREFIXES = (
    "docker",
    "veth",
    "br-",
    "virbr",
    "vnet",
    "tun",
    "tap",
    "cali",
    "flannel",
    "cni",
    "kube-",
    "vxlan",
    "genev",
    "wg",
    "tailscale",
    "dummy",
    "ifb",
    "nlmon",
    "lxc",
    "lxd",
    "weave",
    "cilium",
    "podman",
    "zt",
    "ip6tnl",
    "sit",
    "gre",
    "tunl",
    "erspan",
)


# --------------------------------------------------------------------------- helpers
def rooted(root: str, path: str) -> str:
    """``path`` (absolute) under ``root``."""
    if root in ("", "/"):
        return path
    return os.path.join(root, path.lstrip("/"))


def read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def read_opt(path: str) -> str | None:
    """Stripped content of a sysfs attribute, or None when absent/unreadable (EINVAL on down links)."""
    try:
        return read_text(path).strip()
    except OSError:
        return None


def to_int(text: str | None, base: int = 10) -> int | None:
    if text is None:
        return None
    try:
        return int(text, base)
    except ValueError:
        return None


# --------------------------------------------------------------------------- disks
def unescape_mount(field: str) -> str:
    """Decode /proc/mounts octal escapes (``\\040`` is a space)."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit() and i + 3 < len(field):
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mounts(text: str) -> list[tuple[str, str, str, bool]]:
    """Local filesystems from /proc/mounts text: list of (device, mount, fstype, read_only), last wins."""
    seen: collections.OrderedDict[str, tuple[str, str, str, bool]] = collections.OrderedDict()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        device, mount, fstype, options = (
            unescape_mount(parts[0]),
            unescape_mount(parts[1]),
            parts[2],
            parts[3],
        )
        if fstype in PSEUDO_FS or fstype in NETWORK_FS or fstype.startswith("fuse"):
            continue
        if fstype == "tmpfs" and mount not in TMPFS_MOUNTS:
            continue
        read_only = "ro" in options.split(",")
        seen.pop(mount, None)
        seen[mount] = (device, mount, fstype, read_only)
    return list(seen.values())


def statvfs_with_timeout(path: str, timeout_s: float, statvfs: Callable[[str], Any] | None = None) -> Any:
    """``os.statvfs(path)`` in a thread; raises TimeoutError after ``timeout_s``."""
    fn = statvfs or os.statvfs
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fn(path)
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise TimeoutError(f"statvfs timed out after {timeout_s:.1f} s")
    if "error" in box:
        raise box["error"]
    return box["result"]


def pct(part: float, whole: float) -> float | None:
    if not whole:
        return None
    return round(100.0 * part / whole, 3)


def collect_disks(
    root: str, timeout_s: float = 5.0, statvfs: Callable[[str], Any] | None = None
) -> list[dict[str, Any]]:
    """One entry per local filesystem (see module docstring). Raises OSError if mounts are unreadable."""
    mounts = parse_mounts(read_text(rooted(root, "/proc/mounts")))
    disks = []
    for device, mount, fstype, read_only in mounts:
        entry = {
            "mount": mount,
            "device": device,
            "fstype": fstype,
            "read_only": read_only,
            "total_bytes": None,
            "free_bytes": None,
            "free_pct": None,
            "inodes_total": None,
            "inodes_free": None,
            "inodes_free_pct": None,
            "error": None,
        }
        try:
            st = statvfs_with_timeout(rooted(root, mount), timeout_s, statvfs)
            total = st.f_blocks * st.f_frsize
            free = st.f_bavail * st.f_frsize
            entry["total_bytes"] = total
            entry["free_bytes"] = free
            entry["free_pct"] = pct(free, total)
            if st.f_files:
                entry["inodes_total"] = st.f_files
                entry["inodes_free"] = st.f_favail
                entry["inodes_free_pct"] = pct(st.f_favail, st.f_files)
        except (OSError, TimeoutError) as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
        disks.append(entry)
    return disks


# --------------------------------------------------------------------------- memory, load, cpus
def collect_memory(root: str) -> dict[str, Any]:
    """MemTotal/MemAvailable (bytes) from /proc/meminfo. Raises OSError/ValueError."""
    values = {}
    for line in read_text(rooted(root, "/proc/meminfo")).splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            factor = 1024 if len(fields) > 1 and fields[1].lower() == "kb" else 1
            values[key.strip()] = int(fields[0]) * factor
    if "MemTotal" not in values:
        raise ValueError("no MemTotal in /proc/meminfo")
    total = values["MemTotal"]
    if "MemAvailable" in values:
        available = values["MemAvailable"]
    else:  # kernels before 3.14
        available = sum(values.get(k, 0) for k in ("MemFree", "Buffers", "Cached"))
    return {
        "total_bytes": total,
        "available_bytes": available,
        "available_pct": pct(available, total),
        "swap_total_bytes": values.get("SwapTotal"),
        "swap_free_bytes": values.get("SwapFree"),
    }


def parse_cpu_list(text: str) -> int:
    """Count CPUs in a sysfs list such as ``0-7,9``."""
    count = 0
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        count += (int(hi) - int(lo) + 1) if hi else 1
    return count


def cpu_count(root: str) -> int:
    online = read_opt(rooted(root, "/sys/devices/system/cpu/online"))
    if online:
        try:
            return parse_cpu_list(online)
        except ValueError:
            pass
    try:
        n = sum(
            1
            for line in read_text(rooted(root, "/proc/cpuinfo")).splitlines()
            if line.startswith("processor")
        )
        if n:
            return n
    except OSError:
        pass
    return os.cpu_count() or 1


def procs_blocked(root: str) -> int | None:
    """Tasks in uninterruptible sleep now (``procs_blocked`` of /proc/stat), or None."""
    try:
        for line in read_text(rooted(root, "/proc/stat")).splitlines():
            if line.startswith("procs_blocked"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def collect_load(root: str, cpus: int) -> dict[str, Any]:
    """Load averages from /proc/loadavg (+ blocked tasks from /proc/stat). Raises OSError/ValueError."""
    fields = read_text(rooted(root, "/proc/loadavg")).split()
    load1, load5, load15 = float(fields[0]), float(fields[1]), float(fields[2])
    return {
        "load1": load1,
        "load5": load5,
        "load15": load15,
        "cpu_count": cpus,
        "load5_per_cpu": round(load5 / max(cpus, 1), 4),
        "procs_blocked": procs_blocked(root),
    }


# --------------------------------------------------------------------------- XID lines
class XidScan:
    """Keeps the newest ``cap`` lines that contain a marker of ``XID_MARKERS`` (GPU Xid, NVSwitch SXid)."""

    def __init__(self, cap: int) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=max(cap, 1))
        self.matches = 0

    def feed(self, raw_line: bytes) -> None:
        if any(marker in raw_line for marker in XID_MARKERS):
            self.matches += 1
            self.lines.append(raw_line.decode("utf-8", "replace").rstrip("\r\n"))

    def result(self, source: str, path: str | None, notes: list[str]) -> dict[str, Any]:
        return {
            "source": source,
            "path": path,
            "lines": list(self.lines),
            "matches": self.matches,
            "truncated": self.matches > len(self.lines),
            "notes": notes,
        }


def scan_file(path: str, cap: int, max_bytes: int) -> XidScan:
    """Scan the last ``max_bytes`` of ``path``. Raises OSError."""
    scan = XidScan(cap)
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        start = max(0, size - max_bytes)
        f.seek(start)
        if start:
            f.readline()  # drop the partial first line
        for line in f:
            scan.feed(line)
    return scan


def scan_command(argv: list[str], cap: int, timeout_s: float) -> XidScan:
    """Run ``argv`` and scan its stdout. Raises OSError/RuntimeError with a one-line reason."""
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"timed out after {timeout_s:.1f} s") from None
    if proc.returncode != 0:
        why = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise RuntimeError(why[-1] if why else f"exit status {proc.returncode}")
    scan = XidScan(cap)
    for line in proc.stdout.splitlines():
        scan.feed(line)
    return scan


def collect_xid(
    root: str, kernel_log: str | None, cap: int, max_bytes: int, timeout_s: float
) -> dict[str, Any]:
    """XID lines from the first source that works. Raises RuntimeError naming every failed attempt."""
    notes: list[str] = []
    if kernel_log:
        return scan_file(kernel_log, cap, max_bytes).result("file", kernel_log, notes)
    files = [rooted(root, "/var/log/" + name) for name in ("kern.log", "syslog", "messages")]
    if root in ("", "/"):
        commands = (
            ("dmesg", ["dmesg"]),
            ("journalctl", ["journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-iso"]),
        )
        for source, argv in commands:
            try:
                return scan_command(argv, cap, timeout_s).result(source, None, notes)
            except (OSError, RuntimeError) as exc:
                notes.append(f"{source}: {getattr(exc, 'strerror', None) or exc}")
    for path in files:
        if not os.path.exists(path):
            continue
        try:
            return scan_file(path, cap, max_bytes).result("file", path, notes)
        except OSError as exc:
            notes.append(f"{path}: {exc.strerror or exc}")
    if not notes:
        notes.append(f"no kernel log found ({', '.join(files)})")
    raise RuntimeError("; ".join(notes))


# --------------------------------------------------------------------------- NICs and InfiniBand
def is_virtual_nic(class_dir: str, name: str) -> bool:
    if name == "lo" or name.startswith(VIRTUAL_NIC_PREFIXES):
        return True
    entry = os.path.join(class_dir, name)
    if os.path.islink(entry) and "/devices/virtual/" in os.path.realpath(entry):
        return True
    return os.path.isdir(os.path.join(entry, "bridge")) or os.path.isdir(os.path.join(entry, "bonding"))


def collect_nics(root: str) -> tuple[list[dict[str, Any]], list[str]]:
    """(physical interfaces, skipped names). Raises OSError when the net class dir is missing."""
    class_dir = rooted(root, "/sys/class/net")
    names = sorted(os.listdir(class_dir))
    nics, skipped = [], []
    for name in names:
        if is_virtual_nic(class_dir, name):
            skipped.append(name)
            continue
        d = os.path.join(class_dir, name)
        speed = to_int(read_opt(os.path.join(d, "speed")))
        flags = read_opt(os.path.join(d, "flags"))
        flags_val = to_int(flags, 16) if flags else None
        operstate = read_opt(os.path.join(d, "operstate"))
        nics.append(
            {
                "name": name,
                "operstate": operstate.lower() if operstate else None,
                "carrier": to_int(read_opt(os.path.join(d, "carrier"))),
                "speed_mbps": speed if speed is not None and speed > 0 else None,
                "mtu": to_int(read_opt(os.path.join(d, "mtu"))),
                "admin_up": bool(flags_val & 0x1) if flags_val is not None else None,
                "type": to_int(read_opt(os.path.join(d, "type"))),
            }
        )
    return nics, skipped


def split_state(text: str | None) -> tuple[int | None, str | None]:
    """``"4: ACTIVE"`` -> (4, "ACTIVE"); ``"ACTIVE"`` -> (None, "ACTIVE")."""
    if text is None:
        return None, None
    code, sep, name = text.partition(":")
    if sep and code.strip().isdigit():
        return int(code), name.strip()
    return None, text.strip()


def parse_rate(text: str | None) -> float | None:
    """``"400 Gb/sec (4X NDR)"`` -> 400.0."""
    if not text:
        return None
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


def collect_infiniband(root: str) -> list[dict[str, Any]]:
    """One entry per IB port; [] when there is no /sys/class/infiniband."""
    base = rooted(root, "/sys/class/infiniband")
    if not os.path.isdir(base):
        return []
    ports = []
    for dev in sorted(os.listdir(base)):
        pdir = os.path.join(base, dev, "ports")
        try:
            port_names = sorted(os.listdir(pdir), key=lambda p: (len(p), p))
        except OSError:
            continue
        for port in port_names:
            d = os.path.join(pdir, port)
            state_code, state = split_state(read_opt(os.path.join(d, "state")))
            phys_code, phys = split_state(read_opt(os.path.join(d, "phys_state")))
            rate = read_opt(os.path.join(d, "rate"))
            ports.append(
                {
                    "device": dev,
                    "port": to_int(port),
                    "state": state,
                    "state_code": state_code,
                    "phys_state": phys,
                    "phys_state_code": phys_code,
                    "rate": rate,
                    "rate_gbps": parse_rate(rate),
                    "link_layer": read_opt(os.path.join(d, "link_layer")),
                }
            )
    return ports


# --------------------------------------------------------------------------- main
def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel-log", default=None, help="scan this file for XID lines instead of dmesg")
    p.add_argument("--xid-max-lines", type=int, default=256, help="newest XID lines kept (default 256)")
    p.add_argument(
        "--kernel-log-max-bytes",
        type=int,
        default=64 << 20,
        help="scan at most the last N bytes of a log file (default 64 MiB)",
    )


def collect(args: argparse.Namespace, doc: Document) -> None:
    """Fill ``doc`` (see the module docstring); a failed sub-collection is an error line, never fatal."""
    root = args.root
    step_timeout = max(1.0, min(10.0, args.timeout / 3))

    def attempt(key: str, fn: Callable[[], Any], what: str) -> None:
        try:
            doc.set(key, fn())
        except Exception as exc:  # a failed sub-collection is reported, never fatal
            doc.set(key, None)
            doc.error(f"{what}: {describe(exc)}")

    cpus = cpu_count(root)
    doc.set("cpu_count", cpus)
    attempt("disks", lambda: collect_disks(root, step_timeout), "disks")
    attempt("memory", lambda: collect_memory(root), "memory")
    attempt("load", lambda: collect_load(root, cpus), "load")
    attempt(
        "xid",
        lambda: collect_xid(
            root, args.kernel_log, args.xid_max_lines, args.kernel_log_max_bytes, step_timeout
        ),
        "kernel log",
    )
    try:
        nics, skipped = collect_nics(root)
        doc.set("nics", nics)
        doc.set("nics_skipped", skipped)
    except OSError as exc:
        doc.set("nics", None)
        doc.set("nics_skipped", [])
        doc.error(f"nics: {describe(exc)}")
    attempt("infiniband", lambda: collect_infiniband(root), "infiniband")
    doc.set("clock", {"time": time.time()})


def main(argv: Sequence[str] | None = None) -> int:
    return probe_main(PROBE, add_args, collect, argv, timeout_s=30.0)


if __name__ == "__main__":
    sys.exit(main())
