"""Stack equivalence classes: normalization, dominance, partial stacks, divergence, categories."""

from __future__ import annotations

from pathlib import Path

import pytest

from robustctl.stacks.cluster import (
    Category,
    ClusterOptions,
    categorize,
    cluster,
    compact_ranges,
    compare_samples,
    normalize_function,
    normalize_path,
    prefix_tree,
)
from robustctl.stacks.model import Frame, ProcessDump, ProcessRole, ThreadStack
from robustctl.stacks.parse import parse_dump_file, parse_pyspy_text

DATA = Path(__file__).resolve().parents[1] / "data" / "pyspy"

SP = "/opt/venv/lib/python3.10/site-packages/"
ROOT = [("<module>", "/job/train.py"), ("main", "/job/train.py"), ("train_step", "/job/train.py")]
ALLREDUCE = [
    *ROOT,
    ("wrapper", SP + "torch/distributed/c10d_logger.py"),
    ("all_reduce", SP + "torch/distributed/distributed_c10d.py"),
]
COMPUTE = [*ROOT, ("_call_impl", SP + "torch/nn/modules/module.py"), ("forward", "/job/model.py")]


def mk(
    rank: int | None,
    path: list[tuple[str, str]],
    *,
    role: ProcessRole = ProcessRole.MAIN,
    line: int = 1,
    extra_threads: tuple[ThreadStack, ...] = (),
) -> ProcessDump:
    """A dump whose main thread runs ``path`` (outermost first)."""
    frames = tuple(Frame(fn, file, line) for fn, file in reversed(path))
    main = ThreadStack("1", "MainThread", frames)
    return ProcessDump(threads=(*extra_threads, main), rank=rank, pid=100 + (rank or 0), role=role)


def test_normalize_path() -> None:
    assert (
        normalize_path(SP + "torch/distributed/distributed_c10d.py")
        == "torch/distributed/distributed_c10d.py"
    )
    assert normalize_path("/usr/lib/python3.10/threading.py") == "threading.py"
    assert (
        normalize_path("/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/queues.py")
        == "multiprocessing/queues.py"
    )
    assert normalize_path("deepspeed/runtime/fp16/loss_scaler.py") == "runtime/fp16/loss_scaler.py"
    assert normalize_path("src/model_back/healing/scripts/fine_tune.py") == normalize_path(
        "src/compactifai_back/healing/scripts/fine_tune.py"
    )
    assert (
        normalize_path("C:\\venv\\Lib\\site-packages\\torch\\nn\\modules\\module.py")
        == "nn/modules/module.py"
    )
    assert normalize_path("libnccl.so.2") == "libnccl.so.2"
    assert normalize_function("Queue.get") == "get"
    assert normalize_function("_exception_logger.<locals>.wrapper") == "wrapper"
    assert normalize_function("<module>") == "<module>"
    assert normalize_function("Queue.get", qualified=True) == "Queue.get"
    assert normalize_function("c10d::Foo::bar(int) const") == "c10d::Foo::bar(int) const"


def test_different_venv_prefixes_and_lines_are_one_class() -> None:
    a = mk(0, ALLREDUCE, line=10)
    other = [
        (fn, f.replace("/opt/venv/lib/python3.10/", "/home/u/.venv/lib/python3.10/")) for fn, f in ALLREDUCE
    ]
    b = mk(1, other, line=11)
    res = cluster([a, b])
    (rc,) = res.roles
    assert len(rc.classes) == 1 and rc.classes[0].ranks == (0, 1)
    with_lines = cluster([a, b], ClusterOptions(with_lines=True))
    assert len(with_lines.roles[0].classes) == 2


def test_text_and_json_dumps_of_one_job_cluster_together() -> None:
    gloo = DATA / "captured-gloo-4ranks"
    dumps = [d for r in range(4) for d in parse_dump_file(gloo / f"rank{r}.{'json' if r % 2 else 'dump'}")]
    (rc,) = cluster(dumps).roles
    assert [c.ranks for c in rc.classes] == [(0, 2), (1,), (3,)]
    assert [c.category for c in rc.classes] == [Category.COLLECTIVE, Category.P2P, Category.COMPUTE]
    assert rc.dominant == 0 and rc.classes[0].dominant


def test_mixtral_pid39_and_pid42_are_one_class() -> None:
    # EXPECTED.json: expected_clusters [["rank_pid39", "rank_pid42"]]; pid39's dump is cut after 8 frames.
    mix = DATA / "mixtral-zero3-accelerate-8xh100-PARTIAL"
    dumps = [*parse_dump_file(mix / "rank_pid39.dump"), *parse_dump_file(mix / "rank_pid42.dump")]
    (rc,) = cluster(dumps).roles
    assert len(rc.classes) == 1
    (c,) = rc.classes
    assert c.size == 2 and c.partial == 1 and c.members == (0, 1)
    assert c.frames[0] == "<module> (healing/scripts/fine_tune_accelerate.py)"
    assert c.category is Category.COMPUTE  # main thread in autograd backward
    unmerged = cluster(dumps, ClusterOptions(merge_partial=False)).roles[0]
    assert len(unmerged.classes) == 2 and unmerged.ambiguous


