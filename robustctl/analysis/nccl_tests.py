"""Parse and judge nccl-tests output (``all_reduce_perf``, ``all_gather_perf``, ``alltoall_perf``, ...).

The parser takes the text as people save it: with or without the ``# nThread ...`` header and the
``# Using devices`` rank lines, with any launcher's line prefixes (a run of tags in any order:
``[0]``, ``[1,0]<stdout>:``, Ray's ``(RayWorker pid=N, ip=...)``, ``host:`` and ``srun -l`` ``0:``
labels, timestamps; :data:`MAX_PREFIX_TAGS`) or indentation, the current ``#wrong`` column or the old
``error`` column (max absolute error), ``N/A`` cells, and tables cut at either end (no column header,
no ``# Avg bus bandwidth`` line). A run that failed, with or without a table, is read from its error
lines: nccl-tests' ``HOST: Test NCCL failure`` / ``Test CUDA failure`` lines and NCCL's ``HOST:PID:TID
[DEV] ... NCCL WARN`` lines, which name the hosts, pids and devices and give the failure a class
(:data:`ERROR_CLASSES`: CUDA device state, NVLS, IB/RoCE transport, socket bootstrap, other).

Bus bandwidth (nccl-tests ``doc/PERFORMANCE.md``, https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):
``busbw = algbw x factor`` with factor ``2(n-1)/n`` for all-reduce, ``(n-1)/n`` for reduce-scatter,
all-gather and all-to-all, ``1`` for broadcast and reduce. With one rank the factor is 0, so
``busbw`` is 0 by definition (NVIDIA/nccl-tests#287): the bandwidth verdict is "not applicable".

Verdict (:func:`evaluate`), most severe first:

- wrong values -> CRITICAL: any ``#wrong`` > 0, an old ``error`` value above the data type's
  tolerance (nccl-tests' ``DeltaMaxValue``: 5e-2 for 16-bit floats, 1e-5 for float, 1e-12 for
  double, any non-zero for integers), or ``# Out of bounds values : N FAILED`` (NVIDIA/nccl-tests#37);
- the run failed (``Test NCCL failure``, ``Test CUDA failure``, an NCCL ``communicator encountered a
  fatal error``, or NCCL ``WARN`` lines and no table row) -> CRITICAL, with its error lines, hosts and
  class; NCCL ``WARN`` lines naming a device or transport class beside a complete table -> WARNING;
- busbw 0 at every size with more than one rank -> CRITICAL (invalid measurement);
- one rank -> NOT_APPLICABLE for bandwidth;
- an expected busbw given: peak busbw below it -> WARNING, below ``critical_fraction`` (default 0.8)
  of it -> CRITICAL. 20% is well above nccl-tests' run-to-run noise (a few %) and is what a lost
  NVLink, a PCIe link trained down or a fallback to a slower path (``NCCL_P2P_DISABLE``, SYS) looks
  like; a small shortfall is reported but does not name the host a suspect;
- the busbw curve collapses -> WARNING, with or without an expected busbw (:func:`busbw_collapses`):
  busbw climbs to a peak and then **every** larger message size of the same sweep stays below
  ``COLLAPSE_RATIO`` (1/2) of the peak, over at least ``COLLAPSE_MIN_SIZES`` (2) sizes, with a peak
  of at least ``COLLAPSE_MIN_PEAK_GBPS`` (1 GB/s). A healthy sweep rises and plateaus; the normal
  wobble past the plateau stays well above half the peak (e.g. the 8x H100 alltoall sample: peak
  137.29 GB/s at 256 MiB, 104.94 at 512 MiB, 113.52 at 8 GiB), so it is not flagged, and neither
  is one low last size. A several-fold fall at every larger size is the signature of an algorithm
  or protocol switch (NVLS, PXN, tree/ring), a buffer or registration limit, or a bad link
  (NVIDIA/nccl#2169 "alltoall throughput drops sharply above 512 MB message size";
  aws/aws-ofi-nccl#65 "Performance degradation for buffer size starting from ~46MB"). A sweep is
  the run of rows with the same type/redop/root and growing sizes; a new table starts a new sweep.
- no table rows -> UNKNOWN.

The figure compared is the **peak** busbw (max over every row, out-of-place and in-place), not the
``# Avg bus bandwidth`` line: a sweep from 8 B averages in latency-bound sizes and reads far below
the link rate (e.g. 50.7 GB/s average for a 137 GB/s peak). In-place figures whose ``#wrong`` is
``N/A`` while the out-of-place figure was checked were not validated by nccl-tests (e.g. in-place
all-to-all, whose in-place figure on one rank reads 43046 GB/s in nccl-tests#287) and are left out
of the peak.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from robustctl.analysis import Finding, Verdict, sort_findings
from robustctl.models import Status, to_jsonable
from robustctl.thresholds import beyond_max, beyond_min, ladder

__all__ = [
    "BUSBW_FACTOR_FAMILY",
    "COLLAPSE_MIN_PEAK_GBPS",
    "COLLAPSE_MIN_SIZES",
    "COLLAPSE_RATIO",
    "ERROR_CLASSES",
    "ERROR_HINTS",
    "BusbwCollapse",
    "NcclErrorHost",
    "NcclErrorLine",
    "NcclMeasurement",
    "NcclRank",
    "NcclRow",
    "NcclTestsResult",
    "busbw_collapses",
    "busbw_factor",
    "error_class",
    "evaluate",
    "infer_rank_count",
    "looks_like_nccl_tests",
    "parse_nccl_tests",
]

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "alltoall",
    "alltoallv",
    "broadcast",
    "reduce_scatter",
    "reduce",
    "sendrecv",
    "scatter",
    "gather",
    "hypercube",
)

BUSBW_FACTOR_FAMILY: dict[str, str] = {
    "all_reduce": "2(n-1)/n",
    "reduce_scatter": "(n-1)/n",
    "all_gather": "(n-1)/n",
    "alltoall": "(n-1)/n",
    "alltoallv": "(n-1)/n",
    "scatter": "(n-1)/n",
    "gather": "(n-1)/n",
    "broadcast": "1",
    "reduce": "1",
    "sendrecv": "1",
}
"""busbw/algbw factor of each collective, from nccl-tests ``doc/PERFORMANCE.md`` and its sources."""

# nccl-tests' DeltaMaxValue(): the largest absolute error tolerated per data type (old `error` column).
_TOLERANCE = {
    "half": 5e-2,
    "float16": 5e-2,
    "bfloat16": 5e-2,
    "float": 1e-5,
    "float32": 1e-5,
    "double": 1e-12,
    "float64": 1e-12,
}
_INT_TOLERANCE = 0.0


@dataclass(frozen=True)
class NcclMeasurement:
    """One half (out-of-place or in-place) of a table row.

    Attributes:
        time_us: average time of one operation, microseconds.
        algbw_gbps: algorithm bandwidth, GB/s (size / time).
        busbw_gbps: bus bandwidth, GB/s.
        wrong: the ``#wrong`` count, or the old ``error`` column's max absolute error; ``None``
            when the cell is ``N/A`` (not validated).
    """

    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: float | None

    @property
    def validated(self) -> bool:
        """True when nccl-tests checked this result (the wrong/error cell is not ``N/A``)."""
        return self.wrong is not None


@dataclass(frozen=True)
class NcclRow:
    """One table row: one message size.

    Attributes:
        size_bytes: message size in bytes. count: elements. dtype: ``"float"``, ``"half"``, ...
        redop: reduction (``"sum"``, ``"none"``) or ``None`` in the old format.
        root: root rank, ``-1`` for rootless collectives, ``None`` in the old format.
        out_of_place: the out-of-place measurement. in_place: the in-place one, when printed.
        line: 1-based line number in the text.
    """

    size_bytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    out_of_place: NcclMeasurement
    in_place: NcclMeasurement | None
    line: int


@dataclass(frozen=True)
class NcclRank:
    """One ``#  Rank  0 Group  0 Pid 1623025 on host device  0 [0x1b] NVIDIA H100`` line."""

    rank: int
    pid: int | None
    host: str
    device: int
    bus_id: str
    name: str


ERROR_CLASSES: dict[str, str] = {
    "cuda-device": "CUDA device state",
    "nvls": "NVLS/NVSwitch",
    "ib-transport": "IB/RoCE transport",
    "socket-bootstrap": "socket bootstrap / environment not propagated",
    "other": "other",
}
"""The classes of a failed run's error lines, most telling first (:func:`error_class`), and their
labels. A GPU that is unavailable or faulted makes NVLS, the network and the peers' sockets fail
after it; an NVLS or IB failure closes the peers' sockets too; so a run's class is the first of these
that any of its error lines shows, and ``socket-bootstrap`` alone means the hosts never reached each
other (interface, firewall, or an environment such as ``NCCL_SOCKET_IFNAME`` not passed to every
rank)."""

