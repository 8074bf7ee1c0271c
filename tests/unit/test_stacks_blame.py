"""Blame: outlier classes → suspects → smallest parallel group → over-eviction; ambiguity; missing data.

Crafted clusters on Megatron-like stacks (outermost first). Layout tp=2, pp=4, dp=2 on 16 ranks is
Megatron's documented example: PP groups [0,4,8,12] [1,5,9,13] …, TP groups [0,1] [2,3] …, DP groups
[0,2] [1,3] [4,6] …
"""

from __future__ import annotations

import pytest

from robustctl.config import ParallelLayout
from robustctl.errors import UsageError
from robustctl.inventory.topology import Topology, smallest_group
from robustctl.stacks import blame as blame_module
from robustctl.stacks.blame import BlameOptions, blame
from robustctl.stacks.cluster import Category, cluster
from robustctl.stacks.model import Frame, ProcessDump, ProcessRole, ThreadStack

SP = "/opt/venv/lib/python3.10/site-packages/"
ROOT = [
    ("<module>", "/workspace/pretrain_gpt.py"),
    ("pretrain", SP + "megatron/training/training.py"),
    ("train", SP + "megatron/training/training.py"),
    ("train_step", SP + "megatron/training/training.py"),
]
SCHED = (
    "forward_backward_pipelining_without_interleaving",
    SP + "megatron/core/pipeline_parallel/schedules.py",
)
DP_ALLREDUCE = [
    *ROOT,
    ("finalize_model_grads", SP + "megatron/core/distributed/finalize_model_grads.py"),
    ("finish_grad_sync", SP + "megatron/core/distributed/distributed_data_parallel.py"),
    ("wrapper", SP + "torch/distributed/c10d_logger.py"),
    ("all_reduce", SP + "torch/distributed/distributed_c10d.py"),
]
EMB_ALLREDUCE = [
    *ROOT,
    ("finalize_model_grads", SP + "megatron/core/distributed/finalize_model_grads.py"),
    ("_allreduce_word_embedding_grads", SP + "megatron/core/distributed/finalize_model_grads.py"),
    ("wrapper", SP + "torch/distributed/c10d_logger.py"),
    ("all_reduce", SP + "torch/distributed/distributed_c10d.py"),
]
PP_RECV = [
    *ROOT,
    SCHED,
    ("recv_forward", SP + "megatron/core/pipeline_parallel/p2p_communication.py"),
    ("_communicate", SP + "megatron/core/pipeline_parallel/p2p_communication.py"),
]
COMPUTE = [
    *ROOT,
    SCHED,
    ("forward_step", SP + "megatron/core/pipeline_parallel/schedules.py"),
    ("_call_impl", SP + "torch/nn/modules/module.py"),
    ("forward", SP + "megatron/core/transformer/attention.py"),
]
DATA_WAIT = [
    *ROOT,
    ("get_batch", "/workspace/pretrain_gpt.py"),
    ("__next__", SP + "torch/utils/data/dataloader.py"),
    ("_next_data", SP + "torch/utils/data/dataloader.py"),
    ("_get_data", SP + "torch/utils/data/dataloader.py"),
    ("get", "/usr/lib/python3.10/multiprocessing/queues.py"),
]
WORKER_BASE = [*DATA_WAIT[:6], ("_worker_loop", SP + "torch/utils/data/_utils/worker.py")]
WORKER_IDLE = [*WORKER_BASE, ("get", "/usr/lib/python3.10/multiprocessing/queues.py")]
WORKER_STUCK = [
    *WORKER_BASE,
    ("fetch", SP + "torch/utils/data/_utils/fetch.py"),
    ("__getitem__", "/workspace/dataset.py"),
]

LAYOUT = ParallelLayout(tp=2, pp=4, dp=2)
HOSTS = [f"node{i:02d}" for i in range(8)]