def test_fairseq_rank0_is_a_dataloader_wait() -> None:
    # EXPECTED.json: culprit_category "dataloader"
    (d,) = parse_dump_file(DATA / "fairseq-rank0-dataloader-hang-PARTIAL" / "rank0.dump")
    assert categorize(d.threads[0].frames) is Category.DATALOADER
    (rc,) = cluster([d]).roles
    assert rc.classes[0].category is Category.DATALOADER and rc.dominant == 0


@pytest.mark.parametrize(
    ("frames", "category"),
    [
        ([("barrier", "torch/distributed/distributed_c10d.py"), ("<module>", "t.py")], Category.COLLECTIVE),
        ([("irecv", "torch/distributed/distributed_c10d.py"), ("f", "t.py")], Category.P2P),
        ([("batch_isend_irecv", "torch/distributed/distributed_c10d.py")], Category.P2P),
        ([("_communicate", "megatron/core/pipeline_parallel/p2p_communication.py")], Category.P2P),
        ([("all_reduce", "fairseq/distributed/utils.py")], Category.COLLECTIVE),
        ([("all_gather_into_tensor", "deepspeed/comm/torch.py")], Category.COLLECTIVE),
        (
            [("get", "multiprocessing/queues.py"), ("_get_data", "torch/utils/data/dataloader.py")],
            Category.DATALOADER,
        ),
        ([("write", "torch/serialization.py"), ("save", "torch/serialization.py")], Category.CHECKPOINT),
        ([("write_data", "torch/distributed/checkpoint/filesystem.py")], Category.CHECKPOINT),
        (
            [("copyfileobj", "shutil.py"), ("save_checkpoint", "megatron/training/checkpointing.py")],
            Category.CHECKPOINT,
        ),
        ([("copyfileobj", "shutil.py"), ("main", "t.py")], Category.IO),
        ([("_make_request", "urllib3/connectionpool.py")], Category.IO),
        ([("forward", "model.py"), ("_call_impl", "torch/nn/modules/module.py")], Category.COMPUTE),
        ([("checkpoint", "torch/utils/checkpoint.py"), ("forward", "model.py")], Category.COMPUTE),
        ([("CheckpointFunction.forward", "megatron/core/tensor_parallel/random.py")], Category.COMPUTE),
        (
            [("get", "multiprocessing/queues.py"), ("Checkpointer.wait_for_previous_save", "job.py")],
            Category.CHECKPOINT,
        ),
        ([("get", "multiprocessing/queues.py"), ("_checkpoint_writer_main", "job.py")], Category.CHECKPOINT),
        ([("save_checkpoint", "megatron/training/checkpointing.py")], Category.CHECKPOINT),
        (
            [
                ("wait", "threading.py"),
                ("finalize", "megatron/core/dist_checkpointing/strategies/async_utils.py"),
            ],
            Category.CHECKPOINT,
        ),
        ([("wait", "threading.py"), ("main", "t.py")], Category.UNKNOWN),
        ([], Category.UNKNOWN),
    ],
)
def test_categorize(frames: list[tuple[str, str]], category: Category) -> None:
    assert categorize([Frame(fn, file) for fn, file in frames]) is category


def test_one_rank_in_compute_is_the_outlier_with_divergence() -> None:
    dumps = [mk(r, COMPUTE if r == 5 else ALLREDUCE) for r in range(16)]
    (rc,) = cluster(dumps).roles
    assert rc.dominant == 0 and not rc.ambiguous
    dom, out = rc.classes
    assert dom.ranks == tuple(r for r in range(16) if r != 5) and dom.large and dom.divergence is None
    assert out.ranks == (5,) and out.category is Category.COMPUTE and not out.large
    assert out.divergence is not None
    assert out.divergence.common_depth == 3
    assert out.divergence.last_common == "train_step (job/train.py)"
    assert out.divergence.first_different == "_call_impl (nn/modules/module.py)"
    assert out.divergence.dominant_next == "wrapper (torch/distributed/c10d_logger.py)"
    assert rc.outliers == (out,)


def test_a_prefix_of_the_dominant_path_stops_early() -> None:
    dumps = [mk(r, ALLREDUCE) for r in range(4)] + [mk(4, ROOT)]
    out = cluster(dumps).roles[0].classes[1]
    assert out.divergence is not None
    assert (
        out.divergence.first_different is None
        and out.divergence.dominant_next == "wrapper (torch/distributed/c10d_logger.py)"
    )


def test_no_dominant_class_every_process_different() -> None:
    dumps = [mk(r, [*ROOT, (f"f{r}", "/job/x.py")]) for r in range(6)]
    (rc,) = cluster(dumps).roles
    assert rc.ambiguous and rc.dominant is None
    assert rc.reason is not None and "every process differs" in rc.reason
    assert rc.outliers == () and all(c.divergence is None for c in rc.classes)


def test_no_dominant_class_two_equal_classes() -> None:
    dumps = [mk(r, ALLREDUCE if r < 4 else COMPUTE) for r in range(8)]
    (rc,) = cluster(dumps).roles
    assert rc.ambiguous and rc.reason is not None and "2 classes hold 4 processes each" in rc.reason


