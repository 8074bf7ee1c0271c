"""Explicit errors in a bounded tail of one rank's log: the cause of a crash and its evidence line.

:func:`scan_log` reads at most :data:`MAX_TAIL_BYTES` (the newest), at most :data:`MAX_LINES` lines
(the newest), each cut to :data:`MAX_LINE_CHARS` characters, with ANSI colour sequences removed, only
the lines after the newest :data:`LAUNCH_MARKER` line (the launch probe writes one before each process
it starts in a log appended to across launches: a former launch's crash is history), and looks for,
in this order of precedence (:data:`CAUSE_PRIORITY`):

* ``xid``: an NVIDIA ``NVRM: Xid (PCI:…): N, …`` line (parsed by :mod:`robustctl.analysis.xid`); fatal
  when the catalog's verdict is CRITICAL (evict or reset the GPU);
* ``oom``: ``CUDA out of memory`` / ``torch.OutOfMemoryError`` / ``CUDA error: out of memory`` (the GPU),
  or the kernel's ``Out of memory: Killed process PID (NAME)`` (the host);
* ``cuda-error``: ``CUDA error: …`` (an illegal memory access, a device-side assert, a launch
  failure …), ``cuda runtime error (N) : …``, a kernel ``Assertion `…` failed`` from a ``.cu`` file,
  ``CUBLAS_STATUS_…`` / ``CUDNN_STATUS_…``;
* ``nccl-timeout``: ProcessGroupNCCL's ``Watchdog caught collective operation timeout: WorkNCCL(…) ran
  for N milliseconds``; its status lines (``… detected by watchdog at work: N, last enqueued NCCL work:
  …, last completed NCCL work: …`` and the newer ``failure detected by watchdog at work sequence id: N
  PG status: last enqueued work: …, last completed work: …``) are kept as context (not fatal alone);
* ``nccl-error``: ``ncclSystemError`` / ``ncclInternalError`` / ``ncclRemoteError`` /
  ``ncclUnhandledCudaError`` / ``ncclInvalidUsage`` / ``ncclInvalidArgument``, ``NCCL error in: …``,
  ``Some NCCL operations have failed or timed out``; a ``NCCL WARN`` line is kept as context (cause
  ``nccl-warn``, not fatal: NCCL also warns about things it recovers from, e.g. a bind retry);
* ``python-exception``: the last ``Traceback (most recent call last):`` block's exception line
  (``SomeError: message``), rank prefixes (``[rank3]:``, ``[default0]:``, ``0: ``) removed.

The crash verdict names the first fatal finding of the highest-precedence cause (the last one for a
Python exception): a hardware or resource cause explains the errors that follow it (a CUDA error
makes the peers' collectives time out; every error ends in a Python exception), so the more specific
cause wins whatever the order. What a log shows is not the whole story: a traceback in the log of a
rank that is still running may have been caught and logged; the controller weighs the verdict with
the ranks' liveness.

Every pattern is a plain regular expression without nested repetition, applied to a cut line, so the
work per line is linear in :data:`MAX_LINE_CHARS`; lines are filtered by substring before any pattern
runs. :func:`scan_log` never raises on any input.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from robustctl.analysis.xid import parse_kernel_log
from robustctl.models import Status
from robustctl.watch.rules import MAX_EVIDENCE_CHARS, Scalar, SignalClass, Verdict

__all__ = [
    "CAUSE_CUDA",
    "CAUSE_NCCL_ERROR",
    "CAUSE_NCCL_TIMEOUT",
    "CAUSE_NCCL_WARN",
    "CAUSE_OOM",
    "CAUSE_PRIORITY",
    "CAUSE_PYTHON",
    "CAUSE_XID",
    "LAUNCH_MARKER",
    "MAX_DETAIL_CHARS",
    "MAX_LINES",
    "MAX_LINE_CHARS",
    "MAX_TAIL_BYTES",
    "SOURCES",
    "LogFinding",
    "LogScan",
    "scan_log",
]

LAUNCH_MARKER = "[robustctl] launch "
"""The start of the line the node-side ``launch`` probe (``diagnostics/launch.py``, same constant) writes
to a log before it starts a process there: what precedes the newest one is an earlier launch's."""

