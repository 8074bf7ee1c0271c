"""faulthandler dumps and Python exception texts as stacks evidence (robustctl.stacks.faulthandler):
real dumps from real processes, the forms of CPython's ``Python/traceback.c``, and exception texts
read as a rank's error."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from robustctl.stacks.cluster import categorize
from robustctl.stacks.faulthandler import (
    looks_like_exception,
    looks_like_faulthandler,
    looks_like_traceback,
    parse_traceback_text,
)
from robustctl.stacks.model import DumpParseError
from robustctl.stacks.parse import looks_like_pyspy

DATA = Path(__file__).resolve().parents[1] / "data"

CHILD = textwrap.dedent(
    """
    import faulthandler, signal, sys, threading, time

    def helper_loop(ev, main_id):
        # "ready" only once the main thread waits in blocked_here's Event.wait (not in the wait of
        # Thread.start that runs first), so a signal sent on "ready" finds it there
        while True:
            frame, names = sys._current_frames()[main_id], []
            while frame is not None:
                names.append(frame.f_code.co_name)
                frame = frame.f_back
            if names[0] == "wait" and "blocked_here" in names:
                break
            time.sleep(0.01)
        print("ready", flush=True)
        ev.wait()

    def blocked_here(ev):
        ev.wait()

    ev = threading.Event()
    out = open(sys.argv[1], "w")
    faulthandler.register(signal.SIGUSR1, file=out, all_threads=True)
    threading.Thread(
        target=helper_loop, args=(ev, threading.get_ident()), name="helper", daemon=True
    ).start()
    blocked_here(ev)
    """
)


def _signalled_dump(tmp_path: Path, times: int) -> str:
    """What a real process blocked in ``blocked_here`` writes on ``times`` SIGUSR1 (faulthandler.register)."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    out = tmp_path / "rank7.txt"
    with subprocess.Popen([sys.executable, str(script), str(out)], stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            text = ""
            for n in range(1, times + 1):
                os.kill(proc.pid, signal.SIGUSR1)
                end = time.monotonic() + 30
                # the main thread is written last and ends with its <module> frame: a whole dump
                while text.count("in <module>") < n and time.monotonic() < end:
                    time.sleep(0.02)
                    text = out.read_text()
            assert text.count("blocked_here") == times, text
            return text
        finally:
            proc.kill()
            proc.wait(timeout=30)


def test_a_real_sigusr1_dump_of_every_thread_parses_like_a_pyspy_dump(tmp_path: Path) -> None:
    text = _signalled_dump(tmp_path, times=1)
    assert looks_like_faulthandler(text) and not looks_like_pyspy(text) and not looks_like_exception(text)
    (d,) = parse_traceback_text(text, source="rank7.txt", rank=7).dumps
    assert d.rank == 7 and d.error is None and d.source == "rank7.txt"
    assert len(d.threads) == 2
    main = d.main_thread
    assert main is not None and main.name == "MainThread"
    # innermost first, as py-spy's: the wait, then the function that called it, then the module
    funcs = [f.function for f in main.frames]
    assert funcs[-2:] == ["blocked_here", "<module>"] and funcs[0] == "wait"
    assert main.frames[-1].line is not None and main.frames[-1].file.endswith("child.py")
    helper = next(t for t in d.threads if t.name is None)
    assert "helper_loop" in [f.function for f in helper.frames]
    assert helper.frames[-1].function == "_bootstrap"


def test_the_agents_file_of_several_signals_gives_the_last_dump(tmp_path: Path) -> None:
    text = _signalled_dump(tmp_path, times=3)
    (d,) = parse_traceback_text(text, rank=7).dumps
    assert len(d.threads) == 2  # one dump's threads, not three dumps run together


def test_a_real_fatal_error_dump_is_the_ranks_stack_with_a_note(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "faulthandler",
            "-c",
            "import faulthandler\ndef crash():\n faulthandler._sigsegv()\ncrash()",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0 and "Fatal Python error" in proc.stderr
    parsed = parse_traceback_text(proc.stderr, source="rank2.err", rank=2)
    (d,) = parsed.dumps
    assert d.error is None and d.main_thread is not None
    assert [f.function for f in d.main_thread.frames][:2] == ["crash", "<module>"]
    assert parsed.notes and parsed.notes[0].startswith("rank 2: Fatal Python error: Segmentation fault")


def test_the_single_thread_form_and_markers() -> None:
    text = (
        "Stack (most recent call first):\n"
        '  File "/job/train.py", line 12 in step\n'
        '  File "/job/train.py", line 30 in <module>\n'
    )
    (d,) = parse_traceback_text(text, rank=1).dumps
    assert [f.function for f in d.threads[0].frames] == ["step", "<module>"]
    assert d.threads[0].name == "MainThread"
    text = (
        "Timeout (0:00:05)!\n"
        "Thread 0x00007f0000000002 (most recent call first):\n"
        "  <no Python frame>\n\n"
        "Thread 0x00007f0000000001 (most recent call first):\n"
        '  File "???", line ??? in ???\n'
        "  ...\n"
    )
    (d,) = parse_traceback_text(text, rank=1).dumps
    assert [len(t.frames) for t in d.threads] == [0, 1]
    assert d.threads[1].frames[0].line is None
    assert d.main_thread is d.threads[1]  # the last listed: CPython lists the newest thread first


def test_an_exception_text_is_the_ranks_error() -> None:
    text = textwrap.dedent(
        """\
        step 12 loss 3.2
        Traceback (most recent call last):
          File "/job/train.py", line 130, in <module>
            main()
          File "/job/train.py", line 88, in train_step
            dist.all_reduce(grads)
            ^^^^^^^^^^^^^^^^^^^^^^
        torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error
        Last error:
        Cuda failure 'an illegal memory access was encountered'
        """
    )
    assert looks_like_exception(text) and looks_like_traceback(text) and not looks_like_faulthandler(text)
    (d,) = parse_traceback_text(text, source="rank3.log", rank=3).dumps
    assert d.rank == 3 and not d.threads
    assert d.error == (
        "exception: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
        "unhandled cuda error (at train.py:88 in train_step)"
    )
    assert categorize(()).value  # an error process carries no frames to categorize


def test_rank_prefixed_lines_are_each_ranks_and_the_last_exception_wins() -> None:
    text = textwrap.dedent(
        """\
        [rank0]: Traceback (most recent call last):
        [rank1]: Traceback (most recent call last):
        [rank0]:   File "/job/train.py", line 5, in <module>
        [rank1]:   File "/job/train.py", line 5, in <module>
        [rank0]: ValueError: first
        [rank1]: RuntimeError: NCCL communicator was aborted
        [rank0]:
        [rank0]: During handling of the above exception, another exception occurred:
        [rank0]:
        [rank0]: Traceback (most recent call last):
        [rank0]:   File "/job/train.py", line 9, in <module>
        [rank0]: KeyError: 'second'
        """
    )
    dumps = parse_traceback_text(text, rank=None).dumps
    assert {d.rank: d.error for d in dumps} == {
        0: "exception: KeyError: 'second' (at train.py:9 in <module>)",
        1: "exception: RuntimeError: NCCL communicator was aborted (at train.py:5 in <module>)",
    }


def test_a_dump_after_an_exception_wins_and_the_other_way_round() -> None:
    exc = 'Traceback (most recent call last):\n  File "a.py", line 1, in f\nOSError: gone\n'
    dump = 'Stack (most recent call first):\n  File "a.py", line 2 in g\n'
    (d,) = parse_traceback_text(exc + dump).dumps
    assert d.error is None and d.threads[0].frames[0].function == "g"
    (d,) = parse_traceback_text(dump + exc).dumps
    assert d.error is not None and d.error.startswith("exception: OSError: gone")


@pytest.mark.parametrize(
    "path",
    sorted(
        p
        for sub in ("pyspy", "kernel-log", "nccl-tests", "dcgm")
        for p in (DATA / sub).rglob("*")
        if p.is_file()
    ),
    ids=lambda p: p.relative_to(DATA).as_posix(),
)
def test_other_artefacts_are_not_faulthandler_dumps(path: Path) -> None:
    text = path.read_bytes()[: 256 * 1024].decode("utf-8", errors="replace")
    assert not looks_like_faulthandler(text), path


def test_text_without_either_form_is_refused() -> None:
    for text in ("", "just words\n", "Traceback (most recent call last):\nno frame here\n"):
        with pytest.raises(DumpParseError):
            parse_traceback_text(text)
