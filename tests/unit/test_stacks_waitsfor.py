"""Waits-for analysis: what each rank waits in, the chains, the suspects at their ends.

Real captures of the test-bed job (tests/data/pyspy/captured-minimegatron-pp4-*: tp=1, pp=4, dp=2, 8 ranks,
rank = dp + 2·pp) hung at each fault site, where the stack classes alone name a whole PP group spanning
every machine (ambiguous); and ByteRobust's Fig. 7 case on crafted Megatron stacks.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robustctl.config import ParallelLayout
from robustctl.inventory.topology import Topology, parse_layout
from robustctl.models import Status
from robustctl.report.stacks import render_stacks
from robustctl.stacks.analyze import all_pyspy, analyze_dumps
from robustctl.stacks.blame import BlameOptions, blame
from robustctl.stacks.cluster import Category, cluster
from robustctl.stacks.model import Frame, ProcessDump, ThreadStack
from robustctl.stacks.parse import parse_dump_file
from robustctl.stacks.waitsfor import analyze_waits, describe_wait, pyspy_error_reason

DATA = Path(__file__).resolve().parents[1] / "data" / "pyspy"
PP4 = parse_layout("tp=1,pp=4,dp=2")
SP = "/opt/venv/lib/python3.10/site-packages/"
MEG = SP + "megatron/core/pipeline_parallel/"
ROOT = [("<module>", "/workspace/pretrain_gpt.py"), ("train_step", SP + "megatron/training/training.py")]
SCHED = ("forward_backward_pipelining_without_interleaving", MEG + "schedules.py")
DP_ALLREDUCE = [
    *ROOT,
    ("finalize_model_grads", SP + "megatron/core/distributed/finalize_model_grads.py"),
    ("finish_grad_sync", SP + "megatron/core/distributed/distributed_data_parallel.py"),
    ("all_reduce", SP + "torch/distributed/distributed_c10d.py"),
]
PP_RECV = [
    *ROOT,
    SCHED,
    ("recv_forward", MEG + "p2p_communication.py"),
    ("_communicate", MEG + "p2p_communication.py"),
]
COMPUTE = [
    *ROOT,
    SCHED,
    ("forward_step", MEG + "schedules.py"),
    ("forward", SP + "megatron/core/transformer/attention.py"),
]


def frames(path: list[tuple[str, str]]) -> tuple[Frame, ...]:
    return tuple(Frame(fn, file, 10) for fn, file in reversed(path))


def mk(rank: int, path: list[tuple[str, str]]) -> ProcessDump:
    return ProcessDump(threads=(ThreadStack("1", "MainThread", frames(path)),), rank=rank, pid=1000 + rank)


def captured(site: str) -> list[Path]:
    return sorted((DATA / f"captured-minimegatron-pp4-{site}").glob("rank*.dump"))


# --- what a rank waits in -------------------------------------------------------------------------------


def test_describe_wait_megatron_p2p_directions_and_collective_groups() -> None:
    w = describe_wait(frames(PP_RECV))
    assert (w.kind, w.caller, w.directions) == ("p2p", "recv_forward", ("prev",))
    combo = [*ROOT, SCHED, ("send_forward_recv_backward", MEG + "p2p_communication.py")]
    combo.append(("_communicate", MEG + "p2p_communication.py"))
    assert describe_wait(frames(combo)).directions == ("next",)
    both = [*ROOT, ("batch_isend_irecv", SP + "torch/distributed/distributed_c10d.py")]
    assert describe_wait(frames(both)).directions == ("prev", "next")  # no caller says which: both
    assert describe_wait(frames(DP_ALLREDUCE)).group == "dp"
    tp = [
        *ROOT,
        ("reduce_from_tensor_model_parallel_region", SP + "megatron/core/tensor_parallel/mappings.py"),
    ]
    tp.append(("_reduce", SP + "megatron/core/tensor_parallel/mappings.py"))
    tp.append(("all_reduce", SP + "torch/distributed/distributed_c10d.py"))
    assert describe_wait(frames(tp)).group == "tp"
    emb = [
        *ROOT,
        ("_allreduce_word_embedding_grads", SP + "megatron/core/distributed/finalize_model_grads.py"),
    ]
    emb.append(("all_reduce", SP + "torch/distributed/distributed_c10d.py"))
    assert describe_wait(frames(emb)).group == "embedding"
    c = describe_wait(frames(COMPUTE), Category.COMPUTE)
    assert (c.kind, c.call, c.category) == ("none", "forward", "compute")


def test_pyspy_error_reasons() -> None:
    eperm = "Failed to suspend process (EPERM: Operation not permitted)"
    assert pyspy_error_reason(5, eperm) == "py-spy could not suspend rank 5: EPERM (uninterruptible sleep?)"
    assert "timed out on rank 2" in pyspy_error_reason(2, "py-spy timed out after 10.0 s", "D")
    assert pyspy_error_reason(1, "Permission Denied").startswith("py-spy was denied access to rank 1")


# --- ByteRobust Fig. 7 -----------------------------------------------------------------------------------


def test_fig7_chain_ends_at_the_stuck_last_stage_and_the_pp_group_stays() -> None:
    # tp=2, pp=4, dp=2: rank 12 (last stage) computes, its stage-mates 0, 4, 8 wait in recv, the rest in
    # the DP all-reduce (the unit test of blame.py has the same picture)
    t = Topology(ParallelLayout(tp=2, pp=4, dp=2), 2)
    dumps = [mk(r, COMPUTE if r == 12 else PP_RECV if r in (0, 4, 8) else DP_ALLREDUCE) for r in range(16)]
    clusters = cluster(dumps)
    wf = analyze_waits(clusters, t)
    assert wf.decided and wf.confidence == "high" and wf.suspect_ranks == (12,)
    (s,) = wf.suspects
    assert s.state == "compute" and not s.cycle and s.direct >= 1
    assert wf.chains[0].hops[-1].rank == 12 and wf.chains[0].text.endswith("(compute: forward)")
    res = blame(clusters, t)
    # the class answer (over-evict the PP group, as ByteRobust does) holds the chain's end: it stands
    assert res.decided_by == "classes" and res.group is not None and res.group.kind == "pp"
    assert res.likely_culprits == (12,) and res.waits_for is not None and res.waits_for.suspect_ranks == (12,)


# --- captured hangs, PP = 4 ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("site", "suspects", "chain", "child"),
    [
        ("compute", (5,), "rank 0 → rank 1 → rank 3 → rank 5 (compute: _busy_or_sleep)", None),
        (
            "dataloader",
            (3,),
            "rank 6 → rank 7 → rank 5 → rank 3 (dataloader: _MultiProcessingDataLoaderIter._try_get_data)",
            "dataloader",
        ),
        (
            "checkpoint",
            (6,),
            "rank 1 → rank 0 → rank 2 → rank 4 → rank 6 (checkpoint: Checkpointer.wait_for_previous_save)",
            "checkpoint",
        ),
    ],
)
def test_captured_pp4_hang_is_named_through_the_chain(
    site: str, suspects: tuple[int, ...], chain: str, child: str | None
) -> None:
    paths = captured(site)
    classes_only = analyze_dumps(
        paths, layout=PP4, ranks_per_host=2, blame_options=BlameOptions(waits_for=False)
    )
    assert classes_only.ambiguous or set(classes_only.suspect_ranks) > set(suspects)  # today's answer
    rep = analyze_dumps(paths, layout=PP4, ranks_per_host=2)
    assert rep.status is Status.CRITICAL and rep.decided_by == "waits-for"
    assert rep.suspect_ranks == suspects and rep.likely_culprits == suspects
    assert rep.waits_for is not None and rep.waits_for.confidence == "high"
    assert [c.text for c in rep.waits_for.chains] == [chain]
    assert chain in rep.summary
    assert len(rep.over_eviction) == 1  # the stuck rank's machine, not the 4 of its PP group
    if child is not None:  # the data-loader worker / checkpoint writer of that rank is named too
        assert any(s.role.value == child and s.rank == suspects[0] for s in rep.suspects)


def test_captured_pp4_p2p_mismatch_is_a_deadlock_between_two_ranks() -> None:
    rep = analyze_dumps(captured("p2p"), layout=PP4, ranks_per_host=2)
    assert rep.status is Status.CRITICAL and rep.suspect_ranks == (5, 7)  # the fault was injected at 7
    assert rep.waits_for is not None and all(s.cycle for s in rep.waits_for.suspects)
    (ch,) = rep.waits_for.chains
    assert ch.text.startswith("rank 0 → rank 1 → rank 3 → rank 5 → rank 7 → rank 5 (deadlock:")
    assert "rank 7: Trainer.recv_forward with the previous stage" in ch.text


def test_unreadable_rank_is_the_suspect_when_every_readable_rank_waits(tmp_path: Path) -> None:
    for p in captured("compute"):
        if p.name != "rank5.dump":
            shutil.copy(p, tmp_path / p.name)
    shutil.copy(DATA / "crafted" / "rank5-suspend-eperm.dump", tmp_path / "rank5.dump")
    paths = sorted(tmp_path.glob("*.dump"))
    assert all_pyspy(paths)  # py-spy's error output is a dump of rank 5, not an unknown file
    rep = analyze_dumps(paths, layout=PP4, ranks_per_host=2)
    assert rep.suspect_ranks == (5,) and all(f.status is Status.OK for f in rep.inputs)
    (s,) = rep.suspects
    assert s.category is Category.UNREADABLE
    assert s.reason.startswith("py-spy could not suspend rank 5: EPERM (uninterruptible sleep?)")
    # a missing dump of the same rank: known absent from the layout's world size
    (tmp_path / "rank5.dump").unlink()
    rep = analyze_dumps(sorted(tmp_path.glob("*.dump")), layout=PP4, ranks_per_host=2)
    assert rep.suspect_ranks == (5,) and rep.suspects[0].reason.startswith("no dump for rank 5 of 8")
    # an empty file (py-spy killed by a timeout) is the failed dump of its rank
    (tmp_path / "rank5.dump").write_text("")
    rep = analyze_dumps(sorted(tmp_path.glob("*.dump")), layout=PP4, ranks_per_host=2)
    assert rep.suspect_ranks == (5,) and "empty dump" in rep.suspects[0].reason


@pytest.mark.parametrize("name", ["suspend-eperm-traced.dump", "suspend-eperm-traced-rust-backtrace.dump"])
def test_captured_suspend_eperm_rank_is_the_suspect_with_its_reason(tmp_path: Path, name: str) -> None:
    """py-spy 0.4.3's real output when it cannot stop the process (a captured dump: the process was held
    by another ptrace tracer; a process in uninterruptible sleep fails the same way)."""
    for p in captured("compute"):
        if p.name != "rank5.dump":
            shutil.copy(p, tmp_path / p.name)
    shutil.copy(DATA / "captured-errors" / name, tmp_path / "rank5.dump")
    rep = analyze_dumps(sorted(tmp_path.glob("*.dump")), layout=PP4, ranks_per_host=2)
    assert rep.suspect_ranks == (5,) and all(f.status is Status.OK for f in rep.inputs)
    (s,) = rep.suspects
    assert s.category is Category.UNREADABLE
    assert s.reason.startswith("py-spy could not suspend rank 5: EPERM (uninterruptible sleep?)"), s.reason


def test_without_layout_the_only_rank_outside_communication_is_named_with_low_confidence() -> None:
    rep = analyze_dumps(captured("compute"))
    assert rep.likely_culprits == (5,)  # the classes (half the ranks outliers) agree with the chains
    assert rep.waits_for is not None and rep.waits_for.confidence == "low"
    assert rep.waits_for.suspect_ranks == (5,)
    # the p2p deadlock has no rank outside a communication call: undecided without the layout
    p2p = analyze_dumps(captured("p2p"))
    assert p2p.waits_for is not None and not p2p.waits_for.decided
    assert "--layout" in (p2p.waits_for.undecided or "")


def test_complete_collective_is_undecided_and_says_why() -> None:
    # every rank in the same DP all-reduce with all its members: stuck inside the collective
    t = Topology(ParallelLayout(dp=8), 1)
    wf = analyze_waits(cluster([mk(r, DP_ALLREDUCE) for r in range(8)]), t)
    assert not wf.decided and wf.undecided is not None and "stuck inside the collective" in wf.undecided


def test_report_renders_the_chain_escaped() -> None:
    from io import StringIO

    from rich.console import Console

    rep = analyze_dumps(captured("compute"), layout=PP4, ranks_per_host=2)
    buf = StringIO()
    render_stacks(rep, Console(file=buf, width=200, no_color=True), verbose=True)
    out = buf.getvalue()
    assert "waits-for (confidence high) (decided the suspects):" in out
    assert "rank 0 → rank 1 → rank 3 → rank 5 (compute: _busy_or_sleep)" in out
    assert "rank 1: p2p: Trainer.recv_backward with the next stage" in out
    # markup in a frame name is shown as text, never interpreted
    evil = [*ROOT, SCHED, ("[bold red]x[/]", "/workspace/evil.py")]
    dumps = [mk(r, evil if r == 5 else DP_ALLREDUCE) for r in range(8)]
    buf = StringIO()
    from robustctl.stacks.result import analyze_stacks

    render_stacks(
        analyze_stacks(dumps, layout=ParallelLayout(dp=8), ranks_per_host=1), Console(file=buf, width=200)
    )
    assert "[bold red]x[/]" in buf.getvalue()


def test_pyspy_error_files_parse_as_failed_dumps_of_their_rank() -> None:
    expect = {
        "rank5-suspend-eperm.dump": (5, "Failed to suspend process (EPERM: Operation not permitted)"),
        "rank6-open-process.dump": (6, "Failed to open process - check if it is running. (No such process"),
        "rank7-docker-permission.dump": (7, "Permission Denied"),
        "rank8-timeout.dump": (8, "timeout: sending signal TERM to command 'py-spy'"),
    }
    for name, (rank, error) in expect.items():
        (d,) = parse_dump_file(DATA / "crafted" / name)
        assert d.rank == rank and d.error is not None and d.error.startswith(error) and not d.threads


# --- property ----------------------------------------------------------------------------------------------

STATES = [DP_ALLREDUCE, PP_RECV, COMPUTE, None]


@pytest.mark.fuzz
@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([(1, 4, 2), (2, 2, 2), (2, 4, 2), (1, 2, 4)]),
    st.data(),
)
def test_waits_for_contract_on_random_pictures(shape: tuple[int, int, int], data: st.DataObject) -> None:
    tp, pp, dp = shape
    t = Topology(ParallelLayout(tp=tp, pp=pp, dp=dp), 2)
    picks = data.draw(st.lists(st.sampled_from(STATES), min_size=t.world_size, max_size=t.world_size))
    dumps = []
    for r, path in enumerate(picks):
        if path is None:
            if data.draw(st.booleans()):
                dumps.append(ProcessDump((), rank=r, error="Failed to suspend process (EPERM: x)"))
            continue
        dumps.append(mk(r, path))
    if not dumps:
        return
    clusters = cluster(dumps)
    wf = analyze_waits(clusters, t)
    waiting = {r for r, p in enumerate(picks) if p in (DP_ALLREDUCE, PP_RECV)}
    if wf.decided:
        assert 1 <= len(wf.suspects) <= 4
        for s in wf.suspects:
            assert s.cycle or s.rank not in waiting  # a suspect waits only as part of a deadlock
        for ch in wf.chains:
            assert ch.hops and all(h.rank in range(t.world_size) for h in ch.hops)
    else:
        assert wf.undecided
    res = blame(clusters, t)  # never raises; a named suspect always has a reason
    assert all(s.reason for s in res.suspects)