MAX_TAIL_BYTES = 256 * 1024
"""Most bytes of a log's tail read (the newest; for text, characters): a crash's evidence sits in the
last few hundred lines (the Python traceback, ProcessGroupNCCL's watchdog report with its C++ frames,
about 10 KB per rank in PyTorch 2.x, NCCL's WARN lines); 256 KiB holds that with room for
interleaved progress output, and bounds the work per rank per evaluation on a job of thousands of
ranks (our choice)."""
MAX_LINES = 16_384
"""Most lines of the tail examined (the newest): bounds the per-line loop whatever the line lengths;
256 KiB of 16-character lines."""
MAX_LINE_CHARS = 4096
"""Longest line examined, in characters (longer lines are cut, the start kept: an error message starts
its line); the same bound as the progress signal's log lines (:mod:`robustctl.jobcode.progress`)."""
MAX_DETAIL_CHARS = 200
"""Longest text detail taken from a line (an exception message, a CUDA error text, a WorkNCCL
description): enough for the message, small in a stored decision."""

CAUSE_XID = "xid"
CAUSE_OOM = "oom"
CAUSE_CUDA = "cuda-error"
CAUSE_NCCL_TIMEOUT = "nccl-timeout"
CAUSE_NCCL_ERROR = "nccl-error"
CAUSE_NCCL_WARN = "nccl-warn"
CAUSE_PYTHON = "python-exception"
CAUSE_PRIORITY: tuple[str, ...] = (
    CAUSE_XID,
    CAUSE_OOM,
    CAUSE_CUDA,
    CAUSE_NCCL_TIMEOUT,
    CAUSE_NCCL_ERROR,
    CAUSE_PYTHON,
)
"""Fatal causes, most specific first (our choice): a GPU the driver gave up on explains everything
after it; running out of memory explains the CUDA error that reports it; a CUDA error on one rank makes
its peers' collectives time out; a timeout is more specific than an NCCL error code (which a timeout or
a peer's exit also produces); and every error ends in a Python exception."""

SOURCES: dict[str, str] = {
    CAUSE_XID: (
        "NVIDIA Xid catalog (docs.nvidia.com/deploy/xid-errors, 'Analyzing Xid Errors with the Xid "
        "Catalog') as robustctl.analysis.xid classifies it: CRITICAL (evict, reset GPU) is fatal"
    ),
    CAUSE_OOM: (
        "PyTorch's CUDA caching allocator ('CUDA out of memory. Tried to allocate ...', raised as "
        "torch.OutOfMemoryError); the Linux OOM killer ('Out of memory: Killed process PID (NAME)', "
        "mm/oom_kill.c)"
    ),
    CAUSE_CUDA: (
        "CUDA errors as PyTorch raises them ('CUDA error: ' + cudaGetErrorString, c10/cuda); NVIDIA "
        "CUDA Runtime API, cudaErrorIllegalAddress / cudaErrorAssert: the process is left in an "
        "inconsistent state and must be terminated and relaunched to use CUDA again"
    ),
    CAUSE_NCCL_TIMEOUT: (
        "PyTorch ProcessGroupNCCL.cpp watchdog: '[Rank N] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=..., OpType=..., Timeout(ms)=...) ran for N milliseconds before timing out', "
        "after which it takes the process down"
    ),
    CAUSE_NCCL_ERROR: (
        "PyTorch NCCLUtils (getNcclErrorDetailStr: 'ncclSystemError: ...', 'ncclRemoteError: ...', "
        "'ncclInternalError: ...'; 'NCCL error in: FILE:LINE, ...') and ProcessGroupNCCL ('Some NCCL "
        "operations have failed or timed out')"
    ),
    CAUSE_NCCL_WARN: "NCCL's own 'NCCL WARN' lines (NCCL_DEBUG=WARN or INFO): context, not a cause alone",
    CAUSE_PYTHON: (
        "Python's traceback format (the traceback module): 'Traceback (most recent call last):', "
        "indented frames, then the exception line 'Type: message'"
    ),
}
"""Source of each cause's patterns."""


