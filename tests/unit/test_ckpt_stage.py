"""Shard staging for a restart with checkpoint directories local to each host (robustctl.ckpt.stage).

The plan is pure (:func:`plan_staging` over a judged :class:`CheckpointState`); the copy runs the real
``shard`` probe on local-transport hosts, chunk by chunk, and is property-tested: whatever the file
size and chunk size, the copy is byte for byte the source, and a failed copy leaves no file behind.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robustctl.ckpt.stage import ShardMove, StagingError, plan_staging, stage_shards
from robustctl.ckpt.state import HostRead, ShardCopy, evaluate
from robustctl.config import ParallelLayout
from robustctl.inventory import load_inventory
from robustctl.inventory.topology import Topology
from robustctl.transport.pool import TransportPool


def state_of(holders: dict[str, Sequence[int]], hosts: Sequence[str], world: int, *, shared: bool = False,
             needed: Sequence[int] | None = None):  # fmt: skip
    reads = [
        HostRead(h, True, iterations=(30,),
                 copies=tuple((30, ShardCopy(h, r, f"rank_{r:05d}.pt", 100 + r, True)) for r in ranks))
        for h, ranks in holders.items()
    ]  # fmt: skip
    need = list(range(world)) if needed is None else list(needed)
    return evaluate(reads, job="j", dir="/ck/{host}", shared=shared, shards="rank", world_size=world,
                    needed=need, hosts=hosts)  # fmt: skip


def test_a_standby_gets_its_ranks_shards_from_the_peers_that_hold_them() -> None:
    # n1 (ranks 0-1) replaced by s1; n2 holds 2-3 and a backup of 0; n3 holds 4-5 and a backup of 1
    state = state_of({"n2": [2, 3, 0], "n3": [4, 5, 1], "s1": []}, ["s1", "n2", "n3"], 6)
    moves = plan_staging(state, 30, ["s1", "n2", "n3"], 2, None)
    assert [(m.rank, m.source, m.dest, m.name, m.size) for m in moves] == [
        (0, "n2", "s1", "rank_00000.pt", 100),
        (1, "n3", "s1", "rank_00001.pt", 101),
    ]
    assert moves[0].line() == "rank 0's shard (rank_00000.pt, 0.0 MB) n2 → s1"


def test_nothing_to_copy_when_every_host_holds_its_own_or_the_directory_is_shared() -> None:
    state = state_of({"n1": [0, 1], "n2": [2, 3]}, ["n1", "n2"], 4)
    assert plan_staging(state, 30, ["n1", "n2"], 2, None) == ()
    shared = state_of({"n1": [0, 1, 2, 3]}, ["n1", "n2"], 4, shared=True)
    assert plan_staging(shared, 30, ["n1", "n2"], 2, None) == ()


def test_copies_of_one_shard_to_many_hosts_are_spread_over_its_holders() -> None:
    """Megatron's mp_rank naming (tp=2, dp=4, one rank per host): each (tp) shard is loaded by the
    four data-parallel replicas; the two hosts with the dp-0 ranks hold them, the others load them."""
    layout = ParallelLayout(tp=2, dp=4)
    topo = Topology(layout)
    hosts = [f"h{i}" for i in range(8)]
    state = state_of({"h0": [0], "h1": [1], "h2": [0], "h3": [1]}, hosts, 8, needed=[0, 1])
    moves = plan_staging(state, 30, hosts, 1, topo)
    assert sorted((m.dest, m.rank) for m in moves) == [("h4", 0), ("h5", 1), ("h6", 0), ("h7", 1)]
    assert {m.source for m in moves if m.rank == 0} == {"h0", "h2"}  # round robin over the holders


def test_a_shard_without_a_readable_copy_on_a_job_host_is_refused() -> None:
    state = state_of({"n2": [2, 3], "gone": [0, 1]}, ["s1", "n2"], 4)
    with pytest.raises(StagingError, match=r"no readable copy of rank 0's shard on a job host for s1"):
        plan_staging(state, 30, ["s1", "n2"], 2, None)
    with pytest.raises(StagingError, match="iteration 40 was not found"):
        plan_staging(state, 40, ["s1", "n2"], 2, None)


# ---- the copy, through the shard probe ------------------------------------------------------------


def inventory(tmp: Path):
    data = {
        "hosts": [{"name": "a", "transport": "local"}, {"name": "b", "transport": "local"}],
        "python": {"path": sys.executable},
        "jobs": {"j": {"hosts": "a,b", "layout": {"dp": 2}, "ckpt": {"dir": str(tmp / "ck" / "{host}")}}},
    }
    (tmp / "inv.yaml").write_text(yaml.safe_dump(data))
    return load_inventory(tmp / "inv.yaml", environ={})


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(min_size=1, max_size=5000), chunk=st.integers(min_value=1, max_value=2048))
def test_a_copy_is_the_source_byte_for_byte_whatever_the_chunking(
    tmp_path: Path, data: bytes, chunk: int
) -> None:
    inv = inventory(tmp_path)
    src = tmp_path / "ck" / "a" / "iter_0000030" / "rank_00000.pt"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_bytes(data)
    dst = tmp_path / "ck" / "b" / "iter_0000030" / "rank_00000.pt"
    dst.unlink(missing_ok=True)
    (tmp_path / "ck" / "b" / "latest_checkpointed_iteration.txt").unlink(missing_ok=True)
    pool = TransportPool()
    try:
        move = ShardMove(30, 0, "rank_00000.pt", len(data), "a", "b")
        report = stage_shards([move], inv.job("j").ckpt, inv.by_name, pool, chunk_bytes=chunk)
    finally:
        pool.close()
    assert dst.read_bytes() == data
    assert report.bytes == len(data) and report.trackers == ("b",)
    assert (tmp_path / "ck" / "b" / "latest_checkpointed_iteration.txt").read_text() == "30"
    assert [p.name for p in dst.parent.iterdir()] == ["rank_00000.pt"]


def test_a_source_that_is_not_a_regular_file_fails_and_leaves_nothing(tmp_path: Path) -> None:
    import os

    inv = inventory(tmp_path)
    src = tmp_path / "ck" / "a" / "iter_0000030" / "rank_00000.pt"
    src.parent.mkdir(parents=True)
    os.mkfifo(src)  # a FIFO under a shard's name is refused, never opened for reading
    (tmp_path / "ck" / "b" / "iter_0000030").mkdir(parents=True)
    (tmp_path / "ck" / "b" / "latest_checkpointed_iteration.txt").write_text("20")
    pool = TransportPool()
    try:
        with pytest.raises(StagingError, match=r"^a: .*not a regular file"):
            stage_shards(
                [ShardMove(30, 0, "rank_00000.pt", 10, "a", "b")], inv.job("j").ckpt, inv.by_name, pool
            )
    finally:
        pool.close()
    assert list((tmp_path / "ck" / "b" / "iter_0000030").iterdir()) == []
    assert (tmp_path / "ck" / "b" / "latest_checkpointed_iteration.txt").read_text() == "20"  # kept


def test_a_source_that_shrinks_during_the_copy_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size is checked at commit: a copy of another length than the source said is not renamed in."""
    inv = inventory(tmp_path)
    src = tmp_path / "ck" / "a" / "iter_0000030" / "rank_00000.pt"
    src.parent.mkdir(parents=True)
    src.write_bytes(b"x" * 3000)
    import robustctl.probes as probes

    real = probes.run_probe
    calls = {"n": 0}

    def shrinking(*a, **kw):  # after the first chunk, the source is cut short (a save in progress)
        calls["n"] += 1
        if calls["n"] == 2:
            src.write_bytes(b"x" * 1500)
        return real(*a, **kw)

    monkeypatch.setattr(probes, "run_probe", shrinking)
    pool = TransportPool()
    try:
        with pytest.raises(StagingError, match="changed while it was copied"):
            stage_shards([ShardMove(30, 0, "rank_00000.pt", 3000, "a", "b")], inv.job("j").ckpt, inv.by_name,
                         pool, chunk_bytes=1000)  # fmt: skip
    finally:
        pool.close()
    assert not (tmp_path / "ck" / "b" / "iter_0000030" / "rank_00000.pt").exists()
    assert list((tmp_path / "ck" / "b" / "iter_0000030").iterdir()) == []


