"""Property-based tests of the faulthandler and exception-text parser (robustctl.stacks.faulthandler):
any text either parses or raises ``DumpParseError`` (never anything else), what it keeps is bounded by
the module's constants, and a generated well-formed faulthandler dump or exception traceback parses
back to its threads, frames (innermost first) and rank. Seeded and bounded by the ``ci`` profile
(tests/conftest.py).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.stacks import faulthandler as fh
from robustctl.stacks.model import DumpParseError

pytestmark = pytest.mark.fuzz

LINES = st.sampled_from(
    [
        "Thread 0x00007f25f7e1d6c0 (most recent call first):",
        "Current thread 0x00007f25f88b7b80 (most recent call first):",
        "Stack (most recent call first):",
        "Fatal Python error: Segmentation fault",
        "Timeout (0:00:05)!",
        '  File "/job/train.py", line 12 in step',
        '  File "/job/train.py", line 12, in step',
        "  File ???, line ??? in ???",
        "  <no Python frame>",
        "  ...",
        "Traceback (most recent call last):",
        "    dist.all_reduce(x)",
        "    ^^^^^^^^^^^^^^^^^^",
        "RuntimeError: NCCL error",
        "torch.distributed.DistBackendError: " + "x" * 400,
        "KeyboardInterrupt",
        "",
        "[rank3]: Traceback (most recent call last):",
        '[rank3]:   File "/job/train.py", line 7, in <module>',
        "[rank3]: ValueError: bad",
        "[rank12]: Thread 0x1 (most recent call first):",
        '[rank12]:   File "a.py", line 1 in f',
        "random log line: step 12 loss 3.2",
    ]
)


@given(lines=st.lists(LINES | st.text(max_size=40), max_size=60))
def test_any_text_parses_or_raises_the_documented_error(lines: list[str]) -> None:
    text = "\n".join(lines)
    fh.looks_like_traceback(text)
    try:
        parsed = fh.parse_traceback_text(text, source="fuzz/rank5.txt", rank=5)
    except DumpParseError as exc:
        assert "\n" not in str(exc)
        return
    assert parsed.dumps
    for d in parsed.dumps:
        assert (d.error is None) == bool(d.threads)  # a dump's threads, or an exception's error
        assert len(d.threads) <= fh.MAX_THREADS_PER_DUMP
        assert all(len(t.frames) <= fh.MAX_FRAMES_PER_THREAD for t in d.threads)
        assert sum(t.name == "MainThread" for t in d.threads) == (1 if d.threads else 0)
        if d.error is not None:
            assert "\n" not in d.error and d.error.startswith("exception: ")
        assert d.rank in (5, 3, 12)


def test_a_long_line_of_spaces_is_linear() -> None:
    # the exception-line and frame patterns must not backtrack quadratically on a long line
    text = (
        "Traceback (most recent call last):\n"
        + '  File "a.py", line 1, in f\n'
        + "E:"
        + " " * 200_000
        + "x\n"
    )
    (d,) = fh.parse_traceback_text(text).dumps
    assert d.error is not None and len(d.error) <= fh.MAX_ERROR_CHARS + 40


IDENT = st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True)
FRAME = st.tuples(
    st.from_regex(r"/[a-z]{1,6}(/[a-z_]{1,6}){0,3}\.py", fullmatch=True), st.integers(1, 10**5), IDENT
)


@given(
    threads=st.lists(st.lists(FRAME, min_size=1, max_size=8), min_size=1, max_size=6),
    current=st.integers(0, 5),
    rank=st.none() | st.integers(0, 4095),
)
def test_generated_faulthandler_dumps_parse_back(
    threads: list[list[tuple[str, int, str]]], current: int, rank: int | None
) -> None:
    blocks = []
    for i, frames in enumerate(threads):
        head = "Current thread" if i == current else "Thread"
        body = "\n".join(f'  File "{f}", line {n} in {fn}' for f, n, fn in frames)
        blocks.append(f"{head} 0x{0x7F0000000000 + i:016x} (most recent call first):\n{body}\n")
    text = "\n".join(blocks)
    assert fh.looks_like_faulthandler(text) and not fh.looks_like_exception(text)
    (d,) = fh.parse_traceback_text(text, source="x", rank=rank).dumps
    assert d.rank == rank and d.error is None
    assert [[(f.file, f.line, f.function) for f in t.frames] for t in d.threads] == threads
    assert [t.thread_id for t in d.threads] == [f"0x{0x7F0000000000 + i:016x}" for i in range(len(threads))]
    main = [i for i, t in enumerate(d.threads) if t.name == "MainThread"]
    assert len(main) == 1
    # twice in a row (as the agent appends one dump per signal): the last one, not both
    (again,) = fh.parse_traceback_text(text + text, rank=rank).dumps
    assert len(again.threads) == len(threads)


@given(
    frames=st.lists(FRAME, min_size=1, max_size=8),
    name=st.from_regex(r"[A-Z][a-zA-Z]{0,12}(Error|Exception)", fullmatch=True),
    msg=st.from_regex(r"[a-zA-Z0-9 :,.]{0,60}", fullmatch=True),
    rank=st.integers(0, 4095),
    prefixed=st.booleans(),
)
def test_generated_exception_texts_name_the_rank_and_error(
    frames: list[tuple[str, int, str]], name: str, msg: str, rank: int, prefixed: bool
) -> None:
    lines = ["Traceback (most recent call last):"]
    for f, n, fn in frames:
        lines += [f'  File "{f}", line {n}, in {fn}', "    call()"]
    lines.append(f"{name}: {msg}" if msg.strip() else name)
    pre = f"[rank{rank}]: " if prefixed else ""
    text = "\n".join(pre + ln for ln in lines) + "\n"
    assert fh.looks_like_exception(text)
    (d,) = fh.parse_traceback_text(text, rank=None if prefixed else rank).dumps
    assert d.rank == rank and not d.threads
    assert d.error is not None and d.error.startswith(f"exception: {name}")
    f, n, fn = frames[-1]
    assert d.error.endswith(f"(at {f.rsplit('/', 1)[-1]}:{n} in {fn})")
