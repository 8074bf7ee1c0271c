"""Launch, stop and find a job's processes over the transports (the ``inventory`` back end's restart).

Three operations on a job's machines (``hosts``, rank order: machine k holds ranks k·G … k·G+G-1),
each fanned out to every machine at once (:func:`robustctl.transport.fanout.fan_out`: bounded
concurrency, every host's outcome kept):

* :func:`launch_job` fills the job's ``launch:`` templates (:func:`render_launch`) and runs the
  node-side ``launch`` probe on each machine, which starts the processes detached (own session,
  standard input ``/dev/null``, output appended to a log file) and returns at once with their PIDs;
* :func:`stop_job` runs the ``jobprocs`` probe with ``--stop``: the processes of the job are found by
  ``process.match`` exactly as ``stacks`` finds them (the ``stacks`` probe's scan, streamed along),
  each tree (launchers, rank mains, their descendants) gets SIGTERM, ``stop_grace_s`` to end, then
  SIGKILL, and the probe scans again to verify nothing of the job is left;
* :func:`list_ranks` runs ``jobprocs`` without ``--stop`` and reports which ranks run on each machine
  (a rank main process found with its rank read from its environment or command line);
  :func:`wait_running` repeats it until every rank runs or ``start_timeout_s`` passes.

Nothing here builds a shell string: the probes receive argv lists and the process list as data,
and the transports quote the probe's own argv once (``shlex.join``).
"""

from __future__ import annotations

import re
import string
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from robustctl.config import LaunchSpec, RankProcessSpec, check_format_spec
from robustctl.errors import ConfigError
from robustctl.inventory.hostrange import compact_ranges
from robustctl.models import Outcome
from robustctl.probes import command_deadline, probe_source, run_probe
from robustctl.transport.fanout import HostOutcome, fan_out

if TYPE_CHECKING:
    from robustctl.config import DiagnoseSettings
    from robustctl.inventory import Host, Job
    from robustctl.transport.pool import TransportPool

__all__ = [
    "HostLaunch",
    "HostRanks",
    "HostStop",
    "LaunchProcess",
    "RunningReport",
    "launch_job",
    "list_ranks",
    "master_address",
    "render_launch",
    "stop_job",
    "wait_running",
]

KILL_WAIT_S = 5.0
"""Seconds the stop waits after SIGKILL for the kernel to reap the processes before it reports."""
PROBE_MARGIN_S = 20.0
"""Seconds a probe is given beyond its own work (interpreter start, connection, the scan)."""
LAUNCH_TIMEOUT_S = 60.0
"""Deadline of the launch probe on one host (it starts processes and returns; it never waits)."""
POLL_S = 1.0
"""Seconds between two scans of :func:`wait_running`."""
MAX_FILLED_TEXT = 128 * 1024
"""Longest filled-in launch template (an argument, an environment value, ``cwd`` or the log path),
characters: Linux's ``MAX_ARG_STRLEN`` (32 pages, 131072 bytes) is the longest single argument or
environment string ``execve`` takes, so a longer one could never start. The load-time check bounds a
template's widths (:func:`robustctl.config.check_template`), but not the values filled in: ``{job}``
written 800 times over a job name of a megabyte would otherwise grow to a gigabyte here."""


@dataclass(frozen=True)
class LaunchProcess:
    """One process to start: filled in from the ``launch:`` templates.

    Attributes:
        host: the machine's inventory name. node_rank: its index in the job. ranks: the ranks it
        holds (one for ``per: rank``, the machine's G for ``per: host``). argv: the command.
        env: the variables added to the host's environment (rank variables and ``launch.env``).
        cwd: its working directory (None: the login's). log: its log file on the host.
    """

    host: str
    node_rank: int
    ranks: tuple[int, ...]
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str | None
    log: str

    def as_probe_item(self) -> dict[str, Any]:
        """The entry the ``launch`` probe reads."""
        return {"argv": list(self.argv), "env": dict(self.env), "cwd": self.cwd, "log": self.log}


def master_address(host: Host) -> str:
    """``MASTER_ADDR`` of a job whose machine 0 is ``host``: its address, or 127.0.0.1 when it is
    this machine (``transport: local``)."""
    return "127.0.0.1" if host.transport == "local" else host.address


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:100] or "job"


