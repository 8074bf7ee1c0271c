"""Property-based test of the log scan's launch marker: whatever a log held before the newest
``[robustctl] launch`` line, the scan of the whole log finds what the scan of the text after that
line alone finds (same verdict, findings and counts). Seeded and bounded by the ``ci`` profile
(tests/conftest.py); each case is a few kilobytes of text."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from robustctl.watch.logscan import LAUNCH_MARKER, scan_log

pytestmark = pytest.mark.fuzz

CRASH_LINES = [
    "Traceback (most recent call last):",
    '  File "train.py", line 3, in <module>',
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "[rank1]: RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1, unhandled system error",
    "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "step 7 loss 1.25",
]
_line = st.sampled_from(CRASH_LINES) | st.text(max_size=80)
_log = st.lists(_line, max_size=30).map("\n".join)


@given(before=_log, after=_log)
def test_what_precedes_the_newest_launch_marker_is_not_scanned(before: str, after: str) -> None:
    assume(not any(ln.startswith(LAUNCH_MARKER) for ln in after.splitlines()))
    whole = scan_log(f"{before}\n{LAUNCH_MARKER}2026-01-01T00:00:00Z: new process\n{after}")
    alone = scan_log(after)
    assert whole.verdict == alone.verdict
    assert whole.findings == alone.findings
    assert whole.counts == alone.counts
