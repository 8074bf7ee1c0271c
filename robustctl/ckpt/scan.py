"""Read a job's checkpoint directory on its hosts: the ``ckpt`` probe, fanned out, parsed.

:func:`scan_checkpoints` runs the node-side probe ``diagnostics/ckpt.py`` on the job's hosts over the
transport (bounded concurrency, per-host and global deadlines, every host's outcome kept). A
per-host directory (``shared: false``) is read on every host; a shared one on the first host that
answers (at most :data:`SHARED_TRIES` tried, in rank order). :func:`parse_read` turns one probe
document into a :class:`~robustctl.ckpt.state.HostRead`: whatever the host sent, it never raises,
and it keeps at most ``max_iterations`` iterations and ``max_entries`` shards.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from robustctl.ckpt.state import CheckpointState, HostRead, ShardCopy, evaluate
from robustctl.errors import ConfigError
from robustctl.inventory.topology import Topology
from robustctl.probes import command_deadline, run_probe
from robustctl.transport.fanout import fan_out

if TYPE_CHECKING:
    from robustctl.config import CheckpointSpec, DiagnoseSettings, ParallelLayout
    from robustctl.inventory import Host, Job
    from robustctl.transport.pool import TransportPool

__all__ = [
    "SHARED_TRIES",
    "CheckpointScan",
    "evaluate_scan",
    "needed_ranks",
    "parse_read",
    "require_spec",
    "scan_checkpoints",
]

SHARED_TRIES = 3
"""Hosts tried, one after the other, to read a shared checkpoint directory."""
MAX_TEXT = 200
"""Longest text (an error, a shard name) kept from a host."""


@dataclass(frozen=True)
class CheckpointScan:
    """What the probe read on the hosts.

    Attributes:
        job: the job's name. spec: its ``ckpt:`` section. layout: its parallel layout.
        reads: one per host asked (rank order). elapsed_s: wall seconds.
    """

    job: str
    spec: CheckpointSpec
    layout: ParallelLayout
    reads: tuple[HostRead, ...]
    elapsed_s: float = 0.0


def require_spec(job: Job, source: str) -> CheckpointSpec:
    """The job's ``ckpt:`` section.

    Args:
        job: the inventory job.
        source: the inventory file, for the error message.

    Returns:
        The section.

    Raises:
        ConfigError: the job has none (one line naming the inventory file and the job).
    """
    if job.ckpt is None:
        raise ConfigError(
            f"{source}: job {job.name!r} has no 'ckpt:' section: add ckpt: {{dir: /path/to/checkpoints}} "
            "to its entry under jobs:"
        )
    return job.ckpt


def needed_ranks(layout: ParallelLayout, shards: str) -> tuple[int, ...]:
    """The ranks whose shards make an iteration complete: every rank (``rank`` naming), or for
    Megatron's ``mp_rank`` naming the rank at each (tp, pp) with every other coordinate 0."""
    if shards == "rank":
        return tuple(range(layout.world_size))
    topo = Topology(layout)
    return tuple(sorted(topo.rank_of({"tp": t, "pp": p}) for t in range(layout.tp) for p in range(layout.pp)))


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _text(v: Any) -> str | None:
    return None if v is None else str(v)[:MAX_TEXT]


def parse_read(
    host: str,
    data: Mapping[str, Any],
    *,
    layout: ParallelLayout,
    shards: str,
    max_iterations: int,
    max_entries: int,
    problems: Sequence[str] = (),
) -> HostRead:
    """One host's ``ckpt`` probe ``data`` as a :class:`HostRead`; never raises on what a host sent.

    Shards whose name gives a rank outside the layout (``rank_00099.pt`` of an 8-rank job, an
    ``mp_rank`` beyond tp × pp) are not counted; a note says so.

    Args:
        host: the host's inventory name.
        data: the probe document's ``data`` (the directory, its tracker, iterations and shards).
        layout: the job's parallel layout (its world size, tp and pp place the shards' ranks).
        shards: the shard naming, ``rank`` or ``mp_rank``.
        max_iterations: most iterations kept (the job's ``ckpt.max_iterations``).
        max_entries: most shard copies kept (``ckpt.max_entries``); past it the read is partial.
        problems: what already makes the read partial (``errors`` of the document, a timeout); the
            read is then not ``ok`` but keeps what it has.

    Returns:
        The host's read: ok or not with the error, the tracker, the iterations and shard copies found.
    """
    errors = [str(p)[:MAX_TEXT] for p in problems]
    if data.get("exists") is not True:
        why = _text(data.get("error")) or "the probe reported no directory"
        return HostRead(host, False, "; ".join([why, *errors]))
    if data.get("error"):
        errors.insert(0, str(data["error"])[:MAX_TEXT])
    if data.get("truncated") is True:
        errors.append("listing cut short (ckpt.max_entries)")
    raw_tracker = data.get("tracker")
    tracker: Mapping[str, Any] = raw_tracker if isinstance(raw_tracker, Mapping) else {}
    topo = Topology(layout) if shards == "mp_rank" else None
    world = layout.world_size
    notes: list[str] = []
    iterations: list[int] = []
    copies: list[tuple[int, ShardCopy]] = []
    raw_iters = data.get("iterations")
    for it in raw_iters[:max_iterations] if isinstance(raw_iters, list) else ():
        if not isinstance(it, Mapping) or _int(it.get("iteration")) is None:
            continue
        number = int(it["iteration"])
        iterations.append(number)
        if it.get("error"):
            errors.append(f"iteration {number}: {_text(it.get('error'))}")
        raw_shards = it.get("shards")
        for sh in raw_shards if isinstance(raw_shards, list) else ():
            if len(copies) >= max_entries:
                errors.append("more shards than ckpt.max_entries")
                break
            if not isinstance(sh, Mapping):
                continue
            rank = _rank_of(sh, shards, world, topo)
            name = _text(sh.get("name")) or "?"
            if rank is None:
                notes.append(f"{host}: iteration {number}: {name} fits no rank of the layout (ignored)")
                continue
            copies.append(
                (
                    number,
                    ShardCopy(
                        host=host,
                        rank=rank,
                        name=name,
                        size=_int(sh.get("size")),
                        readable=sh.get("readable") is True,
                        error=_text(sh.get("error")),
                    ),
                )
            )
    return HostRead(
        host=host,
        ok=not errors,
        error="; ".join(dict.fromkeys(errors)) if errors else None,
        tracker=_int(tracker.get("iteration")),
        tracker_raw=_text(tracker.get("raw")),
        iterations=tuple(iterations),
        copies=tuple(copies),
        notes=tuple(notes[:20]),
    )