def mk(
    rank: int | None,
    path: list[tuple[str, str]],
    *,
    role: ProcessRole = ProcessRole.MAIN,
    pid: int | None = None,
    host: str | None = None,
) -> ProcessDump:
    frames = tuple(Frame(fn, file, 10) for fn, file in reversed(path))
    return ProcessDump(
        threads=(ThreadStack("1", "MainThread", frames),),
        rank=rank,
        pid=pid if pid is not None else 1000 + (rank or 0),
        role=role,
        host=host,
    )


def bad(rank: int, error: str = "Permission denied (os error 13)") -> ProcessDump:
    return ProcessDump((), rank=rank, pid=5000 + rank, error=error, state="D")


def topo(layout: ParallelLayout = LAYOUT, rph: int | None = 2, hosts: list[str] | None = HOSTS) -> Topology:
    return Topology(layout, rph, hosts)


def test_one_rank_hung_in_compute_names_that_rank_its_machine_and_group() -> None:
    dumps = [mk(r, COMPUTE if r == 6 else DP_ALLREDUCE) for r in range(16)]
    res = blame(cluster(dumps), topo())
    assert not res.ambiguous
    assert res.suspect_ranks == (6,) and res.likely_culprits == (6,)
    assert res.suspect_hosts == ("node03",)
    (s,) = res.suspects
    assert s.category is Category.COMPUTE and s.coords == {"tp": 0, "cp": 0, "ep": 0, "dp": 1, "pp": 1}
    assert "forward (core/transformer/attention.py)" in s.reason
    assert res.group is not None and (res.group.kind, res.group.index, res.group.ranks) == ("tp", 3, "6-7")
    assert res.over_eviction == ("node03",) and res.healthy_machines_taken == 0


def test_byterobust_fig7_last_stage_stuck_over_evicts_its_pp_group() -> None:
    # PP group 0 = ranks 0,4,8,12; rank 12 (last stage) computes, its stage-mates wait in recv,
    # everyone else waits in the DP all-reduce.
    dumps = [mk(r, COMPUTE if r == 12 else PP_RECV if r in (0, 4, 8) else DP_ALLREDUCE) for r in range(16)]
    res = blame(cluster(dumps), topo())
    assert not res.ambiguous
    assert res.suspect_ranks == (0, 4, 8, 12) and res.likely_culprits == (12,)
    assert res.group is not None and (res.group.kind, res.group.index) == ("pp", 0)
    assert res.group.ranks == "0,4,8,12" and res.group.n_ranks == 4
    assert res.over_eviction == ("node00", "node02", "node04", "node06")
    assert res.healthy_machines_taken == 3  # the victims' machines
    cats = {s.rank: s.category for s in res.suspects}
    assert cats == {0: Category.P2P, 4: Category.P2P, 8: Category.P2P, 12: Category.COMPUTE}


def test_fig7_with_tp_peers_gives_the_model_parallel_group() -> None:
    # both TP ranks of the last stage compute; both TP columns of the pipeline wait in recv
    stuck = {12, 13}
    mates = {0, 1, 4, 5, 8, 9}
    dumps = [mk(r, COMPUTE if r in stuck else PP_RECV if r in mates else DP_ALLREDUCE) for r in range(16)]
    res = blame(cluster(dumps), topo())
    assert res.group is not None and (res.group.kind, res.group.index) == ("tp-pp", 0)
    assert res.group.ranks == "0-1,4-5,8-9,12-13"
    # TP peers share machines: the same 4 machines as one PP group
    assert res.over_eviction == ("node00", "node02", "node04", "node06")


def test_at_scale_pp_group_takes_seven_healthy_machines() -> None:
    # tp=8 within a machine, pp=8 across 8 machines: ByteRobust's "6-7 healthy machines per PP group"
    layout = ParallelLayout(tp=8, pp=8, dp=4)
    t = Topology(layout, 8)
    stuck = t.rank_of({"tp": 0, "dp": 2, "pp": 7})
    mates = set(t.group_of(stuck, "pp")) - {stuck}
    dumps = [mk(r, COMPUTE if r == stuck else PP_RECV if r in mates else DP_ALLREDUCE) for r in range(256)]
    res = blame(cluster(dumps), t)
    assert res.group is not None and res.group.kind == "pp" and len(res.over_eviction) == 8
    assert res.healthy_machines_taken == 7


