"""PyTorch ``ProcessGroupNCCL`` watchdog logs: which rank the others wait on.

When a collective hangs, every rank's NCCL watchdog prints what it was waiting for; the rank at fault
is usually the one whose lines differ (it is behind, its sizes differ, its watchdog itself is stuck) or
the one that printed nothing. :func:`parse_line` reads one line of any format PyTorch has printed,
:class:`WatchdogTally` gathers a job's lines in bounded memory and :func:`evaluate` judges them.

Formats, from ``torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp`` and ``TraceUtils.h`` across
releases (the log prefix names the process group and the rank *within it*):

- ≤ 2.1: ``[Rank N] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=…, OpType=…,
  Timeout(ms)=…) ran for … milliseconds before timing out.`` (``NumelIn=``/``NumelOut=`` from 2.1;
  ``TensorShape=[…]`` in 1.x); no process group is printed.
- 2.2–2.4: ``logPrefix()`` is ``[PG <name> Rank r]`` or ``[PG <name> (<desc>) Rank r]``; new lines
  ``Exception (either an error or timeout) detected by watchdog at work: N, last enqueued NCCL work:
  N, last completed NCCL work: N.`` and ``Timeout at NCCL work: N, …``. The timeout line itself keeps
  ``[Rank r]`` until 2.6, so it is tied to its group through the status line of the same rank and
  sequence number.
- 2.5+: ``[PG ID <local id> PG GUID <uid>(<desc>) Rank r]``; 2.7+ ``failure detected by watchdog at
  work sequence id: N PG status: last enqueued work: N, last completed work: N``. 2.12 adds the
  started-sequence fields (pytorch/pytorch#183656, "Surface started-work metadata in NCCL watchdog
  timeouts": ``lastStartedSeq`` and ``lastStartedWorkName``), printed ``last started work: 19
  (_ALLGATHER_BASE)`` or ``last started work: -1`` in 2.13 logs posted since; ``last started (NCCL)
  work: N`` with or without the op is read, and every field is optional.
- ``TORCH_NCCL_DESYNC_DEBUG`` (``retrieveDesyncReport``): ``[r] Timeout at collective: <op>, #N``,
  ``ranks [a, b] are the lagging ranks that caused this timeout. They never joined any collectives``,
  ``[a, b] joined but didn't finish collective #N (count from 1)``, ``[a, b] finished collective #N,
  but didn't join collective #N+1 (count from 1)``: rank numbers of the timed-out group.
- The heartbeat monitor (2.2+): ``Heartbeat monitor timed out! Process will be terminated after
  dumping debug info.`` and ``ProcessGroupNCCL's watchdog got stuck for N seconds without making
  progress in monitoring enqueued collectives`` — the watchdog thread itself is blocked in a CUDA/NCCL
  call on that host: a local GPU, driver or GIL hang, not a missing peer.
- ``Some NCCL operations have failed or timed out.`` (every release) when the process is taken down.

A launcher prefix ``[rankN]:`` (torchrun ``--tee``/``--local-ranks-filter``, anywhere in the first
:data:`LAUNCHER_PREFIX_CHARS` characters, after a timestamp or a Ray actor tag) gives the job-wide
(global) rank; else a per-rank file's name (``rank3.log``, ``worker-3.log``); else the log prefix's
rank, which is the global rank only in the default process group.

Sequence numbers count per process group; they are compared only within one group (keyed by the
group's uid, the same on every rank), never across groups, and never when the group is not printed.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from robustctl.analysis import Finding, Verdict, sort_findings
from robustctl.config import MAX_WORLD_SIZE
from robustctl.inventory.hostrange import compact_ranges
from robustctl.models import Status

if TYPE_CHECKING:
    from robustctl.analysis.detect import AnalysisOptions, GroupMember
    from robustctl.config import ParallelLayout

__all__ = [
    "LAUNCHER_PREFIX_CHARS",
    "MAX_DESYNC_LINES",
    "MAX_EVIDENCE_LINES",
    "MAX_GROUPS",
    "MAX_HOST_HANGS",
    "MAX_LINE_CHARS",
    "MAX_MEMBERS",
    "MAX_PENDING_TIMEOUTS",
    "MAX_QUOTE_CHARS",
    "MAX_RANKS_SEEN",
    "MAX_SUSPECTS",
    "MAX_TIMEOUTS_PER_MEMBER",
    "MAX_TIMEOUT_ROWS",
    "EventKind",
    "WatchdogLine",
    "WatchdogTally",
    "analyze_members",
    "claim",
    "evaluate",
    "parse_line",
    "rank_from_name",
]

MAX_LINE_CHARS = 8192
"""Characters of a line looked at: the longest watchdog line (the heartbeat monitor's advice, a
``terminated with exception`` line quoting a timeout) is under 1,500; the cut bounds the regular
expressions' work on a pasted megabyte without a line end."""

LAUNCHER_PREFIX_CHARS = 300
"""Where a launcher's ``[rankN]:`` prefix is looked for: after a timestamp, a log-viewer line number or
a Ray actor tag (``(RayWorkerWrapper pid=…, ip=…)``, about 80 characters) it still starts well
within 300."""

MAX_GROUPS = 100_000
"""Process groups tracked: a Megatron job creates a handful of group kinds, each a few groups per rank;
a 100K-rank job's logs name at most a few times 100K distinct group uids, and a log reporting more is
not one job's. Lines of further groups are counted, not kept."""

MAX_MEMBERS = 1_000_000
"""(process group, rank) records kept across all groups: every rank of a 100K-rank job in ten groups
(about 200 bytes each, 200 MB at worst, the same order as the group kind's 1 GiB input bound)."""

MAX_TIMEOUTS_PER_MEMBER = 16
"""Timed-out collectives kept per (group, rank): a rank's watchdog reports the few works outstanding
when it fires (``last enqueued`` minus ``last completed``, rarely above ten); more are counted."""

MAX_PENDING_TIMEOUTS = 200_000
"""Timeout lines without a process group (the ``[Rank r]`` form) held until their group is known from
the same rank's status line: two per rank of a 100K-rank job."""

MAX_RANKS_SEEN = MAX_WORLD_SIZE
"""Global ranks remembered as having printed something: the largest world size robustctl accepts."""

MAX_HOST_HANGS = 10_000
"""Ranks whose heartbeat monitor or stuck watchdog is reported one by one; a job-wide stuck watchdog
(every rank) beyond it is counted."""

MAX_DESYNC_LINES = 200
"""Desync-report lines quoted: one report is 3 lines plus 2 per snapshot sequence; 200 hold the
reports of several ranks."""

MAX_EVIDENCE_LINES = 3
"""Log lines quoted per suspect and per finding: enough to show the line that names the fault and
its context."""

MAX_QUOTE_CHARS = 400
"""Characters of a quoted log line (the timeout line is about 250)."""

MAX_SUSPECTS = 256
"""Suspects listed one by one in the JSON (all are counted and their ranks compacted into
``suspect_ranks``): a silent node of 8 GPUs or a lagging pipeline stage is far fewer."""

MAX_TIMEOUT_ROWS = 64
"""Timed-out (group, sequence number) rows in the details and findings; a cascade over every group of
a large job is summarised by its first rows and a count."""

_MAX_NUMBER_DIGITS = 19  # int64 sequence numbers and element counts


