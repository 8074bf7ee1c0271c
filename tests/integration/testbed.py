"""A multi-host SSH testbed on loopback: one real ``sshd`` per simulated host.

Host ``i`` (0-based) is named ``node01``, ``node02``, … and listens on ``127.0.0.(i+2)``; every host shares
one high port. Each host has its own simulated hardware: a root directory seeded with real-format
``/proc``, ``/sys`` and kernel-log files (``tests/support/hostroot.py``), and an NVML injection file.
``sshd`` hands both paths to every command through ``SetEnv ROBUSTCTL_PROBE_ROOT=…
ROBUSTCTL_NVML_INJECTION=…`` (see ``diagnostics/README.md``), and puts the directory of the test's Python
(the venv, with torch) first on ``PATH`` so ``python3`` on a simulated host is that Python.

Faults are injected into the files (XID lines, NIC down, NVML state) or into the processes (stopped sshd:
connection refused; SIGSTOPped sshd: TCP connects but no banner; CPU quota through a cgroup: a slow host;
an nftables drop: a partitioned host). :meth:`Testbed.reset_faults` restores a healthy fleet.

Only loopback addresses (127.0.0.x) are ever used. Needs root (sshd logs in a uid-0 alias user) and
``/usr/sbin/sshd``; :func:`unavailable_reason` says why not, for a clean skip.

Example::

    with Testbed(tmp_path, n_hosts=4) as tb:
        tb.inject_xid(1)
        tb.write_inventory(tmp_path / "inv.yaml")
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pwd
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import paramiko
import psutil
import yaml

from tests.support.hostroot import seed_healthy_root
from tests.support.hostroot import syslog_prefix as _syslog_prefix
from tests.support.hostroot import write_file as _write

SSHD = Path("/usr/sbin/sshd")
DEFAULT_USER = "rbtest"
FIRST_OCTET = 2  # host 0 is 127.0.0.2: 127.0.0.1 stays the machine's own loopback
MAX_HOSTS = 253  # 127.0.0.2 … 127.0.0.254
STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CGROUP_PERIOD_US = 100_000

# sshd writes one of these to its log when it cannot bind: start() then retries on another port.
_BIND_ERRORS = ("Address already in use", "Cannot bind any address")


class TestbedError(RuntimeError):
    """The testbed could not be set up or a host did not behave as asked."""

    __test__ = False  # not a pytest test class


class FaultUnsupported(TestbedError):
    """This machine cannot inject the asked fault (no writable cgroup cpu controller, no nftables, …).

    Tests that need the fault skip with ``str(exc)`` as the reason.
    """


@dataclass(frozen=True)
class RemoteResult:
    """What a command run through :meth:`Testbed.exec` returned."""

    exit_status: int
    stdout: bytes
    stderr: bytes
    elapsed_s: float


@dataclass
class SimHost:
    """One simulated host: its identity, its files, and its sshd process.

    Attributes:
        index: 0-based position in the testbed. name: inventory name (``node01``…).
        address: ``127.0.0.(index+2)``. dir: the host's own directory (config, keys, log).
        root: the simulated hardware root (``ROBUSTCTL_PROBE_ROOT``).
        nvml_path: the NVML injection file (``ROBUSTCTL_NVML_INJECTION``).
    """

    index: int
    name: str
    address: str
    dir: Path
    root: Path
    nvml_path: Path
    proc: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = field(default=None, repr=False)
    cgroup: _CpuCgroup | None = None

    @property
    def config_path(self) -> Path:
        """The host's ``sshd_config``."""
        return self.dir / "sshd_config"

    @property
    def host_key(self) -> Path:
        """The host's private ed25519 host key (``.pub`` beside it)."""
        return self.dir / "ssh_host_ed25519_key"

    @property
    def log_path(self) -> Path:
        """Where the host's sshd writes its log (``-e``: stderr redirected here)."""
        return self.dir / "sshd.log"

    @property
    def pid(self) -> int | None:
        """PID of the listening sshd, or None when it is not running."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        return self.proc.pid


# --------------------------------------------------------------------------------------------------
# Environment checks and the login user
# --------------------------------------------------------------------------------------------------


def unavailable_reason() -> str | None:
    """Why the SSH testbed cannot run here, or None when it can."""
    if not sys.platform.startswith("linux"):
        return f"the SSH testbed needs Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "the SSH testbed needs root (sshd logs in a uid-0 alias user); run the tests as root"
    if not SSHD.is_file():
        return f"{SSHD} is missing: install openssh-server (bash scripts/testbed-deps.sh)"
    if not shutil.which("ssh-keygen"):
        return "ssh-keygen is missing: install openssh-client (bash scripts/testbed-deps.sh)"
    if not shutil.which("useradd"):
        try:
            pwd.getpwnam(DEFAULT_USER)
        except KeyError:
            return "useradd is missing and the testbed user does not exist: install passwd"
    return None


def ensure_login_user(name: str = DEFAULT_USER) -> Path:
    """Create (once) the uid-0 alias ``name`` with an empty home and an unlocked, passwordless account.

    Root's own home runs ``pyenv init`` from ``.bashrc`` on this image (~100 ms per remote command); the
    alias has an empty home instead. ``usermod -p '*'``: a new account is locked ('!'), and with
    ``UsePAM no`` sshd then silently rejects even key logins. Returns the home directory.
    """
    home = Path("/var/lib") / name
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        proc = subprocess.run(
            ["useradd", "-o", "-u", "0", "-g", "0", "-M", "-d", str(home), "-s", "/bin/bash", name],
            capture_output=True,
            text=True,
            timeout=30,
        )
        try:  # a concurrent test run may have created it first
            entry = pwd.getpwnam(name)
        except KeyError:
            raise TestbedError(f"useradd {name} failed: {proc.stderr.strip()}") from None
    if entry.pw_uid != 0:
        raise TestbedError(f"user {name!r} exists with uid {entry.pw_uid}, not 0: pick another testbed user")
    if _shadow_locked(name):
        subprocess.run(["usermod", "-p", "*", name], check=True, capture_output=True, timeout=30)
    home = Path(entry.pw_dir)
    home.mkdir(mode=0o755, parents=True, exist_ok=True)  # sshd warns on every login when it is missing
    return home


def _shadow_locked(name: str) -> bool:
    try:
        lines = Path("/etc/shadow").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        fields = line.split(":")
        if fields[0] == name and len(fields) > 1:
            return fields[1].startswith("!")
    return False


def _port_free(address: str, port: int) -> bool:
    """Whether a listener could bind ``address:port`` now (with SO_REUSEADDR, as sshd does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError:
            return False
    return True


def find_free_port(addresses: Sequence[str], *, start: int | None = None, attempts: int = 200) -> int:
    """A TCP port that is free on every one of ``addresses``.

    Tries ``start`` first when given, then random ports in 20000–32767 (below Linux's ephemeral range,
    so client connections never take it meanwhile).
    """
    candidates: Iterable[int] = (random.randint(20000, 32767) for _ in range(attempts))
    if start is not None:
        candidates = [start, *candidates]
    for port in candidates:
        if all(_port_free(a, port) for a in addresses):
            return port
    raise TestbedError(f"no free port on {len(addresses)} loopback addresses after {attempts} tries")


def _pdeathsig_prefix() -> list[str]:
    """``setpriv --pdeathsig TERM``: sshd dies with the test process even when it is SIGKILLed.

    Only from the main thread: the kernel sends the signal when the *thread* that forked exits.
    """
    if threading.current_thread() is threading.main_thread() and shutil.which("setpriv"):
        return [shutil.which("setpriv") or "setpriv", "--pdeathsig", "TERM"]
    return []


# --------------------------------------------------------------------------------------------------
# CPU quota through cgroups (v1 cpu controller, or v2 cpu.max)
# --------------------------------------------------------------------------------------------------


@dataclass
class _CpuCgroup:
    """A cgroup with a CPU quota; processes moved in (and their future children) are throttled."""

    path: Path
    version: int  # 1 or 2
    home: Path  # where processes go back to on release

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(f"{pid}\n")

    def release(self) -> None:
        """Move every process back to ``home`` and remove the cgroup."""
        for _ in range(50):
            with contextlib.suppress(OSError):
                for pid in (self.path / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):  # it may have exited meanwhile
                        (self.home / "cgroup.procs").write_text(f"{pid}\n")
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise
                time.sleep(0.02)
        raise TestbedError(f"could not remove cgroup {self.path}: still busy")


def _mountinfo() -> list[tuple[str, str, str, list[str]]]:
    """(root, mount point, fstype, super options) of every mount of this process."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        lf, rf = left.split(), right.split()
        if len(lf) >= 5 and len(rf) >= 3:
            out.append((lf[3], lf[4], rf[0], rf[2].split(",")))
    return out


def _own_cgroup(match: str | None) -> str | None:
    """This process's cgroup path in the hierarchy whose controllers include ``match`` (None: v2)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if match is None and controllers == "":
            return path
        if match is not None and match in controllers.split(","):
            return path
    return None


def _relative(path: str, mount_root: str) -> str:
    if mount_root != "/" and (path == mount_root or path.startswith(mount_root + "/")):
        path = path[len(mount_root) :]
    return path.lstrip("/")


def _remove_stale_cgroups(parent: Path) -> None:
    """rmdir empty ``robustctl-testbed-<pid>_…`` cgroups left by test processes that were killed."""
    with contextlib.suppress(OSError):
        for d in parent.glob("robustctl-testbed-*"):
            pid = d.name.removeprefix("robustctl-testbed-").split("_", 1)[0]
            if pid.isdigit() and not psutil.pid_exists(int(pid)):
                with contextlib.suppress(OSError):
                    d.rmdir()


def make_cpu_cgroup(name: str, cpu_fraction: float) -> _CpuCgroup:
    """Create a cgroup named ``name`` limited to ``cpu_fraction`` of one CPU.

    Tries the cgroup v1 ``cpu`` controller (``cpu.cfs_quota_us``/``cpu.cfs_period_us``), then cgroup v2
    (``cpu.max``, enabling ``+cpu`` in a parent's ``cgroup.subtree_control`` where allowed). Raises
    :class:`FaultUnsupported` with every reason when neither works.
    """
    if not 0 < cpu_fraction <= 64:
        raise ValueError(f"cpu_fraction must be in (0, 64], got {cpu_fraction}")
    quota = max(1000, int(cpu_fraction * CGROUP_PERIOD_US))
    reasons: list[str] = []
    mounts = _mountinfo()

    for root, mnt, fstype, opts in mounts:
        if fstype != "cgroup" or "cpu" not in opts:
            continue
        own = _own_cgroup("cpu")
        if own is None:
            reasons.append("v1: this process has no cpu cgroup")
            break
        home = Path(mnt) / _relative(own, root)
        path = home / name
        _remove_stale_cgroups(home)
        try:
            path.mkdir(exist_ok=True)
            (path / "cpu.cfs_period_us").write_text(f"{CGROUP_PERIOD_US}\n")
            (path / "cpu.cfs_quota_us").write_text(f"{quota}\n")
            return _CpuCgroup(path, 1, home)
        except OSError as exc:
            with contextlib.suppress(OSError):
                path.rmdir()
            reasons.append(f"v1 {path}: {exc.strerror or exc}")
        break
    else:
        reasons.append("v1: no cgroup mount with the cpu controller")

    v2 = [(root, mnt) for root, mnt, fstype, _ in mounts if fstype == "cgroup2"]
    own2 = _own_cgroup(None)
    if not v2 or own2 is None:
        reasons.append("v2: no cgroup2 mount")
    else:
        root, mnt = v2[0]
        home = Path(mnt) / _relative(own2, root)
        # Candidate parents: our own cgroup, then each ancestor up to the mount. A parent holding
        # processes cannot enable controllers for children (no-internal-process rule), so climbing
        # to a parent whose subtree already has +cpu usually succeeds.
        parent = home
        while True:
            try:
                controllers = (parent / "cgroup.controllers").read_text().split()
                if "cpu" not in controllers:
                    reasons.append(f"v2 {parent}: cpu controller not available")
                else:
                    subtree = parent / "cgroup.subtree_control"
                    if "cpu" not in subtree.read_text().split():
                        subtree.write_text("+cpu\n")
                    path = parent / name
                    _remove_stale_cgroups(parent)
                    path.mkdir(exist_ok=True)
                    (path / "cpu.max").write_text(f"{quota} {CGROUP_PERIOD_US}\n")
                    return _CpuCgroup(path, 2, home)
            except OSError as exc:
                reasons.append(f"v2 {parent}: {exc.strerror or exc}")
            if parent == Path(mnt):
                break
            parent = parent.parent
    raise FaultUnsupported("cannot make a CPU-quota cgroup on this machine: " + "; ".join(reasons))


# --------------------------------------------------------------------------------------------------
# The testbed
# --------------------------------------------------------------------------------------------------


class Testbed:
    """N real sshd processes on 127.0.0.2…, each a simulated host with its own hardware state.

    Args:
        workdir: an empty directory for keys, configs, host roots and logs (e.g. from tmp_path_factory).
        n_hosts: how many hosts (1…253).
        port: the port every host listens on; None picks one free on all addresses.
        user: the login user (a uid-0 alias, created on :meth:`start` when missing).
        python: the Python that ``python3`` on every host is (default ``sys.executable``, the venv).
        infiniband: seed an ``mlx5_0`` InfiniBand port on every host.
        startup_timeout_s: how long :meth:`start` waits for every banner.

    Attributes:
        hosts: the :class:`SimHost` list. identity_file, known_hosts, ssh_config: client files.
        startup_s: wall seconds the last :meth:`start` took (keys, configs, sshd processes, banners).
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        workdir: Path,
        n_hosts: int = 8,
        *,
        port: int | None = None,
        user: str = DEFAULT_USER,
        python: str | None = None,
        infiniband: bool = True,
        name_prefix: str = "node",
        startup_timeout_s: float = 30.0,
    ) -> None:
        if not 1 <= n_hosts <= MAX_HOSTS:
            raise ValueError(f"n_hosts must be 1…{MAX_HOSTS}, got {n_hosts}")
        self.workdir = Path(workdir).absolute()
        self.n_hosts = n_hosts
        self.user = user
        self.python = python or sys.executable  # not resolved: the venv's bin/python must stay
        self.infiniband = infiniband
        self.startup_timeout_s = startup_timeout_s
        self._requested_port = port
        self.port = port or 0
        self.startup_s = 0.0
        self._tag = f"{os.getpid()}_{id(self) & 0xFFFFFF:x}"
        width = max(2, len(str(n_hosts)))
        self.name_width = width
        self.name_prefix = name_prefix
        self.hosts: list[SimHost] = []
        for i in range(n_hosts):
            name = f"{name_prefix}{i + 1:0{width}d}"
            d = self.workdir / "hosts" / name
            self.hosts.append(SimHost(i, name, f"127.0.0.{i + FIRST_OCTET}", d, d / "root", d / "nvml.json"))
        client = self.workdir / "client"
        self.identity_file = client / "id_ed25519"
        self.authorized_keys = self.workdir / "authorized_keys"
        self.known_hosts = self.workdir / "known_hosts"
        self.ssh_config = self.workdir / "ssh_config"
        self._stopped: set[int] = set()
        self._frozen: set[int] = set()
        self._blocked: set[int] = set()
        self._lo_refused = False
        self._nft_table: str | None = None
        self._started = False

    # ---- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Testbed:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> float:
        """Create keys, configs and host roots, start every sshd in parallel, wait for every banner.

        Retries on another port when one was picked automatically and a bind failed (a concurrent
        test run took it). Returns and stores in ``startup_s`` the wall seconds taken.
        """
        reason = unavailable_reason()
        if reason:
            raise TestbedError(reason)
        t0 = time.perf_counter()
        ensure_login_user(self.user)
        Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)  # privilege-separation dir
        self._generate_keys()
        for h in self.hosts:
            self._seed(h)
        for attempt in range(5):
            self.port = self._requested_port or find_free_port(
                [h.address for h in self.hosts], start=2222 if attempt == 0 else None
            )
            self._write_configs()
            try:
                self._start_hosts(self.hosts)
                break
            except _PortTaken:
                self._stop_hosts(self.hosts)
                if self._requested_port:
                    raise TestbedError(f"port {self.port} is taken on some loopback address") from None
        else:
            raise TestbedError("could not bind sshd after 5 ports")
        self._started = True
        self.startup_s = time.perf_counter() - t0
        return self.startup_s

    def close(self) -> None:
        """Stop every sshd and its sessions (frozen ones included), drop cgroups and nftables rules."""
        for h in self.hosts:
            if h.cgroup is not None:
                with contextlib.suppress(Exception):
                    h.cgroup.release()
                h.cgroup = None
        self._stop_hosts(self.hosts)
        self._frozen.clear()
        if self._nft_table is not None:
            subprocess.run(
                ["nft", "delete", "table", "inet", self._nft_table], capture_output=True, timeout=10
            )
            self._nft_table = None
            self._blocked.clear()
            self._lo_refused = False
        self._started = False

    # ---- identity and paths ------------------------------------------------------------------

    def host(self, i: int) -> SimHost:
        """The :class:`SimHost` at index ``i`` (0-based; negative indexes count from the end)."""
        return self.hosts[i]

    def address(self, i: int) -> str:
        """``127.0.0.(i+2)``."""
        return self.hosts[i].address

    def name(self, i: int) -> str:
        """Inventory name of host ``i`` (``node01`` for ``i == 0``)."""
        return self.hosts[i].name

    @property
    def names(self) -> list[str]:
        """Every host's name, in order."""
        return [h.name for h in self.hosts]

    @property
    def addresses(self) -> list[str]:
        """Every host's address, in order."""
        return [h.address for h in self.hosts]

    def host_root(self, i: int) -> Path:
        """Host ``i``'s simulated hardware root (what probes see as ``/``)."""
        return self.hosts[i].root

    def nvml_path(self, i: int) -> Path:
        """Host ``i``'s NVML injection file."""
        return self.hosts[i].nvml_path

    def index_of(self, name_or_address: str) -> int:
        """Index of the host with this name or address."""
        for h in self.hosts:
            if name_or_address in (h.name, h.address):
                return h.index
        raise KeyError(name_or_address)

    def hostlist(self, hosts: Iterable[int] | None = None) -> str:
        """Comma-separated names (``node01,node03``), for ``--hosts`` or ``pdsh -w``."""
        idx = range(self.n_hosts) if hosts is None else hosts
        return ",".join(self.hosts[i].name for i in idx)

    def sshd_log(self, i: int) -> str:
        """Everything host ``i``'s sshd has logged (for assertion messages)."""
        try:
            return self.hosts[i].log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # ---- inventory ---------------------------------------------------------------------------

    def inventory_dict(
        self, hosts: Iterable[int] | Iterable[Mapping[str, Any]] | None = None, **overrides: Any
    ) -> dict[str, Any]:
        """The inventory as a dict (see :meth:`write_inventory`); ``overrides`` merge in recursively.

        A dict override merges into the section of that name; any other value (lists included, e.g.
        ``hosts=[…]`` entries) replaces it.
        """
        chosen = list(range(self.n_hosts) if hosts is None else hosts)
        if all(isinstance(h, int) for h in chosen):
            entries = self.host_entries(chosen)
        else:  # ready-made ``hosts:`` entries (dicts), e.g. from host_entries() plus a custom one
            entries = [dict(h) for h in chosen]
        inv: dict[str, Any] = {
            "ssh": {
                "user": self.user,
                "port": self.port,
                "identity_file": str(self.identity_file),
                "known_hosts": str(self.known_hosts),
                "connect_timeout_s": 5,
                "command_timeout_s": 120,
                "use_ssh_config": False,
            },
            "python": {"path": self.python, "wrapper": []},
            "gpus_per_host": 0,
            "hosts": entries,
            "diagnose": {"concurrency": 64, "host_timeout_s": 60, "deadline_s": 300, "retries": 1},
        }
        return _merge(inv, overrides)

    def host_entries(
        self, hosts: Iterable[int], *, state: str = "active", labels: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Inventory ``hosts:`` entries; consecutive hosts of one rack become one range entry.

        Racks are 8 hosts (``rack: r1`` for node01–node08, …) unless ``labels`` are given.
        """
        entries: list[dict[str, Any]] = []
        run: list[int] = []

        def rack(i: int) -> dict[str, str]:
            return dict(labels) if labels is not None else {"rack": f"r{i // 8 + 1}"}

        def flush() -> None:
            if not run:
                return
            a, b = run[0], run[-1]
            if a == b:
                name, address = self.hosts[a].name, self.hosts[a].address
            else:
                w = self.name_width
                name = f"{self.name_prefix}[{a + 1:0{w}d}-{b + 1:0{w}d}]"
                address = f"127.0.0.[{a + FIRST_OCTET}-{b + FIRST_OCTET}]"
            entries.append({"name": name, "address": address, "labels": rack(a), "state": state})
            run.clear()

        for i in sorted(set(hosts)):
            if run and (i != run[-1] + 1 or rack(i) != rack(run[-1])):
                flush()
            run.append(i)
        flush()
        return entries

    def write_inventory(
        self, path: Path, hosts: Iterable[int] | Iterable[Mapping[str, Any]] | None = None, **overrides: Any
    ) -> Path:
        """Write a YAML inventory for robustctl and return its path.

        ``hosts``: host indices (default all; consecutive ones become range entries) or ready-made
        ``hosts:`` entry dicts (e.g. ``[custom, *tb.host_entries(range(1, 8))]``). ``overrides`` merge into the default dict, e.g. ``diagnose={"deadline_s": 20}`` or
        ``gpus_per_host=8``. The writer is a thin dict→YAML: schema changes are one-line fixes here.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(self.inventory_dict(hosts, **overrides), sort_keys=False))
        return path

    # ---- simulated hardware faults -----------------------------------------------------------

    def kern_log(self, i: int) -> Path:
        """Host ``i``'s kernel log file (``var/log/kern.log`` under its root)."""
        return self.hosts[i].root / "var/log/kern.log"

    def append_kern_log(self, i: int, message: str, *, uptime_s: float | None = None) -> str:
        """Append one syslog-format kernel line (``Mon DD HH:MM:SS nodeNN kernel: [ uptime] message``)."""
        h = self.hosts[i]
        up = uptime_s if uptime_s is not None else 350000.0 + random.random() * 100
        line = f"{_syslog_prefix(h.name, time.time())}[{up:12.6f}] {message}"
        with self.kern_log(i).open("a") as f:
            f.write(line + "\n")
        return line

    def inject_xid(
        self,
        i: int,
        xid: int = 79,
        pci: str = "0000:3b:00",
        *,
        pid: int | None = None,
        process: str | None = None,
        message: str | None = None,
    ) -> str:
        """Append a real-format ``NVRM: Xid`` line to host ``i``'s kernel log and return it.

        Default: ``NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off
        the bus.`` (the driver reports no process for XID 79). ``pid``/``process`` name a process.
        """
        texts = {
            79: "GPU has fallen off the bus.",
            48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
            "at physAddr 0x7fffa8860 partition 7, subpartition 1.",
            63: "Row Remapper: New row marked for remapping, reset gpu to activate",
            64: "Row Remapper: Failed to remap a row",
            74: "NVLink: fatal error detected on link 3(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
            13: "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
            31: "Ch 00000013, engmask 00000101, intr 10000000",
            94: "Contained: SM (0x1). RST: No, D-RST: No",
            95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
        }
        text = message if message is not None else texts.get(xid, "An unspecified error occurred.")
        who = (
            f"pid={pid}, name={process or 'python3'}"
            if pid is not None
            else "pid='<unknown>', name=<unknown>"
        )
        return self.append_kern_log(i, f"NVRM: Xid (PCI:{pci}): {xid}, {who}, {text}")

    def set_nvml(self, i: int, gpus: Sequence[Any], **kwargs: Any) -> Path:
        """Write host ``i``'s NVML injection file with ``robustctl.testing.fake_nvml.write_injection``.

        ``gpus`` are ``FakeGpu`` records; ``kwargs`` pass through (driver version, …).
        """
        from robustctl.testing import fake_nvml

        path = self.hosts[i].nvml_path
        fake_nvml.write_injection(path, list(gpus), **kwargs)
        return path

    def clear_nvml(self, i: int) -> None:
        """Restore host ``i``'s NVML default: no NVIDIA driver, as on this machine.

        The injection file says ``nvmlInit`` raises ``NVMLError_LibraryNotFound`` (12), which is what
        pynvml does on a machine without a GPU driver: the nvml probe reports NVML unavailable.
        """
        from robustctl.testing import fake_nvml

        fake_nvml.write_injection(
            self.hosts[i].nvml_path, (), init_error=fake_nvml.NVML_ERROR_LIBRARY_NOT_FOUND
        )

    def degrade_nic(self, i: int, iface: str = "eth0") -> None:
        """Take host ``i``'s NIC down: ``operstate`` down, ``carrier`` 0, ``speed`` -1 (as Linux shows)."""
        d = self.hosts[i].root / "sys/class/net" / iface
        if not d.is_dir():
            raise TestbedError(f"{self.hosts[i].name} has no NIC {iface}")
        _write(d / "operstate", "down\n")
        _write(d / "carrier", "0\n")
        _write(d / "speed", "-1\n")
        changes = int((d / "carrier_changes").read_text() or "0")
        _write(d / "carrier_changes", f"{changes + 1}\n")

    def degrade_ib(self, i: int, device: str = "mlx5_0", port: int = 1) -> None:
        """Take host ``i``'s InfiniBand port down: ``1: DOWN`` / ``3: Disabled``, link_downed counted."""
        d = self.hosts[i].root / "sys/class/infiniband" / device / "ports" / str(port)
        if not d.is_dir():
            raise TestbedError(f"{self.hosts[i].name} has no InfiniBand port {device}/{port}")
        _write(d / "state", "1: DOWN\n")
        _write(d / "phys_state", "3: Disabled\n")
        _write(d / "counters/link_downed", "1\n")

    def set_mount_readonly(self, i: int, mount_point: str = "/raid") -> None:
        """Show ``mount_point`` as remounted read-only in host ``i``'s ``/proc/mounts``."""
        path = self.hosts[i].root / "proc/mounts"
        out, found = [], False
        for line in path.read_text().splitlines():
            f = line.split()
            if len(f) >= 4 and f[1] == mount_point:
                opts = ["ro" if o == "rw" else o for o in f[3].split(",")]
                f[3], found = ",".join(opts), True
            out.append(" ".join(f))
        if not found:
            raise TestbedError(f"{self.hosts[i].name} has no mount {mount_point}")
        path.write_text("\n".join(out) + "\n")

    def set_loadavg(
        self, i: int, one: float, five: float | None = None, fifteen: float | None = None
    ) -> None:
        """Set host ``i``'s ``/proc/loadavg``."""
        five = one if five is None else five
        fifteen = five if fifteen is None else fifteen
        _write(self.hosts[i].root / "proc/loadavg", f"{one:.2f} {five:.2f} {fifteen:.2f} 3/1234 56789\n")

    def set_meminfo(self, i: int, **fields_kb: int) -> None:
        """Override ``/proc/meminfo`` fields of host ``i`` in kB, e.g. ``MemAvailable=1024``."""
        path = self.hosts[i].root / "proc/meminfo"
        lines = []
        for line in path.read_text().splitlines():
            key = line.split(":", 1)[0]
            if key in fields_kb:
                line = f"{key + ':':<16}{fields_kb.pop(key):>10} kB"
            lines.append(line)
        if fields_kb:
            raise TestbedError(f"no such meminfo fields: {sorted(fields_kb)}")
        path.write_text("\n".join(lines) + "\n")

    # ---- process faults ----------------------------------------------------------------------

    def stop_host(self, i: int) -> None:
        """Stop host ``i``'s sshd and every session it started: new connections are refused."""
        h = self.hosts[i]
        self._stop_hosts([h])
        self._frozen.discard(i)
        self._stopped.add(i)

    def start_host(self, i: int) -> None:
        """Start host ``i``'s sshd again (same port, same host key) and wait for its banner."""
        h = self.hosts[i]
        if h.pid is None:
            self._start_hosts([h])
        self._stopped.discard(i)

    def freeze_host(self, i: int) -> None:
        """SIGSTOP host ``i``'s sshd: TCP still connects (kernel backlog), the SSH banner never comes."""
        pid = self._require_pid(i)
        os.kill(pid, signal.SIGSTOP)
        self._frozen.add(i)

    def thaw_host(self, i: int) -> None:
        """SIGCONT host ``i``'s sshd; connections queued meanwhile are then served."""
        pid = self.hosts[i].pid
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        self._frozen.discard(i)

    def slow_host(self, i: int, cpu_fraction: float = 0.1) -> None:
        """Limit everything host ``i``'s sshd starts from now on to ``cpu_fraction`` of one CPU.

        The listener joins a cgroup with a CPU quota; sessions and probes it forks inherit it, so
        the host's burn probe measures lower throughput. Raises :class:`FaultUnsupported` when this
        machine has no usable cgroup cpu controller (v1 or v2).
        """
        h = self.hosts[i]
        pid = self._require_pid(i)
        if h.cgroup is None:
            h.cgroup = make_cpu_cgroup(f"robustctl-testbed-{self._tag}-{h.name}", cpu_fraction)
        else:
            quota = max(1000, int(cpu_fraction * CGROUP_PERIOD_US))
            if h.cgroup.version == 1:
                (h.cgroup.path / "cpu.cfs_quota_us").write_text(f"{quota}\n")
            else:
                (h.cgroup.path / "cpu.max").write_text(f"{quota} {CGROUP_PERIOD_US}\n")
        h.cgroup.add(pid)

    def unslow_host(self, i: int) -> None:
        """Lift host ``i``'s CPU quota (its processes go back to the test's own cgroup)."""
        h = self.hosts[i]
        if h.cgroup is not None:
            h.cgroup.release()
            h.cgroup = None

    def slow_unsupported_reason(self) -> str | None:
        """Why :meth:`slow_host` cannot work here (tries a throwaway cgroup), or None when it can."""
        try:
            make_cpu_cgroup(f"robustctl-testbed-{self._tag}-probe", 0.5).release()
        except FaultUnsupported as exc:
            return str(exc)
        return None

    def block_host(self, i: int, loss_percent: int = 100) -> None:
        """Drop packets to host ``i``'s sshd with nftables (``loss_percent`` < 100: random loss).

        A full drop makes new connections time out at connect and stalls open ones. Rules live in a
        table of this testbed's own (``inet robustctl_tb_…``), removed by :meth:`close`. Raises
        :class:`FaultUnsupported` when nft is missing or refuses.
        """
        if not 0 < loss_percent <= 100:
            raise ValueError(f"loss_percent must be in (0, 100], got {loss_percent}")
        h = self.hosts[i]
        table = self._ensure_nft_table()
        chain = f"h{h.index}"
        match = f"ip daddr {h.address} tcp dport {self.port}"
        rule = (
            f"{match} drop" if loss_percent == 100 else f"{match} numgen random mod 100 < {loss_percent} drop"
        )
        script = (
            f"add chain inet {table} {chain} {{ type filter hook input priority -10; policy accept; }}\n"
            f"flush chain inet {table} {chain}\n"
            f"add rule inet {table} {chain} {rule}\n"
        )
        self._nft(script)
        self._blocked.add(i)

    def throttle_inbound(self, i: int, packets_per_s: int = 400) -> None:
        """Slow the flows host ``i`` accepts: packets to its address beyond ``packets_per_s`` are dropped.

        Its sshd port is left alone (probes start and answer at full speed). Only flows *to* the
        host's address are shaped: on one loopback a host's outgoing connections leave from
        127.0.0.1, so they cannot be told apart from another host's. A packet rate, not a byte rate:
        nftables byte limits do not hold back loopback's 64 KiB segments. Lifted by
        :meth:`unblock_host` / :meth:`reset_faults`. Raises :class:`FaultUnsupported` without nft.
        """
        h = self.hosts[i]
        table = self._ensure_nft_table()
        chain = f"h{h.index}"
        rule = (
            f"ip daddr {h.address} tcp dport != {self.port} "
            f"limit rate over {int(packets_per_s)}/second burst 10 packets drop"
        )
        self._nft(
            f"add chain inet {table} {chain} {{ type filter hook input priority -10; policy accept; }}\n"
            f"flush chain inet {table} {chain}\n"
            f"add rule inet {table} {chain} {rule}\n"
        )
        self._blocked.add(i)

    def refuse_loopback_ports(self, first: int, last: int) -> None:
        """Refuse TCP connections to ``127.0.0.1`` on ports ``first``-``last`` (a reset, as from a closed port).

        The simulated hosts share this machine's one loopback, so a process that dials 127.0.0.1 would
        reach a listener of *another* simulated host; on real hosts 127.0.0.1 is each host's own. With
        this rule a listener on those ports is reachable only at its host's own 127.0.0.x address.
        Removed by :meth:`reset_faults` and :meth:`close`.
        """
        table = self._ensure_nft_table()
        self._nft(
            f"add chain inet {table} lo_refuse {{ type filter hook input priority -10; policy accept; }}\n"
            f"flush chain inet {table} lo_refuse\n"
            f"add rule inet {table} lo_refuse ip daddr 127.0.0.1 tcp dport {int(first)}-{int(last)} "
            "reject with tcp reset\n"
        )
        self._lo_refused = True

    def unblock_host(self, i: int) -> None:
        """Remove host ``i``'s nftables drop (or throttle) rule."""
        if i not in self._blocked or self._nft_table is None:
            return
        table, chain = self._nft_table, f"h{i}"
        self._nft(f"flush chain inet {table} {chain}\ndelete chain inet {table} {chain}\n")
        self._blocked.discard(i)

    def reset_faults(self) -> None:
        """Restore a healthy fleet: thaw, lift quotas and drops, restart stopped or dead sshd, reseed roots.

        Cheap (a few ms for 8 hosts when nothing was broken): meant to run after every test.
        """
        for i in list(self._frozen):
            self.thaw_host(i)
        for i in list(self._blocked):
            self.unblock_host(i)
        if self._lo_refused and self._nft_table is not None:
            self._nft(
                f"flush chain inet {self._nft_table} lo_refuse\ndelete chain inet {self._nft_table} lo_refuse\n"
            )
            self._lo_refused = False
        for h in self.hosts:
            if h.cgroup is not None:
                self.unslow_host(h.index)
        dead = [h for h in self.hosts if h.pid is None]
        if dead:
            self._stop_hosts(dead)  # reap and close logs
            self._start_hosts(dead)
        self._stopped.clear()
        for h in self.hosts:
            self._seed(h)

    @property
    def faults(self) -> dict[str, list[int]]:
        """Process and network faults in force: ``{"stopped": […], "frozen": […], "slow": […], "blocked": […]}``."""
        return {
            "stopped": sorted(self._stopped),
            "frozen": sorted(self._frozen),
            "slow": [h.index for h in self.hosts if h.cgroup is not None],
            "blocked": sorted(self._blocked),
        }

    # ---- clients -----------------------------------------------------------------------------

    def connect(
        self, i: int, *, timeout: float = 5.0, banner_timeout: float | None = None
    ) -> paramiko.SSHClient:
        """A paramiko client logged in to host ``i``, host key checked (RejectPolicy) against known_hosts."""
        h = self.hosts[i]
        sock = socket.create_connection((h.address, self.port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client = paramiko.SSHClient()
        client.load_host_keys(str(self.known_hosts))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(
                h.address,
                port=self.port,
                username=self.user,
                key_filename=str(self.identity_file),
                look_for_keys=False,
                allow_agent=False,
                sock=sock,
                timeout=timeout,
                banner_timeout=banner_timeout if banner_timeout is not None else timeout,
                auth_timeout=timeout,
            )
        except BaseException:
            client.close()
            sock.close()
            raise
        return client

    def exec(
        self,
        i: int,
        argv: Sequence[str] | str,
        *,
        stdin: bytes | None = None,
        timeout: float = 60.0,
    ) -> RemoteResult:
        """Run ``argv`` (quoted once with shlex; a str is sent as is) on host ``i`` over a new connection.

        Drains stdout and stderr concurrently before reading the exit status (no paramiko window
        deadlock on large output). Raises TimeoutError when the command outlives ``timeout``.
        """
        t0 = time.perf_counter()
        command = argv if isinstance(argv, str) else shlex.join(argv)
        client = self.connect(i, timeout=min(timeout, 10.0))
        try:
            chan = client.get_transport().open_session(timeout=timeout)  # type: ignore[union-attr]
            chan.settimeout(timeout)
            chan.exec_command(command)
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            out: list[bytes] = []
            err: list[bytes] = []
            reader = threading.Thread(target=_drain, args=(chan.recv_stderr, err), daemon=True)
            reader.start()
            try:
                _drain(chan.recv, out)
            except TimeoutError as exc:
                raise TimeoutError(f"{self.hosts[i].name}: {command!r} ran past {timeout}s") from exc
            reader.join(timeout)
            status = chan.recv_exit_status()
        finally:
            client.close()
        return RemoteResult(status, b"".join(out), b"".join(err), time.perf_counter() - t0)

    def write_ssh_config(self, path: Path | None = None, *, connect_timeout_s: int = 5) -> Path:
        """An OpenSSH client config for every host, by name and by address (for ``ssh -F``, pdsh).

        Strict host-key checking against the testbed's known_hosts, batch mode, key auth only.
        """
        path = Path(path) if path else self.ssh_config
        common = [
            f"    User {self.user}",
            f"    Port {self.port}",
            f"    IdentityFile {self.identity_file}",
            "    IdentitiesOnly yes",
            f"    UserKnownHostsFile {self.known_hosts}",
            "    GlobalKnownHostsFile /dev/null",
            "    StrictHostKeyChecking yes",
            "    BatchMode yes",
            "    PasswordAuthentication no",
            f"    ConnectTimeout {connect_timeout_s}",
            "    LogLevel ERROR",
        ]
        blocks = []
        for h in self.hosts:
            blocks.append(f"Host {h.name}\n    HostName {h.address}\n")
        blocks.append("Host *\n" + "\n".join(common) + "\n")
        path.write_text("".join(blocks))
        return path

    # ---- internals ---------------------------------------------------------------------------

    def _require_pid(self, i: int) -> int:
        pid = self.hosts[i].pid
        if pid is None:
            raise TestbedError(f"{self.hosts[i].name}: sshd is not running")
        return pid

    def _seed(self, h: SimHost) -> None:
        seed_healthy_root(h.root, h.name, h.index, infiniband=self.infiniband)
        self.clear_nvml(h.index)

    def _generate_keys(self) -> None:
        """Client key and one ed25519 host key per host, ssh-keygen run in parallel."""
        self.identity_file.parent.mkdir(parents=True, exist_ok=True)
        jobs = [self.identity_file] + [h.host_key for h in self.hosts]
        procs = []
        for key in jobs:
            key.parent.mkdir(parents=True, exist_ok=True)
            for p in (key, key.with_name(key.name + ".pub")):
                p.unlink(missing_ok=True)
            procs.append(
                subprocess.Popen(
                    [
                        "ssh-keygen",
                        "-q",
                        "-t",
                        "ed25519",
                        "-N",
                        "",
                        "-C",
                        "robustctl-testbed",
                        "-f",
                        str(key),
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            )
        for key, p in zip(jobs, procs):
            _, err = p.communicate(timeout=60)
            if p.returncode != 0:
                raise TestbedError(f"ssh-keygen {key}: {err.decode(errors='replace').strip()}")
        pub = self.identity_file.with_name(self.identity_file.name + ".pub").read_text()
        self.authorized_keys.write_text(pub)
        self.authorized_keys.chmod(0o644)  # sshd reads it as the target user

    def _write_configs(self) -> None:
        path_env = f"{Path(self.python).parent}:{STD_PATH}"
        known = []
        for h in self.hosts:
            key_type, key_b64 = h.host_key.with_name(h.host_key.name + ".pub").read_text().split()[:2]
            known.append(f"[{h.address}]:{self.port} {key_type} {key_b64}\n")
            setenv = " ".join(
                f'{k}="{v}"'
                for k, v in (
                    ("ROBUSTCTL_PROBE_ROOT", h.root),
                    ("ROBUSTCTL_NVML_INJECTION", h.nvml_path),
                    ("PATH", path_env),
                )
            )
            h.config_path.write_text(
                "\n".join(
                    [
                        f"# robustctl testbed host {h.name} ({h.address})",
                        f"ListenAddress {h.address}",
                        f"Port {self.port}",
                        f"HostKey {h.host_key}",
                        f"PidFile {h.dir / 'sshd.pid'}",
                        f"AuthorizedKeysFile {self.authorized_keys}",
                        f"AllowUsers {self.user}",
                        "PermitRootLogin prohibit-password",
                        "PubkeyAuthentication yes",
                        "PasswordAuthentication no",
                        "KbdInteractiveAuthentication no",
                        "UsePAM no",
                        "StrictModes no",
                        "UseDNS no",
                        "MaxStartups 100:30:200",
                        "MaxSessions 100",
                        "LoginGraceTime 30",
                        "PrintMotd no",
                        "PrintLastLog no",
                        "X11Forwarding no",
                        "LogLevel INFO",
                        "Subsystem sftp internal-sftp",
                        f"SetEnv {setenv}",
                        "",
                    ]
                )
            )
        self.known_hosts.write_text("".join(known))
        self.write_ssh_config()

    def _start_hosts(self, hosts: Sequence[SimHost]) -> None:
        """Start sshd for ``hosts`` at once, then wait for all their banners (one deadline)."""
        prefix = _pdeathsig_prefix()
        for h in hosts:
            h.log_file = h.log_path.open("ab")
            h.proc = subprocess.Popen(
                [*prefix, str(SSHD), "-D", "-e", "-f", str(h.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=h.log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.startup_timeout_s
        pending = list(hosts)
        while pending:
            still = []
            for h in pending:
                if h.proc is not None and h.proc.poll() is not None:
                    log = self.sshd_log(h.index)
                    if any(e in log for e in _BIND_ERRORS):
                        raise _PortTaken(h.name)
                    tail = "\n".join(log.splitlines()[-5:])
                    raise TestbedError(f"{h.name}: sshd exited with {h.proc.returncode}:\n{tail}")
                if not _banner_ready(h.address, self.port):
                    still.append(h)
            pending = still
            if pending:
                if time.monotonic() > deadline:
                    names = ", ".join(h.name for h in pending)
                    raise TestbedError(f"sshd did not answer within {self.startup_timeout_s}s: {names}")
                time.sleep(0.01)

    def _stop_hosts(self, hosts: Sequence[SimHost]) -> None:
        """Kill each listener and all its descendants (SIGCONT first, then SIGTERM, then SIGKILL)."""
        victims: list[psutil.Process] = []
        for h in hosts:
            if h.proc is not None and h.proc.poll() is None:
                try:
                    p = psutil.Process(h.proc.pid)
                    victims.extend([p, *p.children(recursive=True)])
                except psutil.NoSuchProcess:
                    pass
        for sig in (signal.SIGCONT, signal.SIGTERM):
            for p in victims:
                with contextlib.suppress(psutil.Error):
                    p.send_signal(sig)
        _, alive = psutil.wait_procs(victims, timeout=3)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(alive, timeout=3)
        for h in hosts:
            if h.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    h.proc.wait(timeout=3)
                h.proc = None
            if h.log_file is not None:
                h.log_file.close()
                h.log_file = None

    def _ensure_nft_table(self) -> str:
        if self._nft_table is None:
            if not shutil.which("nft"):
                raise FaultUnsupported("nft is missing: install nftables (bash scripts/testbed-deps.sh)")
            table = f"robustctl_tb_{self._tag}"
            self._nft(f"add table inet {table}\n")
            self._nft_table = table
        return self._nft_table

    @staticmethod
    def _nft(script: str) -> None:
        proc = subprocess.run(["nft", "-f", "-"], input=script, capture_output=True, text=True, timeout=10)
        if proc.returncode != 0:
            raise FaultUnsupported(f"nft refused: {proc.stderr.strip()}")


class _PortTaken(TestbedError):
    pass


def _banner_ready(address: str, port: int) -> bool:
    """Whether ``address:port`` accepts a TCP connection and sends an SSH banner."""
    try:
        with socket.create_connection((address, port), timeout=1.0) as s:
            s.settimeout(2.0)
            return s.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def _drain(recv: Any, sink: list[bytes]) -> None:
    while True:
        chunk = recv(65536)  # raises TimeoutError (socket.timeout) past the channel timeout
        if not chunk:
            return
        sink.append(chunk)


def _merge(base: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


@contextlib.contextmanager
def running_testbed(workdir: Path, n_hosts: int = 8, **kwargs: Any) -> Iterator[Testbed]:
    """Context manager: a started :class:`Testbed` that is closed on exit, errors included."""
    tb = Testbed(workdir, n_hosts, **kwargs)
    try:
        tb.start()
        yield tb
    finally:
        tb.close()


def _main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.integration.testbed [N]``: start N hosts, print startup time and inventory, stop."""
    import tempfile

    args = list(sys.argv[1:] if argv is None else argv)
    n = int(args[0]) if args else 8
    with tempfile.TemporaryDirectory(prefix="robustctl-testbed-") as d, running_testbed(Path(d), n) as tb:
        print(json.dumps({"hosts": n, "port": tb.port, "startup_s": round(tb.startup_s, 3)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
