"""Run the minimegatron training job (``tests/jobs/minimegatron.py``) across testbed hosts, through sshd.

Each rank is one SSH exec on its host (``G`` ranks per host, rank ``r`` on the job's host ``r // G``)::

    cd REPO && exec env RANK=r LOCAL_RANK=r%G WORLD_SIZE=W MASTER_ADDR=<first host> MASTER_PORT=P ... \\
        PYTHON -m tests.jobs.minimegatron --tp .. --pp .. --dp .. --bind-addr <host address> \\
        --job-id MARKER --stdin-watch ... > LOG 2>&1

so the rank inherits the host's sshd ``SetEnv`` environment, carries ``RANK``/``LOCAL_RANK`` in
``/proc/PID/environ``, and is a descendant of that host's sshd. The SSH channel stays open for the
rank's life: its exit status is the rank's, and when the channel closes (the test process died) the
rank sees EOF on stdin and exits (``--stdin-watch``); ``--max-runtime-s`` bounds it in any case.

Faults go through a fault file every process of the job polls (``MiniJob.set_faults``), or through
``ROBUSTCTL_FAULT`` at start (``env_faults=``). Progress: every rank rewrites
``WORKDIR/progress/rankRRRRR.json`` after init and after each step (see the job's docstring).

Stopping is reliable: every process of the job (ranks, data-loader workers, checkpoint writers) has
the job's unique marker in its command line; :meth:`MiniJob.stop` signals all of them (SIGCONT,
SIGTERM, then SIGKILL) and waits. Use it as a context manager or from a fixture finalizer.

Only loopback addresses: hosts are ``127.0.0.2…``; ``MASTER_ADDR`` is the first job host's address.

Example::

    with MiniJob(tb, tmp_path, tp=2, pp=2, dp=4, ranks_per_host=4) as job:
        job.start()
        job.wait_step(3)
        job.set_faults("hang:compute:rank=5")
        inv = job.write_inventory(tmp_path / "inv.yaml")   # jobs: {mini: {...}}
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko
import psutil

from .testbed import Testbed, find_free_port

REPO = Path(__file__).resolve().parents[2]
JOB_MODULE = "tests.jobs.minimegatron"
MATCH = r"tests\.jobs\.minimegatron"
"""Regex that finds any minimegatron process (use :attr:`MiniJob.match` to find one job's)."""


class JobError(RuntimeError):
    """The job did not start, progress or stop as asked (the message carries the ranks' log tails)."""


@dataclass
class _Rank:
    rank: int
    host: int  # testbed host index
    log: Path
    channel: paramiko.Channel | None = None


class MiniJob:
    """One minimegatron job on testbed hosts ``first_host … first_host + W/G - 1``.

    Args:
        testbed: a started :class:`Testbed`.
        workdir: directory for logs, progress files, checkpoints and the fault file (created).
        tp, pp, dp: parallel layout; world size ``W = tp * pp * dp``.
        ranks_per_host: ``G``; ``W`` must be a multiple.
        first_host: testbed index of the job's first host.
        name: job name in the inventory (``jobs: {name: …}``).
        steps: ``--steps`` (0: until stopped).
        ckpt_every: ``--ckpt-every`` (0: no checkpoints).
        env_faults: ``ROBUSTCTL_FAULT`` for every rank (fault specs read at start).
        job_args: extra job arguments (e.g. ``["--compute-ms", "5"]``).
        max_runtime_s: ``--max-runtime-s``, a bound on leaks when everything else fails.

    Attributes:
        marker: unique string in every process's command line (``--job-id``).
        match: regex for the inventory's ``process.match``: this job's processes only.
        world_size, hosts (testbed indices), progress_dir, ckpt_dir, fault_file, startup_s.
    """

    def __init__(
        self,
        testbed: Testbed,
        workdir: Path,
        *,
        tp: int = 2,
        pp: int = 2,
        dp: int = 2,
        ranks_per_host: int = 4,
        first_host: int = 0,
        name: str = "mini",
        steps: int = 0,
        ckpt_every: int = 5,
        ckpt_mode: str = "process",
        env_faults: str | None = None,
        job_args: Sequence[str] = (),
        max_runtime_s: float = 1200.0,
    ) -> None:
        self.tb = testbed
        self.workdir = Path(workdir).absolute()
        self.tp, self.pp, self.dp = tp, pp, dp
        self.world_size = tp * pp * dp
        self.G = ranks_per_host
        if self.world_size % ranks_per_host:
            raise ValueError(
                f"world size {self.world_size} is not a multiple of {ranks_per_host} ranks per host"
            )
        n_hosts = self.world_size // ranks_per_host
        if first_host + n_hosts > testbed.n_hosts:
            raise ValueError(
                f"the job needs hosts {first_host}…{first_host + n_hosts - 1}, testbed has {testbed.n_hosts}"
            )
        self.hosts = list(range(first_host, first_host + n_hosts))
        self.name = name
        self.steps, self.ckpt_every, self.ckpt_mode = steps, ckpt_every, ckpt_mode
        self.env_faults = env_faults
        self.job_args = list(job_args)
        self.max_runtime_s = max_runtime_s
        self.marker = f"minimegatron-{uuid.uuid4().hex[:12]}"
        self.match = MATCH + r"\b.*--job-id " + self.marker
        self.progress_dir = self.workdir / "progress"
        self.ckpt_dir = self.workdir / "ckpt"
        self.log_dir = self.workdir / "logs"
        self.fault_file = self.workdir / "faults"
        self.master_addr = testbed.address(self.hosts[0])
        self.master_port = 0
        self.startup_s: float | None = None
        self.launched_at: float | None = None
        self._ranks = [
            _Rank(r, self.hosts[r // ranks_per_host], self.log_dir / f"rank{r:05d}.log")
            for r in range(self.world_size)
        ]
        self._clients: dict[int, paramiko.SSHClient] = {}
        self._lock = threading.Lock()

    # ---- topology ------------------------------------------------------------------------------

    def host_of(self, rank: int) -> int:
        """Testbed index of the host running ``rank``."""
        return self._ranks[rank].host

    def host_name(self, rank: int) -> str:
        """Inventory name of the host running ``rank``."""
        return self.tb.name(self.host_of(rank))

    def ranks_on(self, host: int) -> list[int]:
        """Ranks on testbed host ``host``."""
        return [r.rank for r in self._ranks if r.host == host]

    def coords(self, rank: int) -> dict[str, int]:
        """Megatron coordinates (order tp-cp-ep-dp-pp, TP fastest): ``{"tp", "dp", "pp"}``."""
        return {"tp": rank % self.tp, "dp": (rank // self.tp) % self.dp, "pp": rank // (self.tp * self.dp)}

    def rank_at(self, *, tp: int, dp: int, pp: int) -> int:
        """The rank at these coordinates."""
        return tp + self.tp * (dp + self.dp * pp)

    # ---- inventory -------------------------------------------------------------------------------

    def inventory_jobs(self) -> dict[str, Any]:
        """The inventory ``jobs:`` mapping for this job (its hosts, layout, G, process spec)."""
        return {
            self.name: {
                "hosts": self.tb.hostlist(self.hosts),
                "layout": {"tp": self.tp, "pp": self.pp, "dp": self.dp},
                "ranks_per_host": self.G,
                "process": {"match": self.match, "rank_env": "RANK", "local_rank_env": "LOCAL_RANK"},
            }
        }

    def write_inventory(self, path: Path, **overrides: Any) -> Path:
        """``Testbed.write_inventory`` with this job's ``jobs:`` entry merged in."""
        jobs = dict(overrides.pop("jobs", {}) or {})
        jobs.update(self.inventory_jobs())
        return self.tb.write_inventory(path, jobs=jobs, **overrides)

    # ---- lifecycle ---------------------------------------------------------------------------------

    def command(self, rank: int) -> str:
        """The remote command line that starts ``rank`` (one string, quoted once)."""
        r = self._ranks[rank]
        env = {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank % self.G),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_WORLD_SIZE": str(self.G),
            "GROUP_RANK": str(rank // self.G),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "PYTHONUNBUFFERED": "1",
        }
        if self.env_faults:
            env["ROBUSTCTL_FAULT"] = self.env_faults
        argv = [
            "env",
            *(f"{k}={v}" for k, v in env.items()),
            self.tb.python,
            "-m",
            JOB_MODULE,
            "--tp", str(self.tp), "--pp", str(self.pp), "--dp", str(self.dp),
            "--steps", str(self.steps),
            "--progress-dir", str(self.progress_dir),
            "--fault-file", str(self.fault_file),
            "--bind-addr", self.tb.address(r.host),
            "--max-runtime-s", str(self.max_runtime_s),
            "--stdin-watch",
            *self.job_args,
            "--job-id", self.marker,
        ]  # fmt: skip
        if self.ckpt_every:
            argv[-2:-2] = ["--ckpt-dir", str(self.ckpt_dir), "--ckpt-every", str(self.ckpt_every)]
            argv[-2:-2] = ["--ckpt-mode", self.ckpt_mode]
        return f"cd {shlex.quote(str(REPO))} && exec {shlex.join(argv)} > {shlex.quote(str(r.log))} 2>&1"

    def launch(self) -> None:
        """Start every rank (one SSH exec each) and return at once; see :meth:`start`."""
        for d in (self.progress_dir, self.log_dir):
            d.mkdir(parents=True, exist_ok=True)
        if not self.fault_file.exists():
            self.fault_file.write_text("")
        self.master_port = find_free_port([self.master_addr])
        self.launched_at = time.time()
        try:
            for i in self.hosts:
                self._clients[i] = self.tb.connect(i, timeout=10.0)
            for r in self._ranks:
                transport = self._clients[r.host].get_transport()
                assert transport is not None
                chan = transport.open_session(timeout=10.0)
                chan.exec_command(self.command(r.rank))  # stdin stays open: --stdin-watch
                r.channel = chan
        except BaseException:
            self.stop()
            raise

    def start(self, timeout: float = 120.0, *, first_step: bool = True) -> float:
        """Launch, then wait until every rank is initialised (and past step 1 when ``first_step``).

        Returns and stores in ``startup_s`` the seconds from launch until then. Raises JobError
        (with log tails) when a rank exits or ``timeout`` passes; the job is stopped in that case.
        """
        t0 = time.perf_counter()
        self.launch()
        try:
            if first_step:
                self.wait_step(1, timeout=timeout)
            else:
                self._wait(lambda p: all(r in p for r in range(self.world_size)), timeout, "init")
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - t0
        return self.startup_s

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every process of the job (marker match), close the SSH channels. Idempotent."""
        victims = self.processes()
        for sig in (signal.SIGCONT, signal.SIGTERM):
            for p in victims:
                with contextlib.suppress(psutil.Error):
                    p.send_signal(sig)
        _, alive = psutil.wait_procs(victims, timeout=timeout / 2)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(alive, timeout=timeout / 2)
        late = self.processes()  # a worker forked while we were signalling
        for p in late:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(late, timeout=timeout / 2)
        for r in self._ranks:
            if r.channel is not None:
                with contextlib.suppress(Exception):
                    r.channel.close()
        for c in self._clients.values():
            with contextlib.suppress(Exception):
                c.close()
        self._clients.clear()

    def ensure_training(self, *, timeout: float = 150.0, stuck_after_s: float = 30.0) -> None:
        """Clear every fault and return once every rank has finished a step past the newest one seen.

        For a job shared by many tests: a job that was stopped, or that makes no step within
        ``stuck_after_s`` after its faults are cleared (a ``p2p_recv`` hang is never released), is
        stopped and launched again; it resumes from its newest checkpoint, so "past the newest step"
        means the relaunched ranks trained. Raises JobError when that does not happen in ``timeout``.
        """
        self.clear_faults()
        newest = max(self.steps_done().values(), default=0)
        if len(self.rank_pids()) == self.world_size:
            try:
                self.wait_step(newest + 1, timeout=stuck_after_s)
                return
            except JobError:
                self.stop()
        self.launch()
        try:
            self.wait_step(newest + 1, timeout=timeout)
        except BaseException:
            self.stop()
            raise

    def drop_connections(self) -> None:
        """Close the SSH connections without signalling anything, as if the launcher had died.

        The ranks see EOF on stdin (``--stdin-watch``) and exit; their helpers die with them.
        """
        for c in self._clients.values():
            with contextlib.suppress(Exception):
                c.close()

    def __enter__(self) -> MiniJob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- processes -----------------------------------------------------------------------------------

    def processes(self) -> list[psutil.Process]:
        """Every live process of this job (ranks and their children), found by the marker."""
        out = []
        for p in psutil.process_iter(["cmdline"]):
            cmd = p.info.get("cmdline") or []
            if self.marker in cmd:
                out.append(p)
        return out

    def rank_pids(self) -> dict[int, int]:
        """``{rank: pid}`` of the rank main processes (a child's parent carries the same marker)."""
        procs = self.processes()
        pids = {p.pid for p in procs}
        out: dict[int, int] = {}
        for p in procs:
            with contextlib.suppress(psutil.Error):
                if p.ppid() in pids:
                    continue
                rank = int(p.environ().get("RANK", "-1"))
                out[rank] = p.pid
        return out

    def children(self, rank: int) -> list[psutil.Process]:
        """Live child processes of ``rank`` (data-loader workers, checkpoint writer)."""
        pid = self.rank_pids().get(rank)
        if pid is None:
            return []
        with contextlib.suppress(psutil.Error):
            return psutil.Process(pid).children(recursive=True)
        return []

    def exit_status(self, rank: int) -> int | None:
        """The rank's exit status once it has exited (through its SSH channel), else None."""
        chan = self._ranks[rank].channel
        if chan is None or not chan.exit_status_ready():
            return None
        return chan.recv_exit_status()

    def wait_exit(self, rank: int, timeout: float = 30.0) -> int:
        """Wait for ``rank`` to exit and return its status. Raises JobError on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.exit_status(rank)
            if status is not None:
                return status
            time.sleep(0.05)
        raise JobError(f"rank {rank} still running after {timeout}s")

    def log(self, rank: int) -> str:
        """Everything ``rank`` printed (stdout and stderr)."""
        try:
            return self._ranks[rank].log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tails(self, ranks: Iterable[int] | None = None, lines: int = 5) -> str:
        """The last lines of each rank's log, for assertion messages."""
        out = []
        for r in ranks if ranks is not None else range(self.world_size):
            tail = self.log(r).strip().splitlines()[-lines:]
            out.append(f"--- rank {r} (exit {self.exit_status(r)}):\n" + "\n".join(tail))
        return "\n".join(out)

    # ---- progress ------------------------------------------------------------------------------------

    def progress(self) -> dict[int, dict[str, Any]]:
        """``{rank: progress document}`` of every rank that has written one."""
        out: dict[int, dict[str, Any]] = {}
        for r in range(self.world_size):
            try:
                out[r] = json.loads((self.progress_dir / f"rank{r:05d}.json").read_text())
            except (FileNotFoundError, ValueError):
                continue
        return out

    def steps_done(self) -> dict[int, int]:
        """``{rank: last finished step}`` (0: initialised, no step yet; absent: not started)."""
        return {r: int(p["step"]) for r, p in self.progress().items()}

    def _wait(self, ok: Any, timeout: float, what: str) -> dict[int, dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            prog = self.progress()
            if ok(prog):
                return prog
            dead = [r.rank for r in self._ranks if self.exit_status(r.rank) is not None]
            if dead:
                raise JobError(f"waiting for {what}: rank(s) {dead} exited\n{self.log_tails(dead)}")
            if time.monotonic() > deadline:
                steps = self.steps_done()
                late = sorted(range(self.world_size), key=lambda r: steps.get(r, -1))[:4]
                raise JobError(
                    f"waiting for {what}: not reached within {timeout}s; steps {steps}\n{self.log_tails(late)}"
                )
            time.sleep(0.1)

    def wait_step(
        self, step: int, *, ranks: Iterable[int] | None = None, timeout: float = 60.0
    ) -> dict[int, int]:
        """Wait until every rank in ``ranks`` (default all) has finished ``step``; return steps_done."""
        want = list(range(self.world_size) if ranks is None else ranks)

        def ok(prog: Mapping[int, Mapping[str, Any]]) -> bool:
            return all(r in prog and int(prog[r]["step"]) >= step for r in want)

        self._wait(ok, timeout, f"step {step} on ranks {want if ranks is not None else 'all'}")
        return self.steps_done()

    def wait_stalled(self, seconds: float = 2.0, *, timeout: float = 60.0) -> dict[int, int]:
        """Wait until no rank has finished a step for ``seconds``; return steps_done. Raises JobError."""
        deadline = time.monotonic() + timeout
        last = self.steps_done()
        since = time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.2)
            now = self.steps_done()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= seconds:
                return now
        raise JobError(f"job still progressing after {timeout}s: {self.steps_done()}")

    def step_times(self, rank: int = 0, *, samples: int = 5, timeout: float = 60.0) -> list[float]:
        """``step_s`` of the next ``samples`` steps of ``rank`` (seconds each)."""
        out: list[float] = []
        last = self.steps_done().get(rank, 0)
        deadline = time.monotonic() + timeout
        while len(out) < samples:
            if time.monotonic() > deadline:
                raise JobError(f"rank {rank}: only {len(out)} steps in {timeout}s\n{self.log_tails([rank])}")
            p = self.progress().get(rank)
            if p is not None and int(p["step"]) > last and p.get("step_s") is not None:
                last = int(p["step"])
                out.append(float(p["step_s"]))
            time.sleep(0.02)
        return out

    # ---- faults --------------------------------------------------------------------------------------

    def set_faults(self, *specs: str) -> None:
        """Replace the job's fault file with ``specs`` (see the job's docstring); no spec clears it.

        Every process re-reads the file within ~0.5 s.
        """
        tmp = self.fault_file.with_name(f".{self.fault_file.name}.tmp")
        tmp.write_text("".join(f"{s}\n" for s in specs))
        os.replace(tmp, self.fault_file)

    def clear_faults(self) -> None:
        """Remove every injected fault (hangs other than ``p2p_recv`` resume)."""
        self.set_faults()
