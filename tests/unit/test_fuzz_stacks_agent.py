"""Property-based tests of the stacks probe's debug-server path: whatever a rank's debug server or a
probe document hands the controller (any texts where the stacks go, any failure line), reading it
never raises: a stack, or one error line. Seeded and bounded by the ``ci`` profile (tests/conftest.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.probes import load_probe
from robustctl.stacks.collect import debug_threads, dumps_from_document, sources_from_document

pytestmark = pytest.mark.fuzz

LINES = st.sampled_from(
    [
        "Thread 0x00007f25cb011b80 (most recent call first):",
        'Thread 42 (idle): "MainThread"',
        '  File "/job/train.py", line 12 in all_reduce',
        "    all_reduce (train.py:12)",
        "    <module> (train.py:90)",
        '  File "/job/train.py", line 90 in <module>',
        "Process 42: python train.py",
        "Traceback (most recent call last):",
        "RuntimeError: boom",
        "",
    ]
)
TEXTS = st.none() | st.text(max_size=200) | st.lists(LINES | st.text(max_size=40), max_size=12).map("\n".join)


@given(traceback=TEXTS, pyspy=TEXTS, fr=TEXTS, other=st.sampled_from([None, 3, "x", [1], {"a": 1}]))
def test_a_debug_answer_gives_threads_or_one_error_line(
    traceback: Any, pyspy: Any, fr: Any, other: Any
) -> None:
    debug = {"traceback": traceback, "pyspy": pyspy, "fr_trace": fr, "errors": []}
    threads, error, used = debug_threads(debug)
    assert (error is None) == bool(threads)
    assert error is None or "\n" not in error
    assert used in (None, "pyspy_dump", "dump_traceback") and (used is None) == (error is not None)
    assert debug_threads(other)[1] is not None
    entry = {"pid": 7, "rank": 1, "role": "main", "source": "debug-server", "debug": debug}
    dumps, observer = dumps_from_document("n1", {"processes": [entry]})
    assert observer == [] and len(dumps) == 1 and (dumps[0].error is None) == (error is None)
    sources, traces = sources_from_document("n1", {"processes": [entry, other]})
    assert [s.source for s in sources] == ["debug-server"]
    assert len(traces) == (1 if isinstance(fr, str) and fr.strip() else 0)


@given(st.text(max_size=300))
def test_every_failure_line_has_one_of_the_three_reasons(line: str) -> None:
    probe = load_probe("stacks")
    assert probe.fallback_reason(line) in probe.FALLBACK_REASONS
