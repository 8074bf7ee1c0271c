"""The Slurm back end: drain, resume, standby, job host lists and requeue over Slurm's own CLI tools.

Every operation runs ``scontrol``, ``sinfo`` or ``squeue`` as an argv list (never a shell), with
``SLURM_CONF`` pointing at the configured ``slurm.conf`` (else the inherited environment / Slurm's
default), under a timeout; a command that exits non-zero or runs past its timeout raises
:class:`~robustctl.schedulers.base.SchedulerError` naming the command line and its stderr.

Mapping of the :class:`~robustctl.schedulers.base.Scheduler` vocabulary (Slurm 22.05 and later):

* ``drain``: ``scontrol update nodename=H1,H2 state=drain reason="robustctl: WHY"`` in one call for
  every host that is not drained yet. A host already drained (by anyone, for any reason) is a no-op
  result; a warm standby (see below) is re-drained with the eviction reason. A running job keeps its
  allocation (the node shows ``draining``); stopping the job is :meth:`Slurm.requeue`'s work.
* ``resume``: ``scontrol update nodename=… state=resume`` for the drained and down hosts; a
  schedulable host is a no-op (Slurm itself rejects resuming an idle node). Slurm clears the reason.
* ``hold_standby``: drained with a reason that starts ``robustctl-standby:``; :meth:`Slurm.state`
  reports such hosts as ``STANDBY``. (A reservation would also keep them out of scheduling; a drain
  reason is used because it needs no extra object, shows in ``sinfo -R``, and survives a controller
  restart the same way an eviction does.)
* ``state``: ``sinfo --json --all`` (node table, one entry per node); hosts that ``sinfo`` does not
  list (nodes in no partition) are looked up in ``scontrol show node -o``. Where ``sinfo --json`` is not
  available (Slurm built without the JSON data parser, or older than 21.08), ``sinfo -N -h -o
  %N|%T|%E`` is parsed instead.
* ``job_hosts``: ``scontrol show job -o J`` → ``NodeList`` (running job) or ``ReqNodeList`` (pending
  job pinned by :meth:`Slurm.replace_host`), expanded with python-hostlist. ``J`` is a Slurm job id, or a
  job name resolved through ``squeue --json`` (it must name exactly one job that has not finished).
  Slurm lists a job's nodes in its node-table order, not in the order they were asked for: "machine k"
  is the k-th node of that order.
* ``replace_host``: **Slurm cannot swap a node inside a running job.** Replacing a host therefore
  means restarting the job on the new host list: a running job is first requeued *held*
  (``scontrol requeuehold J``, which stops it), then pinned with
  ``scontrol update jobid=J ReqNodeList=<hosts, old→new> ExcNodeList=<previous exclusions + old>``;
  :meth:`Slurm.requeue` releases it. Several replacements before one requeue accumulate in
  ``ReqNodeList``. The new host must be schedulable when the job is released (resume a standby first).
* ``requeue``: ``scontrol requeue J`` (or ``scontrol release J`` for a job held by ``replace_host``),
  then ``scontrol update jobid=J StartTime=now``. Slurm makes a requeued job eligible only ~120 s later;
  setting the start time makes it eligible at once. **Trap, measured on 22.05:** when the job is
  started again within the same second as the requeue, the slurmd that killed it still holds the job's
  revoked credential and refuses the launch ("Job credential revoked"), and the job ends FAILED. The
  back end therefore waits until the job is pending and at least ``requeue_settle_s`` (1.5 s) after the
  requeue before setting the start time. Batch scripts should use ``--open-mode=append`` or a requeue
  truncates their output file.

Two more traps of Slurm 22.05's JSON output, handled here: ``sinfo --json`` against an unreachable
slurmctld exits **0** after ~9 s with an ``errors`` entry and an empty node list (read naively: "every
host unknown"); it is an error here. ``squeue --json`` ignores ``-j``/``-n`` and prints every job: jobs
are filtered after parsing.

Parsers of Slurm's output (:func:`parse_sinfo_json`, :func:`parse_sinfo_text`,
:func:`parse_squeue_json`, :func:`parse_scontrol_records`) are pure functions, tested against outputs
captured from a real Slurm 22.05 in ``tests/data/slurm``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hostlist

from robustctl.errors import ConfigError
from robustctl.inputfile import file_kind
from robustctl.process import OutputLimitExceeded, run_argv
from robustctl.schedulers.base import NodeState, OpResult, SchedulerError

if TYPE_CHECKING:
    from robustctl.config import SchedulerSettings

__all__ = [
    "DRAIN_PREFIX",
    "STANDBY_PREFIX",
    "CommandOutput",
    "Runner",
    "Slurm",
    "SlurmJob",
    "SlurmNode",
    "compress_nodelist",
    "create",
    "expand_nodelist",
    "parse_scontrol_records",
    "parse_sinfo_json",
    "parse_sinfo_text",
    "parse_squeue_json",
]

DRAIN_PREFIX = "robustctl"
"""Drain reasons robustctl sets start with ``robustctl: ``."""
STANDBY_PREFIX = "robustctl-standby"
"""Reasons of warm standbys start with ``robustctl-standby: ``."""

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_JOB_ID_RE = re.compile(r"^[0-9]+(_[0-9]+)?$")
# Base node states that mean "not reachable / not usable" (sinfo long names, lower case).
_DOWN_STATES = frozenset({"down", "fail", "failing", "error", "unknown", "future", "no_respond", "unk"})
_DOWN_FLAGS = frozenset({"NOT_RESPONDING", "FAIL", "NO_RESPOND"})
# Job states in which the job holds (or is about to hold) nodes.
_RUNNING_JOB_STATES = frozenset({"RUNNING", "SUSPENDED", "CONFIGURING", "STAGE_OUT", "SIGNALING"})
_FINISHED_JOB_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)
_HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin", "job_requeued_in_held_state"})


# --------------------------------------------------------------------------------------------------
# Parsed records
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SlurmNode:
    """One node as Slurm reports it.

    Attributes:
        name: node name. state: base state, lower case (``idle``, ``allocated``, ``mixed``, ``down``,
        ``drained`` in text output, …). flags: state flags, upper case (``DRAIN``, ``NOT_RESPONDING``,
        …). reason: the drain/down reason without Slurm's ``[user@time]`` suffix ("" when none).
    """

    name: str
    state: str
    flags: frozenset[str] = frozenset()
    reason: str = ""

    @property
    def drained(self) -> bool:
        """Whether the node is drained or draining (no new work is scheduled on it)."""
        return "DRAIN" in self.flags or self.state in {"drained", "draining", "drain"}

    @property
    def standby(self) -> bool:
        """Whether the node is held as a robustctl warm standby (drained with the standby reason)."""
        return self.drained and self.reason.startswith(STANDBY_PREFIX)

    @property
    def down(self) -> bool:
        """Whether Slurm cannot use the node (down, failed, not responding)."""
        return self.state in _DOWN_STATES or bool(self.flags & _DOWN_FLAGS)

    def node_state(self) -> NodeState:
        """The node in the Scheduler protocol's vocabulary (standby > drained > down > active)."""
        if self.standby:
            return NodeState.STANDBY
        if self.drained:
            return NodeState.DRAINED
        if self.down:
            return NodeState.DOWN
        return NodeState.ACTIVE