def test_largest_class_too_small_to_dominate() -> None:
    dumps = [mk(r, ALLREDUCE) for r in range(2)] + [
        mk(r, [*ROOT, (f"f{r}", "/job/x.py")]) for r in range(2, 10)
    ]
    (rc,) = cluster(dumps).roles
    assert rc.ambiguous and rc.reason is not None and "holds 2 of 10" in rc.reason
    ok = cluster(dumps, ClusterOptions(min_dominant_fraction=0.2)).roles[0]
    assert ok.dominant == 0


def test_unreadable_processes_form_their_own_class() -> None:
    dumps = [mk(r, ALLREDUCE) for r in range(5)]
    dumps.append(ProcessDump((), rank=5, pid=99, error="Permission denied (os error 13)"))
    dumps.append(ProcessDump((), rank=6, pid=98, error="Permission denied (os error 13)"))
    dumps.append(ProcessDump((), rank=7, pid=97, error="process gone"))
    (rc,) = cluster(dumps).roles
    assert rc.processes == 8 and rc.readable == 5 and rc.dominant == 0
    bad = rc.classes[-1]
    assert bad.unreadable and bad.category is Category.UNREADABLE and bad.ranks == (5, 6, 7)
    assert bad.reasons == (("Permission denied (os error 13)", 2), ("process gone", 1))
    assert bad in rc.outliers
    only_bad = cluster(dumps[5:]).roles[0]
    assert not only_bad.ambiguous and only_bad.dominant is None and only_bad.reason is not None
    assert "could be read" in only_bad.reason and cluster(dumps[5:]).readable == 0


def test_roles_are_clustered_separately() -> None:
    worker_idle = [
        ("<module>", "/job/train.py"),
        ("_worker_loop", SP + "torch/utils/data/_utils/worker.py"),
        ("get", "/usr/lib/python3.10/multiprocessing/queues.py"),
    ]
    dumps = [mk(r, ALLREDUCE) for r in range(4)] + [
        mk(r, worker_idle, role=ProcessRole.DATALOADER) for r in range(4)
    ]
    res = cluster(dumps)
    assert [rc.role for rc in res.roles] == [ProcessRole.MAIN, ProcessRole.DATALOADER]
    assert res.role(ProcessRole.DATALOADER) is not None and res.role(ProcessRole.CHECKPOINT) is None
    assert all(len(rc.classes) == 1 for rc in res.roles)


def test_thread_signature_all() -> None:
    bg_ok = ThreadStack("2", "Thread-1", (Frame("wait", "threading.py"),))
    bg_stuck = ThreadStack("2", "Thread-1", (Frame("write", "/job/ckpt.py"), Frame("run", "threading.py")))
    dumps = [mk(r, ALLREDUCE, extra_threads=(bg_stuck if r == 3 else bg_ok,)) for r in range(6)]
    assert len(cluster(dumps).roles[0].classes) == 1  # main thread only by default
    rc = cluster(dumps, ClusterOptions(threads="all")).roles[0]
    assert [c.ranks for c in rc.classes] == [(0, 1, 2, 4, 5), (3,)]
    assert rc.classes[1].other_threads == (("run (threading.py)", "write (job/ckpt.py)"),)


def test_prefix_tree_and_compact_ranges() -> None:
    dumps = [mk(r, COMPUTE if r == 5 else ALLREDUCE) for r in range(8)]
    rc = cluster(dumps).roles[0]
    root = prefix_tree(rc.classes)
    assert root.classes == [0, 1]
    (top,) = root.children.values()
    node = top
    for _ in range(2):
        (node,) = node.children.values()
    assert node.frame == "train_step (job/train.py)" and len(node.children) == 2
    assert compact_ranges([0, 1, 2, 3, 4, 5, 7]) == "0-5,7"  # still importable from stacks.cluster


def test_compare_samples() -> None:
    before = [mk(r, ALLREDUCE) for r in range(4)]
    after = [mk(r, ALLREDUCE, line=2 if r < 3 else 1) for r in range(4)]
    cmp = compare_samples(before, after)
    assert (
        cmp.compared == 4
        and cmp.changed == (0, 1, 2)
        and cmp.unchanged == (3,)
        and cmp.changed_fraction == 0.75
    )


def test_options_validation() -> None:
    with pytest.raises(ValueError):
        ClusterOptions(path_components=0)
    with pytest.raises(ValueError):
        ClusterOptions(min_dominant_fraction=0)


def test_linear_in_ranks_small_smoke() -> None:
    # a cheap guard that many identical stacks stay one class (the benchmark measures speed)
    frames = parse_pyspy_text('Thread 1 (idle): "MainThread"\n    f (a.py:1)\n    <module> (a.py:2)\n')[
        0
    ].threads
    dumps = [ProcessDump(frames, rank=r) for r in range(5000)]
    (rc,) = cluster(dumps).roles
    assert len(rc.classes) == 1 and rc.classes[0].size == 5000
