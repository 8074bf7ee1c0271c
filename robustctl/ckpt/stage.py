"""Put each rank's checkpoint shard on the host that loads it, before a restart launches.

With checkpoint directories local to each host (``ckpt.shared: false``), a warm standby that took an
evicted machine's place holds none of the shards its ranks load; the iteration can still be complete
because every shard has a readable copy on a host still in the job (the backup peer of ByteRobust's
placement rule, arXiv 2509.16293, §6.3, Fig. 9; :func:`robustctl.ckpt.state.check_backups`). Staging
copies each such shard from a host that holds it to the host that loads it:

* :func:`plan_staging` (pure): which shards each host of the job needs for an iteration (``rank``
  naming: its own ranks' shards; Megatron's ``mp_rank`` naming: the shard of each of its ranks'
  (tp, pp) coordinates, which every data-parallel replica loads) and where to copy each missing one from;
* :func:`stage_shards`: the copies, through the control side in bounded chunks (the ``shard`` probe:
  read a chunk on the source, write it on the destination; the hosts need no SSH trust between
  them), each into a temporary file renamed into place once its size checks out, so a loader never
  sees a partial shard; a copy that fails removes its temporary file. The tracker file is written on
  a host that received shards and has none.

Containment: each probe run is given the host's checkpoint directory (``--dir``) with the path, and
touches nothing outside it: every level below it (the iteration directory, an ``mp_rank``
directory, the shard) is opened from its parent's descriptor without following a symbolic link, so
an iteration directory that is a link to elsewhere, on the source or the destination, is refused
(a :class:`StagingError` with the probe's reason), never read from or written into. A shard name
(from a host's ``ckpt`` probe) that is not a plain relative path (:data:`SHARD_NAME`) is refused
before any probe runs.

A shared directory needs no staging (every host reads the same files).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from robustctl.ckpt.state import CheckpointState
from robustctl.errors import RobustctlError
from robustctl.exit_codes import ExitCode
from robustctl.inventory.hostrange import compact_ranges

if TYPE_CHECKING:
    from robustctl.config import CheckpointSpec
    from robustctl.inventory import Host
    from robustctl.inventory.topology import Topology
    from robustctl.transport.pool import TransportPool

__all__ = [
    "CHUNK_BYTES",
    "NOTHING_TO_STAGE",
    "SHARD_NAME",
    "ShardMove",
    "StagingError",
    "plan_staging",
    "stage_shards",
]

CHUNK_BYTES = 8 << 20
"""Bytes moved per read and per write (the ``shard`` probe's ``MAX_CHUNK``): 11 MiB of base64 per
command, under the transport's 16 MiB output bound."""
COPY_TIMEOUT_S = 120.0
"""Budget of one chunk's read or write on one host, seconds."""
NOTHING_TO_STAGE = "every host holds the shards it loads"
"""What staging says when there is nothing to copy."""
SHARD_NAME = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}/)?[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
"""A shard's path in its iteration directory: one or two plain components (``rank_00005.pt``,
``mp_rank_00_001/model_optim_rng.pt``), never ``..``, an absolute path or a hidden name. Names come
from what a host's ``ckpt`` probe reported; the probe only reports such names, the control side
checks anyway."""


class StagingError(RobustctlError):
    """A shard could not be put on the host that loads it (no readable copy on a job host, or the
    copy failed). Exit 2: the restart must not launch ranks that would find no shard."""

    exit_code = ExitCode.CRITICAL


@dataclass(frozen=True)
class ShardMove:
    """One shard to copy.

    Attributes:
        iteration. rank: whose shard (``mp_rank``: the rank at its (tp, pp) with every other
        coordinate 0). name: its path in the iteration directory. size: bytes (None: not statted).
        source: a job host with a readable copy. dest: the host that loads it.
    """

    iteration: int
    rank: int
    name: str
    size: int | None
    source: str
    dest: str

    def line(self) -> str:
        """``rank 5's shard (rank_00005.pt, 1.2 MB) node03 → node09``."""
        size = f", {self.size / 1e6:.1f} MB" if self.size is not None else ""
        return f"rank {self.rank}'s shard ({self.name}{size}) {self.source} → {self.dest}"


def plan_staging(
    state: CheckpointState,
    iteration: int,
    hosts: Sequence[str],
    ranks_per_host: int,
    topo: Topology | None,
) -> tuple[ShardMove, ...]:
    """The copies that put every shard of ``iteration`` on each host that loads it.

    Args:
        state: the job's checkpoints as read on ``hosts`` (:func:`robustctl.ckpt.read_checkpoints`).
        iteration: the checkpoint iteration the restart loads.
        hosts: the job's current hosts in rank order (machine k runs ranks k·G … k·G+G-1).
        ranks_per_host: G.
        topo: the job's topology for ``mp_rank`` naming (None: ``rank`` naming).

    Returns:
        One move per (shard, host that loads it and lacks it), sources spread over the holders
        (round robin, so one backup peer does not serve every copy). Empty for a shared directory.

    Raises:
        StagingError: the iteration was not read, or a shard some host loads has no readable copy
            on a job host (the iteration is not complete).
    """
    if state.shared:
        return ()
    it = state.iteration(iteration)
    if it is None:
        raise StagingError(f"iteration {iteration} was not found on the job's hosts")
    where = dict(it.locations)
    files = {r: (name, size) for r, name, size in it.files}
    moves: list[ShardMove] = []
    served: dict[int, int] = {}
    for k, host in enumerate(hosts):
        loads = range(k * ranks_per_host, (k + 1) * ranks_per_host)
        needs = sorted({_shard_rank(r, topo) for r in loads})
        for r in needs:
            holders = where.get(r, ())
            if host in holders:
                continue
            if not holders or r not in files:
                raise StagingError(
                    f"iteration {iteration}: no readable copy of rank {r}'s shard on a job host for {host} "
                    f"(it {it.lacks()})"
                )
            pick = served.get(r, 0)
            served[r] = pick + 1
            name, size = files[r]
            moves.append(ShardMove(iteration, r, name, size, holders[pick % len(holders)], host))
    return tuple(moves)


def _shard_rank(rank: int, topo: Topology | None) -> int:
    if topo is None:
        return rank
    c = topo.coords(rank)
    return topo.rank_of({"tp": c["tp"], "pp": c["pp"]})


@dataclass(frozen=True)
class StagingReport:
    """What staging did: ``moved`` the copies made, ``bytes`` copied, ``trackers`` hosts given a tracker."""

    moved: tuple[ShardMove, ...]
    bytes: int
    trackers: tuple[str, ...]
    elapsed_s: float

    def line(self) -> str:
        """One line for the restart step's detail."""
        if not self.moved:
            return NOTHING_TO_STAGE
        dests = sorted({m.dest for m in self.moved})
        ranks = compact_ranges(sorted({m.rank for m in self.moved}))
        tr = f"; tracker written on {', '.join(self.trackers)}" if self.trackers else ""
        return (
            f"copied {len(self.moved)} shard(s) of ranks {ranks} to {', '.join(dests)} "
            f"({self.bytes / 1e6:.1f} MB in {self.elapsed_s:.1f} s){tr}"
        )


def stage_shards(
    moves: Sequence[ShardMove],
    spec: CheckpointSpec,
    hosts: Callable[[str], Host],
    pool: TransportPool,
    *,
    chunk_bytes: int = CHUNK_BYTES,
) -> StagingReport:
    """Copy every shard of ``moves`` (one at a time, chunk by chunk) and rename it into place.

    It is one function because a copy's chunk reads and writes, its commit and the removal of its
    temporary file on failure share one ``try`` and the copy's state (offset, first size, temporary name).

    Args:
        moves: the copies to make (:func:`plan_staging`), in order.
        spec: the job's ``ckpt:`` section (``dir``, with ``{host}``, and the tracker's name).
        hosts: inventory host by name.
        pool: transports, one per host (closed by the caller).
        chunk_bytes: bytes per chunk (at most :data:`CHUNK_BYTES`).

    Returns:
        The copies made, the bytes copied, the hosts given a tracker file and the elapsed seconds.

    Raises:
        StagingError: a read or a write failed, or the copy's size differs from the source's; the
            failed copy's temporary file is removed, copies already renamed into place stay (each is
            a whole shard).
        HostUnreachable: from the transport.
        CommandTimeout: from the transport.
        ProbeError: from the transport.
    """
    from robustctl.probes import run_probe

    chunk_bytes = max(1, min(chunk_bytes, CHUNK_BYTES))
    t0 = time.monotonic()
    total = 0
    trackers: list[str] = []
    tmp_tag = f".robustctl-stage.{int(time.time())}"

    def probe(host: Host, args: list[str], *extra: str) -> dict[str, object]:
        doc = run_probe(
            pool.for_host(host), host, "shard", args, deadline=time.monotonic() + COPY_TIMEOUT_S, extra=extra
        )
        data = dict(doc.data)
        if data.get("error"):
            raise StagingError(f"{host.name}: {data['error']}")
        return data

    def root(host: str) -> str:
        return spec.dir_on(host).rstrip("/") or "/"

    def path(host: str, m: ShardMove) -> str:
        return f"{root(host).rstrip('/')}/iter_{m.iteration:07d}/{m.name}"

    for m in moves:
        if not SHARD_NAME.match(m.name):
            raise StagingError(
                f"{m.source}: shard name {m.name[:80]!r} is not a plain path in an iteration directory"
            )
    for m in moves:
        src, dst = hosts(m.source), hosts(m.dest)
        source, dest = path(m.source, m), path(m.dest, m)
        tmp = dest + tmp_tag
        offset = 0
        first: int | None = None
        try:
            while True:
                got = probe(
                    src,
                    ["--op", "read", f"--dir={root(m.source)}", f"--path={source}", f"--offset={offset}",
                     f"--length={chunk_bytes}"],
                )  # fmt: skip
                data = str(got.get("data") or "")
                length = int(got.get("length") or 0)  # type: ignore[call-overload]
                size = int(got.get("size") or 0)  # type: ignore[call-overload]
                first = size if first is None else first
                if size != first:  # a save in progress, or a new one: the chunks are of two files
                    raise StagingError(
                        f"{m.source}: {source} changed while it was copied ({first} then {size} bytes)"
                    )
                if length or offset == 0:
                    probe(
                        dst,
                        ["--op", "write", f"--dir={root(m.dest)}", f"--path={tmp}", f"--offset={offset}"],
                        data,
                    )
                offset += length
                if got.get("eof") is True or length == 0:
                    break
            if offset != size:
                raise StagingError(
                    f"{m.source}: {source} changed while it was copied ({offset} of {size} bytes)"
                )
            tracker = f"{root(m.dest).rstrip('/')}/{spec.tracker}"
            done = probe(
                dst,
                ["--op", "commit", f"--dir={root(m.dest)}", f"--path={tmp}", f"--dest={dest}",
                 f"--size={offset}", f"--tracker={tracker}", f"--iteration={m.iteration}"],
            )  # fmt: skip
        except BaseException:
            # the failure that got us here is what the caller needs to see: the cleanup's own is not
            with contextlib.suppress(Exception):
                run_probe(pool.for_host(dst), dst, "shard", ["--op", "abort", f"--dir={root(m.dest)}", f"--path={tmp}"],
                          deadline=time.monotonic() + COPY_TIMEOUT_S)  # fmt: skip
            raise
        total += offset
        if done.get("tracker_written") is True:
            trackers.append(m.dest)
    return StagingReport(tuple(moves), total, tuple(trackers), round(time.monotonic() - t0, 3))