@dataclass(frozen=True)
class SlurmJob:
    """One job as Slurm reports it.

    Attributes:
        job_id: Slurm job id (``"123"``, or ``"123_4"`` for an array task). name: job name.
        state: job state, upper case (``RUNNING``, ``PENDING``, ``COMPLETING``, …). reason: the state
        reason (``None``, ``BeginTime``, ``JobHeldUser``, …). nodes: allocated nodes, expanded, in
        Slurm's order (empty while pending). required_nodes / excluded_nodes: ``ReqNodeList`` /
        ``ExcNodeList``, expanded. restarts: how many times the job was requeued.
    """

    job_id: str
    name: str
    state: str
    reason: str = ""
    nodes: tuple[str, ...] = ()
    required_nodes: tuple[str, ...] = ()
    excluded_nodes: tuple[str, ...] = ()
    restarts: int = 0

    @property
    def running(self) -> bool:
        """Whether the job holds nodes now (running, suspended, configuring)."""
        return self.state in _RUNNING_JOB_STATES

    @property
    def finished(self) -> bool:
        """Whether the job has ended (completed, failed, cancelled, …)."""
        return self.state in _FINISHED_JOB_STATES

    @property
    def held(self) -> bool:
        """Whether the job is pending on a hold (user, admin, or requeued held)."""
        return self.state == "PENDING" and self.reason in _HELD_REASONS

    @property
    def hosts(self) -> tuple[str, ...]:
        """Where the job runs or will run: its nodes, else the nodes it is pinned to."""
        return self.nodes or (self.required_nodes if self.state == "PENDING" else ())


# --------------------------------------------------------------------------------------------------
# Parsers (pure; tested against captured Slurm 22.05 output)
# --------------------------------------------------------------------------------------------------


def expand_nodelist(text: str | None) -> tuple[str, ...]:
    """Expand a Slurm node list (``node[1-3,5],gpu01``) in order; ``""``/``(null)``/``None`` → ()."""
    if text is None:
        return ()
    text = text.strip()
    if text in {"", "(null)", "None", "N/A"}:
        return ()
    try:
        return tuple(str(h) for h in hostlist.expand_hostlist(text))
    except hostlist.BadHostlist as exc:
        raise ValueError(f"bad Slurm node list {text!r}: {exc}") from None