def _rank_of(sh: Mapping[str, Any], shards: str, world: int, topo: Topology | None) -> int | None:
    if shards == "rank":
        rank = _int(sh.get("rank"))
        return rank if rank is not None and rank < world else None
    tp, pp = _int(sh.get("tp")), _int(sh.get("pp"))
    if topo is None or tp is None or pp is None or tp >= topo.sizes["tp"] or pp >= topo.sizes["pp"]:
        return None
    return topo.rank_of({"tp": tp, "pp": pp})


def scan_checkpoints(
    job: Job,
    hosts: Sequence[Host],
    *,
    pool: TransportPool,
    settings: DiagnoseSettings | None = None,
    source: str = "inventory",
) -> CheckpointScan:
    """Run the ``ckpt`` probe on ``hosts`` (the job's current hosts, rank order) and parse every answer.

    A shared directory is read on the first host that answers (:data:`SHARED_TRIES` at most).

    Args:
        job: the inventory job (its ``ckpt:`` section and layout).
        hosts: the job's current hosts, rank order.
        pool: transports, one per host (closed by the caller).
        settings: fan-out knobs (concurrency, retries, global deadline ``deadline_s``); default:
            the built-in ``diagnose:`` defaults.
        source: the inventory file, for the error message.

    Returns:
        A :class:`CheckpointScan`; a host that could not be read is a :class:`HostRead` that is not ok.

    Raises:
        ConfigError: the job has no ``ckpt:`` section.
    """
    from robustctl.config import DiagnoseSettings

    spec = require_spec(job, source)
    s = settings or DiagnoseSettings()
    t0 = time.monotonic()
    deadline = t0 + s.deadline_s

    def work(host: Host, host_deadline: float) -> HostRead:
        host_deadline = command_deadline(host, host_deadline)
        budget = max(1.0, min(spec.timeout_s, host_deadline - time.monotonic() - 3.0))
        args = [
            f"--dir={spec.dir_on(host.name)}",
            f"--shards={spec.shards}",
            f"--tracker={spec.tracker}",
            "--max-iterations",
            str(spec.max_iterations),
            "--max-entries",
            str(spec.max_entries),
            "--timeout",
            f"{budget:.1f}",
        ]
        doc = run_probe(pool.for_host(host), host, "ckpt", args, deadline=host_deadline)
        return parse_read(
            host.name,
            doc.data,
            layout=job.layout,
            shards=spec.shards,
            max_iterations=spec.max_iterations,
            max_entries=spec.max_entries,
            problems=doc.errors,
        )

    def run(targets: Sequence[Host]) -> list[HostRead]:
        fan = fan_out(
            targets,
            work,
            concurrency=s.concurrency,
            host_timeout_s=spec.timeout_s + 30.0,
            deadline=deadline,
            retries=s.retries,
            backoff_s=s.retry_backoff_s,
            on_deadline=pool.shutdown,
        )
        out: list[HostRead] = []
        for o in fan.outcomes:
            if o.value is not None:
                out.append(o.value)
            else:
                what = o.outcome.value.replace("_", " ")
                out.append(HostRead(o.host.name, False, f"{what}: {o.error}" if o.error else what))
        return out

    if spec.shared:
        reads: list[HostRead] = []
        for host in list(hosts)[:SHARED_TRIES]:
            reads = [*reads, *run([host])]
            if reads[-1].ok:
                reads = [reads[-1]]  # the shared directory was read in full
                break
    else:
        reads = run(hosts)
    return CheckpointScan(job.name, spec, job.layout, tuple(reads), round(time.monotonic() - t0, 6))


def evaluate_scan(scan: CheckpointScan, hosts: Sequence[str]) -> CheckpointState:
    """Judge ``scan`` against the job's layout with ``hosts`` as the hosts still in the job."""
    return evaluate(
        scan.reads,
        job=scan.job,
        dir=scan.spec.dir,
        shared=scan.spec.shared,
        shards=scan.spec.shards,
        world_size=scan.layout.world_size,
        needed=needed_ranks(scan.layout, scan.spec.shards),
        hosts=hosts,
    )