ERROR_HINTS: dict[str, str] = {
    "cuda-device": "a GPU unavailable, not initialised (fabric manager) or faulted: check nvidia-smi, "
    "the fabric manager and the kernel log (XID) of the host named",
    "nvls": "NVLink SHARP (multicast) setup failed: check the fabric manager (restarted without a GPU "
    "reset?); NCCL_NVLS_ENABLE=0 confirms it",
    "ib-transport": "the IB/RoCE path failed: check the HCAs (ibstat), the GID index, ACS and GPU Direct "
    "RDMA, and the links of the hosts named",
    "socket-bootstrap": "the ranks could not reach each other over TCP: check NCCL_SOCKET_IFNAME and the "
    "interface, firewalls, and that the launcher passes the environment to every rank (mpirun -x)",
    "other": "see the error lines",
}
"""What to check for each class (NCCL troubleshooting guide and the maintainers' answers in the threads
of tests/data/nccl-tests/INDEX.md)."""


@dataclass(frozen=True)
class NcclErrorLine:
    """One error line of a run: nccl-tests' ``HOST: Test NCCL failure ...``, an NCCL ``WARN`` line or
    an NCCL line saying the communicator failed.

    Attributes:
        line: 1-based line number in the text. kind: ``"test-failure"``, ``"warn"`` or ``"fatal"``.
        error_class: a key of :data:`ERROR_CLASSES`.
        host, pid, device: from the line's ``HOST:PID:TID [DEV]`` (or ``HOST: Test ...``) prefix;
            ``None`` where the line does not name them.
        text: the line without launcher tags, cut to :data:`MAX_ERROR_LINE_CHARS`.
    """

    line: int
    kind: str
    error_class: str
    host: str | None
    pid: int | None
    device: int | None
    text: str


@dataclass(frozen=True)
class NcclErrorHost:
    """A host named by the error lines (and nccl-tests' ``.. HOST pid N: Test failure`` lines).

    Attributes:
        host: the host name as printed. errors: error lines naming it.
        pids, devices: the processes and CUDA devices named, in order of first appearance (at most
            :data:`MAX_ERROR_HOST_IDS` of each).
        classes: the classes of its error lines, in :data:`ERROR_CLASSES` order.
    """

    host: str
    errors: int
    pids: tuple[int, ...]
    devices: tuple[int, ...]
    classes: tuple[str, ...]


@dataclass(frozen=True)
class NcclTestsResult:
    """Everything parsed from one nccl-tests output.

    Attributes:
        collective: ``"all_reduce"``, ``"alltoall"``, ... from the command line, else guessed from
            the columns (``"all_reduce"`` when busbw > algbw), else ``None``.
        collective_source: ``"command"``, ``"columns"`` or ``None``.
        rows: every table row, in order.
        error_column: ``"#wrong"`` (current format), ``"error"`` (old format) or ``None`` (no header).
        header: the ``# nThread 1 nGpus 8 minBytes ...`` values as strings (``{"nGpus": "8", ...}``).
        ranks: the ``# Using devices`` lines.
        rank_count: number of ranks; ``None`` when it cannot be known.
        rank_count_source: ``"devices"`` (rank lines), ``"command"`` (``-g``/``-t``/``-np`` of a
            command line), ``"busbw/algbw"`` (inferred from the ratio) or ``None``.
        hosts: distinct host names of the rank lines, in order.
        out_of_bounds: the ``# Out of bounds values : N`` count. out_of_bounds_ok: ``OK`` -> True,
            ``FAILED`` -> False; ``None`` when the line is missing.
        avg_busbw_gbps: the ``# Avg bus bandwidth`` line, ``None`` when missing.
        failures: ``Test NCCL failure ...`` / ``Test CUDA failure ...`` lines.
        truncated: True when the column header or the Avg line is missing.
        rows_dropped: table rows read after the first :data:`MAX_ROWS` and not kept (neither
            wrong values nor a new peak busbw; see :data:`MAX_EXTRA_ROWS`).
        failures_dropped: failure lines read after the first :data:`MAX_FAILURES`.
        errors: the error lines kept (:class:`NcclErrorLine`): the first :data:`MAX_ERROR_LINES`, plus
            the first line of each class read after them. errors_dropped: error lines not kept.
        error_counts: error lines read per class (every line, kept or not).
        error_hosts: the hosts the error lines name, in order of first appearance (at most
            :data:`MAX_ERROR_HOSTS`).
        error_class: the run's class (:func:`error_class`); ``None`` without error or failure lines.
        fatal_lines: NCCL lines saying the communicator failed (``communicator encountered a fatal
            error``, ``ncclCommInitRank ... failed``).
    """

    collective: str | None
    collective_source: str | None
    rows: tuple[NcclRow, ...]
    error_column: str | None
    header: dict[str, str]
    ranks: tuple[NcclRank, ...]
    rank_count: int | None
    rank_count_source: str | None
    hosts: tuple[str, ...]
    out_of_bounds: int | None
    out_of_bounds_ok: bool | None
    avg_busbw_gbps: float | None
    failures: tuple[str, ...]
    truncated: bool
    rows_dropped: int = 0
    failures_dropped: int = 0
    errors: tuple[NcclErrorLine, ...] = ()
    errors_dropped: int = 0
    error_counts: dict[str, int] = field(default_factory=dict)
    error_hosts: tuple[NcclErrorHost, ...] = ()
    error_class: str | None = None
    fatal_lines: int = 0

    @property
    def failed(self) -> bool:
        """True when the output says the run failed: a ``Test ... failure`` line, an NCCL line saying
        the communicator failed, or NCCL ``WARN`` lines and no result row."""
        return bool(self.failures) or self.fatal_lines > 0 or (not self.rows and bool(self.errors))

    def peak(self) -> tuple[float, NcclRow, str] | None:
        """The peak busbw, the row it was measured on and ``"out-of-place"``/``"in-place"``.

        In-place figures that nccl-tests did not validate (``N/A`` while out-of-place was checked)
        are left out. ``None`` when there are no rows.
        """
        best: tuple[float, NcclRow, str] | None = None
        for row in self.rows:
            for placement, m in _measurements_for_peak(row):
                if best is None or m.busbw_gbps > best[0]:
                    best = (m.busbw_gbps, row, placement)
        return best


def _measurements_for_peak(row: NcclRow) -> list[tuple[str, NcclMeasurement]]:
    out = [("out-of-place", row.out_of_place)]
    ip = row.in_place
    if ip is not None and (ip.validated or not row.out_of_place.validated):
        out.append(("in-place", ip))
    return out


# --- parsing -----------------------------------------------------------------------------------

MAX_PREFIX_TAGS = 16
"""Launcher tags stripped from the start of one line. Real stacks hold two or three (a Ray worker tag,
then mpirun's ``[1,0]<stdout>:``, then a timestamp); 16 leaves room for wrappers of wrappers while a
line of nothing but tags cannot make the prefix match walk the whole line."""

_MAX_TAG_CHARS = 200
"""Longest bracketed or parenthesised tag (a Ray ``(RayWorkerWrapper pid=1234, ip=...)`` tag is about
50 characters); a longer ``(...)`` or ``[...]`` is text, not a tag."""