class EventKind(str, Enum):
    """What one watchdog line says."""

    TIMEOUT = "timeout"
    """``Watchdog caught collective operation timeout: WorkNCCL(…)``."""
    STATUS = "status"
    """A failure's status line: the work it failed at and the group's last enqueued/completed work."""
    UPDATE = "update"
    """The group's progress without a failure (periodic update, dump-signal notice)."""
    HEARTBEAT = "heartbeat"
    """``Heartbeat monitor timed out``: the watchdog thread made no progress."""
    STUCK = "stuck"
    """``ProcessGroupNCCL's watchdog got stuck for N seconds``."""
    FAILED = "failed"
    """``Some NCCL operations have failed or timed out``, ``… watchdog thread terminated with exception``
    (an NCCL error when no timeout is quoted), ``WorkNCCL(…) raised the following async exception``."""
    DESYNC = "desync"
    """A ``TORCH_NCCL_DESYNC_DEBUG`` verdict line."""
    MARKER = "marker"
    """Another ``ProcessGroupNCCL`` line (the rank was alive and printing)."""


@dataclass(frozen=True)
class WatchdogLine:
    """One parsed watchdog line.

    Attributes:
        kind: what the line says.
        prefix: ``"rank"`` (``[Rank N]``), ``"pg"`` (``[PG n Rank r]``), ``"pg-guid"`` (``[PG ID n PG
            GUID g(desc) Rank r]``) or ``None`` (no log prefix).
        launcher_rank: the global rank of a ``[rankN]:`` launcher prefix, else ``None``.
        group_rank: the rank within the process group (the log prefix's ``Rank r``), else ``None``.
        pg_uid: the group's uid (``PG GUID g`` in 2.5+, ``PG n`` in 2.2–2.4), the same on every rank.
        pg_id: the group's local id (2.5+ ``PG ID n``), which may differ across ranks.
        pg_desc: the group's description (``default_pg``, ``EXPERT_MODEL_PARALLEL_GROUP``), if printed.
        seq: the work's sequence number (``SeqNum=``, ``at work: N``, desync ``#N``).
        op: the collective (``ALLREDUCE``, ``_ALLGATHER_BASE``).
        numel_in / numel_out: element counts of the work (2.1+).
        timeout_ms: the work's timeout. ran_ms: how long it ran before the watchdog caught it.
        last_enqueued / last_started / last_completed: the group's progress on this rank.
        last_started_op: the op of the last started work, when printed.
        stuck_s: seconds the watchdog was stuck (heartbeat monitor).
        desync: ``"timeout-at"``, ``"never-joined"``, ``"joined-not-finished"`` or
            ``"finished-not-joined"`` for desync-report lines.
        desync_ranks: the ranks a desync line names (of the timed-out group).
        raw: the line as read (cut at :data:`MAX_LINE_CHARS`).
    """

    kind: EventKind
    prefix: str | None = None
    launcher_rank: int | None = None
    group_rank: int | None = None
    pg_uid: str | None = None
    pg_id: int | None = None
    pg_desc: str | None = None
    seq: int | None = None
    op: str | None = None
    numel_in: int | None = None
    numel_out: int | None = None
    timeout_ms: int | None = None
    ran_ms: int | None = None
    last_enqueued: int | None = None
    last_started: int | None = None
    last_started_op: str | None = None
    last_completed: int | None = None
    stuck_s: int | None = None
    desync: str | None = None
    desync_ranks: tuple[int, ...] = ()
    raw: str = ""


_N = rf"-?\d{{1,{_MAX_NUMBER_DIGITS}}}"
_LAUNCHER_RE = re.compile(r"\[rank(\d{1,9})\]:")
_PG_GUID_RE = re.compile(
    r"\[PG ID (?P<id>\d{1,9}) PG GUID (?P<uid>[^\s()\[\]]{1,128})(?:\((?P<desc>[^()\[\]]{0,128})\))? "
    r"Rank (?P<rank>\d{1,9})\]"
)
_PG_NAME_RE = re.compile(
    r"\[PG (?P<uid>[^\s()\[\]]{1,128})(?: \((?P<desc>[^()\[\]]{0,128})\))? Rank (?P<rank>\d{1,9})\]"
)
_RANK_RE = re.compile(r"\[Rank (?P<rank>\d{1,9})\]")
_TIMEOUT_RE = re.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\("
    r"(?P<body>[^()]{0,512}(?:\([^()]{0,16}\)[^()]{0,512}){0,4})\)"
    r"(?: ran for (?P<ran>\d{1,19}) milliseconds)?"
)
_FIELD_RE = re.compile(
    r"(SeqNum|OpType|NumelIn|NumelOut|Timeout\(ms\)|TensorShape)=(\[[^\]]{0,256}\]|[^,]{0,128})"
)
_STATUS_RE = re.compile(
    r"(?:Exception \(either an error or timeout\) detected by watchdog at work"
    r"|NCCL error is detected by watchdog at work|Work timeout is detected by watchdog at work"
    r"|failure detected by watchdog at work sequence id|Timeout at NCCL work)"
    rf"\s{{0,4}}:?\s{{0,4}}(?P<seq>{_N})"
)
_ENQUEUED_RE = re.compile(rf"last enqueued (?:NCCL )?work: (?P<n>{_N})", re.IGNORECASE)
_STARTED_RE = re.compile(
    rf"last started (?:NCCL )?work: (?P<n>{_N})(?: \((?P<op>\w{{1,64}})\))?", re.IGNORECASE
)
_COMPLETED_RE = re.compile(rf"last completed (?:NCCL )?work: (?P<n>{_N})", re.IGNORECASE)
_STUCK_RE = re.compile(r"watchdog got stuck for (?P<s>\d{1,12}) seconds")
_RANK_LIST = r"\[(?P<ranks>[\d, ]{0,4096})\]"
_DESYNC_RES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "timeout-at",
        re.compile(r"\[(?P<ranks>\d{1,9})\] Timeout at collective: (?P<op>\w{1,64}), #(?P<seq>\d{1,19})"),
    ),
    ("never-joined", re.compile(rf"ranks {_RANK_LIST} are the lagging ranks that caused this timeout")),
    (
        "joined-not-finished",
        re.compile(rf"{_RANK_LIST} joined but didn't finish collective #(?P<seq>\d{{1,19}})"),
    ),
    (
        "finished-not-joined",
        re.compile(
            rf"{_RANK_LIST} finished collective #(?P<seq>\d{{1,19}}), but didn't join collective #\d{{1,19}}"
        ),
    ),
)
_FAILED_MARKERS = (
    "Some NCCL operations have failed or timed out",
    "watchdog thread terminated with exception",  # "NCCL watchdog …" (<= 2.1), "Process group watchdog …"
    "raised the following async exception",  # "WorkNCCL(…) raised the following async exception: NCCL error"
)
_WORK_RE = re.compile(
    r"WorkNCCL\((?P<body>[^()]{0,512}(?:\([^()]{0,16}\)[^()]{0,512}){0,4})\)(?: ran for (?P<ran>\d{1,19}) milliseconds)?"
)
_GLOG_RE = re.compile(r"\[[EWIF](?:\d{3,4} [\d:.]{8,20}(?: +\d{1,9})?)? ?ProcessGroupNCCL\.cpp:\d{1,6}\]")
_KEYWORDS = ("ProcessGroupNCCL", "atchdog", "NCCL work", "WorkNCCL", "NCCL operations", "collective", "Rank ")


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    t = text.strip()
    if not re.fullmatch(_N, t):
        return None
    return int(t)