# ---- containment: nothing outside the checkpoint directory (issue 21, item 8) ---------------------


def _stage(tmp: Path, move: ShardMove) -> None:
    inv = inventory(tmp)
    pool = TransportPool()
    try:
        stage_shards([move], inv.job("j").ckpt, inv.by_name, pool)
    finally:
        pool.close()


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("target", ["outside", "inside"])
def test_a_source_iteration_directory_that_is_a_symlink_is_refused(tmp_path: Path, target: str) -> None:
    """A symlinked shard file was refused and a symlinked iteration directory followed: now every
    level is opened without following a link, wherever it points (into the root or out of it)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "rank_00000.pt").write_bytes(b"secret")
    real = tmp_path / "ck" / "a" / "iter_0000020"
    real.mkdir(parents=True)
    (real / "rank_00000.pt").write_bytes(b"older")
    (tmp_path / "ck" / "a" / "iter_0000030").symlink_to(
        outside if target == "outside" else Path("iter_0000020")
    )
    with pytest.raises(StagingError, match=r"^a: .*/ck/a/iter_0000030: a symbolic link, not followed"):
        _stage(tmp_path, ShardMove(30, 0, "rank_00000.pt", 6, "a", "b"))
    assert not (tmp_path / "ck" / "b").exists()  # nothing was written for the destination


def test_a_source_mp_rank_directory_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "model_optim_rng.pt").write_bytes(b"secret")
    it = tmp_path / "ck" / "a" / "iter_0000030"
    it.mkdir(parents=True)
    (it / "mp_rank_00").symlink_to(outside)
    with pytest.raises(StagingError, match=r"^a: .*/iter_0000030/mp_rank_00: a symbolic link, not followed"):
        _stage(tmp_path, ShardMove(30, 0, "mp_rank_00/model_optim_rng.pt", 6, "a", "b"))


def test_a_destination_iteration_directory_that_is_a_symlink_is_not_written_into(tmp_path: Path) -> None:
    src = tmp_path / "ck" / "a" / "iter_0000030" / "rank_00000.pt"
    src.parent.mkdir(parents=True)
    src.write_bytes(b"shard")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_bytes(b"kept")
    (tmp_path / "ck" / "b").mkdir()
    (tmp_path / "ck" / "b" / "iter_0000030").symlink_to(outside)
    with pytest.raises(StagingError, match=r"^b: .*/ck/b/iter_0000030: a symbolic link, not followed"):
        _stage(tmp_path, ShardMove(30, 0, "rank_00000.pt", 5, "a", "b"))
    assert _tree(outside) == {"keep": b"kept"}  # no temporary file, no shard, nothing removed
    assert not (tmp_path / "ck" / "b" / "latest_checkpointed_iteration.txt").exists()


@pytest.mark.parametrize(
    "name", ["../../outside/rank_00000.pt", "/etc/hostname", "a/../b.pt", "a/b/c.pt", ".hidden"]
)
def test_a_shard_name_that_is_no_plain_path_is_refused_before_any_copy(tmp_path: Path, name: str) -> None:
    with pytest.raises(StagingError, match="is not a plain path in an iteration directory"):
        _stage(tmp_path, ShardMove(30, 0, name, 5, "a", "b"))
    assert not (tmp_path / "ck").exists()


def test_the_scan_refuses_symlinks_at_every_level(tmp_path: Path) -> None:
    """The ckpt probe reports what staging would refuse: a linked iteration, mp_rank directory or
    shard is not readable, with the reason; the tracker is not read through a link."""
    import contextlib
    import io
    import json

    from robustctl.probes import load_probe

    outside = tmp_path / "outside"
    (outside / "mp_rank_01").mkdir(parents=True)
    (outside / "mp_rank_01" / "model_optim_rng.pt").write_bytes(b"secret")
    (outside / "tracker").write_bytes(b"77")
    root = tmp_path / "ck"
    (root / "iter_0000030" / "mp_rank_00").mkdir(parents=True)
    (root / "iter_0000030" / "mp_rank_00" / "model_optim_rng.pt").write_bytes(b"shard")
    (root / "iter_0000030" / "mp_rank_01").symlink_to(outside / "mp_rank_01")
    (root / "iter_0000030" / "mp_rank_02").mkdir()
    (root / "iter_0000030" / "mp_rank_02" / "model_optim_rng.pt").symlink_to(
        "../mp_rank_00/model_optim_rng.pt"
    )
    (root / "iter_0000040").symlink_to("iter_0000030")
    (root / "latest_checkpointed_iteration.txt").symlink_to(outside / "tracker")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        load_probe("ckpt").main(["--dir", str(root), "--shards", "mp_rank"])
    data = json.loads(out.getvalue())["data"]
    assert data["tracker"]["raw"] is None and "symbolic link" in data["tracker"]["error"]
    it40, it30 = data["iterations"]
    assert it40["shards"] == [] and it40["error"].startswith("iter_0000040: a symbolic link, not followed")
    got = {sh["name"]: (sh["readable"], sh["error"]) for sh in it30["shards"]}
    assert got["mp_rank_00/model_optim_rng.pt"] == (True, None)
    assert got["mp_rank_01/model_optim_rng.pt"][1].startswith("mp_rank_01: a symbolic link, not followed")
    assert got["mp_rank_02/model_optim_rng.pt"][1].startswith("a symbolic link, not followed")
    assert not got["mp_rank_01/model_optim_rng.pt"][0] and not got["mp_rank_02/model_optim_rng.pt"][0]