# One launcher tag at the start of a line (the class of line prefixes, stacked in any order):
# - a bracketed tag: mpirun ``[1,0]<stdout>:``, MPICH ``[0]``, a bracketed timestamp ``[2024-05-01T12:00:00Z]``;
# - a parenthesised tag: Ray's ``(RayWorker pid=1234, ip=127.0.0.2)`` / ``(pid=1234, ip=...)``;
# - a timestamp ``2024-05-01 12:00:00,123`` (logging's default) or ISO 8601 ``2024-05-01T12:00:00.5+00:00``;
# - an ``srun -l`` label ``0:`` and a ``host:`` / ``host-name.domain:`` label (pdsh, ``kubectl logs
#   --prefix`` without its brackets), each followed by white space.
# A label is followed by white space, so NCCL's own ``HOST:PID:TID [DEV] NCCL INFO`` lines keep their
# host, and nccl-tests' ``HOST: Test NCCL failure`` keeps its host; a table row starts with a number and
# white space, a header or trailer with ``#``: neither is a tag.
_TAG = (
    rf"\[[^\[\]\n]{{0,{_MAX_TAG_CHARS}}}\](?:<std(?:out|err)>)?:?"
    rf"|\([^()\n]{{0,{_MAX_TAG_CHARS}}}\):?"
    r"|\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?:?(?=\s|$)"
    r"|\d{1,9}:(?=\s|$)(?!\s*Test (?:NCCL|CUDA) failure)"
    r"|[A-Za-z_][\w.-]{0,253}:(?=\s|$)(?!\s*Test (?:NCCL|CUDA) failure)"
)
_PREFIX_RE = re.compile(rf"^\s*(?:(?:{_TAG})\s*){{1,{MAX_PREFIX_TAGS}}}")
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_NUM_RE = re.compile(rf"^{_NUM}$")
_INT_RE = re.compile(r"^-?\d+$")
_WORD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RANK_RE = re.compile(
    r"Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+(?P<pid>\d+)\s+)?on\s+(?P<host>\S+)\s+"
    r"device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<name>.*)$"
)
_HEADER_KV_RE = re.compile(
    r"(nThread|nGpus|minBytes|maxBytes|step:|warmup iters:|iters:|agg iters:|"
    r"validation:|graph:)\s*(\S+)"
)
_OOB_RE = re.compile(r"Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?", re.IGNORECASE)
_AVG_RE = re.compile(rf"Avg bus bandwidth\s*:\s*({_NUM})", re.IGNORECASE)
_COLLECTIVE_RE = re.compile(r"(?:^|[\s/])(" + "|".join(COLLECTIVES) + r")_perf(?:_mpi)?\b")
# nccl-tests' failure lines: ``HOST: Test NCCL failure common.cu:NNN '...'`` (``Test CUDA failure``; old
# versions print ``NCCL failure all_reduce.cu:95 '...'``), then ``.. HOST pid N: Test failure common.cu:NNN``.
_FAILURE_HEAD_RE = re.compile(r"Test (?:NCCL|CUDA) failure|\b(?:NCCL|CUDA) failure [\w./-]+\.cu:\d+")
_FAILURE_RE = re.compile(rf"{_FAILURE_HEAD_RE.pattern}|Test failure\b")
_FAILURE_HOST_RE = re.compile(r"^(?P<host>[^\s:]+): (?:Test )?(?:NCCL|CUDA) failure")
_FAILURE_CONT_RE = re.compile(r"^\.\.\s*(?P<host>\S+) pid (?P<pid>\d+): Test failure")
# NCCL's debug lines: ``HOST:PID:TID [DEV] file.cc:NNN NCCL WARN message`` (old versions: ``... WARN``).
_NCCL_LINE_RE = re.compile(r"^(?P<host>[^\s:\[\]()]+) ?:(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] ")
_WARN_RE = re.compile(r"\bNCCL WARN\b|^[^\s:]+ ?:\d+:\d+ \[\d+\] (?:\S+:\d+ )?WARN\b")
_FATAL_RE = re.compile(r"communicator encountered a fatal error|\bncclCommInitRank\w*\b.*\bfailed\b")
# WARNs that NCCL prints on every host without IB (or without a network plugin) and then carries on
# over sockets or its internal transport (NCCL maintainer in NVIDIA/nccl-tests#14: "the first one is to
# be ignored unless you want to use Infiniband/RoCE"): no IB library, no IB device, no net plugin.
_BENIGN_WARN_RE = re.compile(
    r"Failed to open libibverbs|NET/IB ?: ?No device found|NET/Plugin ?: ?(?:No plugin found|Plugin load returned)",
    re.IGNORECASE,
)
# The class of one error line, tried in this order on its message (the text after the host prefix):
# an NVLS failure reads "Cuda failure 'invalid argument'" and an IB one may say "Network is unreachable",
# so the transport that printed the line is tried before the device and the socket words.
_CLASS_RES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("nvls", re.compile(r"\bNVLS\b|transport/nvls|\bnvls\.cc|cuMulticast", re.IGNORECASE)),
    (
        "ib-transport",
        re.compile(r"NET/IB|\bibv_\w+|\bIBV_WC_\w+|net_ib\.c|ib_plugin\.c|\bRoCE\b", re.IGNORECASE),
    ),
    (
        "cuda-device",
        re.compile(
            r"Test CUDA failure|cudaError\w+|no CUDA-capable device|uncorrectable ECC|ECC error"
            r"|system not yet initiali[sz]ed|busy or unavailable|devices unavailable|fallen off the bus",
            re.IGNORECASE,
        ),
    ),
    (
        "socket-bootstrap",
        re.compile(
            r"bootstrap|socket|Connection refused|Connection closed|Connect to \S+ failed"
            r"|NCCL_SOCKET_IFNAME|no socket interface found",
            re.IGNORECASE,
        ),
    ),
)
_FLAG_RE = {
    "g": re.compile(r"(?:^|\s)(?:-g|--ngpus)(?:\s+|=)(\d+)"),
    "t": re.compile(r"(?:^|\s)(?:-t|--nthreads)(?:\s+|=)(\d+)"),
    "np": re.compile(r"(?:^|\s)(?:-np|-n|--np|--ntasks)(?:\s+|=)(\d+)"),
}
_LAUNCHER_RE = re.compile(r"\b(?:mpirun|mpiexec|srun|orterun)\b")


# The same tags inside a line. nccl-tests writes a row in pieces (the size/count/type/redop/root
# columns, then each placement's time/algbw/busbw/#wrong, then the newline: ``Reporter::parameters``
# and ``Reporter::result`` in ``src/common.cu``); a launcher that tags every write it forwards
# (``mpirun --tag-output``, MPICH ``-prepend-rank``, ``srun -u``) puts the tag at each of those
# boundaries, glued to the cell before it: ``-1[0]  1626.5  0.64  1.24  0[0]  2302.3 ...``.
_INLINE_PREFIX_RE = re.compile(r"\[\d+(?:,\d+)*\]<std(?:out|err)>:?|(?<=[0-9A-Za-z/\]>])\[\d+(?:,\d+)*\]:?")
# `srun -l` labels (`0:`) left between the cells of a row by the same splitting.
_LABEL_TOKEN_RE = re.compile(r"^\d+:$")


def _strip_prefix(line: str) -> str:
    """``line`` without launcher tags: the run of them at its start (any order, at most
    :data:`MAX_PREFIX_TAGS`) and any a launcher put inside the line."""
    line = _PREFIX_RE.sub("", line, count=1)
    if "[" in line:
        line = _INLINE_PREFIX_RE.sub(" ", line)
    return line.strip()


def _num(tok: str) -> float | None:
    if _NUM_RE.match(tok):
        try:
            v = float(tok)
        except ValueError:  # pragma: no cover - the regex already guarantees a float
            return None
        return v if math.isfinite(v) else None
    return None


def _measurement(toks: list[str]) -> NcclMeasurement | None:
    time_us, algbw, busbw = (_num(t) for t in toks[:3])
    if time_us is None or algbw is None or busbw is None:
        return None
    wrong_tok = toks[3]
    wrong: float | None
    if wrong_tok.upper() == "N/A":
        wrong = None
    else:
        wrong = _num(wrong_tok)
        if wrong is None:
            return None
    return NcclMeasurement(time_us, algbw, busbw, wrong)


def _tokens(text: str) -> list[str]:
    toks = text.split()
    if any(t.endswith(":") for t in toks):
        toks = [t for t in toks if not _LABEL_TOKEN_RE.match(t)]
    return toks


def _is_cell(tok: str) -> bool:
    """A time/algbw/busbw/#wrong cell: a number or ``N/A``."""
    return tok.upper() == "N/A" or _NUM_RE.match(tok) is not None


def _row_start(toks: list[str]) -> list[str] | None:
    """The leading tokens of ``toks`` that begin a table row (size, count, type, [redop, [root]],
    then cells), or ``None`` when ``toks`` does not begin one: the first piece of a row that a
    launcher split over several lines."""
    if len(toks) < 3 or not _INT_RE.match(toks[0]) or not _INT_RE.match(toks[1]):
        return None
    if not _WORD_RE.match(toks[2]):
        return None
    i = 3
    if i < len(toks) and _WORD_RE.match(toks[i]) and toks[i].upper() != "N/A":
        i += 1
        if i < len(toks) and _INT_RE.match(toks[i]):
            i += 1
    while i < len(toks) and _is_cell(toks[i]) and i < 16:
        i += 1
    return toks[:i]


def _head(toks: list[str]) -> list[str]:
    """The size/count/type[/redop[/root]] tokens at the start of a :func:`_row_start` result."""
    n = len(toks)
    while n > 3 and _is_cell(toks[n - 1]):
        n -= 1
    return toks[:n]


def _cells(toks: list[str]) -> list[str]:
    """The leading cells of ``toks`` (a continuation piece of a split row)."""
    n = 0
    while n < len(toks) and n < 8 and _is_cell(toks[n]):
        n += 1
    return toks[:n]


