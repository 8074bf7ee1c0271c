"""The ``srun`` transport: one command on many Slurm nodes as ONE job step (slurmd's tree fan-out).

A 10,000-node fleet cannot be swept every 5 minutes from one SSH client (paramiko costs ~60 ms of
client CPU per host); the cluster's own launcher reaches every node through slurmd's tree. A batch
(:meth:`SrunTransport.run_batch`) runs::

    srun --nodelist=N --nodes=n --ntasks=n --ntasks-per-node=1 --time=M:SS --kill-on-bad-exit=0
         --immediate=S --label --job-name=robustctl-probe --quiet  PYTHON -c SRUN_WRAP T ARGV...

* **stdin**: srun forwards its standard input to every task by default (``--input=all``), so the
  framed probe script (:func:`robustctl.probes.framed`) is written once and every node's probe
  reads it; the pipe stays open until srun ends, the probes' lifeline as with the other transports.
* **stdout**: each task runs :data:`SRUN_WRAP`, which runs ARGV (its stdin inherited), captures its
  stdout and stderr, and prints ONE framed document keyed by ``SLURMD_NODENAME``:
  ``@rbsrun1 begin LEN``, the JSON text ``{"node", "rc", "out", "err"}`` (outputs in base64) cut in
  lines of 76 characters, ``@rbsrun1 end``. srun prefixes every line with the task number
  (``--label``) and splits lines longer than 1 KiB (measured on Slurm 22.05), so frames are
  reassembled per task (:func:`parse_step_output`) and checked against their length; anything else
  on stdout is ignored. A node whose frame is missing, cut or malformed has no result.
* **Nodes Slurm cannot start a step on** are not asked: unknown to Slurm, down or not responding,
  drained (no new job starts on a drained node). Each is reported unreachable with Slurm's state.
* **A node that died since slurmctld last heard from it**: Slurm aborts the whole step when the
  launch fails on one node ("Task launch for StepId=… failed on node X", measured: ~11 s, then the
  other nodes stay ``completing`` ~11 s more). Those nodes are unreachable; the step is started once
  more on the others, waiting (``--immediate``) until Slurm frees them, while the deadline allows. A
  node that answered the aborted step with a command killed by a signal (Slurm killing its task)
  is asked again with the others: that frame is no answer.

Host names are Slurm node names. Every node-side command is bounded in time (``T`` seconds, then
its process group is killed) and in output (:data:`NODE_MAX_BYTES`); the whole step's stdout is
bounded too. Nodes fully allocated to a running job cannot be reached this way (srun would wait for
them): they are reported unreachable, like drained ones.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from robustctl.errors import CommandTimeout, HostError, HostUnreachable, OutputTooLarge
from robustctl.process import OutputLimitExceeded, run_argv
from robustctl.transport.base import MAX_STDOUT_BYTES, CommandResult

if TYPE_CHECKING:
    from robustctl.config import SchedulerSettings
    from robustctl.inventory import Host
    from robustctl.schedulers.slurm import Slurm

__all__ = [
    "FRAME",
    "NODE_MAX_BYTES",
    "SRUN_WRAP",
    "NodeFrame",
    "SrunTransport",
    "launch_failures",
    "parse_step_output",
    "srun_argv",
]

FRAME = "@rbsrun1"
"""Marker of the framed lines a task prints (format version 1)."""
NODE_MAX_BYTES = 4 << 20
"""Bound on what one node's command may print on stdout (4 MiB; an L0 document is a few KiB)."""
_CHUNK = 76
_FRAME_OVERHEAD = 2.0
"""A frame's size over the command's output: base64 (4/3), JSON, line prefixes."""
ALLOC_MARGIN_S = 3.0
"""Seconds kept for the allocation and the answer, between the node-side limit and the deadline."""