def _ranks(text: str) -> tuple[int, ...]:
    """The numbers of a ``[a, b, c]`` desync rank list, at most :data:`MAX_SUSPECTS` of them."""
    out: list[int] = []
    for part in text.split(","):
        p = part.strip()
        if p.isdigit() and len(p) <= 9:
            out.append(int(p))
            if len(out) >= MAX_SUSPECTS:
                break
    return tuple(out)


def _prefix(line: str) -> dict[str, Any]:
    """The first log prefix of a line (``[PG ID …]``, ``[PG …]`` or ``[Rank N]``) as fields."""
    best: tuple[int, str, re.Match[str]] | None = None
    for name, rx in (("pg-guid", _PG_GUID_RE), ("pg", _PG_NAME_RE), ("rank", _RANK_RE)):
        m = rx.search(line)
        if m is not None and (best is None or m.start() < best[0]):
            best = (m.start(), name, m)
    if best is None:
        return {}
    _, name, m = best
    fields: dict[str, Any] = {"prefix": name, "group_rank": int(m.group("rank"))}
    if name != "rank":
        fields["pg_uid"] = m.group("uid")
        fields["pg_desc"] = m.group("desc") or None
    if name == "pg-guid":
        fields["pg_id"] = int(m.group("id"))
    return fields


def _timeout_fields(m: re.Match[str]) -> dict[str, Any]:
    body = m.group("body")
    values = {k: v.strip() for k, v in _FIELD_RE.findall(body)}
    return {
        "seq": _int(values.get("SeqNum")),
        "op": values.get("OpType") or None,
        "numel_in": _int(values.get("NumelIn")),
        "numel_out": _int(values.get("NumelOut")),
        "timeout_ms": _int(values.get("Timeout(ms)")),
        "ran_ms": _int(m.group("ran")),
    }


def _progress_fields(line: str) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    enq = _ENQUEUED_RE.search(line)
    if enq is not None:
        fields["last_enqueued"] = int(enq.group("n"))
    started = _STARTED_RE.search(line)
    if started is not None:
        fields["last_started"] = int(started.group("n"))
        fields["last_started_op"] = started.group("op")
    done = _COMPLETED_RE.search(line)
    if done is not None:
        fields["last_completed"] = int(done.group("n"))
    return fields


def _event_fields(line: str) -> dict[str, Any] | None:
    """The kind and event fields of a line, or ``None`` when it says nothing the watchdog prints."""
    tm = _TIMEOUT_RE.search(line)
    if tm is not None:
        return {"kind": EventKind.TIMEOUT, **_timeout_fields(tm)}
    sm = _STATUS_RE.search(line)
    if sm is not None:
        return {"kind": EventKind.STATUS, "seq": int(sm.group("seq")), **_progress_fields(line)}
    if "Heartbeat monitor timed out" in line:
        return {"kind": EventKind.HEARTBEAT}
    st = _STUCK_RE.search(line)
    if st is not None:
        return {"kind": EventKind.STUCK, "stuck_s": int(st.group("s"))}
    if any(marker in line for marker in _FAILED_MARKERS):
        wm = _WORK_RE.search(line)
        return {"kind": EventKind.FAILED, **(_timeout_fields(wm) if wm is not None else {})}
    for name, rx in _DESYNC_RES:
        dm = rx.search(line)
        if dm is not None:
            seq = dm.groupdict().get("seq")
            return {
                "kind": EventKind.DESYNC,
                "desync": name,
                "desync_ranks": _ranks(dm.group("ranks")),
                "seq": int(seq) if seq is not None else None,
                "op": dm.groupdict().get("op"),
            }
    progress = _progress_fields(line)
    if "last_enqueued" in progress and "last_completed" in progress:
        return {"kind": EventKind.UPDATE, **progress}
    if "ProcessGroupNCCL" in line and (_GLOG_RE.search(line) is not None or "atchdog" in line):
        return {"kind": EventKind.MARKER}
    return None


def parse_line(line: str) -> WatchdogLine | None:
    """The watchdog event of one log line.

    Args:
        line: one line, with or without its line end; only its first :data:`MAX_LINE_CHARS`
            characters are read.

    Returns:
        The event, or ``None`` when the line is no watchdog line. Never raises.
    """
    text = line[:MAX_LINE_CHARS].rstrip("\r\n")
    if not any(k in text for k in _KEYWORDS):
        return None
    fields = _event_fields(text)
    if fields is None:
        return None
    lm = _LAUNCHER_RE.search(text, 0, LAUNCHER_PREFIX_CHARS)
    launcher = int(lm.group(1)) if lm is not None else None
    return WatchdogLine(launcher_rank=launcher, raw=text, **_prefix(text), **fields)


_NAME_RANK_RE = re.compile(r"rank[_-]?(\d{1,9})(?!\d)", re.IGNORECASE)
_TAIL_RANK_RE = re.compile(r"[-_.](\d{1,9})$")
_SUFFIXES = (".gz", ".log", ".txt", ".out", ".err", ".stderr", ".stdout")


def rank_from_name(base: str) -> int | None:
    """The rank a per-rank log's file name gives: ``rank3.log``, ``rank_3.txt.gz``, ``worker-3.log``.

    Args:
        base: the file's own name (no directory).

    Returns:
        The rank, or ``None`` when the name holds none (``train.log``).
    """
    stem = base
    changed = True
    while changed:
        changed = False
        for suffix in _SUFFIXES:
            if stem.lower().endswith(suffix) and len(stem) > len(suffix):
                stem = stem[: -len(suffix)]
                changed = True
    m = _NAME_RANK_RE.search(stem)
    if m is None:
        m = _TAIL_RANK_RE.search(stem)
    if m is None:
        return None
    value = int(m.group(1))
    return value if value < MAX_RANKS_SEEN else None


_CLAIM_MARKERS = (
    b"Watchdog caught collective operation timeout",
    b"detected by watchdog at work",
    b"watchdog got stuck for",
    b"Heartbeat monitor timed out",
    b"Some NCCL operations have failed or timed out",
    b"NCCL watchdog thread",
    b"Process group watchdog thread terminated",
    b"raised the following async exception",
    b"Timeout at NCCL work:",
    b"NCCL Work update periodically",
)
_CLAIM_GLOG_RE = re.compile(
    rb"\[[EWIF](?:\d{3,4} [\d:.]{8,20}(?: +\d{1,9})?)? ?ProcessGroupNCCL\.cpp:\d{1,6}\]"
)


def claim(base: str, head: bytes) -> bool:
    """Whether a file is a watchdog log: its head holds a line the ``ProcessGroupNCCL`` watchdog
    prints, or a glog line of ``ProcessGroupNCCL.cpp`` (``[E1206 18:44:12.715 ProcessGroupNCCL.cpp:607]``).

    nccl-tests output, kernel logs, ``dcgmi`` output and py-spy dumps print none of these (a native
    py-spy frame names ``ProcessGroupNCCL.cpp:N`` in parentheses, not in a glog prefix). Binary files
    (pickled Flight Recorder dumps) are not claimed.

    Args:
        base: the file's own name (unused: the content decides).
        head: the first bytes of the file, decompressed.

    Returns:
        True when the file is claimed. Never raises.
    """
    if b"\x00" in head[:4096]:
        return False
    if any(marker in head for marker in _CLAIM_MARKERS):
        return True
    return _CLAIM_GLOG_RE.search(head) is not None