def _parse_row(text: str, line_no: int) -> NcclRow | None:
    toks = _tokens(text)
    if len(toks) < 7 or not _INT_RE.match(toks[0]) or not _INT_RE.match(toks[1]):
        return None
    if not _WORD_RE.match(toks[2]):
        return None
    i = 3
    redop: str | None = None
    root: int | None = None
    if i < len(toks) and _WORD_RE.match(toks[i]) and toks[i].upper() != "N/A":
        redop = toks[i]
        i += 1
    if redop is not None and i < len(toks) and _INT_RE.match(toks[i]) and len(toks) - (i + 1) in (4, 8):
        root = int(toks[i])
        i += 1
    rest = toks[i:]
    if len(rest) not in (4, 8):
        return None
    oop = _measurement(rest[:4])
    if oop is None:
        return None
    ip: NcclMeasurement | None = None
    if len(rest) == 8:
        ip = _measurement(rest[4:])
        if ip is None:
            return None
    size, count = int(toks[0]), int(toks[1])
    if size < 0 or count < 0:
        return None
    return NcclRow(size, count, toks[2], redop, root, oop, ip, line_no)


def looks_like_nccl_tests(text: str) -> bool:
    """True when ``text`` is nccl-tests output: it holds a table (a column header, an Avg line or a
    row, whole or split over lines by a launcher), the ``nThread ... nGpus ... minBytes`` header (with
    or without its ``#``), a ``Rank N ... on HOST device N`` line, or nccl-tests' own failure line
    (``Test NCCL failure common.cu:NNN``, old versions ``NCCL failure all_reduce.cu:95``), so a run that
    failed before its table is recognised. NCCL ``WARN`` lines alone are not enough: any NCCL
    application prints them."""
    head = text.splitlines()[:20000]
    split_piece = False
    for raw in head:
        line = _strip_prefix(raw)
        low = line.lower()
        if "avg bus bandwidth" in low or ("busbw" in low and "algbw" in low):
            return True
        if "nthread" in low and "ngpus" in low and "minbytes" in low:
            return True
        if line.lstrip("# ").startswith("Rank") and _RANK_RE.search(line):
            return True
        if _FAILURE_HEAD_RE.search(line):
            return True
        if line and not line.startswith("#") and _parse_row(line, 0) is not None:
            return True
        if not split_piece and line[:1].isdigit() and _row_start(_tokens(line)) is not None:
            split_piece = True
    return split_piece and bool(parse_nccl_tests(head).rows)


def busbw_factor(collective: str | None, n: int) -> float | None:
    """busbw/algbw for ``collective`` on ``n`` ranks (nccl-tests PERFORMANCE.md), ``None`` if unknown."""
    family = BUSBW_FACTOR_FAMILY.get(collective or "")
    if family is None or n < 1:
        return None
    if family == "2(n-1)/n":
        return 2.0 * (n - 1) / n
    if family == "(n-1)/n":
        return (n - 1) / n
    return 1.0


def infer_rank_count(rows: tuple[NcclRow, ...] | list[NcclRow], family: str) -> int | None:
    """Infer the rank count from busbw/algbw, the factor of ``family`` (``"2(n-1)/n"`` or ``"(n-1)/n"``).

    Uses the row with the largest algbw (the most precise ratio) and the printed precision (0.01
    GB/s): returns ``n`` only when exactly one integer is consistent with the rounded figures, so
    large rank counts whose factors differ by less than the rounding give ``None``. busbw 0 with
    algbw > 0 gives 1.
    """
    best: NcclMeasurement | None = None
    for row in rows:
        for m in (row.out_of_place, row.in_place):
            if m is not None and (best is None or m.algbw_gbps > best.algbw_gbps):
                best = m
    if best is None or best.algbw_gbps <= 0.05:
        return None
    if best.busbw_gbps == 0:
        return 1
    half_ulp = 0.005
    r_lo = max(0.0, (best.busbw_gbps - half_ulp) / (best.algbw_gbps + half_ulp))
    r_hi = (best.busbw_gbps + half_ulp) / (best.algbw_gbps - half_ulp)
    top = 2.0 if family == "2(n-1)/n" else 1.0 if family == "(n-1)/n" else None
    if top is None:
        return None

    def n_of(r: float) -> float:
        return math.inf if r >= top else top / (top - r)

    n_lo, n_hi = n_of(r_lo), n_of(r_hi)
    if math.isinf(n_hi):
        return None
    lo, hi = math.ceil(n_lo - 1e-9), math.floor(n_hi + 1e-9)
    if lo == hi and lo >= 1:
        return lo
    return None


def _collective_from_columns(rows: list[NcclRow]) -> str | None:
    """all_reduce when busbw > algbw (factor 2(n-1)/n > 1 only for all-reduce), else ``None``."""
    for row in rows:
        m = row.out_of_place
        if m.algbw_gbps > 0.05 and m.busbw_gbps > m.algbw_gbps + 0.011:
            return "all_reduce"
    return None


def _family_from_columns(rows: list[NcclRow]) -> str | None:
    """Factor family guessed from redop/root when the collective is unknown."""
    if not rows:
        return None
    row = rows[-1]
    if row.root is not None and row.root >= 0:
        return "1"
    if row.redop is not None and row.redop.lower() == "none":
        return "(n-1)/n"  # all_gather, alltoall: rootless, no reduction
    return None


def _ranks_from_command(launcher: str, args: str) -> int | None:
    """Ranks of a command line: ``-np`` of the launcher x ``-g`` x ``-t`` of the test binary."""
    g = _FLAG_RE["g"].search(args)
    t = _FLAG_RE["t"].search(args)
    per_process = (int(g.group(1)) if g else 1) * (int(t.group(1)) if t else 1)
    if _LAUNCHER_RE.search(launcher):
        np_ = _FLAG_RE["np"].search(launcher)
        if np_ is None:
            return None
        return int(np_.group(1)) * per_process
    if g is None and t is None:
        return None
    return per_process


MAX_ROWS = 20_000
"""Table rows kept by :func:`parse_nccl_tests` (later ones are counted in ``rows_dropped``). A sweep
from 8 B to 16 GB in factors of 2 is 32 rows; 20,000 rows keep hundreds of concatenated runs while a
hostile or runaway log stays within a few tens of MB."""

MAX_EXTRA_ROWS = 1_000
"""Rows kept past :data:`MAX_ROWS` because they hold wrong values or raise the peak busbw, so the
verdict of a huge log still sees them."""


def _row_peak(row: NcclRow) -> float:
    return max(m.busbw_gbps for _, m in _measurements_for_peak(row))


def _row_wrong(row: NcclRow) -> bool:
    return any(m is not None and m.wrong for m in (row.out_of_place, row.in_place))


MAX_FAILURES = 100
"""``Test ... failure`` lines kept (later ones are counted in ``failures_dropped``)."""

MAX_ERROR_LINES = 50
"""Error lines kept as evidence (:attr:`NcclTestsResult.errors`; later ones are counted, and the first
line of each class still kept). The cause is in the first lines; past them a failure repeats the same
few lines once per rank (NVIDIA/nccl-tests#322: the same two lines from each of 256 ranks), so 50 show
several hosts' first lines while a report stays readable."""

MAX_ERROR_LINE_CHARS = 300
"""Characters kept of one error line. NCCL's longest WARN lines (an IB completion error with both GIDs,
NVIDIA/nccl#1405) are about 240 characters; a runaway line is cut, not carried whole into a report."""

MAX_ERROR_HOSTS = 4_096
"""Hosts the error lines may name (:attr:`NcclTestsResult.error_hosts`): 32,768 GPUs at 8 a host; the
rest are counted in no host (their lines still count per class)."""

MAX_ERROR_HOST_IDS = 64
"""Pids and devices kept per host: 8 GPUs with one process each is 8; 64 leaves room for several
runs in one file."""

MAX_RANKS = 1_000_000
"""``# Using devices`` ranks kept (the largest world size :mod:`robustctl.inventory.topology` accepts)."""

_MAX_HEADER_KEYS = 100
"""Distinct ``# nThread ...`` header keys kept. ``_HEADER_KV_RE`` names 10 keys, so real output never
reaches it: a backstop for the header dict should that pattern be widened to any ``key: value``."""

_MAX_SPLIT_GAP = 16
"""Lines (other ranks' output) allowed between two pieces of a row a launcher split."""


@dataclass
class _ErrorHostAcc:
    """What the error lines say about one host so far (becomes a :class:`NcclErrorHost`)."""

    errors: int = 0
    pids: list[int] = field(default_factory=list)
    devices: list[int] = field(default_factory=list)
    classes: set[str] = field(default_factory=set)

    def note(self, pid: int | None, device: int | None, cls: str | None) -> None:
        """Count one line naming the host (``cls`` ``None`` for a continuation line, not counted)."""
        if cls is not None:
            self.errors += 1
            self.classes.add(cls)
        if pid is not None and pid not in self.pids and len(self.pids) < MAX_ERROR_HOST_IDS:
            self.pids.append(pid)
        if device is not None and device not in self.devices and len(self.devices) < MAX_ERROR_HOST_IDS:
            self.devices.append(device)