@dataclass(frozen=True)
class LogFinding:
    """One error line found in a log tail.

    Attributes:
        cause: one of the ``CAUSE_*`` names.
        line_no: 1-based number of the line within the tail examined.
        line: the line (ANSI sequences removed, cut to :data:`~robustctl.watch.rules.MAX_EVIDENCE_CHARS`).
        fatal: whether the finding alone explains a crash.
        detail: what was read from the line, as ``(name, value)`` pairs (e.g. ``("xid", 79)``,
            ``("exception", "RuntimeError")``); text cut at :data:`MAX_DETAIL_CHARS`.
    """

    cause: str
    line_no: int
    line: str
    fatal: bool
    detail: tuple[tuple[str, Scalar], ...] = ()


@dataclass(frozen=True)
class LogScan:
    """What :func:`scan_log` found.

    Attributes:
        verdict: a :attr:`~robustctl.watch.rules.SignalClass.CRASH` verdict (rule ``log.<cause>``,
            ``cause`` set) when a fatal finding exists, else ``None``.
        findings: per cause, its first fatal finding (else its first one); for ``python-exception``,
            the last traceback's; in line order (at most one per cause).
        counts: ``(cause, lines)`` for every cause seen (tracebacks for ``python-exception``).
        bytes_read: bytes (characters for text) of the tail examined. lines_read: lines examined.
        cut: the input held more than :data:`MAX_TAIL_BYTES` or :data:`MAX_LINES` (its oldest part was
            not examined), or a line was longer than :data:`MAX_LINE_CHARS`.
    """

    verdict: Verdict | None
    findings: tuple[LogFinding, ...]
    counts: tuple[tuple[str, int], ...]
    bytes_read: int
    lines_read: int
    cut: bool


_ANSI_RE = re.compile(r"\x1b\[[0-9;?]{0,32}[A-Za-z]")
_PID_PREFIX_RE = re.compile(r"\[\d{1,9}\] ")
_RANK_PREFIX_RE = re.compile(r"\[(?:[Rr]ank|default)\d{1,7}\]: ?|\d{1,7}: ")
_EXC_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,199}")
_CUDA_OOM_RE = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory")
_ALLOC_RE = re.compile(r"Tried to allocate (\d{1,12}(?:\.\d{1,4})? ?[KMGTP]?i?B)")
_GPU_RE = re.compile(r"\(GPU (\d{1,4});|GPU (\d{1,4}) has a total capacity")
_HOST_OOM_RE = re.compile(r"[Oo]ut of memory: Kill(?:ed)? process (\d{1,10}) \(([^)\r\n]{0,64})\)")
_CUDA_ERROR_RE = re.compile(r"CUDA error: ([^\r\n]{1,200})")
_CUDA_RUNTIME_RE = re.compile(r"cuda runtime error \((\d{1,6})\) : ([^\r\n]{1,200})")
_CUDA_LIB_RE = re.compile(r"\b((?:CUBLAS|CUDNN|CUSOLVER|CUFFT)_STATUS_[A-Z_]{1,60})")
_WATCHDOG_RE = re.compile(
    r"Watchdog caught collective operation timeout: (WorkNCCL\([^\r\n]{0,400}?\)) ran for (\d{1,15}) milliseconds"
)
_WATCHDOG_STATUS_RE = re.compile(
    r"detected by watchdog at work: (-?\d{1,20}), last enqueued NCCL work: (-?\d{1,20}), "
    r"last completed NCCL work: (-?\d{1,20})"
)
_WATCHDOG_PG_STATUS_RE = re.compile(
    r"failure detected by watchdog at work sequence id: (-?\d{1,20}) PG status: last enqueued work: (-?\d{1,20}), "
    r"last completed work: (-?\d{1,20})"
)
_SEQ_RE = re.compile(r"SeqNum=(\d{1,20})")
_OPTYPE_RE = re.compile(r"OpType=([A-Za-z_]{1,40})")
_TIMEOUT_MS_RE = re.compile(r"Timeout\(ms\)=(\d{1,15})")
_RANK_RE = re.compile(r"\[Rank (\d{1,7})\]")
_NCCL_CODE_RE = re.compile(
    r"\b(ncclSystemError|ncclInternalError|ncclRemoteError|ncclUnhandledCudaError|ncclInvalidUsage"
    r"|ncclInvalidArgument)\b"
)
_NCCL_ERROR_IN_RE = re.compile(r"NCCL error in: ([^,\s]{1,300}), ([^\r\n]{1,200})")
_NCCL_ERROR_RE = re.compile(r"NCCL error: ([^\r\n]{1,200})")
_NCCL_WARN_RE = re.compile(r"NCCL WARN ([^\r\n]{0,400})")
_TRACEBACK = "Traceback (most recent call last):"