@dataclass
class _Timeout:
    """One timed-out work as one rank reported it."""

    seq: int
    op: str | None
    numel_in: int | None
    numel_out: int | None
    timeout_ms: int | None
    ran_ms: int | None
    line: str


@dataclass
class _Member:
    """One rank of one process group: its progress and what it reported."""

    global_rank: int | None
    source: str
    last_enqueued: int | None = None
    last_started: int | None = None
    last_started_op: str | None = None
    last_completed: int | None = None
    progress_from_failure: bool = False
    failed_at: int | None = None
    failed: bool = False
    timeouts: dict[int, _Timeout] = field(default_factory=dict)
    timeouts_dropped: int = 0
    lines: list[str] = field(default_factory=list)

    def quote(self, line: str) -> None:
        if len(self.lines) < MAX_EVIDENCE_LINES and line[:MAX_QUOTE_CHARS] not in self.lines:
            self.lines.append(line[:MAX_QUOTE_CHARS])

    def add_timeout(self, t: _Timeout) -> None:
        self.failed = True
        if t.seq in self.timeouts:
            return
        if len(self.timeouts) >= MAX_TIMEOUTS_PER_MEMBER:
            self.timeouts_dropped += 1
            return
        self.timeouts[t.seq] = t
        self.quote(t.line)

    def progress(self) -> int | None:
        """Last completed work, else the earliest timed-out work minus one (both per group)."""
        if self.last_completed is not None:
            return self.last_completed
        if self.timeouts:
            return min(self.timeouts) - 1
        return None


@dataclass
class _Group:
    """A process group as its ranks' lines name it."""

    uid: str
    pg_ids: set[int] = field(default_factory=set)
    desc: str | None = None
    members: dict[int, _Member] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"PG {self.uid}" + (f" ({self.desc})" if self.desc else "")

    @property
    def is_default(self) -> bool:
        return self.desc == "default_pg" or self.uid == "0"


_UNKNOWN_GROUP = "?"
"""Key of the pseudo-group of timeouts whose process group the log does not name."""


@dataclass
class _HostHang:
    """A rank whose watchdog thread itself stopped (heartbeat monitor, stuck watchdog)."""

    rank: int | None
    group_rank: int | None
    group: str | None
    stuck_s: int | None
    source: str
    lines: list[str]


@dataclass
class _Pending:
    """A timeout line without its group, waiting for the same rank's status line (``rank_known``:
    the global rank came from a launcher prefix or the file name, not from ``[Rank r]``)."""

    global_rank: int | None
    group_rank: int | None
    source: str
    timeout: _Timeout
    rank_known: bool