class _TooLong(Exception):
    """A filled-in template passed :data:`MAX_FILLED_TEXT` characters."""


class _BoundedFormatter(string.Formatter):
    """``str.format`` that stops once the fields filled in pass ``limit`` characters.

    Each field's spec is checked (:func:`robustctl.config.check_format_spec`) before it is applied, so
    no single field grows past :data:`robustctl.config.MAX_TEMPLATE_WIDTH` plus its value either.
    """

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.left = limit

    def format_field(self, value: Any, format_spec: str) -> str:
        check_format_spec(format_spec)
        text = str(super().format_field(value, format_spec))
        self.left -= len(text)
        if self.left < 0:
            raise _TooLong
        return text


def _fill(template: str, values: Mapping[str, object], what: str) -> str:
    """``template`` filled in from ``values`` (``str.format`` syntax), at most :data:`MAX_FILLED_TEXT` long.

    Args:
        template: the template text.
        values: the placeholders' values by name.
        what: the template's key under ``launch:`` (e.g. ``env.PATH``), for the message.

    Returns:
        The filled-in text.

    Raises:
        ConfigError: a placeholder cannot be filled, or the result would be too long; one line naming
            ``launch.WHAT``.
    """
    try:
        return _BoundedFormatter(MAX_FILLED_TEXT - len(template)).vformat(template, (), values)
    except _TooLong:
        raise ConfigError(
            f"launch.{what}: filled in, {template[:80]!r} is longer than {MAX_FILLED_TEXT} characters "
            "(Linux's longest argument or environment string)"
        ) from None
    except (KeyError, IndexError, ValueError, AttributeError) as exc:  # load-time checks make this rare
        raise ConfigError(f"launch.{what}: cannot fill {template[:80]!r}: {exc}") from None


def render_launch(job: Job, hosts: Sequence[Host], ckpt_iter: int | None) -> list[LaunchProcess]:
    """Every process of ``job``'s launch on ``hosts`` (rank order), templates filled.

    Placeholders (:data:`robustctl.config.LAUNCH_PLACEHOLDERS`): ``rank``, ``local_rank`` (per rank),
    ``world_size``, ``node_rank``, ``nnodes``, ``nproc_per_node`` (G), ``master_addr`` (machine 0's
    address, :func:`master_address`), ``master_port``, ``job``, ``ckpt_iter`` (the iteration, or
    ``none``). Environment per rank: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
    ``NODE_RANK``, ``NNODES``, ``MASTER_ADDR``, ``MASTER_PORT`` (torchrun's names); per host:
    ``NODE_RANK``, ``NNODES``, ``MASTER_ADDR``, ``MASTER_PORT``.

    Args:
        job: the job (its ``launch:`` section and G ranks per host).
        hosts: the machines, rank order (machine k runs ranks k·G … k·G+G-1).
        ckpt_iter: the checkpoint iteration to load; None: none (``ckpt_iter`` is ``none``).

    Returns:
        The processes, machine by machine in rank order: one per rank (``per: rank``) or one per
        machine (``per: host``).

    Raises:
        ConfigError: the job has no ``launch:`` section, or a template cannot be filled.
    """
    spec = job.launch
    if spec is None:
        raise ConfigError(f"job {job.name!r} has no launch: section")
    g = job.ranks_per_host
    base: dict[str, object] = {
        "world_size": len(hosts) * g,
        "nnodes": len(hosts),
        "nproc_per_node": g,
        "master_addr": master_address(hosts[0]) if hosts else "",
        "master_port": spec.master_port,
        "job": job.name,
        "ckpt_iter": "none" if ckpt_iter is None else str(ckpt_iter),
    }
    out: list[LaunchProcess] = []
    for k, host in enumerate(hosts):
        node = {**base, "node_rank": k}
        units: list[tuple[tuple[int, ...], dict[str, object], dict[str, str]]] = []
        rank_env = {
            "NODE_RANK": str(k),
            "NNODES": str(len(hosts)),
            "MASTER_ADDR": str(base["master_addr"]),
            "MASTER_PORT": str(spec.master_port),
        }
        if spec.per == "rank":
            for local in range(g):
                rank = k * g + local
                env = {
                    **rank_env,
                    "RANK": str(rank),
                    "WORLD_SIZE": str(base["world_size"]),
                    "LOCAL_RANK": str(local),
                    "LOCAL_WORLD_SIZE": str(g),
                }
                units.append(((rank,), {**node, "rank": rank, "local_rank": local}, env))
        else:
            units.append((tuple(range(k * g, k * g + g)), node, rank_env))
        for ranks, values, env in units:
            user_env = {key: _fill(v, values, f"env.{key}") for key, v in spec.env.items()}
            log_dir = _fill(spec.log_dir, values, "log_dir").rstrip("/") or "/"
            name = f"{_safe_name(job.name)}-" + (
                f"rank{ranks[0]:05d}.log" if spec.per == "rank" else f"node{k:04d}.log"
            )
            out.append(
                LaunchProcess(
                    host=host.name,
                    node_rank=k,
                    ranks=ranks,
                    argv=tuple(_fill(a, values, f"command[{i}]") for i, a in enumerate(spec.command)),
                    env={**user_env, **env},
                    cwd=_fill(spec.cwd, values, "cwd") if spec.cwd is not None else None,
                    log=f"{log_dir}/{name}",
                )
            )
    return out


