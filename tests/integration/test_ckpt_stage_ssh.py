"""Shard staging over real sshd hosts (loopback): a shard of several chunks copied from one host's
checkpoint directory to another's through robustctl, and a copy whose source is missing failing with
the host named and nothing left behind.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from robustctl.ckpt.stage import ShardMove, StagingError, stage_shards
from robustctl.inventory import load_inventory
from robustctl.transport.pool import TransportPool

from .conftest import require_testbed
from .testbed import Testbed


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    require_testbed()
    with Testbed(tmp_path_factory.mktemp("stage-bed"), 2) as tb:
        yield tb


def test_a_shard_of_several_chunks_crosses_two_sshd_hosts_whole(bed: Testbed, tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    names = bed.names
    job = {"hosts": ",".join(names), "layout": {"dp": 2}, "ckpt": {"dir": str(ck) + "/{host}"}}
    inv = load_inventory(bed.write_inventory(tmp_path / "inv.yaml", jobs={"j": job}), environ={})
    data = os.urandom(2_500_000)
    src = ck / names[0] / "iter_0000012" / "rank_00001.pt"
    src.parent.mkdir(parents=True)
    src.write_bytes(data)
    (ck / names[1]).mkdir(parents=True)
    move = ShardMove(12, 1, "rank_00001.pt", len(data), names[0], names[1])
    pool = TransportPool()
    try:
        report = stage_shards([move], inv.job("j").ckpt, inv.by_name, pool, chunk_bytes=1 << 20)
        dst = ck / names[1] / "iter_0000012" / "rank_00001.pt"
        assert dst.read_bytes() == data and report.bytes == len(data)
        assert (ck / names[1] / "latest_checkpointed_iteration.txt").read_text() == "12"
        assert "copied 1 shard(s) of ranks 1" in report.line()

        missing = ShardMove(12, 3, "rank_00003.pt", 10, names[0], names[1])
        with pytest.raises(StagingError, match=rf"^{names[0]}: .*rank_00003.pt"):
            stage_shards([missing], inv.job("j").ckpt, inv.by_name, pool)
        assert sorted(p.name for p in (ck / names[1] / "iter_0000012").iterdir()) == ["rank_00001.pt"]
    finally:
        pool.close()