def _classify(message: str) -> str:
    """The class (a key of :data:`ERROR_CLASSES`) of one error line's message."""
    if _BENIGN_WARN_RE.search(message):
        return "other"
    for cls, rx in _CLASS_RES:
        if rx.search(message):
            return cls
    return "other"


def error_class(counts: dict[str, int]) -> str | None:
    """The class of a failed run from its error lines' classes (rule in :data:`ERROR_CLASSES`).

    Args:
        counts: error lines per class (:attr:`NcclTestsResult.error_counts`).

    Returns:
        The first class of :data:`ERROR_CLASSES` with a line, ``None`` when there is none.
    """
    return next((cls for cls in ERROR_CLASSES if counts.get(cls)), None)


class _NcclTestsParser:
    """The state of :func:`parse_nccl_tests` while it reads one output, line by line.

    Feed every line to :meth:`feed` in order, then call :meth:`result` once. Each kind of line has
    its own method, which updates the fields below and says whether the line was its kind:

    - a table row, whole (:meth:`data_row`) or a piece of one a launcher split over several lines
      (:meth:`row_piece`);
    - a ``Test NCCL failure`` / ``Test CUDA failure`` line (:meth:`failure_line`), an NCCL ``WARN``
      line or an NCCL line saying the communicator failed (:meth:`error_line`);
    - the trailer: ``# Out of bounds values : N OK|FAILED`` (:meth:`out_of_bounds_line`) and
      ``# Avg bus bandwidth : X`` (:meth:`avg_busbw_line`);
    - a ``# Using devices`` rank line (:meth:`rank_line`), the ``# nThread 1 nGpus 8 minBytes ...``
      header (:meth:`config_line`), the column header (:meth:`column_header_line`) and a command
      line naming the test binary (:meth:`command_line`).

    Fields (their names match :class:`NcclTestsResult` where they end up there):
        rows: rows kept so far, in order. rows_dropped: rows read past the caps and not kept.
        extra_rows: rows kept past :data:`MAX_ROWS` (at most :data:`MAX_EXTRA_ROWS`).
        peak_busbw_gbps: the highest busbw of the rows kept (``-inf`` before the first), GB/s.
        ranks: ``# Using devices`` lines by rank. header: the ``# nThread ...`` values.
        error_column: ``"#wrong"``/``"error"`` from the column header, ``None`` before one.
        saw_column_header: True once a column header was read.
        out_of_bounds, out_of_bounds_ok, avg_busbw_gbps: the trailer lines, ``None`` before them.
        failures: failure lines kept (at most :data:`MAX_FAILURES`). failures_dropped: the others.
        collective, collective_source: from the first command line naming an nccl-tests binary.
        command_ranks: the rank count that command line gives, ``None`` when it gives none.
        pending: the tokens so far of a row a launcher split over lines (other ranks' lines may come
            in between; see :func:`_row_start`), empty when none. pending_line: the line it started
            on. pending_gap: lines read since its last piece. pending_cells: its cells so far.
        errors: error lines kept (at most :data:`MAX_ERROR_LINES`). late_errors: the first line of each
            class not among them, read past the cap. errors_dropped: the others. error_counts: lines
            per class. fatal_lines: lines saying the communicator failed. error_hosts: what the lines
            say of each host (at most :data:`MAX_ERROR_HOSTS`).
    """

    def __init__(self) -> None:
        self.rows: list[NcclRow] = []
        self.rows_dropped = 0
        self.extra_rows = 0
        self.peak_busbw_gbps = float("-inf")
        self.ranks: dict[int, NcclRank] = {}
        self.header: dict[str, str] = {}
        self.error_column: str | None = None
        self.saw_column_header = False
        self.out_of_bounds: int | None = None
        self.out_of_bounds_ok: bool | None = None
        self.avg_busbw_gbps: float | None = None
        self.failures: list[str] = []
        self.failures_dropped = 0
        self.collective: str | None = None
        self.collective_source: str | None = None
        self.command_ranks: int | None = None
        self.pending: list[str] = []
        self.pending_line = 0
        self.pending_gap = 0
        self.pending_cells = 0
        self.errors: list[NcclErrorLine] = []
        self.late_errors: dict[str, NcclErrorLine] = {}
        self.errors_dropped = 0
        self.error_counts: dict[str, int] = {}
        self.fatal_lines = 0
        self.error_hosts: dict[str, _ErrorHostAcc] = {}

    def feed(self, raw: str, line_no: int) -> None:
        """Read one line (launcher tags and line end allowed); ``line_no`` is 1-based."""
        line = _strip_prefix(raw.rstrip("\r\n"))
        if not line:
            return
        if self.data_row(line, line_no) or self.row_piece(line, line_no):
            return
        if self.pending:
            self.pending_gap += 1
            if line.startswith("#") or self.pending_gap > _MAX_SPLIT_GAP:
                self.flush()
        self.command_line(line)
        body = line.lstrip("#").strip()
        if (
            self.error_line(line, line_no)
            or self.failure_line(line, line_no)
            or self.out_of_bounds_line(body)
            or self.avg_busbw_line(body)
            or self.rank_line(line, body)
            or self.config_line(body)
            or self.column_header_line(body)
        ):
            return
        if line.startswith("#") or line[0].isdigit():
            return  # a comment, or a line already tried as a row by data_row
        row = _parse_row(line, line_no)
        if row is not None:
            self.keep(row)

    def keep(self, row: NcclRow) -> None:
        """Keep ``row`` while under :data:`MAX_ROWS`; past it, only a row with wrong values or a new
        peak busbw (at most :data:`MAX_EXTRA_ROWS` of them), so the verdict of a huge log still sees
        them; count the others in ``rows_dropped``."""
        if len(self.rows) < MAX_ROWS:
            self.rows.append(row)
        elif self.extra_rows < MAX_EXTRA_ROWS and (_row_wrong(row) or _row_peak(row) > self.peak_busbw_gbps):
            self.rows.append(row)
            self.extra_rows += 1
        else:
            self.rows_dropped += 1
            return
        self.peak_busbw_gbps = max(self.peak_busbw_gbps, _row_peak(row))

    def flush(self) -> None:
        """End the pending split row: keep it when its pieces make a row, drop it otherwise."""
        if self.pending:
            row = _parse_row(" ".join(self.pending), self.pending_line)
            if row is not None:
                self.keep(row)
            self.pending = []

    def data_row(self, line: str, line_no: int) -> bool:
        """A whole table row on one line (the fast path: most lines of a large log; they start with
        the size, and no header, rank, collective or summary line does). An out-of-place-only row
        stays pending, since the in-place piece of a split row may follow. False when ``line`` is no
        whole row."""
        if not line[0].isdigit() or _FAILURE_RE.search(line):
            return False
        row = _parse_row(line, line_no)
        if row is None:
            return False
        self.flush()
        if row.in_place is None:
            self.pending, self.pending_line, self.pending_gap, self.pending_cells = (
                _tokens(line),
                line_no,
                0,
                4,
            )
        else:
            self.keep(row)
        return True

    def row_piece(self, line: str, line_no: int) -> bool:
        """A piece of a row a launcher split over lines: the start (size, count, type, ... and maybe
        some cells) begins a new pending row; a run of whole measurements (4 cells each) extends the
        pending one. The row is kept once it has 8 cells. False when ``line`` is neither."""
        if not (line[0].isdigit() or line[0] in "-+.N"):
            return False
        toks = _tokens(line)
        start = _row_start(toks)
        if start is not None:
            self.flush()
            self.pending, self.pending_line, self.pending_gap = start, line_no, 0
            self.pending_cells = len(start) - len(_head(start))
        else:
            cells = _cells(toks)
            if not (self.pending and cells and len(cells) % 4 == 0):
                return False
            self.pending.extend(cells)
            self.pending_cells += len(cells)
            self.pending_gap = 0
        if self.pending_cells >= 8:
            self.flush()
        return True

    def command_line(self, line: str) -> None:
        """The first line naming an nccl-tests binary (``all_reduce_perf``, ...) sets the collective
        and the rank count its flags give (:func:`_ranks_from_command`); later ones are ignored."""
        if self.collective is not None:
            return
        cm = _COLLECTIVE_RE.search(line)
        if cm is not None:
            self.collective, self.collective_source = cm.group(1), "command"
            self.command_ranks = _ranks_from_command(line[: cm.start()], line[cm.end() :])

    def failure_line(self, line: str, line_no: int = 0) -> bool:
        """A ``Test NCCL failure`` / ``Test CUDA failure`` line or its ``.. HOST pid N: Test failure``
        continuation: kept up to :data:`MAX_FAILURES`, counted in ``failures_dropped`` past it. The
        first kind is an error line too (:meth:`note_error`); a continuation names its host's pid."""
        if not _FAILURE_RE.search(line):
            return False
        if len(self.failures) < MAX_FAILURES:
            self.failures.append(line)
        else:
            self.failures_dropped += 1
        cont = _FAILURE_CONT_RE.match(line)
        if cont is not None:
            self.note_host(cont.group("host"), int(cont.group("pid")), None, None)
        elif _FAILURE_HEAD_RE.search(line):
            hm = _FAILURE_HOST_RE.match(line)
            host = hm.group("host") if hm else None
            self.note_error("test-failure", line, line[hm.end() :] if hm else line, line_no, host, None, None)
        return True

    def error_line(self, line: str, line_no: int) -> bool:
        """An NCCL ``WARN`` line, or an NCCL line saying the communicator failed (``communicator
        encountered a fatal error``, ``ncclCommInitRank ... failed``): an error line
        (:meth:`note_error`) with the host, pid and device of its ``HOST:PID:TID [DEV]`` prefix."""
        if "WARN" not in line and "fatal" not in line and "failed" not in line:
            return False
        fatal = _FATAL_RE.search(line) is not None
        if not fatal and not _WARN_RE.search(line):
            return False
        nm = _NCCL_LINE_RE.match(line)
        host, pid, dev = (
            (nm.group("host"), int(nm.group("pid")), int(nm.group("dev"))) if nm else (None, None, None)
        )
        self.note_error(
            "fatal" if fatal else "warn", line, line[nm.end() :] if nm else line, line_no, host, pid, dev
        )
        return True

    def note_error(
        self,
        kind: str,
        line: str,
        message: str,
        line_no: int,
        host: str | None,
        pid: int | None,
        dev: int | None,
    ) -> None:
        """Count one error line in its class (from ``message``, the line after its host prefix) and keep
        it while under :data:`MAX_ERROR_LINES` (past it, only the first line of a class not kept yet)."""
        cls = _classify(message)
        self.error_counts[cls] = self.error_counts.get(cls, 0) + 1
        if kind == "fatal":
            self.fatal_lines += 1
        err = NcclErrorLine(line_no, kind, cls, host, pid, dev, line[:MAX_ERROR_LINE_CHARS])
        if len(self.errors) < MAX_ERROR_LINES:
            self.errors.append(err)
        elif cls not in self.late_errors and all(e.error_class != cls for e in self.errors):
            self.late_errors[cls] = err
        else:
            self.errors_dropped += 1
        if host is not None:
            self.note_host(host, pid, dev, cls)

    def note_host(self, host: str, pid: int | None, dev: int | None, cls: str | None) -> None:
        """Add what one line says of ``host`` (a new host past :data:`MAX_ERROR_HOSTS` is ignored)."""
        acc = self.error_hosts.get(host)
        if acc is None:
            if len(self.error_hosts) >= MAX_ERROR_HOSTS:
                return
            acc = self.error_hosts[host] = _ErrorHostAcc()
        acc.note(pid, dev, cls)

    def out_of_bounds_line(self, body: str) -> bool:
        """The ``Out of bounds values : N [OK|FAILED]`` trailer line (``body``: without ``#``)."""
        om = _OOB_RE.search(body)
        if om is None:
            return False
        self.out_of_bounds = int(om.group(1))
        if om.group(2):
            self.out_of_bounds_ok = om.group(2).upper() == "OK"
        return True

    def avg_busbw_line(self, body: str) -> bool:
        """The ``Avg bus bandwidth : X`` trailer line (``body``: without ``#``), GB/s."""
        am = _AVG_RE.search(body)
        if am is None:
            return False
        self.avg_busbw_gbps = float(am.group(1))
        return True

    def rank_line(self, line: str, body: str) -> bool:
        """A ``#  Rank  0 Group  0 Pid 1623025 on host device  0 [0x1b] NVIDIA H100`` line (``body``:
        ``line`` without ``#``); a rank read again replaces the earlier line, a new rank past
        :data:`MAX_RANKS` is ignored."""
        rm = _RANK_RE.search(body)
        if rm is None or not line.startswith("#"):
            return False
        rank = int(rm.group("rank"))
        if rank in self.ranks or len(self.ranks) < MAX_RANKS:
            self.ranks[rank] = NcclRank(
                rank=rank,
                pid=int(rm.group("pid")) if rm.group("pid") else None,
                host=rm.group("host"),
                device=int(rm.group("device")),
                bus_id=rm.group("bus"),
                name=rm.group("name").strip(),
            )
        return True

    def config_line(self, body: str) -> bool:
        """The ``# nThread 1 nGpus 8 minBytes 8 maxBytes ...`` header (``body``: without ``#``): its
        values by key (``step:`` -> ``step``), at most ``_MAX_HEADER_KEYS`` distinct keys."""
        low = body.lower()
        if not (low.startswith("nthread") or "minbytes" in low):
            return False
        for k, v in _HEADER_KV_RE.findall(body):
            key = k.rstrip(":").strip()
            if key in self.header or len(self.header) < _MAX_HEADER_KEYS:
                self.header[key] = v
        return True

    def column_header_line(self, body: str) -> bool:
        """The table's column header (``... time algbw busbw #wrong``; ``body``: without ``#``): it
        names the error column, ``#wrong`` (current format) or ``error`` (old format)."""
        low = body.lower()
        if not ("algbw" in low and "busbw" in low):
            return False
        self.saw_column_header = True
        if "#wrong" in low or "wrong" in low.split():
            self.error_column = "#wrong"
        elif "error" in low:
            self.error_column = "error"
        return True

    def result(self) -> NcclTestsResult:
        """The parsed result of the lines fed so far (ends a pending split row first)."""
        self.flush()
        if self.collective is None and self.rows:
            guessed = _collective_from_columns(self.rows)
            if guessed is not None:
                self.collective, self.collective_source = guessed, "columns"
        rank_count, rank_source = self._rank_count()
        ranks = tuple(sorted(self.ranks.values(), key=lambda r: r.rank))
        return NcclTestsResult(
            collective=self.collective,
            collective_source=self.collective_source,
            rows=tuple(self.rows),
            error_column=self._error_column(),
            header=self.header,
            ranks=ranks,
            rank_count=rank_count,
            rank_count_source=rank_source,
            hosts=tuple(dict.fromkeys(r.host for r in ranks)),
            out_of_bounds=self.out_of_bounds,
            out_of_bounds_ok=self.out_of_bounds_ok,
            avg_busbw_gbps=self.avg_busbw_gbps,
            failures=tuple(self.failures),
            truncated=not self.saw_column_header or self.avg_busbw_gbps is None,
            rows_dropped=self.rows_dropped,
            failures_dropped=self.failures_dropped,
            errors=tuple(sorted([*self.errors, *self.late_errors.values()], key=lambda e: e.line)),
            errors_dropped=self.errors_dropped,
            error_counts=dict(self.error_counts),
            error_hosts=tuple(
                NcclErrorHost(
                    host,
                    acc.errors,
                    tuple(acc.pids),
                    tuple(acc.devices),
                    tuple(c for c in ERROR_CLASSES if c in acc.classes),
                )
                for host, acc in self.error_hosts.items()
            ),
            error_class=error_class(self.error_counts) or ("other" if self.failures else None),
            fatal_lines=self.fatal_lines,
        )

    def _rank_count(self) -> tuple[int | None, str | None]:
        """The rank count and where it came from: the rank lines, else the command line, else the
        busbw/algbw ratio of the collective's factor family; ``(None, None)`` when none gives it."""
        if self.ranks:
            return len(self.ranks), "devices"
        if self.command_ranks is not None:
            return self.command_ranks, "command"
        family = BUSBW_FACTOR_FAMILY.get(self.collective or "") or _family_from_columns(self.rows)
        if family is not None and family != "1":
            inferred = infer_rank_count(self.rows, family)
            if inferred is not None:
                return inferred, "busbw/algbw"
        return None, None

    def _error_column(self) -> str | None:
        """The column header's error column; without one, guessed from the rows: the current format
        has a root column and an integer ``#wrong``, the old ``error`` column holds a float max
        error (1e+00, 2e-07)."""
        if self.error_column is not None or not self.rows:
            return self.error_column
        if any(row.root is not None for row in self.rows):
            return "#wrong"
        values = [
            m.wrong
            for row in self.rows
            for m in (row.out_of_place, row.in_place)
            if m and m.wrong is not None
        ]
        if any(v != int(v) for v in values):
            return "error"
        return None