class WatchdogTally:
    """A job's watchdog lines gathered in bounded memory (every bound is a module constant).

    Feed it lines with :meth:`add_line` (one file after another, each with its rank from the file
    name when it has one), then judge it with :func:`evaluate`.
    """

    def __init__(self) -> None:
        self.lines = 0
        self.watchdog_lines = 0
        self.formats: set[str] = set()
        self.groups: dict[str, _Group] = {}
        self.groups_dropped = 0
        self.members = 0
        self.members_dropped = 0
        self.pending: list[_Pending] = []
        self.pending_dropped = 0
        self.ranks_seen: set[int] = set()
        self.hangs: list[_HostHang] = []
        self.hangs_dropped = 0
        self._hang_index: dict[tuple[int | None, int | None, str], int] = {}
        self.failed_ranks: set[int] = set()
        self.failed_lines: list[str] = []
        self.failures = 0
        self.desync_lines: list[str] = []
        self.desync: list[tuple[int | None, WatchdogLine]] = []
        self._context: tuple[int | None, int | None, str | None] = (None, None, None)

    # --- feeding -------------------------------------------------------------------------------

    def add_line(self, line: str, *, source: str = "", file_rank: int | None = None) -> WatchdogLine | None:
        """Take one line of a log.

        Args:
            line: the line (its first :data:`MAX_LINE_CHARS` characters are read).
            source: the file it came from, for the evidence.
            file_rank: the global rank the file's name gives, if any.

        Returns:
            The parsed event, or ``None`` for a line the watchdog did not print.
        """
        self.lines += 1
        head = line[:LAUNCHER_PREFIX_CHARS]
        if "[rank" in head:
            lm = _LAUNCHER_RE.search(head)
            if lm is not None:
                self._see(int(lm.group(1)))
        elif file_rank is not None:
            self._see(file_rank)
        event = parse_line(line)
        if event is None:
            return None
        self.watchdog_lines += 1
        if event.prefix is not None:
            self.formats.add(event.prefix)
        if event.launcher_rank is not None:
            self.formats.add("launcher")
        global_rank = self._global_rank(event, file_rank)
        if global_rank is not None:
            self._see(global_rank)
        if event.kind is not EventKind.DESYNC:
            self._context = (global_rank, event.group_rank, event.pg_uid)
        self._dispatch(event, global_rank, source, file_rank)
        return event

    def _see(self, rank: int) -> None:
        if len(self.ranks_seen) < MAX_RANKS_SEEN:
            self.ranks_seen.add(rank)

    @staticmethod
    def _global_rank(event: WatchdogLine, file_rank: int | None) -> int | None:
        """The job-wide rank of a line: launcher prefix, else file name, else the log prefix's rank
        where that is the default group's (or the group is not printed, as up to 2.1)."""
        if event.launcher_rank is not None:
            return event.launcher_rank
        if file_rank is not None:
            return file_rank
        if event.group_rank is None:
            return None
        if event.pg_uid is None or event.pg_desc == "default_pg" or event.pg_uid == "0":
            return event.group_rank
        return None

    def _dispatch(
        self, event: WatchdogLine, global_rank: int | None, source: str, file_rank: int | None
    ) -> None:
        kind = event.kind
        if kind is EventKind.TIMEOUT and event.seq is not None:
            self.failures += 1
            t = _Timeout(
                event.seq,
                event.op,
                event.numel_in,
                event.numel_out,
                event.timeout_ms,
                event.ran_ms,
                event.raw,
            )
            if event.pg_uid is not None and event.group_rank is not None:
                member = self._member(event, global_rank, source)
                if member is not None:
                    member.add_timeout(t)
            elif len(self.pending) < MAX_PENDING_TIMEOUTS:
                known = event.launcher_rank is not None or file_rank is not None
                self.pending.append(_Pending(global_rank, event.group_rank, source, t, known))
            else:
                self.pending_dropped += 1
        elif kind in (EventKind.STATUS, EventKind.UPDATE):
            self._status(event, global_rank, source)
        elif kind in (EventKind.HEARTBEAT, EventKind.STUCK):
            self.failures += 1
            self._hang(event, global_rank, source)
        elif kind is EventKind.FAILED:
            self.failures += 1
            if global_rank is not None and len(self.failed_ranks) < MAX_RANKS_SEEN:
                self.failed_ranks.add(global_rank)
            if len(self.failed_lines) < MAX_EVIDENCE_LINES:
                self.failed_lines.append(event.raw[:MAX_QUOTE_CHARS])
        elif kind is EventKind.DESYNC:
            self.failures += 1
            reporter = global_rank if global_rank is not None else self._context[0]
            if len(self.desync_lines) < MAX_DESYNC_LINES:
                self.desync_lines.append(event.raw.strip()[:MAX_QUOTE_CHARS])
                self.desync.append((reporter, event))

    def _member(self, event: WatchdogLine, global_rank: int | None, source: str) -> _Member | None:
        uid, group_rank = event.pg_uid, event.group_rank
        if uid is None or group_rank is None:
            return None
        group = self.groups.get(uid)
        if group is None:
            if len(self.groups) >= MAX_GROUPS:
                self.groups_dropped += 1
                return None
            group = self.groups[uid] = _Group(uid)
        if event.pg_desc and group.desc is None:
            group.desc = event.pg_desc
        if event.pg_id is not None and len(group.pg_ids) < MAX_EVIDENCE_LINES:
            group.pg_ids.add(event.pg_id)
        member = group.members.get(group_rank)
        if member is None:
            if self.members >= MAX_MEMBERS:
                self.members_dropped += 1
                return None
            self.members += 1
            member = group.members[group_rank] = _Member(global_rank, source)
        elif member.global_rank is None:
            member.global_rank = global_rank
        return member

    def _status(self, event: WatchdogLine, global_rank: int | None, source: str) -> None:
        member = self._member(event, global_rank, source)
        if member is None:
            return
        failure = event.kind is EventKind.STATUS
        if failure:
            self.failures += 1
            member.failed = True
            member.failed_at = event.seq
            member.quote(event.raw)
        if failure or not member.progress_from_failure:
            member.progress_from_failure = member.progress_from_failure or failure
            if event.last_enqueued is not None:
                member.last_enqueued = event.last_enqueued
            if event.last_started is not None:
                member.last_started = event.last_started
                member.last_started_op = event.last_started_op
            if event.last_completed is not None:
                member.last_completed = event.last_completed

    def _hang(self, event: WatchdogLine, global_rank: int | None, source: str) -> None:
        key = (global_rank, event.group_rank, source)
        known = self._hang_index.get(key)
        if known is not None:
            h = self.hangs[known]
            if event.stuck_s is not None:
                h.stuck_s = event.stuck_s
            if len(h.lines) < MAX_EVIDENCE_LINES:
                h.lines.append(event.raw[:MAX_QUOTE_CHARS])
            return
        if len(self.hangs) >= MAX_HOST_HANGS:
            self.hangs_dropped += 1
            return
        group = event.pg_uid
        if group is not None and event.pg_desc:
            group = f"PG {group} ({event.pg_desc})"
        elif group is not None:
            group = f"PG {group}"
        self._hang_index[key] = len(self.hangs)
        self.hangs.append(
            _HostHang(
                global_rank, event.group_rank, group, event.stuck_s, source, [event.raw[:MAX_QUOTE_CHARS]]
            )
        )

    def add_text(self, lines: Iterable[str], *, source: str = "", file_rank: int | None = None) -> None:
        """Take every line of one log (see :meth:`add_line`).

        Args:
            lines: the log's lines.
            source: the file they came from.
            file_rank: the rank the file's name gives, if any.
        """
        self._context = (None, None, None)
        for line in lines:
            self.add_line(line, source=source, file_rank=file_rank)

    # --- after the last line -------------------------------------------------------------------

    def settle(self) -> None:
        """Tie each timeout printed without its group to the group whose status line the same rank
        printed for the same sequence number; the rest go to the unknown group (never compared)."""
        index: dict[tuple[str, int], list[_Member]] = {}
        for group in self.groups.values():
            for group_rank, member in group.members.items():
                if member.global_rank is not None:
                    index.setdefault(("g", member.global_rank), []).append(member)
                index.setdefault(("r", group_rank), []).append(member)
        for p in self.pending:
            target = None
            if p.rank_known and p.global_rank is not None:
                key = ("g", p.global_rank)
            elif p.group_rank is not None:
                key = ("r", p.group_rank)
            else:
                key = ("", 0)
            for member in index.get(key, []):
                if member.failed_at == p.timeout.seq or p.timeout.seq in member.timeouts:
                    target = member
                    break
            if target is None:
                target = self._unknown_member(p)
            if target is not None:
                target.add_timeout(p.timeout)
        self.pending = []

    def _unknown_member(self, p: _Pending) -> _Member | None:
        group = self.groups.get(_UNKNOWN_GROUP)
        if group is None:
            group = self.groups[_UNKNOWN_GROUP] = _Group(_UNKNOWN_GROUP)
        key = p.global_rank if p.global_rank is not None else p.group_rank
        if key is None:
            key = -1 - len(group.members)  # neither rank known: one record per such line
        member = group.members.get(key)
        if member is None:
            if self.members >= MAX_MEMBERS:
                self.members_dropped += 1
                return None
            self.members += 1
            member = group.members[key] = _Member(p.global_rank, p.source)
        return member


def _member_label(group: _Group, group_rank: int, member: _Member) -> str:
    if member.global_rank is not None:
        return f"rank {member.global_rank}"
    if group.uid == _UNKNOWN_GROUP:
        return f"rank {group_rank}" if group_rank >= 0 else "rank ?"
    return f"{group.label} rank {group_rank}"


def _rank_list(ranks: Iterable[int]) -> str:
    return compact_ranges(ranks) or "-"


@dataclass
class _Suspects:
    """The ranks at fault, merged per rank (bounded by :data:`MAX_SUSPECTS` listed)."""

    topology: Any = None
    items: list[dict[str, Any]] = field(default_factory=list)
    by_key: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    ranks: set[int] = field(default_factory=set)
    dropped: int = 0

    def add(
        self,
        rank: int | None,
        category: str,
        reason: str,
        *,
        group: str | None = None,
        group_rank: int | None = None,
        source: str | None = None,
        evidence: Sequence[str] = (),
    ) -> None:
        if rank is not None and len(self.ranks) < MAX_RANKS_SEEN:
            self.ranks.add(rank)
        key: tuple[Any, ...] = (rank, category) if rank is not None else (group, group_rank, category)
        if key in self.by_key:
            return
        if len(self.items) >= MAX_SUSPECTS:
            self.dropped += 1
            return
        entry: dict[str, Any] = {
            "rank": rank,
            "host": None,
            "machine": None,
            "coords": None,
            "process_group": group,
            "group_rank": group_rank,
            "source": source,
            "category": category,
            "reason": reason,
            "likely_culprit": True,
            "evidence": [e[:MAX_QUOTE_CHARS] for e in evidence[:MAX_EVIDENCE_LINES]],
        }
        topo = self.topology
        if topo is not None and rank is not None and 0 <= rank < topo.world_size:
            entry["coords"] = topo.coords(rank)
            entry["machine"] = topo.machine_of(rank)
            entry["host"] = topo.host_of(rank)
        self.by_key[key] = entry
        self.items.append(entry)

    def json(self) -> dict[str, Any]:
        ordered = sorted(self.items, key=lambda s: (s["rank"] is None, s["rank"] or 0, s["category"]))
        hosts = sorted({s["host"] for s in self.items if s["host"]}, key=str)
        return {
            "suspects": ordered,
            "suspect_ranks": sorted(self.ranks),
            "suspect_hosts": hosts,
            "likely_culprits": sorted(
                {s["rank"] for s in self.items if s["rank"] is not None and s["likely_culprit"]}
            ),
            "suspects_not_listed": self.dropped,
        }