def test_dataloader_worker_stuck_is_named_through_the_child_process() -> None:
    dumps = [mk(r, DATA_WAIT if r == 5 else DP_ALLREDUCE) for r in range(16)]
    for r in range(16):
        for w in range(2):
            path = WORKER_STUCK if (r, w) == (5, 1) else WORKER_IDLE
            dumps.append(mk(r, path, role=ProcessRole.DATALOADER, pid=20_000 + 10 * r + w))
    res = blame(cluster(dumps), topo())
    assert not res.ambiguous and res.suspect_ranks == (5,)
    roles = {(s.role, s.pid, s.category) for s in res.suspects}
    assert (ProcessRole.DATALOADER, 20_051, Category.DATALOADER) in roles
    assert (ProcessRole.MAIN, 1005, Category.DATALOADER) in roles
    worker = next(s for s in res.suspects if s.role is ProcessRole.DATALOADER)
    assert "__getitem__ (workspace/dataset.py)" in worker.reason
    assert res.over_eviction == ("node02",)


def test_unreadable_process_is_reported_and_considered() -> None:
    dumps = [mk(r, DP_ALLREDUCE) for r in range(16) if r != 9] + [bad(9)]
    res = blame(cluster(dumps), topo())
    assert not res.ambiguous and res.suspect_ranks == (9,) and res.likely_culprits == (9,)
    (s,) = res.suspects
    assert (
        s.category is Category.UNREADABLE and s.reason == "could not be read: Permission denied (os error 13)"
    )
    assert res.over_eviction == ("node04",)


def test_unreadable_outside_the_group_is_named_by_machine() -> None:
    dumps = [
        mk(r, COMPUTE if r == 12 else PP_RECV if r in (0, 4, 8) else DP_ALLREDUCE)
        for r in range(16)
        if r != 3
    ]
    dumps.append(bad(3))
    res = blame(cluster(dumps), topo())
    assert not res.ambiguous and res.group is not None and res.group.kind == "pp"
    assert res.suspect_ranks == (0, 3, 4, 8, 12)
    assert res.over_eviction == ("node00", "node02", "node04", "node06", "node01")
    assert any("unreadable rank 3 outside the group" in n for n in res.notes)


def test_no_dominant_class_is_ambiguous_and_names_nobody() -> None:
    dumps = [mk(r, COMPUTE if r < 8 else DP_ALLREDUCE) for r in range(16)]
    res = blame(cluster(dumps), topo())
    assert res.ambiguous and res.suspects == () and res.over_eviction == ()
    assert res.ambiguity is not None and "no dominant main class" in res.ambiguity


def test_outliers_spread_over_many_groups_is_ambiguous() -> None:
    layout = ParallelLayout(tp=2, pp=4, dp=4)
    t = Topology(layout, 2)
    spread = {0, 9, 18, 27, 31}
    dumps = [mk(r, COMPUTE if r in spread else DP_ALLREDUCE) for r in range(32)]
    res = blame(cluster(dumps), t)
    assert res.ambiguous and res.suspects == ()
    assert res.ambiguity is not None and "share no parallel group" in res.ambiguity


def test_few_outliers_in_no_common_group_are_named_by_machine() -> None:
    t = Topology(ParallelLayout(dp=16), 2)
    dumps = [mk(r, COMPUTE if r in (3, 12) else DP_ALLREDUCE) for r in range(16)]
    res = blame(cluster(dumps), t)
    assert not res.ambiguous and res.group is None
    assert res.suspect_ranks == (3, 12) and res.over_eviction == ("machine-1", "machine-6")
    assert any("only the outliers' own machines" in n for n in res.notes)


