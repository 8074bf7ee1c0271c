"""A real Slurm 22.05 cluster on this machine: a private munged, one slurmctld and N slurmd, on loopback.

Everything lives in one directory (``base``): the munge key and socket, ``slurm.conf``, the controller's
state, one spool directory per node, and every log. The daemons run in the foreground as children of
the test process, with ``SLURM_CONF`` and a marker variable (``ROBUSTCTL_SLURMBED=<base>``) in their
environment; :meth:`SlurmBed.close` stops them and kills every process that carries the marker (job
steps are re-parented to init by slurmd, so they are found by the marker, not by parentage). Nothing
of the machine's own Slurm or munge is used or touched (``/etc/munge``, ``/run/munge`` stay as they are).

Working configuration (measured on Debian 12, Slurm 22.05.8; see ``../shared/testbed-notes.md``):

* munged: ``munged -F --force --socket=BASE/munge/munge.sock --key-file=…`` as root, a fresh key from
  ``mungekey``; Slurm finds the socket through ``AuthInfo=socket=…``. ``--force`` because pytest's
  temp directories are not world-executable, which munged otherwise refuses for its socket.
* One ``NodeName=snK NodeHostname=localhost NodeAddr=127.0.0.1 Port=P_K`` line per node, each slurmd
  started with ``slurmd -D -N snK -f CONF``; ``CommunicationParameters=NoInAddrAny`` makes slurmctld and
  every slurmd bind 127.0.0.1 only
  (with ``NoCtldInAddrAny``), never all interfaces. ``ProctrackType=proctrack/linuxproc``,
  ``TaskPlugin=task/none`` (no cgroups), per-node ``SlurmdSpoolDir=BASE/spool/%n`` created beforehand,
  ``ReturnToService=2``, ``SlurmdTimeout=10``.
* All nodes are ``idle`` about a second after start; :attr:`SlurmBed.startup_s` records it.

Only loopback addresses are ever used. Needs root and the Debian packages slurmctld, slurmd,
slurm-client and munge (``scripts/testbed-deps.sh``); :func:`unavailable_reason` says why not.

Example::

    with SlurmBed(tmp_path, n_nodes=4) as bed:
        job = bed.sbatch(nodes=2)
        bed.wait_job(job, "RUNNING")
        subprocess.run(["sinfo"], env=bed.env)
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import psutil
import pytest

from tests.support.needs import needed

BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "scontrol", "sinfo", "squeue", "sbatch", "scancel")
MARKER = "ROBUSTCTL_SLURMBED"
STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LOAD_CHECK_OFF = "thresholds: {load_warn_per_cpu: 1000}\n"
"""The ``thresholds:`` line of every inventory written for this bed. Every slurmd "node" is this one
machine, so the sweep's ``host.load`` check reads this machine's load average, which says nothing of
a node: whenever other work loads the machine it turns into a warning, and an expected exit 0 into 1.
The warning is raised out of reach (``load_warn_per_cpu``), so no test of the bed depends on the load
(``sweep --local`` as the HealthCheckProgram reads no inventory: ``test_slurm_healthcheck.py`` reads
each run's own report instead)."""


class SlurmBedError(RuntimeError):
    """The Slurm testbed could not start or did not behave as asked (the message has the log tails)."""


def unavailable_reason() -> str | None:
    """Why the Slurm testbed cannot run here, or None when it can."""
    if not sys.platform.startswith("linux"):
        return f"the Slurm testbed needs Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "the Slurm testbed needs root (slurmd runs jobs as root); run the tests as root"
    missing = [b for b in BINARIES if shutil.which(b, path=STD_PATH) is None]
    if missing:
        return (
            f"Slurm/munge binaries missing ({', '.join(missing)}): install slurmctld slurmd slurm-client "
            "munge (bash scripts/testbed-deps.sh)"
        )
    return None


def require_slurmbed() -> None:
    """Skip when the Slurm testbed cannot run; fail in CI (:func:`tests.support.needs.needed`)."""
    needed(unavailable_reason())


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(n: int, *, attempts: int = 500) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 in 20000–32767 (below the ephemeral range)."""
    ports: list[int] = []
    for _ in range(attempts):
        port = random.randint(20000, 32767)
        if port not in ports and _port_free(port):
            ports.append(port)
            if len(ports) == n:
                return ports
    raise SlurmBedError(f"no {n} free ports on 127.0.0.1 after {attempts} tries")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"({path.name}: none)"
    return f"--- {path.name}:\n" + "\n".join(text[-lines:])


class SlurmBed:
    """munged + slurmctld + ``n_nodes`` slurmd (``sn1`` … ``snN``) in ``base``, all on 127.0.0.1.

    Attributes:
        base: the directory of everything. n_nodes: node count. nodes: node names in order.
        conf: path of slurm.conf. env: environment for Slurm commands (``SLURM_CONF`` set).
        startup_s: wall time from the first daemon start to every node idle.
    """

    def __init__(
        self, base: Path, n_nodes: int = 4, *, slurmd_timeout_s: int = 10, extra_conf: Sequence[str] = ()
    ) -> None:
        if not 1 <= n_nodes <= 64:
            raise ValueError(f"n_nodes must be 1..64, got {n_nodes}")
        self.base = Path(base)
        self.n_nodes = n_nodes
        self.nodes = [f"sn{i}" for i in range(1, n_nodes + 1)]
        self.conf = self.base / "slurm.conf"
        self.log_dir = self.base / "log"
        self.munge_dir = self.base / "munge"
        self.munge_socket = self.munge_dir / "munge.sock"
        self.slurmd_timeout_s = slurmd_timeout_s
        self.extra_conf = list(extra_conf)
        self.ctld_port = 0
        self.node_ports: dict[str, int] = {}
        self.startup_s = 0.0
        self.env = {
            **os.environ,
            "PATH": f"{STD_PATH}:{os.environ.get('PATH', '')}",
            "SLURM_CONF": str(self.conf),
            MARKER: str(self.base),
            "LC_ALL": "C",
        }
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []

    # ---- lifecycle --------------------------------------------------------------------------------

    def __enter__(self) -> SlurmBed:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, timeout_s: float = 30.0) -> None:
        """Write the configuration, start munged, slurmctld and every slurmd; wait for all idle."""
        started = time.monotonic()
        try:
            self._write_files()
            self._start_munged()
            self._spawn("slurmctld", ["slurmctld", "-D", "-c", "-f", str(self.conf)])
            for node in self.nodes:
                self._spawn(f"slurmd-{node}", ["slurmd", "-D", "-N", node, "-f", str(self.conf)])
            self.wait_nodes({n: "idle" for n in self.nodes}, timeout_s=timeout_s)
        except BaseException:
            self.close()
            raise
        self.startup_s = time.monotonic() - started

    def _write_files(self) -> None:
        for d in (self.log_dir, self.base / "state", self.munge_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.munge_dir.chmod(0o700)
        for node in self.nodes:
            (self.base / "spool" / node).mkdir(parents=True, exist_ok=True)
        ports = free_ports(self.n_nodes + 1)
        self.ctld_port, node_ports = ports[0], ports[1:]
        self.node_ports = dict(zip(self.nodes, node_ports, strict=True))
        b = self.base
        lines = [
            "# Written by tests/integration/slurmbed.py: a throw-away cluster on 127.0.0.1",
            "ClusterName=rbtest",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            "CommunicationParameters=NoInAddrAny,NoCtldInAddrAny",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={b / 'state'}",
            f"SlurmdSpoolDir={b / 'spool'}/%n",
            f"SlurmctldPidFile={b / 'slurmctld.pid'}",
            f"SlurmdPidFile={b / 'spool'}/%n/slurmd.pid",
            f"SlurmctldLogFile={self.log_dir / 'slurmctld.log'}",
            f"SlurmdLogFile={self.log_dir}/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "ReturnToService=2",
            f"SlurmdTimeout={self.slurmd_timeout_s}",
            "SlurmctldTimeout=10",
            "KillWait=2",
            "MinJobAge=600",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MailProg=/bin/true",
            *self.extra_conf,
        ]
        for node, port in self.node_ports.items():
            lines.append(
                f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} "
                "CPUs=1 RealMemory=100 State=UNKNOWN"
            )
        lines.append(
            f"PartitionName=debug Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP"
        )
        self.conf.write_text("\n".join(lines) + "\n")

    def _spawn(self, name: str, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        log = open(self.log_dir / f"{name}.out", "ab")  # closed in close()
        self._logs.append(log)
        exe = shutil.which(argv[0], path=STD_PATH) or argv[0]
        proc = subprocess.Popen(
            [exe, *argv[1:]],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.base,
            start_new_session=True,
        )
        self._procs[name] = proc
        return proc

    def _start_munged(self) -> None:
        key = self.munge_dir / "munge.key"
        subprocess.run(
            ["mungekey", "-c", "-f", "-k", str(key), "-b", "1024"],
            check=True,
            capture_output=True,
            env=self.env,
            timeout=30,
        )
        self._spawn(
            "munged",
            [
                "munged",
                "-F",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--log-file={self.log_dir / 'munged.log'}",
                f"--pid-file={self.munge_dir / 'munged.pid'}",
                f"--seed-file={self.munge_dir / 'munged.seed'}",
                "--origin=127.0.0.1",
            ],
        )
        deadline = time.monotonic() + 10
        while not self.munge_socket.exists():
            if self._procs["munged"].poll() is not None or time.monotonic() > deadline:
                raise SlurmBedError(f"munged did not start\n{self.logs()}")
            time.sleep(0.02)

    def close(self) -> None:
        """Stop every daemon and kill every process this testbed started (jobs included). Idempotent.

        Order matters: job processes first, then the slurmd, slurmctld and munged last (a slurmd whose
        munged is gone can hang on SIGTERM).
        """
        ctld = self._procs.get("slurmctld")
        if ctld is not None and ctld.poll() is None:
            with contextlib.suppress(Exception):
                os.kill(ctld.pid, signal.SIGCONT)
                subprocess.run(["scancel", "-u", "root"], env=self.env, capture_output=True, timeout=5)
        daemons = {p.pid for p in self._procs.values()}
        for pid in self.leftover_pids():
            if pid not in daemons and not self._is_helper(pid, daemons):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        slurmds = [p for n, p in self._procs.items() if n.startswith("slurmd-")]
        others = [self._procs[n] for n in ("slurmctld", "munged") if n in self._procs]
        for group in (slurmds, others[:1], others[1:]):
            for proc in group:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, signal.SIGCONT)
                        proc.terminate()
            deadline = time.monotonic() + 3
            for proc in group:
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        deadline = time.monotonic() + 10
        while (left := self.leftover_pids()) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        for log in self._logs:
            log.close()
        self._procs.clear()
        self._logs.clear()

    @staticmethod
    def _is_helper(pid: int, daemons: set[int]) -> bool:
        """Whether ``pid`` is a daemon's own helper (slurmctld's slurmscriptd): stopped with its parent."""
        with contextlib.suppress(psutil.Error):
            return psutil.Process(pid).ppid() in daemons
        return False

    def leftover_pids(self) -> list[int]:
        """PIDs of live processes that carry this testbed's marker (daemons, slurmstepd, job steps)."""
        me = os.getpid()
        needles = {f"{MARKER}={self.base}".encode(), f"SLURM_CONF={self.conf}".encode()}
        found: list[int] = []
        for proc in psutil.process_iter(["pid"]):
            pid = proc.info["pid"]
            if pid == me:
                continue
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            if needles.intersection(environ.split(b"\0")):
                with contextlib.suppress(psutil.Error):
                    if proc.status() != psutil.STATUS_ZOMBIE:
                        found.append(pid)
        return found

    # ---- faults -----------------------------------------------------------------------------------

    @property
    def ctld_pid(self) -> int:
        """PID of the running slurmctld."""
        proc = self._procs.get("slurmctld")
        if proc is None or proc.poll() is not None:
            raise SlurmBedError("slurmctld is not running")
        return proc.pid

    @contextlib.contextmanager
    def frozen_controller(self) -> Iterator[None]:
        """SIGSTOP slurmctld for the block (TCP still connects; nothing answers); SIGCONT after."""
        pid = self.ctld_pid
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)

    def stop_slurmd(self, node: str) -> None:
        """Stop ``node``'s slurmd (SIGTERM, then SIGKILL): slurmctld still lists the node until
        ``SlurmdTimeout`` passes, so a step launched there fails."""
        proc = self._procs.pop(f"slurmd-{node}", None)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def start_slurmd(self, node: str) -> None:
        """Start ``node``'s slurmd again (after :meth:`stop_slurmd`)."""
        self._spawn(f"slurmd-{node}", ["slurmd", "-D", "-N", node, "-f", str(self.conf)])

    # ---- Slurm commands (independent of robustctl, to check what it did) --------------------------

    def cmd(self, *argv: str, check: bool = True, timeout: float = 20) -> str:
        """Run a Slurm command against this cluster; its stdout."""
        proc = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise SlurmBedError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc.stdout

    def node_states(self) -> dict[str, tuple[str, str]]:
        """``sinfo -N``: each node's long state (``idle``, ``drained``, …) and reason ("none")."""
        out: dict[str, tuple[str, str]] = {}
        for line in self.cmd("sinfo", "-N", "-h", "-o", "%N|%T|%E").splitlines():
            name, state, reason = line.split("|", 2)
            out[name] = (state, reason)
        return out

    def scontrol_node(self, node: str) -> str:
        """``scontrol show node -o NODE``: the one-line record."""
        return self.cmd("scontrol", "show", "node", "-o", node).strip()

    def job_fields(self, job_id: str) -> dict[str, str]:
        """Selected fields of ``scontrol show job -o J`` (values without spaces)."""
        line = self.cmd("scontrol", "show", "job", "-o", job_id).strip()
        out: dict[str, str] = {}
        for token in line.split():
            key, sep, value = token.partition("=")
            if sep:
                out.setdefault(key, value)
        return out

    def wait_nodes(self, want: dict[str, str], timeout_s: float = 20.0) -> None:
        """Wait until each named node's ``sinfo`` long state is the wanted one (``idle*`` is not ``idle``)."""
        deadline = time.monotonic() + timeout_s
        seen: dict[str, tuple[str, str]] = {}
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise SlurmBedError(f"{name} exited {proc.returncode}\n{self.logs()}")
            with contextlib.suppress(SlurmBedError, subprocess.TimeoutExpired):
                seen = self.node_states()
                if all(seen.get(n, ("",))[0] == s for n, s in want.items()):
                    return
            time.sleep(0.05)
        raise SlurmBedError(f"nodes not {want} after {timeout_s:g} s: {seen}\n{self.logs()}")

    def sbatch(
        self, nodes: int, *, name: str = "rbjob", seconds: int = 600, extra: Sequence[str] = ()
    ) -> str:
        """Submit a batch job of ``nodes`` nodes that sleeps; its job id. Output appends (survives requeue)."""
        script = self.base / "job.sh"
        if not script.exists():
            script.write_text(
                '#!/bin/bash\necho start $SLURM_JOB_ID $SLURM_JOB_NODELIST $SLURM_RESTART_COUNT\nsleep "$1"\n'
            )
            script.chmod(0o755)
        out = self.cmd(
            "sbatch",
            "--parsable",
            f"--nodes={nodes}",
            f"--job-name={name}",
            "--open-mode=append",
            f"--output={self.base}/job-%j.out",
            *extra,
            str(script),
            str(seconds),
        )
        return out.strip().split(";")[0]

    def wait_job(self, job_id: str, state: str, timeout_s: float = 20.0) -> dict[str, str]:
        """Wait until the job's ``JobState`` is ``state``; its fields."""
        deadline = time.monotonic() + timeout_s
        fields: dict[str, str] = {}
        while time.monotonic() < deadline:
            fields = self.job_fields(job_id)
            if fields.get("JobState") == state:
                return fields
            time.sleep(0.05)
        raise SlurmBedError(f"job {job_id} not {state} after {timeout_s:g} s: {fields}")

    def reset(self) -> None:
        """Cancel every job and resume every node that is not idle; wait until all are idle."""
        self.cmd("scancel", "-u", "root", check=False)
        deadline = time.monotonic() + 20
        while self.cmd("squeue", "-h", "-o", "%i").strip() and time.monotonic() < deadline:
            time.sleep(0.05)
        states = self.node_states()
        busy = [n for n, (s, _) in states.items() if s != "idle"]
        drained = [n for n, (s, _) in states.items() if s.startswith(("drain", "down"))]
        if drained:
            self.cmd("scontrol", "update", f"nodename={','.join(drained)}", "state=resume")
        if busy:
            self.wait_nodes({n: "idle" for n in self.nodes})

    def logs(self) -> str:
        """The tails of every log, for error messages."""
        names = ["munged.out", "slurmctld.out", "slurmctld.log"]
        names += [f"slurmd-{n}.log" for n in self.nodes[:2]]
        return "\n".join(_tail(self.log_dir / n) for n in names)


@pytest.fixture(scope="session")
def slurm_bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmBed]:
    """A started 5-node Slurm testbed for the whole run (``ROBUSTCTL_SLURM_NODES`` overrides the count),
    shared by every module that asks for it (registered in ``conftest.py``); :func:`slurm_cluster` hands
    it to each test with no job and every node idle."""
    require_slurmbed()
    n = int(os.environ.get("ROBUSTCTL_SLURM_NODES", "5"))
    bed = SlurmBed(tmp_path_factory.mktemp("slurmbed"), n)
    try:
        bed.start()
        yield bed
    finally:
        bed.close()


@pytest.fixture
def slurm_cluster(slurm_bed: SlurmBed) -> Iterator[SlurmBed]:
    """The run's Slurm testbed with no job and every node idle at the start of the test; the test's
    jobs are cancelled after it (their tasks would otherwise run on under every later test)."""
    slurm_bed.reset()
    try:
        yield slurm_bed
    finally:
        slurm_bed.reset()