# ------------------------------------------------------------------------------------------ results
@dataclass(frozen=True)
class HostLaunch:
    """What the launch did on one machine.

    Attributes:
        host: inventory name. outcome: of the probe command. pids: ``{first rank: pid}`` of each
        process started. errors: one line per process that could not start. error: why the probe
        itself failed (None when it ran).
    """

    host: str
    outcome: Outcome
    pids: Mapping[int, int] = field(default_factory=dict)
    errors: tuple[str, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Every process of this machine started."""
        return self.outcome is Outcome.OK and self.error is None and not self.errors

    def line(self) -> str:
        """One line, e.g. ``"node01: started 2 process(es) (pids 4242, 4243)"``."""
        if self.error is not None:
            return f"{self.host}: {self.outcome.value.replace('_', ' ')}: {self.error}"
        pids = ", ".join(str(p) for p in self.pids.values())
        text = f"{self.host}: started {len(self.pids)} process(es)" + (f" (pids {pids})" if pids else "")
        return text + ("; " + "; ".join(self.errors) if self.errors else "")


@dataclass(frozen=True)
class HostStop:
    """What the stop did on one machine.

    Attributes:
        host: inventory name. outcome: of the probe command. found: processes of the job found
        (trees included). termed: of those, gone after SIGTERM within the grace. killed: sent SIGKILL.
        remaining: PIDs still there at the final scan. remaining_cmdlines: what they are (one line each).
        error: why the probe failed (None when it ran).
    """

    host: str
    outcome: Outcome
    found: int = 0
    termed: int = 0
    killed: int = 0
    remaining: tuple[int, ...] = ()
    remaining_cmdlines: tuple[str, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        """The probe ran and nothing of the job is left on this machine."""
        return self.outcome is Outcome.OK and self.error is None and not self.remaining

    def line(self) -> str:
        """One line, e.g. ``"node01: 6 process(es) ended by SIGTERM"``."""
        if self.error is not None:
            return f"{self.host}: {self.outcome.value.replace('_', ' ')}: {self.error}"
        if self.found == 0 and self.killed == 0 and not self.remaining:
            return f"{self.host}: nothing of the job running"
        text = f"{self.host}: {self.termed} process(es) ended by SIGTERM"
        if self.killed:
            text += f", {self.killed} killed (SIGKILL) after the grace"
        if self.remaining:
            text += f"; STILL RUNNING: {', '.join(self.remaining_cmdlines[:3]) or self.remaining}"
        return text


@dataclass(frozen=True)
class HostRanks:
    """Which ranks of the job run on one machine.

    Attributes:
        host: inventory name. expected: the ranks it should hold. found: of those, the ranks with a
        main process now. error: why it could not be checked (None when it was).
    """

    host: str
    expected: tuple[int, ...]
    found: tuple[int, ...] = ()
    error: str | None = None

    @property
    def missing(self) -> tuple[int, ...]:
        """Expected ranks without a main process (all of them when the check failed)."""
        have = set(self.found)
        return tuple(r for r in self.expected if r not in have)


@dataclass(frozen=True)
class RunningReport:
    """The outcome of :func:`wait_running`.

    Attributes:
        hosts: the last scan of each machine. waited_s: seconds waited. timeout_s: the bound.
    """

    hosts: tuple[HostRanks, ...]
    waited_s: float
    timeout_s: float

    @property
    def missing(self) -> tuple[int, ...]:
        """Every rank that does not run (or could not be checked)."""
        return tuple(sorted(r for h in self.hosts for r in h.missing))

    @property
    def ok(self) -> bool:
        """Every rank runs."""
        return not self.missing

    def line(self) -> str:
        """One line: all running, or which ranks did not start on which machine and why."""
        total = sum(len(h.expected) for h in self.hosts)
        if self.ok:
            return f"all {total} rank(s) running after {self.waited_s:.1f} s"
        parts = []
        for h in self.hosts:
            if h.missing:
                why = f" ({h.error})" if h.error else ""
                parts.append(f"{h.host}: rank(s) {compact_ranges(h.missing)}{why}")
        return (
            f"{len(self.missing)} of {total} rank(s) not running after {self.waited_s:.1f} s "
            f"(start_timeout_s {self.timeout_s:g}): " + "; ".join(parts)
        )


# ---------------------------------------------------------------------------------------- operations
def _outcome_error(o: HostOutcome[Any]) -> str:
    return o.error or o.outcome.value


def _fanout_knobs(diagnose: DiagnoseSettings | None) -> dict[str, Any]:
    if diagnose is None:
        return {"concurrency": 64, "retries": 1, "backoff_s": 0.5}
    return {
        "concurrency": diagnose.concurrency,
        "retries": diagnose.retries,
        "backoff_s": diagnose.retry_backoff_s,
    }


def _process_args(spec: RankProcessSpec) -> list[str]:
    # "--opt=value": a regex may start with "-", which argparse would take for an option
    args = [f"--match={spec.match}", f"--rank-env={spec.rank_env}", f"--local-rank-env={spec.local_rank_env}"]
    if spec.rank_cmdline:
        args.append(f"--rank-cmdline={spec.rank_cmdline}")
    return args


def _need_process(job: Job) -> RankProcessSpec:
    if job.process is None:
        raise ConfigError(
            f"job {job.name!r} has no process: section: add process: {{match: REGEX}} "
            "(a regex of its rank processes' command line) so that robustctl can find and stop them"
        )
    return job.process


def launch_job(
    job: Job,
    hosts: Sequence[Host],
    pool: TransportPool,
    *,
    ckpt_iter: int | None,
    diagnose: DiagnoseSettings | None = None,
) -> tuple[HostLaunch, ...]:
    """Start ``job``'s processes on ``hosts`` (detached) and return at once, one result per machine.

    Args:
        job: the job (its ``launch:`` section).
        hosts: the machines, rank order.
        pool: transports, one per host (closed by the caller).
        ckpt_iter: the checkpoint iteration to load; None: none.
        diagnose: fan-out knobs (concurrency, retries, backoff); None: 64 hosts at once, one retry.

    Returns:
        One result per machine, in the order of ``hosts``: the pid of each process started, or why not.

    Raises:
        ConfigError: no ``launch:`` section, or a template that cannot be filled.
    """
    procs = render_launch(job, hosts, ckpt_iter)
    by_host: dict[str, list[LaunchProcess]] = {}
    for p in procs:
        by_host.setdefault(p.host, []).append(p)

    def work(host: Host, deadline: float) -> HostLaunch:
        mine = by_host.get(host.name, [])
        deadline = command_deadline(host, deadline)
        budget = max(1.0, deadline - time.monotonic() - 2.0)
        doc = run_probe(
            pool.for_host(host),
            host,
            "launch",
            ["--timeout", f"{budget:.1f}"],
            deadline=deadline,
            extra=[[p.as_probe_item() for p in mine]],
        )
        if doc.data.get("error"):
            return HostLaunch(host.name, Outcome.FAILED, error=str(doc.data["error"])[:300])
        pids: dict[int, int] = {}
        errors: list[str] = []
        started = doc.data.get("started")
        for entry in started if isinstance(started, list) else []:
            if not isinstance(entry, Mapping) or not isinstance(entry.get("index"), int):
                continue
            i = entry["index"]
            if not 0 <= i < len(mine):
                continue
            what = f"rank {mine[i].ranks[0]}" if len(mine[i].ranks) == 1 else f"node {mine[i].node_rank}"
            if entry.get("error") or not isinstance(entry.get("pid"), int):
                errors.append(f"{what}: {str(entry.get('error') or 'no pid reported')[:200]}")
            else:
                pids[mine[i].ranks[0]] = int(entry["pid"])
        if len(pids) + len(errors) < len(mine):
            errors.append(f"the probe reported {len(pids) + len(errors)} of {len(mine)} process(es)")
        return HostLaunch(host.name, Outcome.OK, pids, tuple(errors))

    knobs = _fanout_knobs(diagnose)
    fan = fan_out(
        list(hosts),
        work,
        concurrency=knobs["concurrency"],
        host_timeout_s=LAUNCH_TIMEOUT_S,
        retries=knobs["retries"],
        backoff_s=knobs["backoff_s"],
    )
    return tuple(
        o.value if o.value is not None else HostLaunch(o.host.name, o.outcome, error=_outcome_error(o))
        for o in fan.outcomes
    )


def stop_job(
    job: Job,
    hosts: Sequence[Host],
    pool: TransportPool,
    *,
    grace_s: float,
    diagnose: DiagnoseSettings | None = None,
) -> tuple[HostStop, ...]:
    """End ``job``'s process trees on ``hosts``: SIGTERM, ``grace_s``, SIGKILL, verify (module docstring).

    Args:
        job: the job (its ``process:`` section finds its processes).
        hosts: the machines.
        pool: transports, one per host (closed by the caller).
        grace_s: seconds between SIGTERM and SIGKILL.
        diagnose: fan-out knobs (concurrency, retries, backoff); None: 64 hosts at once, one retry.

    Returns:
        One result per machine, in the order of ``hosts``; a machine that could not be reached is a
        result with ``error`` (never "stopped").

    Raises:
        ConfigError: the job has no ``process:`` section.
    """
    args = [*_process_args(_need_process(job)), "--stop", "--grace", f"{grace_s:g}"]
    args += ["--kill-wait", f"{KILL_WAIT_S:g}"]
    stacks_source = probe_source("stacks").decode("utf-8")

    def work(host: Host, deadline: float) -> HostStop:
        deadline = command_deadline(host, deadline)
        budget = max(1.0, deadline - time.monotonic() - 2.0)
        doc = run_probe(
            pool.for_host(host),
            host,
            "jobprocs",
            [*args, "--timeout", f"{budget:.1f}"],
            deadline=deadline,
            extra=[stacks_source],
        )
        data = doc.data
        stop = data.get("stop")
        if data.get("error") or not isinstance(stop, Mapping):
            why = data.get("error") or "the probe reported no stop"
            return HostStop(host.name, Outcome.FAILED, error=str(why)[:300])

        def ints(key: str) -> list[int]:
            v = stop.get(key)
            return [x for x in v if isinstance(x, int)] if isinstance(v, list) else []

        cmdlines = stop.get("remaining_cmdlines")
        return HostStop(
            host.name,
            Outcome.OK,
            found=len(ints("signalled")),
            termed=len(ints("termed_gone")),
            killed=len(ints("killed")),
            remaining=tuple(ints("remaining")),
            remaining_cmdlines=tuple(str(c)[:200] for c in cmdlines[:20])
            if isinstance(cmdlines, list)
            else (),
        )

    knobs = _fanout_knobs(diagnose)
    fan = fan_out(
        list(hosts),
        work,
        concurrency=knobs["concurrency"],
        host_timeout_s=grace_s + KILL_WAIT_S + 2 * PROBE_MARGIN_S,
        retries=knobs["retries"],
        backoff_s=knobs["backoff_s"],
    )
    return tuple(
        o.value if o.value is not None else HostStop(o.host.name, o.outcome, error=_outcome_error(o))
        for o in fan.outcomes
    )


def list_ranks(
    job: Job, hosts: Sequence[Host], pool: TransportPool, *, diagnose: DiagnoseSettings | None = None
) -> tuple[HostRanks, ...]:
    """Which of its ranks run on each of ``hosts`` now (machine k of ``hosts`` holds k·G … k·G+G-1).

    Args:
        job: the job (its ``process:`` section finds its processes).
        hosts: the machines, rank order.
        pool: transports, one per host (closed by the caller).
        diagnose: fan-out knobs (concurrency, retries, backoff); None: 64 hosts at once, one retry.

    Returns:
        One result per machine, in the order of ``hosts``: the ranks expected and those found running;
        a machine that could not be checked has ``error``.

    Raises:
        ConfigError: the job has no ``process:`` section.
    """
    args = _process_args(_need_process(job))
    stacks_source = probe_source("stacks").decode("utf-8")
    g = job.ranks_per_host
    expected = {h.name: tuple(range(k * g, k * g + g)) for k, h in enumerate(hosts)}

    def work(host: Host, deadline: float) -> HostRanks:
        deadline = command_deadline(host, deadline)
        budget = max(1.0, deadline - time.monotonic() - 2.0)
        doc = run_probe(
            pool.for_host(host),
            host,
            "jobprocs",
            [*args, "--timeout", f"{budget:.1f}"],
            deadline=deadline,
            extra=[stacks_source],
        )
        want = expected[host.name]
        if doc.data.get("error"):
            return HostRanks(host.name, want, error=str(doc.data["error"])[:300])
        procs = doc.data.get("processes")
        found = {
            p["rank"]
            for p in (procs if isinstance(procs, list) else [])
            if isinstance(p, Mapping) and p.get("role") == "main" and isinstance(p.get("rank"), int)
        }
        return HostRanks(host.name, want, tuple(r for r in want if r in found))

    knobs = _fanout_knobs(diagnose)
    fan = fan_out(
        list(hosts),
        work,
        concurrency=knobs["concurrency"],
        host_timeout_s=2 * PROBE_MARGIN_S,
        retries=knobs["retries"],
        backoff_s=knobs["backoff_s"],
    )
    return tuple(
        o.value
        if o.value is not None
        else HostRanks(o.host.name, expected[o.host.name], error=f"{o.outcome.value}: {_outcome_error(o)}")
        for o in fan.outcomes
    )


def wait_running(
    job: Job,
    hosts: Sequence[Host],
    pool: TransportPool,
    *,
    timeout_s: float,
    diagnose: DiagnoseSettings | None = None,
    poll_s: float = POLL_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> RunningReport:
    """Scan (:func:`list_ranks`) until every rank of ``job`` runs on ``hosts`` or ``timeout_s`` passes.

    Every rank must be found by two scans in a row, ``poll_s`` apart, so that a process that dies
    as it starts (a bad argument, an import error) is not counted as running.

    Args:
        job: the job (its ``process:`` section finds its processes).
        hosts: the machines, rank order.
        pool: transports, one per host (closed by the caller).
        timeout_s: seconds to wait at most.
        diagnose: fan-out knobs (concurrency, retries, backoff); None: 64 hosts at once, one retry.
        poll_s: seconds between scans.
        sleep: waits that many seconds (a fake in tests).
        clock: monotonic seconds (a fake in tests).

    Returns:
        The last scan of each machine, the seconds waited and ``timeout_s``: at the second scan in a row
        that found every rank, or at the last scan before ``timeout_s`` (ranks may then be missing).

    Raises:
        ConfigError: the job has no ``process:`` section.
    """
    t0 = clock()
    seen_all = False
    while True:
        hosts_now = list_ranks(job, hosts, pool, diagnose=diagnose)
        waited = clock() - t0
        report = RunningReport(hosts_now, round(waited, 3), timeout_s)
        if report.ok and seen_all:
            return report
        seen_all = report.ok
        if waited + poll_s > timeout_s:
            return report
        sleep(poll_s)


def launch_spec_of(job: Job) -> LaunchSpec:
    """The job's ``launch:`` section. Raises ConfigError when it has none."""
    if job.launch is None:
        raise ConfigError(f"job {job.name!r} has no launch: section")
    return job.launch
