"""The two replay rounds: every group of a phase replays the reduced job at once, then the next phase.

Each round runs its ``n`` groups through :func:`robustctl.transport.fanout.fan_out_units`
(``concurrency // m`` groups at once, at least one; a per-group budget and the round's deadline;
every group's outcome kept). Inside a group, its ``m`` machines start together (a second fan-out of
``m`` hosts): the machine listed first serves the rendezvous on ``master_port + 1 + group index``
at its address (:func:`robustctl.transport.addresses.lookup_addresses`: the inventory address,
the ``diagnose.allreduce.interface`` address, or ``127.0.0.1`` for local hosts).

Workloads (:class:`Workload`):

- **built-in** (default): the ``replay`` probe (``diagnostics/replay.py``) streamed to each machine
  with ``--nnodes m --node-rank i --nproc-per-node G`` and the job's TP and PP (CP and EP folded
  into the replay's TP width: the same ranks of a machine exchange partial results), ``DP`` from
  the grouping;
- **command** (``--command``): the user's own script, run on each machine through its Python
  wrapper as ``env MASTER_ADDR=… MASTER_PORT=… NNODES=m NODE_RANK=i NPROC_PER_NODE=G
  WORLD_SIZE=m·G ROBUSTCTL_REPLAY_TP/PP/DP/STEPS=… COMMAND…``, with ``{master_addr}``,
  ``{master_port}``, ``{nnodes}``, ``{node_rank}``, ``{nproc_per_node}``, ``{tp}``, ``{pp}``,
  ``{dp}``, ``{steps}`` replaced in its arguments. It must print the result line of
  ``diagnostics/replay_result.py`` (:func:`parse_result_line`).

A group whose machine could not start, timed out, failed, or printed no (or a malformed) result is
``ran = False`` with one line naming the host: it is never judged faulty
(:mod:`robustctl.sdc.verdict`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from robustctl.errors import ProbeError
from robustctl.probes import budget_s, run_probe
from robustctl.sdc.verdict import GroupRun
from robustctl.transport.addresses import ADDRESS_TIMEOUT_S, lookup_addresses
from robustctl.transport.fanout import fan_out, fan_out_units

if TYPE_CHECKING:
    from robustctl.config import DiagnoseSettings
    from robustctl.inventory import Host
    from robustctl.sdc.grouping import ReplayGroup, SdcGrouping
    from robustctl.transport.pool import TransportPool

__all__ = [
    "MAX_LOSS_STEPS",
    "RESULT_MARKER",
    "ReplaySpec",
    "RoundResult",
    "Workload",
    "command_argv",
    "parse_result_line",
    "probe_args",
    "run_round",
]

RESULT_MARKER = "robustctl_replay"
"""Key of the ``--command`` result line (``diagnostics/replay_result.py``)."""
MAX_LOSS_STEPS = 100_000
"""Most loss values a result line may hold."""
MAX_DIGEST_CHARS = 256
"""Longest digest a result line may hold."""


@dataclass(frozen=True)
class Workload:
    """What each group replays.

    Attributes:
        steps: training steps S. seed: the built-in job's seed. command: the user's argv (None:
        the built-in ``replay`` probe).
    """

    steps: int = 4
    seed: int = 1234
    command: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ReplaySpec:
    """One replay-sdc run: machines in rank order, their grouping, the workload, fan-out settings.

    Attributes:
        hosts: machine ``x`` is ``hosts[x]``. grouping: :func:`robustctl.sdc.grouping.plan_grouping`.
        workload: see :class:`Workload`. settings: concurrency (hosts), per-group budget
        (``host_timeout_s``), rendezvous port base and interface (``allreduce``).
        round_deadline_s: the deadline of each round, seconds.
    """

    hosts: tuple[Host, ...]
    grouping: SdcGrouping
    workload: Workload
    settings: DiagnoseSettings
    round_deadline_s: float


@dataclass(frozen=True)
class RoundResult:
    """One round: every group's run, in index order, and the round's wall seconds."""

    phase: int
    groups: tuple[GroupRun, ...]
    elapsed_s: float


def groups_at_once(spec: ReplaySpec) -> int:
    """Groups replayed at once: ``concurrency // m`` (hosts contacted at once), at least one."""
    return max(1, spec.settings.concurrency // spec.grouping.m)


def replay_tp(spec: ReplaySpec) -> int:
    """The built-in replay's TP width: the job's ``tp · cp · ep``."""
    lay = spec.grouping.layout
    return lay.tp * lay.cp * lay.ep


def probe_args(
    spec: ReplaySpec, *, node_rank: int, master: str, port: int, bind: str, timeout: str
) -> list[str]:
    """The ``replay`` probe's arguments for machine ``node_rank`` of a group."""
    g = spec.grouping
    return [
        *("--tp", str(replay_tp(spec)), "--pp", str(g.layout.pp), "--dp", str(g.replay_dp)),
        *("--nnodes", str(g.m), "--node-rank", str(node_rank)),
        *("--nproc-per-node", str(g.ranks_per_machine)),
        *("--master-addr", master, "--master-port", str(port), "--bind-addr", bind),
        *("--steps", str(spec.workload.steps), "--seed", str(spec.workload.seed)),
        *("--timeout", timeout),
    ]


def command_argv(spec: ReplaySpec, host: Host, *, node_rank: int, master: str, port: int) -> list[str]:
    """What runs the user's ``--command`` on ``host`` (module docstring)."""
    g = spec.grouping
    values = {
        "master_addr": master,
        "master_port": str(port),
        "nnodes": str(g.m),
        "node_rank": str(node_rank),
        "nproc_per_node": str(g.ranks_per_machine),
        "tp": str(g.layout.tp),
        "pp": str(g.layout.pp),
        "dp": str(g.replay_dp),
        "steps": str(spec.workload.steps),
    }
    env = [
        f"MASTER_ADDR={master}",
        f"MASTER_PORT={port}",
        f"NNODES={g.m}",
        f"NODE_RANK={node_rank}",
        f"NPROC_PER_NODE={g.ranks_per_machine}",
        f"WORLD_SIZE={g.m * g.ranks_per_machine}",
        *(f"ROBUSTCTL_REPLAY_{k.upper()}={values[k]}" for k in ("tp", "pp", "dp", "steps")),
    ]
    args = []
    for a in spec.workload.command or ():
        for key, value in values.items():
            a = a.replace("{" + key + "}", value)
        args.append(a)
    return [*host.python.wrapper, "env", *env, *args]


def parse_result_line(stdout: bytes) -> tuple[tuple[str, ...], str] | str | None:
    """The ``(loss as float.hex strings, digest)`` of the last result line in ``stdout``.

    Args:
        stdout: the replay's standard output, as sent (decoded as UTF-8, bad bytes replaced).

    Returns:
        the pair; a string saying why the line is malformed; None when no line carries the marker.
    """
    text = stdout.decode("utf-8", "replace")
    for line in reversed(text.splitlines()):
        line = line.strip()
        if not line.startswith("{") or RESULT_MARKER not in line:
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            return f"result line is not JSON ({exc})"
        if not isinstance(obj, dict) or obj.get(RESULT_MARKER) != 1:
            return f"result line does not say {RESULT_MARKER}: 1"
        loss, digest = obj.get("loss"), obj.get("digest")
        if not isinstance(loss, list) or not 1 <= len(loss) <= MAX_LOSS_STEPS:
            return f"result line's loss is not a list of 1 to {MAX_LOSS_STEPS} values"
        if not isinstance(digest, str) or not 1 <= len(digest) <= MAX_DIGEST_CHARS:
            return f"result line's digest is not a string of 1 to {MAX_DIGEST_CHARS} characters"
        out: list[str] = []
        for v in loss:
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out.append(float(v).hex())
            elif isinstance(v, str) and len(v) <= 64 and _float_or_none(v) is not None:
                out.append(v if v in ("nan", "inf", "-inf") else float.fromhex(v).hex())
            else:
                return f"result line's loss holds {str(v)[:40]!r}, not a number or float.hex string"
        return tuple(out), digest
    return None


def _float_or_none(text: str) -> float | None:
    try:
        return float.fromhex(text)
    except (ValueError, OverflowError):
        return None


@dataclass(frozen=True)
class _Node:
    loss: tuple[str, ...] | None  # None: this machine printed no result line (others may have)
    digest: str | None
    consistent: bool


def run_node(
    spec: ReplaySpec, pool: TransportPool, host: Host, node_rank: int, master: str, port: int, bind: str,
    deadline: float,
) -> _Node:  # fmt: skip
    """One machine's part of a group replay. Raises ProbeError (one line) when it has no result."""
    if spec.workload.command is None:
        args = probe_args(
            spec, node_rank=node_rank, master=master, port=port, bind=bind, timeout=budget_s(deadline)
        )
        doc = run_probe(pool.for_host(host), host, "replay", args, deadline=deadline)
        data = doc.data
        if data.get("available") is False:
            raise ProbeError(host.name, f"replay unavailable: {data.get('reason')}")
        if data.get("error"):
            raise ProbeError(host.name, str(data["error"]))
        loss, digest = data.get("loss"), data.get("digest")
        if not isinstance(loss, list) or not isinstance(digest, str):
            raise ProbeError(host.name, "replay printed no loss or digest")
        return _Node(tuple(str(v) for v in loss), digest, data.get("consistent") is True)
    argv = command_argv(spec, host, node_rank=node_rank, master=master, port=port)
    res = pool.for_host(host).run(host, argv, timeout_s=max(0.5, deadline - time.monotonic()))
    if res.exit_status != 0:
        raise ProbeError(
            host.name, f"command exited with status {res.exit_status}: {res.stderr_tail() or 'no output'}"
        )
    parsed = parse_result_line(res.stdout)
    if parsed is None:
        return _Node(None, None, True)
    if isinstance(parsed, str):
        raise ProbeError(host.name, parsed)
    return _Node(parsed[0], parsed[1], True)


def run_group(
    spec: ReplaySpec, pool: TransportPool, group: ReplayGroup, addresses: dict[str, str],
    missing: dict[str, str], deadline: float,
) -> GroupRun:  # fmt: skip
    """Replay ``group`` on its machines at once; its :class:`GroupRun` (never raises)."""
    t0 = time.monotonic()
    hosts = [spec.hosts[x] for x in group.machines]
    gone = [h.name for h in hosts if h.name not in addresses]
    if gone:
        why = missing.get(gone[0], "no rendezvous address")
        return GroupRun(group.phase, group.name, group.machines, ran=False, error=f"{gone[0]}: {why}")
    master = addresses[hosts[0].name]
    port = spec.settings.allreduce.master_port + 1 + group.index
    rank_of = {h.name: i for i, h in enumerate(hosts)}

    def node(host: Host, host_deadline: float) -> _Node:
        return run_node(
            spec, pool, host, rank_of[host.name], master, port, addresses[host.name], host_deadline
        )

    res = fan_out(hosts, node, concurrency=len(hosts), host_timeout_s=max(0.5, deadline - time.monotonic()),
                  deadline=deadline, retries=0)  # fmt: skip
    elapsed = round(time.monotonic() - t0, 3)
    bad = [o for o in res.outcomes if not o.ok or o.value is None]
    # The machine that could not be reached is the cause; its peers then fail waiting for it.
    bad.sort(key=lambda o: o.outcome.value != "unreachable")
    if bad:
        o = bad[0]
        what = o.error or o.outcome.value
        if o.outcome.value != "failed":
            what = f"{o.outcome.value}: {what}"
        more = f" (and {len(bad) - 1} more machine(s))" if len(bad) > 1 else ""
        return GroupRun(group.phase, group.name, group.machines, ran=False, error=f"{o.host.name}: {what}{more}",
                        elapsed_s=elapsed)  # fmt: skip
    nodes = [o.value for o in res.outcomes if o.value is not None and o.value.loss is not None]
    if not nodes:
        return GroupRun(group.phase, group.name, group.machines, ran=False, elapsed_s=elapsed,
                        error=f"{hosts[0].name}: no machine of the group printed a robustctl_replay result line")  # fmt: skip
    first = nodes[0]
    same = all(n.loss == first.loss and n.digest == first.digest and n.consistent for n in nodes)
    return GroupRun(group.phase, group.name, group.machines, ran=True, loss=first.loss or (), digest=first.digest,
                    consistent=same, elapsed_s=elapsed)  # fmt: skip


def run_round(
    spec: ReplaySpec,
    pool: TransportPool,
    phase: int,
    *,
    addresses: dict[str, str],
    missing: dict[str, str],
    on_group: Callable[[GroupRun], None] | None = None,
) -> RoundResult:
    """Replay every group of ``phase`` (1 or 2): groups in parallel, each with its budget, the round
    with its deadline. Groups unfinished at the deadline are ``ran = False`` ("timed out")."""
    t0 = time.monotonic()
    groups = spec.grouping.phases[phase - 1].groups
    deadline = t0 + spec.round_deadline_s

    def work(group: ReplayGroup, group_deadline: float) -> GroupRun:
        run = run_group(spec, pool, group, addresses, missing, group_deadline)
        if on_group is not None:  # here, not in on_done: done before the round returns
            on_group(run)
        return run

    outcomes = fan_out_units(
        list(groups),
        work,
        concurrency=groups_at_once(spec),
        unit_timeout_s=spec.settings.host_timeout_s,
        deadline=deadline,
        retries=0,
        on_deadline=pool.shutdown,
    )
    runs: list[GroupRun] = []
    for o in outcomes:
        if o.ok and o.value is not None:
            runs.append(o.value)
        else:
            g = o.unit
            host = spec.hosts[g.machines[0]].name
            runs.append(GroupRun(phase, g.name, g.machines, ran=False,
                                 error=f"{host}: {o.outcome.value}: {o.error}"))  # fmt: skip
            if on_group is not None:
                on_group(runs[-1])
    return RoundResult(phase, tuple(runs), round(time.monotonic() - t0, 3))


def resolve(spec: ReplaySpec, pool: TransportPool) -> tuple[dict[str, str], dict[str, str]]:
    """Every machine's rendezvous address (``{name: address}``, ``{name: why none}``), for the machines
    that answer a short command now.

    A machine that cannot be reached is found here, before any group starts: its groups then fail to
    run at once, instead of their other machines waiting in the rendezvous for it until the group's
    budget runs out (a stopped sshd cost two full rounds of budget). Each machine is asked once, within
    :data:`~robustctl.transport.addresses.ADDRESS_TIMEOUT_S`, with the inventory's retries.
    """
    deadline = time.monotonic() + spec.round_deadline_s
    found, missing = lookup_addresses(pool, spec.hosts, spec.settings, deadline)
    ask = [h for h in spec.hosts if h.name in found]

    def reach(host: Host, host_deadline: float) -> None:
        timeout = max(0.5, min(ADDRESS_TIMEOUT_S, host_deadline - time.monotonic()))
        res = pool.for_host(host).run(host, ["true"], timeout_s=timeout)
        if res.exit_status != 0:
            raise ProbeError(host.name, res.stderr_tail() or f"exit status {res.exit_status}")

    res = fan_out(
        ask,
        reach,
        concurrency=spec.settings.concurrency,
        host_timeout_s=min(ADDRESS_TIMEOUT_S, spec.settings.host_timeout_s),
        deadline=deadline,
        retries=spec.settings.retries,
        backoff_s=spec.settings.retry_backoff_s,
    )
    for o in res.outcomes:
        if not o.ok:
            found.pop(o.host.name, None)
            missing[o.host.name] = f"{o.outcome.value}: {o.error or o.outcome.value}"
    return found, missing


def rounds_needed(machines: int) -> dict[str, int]:
    """Rounds of dual-phase replay (2) against bisection's ``⌈log2 M⌉`` for ``machines`` machines."""
    return {"dual_phase": 2, "bisection": max(1, math.ceil(math.log2(machines))) if machines > 1 else 0}