def parse_nccl_tests(text: str | Iterable[str]) -> NcclTestsResult:
    """Parse one nccl-tests output. Never raises; unknown lines are ignored.

    Memory is bounded whatever the input's size: lines are read one at a time (``text`` may be an
    iterator of lines, e.g. a file being read) and at most :data:`MAX_ROWS` rows (plus
    :data:`MAX_EXTRA_ROWS` later rows with wrong values or a higher busbw) and :data:`MAX_FAILURES`
    failure lines are kept; the rest are counted.

    Args:
        text: the output as saved (any prefix, indentation, old or new columns, truncated), or its
            lines (without or with their line ends).

    Returns:
        The parsed result; ``rows`` is empty when no table row was found.
    """
    parser = _NcclTestsParser()
    lines = text.splitlines() if isinstance(text, str) else text
    for line_no, raw in enumerate(lines, start=1):
        parser.feed(raw, line_no)
    return parser.result()


# --- verdict -----------------------------------------------------------------------------------

COLLAPSE_RATIO = 0.5
"""A larger size "collapsed" when its busbw is below this fraction of the sweep's peak."""
COLLAPSE_MIN_SIZES = 2
"""Fewest larger sizes, all collapsed, for a collapse finding (one low last size is not one)."""
COLLAPSE_MIN_PEAK_GBPS = 1.0
"""Peaks below this (latency-bound sweeps, 0.01 GB/s rounding) are not judged for a collapse."""