def compress_nodelist(hosts: Iterable[str]) -> str:
    """The compact Slurm node list of ``hosts`` (``["node2", "node1", "node4"]`` → ``node[1-2,4]``), the
    inverse of :func:`expand_nodelist` up to order: names sorted, duplicates once (python-hostlist's
    ``collect_hostlist``); ``""`` for none. What ``--nodelist``/``nodename=`` of ``srun`` and
    ``scontrol`` take, for callers outside this module that start Slurm commands themselves
    (:mod:`robustctl.transport.srun`)."""
    names = list(hosts)
    return str(hostlist.collect_hostlist(names)) if names else ""


def _load_json(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what}: expected a JSON object, got {type(data).__name__}")
    errors = data.get("errors") or []
    if errors:
        # Slurm 22.05 exits 0 with an "errors" entry (and an empty list) when slurmctld is unreachable.
        shown = "; ".join(
            f"{e.get('error') or e.get('description') or e}"
            + (f" (errno {e['errno']})" if isinstance(e, dict) and "errno" in e else "")
            if isinstance(e, dict)
            else str(e)
            for e in errors
        )
        raise ValueError(f"{what} reported errors (is slurmctld reachable?): {shown}")
    return data


def _split_state(state: Any, flags: Any) -> tuple[str, frozenset[str]]:
    """Normalize a JSON node state: 22.05 gives ``"idle"`` + ``["DRAIN"]``; 23.02+ ``["IDLE", "DRAIN"]``."""
    flag_set = {str(f).upper() for f in (flags or [])}
    if isinstance(state, list):
        parts = [str(s) for s in state]
        base = parts[0].lower() if parts else "unknown"
        flag_set.update(p.upper() for p in parts[1:])
    else:
        base = str(state or "unknown").lower()
    return base, frozenset(flag_set)


def parse_sinfo_json(text: str) -> dict[str, SlurmNode]:
    """Nodes of ``sinfo --json`` output (Slurm 22.05's openapi v0.0.38 and later shapes), by name.

    Args:
        text: what ``sinfo --json`` printed.

    Returns:
        Each node (base state, state flags, reason) by its name.

    Raises:
        ValueError: not JSON, not sinfo's shape, or Slurm listed errors.
    """
    data = _load_json(text, "sinfo --json")
    nodes = data.get("nodes")
    if not isinstance(nodes, list):
        raise ValueError("sinfo --json: no 'nodes' list")
    out: dict[str, SlurmNode] = {}
    for raw in nodes:
        if not isinstance(raw, dict) or not raw.get("name"):
            raise ValueError(f"sinfo --json: node entry without a name: {raw!r:.200}")
        base, flags = _split_state(raw.get("state"), raw.get("state_flags"))
        reason = raw.get("reason") or ""
        if isinstance(reason, dict):  # newer data parsers nest it
            reason = reason.get("description", "")
        out[str(raw["name"])] = SlurmNode(str(raw["name"]), base, flags, str(reason))
    return out


_SINFO_SUFFIXES = "*~#!%$@^-"


def parse_sinfo_text(text: str) -> dict[str, SlurmNode]:
    """Nodes of ``sinfo -N -h -o '%N|%T|%E'`` output (one line per node and partition), by name.

    ``%T`` is the long state (``idle``, ``drained``, ``draining``, ``mixed+drain``, ``down*``); a
    trailing ``*`` means not responding. ``%E`` (the reason, "none" when unset) comes last and may
    itself contain ``|``.

    Args:
        text: what ``sinfo`` printed.

    Returns:
        Each node (base state, state flags, reason) by its name.

    Raises:
        ValueError: a line that is not ``NAME|STATE|REASON``.
    """
    out: dict[str, SlurmNode] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 2)
        if len(parts) != 3 or not parts[0].strip():
            raise ValueError(f"sinfo: unexpected line {line!r} (expected NAME|STATE|REASON)")
        name, state, reason = (p.strip() for p in parts)
        flags: set[str] = set()
        if state.endswith("*"):
            flags.add("NOT_RESPONDING")
        state = state.rstrip(_SINFO_SUFFIXES).lower()
        base, *extra = state.split("+")
        flags.update(e.upper() for e in extra)
        if base in {"drained", "draining", "drain"}:
            flags.add("DRAIN")
        out[name] = SlurmNode(name, base, frozenset(flags), "" if reason == "none" else reason)
    return out


_KEY_RE = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_/:]*)=")
_REASON_SUFFIX_RE = re.compile(r"\s*\[[^\]@]*@[^\]]*\]\s*$")