def _new_row(group: _Group, seq: int, t: _Timeout | None) -> dict[str, Any]:
    return {
        "process_group": None if group.uid == _UNKNOWN_GROUP else group.label,
        "seq": seq,
        "ops": {},
        "numel_in": {},
        "numel_out": t.numel_out if t is not None else None,
        "timeout_ms": t.timeout_ms if t is not None else None,
        "ran_ms_max": None,
        "reported_by": [],
        "group_inferred": [],
        "line": t.line[:MAX_QUOTE_CHARS] if t is not None else None,
    }


def _add_report(row: dict[str, Any], label: str, t: _Timeout | None) -> None:
    if label in row["reported_by"]:
        return
    row["reported_by"].append(label)
    if t is None:  # a status line only: the work failed there, op and sizes not printed
        return
    row["ops"].setdefault(t.op or "?", []).append(label)
    row["numel_in"].setdefault(str(t.numel_in) if t.numel_in is not None else "?", []).append(label)
    if t.ran_ms is not None and (row["ran_ms_max"] is None or t.ran_ms > row["ran_ms_max"]):
        row["ran_ms_max"] = t.ran_ms
    if row["line"] is None:
        row["line"] = t.line[:MAX_QUOTE_CHARS]
    if row["numel_out"] is None:
        row["numel_out"] = t.numel_out
    if row["timeout_ms"] is None:
        row["timeout_ms"] = t.timeout_ms


def _timeout_rows(tally: WatchdogTally) -> list[dict[str, Any]]:
    """One row per (group, sequence number) that timed out or failed: the op, sizes and who reported
    it (a rank's status line counts: its watchdog failed at that work).

    A timeout printed without its group (``[Rank r]``, its status line not in the log) joins the one
    named group's row with the same sequence number, op and sizes, listed in ``group_inferred``; with
    no such row, or several, it stays in a row of its own (never compared with a named group).
    """
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    unknown = tally.groups.get(_UNKNOWN_GROUP)
    for uid, group in tally.groups.items():
        if group is unknown:
            continue
        for group_rank, member in group.members.items():
            label = _member_label(group, group_rank, member)
            reports: list[tuple[int, _Timeout | None]] = list(member.timeouts.items())
            if member.failed_at is not None and member.failed_at not in member.timeouts:
                reports.append((member.failed_at, None))
            for seq, t in reports:
                row = rows.get((uid, seq))
                if row is None:
                    if len(rows) >= MAX_TIMEOUT_ROWS:
                        continue
                    row = rows[(uid, seq)] = _new_row(group, seq, t)
                _add_report(row, label, t)
    if unknown is not None:
        for group_rank, member in unknown.members.items():
            label = _member_label(unknown, group_rank, member)
            for seq, t in member.timeouts.items():
                sig = (
                    t.op or "?",
                    str(t.numel_in) if t.numel_in is not None else "?",
                    t.numel_out,
                    t.timeout_ms,
                )
                same = [
                    r
                    for (uid, s), r in rows.items()
                    if s == seq
                    and uid != _UNKNOWN_GROUP
                    and (*r["ops"], *r["numel_in"], r["numel_out"], r["timeout_ms"]) == sig
                ]
                if len(same) == 1:
                    _add_report(same[0], label, t)
                    same[0]["group_inferred"].append(label)
                    continue
                row = rows.get((_UNKNOWN_GROUP, seq))
                if row is None:
                    if len(rows) >= MAX_TIMEOUT_ROWS:
                        continue
                    row = rows[(_UNKNOWN_GROUP, seq)] = _new_row(unknown, seq, t)
                _add_report(row, label, t)
    return sorted(
        rows.values(), key=lambda r: (r["process_group"] is None, str(r["process_group"]), r["seq"])
    )


def _labels(labels: Sequence[str]) -> str:
    """``rank 0, rank 1, …`` compacted to ``ranks 0-7`` when every label is a plain global rank."""
    nums = [int(x[5:]) for x in labels if x.startswith("rank ") and x[5:].isdigit()]
    if len(nums) == len(labels) and nums:
        return ("rank " if len(set(nums)) == 1 else "ranks ") + _rank_list(nums)
    shown = ", ".join(labels[:8])
    return shown + (f" (+{len(labels) - 8} more)" if len(labels) > 8 else "")


def _timeout_findings(rows: Sequence[dict[str, Any]]) -> list[Finding]:
    findings = []
    for row in rows:
        op = "/".join(row["ops"])
        numel = "/".join(row["numel_in"])
        where = row["process_group"] or "a process group the log does not name"
        timeout = f", timeout {row['timeout_ms']} ms" if row["timeout_ms"] is not None else ""
        findings.append(
            Finding(
                Status.CRITICAL,
                f"{op} #{row['seq']} on {where} timed out (NumelIn {numel}{timeout}); "
                f"reported by {_labels(row['reported_by'])}",
                {
                    k: row[k]
                    for k in (
                        "process_group",
                        "seq",
                        "ops",
                        "numel_in",
                        "numel_out",
                        "timeout_ms",
                        "ran_ms_max",
                    )
                }
                | {"reported_by": row["reported_by"][:MAX_SUSPECTS], "line": row["line"]},
            )
        )
    return findings


def _mismatches(tally: WatchdogTally, suspects: _Suspects) -> list[Finding]:
    """Within one group and sequence number, ranks whose NumelIn (or op) differs from the majority."""
    findings: list[Finding] = []
    for uid, group in tally.groups.items():
        if uid == _UNKNOWN_GROUP:
            continue
        by_seq: dict[int, list[tuple[int, _Member, _Timeout]]] = {}
        for group_rank, member in group.members.items():
            for seq, t in member.timeouts.items():
                by_seq.setdefault(seq, []).append((group_rank, member, t))
        for seq, reports in sorted(by_seq.items()):
            for what in ("NumelIn", "OpType"):
                votes: dict[Any, list[tuple[int, _Member, _Timeout]]] = {}
                for r in reports:
                    value: object = r[2].numel_in if what == "NumelIn" else r[2].op
                    if value is not None:
                        votes.setdefault(value, []).append(r)
                if len(votes) < 2:
                    continue
                top = max(len(v) for v in votes.values())
                majority = [k for k, v in votes.items() if len(v) == top]
                odd = [(k, r) for k, v in votes.items() if len(v) < top or len(majority) > 1 for r in v]
                summary = ", ".join(
                    f"{k}: {_labels([_member_label(group, g, m) for g, m, _ in v])}" for k, v in votes.items()
                )
                findings.append(
                    Finding(
                        Status.CRITICAL,
                        f"{what} differs across the ranks of {group.label} at #{seq} ({summary}): "
                        "a wrong-size or skipped collective",
                        {
                            "process_group": group.label,
                            "seq": seq,
                            "field": what,
                            "values": {str(k): len(v) for k, v in votes.items()},
                        },
                    )
                )
                for value, (group_rank, member, t) in odd:
                    common = majority[0] if len(majority) == 1 else None
                    reason = f"{what} {value} at #{seq} of {group.label}" + (
                        f" where the others have {common}" if common is not None else " (no majority)"
                    )
                    suspects.add(
                        member.global_rank,
                        "size-mismatch" if what == "NumelIn" else "op-mismatch",
                        reason,
                        group=group.label,
                        group_rank=group_rank,
                        source=member.source,
                        evidence=[t.line],
                    )
    return findings