@dataclass(frozen=True)
class BusbwCollapse:
    """A sweep whose busbw falls below half its peak at every larger size.

    Attributes:
        peak_busbw_gbps: the sweep's peak busbw, GB/s. peak_size_bytes: the size it was measured at.
        sizes_bytes: the larger sizes, in order. busbw_gbps: their busbw (best validated placement).
        drop_ratio: peak / the highest busbw after the peak (the smallest fall, > 2).
        max_drop_ratio: peak / the lowest busbw after the peak (``None`` when that is 0).
        first_line: table line of the peak row.
    """

    peak_busbw_gbps: float
    peak_size_bytes: int
    sizes_bytes: tuple[int, ...]
    busbw_gbps: tuple[float, ...]
    drop_ratio: float
    max_drop_ratio: float | None
    first_line: int


def _sweeps(rows: Iterable[NcclRow]) -> list[list[NcclRow]]:
    """Split rows into sweeps: same type/redop/root and strictly growing size."""
    out: list[list[NcclRow]] = []
    for row in rows:
        cur = out[-1] if out else None
        if (
            cur is not None
            and (row.dtype, row.redop, row.root) == (cur[-1].dtype, cur[-1].redop, cur[-1].root)
            and row.size_bytes > cur[-1].size_bytes
        ):
            cur.append(row)
        else:
            out.append([row])
    return out


def busbw_collapses(rows: Iterable[NcclRow]) -> list[BusbwCollapse]:
    """Every sweep of ``rows`` whose busbw collapses past its peak (rule in the module docstring).

    Args:
        rows: table rows in file order (:attr:`NcclTestsResult.rows`).

    Returns:
        One :class:`BusbwCollapse` per collapsed sweep, in file order; empty for a healthy curve.
    """
    found: list[BusbwCollapse] = []
    for sweep in _sweeps(rows):
        bws = [_row_peak(r) for r in sweep]
        peak = max(bws)
        p = bws.index(peak)
        tail = bws[p + 1 :]
        if peak < COLLAPSE_MIN_PEAK_GBPS or len(tail) < COLLAPSE_MIN_SIZES:
            continue
        if any(bw >= COLLAPSE_RATIO * peak for bw in tail):
            continue
        top, low = max(tail), min(tail)
        found.append(
            BusbwCollapse(
                peak_busbw_gbps=peak,
                peak_size_bytes=sweep[p].size_bytes,
                sizes_bytes=tuple(r.size_bytes for r in sweep[p + 1 :]),
                busbw_gbps=tuple(tail),
                drop_ratio=peak / top if top > 0 else math.inf,
                max_drop_ratio=peak / low if low > 0 else None,
                first_line=sweep[p].line,
            )
        )
    return found


def _collapse_finding(c: BusbwCollapse) -> Finding:
    sizes = c.sizes_bytes
    span = _size(sizes[0]) if len(sizes) == 1 else f"{_size(sizes[0])}..{_size(sizes[-1])}"
    low, high = min(c.busbw_gbps), max(c.busbw_gbps)
    fall = f"{c.drop_ratio:.1f}x" if math.isfinite(c.drop_ratio) else "to 0"
    if c.max_drop_ratio is not None and c.max_drop_ratio - c.drop_ratio >= 0.05:
        fall += f" to {c.max_drop_ratio:.1f}x"
    return Finding(
        Status.WARNING,
        f"busbw collapses past {_size(c.peak_size_bytes)}: peak {c.peak_busbw_gbps:.2f} GB/s at "
        f"{_size(c.peak_size_bytes)}, then {low:.2f}-{high:.2f} GB/s at every larger size ({span}, "
        f"{len(sizes)} sizes, {fall} lower); look for an algorithm/protocol switch (NVLS, PXN, "
        "NCCL_ALGO/NCCL_PROTO) or a degraded link",
        {
            "peak_busbw_gbps": c.peak_busbw_gbps,
            "peak_size_bytes": c.peak_size_bytes,
            "sizes_bytes": list(sizes),
            "busbw_gbps": list(c.busbw_gbps),
            "drop_ratio": c.drop_ratio if math.isfinite(c.drop_ratio) else None,
            "max_drop_ratio": c.max_drop_ratio,
            "rule": f"every larger size below {COLLAPSE_RATIO:g} x peak, at least {COLLAPSE_MIN_SIZES} sizes",
            "line": c.first_line,
        },
    )


def _tolerance(dtype: str) -> float:
    d = dtype.lower()
    if d in _TOLERANCE:
        return _TOLERANCE[d]
    if "int" in d:
        return _INT_TOLERANCE
    if d.startswith(("fp8", "f8", "e4m3", "e5m2")):
        return 1e-1
    return _TOLERANCE["float"]