SRUN_WRAP = (
    "import base64 as B,json,os,subprocess as S,sys\n"
    "t=float(sys.argv[1]);a=sys.argv[2:];L=@LIMIT@;d={'node':os.environ.get('SLURMD_NODENAME','')}\n"
    "try:\n"
    " p=S.Popen(a,stdout=S.PIPE,stderr=S.PIPE,start_new_session=True)\n"
    " try:\n"
    "  o,e=p.communicate(timeout=t);d['rc']=p.returncode\n"
    " except S.TimeoutExpired:\n"
    "  os.killpg(p.pid,9);o,e=p.communicate();d['rc']=-9;d['timeout']=1\n"
    "except OSError as x:\n"
    " o,e=b'',str(x).encode();d['rc']=127\n"
    "if len(o)>L:\n"
    " d['too_large']=len(o);o=b''\n"
    "d['out']=B.b64encode(o).decode();d['err']=B.b64encode(e[-65536:]).decode()\n"
    "s=json.dumps(d);w=sys.stdout.write\n"
    "w('@rbsrun1 begin %d\\n'%len(s))\n"
    "for i in range(0,len(s),76):w('@rbsrun1 '+s[i:i+76]+'\\n')\n"
    "w('@rbsrun1 end\\n');sys.stdout.flush()\n"
).replace("@LIMIT@", str(NODE_MAX_BYTES))
"""The program each task runs (``python -c SRUN_WRAP T ARGV...``): runs ARGV with the task's stdin,
kills its process group after ``T`` seconds, and prints the framed document (module docstring)."""

_LABEL_RE = re.compile(r"^\s*(\d{1,7}): ?(.*)$")
_LAUNCH_RE = re.compile(r"Task launch for StepId=\S+ failed on node (\S+?): (.*)$")


@dataclass(frozen=True)
class NodeFrame:
    """One node's answer in a step's output.

    Attributes:
        node: ``SLURMD_NODENAME`` of the task. exit_status: the command's (-9: killed at its limit).
        stdout / stderr: what it printed (stderr: its last 64 KiB). timed_out: killed at its limit.
        too_large: bytes it printed past :data:`NODE_MAX_BYTES` (its stdout dropped), else 0.
    """

    node: str
    exit_status: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    too_large: int = 0


def _frame(text: str) -> NodeFrame | None:
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    node, rc = doc.get("node"), doc.get("rc")
    if not isinstance(node, str) or not node or not isinstance(rc, int) or isinstance(rc, bool):
        return None
    try:
        out = base64.b64decode(str(doc.get("out", "")), validate=True)
        err = base64.b64decode(str(doc.get("err", "")), validate=True)
    except (binascii.Error, ValueError):
        return None
    big = doc.get("too_large", 0)
    return NodeFrame(
        node,
        rc,
        out,
        err,
        timed_out=doc.get("timeout") == 1,
        too_large=big if isinstance(big, int) and not isinstance(big, bool) else 0,
    )


def parse_step_output(stdout: bytes, *, max_frame: int = 2 * NODE_MAX_BYTES) -> dict[str, NodeFrame]:
    """The framed documents in a ``srun --label`` step's stdout, by node name.

    Lines are grouped by their task label; within a task, the text between ``@rbsrun1 begin LEN``
    and ``@rbsrun1 end`` is joined and must be exactly ``LEN`` characters of valid JSON. Unlabelled
    lines, other output, frames longer than ``max_frame`` characters, cut or malformed frames are
    ignored; a node named by two frames keeps the first.

    Never raises; memory is bounded by the input's size.
    """
    begin = f"{FRAME} begin "
    open_: dict[str, tuple[int, list[str], int]] = {}
    found: dict[str, NodeFrame] = {}
    for raw in stdout.decode("utf-8", "replace").splitlines():
        m = _LABEL_RE.match(raw)
        if m is None:
            continue
        task, line = m.group(1), m.group(2)
        if line.startswith(begin):
            size = line[len(begin) :].strip()
            if size.isdigit() and len(size) <= 12 and int(size) <= max_frame:
                open_[task] = (int(size), [], 0)
            else:
                open_.pop(task, None)
            continue
        state = open_.get(task)
        if state is None:
            continue
        want, parts, have = state
        if line == f"{FRAME} end":
            del open_[task]
            text = "".join(parts)
            frame = _frame(text) if len(text) == want else None
            if frame is not None and frame.node not in found:
                found[frame.node] = frame
            continue
        if line.startswith(f"{FRAME} "):
            chunk = line[len(FRAME) + 1 :]
            if have + len(chunk) > want:
                del open_[task]
                continue
            parts.append(chunk)
            open_[task] = (want, parts, have + len(chunk))
    return found


def launch_failures(stderr: bytes) -> dict[str, str]:
    """Nodes on which srun could not launch its task (``Task launch … failed on node X: WHY``) → WHY."""
    out: dict[str, str] = {}
    for line in stderr.decode("utf-8", "replace").splitlines():
        m = _LAUNCH_RE.search(line)
        if m is not None:
            out.setdefault(m.group(1), m.group(2).strip()[:200])
    return out