def test_group_spanning_too_many_machines_is_ambiguous_without_waits_for() -> None:
    # 4 ranks per host: PP group 0 spans all 4 machines
    dumps = [mk(r, COMPUTE if r == 12 else PP_RECV if r in (0, 4, 8) else DP_ALLREDUCE) for r in range(16)]
    classes_only = BlameOptions(waits_for=False)
    res = blame(cluster(dumps), topo(rph=4, hosts=None), classes_only)
    assert res.ambiguous and res.ambiguity is not None and "spans 4 of 4 machines" in res.ambiguity
    relaxed = blame(
        cluster(dumps), topo(rph=4, hosts=None), BlameOptions(max_evict_fraction=1.0, waits_for=False)
    )
    assert not relaxed.ambiguous and relaxed.group is not None and relaxed.group.kind == "pp"
    # the waits-for chains follow rank 14's DP all-reduce to rank 12: one machine, not four
    res = blame(cluster(dumps), topo(rph=4, hosts=None))
    assert not res.ambiguous and res.decided_by == "waits-for"
    assert res.suspect_ranks == (12,) and res.over_eviction == ("machine-3",)


def test_large_waiting_class_is_promoted_to_healthy_when_that_localizes() -> None:
    # tp=1, pp=4, dp=8: the first stage of every replica waits in the embedding all-reduce (25 %),
    # rank 30 computes, everything else waits in the DP all-reduce.
    layout = ParallelLayout(pp=4, dp=8)
    t = Topology(layout, 4)
    stage0 = set(t.group_of(0, "dp"))
    dumps = [mk(r, COMPUTE if r == 30 else EMB_ALLREDUCE if r in stage0 else DP_ALLREDUCE) for r in range(32)]
    res = blame(cluster(dumps), t)
    assert not res.ambiguous and res.suspect_ranks == (30,)
    assert res.group is not None and (res.group.kind, res.group.index) == ("rank", 30)
    assert res.over_eviction == ("machine-7",)
    assert any("treated as healthy" in n for n in res.notes)
    never = blame(cluster(dumps), t, BlameOptions(promote_waiting=False))
    assert never.suspect_ranks == (*sorted(stage0), 30)  # named by their own 3 machines, no group


def test_computing_class_is_never_promoted() -> None:
    layout = ParallelLayout(pp=4, dp=8)
    t = Topology(layout, 4)
    stage0 = set(t.group_of(0, "dp"))
    dumps = [mk(r, COMPUTE if r in stage0 else DP_ALLREDUCE) for r in range(32)]
    res = blame(cluster(dumps), t)
    # 8 computing ranks (a whole DP group of stage 0) are not promoted away: they are the suspects
    assert res.suspect_ranks == tuple(sorted(stage0)) and res.group is not None and res.group.kind == "dp"


def test_layout_mismatch_is_a_usage_error() -> None:
    dumps = [mk(r, DP_ALLREDUCE) for r in range(20)]
    with pytest.raises(UsageError, match=r"ranks 16-19 in the dumps lie outside the layout's 16 ranks"):
        blame(cluster(dumps), topo())


def test_missing_ranks_are_suspects_only_when_every_readable_rank_waits_on_them() -> None:
    dumps = [mk(r, DP_ALLREDUCE) for r in range(16) if r not in (7, 11)]
    res = blame(cluster(dumps), topo())
    assert res.not_collected == "7,11" and res.n_not_collected == 2
    # ranks 5 and 9 wait for their DP peers 7 and 11, which left no dump: they are the evidence
    assert res.suspect_ranks == (7, 11) and res.decided_by == "waits-for"
    reasons = {s.rank: s.reason for s in res.suspects}
    assert reasons[7].startswith("no dump for rank 7 of 16") and "rank 5 → rank 7" in reasons[7]
    # without waits-for (classes only) missing data never names a suspect
    classes_only = blame(cluster(dumps), topo(), BlameOptions(waits_for=False))
    assert classes_only.suspects == () and not classes_only.ambiguous
    # a readable rank outside any communication call is blamed, the missing one only noted
    with_outlier = [mk(r, COMPUTE if r == 2 else DP_ALLREDUCE) for r in range(16) if r != 7]
    res2 = blame(cluster(with_outlier), topo())
    assert res2.suspect_ranks == (2,) and res2.not_collected == "7"
    assert res2.waits_for is not None and any("rank 7 with no dump" in n for n in res2.waits_for.notes)