def _detail_text(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_DETAIL_CHARS else text[: MAX_DETAIL_CHARS - 1] + "…"


def _strip_prefix(line: str) -> str:
    """``line`` without a launcher's prefix: ``[PID] ``, then ``[rankN]:``, ``[defaultN]:`` or ``N: ``."""
    m = _PID_PREFIX_RE.match(line)
    if m is not None:
        line = line[m.end() :]
    m = _RANK_PREFIX_RE.match(line)
    if m is not None:
        line = line[m.end() :]
    return line


def _int(text: str) -> int:
    return int(text)


def _xid_finding(line: str, no: int) -> LogFinding | None:
    events = parse_kernel_log([line])
    if not events:
        return None
    ev = events[0]
    if ev.severity == Status.OK:
        return None
    return LogFinding(
        CAUSE_XID,
        no,
        line,
        ev.severity == Status.CRITICAL,
        (
            ("xid", ev.xid),
            ("name", _detail_text(ev.info.name)),
            ("category", ev.category.value),
            ("action", ev.action),
            ("pci", _detail_text(ev.pci)),
        ),
    )


def _oom_finding(line: str, no: int) -> LogFinding | None:
    if "memory" not in line and "OutOfMemory" not in line:
        return None
    m = _HOST_OOM_RE.search(line)
    if m is not None:
        return LogFinding(
            CAUSE_OOM, no, line, True, (("kind", "host"), ("pid", _int(m.group(1))), ("process", m.group(2)))
        )
    if _CUDA_OOM_RE.search(line) is None:
        return None
    detail: list[tuple[str, Scalar]] = [("kind", "cuda")]
    a = _ALLOC_RE.search(line)
    if a is not None:
        detail.append(("tried_to_allocate", a.group(1)))
    g = _GPU_RE.search(line)
    if g is not None:
        detail.append(("gpu", _int(g.group(1) or g.group(2))))
    return LogFinding(CAUSE_OOM, no, line, True, tuple(detail))


def _cuda_finding(line: str, no: int) -> LogFinding | None:
    m = _CUDA_ERROR_RE.search(line)
    if m is not None:
        return LogFinding(CAUSE_CUDA, no, line, True, (("error", _detail_text(m.group(1))),))
    m = _CUDA_RUNTIME_RE.search(line)
    if m is not None:
        return LogFinding(
            CAUSE_CUDA, no, line, True, (("code", _int(m.group(1))), ("error", _detail_text(m.group(2))))
        )
    if "Assertion `" in line and ".cu:" in line:
        return LogFinding(CAUSE_CUDA, no, line, True, (("error", "device-side assertion failed"),))
    for text in ("an illegal memory access was encountered", "device-side assert triggered"):
        if text in line:
            return LogFinding(CAUSE_CUDA, no, line, True, (("error", text),))
    m = _CUDA_LIB_RE.search(line)
    if m is not None:
        return LogFinding(CAUSE_CUDA, no, line, True, (("error", m.group(1)),))
    return None


def _nccl_finding(line: str, no: int) -> LogFinding | None:
    m = _WATCHDOG_RE.search(line)
    if m is not None:
        work = m.group(1)
        detail: list[tuple[str, Scalar]] = [("work", _detail_text(work)), ("ran_for_ms", _int(m.group(2)))]
        for name, rx in (("seq", _SEQ_RE), ("op", _OPTYPE_RE), ("timeout_ms", _TIMEOUT_MS_RE)):
            f = rx.search(work)
            if f is not None:
                detail.append((name, f.group(1) if name == "op" else _int(f.group(1))))
        r = _RANK_RE.search(line)
        if r is not None:
            detail.append(("rank", _int(r.group(1))))
        return LogFinding(CAUSE_NCCL_TIMEOUT, no, line, True, tuple(detail))
    m = _WATCHDOG_STATUS_RE.search(line) or _WATCHDOG_PG_STATUS_RE.search(line)
    if m is not None:
        return LogFinding(
            CAUSE_NCCL_TIMEOUT,
            no,
            line,
            False,
            (
                ("work_seq", _int(m.group(1))),
                ("last_enqueued", _int(m.group(2))),
                ("last_completed", _int(m.group(3))),
            ),
        )
    m = _NCCL_CODE_RE.search(line)
    if m is not None:
        return LogFinding(CAUSE_NCCL_ERROR, no, line, True, (("code", m.group(1)),))
    m = _NCCL_ERROR_IN_RE.search(line)
    if m is not None:
        return LogFinding(
            CAUSE_NCCL_ERROR,
            no,
            line,
            True,
            (("where", _detail_text(m.group(1))), ("error", _detail_text(m.group(2)))),
        )
    m = _NCCL_ERROR_RE.search(line)
    if m is not None:
        return LogFinding(CAUSE_NCCL_ERROR, no, line, True, (("error", _detail_text(m.group(1))),))
    if "Some NCCL operations have failed or timed out" in line:
        return LogFinding(
            CAUSE_NCCL_ERROR, no, line, True, (("error", "NCCL operations failed or timed out"),)
        )
    m = _NCCL_WARN_RE.search(line)
    if m is not None:
        return LogFinding(CAUSE_NCCL_WARN, no, line, False, (("warn", _detail_text(m.group(1))),))
    return None


def _line_finding(line: str, no: int) -> LogFinding | None:
    """The one finding of a line (the highest-precedence cause it shows), or ``None``."""
    if "Xid" in line:
        found = _xid_finding(line, no)
        if found is not None:
            return found
    found = _oom_finding(line, no)
    if found is not None:
        return found
    if (
        "CUDA" in line
        or "cuda" in line
        or "Assertion `" in line
        or "illegal memory" in line
        or "_STATUS_" in line
    ):
        found = _cuda_finding(line, no)
        if found is not None:
            return found
    if "NCCL" in line or "nccl" in line or "atchdog" in line:
        return _nccl_finding(line, no)
    return None


def _exception_line(line: str) -> tuple[str, str] | None:
    """``(type, message)`` when ``line`` (prefix removed) reads as a traceback's exception line."""
    if not line or line[0].isspace():
        return None
    head, _, message = line.partition(":")
    if _EXC_NAME_RE.fullmatch(head) is None:
        return None
    return head, message.strip()


def _decode(tail: bytes | str) -> tuple[str, int, bool]:
    """The newest :data:`MAX_TAIL_BYTES` of ``tail`` as text (a first partial line dropped when cut),
    the size read and whether it was cut."""
    if isinstance(tail, (bytes, bytearray, memoryview)):
        data = bytes(tail[-MAX_TAIL_BYTES:]) if len(tail) > MAX_TAIL_BYTES else bytes(tail)
        cut = len(tail) > MAX_TAIL_BYTES
        if cut:
            newline = data.find(b"\n")
            if 0 <= newline < len(data) - 1:
                data = data[newline + 1 :]
        return data.decode("utf-8", "replace"), len(data), cut
    text = str(tail)
    cut = len(text) > MAX_TAIL_BYTES
    if cut:
        text = text[-MAX_TAIL_BYTES:]
        newline = text.find("\n")
        if 0 <= newline < len(text) - 1:
            text = text[newline + 1 :]
    return text, len(text), cut


def _crash_verdict(chosen: LogFinding, others: Sequence[LogFinding]) -> Verdict:
    also = ",".join(f.cause for f in others if f.fatal and f.cause != chosen.cause)
    values: list[tuple[str, Scalar]] = [("line_no", chosen.line_no), *chosen.detail]
    if also:
        values.append(("also", also))
    if chosen.cause in (CAUSE_NCCL_TIMEOUT, CAUSE_NCCL_ERROR):
        warn = next((f for f in others if f.cause == CAUSE_NCCL_WARN), None)
        if warn is not None:
            values.append(("nccl_warn", warn.line))
    return Verdict(
        SignalClass.CRASH,
        f"log.{chosen.cause}",
        tuple(values),
        chosen.line,
        SOURCES[chosen.cause],
        cause=chosen.cause,
    )


def scan_log(tail: bytes | str) -> LogScan:
    """Find the explicit errors in a rank's log tail and the crash cause they show.

    Args:
        tail: the newest part of the log, as read (bytes are decoded as UTF-8, undecodable bytes
            replaced); only its newest :data:`MAX_TAIL_BYTES` / :data:`MAX_LINES` are examined.

    Returns:
        The :class:`LogScan`: the crash verdict (``None`` when no fatal error shows), one finding per
        cause, counts, and how much was read. Never raises; time and memory are linear in the bounded
        input.
    """
    text, size, cut = _decode(tail)
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        lines = lines[-MAX_LINES:]
        cut = True
    for at in range(len(lines) - 1, -1, -1):
        if lines[at].startswith(LAUNCH_MARKER):
            lines = lines[at + 1 :]
            break
    first: dict[str, LogFinding] = {}
    counts: dict[str, int] = {}
    in_traceback = False
    last_exception: LogFinding | None = None
    for no, raw in enumerate(lines, start=1):
        if len(raw) > MAX_LINE_CHARS:
            raw = raw[:MAX_LINE_CHARS]
            cut = True
        line = _ANSI_RE.sub("", raw) if "\x1b" in raw else raw
        line = line.rstrip()
        evidence = line[:MAX_EVIDENCE_CHARS]
        found = _line_finding(line, no)
        if found is not None:
            found = LogFinding(found.cause, found.line_no, evidence, found.fatal, found.detail)
            counts[found.cause] = counts.get(found.cause, 0) + 1
            held = first.get(found.cause)
            if held is None or (found.fatal and not held.fatal):
                first[found.cause] = found
        body = _strip_prefix(line)
        if body.startswith(_TRACEBACK):
            in_traceback = True
            counts[CAUSE_PYTHON] = counts.get(CAUSE_PYTHON, 0) + 1
            continue
        if in_traceback and body and not body[0].isspace():
            in_traceback = False
            exc = _exception_line(body)
            if exc is not None:
                last_exception = LogFinding(
                    CAUSE_PYTHON,
                    no,
                    evidence,
                    True,
                    (("exception", _detail_text(exc[0])), ("message", _detail_text(exc[1]))),
                )
    if last_exception is not None:
        first[CAUSE_PYTHON] = last_exception
    findings = tuple(sorted(first.values(), key=lambda f: f.line_no))
    verdict: Verdict | None = None
    for cause in CAUSE_PRIORITY:
        chosen = first.get(cause)
        if chosen is not None and chosen.fatal:
            verdict = _crash_verdict(chosen, findings)
            break
    order = {c: i for i, c in enumerate((*CAUSE_PRIORITY, CAUSE_NCCL_WARN))}
    return LogScan(
        verdict=verdict,
        findings=findings,
        counts=tuple(sorted(counts.items(), key=lambda kv: order.get(kv[0], len(order)))),
        bytes_read=size,
        lines_read=len(lines),
        cut=cut,
    )