def _time_limit(seconds: float) -> str:
    """srun's ``--time`` (``minutes:seconds``) for ``seconds``, at least one minute."""
    total = max(60, math.ceil(seconds))
    return f"{total // 60}:{total % 60:02d}"


def srun_argv(
    nodes: Sequence[str], argv: Sequence[str], *, python: str, node_timeout_s: float, immediate_s: int
) -> list[str]:
    """The ``srun`` command line of one step running ``argv`` once on each of ``nodes``."""
    from robustctl.schedulers.slurm import compress_nodelist

    n = len(nodes)
    return [
        "srun",
        f"--nodelist={compress_nodelist(nodes)}",
        f"--nodes={n}",
        f"--ntasks={n}",
        "--ntasks-per-node=1",
        f"--time={_time_limit(node_timeout_s + ALLOC_MARGIN_S + 30)}",
        "--kill-on-bad-exit=0",
        f"--immediate={max(1, immediate_s)}",
        "--label",
        "--job-name=robustctl-probe",
        "--quiet",
        python,
        "-c",
        SRUN_WRAP,
        f"{max(1.0, node_timeout_s):.0f}",
        *argv,
    ]


class SrunTransport:
    """Runs commands on Slurm nodes through ``srun``, many nodes per step (see the module doc).

    Args:
        slurm: the Slurm back end (its ``conf``/``bin_dir`` are srun's too; it reads node states).
    """

    def __init__(self, slurm: Slurm | None = None) -> None:
        if slurm is None:
            from robustctl.schedulers.slurm import Slurm

            slurm = Slurm(timeout_s=30.0)
        self.slurm = slurm

    @classmethod
    def for_scheduler(cls, settings: SchedulerSettings | None) -> SrunTransport:
        """The transport for an inventory's ``scheduler:`` section (its ``slurm.conf``/``bin_dir`` when
        ``kind: slurm``; else Slurm's defaults and ``$SLURM_CONF``)."""
        from robustctl.schedulers.slurm import Slurm

        if settings is None or settings.kind != "slurm":
            return cls(Slurm(timeout_s=30.0))
        from robustctl.schedulers.slurm import create

        return cls(create(settings))

    def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout_s: float,
        keep_stdin_open: bool = False,
    ) -> CommandResult:
        """Run ``argv`` on one node (a step of one task). See :meth:`Transport.run`.

        Args:
            host: the node, by its inventory name (its Python path starts the task).
            argv: the program and its arguments.
            stdin: bytes written to the step's input; None: nothing.
            timeout_s: seconds for the whole step, Slurm's allocation included.
            keep_stdin_open: not used: the step's input always stays open until srun ends.

        Returns:
            The command's exit status, its stdout, the last of its stderr and the step's elapsed seconds.

        Raises:
            HostUnreachable: Slurm cannot start a step there, or the node did not answer.
            CommandTimeout: the command ran past ``timeout_s`` on the node.
            OutputTooLarge: as named.
        """
        res = self.run_batch([host], argv, stdin=stdin, timeout_s=timeout_s)[host.name]
        if isinstance(res, HostError):
            raise res
        return res

    def run_batch(
        self,
        hosts: Sequence[Host],
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout_s: float,
    ) -> dict[str, CommandResult | HostError]:
        """Run the same ``argv`` on every host as one step; each host's result or error, by name.

        The stdin pipe stays open until srun ends (a streamed probe's lifeline). Never raises for a
        node: a node Slurm cannot reach, that did not answer (:class:`HostUnreachable`), that ran out
        of time (:class:`CommandTimeout`) or printed too much (:class:`OutputTooLarge`) gets that error.
        """
        from robustctl.schedulers.base import SchedulerError

        deadline = time.monotonic() + timeout_s
        names = list(dict.fromkeys(h.name for h in hosts))
        out: dict[str, CommandResult | HostError] = {}
        if not names:
            return out
        python = hosts[0].python.path if not hosts[0].python.wrapper else "python3"
        try:
            info = self.slurm.node_info(names)
        except SchedulerError as exc:
            return {n: HostUnreachable(n, f"cannot read Slurm's node states: {exc}") for n in names}
        except ValueError as exc:  # a name Slurm cannot take
            return {n: HostUnreachable(n, str(exc)) for n in names}
        todo: list[str] = []
        for name in names:
            node = info.get(name)
            if node is None:
                out[name] = HostUnreachable(name, "unknown to Slurm: no step can run there")
            elif node.down:
                why = f" ({node.reason})" if node.reason else ""
                out[name] = HostUnreachable(name, f"Slurm reports the node {node.state}{why}")
            elif node.drained:
                out[name] = HostUnreachable(
                    name, f"drained in Slurm (reason: {node.reason or 'none'}): a new step cannot start there"
                )
            elif node.state == "allocated":
                out[name] = HostUnreachable(
                    name, "fully allocated to a running job: a new step cannot start there"
                )
            else:
                todo.append(name)
        for attempt in range(2):
            if not todo:
                break
            left = deadline - time.monotonic()
            if left <= ALLOC_MARGIN_S + 1:
                out.update(
                    {n: CommandTimeout(n, "deadline passed before the srun step started") for n in todo}
                )
                break
            frames, failed, why, took = self._step(todo, argv, stdin, left, python, retry=attempt > 0)
            for name in todo:
                f = frames.get(name)
                if f is not None and failed and attempt == 0 and f.exit_status < 0 and not f.timed_out:
                    continue  # killed by a signal when Slurm aborted the step: asked again below
                if f is not None:
                    out[name] = self._result(f, took)
                elif name in failed:
                    out[name] = HostUnreachable(name, f"srun could not launch the task there: {failed[name]}")
            missing = [n for n in todo if n not in out]
            if failed and missing and attempt == 0:
                todo = missing  # Slurm aborted the whole step: once more without the failed nodes
                continue
            for name in missing:
                out[name] = HostUnreachable(name, f"no answer in the srun step: {why}")
            break
        return {n: out[n] for n in names}

    def _step(
        self,
        nodes: list[str],
        argv: Sequence[str],
        stdin: bytes | None,
        left: float,
        python: str,
        *,
        retry: bool,
    ) -> tuple[dict[str, NodeFrame], dict[str, str], str, float]:
        """Run one step; (frames by node, launch failures, one line on what went wrong, wall seconds)."""
        # First attempt: the nodes were free a moment ago, so the allocation is quick (--immediate
        # bounds it); srun may outlive the deadline by that wait at worst, rather than losing every
        # node's answer. A retry waits for Slurm to free the nodes of the aborted step, within the
        # deadline: half the time left for the allocation, half for the command.
        if retry:
            immediate = max(1.0, (left - ALLOC_MARGIN_S) / 2)
            node_timeout, limit = immediate, left
        else:
            immediate = min(10.0, max(1.0, left / 4))
            node_timeout, limit = left - ALLOC_MARGIN_S, left + immediate
        cmd = srun_argv(nodes, argv, python=python, node_timeout_s=node_timeout, immediate_s=int(immediate))
        exe = (
            os.path.join(os.fspath(self.slurm.bin_dir), "srun") if self.slurm.bin_dir is not None else "srun"
        )
        env = dict(os.environ)
        if self.slurm.conf is not None:
            env["SLURM_CONF"] = os.fspath(self.slurm.conf)
        bound = min(1 << 31, len(nodes) * int(NODE_MAX_BYTES * _FRAME_OVERHEAD) + MAX_STDOUT_BYTES)
        try:
            done = run_argv(
                [exe, *cmd[1:]],
                timeout_s=limit,
                stdin=stdin or b"",
                env=env,
                keep_stdin_open=True,
                max_stdout=bound,
                label="srun",
            )
        except subprocess.TimeoutExpired:
            return {}, {}, f"srun ran past {limit:.0f} s and was stopped", limit
        except OutputLimitExceeded as exc:
            return {}, {}, f"srun {exc}", 0.0
        except OSError as exc:
            return {}, {}, f"cannot run {exe}: {exc.strerror or exc}", 0.0
        frames = parse_step_output(done.stdout)
        failed = launch_failures(done.stderr)
        lines = [ln.strip() for ln in done.stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
        why = lines[-1][:200] if lines else f"srun exited {done.returncode} without its document"
        return frames, failed, why, done.elapsed_s

    @staticmethod
    def _result(f: NodeFrame, elapsed: float) -> CommandResult | HostError:
        if f.timed_out:
            return CommandTimeout(f.node, "the command ran past its time limit on the node and was killed")
        if f.too_large:
            return OutputTooLarge(
                f.node, f"printed {f.too_large} bytes on stdout (bound {NODE_MAX_BYTES}); stopped"
            )
        return CommandResult(f.node, f.exit_status, f.stdout, f.stderr, elapsed)

    def close(self) -> None:
        """Nothing to release (each step is its own srun process)."""