def _size(n: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def _wrong_findings(result: NcclTestsResult) -> list[Finding]:
    findings: list[Finding] = []
    old_format = result.error_column == "error"
    bad: list[dict[str, object]] = []
    for row in result.rows:
        for placement, m in (("out-of-place", row.out_of_place), ("in-place", row.in_place)):
            if m is None or m.wrong is None:
                continue
            limit = _tolerance(row.dtype) if old_format else 0.0
            if ladder(m.wrong, crit=beyond_max(limit)) is Status.CRITICAL:  # past the tolerance
                bad.append(
                    {
                        "size_bytes": row.size_bytes,
                        "placement": placement,
                        "value": m.wrong,
                        "tolerance": limit,
                        "line": row.line,
                    }
                )
    if bad:
        first = bad[0]
        what = "max error" if old_format else "#wrong"
        findings.append(
            Finding(
                Status.CRITICAL,
                f"wrong values: {what} {first['value']:g} at {_size(int(str(first['size_bytes'])))} "
                f"({first['placement']})" + (f" and {len(bad) - 1} more" if len(bad) > 1 else ""),
                {"column": result.error_column, "rows": bad},
            )
        )
    if result.out_of_bounds_ok is False or (
        result.out_of_bounds_ok is None and (result.out_of_bounds or 0) > 0
    ):
        findings.append(
            Finding(
                Status.CRITICAL,
                f"Out of bounds values: {result.out_of_bounds} FAILED (results differ from the expected)",
                {"out_of_bounds": result.out_of_bounds},
            )
        )
    return findings


def _collective_label(result: NcclTestsResult) -> str:
    """A name for the summary when the collective is unknown, from the columns' factor family."""
    family = _family_from_columns(list(result.rows))
    if family == "(n-1)/n":
        return "nccl-tests (all_gather or alltoall)"
    if family == "1":
        return "nccl-tests (rooted collective)"
    return "nccl-tests"


def evaluate(
    result: NcclTestsResult,
    *,
    expected_busbw_gbps: float | None = None,
    critical_fraction: float = 0.8,
) -> Verdict:
    """Judge one parsed nccl-tests output (rules and sources in the module docstring).

    Args:
        result: from :func:`parse_nccl_tests`.
        expected_busbw_gbps: the peak busbw the fabric should deliver, GB/s; ``None`` skips the
            bandwidth-floor rule.
        critical_fraction: below ``critical_fraction x expected`` is CRITICAL, between it and the
            expected value WARNING.

    Returns:
        The verdict; ``details`` holds the parsed result plus ``peak_busbw_gbps``,
        ``peak_size_bytes`` and ``peak_placement``.
    """
    details = dict(to_jsonable(result))
    peak = result.peak()
    details["peak_busbw_gbps"] = peak[0] if peak else None
    details["peak_size_bytes"] = peak[1].size_bytes if peak else None
    details["peak_placement"] = peak[2] if peak else None
    details["expected_busbw_gbps"] = expected_busbw_gbps

    name = result.collective or _collective_label(result)
    if not result.rows:
        return _no_rows_verdict(result, name, details)

    findings = _wrong_findings(result)
    if result.failed or result.errors:
        findings.append(_error_finding(result))
    assert peak is not None
    findings.append(_bandwidth_finding(result, peak, expected_busbw_gbps, critical_fraction))
    if result.rank_count != 1:
        collapses = busbw_collapses(result.rows)
        findings.extend(_collapse_finding(c) for c in collapses)
        details["busbw_collapses"] = [to_jsonable(c) for c in collapses]

    status = Status.worst(f.status for f in findings)
    summary = _summary(result, name, peak)
    ordered = sort_findings(findings)
    if status in (Status.CRITICAL, Status.WARNING, Status.NOT_APPLICABLE):
        summary += f"; {ordered[0].message}"
    return Verdict(status, summary, ordered, details)


def _no_rows_verdict(result: NcclTestsResult, name: str, details: dict[str, object]) -> Verdict:
    """The verdict of an output without a result row: CRITICAL when the run says it failed (a failure
    line, an NCCL line saying the communicator failed, or NCCL ``WARN`` lines), else UNKNOWN."""
    if result.failed:
        finding = _error_finding(result)
        where = _error_where(result)
        summary = f"{name}: run failed before any result" + (f" on {where}" if where else "")
        if result.error_class is not None:
            summary += f" ({ERROR_CLASSES[result.error_class]})"
        return Verdict(Status.CRITICAL, summary, (finding,), details)
    return Verdict(Status.UNKNOWN, f"{name}: no result rows found", (), details)


_NAMED_HOSTS = 3
"""Hosts named in a failure's one-line message (the evidence lists every host kept)."""


def _culprit_hosts(result: NcclTestsResult) -> list[NcclErrorHost]:
    """The hosts whose error lines show the run's class (every error host when none does)."""
    cls = result.error_class
    hosts = [h for h in result.error_hosts if cls in h.classes]
    return hosts or list(result.error_hosts)


def _error_where(result: NcclTestsResult) -> str:
    """``host (pid 1, 2; GPU 0)`` for the first :data:`_NAMED_HOSTS` culprit hosts; the rank lines'
    hosts when no error line names one; ``""`` when neither names any."""
    hosts = _culprit_hosts(result)
    parts = []
    for h in hosts[:_NAMED_HOSTS]:
        ids = []
        if h.pids:
            ids.append(f"pid{'s' if len(h.pids) > 1 else ''} {', '.join(map(str, h.pids[:4]))}")
        if h.devices:
            ids.append(f"GPU{'s' if len(h.devices) > 1 else ''} {', '.join(map(str, h.devices[:8]))}")
        parts.append(h.host + (f" ({'; '.join(ids)})" if ids else ""))
    names = len(hosts)
    if not hosts:
        parts, names = list(result.hosts[:_NAMED_HOSTS]), len(result.hosts)
    if names > _NAMED_HOSTS:
        parts.append(f"{names - _NAMED_HOSTS} more")
    return ", ".join(parts)


def _error_finding(result: NcclTestsResult) -> Finding:
    """The finding of a run's error lines: CRITICAL when the run failed (:attr:`NcclTestsResult.failed`);
    for ``WARN`` lines beside a completed table WARNING when they name a device or transport class, else
    OK (reported, verdict unchanged: NCCL warns of benign conditions such as a missing libibverbs). The
    message names the class, the hosts and the first line of the class; the evidence holds every line
    kept, the hosts and the counts."""
    cls = result.error_class or "other"
    first = next((e.text for e in result.errors if e.error_class == cls), None)
    if first is None:
        first = result.failures[0] if result.failures else (result.errors[0].text if result.errors else "")
    where = _error_where(result)
    label = ERROR_CLASSES[cls]
    if result.failed:
        status, head = Status.CRITICAL, "the run failed"
    else:  # WARN lines beside a complete table: worth a look when they name a device or a transport
        status = Status.OK if cls == "other" else Status.WARNING
        head = f"NCCL warned ({len(result.errors) + result.errors_dropped} lines)"
    message = f"{head}: {first}" if cls == "other" else f"{head} ({label}): {first}"
    if where:
        message += f" [on {where}]"
    if cls != "other":
        message += f"; {ERROR_HINTS[cls]}"
    return Finding(
        status,
        message,
        {
            "failures": list(result.failures),
            "failures_dropped": result.failures_dropped,
            "error_class": result.error_class,
            "error_class_label": label,
            "hint": ERROR_HINTS[cls],
            "error_counts": dict(result.error_counts),
            "hosts": [to_jsonable(h) for h in result.error_hosts],
            "error_lines": [to_jsonable(e) for e in result.errors],
            "errors_dropped": result.errors_dropped,
            "rule": f"error lines kept: the first {MAX_ERROR_LINES} (plus each class's first), "
            f"each cut to {MAX_ERROR_LINE_CHARS} characters",
        },
    )


def _bandwidth_finding(
    result: NcclTestsResult,
    peak: tuple[float, NcclRow, str],
    expected_busbw_gbps: float | None,
    critical_fraction: float,
) -> Finding:
    """The peak-busbw finding: NOT_APPLICABLE for one rank, CRITICAL for an all-zero (invalid)
    measurement, else the ladder against the expected busbw: below ``critical_fraction`` of it
    CRITICAL, below it WARNING, meeting it OK (the expected value and the fraction are the least
    healthy figures, so reaching them is healthy: :func:`robustctl.thresholds.beyond_min`)."""
    ranks = result.rank_count
    peak_bw, peak_row, placement = peak
    evidence: dict[str, object] = {
        "peak_busbw_gbps": peak_bw,
        "peak_size_bytes": peak_row.size_bytes,
        "peak_placement": placement,
        "avg_busbw_gbps": result.avg_busbw_gbps,
        "rank_count": ranks,
        "rank_count_source": result.rank_count_source,
    }
    if ranks == 1:
        return Finding(
            Status.NOT_APPLICABLE,
            "one rank: busbw is 0 by definition (busbw = algbw x "
            f"{BUSBW_FACTOR_FAMILY.get(result.collective or '', '(n-1)/n')}), bandwidth not applicable",
            evidence,
        )
    if peak_bw <= 0.0:
        if ranks is None and all(
            m.algbw_gbps <= 0 for r in result.rows for m in (r.out_of_place, r.in_place) if m
        ):
            return Finding(
                Status.CRITICAL, "busbw and algbw are 0 at every size: invalid measurement", evidence
            )
        return Finding(
            Status.CRITICAL,
            f"busbw is 0 at every size with {ranks if ranks is not None else 'more than one'} ranks: "
            "invalid measurement",
            evidence,
        )
    if expected_busbw_gbps is None or expected_busbw_gbps <= 0:
        return Finding(Status.OK, f"peak busbw {peak_bw:.2f} GB/s (no expected value given)", evidence)
    evidence["expected_busbw_gbps"] = expected_busbw_gbps
    evidence["critical_fraction"] = critical_fraction
    ratio = peak_bw / expected_busbw_gbps
    status = ladder(ratio, warn=beyond_min(1.0), crit=beyond_min(critical_fraction), higher_is_worse=False)
    if status is Status.CRITICAL:
        message = f"peak busbw {peak_bw:.2f} GB/s is {ratio:.0%} of the expected {expected_busbw_gbps:g} GB/s"
    elif status is Status.WARNING:
        message = (
            f"peak busbw {peak_bw:.2f} GB/s is below the expected {expected_busbw_gbps:g} GB/s ({ratio:.0%})"
        )
    else:
        message = f"peak busbw {peak_bw:.2f} GB/s meets the expected {expected_busbw_gbps:g} GB/s"
    return Finding(status, message, evidence)


def _summary(result: NcclTestsResult, name: str, peak: tuple[float, NcclRow, str]) -> str:
    """The verdict's one line (before the worst finding is appended): collective, ranks, hosts,
    peak and average busbw, and what the parser left out."""
    ranks = result.rank_count
    peak_bw, peak_row, _ = peak
    parts = [name]
    if ranks is not None:
        parts.append(f"{ranks} rank{'s' if ranks != 1 else ''}")
    if result.hosts:
        parts.append(f"{len(result.hosts)} host{'s' if len(result.hosts) != 1 else ''}")
    summary = ", ".join(parts) + f": peak busbw {peak_bw:.2f} GB/s at {_size(peak_row.size_bytes)}"
    if result.avg_busbw_gbps is not None:
        summary += f", avg {result.avg_busbw_gbps:g} GB/s"
    if result.truncated:
        summary += " [truncated]"
    if result.rows_dropped:
        summary += f" [{len(result.rows)} rows kept, {result.rows_dropped} more unremarkable rows not kept]"
    return summary