def _lagging(tally: WatchdogTally, suspects: _Suspects) -> list[Finding]:
    """Ranks whose last completed work is behind the others' in the same group."""
    findings: list[Finding] = []
    for uid, group in tally.groups.items():
        if uid == _UNKNOWN_GROUP:
            continue
        progress = {g: (m, m.progress()) for g, m in group.members.items()}
        known = {g: p for g, (_m, p) in progress.items() if p is not None}
        if len(known) < 2:
            continue
        best = max(known.values())
        behind = sorted((g for g, p in known.items() if p < best), key=lambda g: known[g])
        if not behind:
            continue
        failed = any(m.failed for m in group.members.values())
        labels = [_member_label(group, g, progress[g][0]) for g in behind]
        findings.append(
            Finding(
                Status.CRITICAL if failed else Status.WARNING,
                f"{_labels(labels)} behind in {group.label}: last completed work "
                f"{'/'.join(str(known[g]) for g in behind[:8])} where the others reached {best}",
                {
                    "process_group": group.label,
                    "group_last_completed": best,
                    "behind": {label: known[g] for label, g in zip(labels, behind, strict=True)},
                },
                device=labels[0] if len(labels) == 1 else None,
            )
        )
        for g in behind:
            member = progress[g][0]
            reason = (
                f"last completed work {known[g]} in {group.label}, the others {best}: the group waits on it"
            )
            suspects.add(
                member.global_rank,
                "lagging",
                reason,
                group=group.label,
                group_rank=g,
                source=member.source,
                evidence=member.lines,
            )
    return findings


def _silent(
    tally: WatchdogTally, layout: ParallelLayout | None, topology: Any, suspects: _Suspects, failed: bool
) -> tuple[list[Finding], dict[str, Any]]:
    """Ranks of the job's world (from the layout) that printed nothing at all."""
    if layout is None:
        return [], {"world_size": None}
    world = layout.world_size
    info: dict[str, Any] = {"world_size": world}
    if not tally.ranks_seen:
        info["silent_ranks"] = None
        info["silent_note"] = "no line names a job-wide rank (no [rankN]: prefix, file name or default group)"
        return [], info
    silent = [r for r in range(world) if r not in tally.ranks_seen]
    outside = sorted(r for r in tally.ranks_seen if r >= world)
    info["silent_ranks"] = _rank_list(silent) if silent else ""
    if outside:
        info["ranks_outside_layout"] = _rank_list(outside)
    if not silent:
        return [], info
    reporters = _failed_global_ranks(tally)
    status = Status.CRITICAL if failed else Status.WARNING
    label = ("rank " if len(silent) == 1 else "ranks ") + _rank_list(silent)
    findings = [
        Finding(
            status,
            f"{label} of {world} printed nothing: likely dead, or hung before enqueueing the collective the "
            "others wait for (or its log was not given)",
            {"silent_ranks": _rank_list(silent), "world_size": world, "ranks_seen": len(tally.ranks_seen)},
            device=label if len(silent) == 1 else None,
        )
    ]
    reason = "printed nothing while " + (
        "the others reported a timeout or failure" if failed else "the other ranks printed"
    )
    for rank in silent:  # every one counted in suspect_ranks; past MAX_SUSPECTS not listed one by one
        evidence = _group_evidence(topology, rank, reporters) if len(suspects.items) < MAX_SUSPECTS else []
        suspects.add(rank, "silent", reason, evidence=evidence)
    return findings, info


def _failed_global_ranks(tally: WatchdogTally) -> set[int]:
    out = set(tally.failed_ranks)
    for group in tally.groups.values():
        for member in group.members.values():
            if member.failed and member.global_rank is not None:
                out.add(member.global_rank)
    out.update(h.rank for h in tally.hangs if h.rank is not None)
    return out


def _group_evidence(topology: Any, rank: int, reporters: set[int]) -> list[str]:
    """For each parallel group of ``rank`` (by the layout): its members and which reported a failure."""
    if topology is None or not 0 <= rank < topology.world_size:
        return []
    from robustctl.inventory.topology import DIMS

    out = []
    for dim in DIMS:
        if topology.sizes[dim] <= 1:
            continue
        members = topology.group_of(rank, dim)
        failed = [m for m in members if m in reporters]
        out.append(
            f"{dim} group {_rank_list(members)}: "
            + (
                f"{_rank_list(failed)} reported a timeout/failure"
                if failed
                else "no member reported a failure"
            )
        )
    return out[:MAX_EVIDENCE_LINES]


def _hang_findings(tally: WatchdogTally, suspects: _Suspects) -> list[Finding]:
    if not tally.hangs:
        return []
    ranks = sorted({h.rank for h in tally.hangs if h.rank is not None})
    seconds = sorted({h.stuck_s for h in tally.hangs if h.stuck_s is not None})
    who = (
        ("rank " if len(ranks) == 1 else "ranks ") + _rank_list(ranks)
        if ranks
        else f"{len(tally.hangs)} rank(s)"
    )
    for h in tally.hangs:
        stuck = f" for {h.stuck_s} s" if h.stuck_s is not None else ""
        suspects.add(
            h.rank,
            "watchdog-stuck",
            f"its NCCL watchdog thread was stuck{stuck}: a CUDA/NCCL call "
            "hangs on that host (GPU, driver, or a thread holding the GIL in a CUDA call)",
            group=h.group,
            group_rank=h.group_rank,
            source=h.source,
            evidence=h.lines,
        )
    return [
        Finding(
            Status.CRITICAL,
            f"NCCL watchdog stuck on {who}"
            + (f" for {'/'.join(map(str, seconds))} s" if seconds else "")
            + ": a local CUDA/driver hang on that host, not a missing peer",
            {
                "ranks": _rank_list(ranks),
                "stuck_s": seconds,
                "count": len(tally.hangs) + tally.hangs_dropped,
                "line": tally.hangs[0].lines[0],
            },
            device=who if len(ranks) == 1 else None,
        )
    ]


def _reporter_group(tally: WatchdogTally, reporter: int | None) -> _Group | None:
    """The one named group in which ``reporter`` (a global rank) reported a failure, if exactly one."""
    if reporter is None:
        return None
    found = [
        g
        for g in tally.groups.values()
        if g.uid != _UNKNOWN_GROUP and any(m.failed and m.global_rank == reporter for m in g.members.values())
    ]
    return found[0] if len(found) == 1 else None


def _desync_findings(tally: WatchdogTally, suspects: _Suspects) -> list[Finding]:
    """The desync report quoted, and the ranks it names.

    The report numbers the ranks of the group that timed out: they are job-wide ranks when that
    group is the default one (or the log names no other), else they are named by group and rank.
    """
    named: list[tuple[int | None, WatchdogLine]] = [
        (rep, ev)
        for rep, ev in tally.desync
        if ev.desync in ("never-joined", "joined-not-finished", "finished-not-joined")
    ]
    if not tally.desync_lines:
        return []
    only_default = all(g.is_default or g.uid == _UNKNOWN_GROUP for g in tally.groups.values())
    for reporter, ev in named:
        group = _reporter_group(tally, reporter)
        global_scope = group.is_default if group is not None else only_default
        label = group.label if group is not None else "the timed-out process group"
        line = ev.raw.strip()
        reason = f"the desync report (rank {reporter if reporter is not None else '?'}) says: {line}"
        for r in ev.desync_ranks:
            if global_scope:
                suspects.add(r, "desync", reason, group=label if group is not None else None, evidence=[line])
                continue
            member = group.members.get(r) if group is not None else None
            known = member.global_rank if member is not None else None  # the group rank's own lines
            suspects.add(known, "desync", reason, group=label, group_rank=r, evidence=[line])
    verdict = [ev.raw.strip() for _rep, ev in named] or tally.desync_lines
    return [
        Finding(
            Status.CRITICAL,
            "TORCH_NCCL_DESYNC_DEBUG: "
            + " | ".join(v[:MAX_QUOTE_CHARS] for v in verdict[:MAX_EVIDENCE_LINES]),
            {"report": tally.desync_lines},
        )
    ]


