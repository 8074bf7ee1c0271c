"""py-spy parsing on real dumps (tests/data/pyspy, see SOURCE.md there) and crafted shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from robustctl.stacks.model import DumpParseError, ProcessRole
from robustctl.stacks.parse import (
    infer_role,
    looks_like_pyspy,
    parse_dump_file,
    parse_dump_text,
    parse_pyspy_json,
    parse_pyspy_text,
    rank_from_name,
    rank_from_text,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "pyspy"
FAIRSEQ = DATA / "fairseq-rank0-dataloader-hang-PARTIAL"
MIXTRAL = DATA / "mixtral-zero3-accelerate-8xh100-PARTIAL"
GLOO = DATA / "captured-gloo-4ranks"


def test_fairseq_old_hex_thread_id() -> None:
    (d,) = parse_dump_file(FAIRSEQ / "rank0.dump")
    assert d.rank == 0 and d.error is None and d.role is ProcessRole.MAIN
    (t,) = d.threads
    assert t.thread_id == "0x7FA6E7C01740" and t.name == "MainThread" and t.idle is True and t.active is False
    assert len(t.frames) == 12
    assert (t.frames[0].function, t.frames[0].file, t.frames[0].line) == ("wait", "threading.py", 302)
    assert t.frames[-1].function == "call_main"


def test_mixtral_header_and_multithread_dump() -> None:
    (p39,) = parse_dump_file(MIXTRAL / "rank_pid39.dump")
    assert p39.pid == 39 and p39.rank is None  # "rank_pid39": 39 is a PID, not a rank
    assert p39.cmdline is not None and p39.cmdline.startswith("/usr/bin/python3.10 -u src/")
    assert len(p39.threads) == 1 and len(p39.threads[0].frames) == 8
    (p42,) = parse_dump_file(MIXTRAL / "rank_pid42.dump")
    assert p42.pid == 42  # no header: the main thread's TID
    names = [t.name for t in p42.threads]
    assert names == ["MainThread", "Thread-1", None, None, None, None]
    assert [len(t.frames) for t in p42.threads] == [13, 5, 0, 0, 0, 6]
    active = p42.threads[-1]
    assert (
        active.active is True
        and active.idle is False
        and active.frames[0].function == "all_gather_into_tensor"
    )
    assert p42.main_thread is p42.threads[0]


def test_text_and_json_of_the_same_process_agree() -> None:
    for r in range(4):
        (t,) = parse_dump_file(GLOO / f"rank{r}.dump")
        (j,) = parse_dump_file(GLOO / f"rank{r}.json")
        assert t.rank == j.rank == r and t.pid == j.pid
        tf, jf = t.threads[0].frames, j.threads[0].frames
        assert [f.function for f in tf] == [f.function for f in jf]
        assert [f.file for f in tf] == [f.short_file or f.file for f in jf]
        assert [f.line for f in tf] == [f.line for f in jf]
    (j0,) = parse_dump_file(GLOO / "rank0.json")
    assert j0.threads[0].frames[0].file.endswith("site-packages/torch/distributed/distributed_c10d.py")
    assert j0.threads[0].owns_gil is False


def test_several_processes_in_one_file_and_roles() -> None:
    dumps = parse_dump_file(DATA / "captured-dataloader-worker-stuck" / "rank0-with-workers.dump")
    assert [d.pid for d in dumps] == [13621, 13622, 13593]
    assert [d.role for d in dumps] == [ProcessRole.DATALOADER, ProcessRole.DATALOADER, ProcessRole.MAIN]
    assert {d.rank for d in dumps} == {0}
    assert dumps[0].main_thread is not None and dumps[0].main_thread.frames[0].function == "D.__getitem__"
    assert all(len(d.threads) == 3 for d in dumps)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no-such-process-rust-backtrace.dump", "Failed to get process executable name"),
        ("no-such-process.dump", "No such file or directory (os error 2)"),
        ("not-python.dump", "Failed to find python version"),
        ("permission-denied.dump", "Permission Denied"),
        ("suspend-eperm-traced.dump", "Failed to get stack traces: Failed to suspend process (EPERM"),
        (
            "suspend-eperm-traced-rust-backtrace.dump",
            "Failed to suspend process (EPERM: Operation not permitted)",
        ),
    ],
)
def test_pyspy_error_output_is_an_unreadable_process(name: str, message: str) -> None:
    (d,) = parse_dump_file(DATA / "captured-errors" / name)
    assert d.error is not None and message in d.error
    assert d.threads == () and not d.readable and d.main_thread is None
    assert "backtrace" not in d.error.lower() and "anyhow" not in d.error


def test_crafted_old_format_locals_fence_two_processes() -> None:
    dumps = parse_dump_file(DATA / "crafted" / "old-format-two-processes.dump")
    assert len(dumps) == 2
    first, second = dumps
    assert first.rank == second.rank == 5  # "RANK=5" in the text
    assert [t.name for t in first.threads] == ["MainThread", "Thread-2"]
    main = first.threads[0]
    assert main.owns_gil is True and main.active is True
    assert [f.function for f in main.frames] == ["all_reduce", "train_step", "main", "<module>"]
    assert second.role is ProcessRole.DATALOADER


def test_crafted_headerless_cut_stack() -> None:
    (d,) = parse_dump_file(DATA / "crafted" / "headerless-truncated.dump")
    (t,) = d.threads
    assert t.thread_id == "?" and t.name is None
    assert [f.function for f in t.frames] == ["compute", "forward", "_call_impl", "train_step"]
    assert d.main_thread is t


def test_crafted_json_lines_records() -> None:
    ok, bad = parse_dump_file(DATA / "crafted" / "jsonl-records.jsonl")
    assert (ok.rank, ok.host, ok.pid, ok.role) == (7, "node07", 4242, ProcessRole.MAIN)
    assert ok.threads[0].frames[0].short_file == "torch/distributed/distributed_c10d.py"
    assert (bad.rank, bad.state, bad.error) == (8, "D", "timed out after 10 s (process in D state)")


def test_parse_pyspy_json_shapes_and_errors() -> None:
    threads = parse_pyspy_json(
        [
            {
                "thread_id": 5,
                "thread_name": "MainThread",
                "active": True,
                "frames": [{"name": "f", "filename": "a.py", "line": 3}],
            }
        ]
    )
    assert threads[0].thread_id == "5" and threads[0].frames[0].line == 3 and threads[0].idle is False
    single = parse_pyspy_json({"os_thread_id": 9, "frames": []})
    assert single[0].thread_id == "9" and single[0].name is None
    for bad in ("x", 3, [1], [{"frames": "no"}], [{"frames": [{"filename": "a.py"}]}]):
        with pytest.raises(DumpParseError):
            parse_pyspy_json(bad)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n\n",
        "hello world\nthis is not a dump\n",
        "Note (see above)\nSomething (else here)\n",
        '{"n_ranks_total": 32}',
        "[1, 2, 3]",
        '[{"frames": [',
    ],
)
def test_garbage_raises_dump_parse_error(text: str) -> None:
    with pytest.raises(DumpParseError):
        parse_dump_text(text)


def test_garbage_file_and_missing_file(tmp_path: Path) -> None:
    (tmp_path / "bin.txt").write_bytes(b"\x00\x01\x02")
    with pytest.raises(DumpParseError, match="binary"):
        parse_dump_file(tmp_path / "bin.txt")
    with pytest.raises(DumpParseError, match="cannot read"):
        parse_dump_file(tmp_path / "missing.txt")
    with pytest.raises(DumpParseError, match="EXPECTED.json: not a py-spy dump"):
        parse_dump_file(FAIRSEQ / "EXPECTED.json")


def test_rank_from_name_and_text() -> None:
    assert rank_from_name("dumps/rank12.txt") == 12
    assert rank_from_name("rank_12.json") == 12
    assert rank_from_name("RANK-3.txt") == 3
    assert rank_from_name("dump-r12.txt") == 12
    assert rank_from_name("node01.r7.txt") == 7
    assert rank_from_name("rank_pid39.dump") is None
    assert rank_from_name("worker.txt") is None
    assert rank_from_text("env: RANK=4 LOCAL_RANK=0") == 4
    assert rank_from_text("LOCAL_RANK=2") is None
    assert rank_from_text("RANK=1 ... RANK=2") is None


def test_rank_precedence_text_over_file_name(tmp_path: Path) -> None:
    p = tmp_path / "rank3.txt"
    p.write_text('RANK=9\nThread 1 (idle): "MainThread"\n    f (a.py:1)\n')
    (d,) = parse_dump_file(p)
    assert d.rank == 9
    (d2,) = parse_pyspy_text('Thread 1 (idle): "MainThread"\n    f (a.py:1)\n', rank=4)
    assert d2.rank == 4


def test_native_frames_without_line() -> None:
    (d,) = parse_pyspy_text(
        'Thread 7 (active): "MainThread"\n'
        "    ncclAllReduce (libnccl.so.2)\n"
        "    c10d::ProcessGroupNCCL::allreduce(std::vector<at::Tensor>&) (libtorch_cuda.so)\n"
        "    all_reduce (torch/distributed/distributed_c10d.py:2050)\n"
    )
    frames = d.threads[0].frames
    assert frames[0].line is None and frames[0].file == "libnccl.so.2"
    assert frames[1].function.startswith("c10d::ProcessGroupNCCL::allreduce(")
    assert frames[2].line == 2050


def test_sniff() -> None:
    for p in [
        FAIRSEQ / "rank0.dump",
        MIXTRAL / "rank_pid39.dump",
        GLOO / "rank1.json",
        DATA / "crafted" / "headerless-truncated.dump",
        DATA / "captured-errors" / "permission-denied.dump",
        DATA / "captured-errors" / "no-such-process.dump",
    ]:
        assert looks_like_pyspy(p.read_text()), p
    for text in [
        "",
        "NVRM: Xid (PCI:0000:3b:00): 79",
        "#  out-of-place in-place\n",
        json.dumps({"a": 1}),
        "foo (bar)\n",
    ]:
        assert not looks_like_pyspy(text)


def test_infer_role() -> None:
    dumps = parse_dump_file(DATA / "captured-dataloader-worker-stuck" / "rank0-with-workers.dump")
    assert infer_role(dumps[0].threads) is ProcessRole.DATALOADER
    assert infer_role(dumps[2].threads) is ProcessRole.MAIN
    assert infer_role(()) is ProcessRole.MAIN
    ckpt = parse_pyspy_text(
        'Thread 1 (idle): "MainThread"\n'
        "    write (torch/serialization.py:600)\n"
        "    save (torch/serialization.py:650)\n"
        "    _writer (megatron/async_ckpt.py:20)\n"
        "    run (multiprocessing/process.py:108)\n"
        "    _bootstrap (multiprocessing/process.py:314)\n"
    )[0]
    assert ckpt.role is ProcessRole.CHECKPOINT
    # a rank process that saves a checkpoint itself stays MAIN
    own = parse_pyspy_text(
        'Thread 1 (idle): "MainThread"\n    save (torch/serialization.py:650)\n    <module> (train.py:3)\n'
    )[0]
    assert own.role is ProcessRole.MAIN
    other = parse_pyspy_text(
        'Thread 1 (idle): "MainThread"\n    compile (inductor/worker.py:5)\n    _bootstrap (multiprocessing/process.py:314)\n'
    )[0]
    assert other.role is ProcessRole.OTHER