def test_nothing_readable() -> None:
    res = blame(cluster([bad(r) for r in range(16)]), topo())
    assert res.suspects == () and not res.ambiguous
    assert "no process could be read" in res.notes[-1]


def test_without_layout_suspects_by_rank_and_dump_host() -> None:
    dumps = [mk(r, COMPUTE if r == 2 else DP_ALLREDUCE, host=f"h{r // 2}") for r in range(8)]
    res = blame(cluster(dumps))
    assert res.group is None and res.suspect_ranks == (2,) and res.suspect_hosts == ("h1",)
    assert res.over_eviction == ("h1",) and res.not_collected == ""
    many = [mk(r, DP_ALLREDUCE) for r in range(4)] + [mk(r, COMPUTE) for r in range(4, 7)]
    many += [mk(r, PP_RECV) for r in range(7, 9)]
    res2 = blame(cluster(many))
    assert res2.ambiguous and res2.ambiguity is not None and "not a minority" in res2.ambiguity


def test_outlier_without_rank_is_unplaced() -> None:
    dumps = [mk(r, DP_ALLREDUCE) for r in range(8)]
    dumps.append(ProcessDump(mk(None, COMPUTE).threads, rank=None, pid=77, source="dumps/x.txt"))
    res = blame(cluster(dumps))
    assert res.unplaced == ("dumps/x.txt",) and res.suspects[-1].rank is None


def test_every_outlier_waiting_notes_a_hidden_culprit() -> None:
    dumps = [mk(r, PP_RECV if r in (0, 4, 8) else DP_ALLREDUCE) for r in range(16) if r != 12]
    res = blame(cluster(dumps), topo(), BlameOptions(waits_for=False))
    assert res.likely_culprits == () and res.not_collected == "12"
    assert any("waiting on a peer" in n for n in res.notes)
    # the waits-for chains end at the rank with no dump: rank 14 waits for it in the DP all-reduce
    res = blame(cluster(dumps), topo())
    assert res.likely_culprits == (12,) and res.not_collected == "12"
    (s,) = res.suspects
    assert s.category is Category.UNREADABLE and s.reason.startswith("no dump for rank 12 of 16")
    assert res.group is not None and (res.group.kind, res.group.index) == ("tp", 6)


def test_smallest_group_choices() -> None:
    t = topo()
    g = smallest_group(t, [12])
    assert g is not None and (g.kind, g.index) == ("tp", 6)
    g = smallest_group(Topology(ParallelLayout(pp=4, dp=4), 2), [5])
    assert g is not None and (g.kind, g.index, g.machines) == ("rank", 5, ("machine-2",))
    g = smallest_group(t, [0, 8])
    assert g is not None and (g.kind, g.index) == ("pp", 0)
    g = smallest_group(t, [0, 2])
    assert g is not None and (g.kind, g.index, g.machines) == ("dp", 0, ("node00", "node01"))
    g = smallest_group(t, [0, 1, 4])
    assert g is not None and g.kind == "tp-pp"
    g = smallest_group(t, [0, 15])
    assert g is not None and g.kind == "job" and g.n_ranks == 16
    assert smallest_group(t, []) is None
    with pytest.raises(UsageError):
        smallest_group(t, [16])
    assert blame_module.smallest_group is smallest_group  # the old import path still works