def _summary(
    rows: Sequence[dict[str, Any]],
    suspects: _Suspects,
    tally: WatchdogTally,
    status: Status,
    layout_known: bool,
) -> str:
    parts = []
    if rows:
        row = rows[0]
        where = row["process_group"] or "unnamed PG"
        more = f" (+{len(rows) - 1} more timed-out collective(s))" if len(rows) > 1 else ""
        parts.append(
            f"{'/'.join(row['ops'])} #{row['seq']} timed out on {where}, {len(row['reported_by'])} rank(s) "
            f"reported{more}"
        )
    elif tally.hangs:
        parts.append("NCCL watchdog stuck")
    elif status is Status.CRITICAL:
        parts.append("NCCL operations failed or timed out")
    if suspects.items:
        first = sorted(suspects.items, key=lambda s: (s["rank"] is None, s["rank"] or 0))
        cats = sorted({s["category"] for s in suspects.items})
        ranks = sorted(suspects.ranks)
        who = (
            ("rank " if len(ranks) == 1 else "ranks ") + _rank_list(ranks)
            if ranks
            else first[0]["process_group"]
        )
        parts.append(f"suspect {who} ({', '.join(cats)})")
    elif status is Status.CRITICAL and layout_known:
        parts.append("no rank named: every rank of the layout printed, none behind or odd")
    elif status is Status.CRITICAL:
        parts.append("no rank named (pass --layout to find ranks that printed nothing)")
    if not parts:
        return f"no watchdog timeout or failure in {tally.watchdog_lines} watchdog line(s) of {len(tally.ranks_seen)} rank(s)"
    return "; ".join(parts)


def evaluate(
    tally: WatchdogTally, *, layout: ParallelLayout | None = None, ranks_per_host: int | None = None
) -> Verdict:
    """Judge a job's watchdog lines: the timed-out collective, lagging, silent and stuck ranks.

    CRITICAL when a timeout or failure is found (a timeout, a failure status line, a stuck watchdog,
    a desync report, "Some NCCL operations have failed"); WARNING for ranks behind the others (or
    silent) without one; OK for a clean log.

    Args:
        tally: the lines (:meth:`WatchdogTally.settle` is called here).
        layout: the job's parallel layout (its world size finds ranks that printed nothing, its groups
            say which group members did); ``None``: silent ranks are not looked for.
        ranks_per_host: ranks per machine, for the suspects' machines; ``None``: unknown.

    Returns:
        The verdict; ``details`` names the suspects as ``stacks --json`` does (``suspects``,
        ``suspect_ranks``, ``suspect_hosts``, ``likely_culprits``), each with its process group,
        reason and evidence lines.
    """
    tally.settle()
    topology = None
    if layout is not None:
        from robustctl.inventory.topology import Topology

        try:
            topology = Topology(layout, ranks_per_host)
        except Exception:  # a bad ranks-per-host only loses the machines
            topology = Topology(layout)
    suspects = _Suspects(topology)
    failed = tally.failures > 0
    rows = _timeout_rows(tally)
    findings = _timeout_findings(rows)
    findings += _mismatches(tally, suspects)
    findings += _lagging(tally, suspects)
    findings += _hang_findings(tally, suspects)
    findings += _desync_findings(tally, suspects)
    silent_findings, silent_info = _silent(tally, layout, topology, suspects, failed)
    findings += silent_findings
    if tally.failed_lines and not rows:
        findings.append(
            Finding(
                Status.CRITICAL,
                "NCCL operations failed or timed out on "
                + (("ranks " + _rank_list(tally.failed_ranks)) if tally.failed_ranks else "some rank"),
                {"line": tally.failed_lines[0]},
            )
        )
    status = (
        Status.CRITICAL if failed else Status.worst(f.status for f in findings) if findings else Status.OK
    )
    if status is Status.SKIPPED:
        status = Status.OK
    details = _details(tally, rows, suspects, silent_info)
    summary = _summary(rows, suspects, tally, status, layout is not None)
    return Verdict(status, summary, sort_findings(findings), details)


def _details(
    tally: WatchdogTally, rows: Sequence[dict[str, Any]], suspects: _Suspects, silent_info: Mapping[str, Any]
) -> dict[str, Any]:
    groups = []
    for uid, group in list(tally.groups.items())[:MAX_TIMEOUT_ROWS]:
        completed = {
            _member_label(group, g, m): m.progress() for g, m in list(group.members.items())[:MAX_SUSPECTS]
        }
        groups.append(
            {
                "process_group": None if uid == _UNKNOWN_GROUP else group.label,
                "uid": None if uid == _UNKNOWN_GROUP else uid,
                "pg_ids": sorted(group.pg_ids),
                "desc": group.desc,
                "members": len(group.members),
                "last_completed": completed,
            }
        )
    return {
        "lines": tally.lines,
        "watchdog_lines": tally.watchdog_lines,
        "formats": sorted(tally.formats),
        "ranks_seen": _rank_list(tally.ranks_seen) if tally.ranks_seen else "",
        "rank_count": len(tally.ranks_seen),
        "process_groups": groups,
        "process_groups_not_listed": max(0, len(tally.groups) - MAX_TIMEOUT_ROWS),
        "timeouts": rows,
        "desync_report": tally.desync_lines,
        "watchdog_stuck": [
            {
                "rank": h.rank,
                "group_rank": h.group_rank,
                "process_group": h.group,
                "stuck_s": h.stuck_s,
                "source": h.source,
            }
            for h in tally.hangs[:MAX_SUSPECTS]
        ],
        **dict(silent_info),
        **suspects.json(),
        "dropped": {
            "groups": tally.groups_dropped,
            "members": tally.members_dropped,
            "pending_timeouts": tally.pending_dropped,
            "watchdog_stuck": tally.hangs_dropped,
        },
    }


def _member_lines(data: bytes) -> Iterator[str]:
    """The lines of a member's bytes, decoded one at a time (memory flat in the file's size)."""
    for raw in io.BytesIO(data):
        yield raw.decode("utf-8", errors="replace")


def analyze_members(members: Sequence[GroupMember], options: AnalysisOptions) -> Verdict:
    """The ``nccl-watchdog`` group kind's analysis: every claimed log of a job, one verdict.

    Args:
        members: the logs (one with ``[rankN]:`` prefixes, or one per rank), decompressed.
        options: the job's layout and ranks per host, when given (``--layout``, ``-G``).

    Returns:
        The verdict of :func:`evaluate` over all the logs' lines.
    """
    tally = WatchdogTally()
    for m in members:
        tally.add_text(_member_lines(m.data), source=m.name, file_rank=rank_from_name(m.base))
    return evaluate(tally, layout=options.layout, ranks_per_host=options.ranks_per_host)