def parse_scontrol_records(text: str, *, tail_key: str | None = None) -> list[dict[str, str]]:
    """Records of ``scontrol show node|job -o`` output: one ``Key=Value …`` line per record.

    Values may contain spaces (``OS=Linux 6.1.0 #1 SMP``): a value runs to the next `` Key=``.
    ``tail_key`` names a key whose value runs to the end of the line whatever it contains (nodes'
    ``Reason``, which is free text and printed last).
    """
    records: list[dict[str, str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        tail: str | None = None
        if tail_key is not None:
            marker = f" {tail_key}="
            pos = line.find(marker)
            if pos >= 0:
                tail = line[pos + len(marker) :].strip()
                line = line[:pos]
        record: dict[str, str] = {}
        matches = list(_KEY_RE.finditer(line))
        if not matches or matches[0].start() != 0:
            raise ValueError(f"scontrol: unexpected line {line[:120]!r} (expected Key=Value …)")
        for i, m in enumerate(matches):
            end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
            record[m.group(1)] = line[m.end() : end].strip()
        if tail is not None and tail_key is not None:
            record[tail_key] = tail
        records.append(record)
    return records


def node_from_scontrol(record: Mapping[str, str]) -> SlurmNode:
    """A :class:`SlurmNode` from one ``scontrol show node -o`` record (``State=IDLE+DRAIN``)."""
    name = record.get("NodeName", "")
    if not name:
        raise ValueError(f"scontrol show node: record without NodeName: {dict(record)!r:.200}")
    state = record.get("State", "UNKNOWN")
    not_responding = state.endswith("*")
    base, *extra = state.rstrip(_SINFO_SUFFIXES).split("+")
    flags = {e.upper() for e in extra}
    if not_responding:
        flags.add("NOT_RESPONDING")
    reason = _REASON_SUFFIX_RE.sub("", record.get("Reason", ""))
    return SlurmNode(name, base.lower(), frozenset(flags), "" if reason == "(null)" else reason)


def job_from_scontrol(record: Mapping[str, str]) -> SlurmJob:
    """A :class:`SlurmJob` from one ``scontrol show job -o`` record."""
    job_id = record.get("JobId", "")
    if not job_id:
        raise ValueError(f"scontrol show job: record without JobId: {dict(record)!r:.200}")
    if record.get("ArrayTaskId") not in {None, "", "N/A"} and record.get("ArrayJobId"):
        job_id = f"{record['ArrayJobId']}_{record['ArrayTaskId']}"
    try:
        restarts = int(record.get("Restarts", "0"))
    except ValueError:
        restarts = 0
    return SlurmJob(
        job_id=job_id,
        name=record.get("JobName", ""),
        state=record.get("JobState", "UNKNOWN").upper(),
        reason=record.get("Reason", ""),
        nodes=expand_nodelist(record.get("NodeList")),
        required_nodes=expand_nodelist(record.get("ReqNodeList")),
        excluded_nodes=expand_nodelist(record.get("ExcNodeList")),
        restarts=restarts,
    )


def parse_squeue_json(text: str) -> list[SlurmJob]:
    """Jobs of ``squeue --json`` output, in Slurm's order.

    Note: Slurm 22.05's ``squeue --json`` ignores ``-j``/``-n`` filters and prints every job the
    controller still holds; filter the result instead.

    Args:
        text: what ``squeue --json`` printed.

    Returns:
        The jobs, in Slurm's order.

    Raises:
        ValueError: not JSON, not squeue's shape, or Slurm listed errors.
    """
    data = _load_json(text, "squeue --json")
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        raise ValueError("squeue --json: no 'jobs' list")
    out: list[SlurmJob] = []
    for raw in jobs:
        if not isinstance(raw, dict) or raw.get("job_id") is None:
            raise ValueError(f"squeue --json: job entry without job_id: {raw!r:.200}")
        state = raw.get("job_state", "UNKNOWN")
        if isinstance(state, list):  # 23.02+: a list of state and flags
            state = state[0] if state else "UNKNOWN"
        job_id = str(raw["job_id"])
        task = raw.get("array_task_id")
        if isinstance(task, int) and raw.get("array_job_id"):
            job_id = f"{raw['array_job_id']}_{task}"
        out.append(
            SlurmJob(
                job_id=job_id,
                name=str(raw.get("name", "")),
                state=str(state).upper(),
                reason=str(raw.get("state_reason", "")),
                nodes=expand_nodelist(raw.get("nodes")),
                required_nodes=expand_nodelist(raw.get("required_nodes")),
                excluded_nodes=expand_nodelist(raw.get("excluded_nodes")),
                restarts=int(raw.get("restart_cnt") or 0),
            )
        )
    return out


# --------------------------------------------------------------------------------------------------
# Running the commands
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommandOutput:
    """What one Slurm command printed. returncode: exit status (never negative: timeouts raise)."""

    returncode: int
    stdout: str
    stderr: str


SLURM_MAX_OUTPUT_BYTES = 256 << 20
"""Bound on what one Slurm command may print (256 MiB): ``scontrol show nodes`` of a 100,000-node
cluster is about 200 MiB at 2 KiB per node record."""

Runner = Callable[[Sequence[str], Mapping[str, str], float], CommandOutput]
"""Runs ``argv`` with ``env`` under a timeout in seconds; raises ``subprocess.TimeoutExpired`` past it.

The default, :func:`run_command`, is a subprocess; unit tests pass a fake."""


def run_command(argv: Sequence[str], env: Mapping[str, str], timeout_s: float) -> CommandOutput:
    """Run ``argv`` (no shell, stdin closed) in its own process group, killed on timeout or interruption.

    Output is decoded as UTF-8 (undecodable bytes replaced). See :func:`robustctl.process.run_argv`
    for what it raises.
    """
    done = run_argv(argv, timeout_s=timeout_s, env=env, max_stdout=SLURM_MAX_OUTPUT_BYTES)
    return CommandOutput(
        done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")
    )


def _clean_reason(reason: str, prefix: str) -> str:
    text = " ".join(reason.split())
    if not text:
        raise SchedulerError("slurm", "reason", "a drain reason is required (Slurm refuses an empty one)")
    if text.startswith(f"{prefix}:"):
        return text
    return f"{prefix}: {text}"


def _check_names(hosts: Sequence[str]) -> list[str]:
    names = list(dict.fromkeys(hosts))
    bad = [h for h in names if not _NAME_RE.match(h)]
    if bad:
        raise SchedulerError(
            "slurm", "node names", f"not plain Slurm node names: {', '.join(map(repr, bad))}"
        )
    return names


# --------------------------------------------------------------------------------------------------
# The back end
# --------------------------------------------------------------------------------------------------


def check_slurm_conf(path: str, origin: str) -> None:
    """Refuse a slurm.conf path that exists but is not a regular file (checked with ``stat``, which
    never opens it). robustctl never reads slurm.conf; every Slurm command it runs does, and a FIFO
    there would hold each one until its timeout, a directory or device fail it with Slurm's own
    message. A missing file is left to Slurm (its error names it).

    Args:
        path: the configured path.
        origin: the setting that named it, for the message.

    Raises:
        ConfigError: ``"PATH: slurm.conf is a FIFO, not a regular file (from scheduler.slurm.conf)"``.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{path}: slurm.conf is a {file_kind(mode)}, not a regular file (from {origin})")


@dataclass
class Slurm:
    """The Slurm back end of the :class:`~robustctl.schedulers.base.Scheduler` protocol.

    Attributes:
        conf: ``slurm.conf`` passed as ``SLURM_CONF`` to every command (None: the inherited
            environment, else Slurm's compiled-in default).
        bin_dir: directory of ``scontrol``/``sinfo``/``squeue`` (None: ``PATH``).
        timeout_s: deadline of each command, and of each wait for a job state change.
        requeue_settle_s: least time between a requeue and ``StartTime=now`` (see the module doc).
        poll_s: interval of job-state polls.
        runner: how commands run (:func:`run_command`; a fake in unit tests).
    """

    conf: str | os.PathLike[str] | None = None
    bin_dir: str | os.PathLike[str] | None = None
    timeout_s: float = 30.0
    requeue_settle_s: float = 1.5
    poll_s: float = 0.1
    runner: Runner = run_command
    name: str = field(default="slurm", init=False)
    _json_ok: bool | None = field(default=None, init=False, repr=False)
    _requeued_at: dict[str, float] = field(default_factory=dict, init=False, repr=False)

    # ---- plumbing ---------------------------------------------------------------------------------

    def run(self, argv: Sequence[str], *, check: bool = True) -> CommandOutput:
        """Run one Slurm command (``argv[0]`` is ``scontrol``, ``sinfo``, …) under :attr:`timeout_s`.

        Args:
            argv: the command; ``argv[0]`` is looked up in :attr:`bin_dir` (else ``PATH``).
            check: raise when it exits non-zero; False: return its output anyway.

        Returns:
            Its exit status, stdout and stderr (text).

        Raises:
            SchedulerError: it could not start, timed out, or (with ``check``) exited non-zero; the
                message names the command line and stderr's last line.
        """
        tool = argv[0]
        exe = str(Path(self.bin_dir) / tool) if self.bin_dir is not None else tool
        env = dict(os.environ)
        if self.conf is not None:
            env["SLURM_CONF"] = os.fspath(self.conf)
        env.setdefault("LC_ALL", "C")
        shown = shlex.join(argv)
        try:
            out = self.runner([exe, *argv[1:]], env, self.timeout_s)
        except subprocess.TimeoutExpired:
            raise SchedulerError(
                "slurm", shown, f"timed out after {self.timeout_s:g} s (slurmctld unreachable or hung?)"
            ) from None
        except OSError as exc:
            raise SchedulerError("slurm", shown, f"cannot run {exe}: {exc.strerror or exc}") from None
        except OutputLimitExceeded as exc:
            raise SchedulerError("slurm", shown, str(exc)) from None
        if check and out.returncode != 0:
            lines = [ln.strip() for ln in (out.stderr or out.stdout).splitlines() if ln.strip()]
            raise SchedulerError("slurm", shown, lines[-1] if lines else f"exited {out.returncode}")
        return out

    def _parse_error(self, argv: Sequence[str], exc: ValueError) -> SchedulerError:
        return SchedulerError("slurm", shlex.join(argv), f"unexpected output: {exc}")

    # ---- nodes ------------------------------------------------------------------------------------

    def nodes(self) -> dict[str, SlurmNode]:
        """Every node ``sinfo`` lists (all partitions), by name: ``sinfo --json`` or the text fallback."""
        if self._json_ok is not False:
            argv = ["sinfo", "--json", "--all"]
            out = self.run(argv, check=False)
            if out.returncode == 0:
                self._json_ok = True
                try:
                    return parse_sinfo_json(out.stdout)
                except ValueError as exc:
                    raise self._parse_error(argv, exc) from None
            if self._json_ok is True or not _json_unsupported(out.stderr):
                lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
                raise SchedulerError(
                    "slurm", shlex.join(argv), lines[-1] if lines else f"exited {out.returncode}"
                )
            self._json_ok = False
        argv = ["sinfo", "--all", "-N", "-h", "-o", "%N|%T|%E"]
        try:
            return parse_sinfo_text(self.run(argv).stdout)
        except ValueError as exc:
            raise self._parse_error(argv, exc) from None

    def show_nodes(self, hosts: Sequence[str] | None = None) -> dict[str, SlurmNode]:
        """``scontrol show node -o [H,…]``: the named nodes (every node when None), by name."""
        argv = ["scontrol", "show", "node", "-o"]
        if hosts:
            argv.append(",".join(_check_names(hosts)))
        try:
            records = parse_scontrol_records(self.run(argv).stdout, tail_key="Reason")
            return {n.name: n for n in map(node_from_scontrol, records)}
        except ValueError as exc:
            raise self._parse_error(argv, exc) from None

    def node_info(self, hosts: Sequence[str]) -> dict[str, SlurmNode | None]:
        """Each named host's node record (None for a host Slurm does not know)."""
        names = _check_names(hosts)
        if not names:
            return {}
        known = self.nodes()
        missing = [h for h in names if h not in known]
        if missing:  # nodes in no partition are not in sinfo: ask the node table
            known.update(self.show_nodes())
        return {h: known.get(h) for h in names}

    def state(self, hosts: Sequence[str]) -> Mapping[str, NodeState]:
        """The scheduler's view of each host (UNKNOWN for a host Slurm does not know)."""
        return {
            h: (n.node_state() if n is not None else NodeState.UNKNOWN)
            for h, n in self.node_info(hosts).items()
        }

    def _require_known(self, hosts: Sequence[str], operation: str) -> dict[str, SlurmNode]:
        info = self.node_info(hosts)
        unknown = [h for h, n in info.items() if n is None]
        if unknown:
            raise SchedulerError(
                "slurm",
                f"{operation} {compress_nodelist(unknown)}",
                f"unknown to Slurm: {', '.join(unknown)}",
            )
        return {h: n for h, n in info.items() if n is not None}

    def _set_state(self, hosts: Sequence[str], state: str, reason: str | None) -> str:
        argv = ["scontrol", "update", f"nodename={compress_nodelist(hosts)}", f"state={state}"]
        if reason is not None:
            argv.append(f"reason={reason}")
        self.run(argv)
        return shlex.join(argv)

    def drain(self, hosts: Sequence[str], reason: str) -> list[OpResult]:
        """Drain ``hosts`` with reason ``robustctl: REASON``; drained hosts are no-ops, standbys re-drained.

        Args:
            hosts: the node names.
            reason: why, stored by Slurm as ``robustctl: REASON``.

        Returns:
            One result per host, in the order given: the scontrol command run, or "already drained".

        Raises:
            SchedulerError: a host unknown to Slurm (nothing is changed then), or scontrol failed.
        """
        full = _clean_reason(reason, DRAIN_PREFIX)
        info = self._require_known(hosts, "drain")
        todo = [h for h, n in info.items() if not n.drained or n.standby]
        done = self._set_state(todo, "drain", full) if todo else ""
        return [
            OpResult(h, "drain", True, done)
            if h in todo
            else OpResult(h, "drain", False, f"already drained (reason: {n.reason or 'none'})")
            for h, n in info.items()
        ]

    def resume(self, hosts: Sequence[str], reason: str) -> list[OpResult]:
        """Resume drained or down ``hosts`` (Slurm clears their reason); schedulable hosts are no-ops.

        ``reason`` is not stored by Slurm (resume clears the reason); it is echoed in the results.

        Args:
            hosts: the node names.
            reason: why, echoed in each changed host's detail.

        Returns:
            One result per host, in the order given.

        Raises:
            SchedulerError: a host unknown to Slurm (nothing is changed then), or scontrol failed.
        """
        info = self._require_known(hosts, "resume")
        todo = [h for h, n in info.items() if n.drained or n.down]
        done = self._set_state(todo, "resume", None) if todo else ""
        why = " ".join(reason.split())
        return [
            OpResult(h, "resume", True, f"{done} ({why})" if why else done)
            if h in todo
            else OpResult(h, "resume", False, f"already schedulable ({n.state})")
            for h, n in info.items()
        ]

    def hold_standby(self, hosts: Sequence[str], reason: str) -> list[OpResult]:
        """Drain ``hosts`` with reason ``robustctl-standby: REASON``; hosts already standby are no-ops.

        A host drained for another reason (an evicted host) is re-drained with the standby reason.
        """
        full = _clean_reason(reason, STANDBY_PREFIX)
        info = self._require_known(hosts, "hold_standby")
        todo = [h for h, n in info.items() if not n.standby]
        done = self._set_state(todo, "drain", full) if todo else ""
        return [
            OpResult(h, "hold_standby", True, done)
            if h in todo
            else OpResult(h, "hold_standby", False, f"already a standby (reason: {n.reason})")
            for h, n in info.items()
        ]

    # ---- jobs -------------------------------------------------------------------------------------

    def jobs(self) -> list[SlurmJob]:
        """Every job the controller holds (``squeue --json``; ``squeue -h -o`` where JSON is missing)."""
        argv = ["squeue", "--json", "--all"]
        out = self.run(argv, check=False)
        if out.returncode != 0:
            if not _json_unsupported(out.stderr):
                lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
                raise SchedulerError("slurm", shlex.join(argv), lines[-1] if lines else "failed")
            argv = ["squeue", "--all", "-h", "-o", "%i|%j|%T"]
            jobs = []
            for line in self.run(argv).stdout.splitlines():
                parts = line.strip().split("|")
                if len(parts) == 3:
                    jobs.append(SlurmJob(job_id=parts[0], name=parts[1], state=parts[2].upper()))
            return jobs
        try:
            return parse_squeue_json(out.stdout)
        except ValueError as exc:
            raise self._parse_error(argv, exc) from None

    def resolve_job(self, job: str) -> str:
        """The Slurm job id of ``job``: itself when it is an id, else the one unfinished job of that name.

        Args:
            job: a job id or a job name (surrounding whitespace ignored).

        Returns:
            The job id.

        Raises:
            SchedulerError: no unfinished job has that name, or several do.
        """
        job = job.strip()
        if _JOB_ID_RE.match(job):
            return job
        matches = [j for j in self.jobs() if j.name == job and not j.finished]
        if len(matches) == 1:
            return matches[0].job_id
        argv = "squeue --json --all"
        if not matches:
            raise SchedulerError("slurm", argv, f"no pending or running job named {job!r}")
        ids = ", ".join(j.job_id for j in matches)
        raise SchedulerError("slurm", argv, f"{len(matches)} jobs are named {job!r} ({ids}): give a job id")

    def job(self, job: str) -> SlurmJob:
        """``scontrol show job -o J`` parsed (``job``: an id or a name, see :meth:`resolve_job`)."""
        argv = ["scontrol", "show", "job", "-o", self.resolve_job(job)]
        try:
            records = parse_scontrol_records(self.run(argv).stdout)
        except ValueError as exc:
            raise self._parse_error(argv, exc) from None
        if not records:
            raise SchedulerError("slurm", shlex.join(argv), "no job record printed")
        try:
            return job_from_scontrol(records[0])
        except ValueError as exc:
            raise self._parse_error(argv, exc) from None

    def job_hosts(self, job: str) -> list[str]:
        """The job's machines in Slurm's order: its nodes, or for a pending pinned job its ReqNodeList.

        A pending job that is not pinned to nodes has no host list yet: ``[]``.
        """
        return list(self.job(job).hosts)

    def _wait_job(self, job_id: str, done: Callable[[SlurmJob], bool], what: str) -> SlurmJob:
        deadline = time.monotonic() + self.timeout_s
        while True:
            info = self.job(job_id)
            if done(info):
                return info
            if time.monotonic() >= deadline:
                raise SchedulerError(
                    "slurm",
                    f"scontrol show job -o {job_id}",
                    f"job still {info.state} ({info.reason}) after {self.timeout_s:g} s waiting for {what}",
                )
            time.sleep(self.poll_s)

    def _pending(self, job: SlurmJob) -> bool:
        return job.state == "PENDING"

    def replace_host(self, job: str, old: str, new: str) -> OpResult:
        """Put ``new`` in ``old``'s place in the job's host list; a running job is requeued held first.

        See the module doc: Slurm cannot swap a node in a running job, so the job is stopped
        (``scontrol requeuehold``) and pinned to the new list; :meth:`requeue` releases it.

        Args:
            job: a job id or name (see :meth:`resolve_job`).
            old: the node leaving the job.
            new: the node taking its place.

        Returns:
            The result for the job id: the scontrol commands run, or not changed when ``new`` already
            replaces ``old``.

        Raises:
            SchedulerError: ``old`` is not a host of the job, ``new`` already is, the job has finished,
                or a command failed.
        """
        _check_names([old, new])
        job_id = self.resolve_job(job)
        info = self.job(job_id)
        hosts = list(info.hosts)
        where = f"replace_host {job_id} {old} {new}"
        if old not in hosts and new in hosts:
            return OpResult(job_id, "replace_host", False, f"{new} already replaces {old}")
        if info.finished:
            raise SchedulerError("slurm", where, f"job {job_id} is {info.state}: nothing to replace")
        if old not in hosts:
            shown = compress_nodelist(hosts) or "none yet (pending, not pinned)"
            raise SchedulerError("slurm", where, f"{old} is not a host of job {job_id} (hosts: {shown})")
        if new in hosts:
            raise SchedulerError("slurm", where, f"{new} is already a host of job {job_id}")
        steps: list[str] = []
        if info.running:
            argv = ["scontrol", "requeuehold", job_id]
            self.run(argv)
            self._requeued_at[job_id] = time.monotonic()
            steps.append(shlex.join(argv))
            self._wait_job(job_id, self._pending, "the requeue (PENDING)")
        new_hosts = [new if h == old else h for h in hosts]
        excluded = [h for h in dict.fromkeys([*info.excluded_nodes, old]) if h not in new_hosts]
        argv = [
            "scontrol",
            "update",
            f"jobid={job_id}",
            f"ReqNodeList={compress_nodelist(new_hosts)}",
            f"ExcNodeList={compress_nodelist(excluded)}",
        ]
        self.run(argv)
        steps.append(shlex.join(argv))
        return OpResult(job_id, "replace_host", True, "; ".join(steps))

    def requeue(self, job: str) -> OpResult:
        """Restart the job on its (possibly replaced) host list, eligible at once.

        Running: ``scontrol requeue``; held by :meth:`replace_host`: ``scontrol release``; then, once
        the job is pending and ``requeue_settle_s`` after the requeue, ``StartTime=now``. A pending job
        that is not held is only made eligible at once.

        Args:
            job: a job id or name (see :meth:`resolve_job`).

        Returns:
            The result for the job id, naming the scontrol commands run.

        Raises:
            SchedulerError: the job has finished or cannot be requeued (``--no-requeue``), a command
                failed, or the job did not turn pending within the timeout.
        """
        job_id = self.resolve_job(job)
        info = self.job(job_id)
        steps: list[str] = []
        if info.finished:
            raise SchedulerError(
                "slurm", f"requeue {job_id}", f"job {job_id} is {info.state}: submit it again"
            )
        if info.running or info.state == "COMPLETING":
            argv = ["scontrol", "requeue", job_id]
            self.run(argv)
            self._requeued_at[job_id] = time.monotonic()
            steps.append(shlex.join(argv))
            info = self._wait_job(job_id, self._pending, "the requeue (PENDING)")
        if info.held:
            argv = ["scontrol", "release", job_id]
            self.run(argv)
            steps.append(shlex.join(argv))
        since = self._requeued_at.get(job_id)
        if since is not None:
            wait = self.requeue_settle_s - (time.monotonic() - since)
            if wait > 0:
                time.sleep(wait)
        argv = ["scontrol", "update", f"jobid={job_id}", "StartTime=now"]
        self.run(argv)
        steps.append(shlex.join(argv))
        return OpResult(job_id, "requeue", True, "; ".join(steps))


def _json_unsupported(stderr: str) -> bool:
    """Whether a failed ``--json`` call means this Slurm has no JSON output (so: use the text form)."""
    text = stderr.lower()
    return any(
        s in text for s in ("unrecognized option", "invalid option", "data_parser", "serializer", "json")
    )


def create(settings: SchedulerSettings, *, inventory: object = None, store: object = None) -> Slurm:
    """The factory :func:`robustctl.schedulers.make_scheduler` calls for ``scheduler.kind: slurm``.

    Reads ``scheduler.timeout_s`` and, where ``scheduler.slurm`` defines them, ``conf`` (path of
    slurm.conf), ``bin_dir`` and ``requeue_settle_s``. ``inventory`` and ``store`` are not needed: Slurm
    holds the node states itself.

    Args:
        settings: the inventory's ``scheduler:`` section.
        inventory: not used.
        store: not used.

    Returns:
        The configured back end.

    Raises:
        ConfigError: the slurm.conf named by ``conf`` (or inherited as ``$SLURM_CONF``) exists but is
            not a regular file (:func:`check_slurm_conf`).
    """
    sub = settings.slurm
    conf = getattr(sub, "conf", None)
    bin_dir = getattr(sub, "bin_dir", None)
    settle = getattr(sub, "requeue_settle_s", None)
    if conf is not None:
        check_slurm_conf(str(conf), "scheduler.slurm.conf")
    elif os.environ.get("SLURM_CONF"):
        check_slurm_conf(os.environ["SLURM_CONF"], "SLURM_CONF")
    return Slurm(
        conf=str(conf) if conf is not None else None,
        bin_dir=str(bin_dir) if bin_dir is not None else None,
        timeout_s=float(settings.timeout_s),
        requeue_settle_s=float(settle) if settle is not None else 1.5,
    )
