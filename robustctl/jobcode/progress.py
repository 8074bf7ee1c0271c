"""The job's progress signal: each rank's (or host's) latest training step and when it was made.

Configured per job (``jobs.NAME.progress``, :class:`robustctl.config.ProgressSpec`), read on every
host of the job over its transport with one small, constant Python program (:data:`READER`: the
paths are its arguments, never part of its text), bounded:

* **heartbeat files** (``files:`` glob): at most ``max_files`` files per host (sorted by name), each
  read up to :data:`MAX_HEARTBEAT_BYTES`; a file that is not a regular file (FIFO, device) is
  skipped unread. Each file is one JSON object: ``step_field`` holds the step, ``time_field`` its
  UNIX time (else the file's mtime), ``rank`` the rank when present. The test-bed job
  (``tests/jobs/minimegatron.py --progress-dir P``) writes ``P/rankRRRRR.json`` this way.
* **a log** (``log:`` + ``pattern:``): the last ``tail_bytes`` of the file; the last line (of at most
  :data:`MAX_LINE_CHARS` characters; longer lines are cut) in which the pattern matches gives the step
  (its named group ``step``); the log's mtime is its time.

A host without the file (the glob matches nothing, the log does not exist) is a host without a signal,
not an error: in a log setup often only the first host logs. A host that cannot be reached or read
is an error of that host. The job's step is the *minimum* over every rank (entry) read: every rank has
made at least that many steps, so a hung rank holds it back (ByteRobust §5.1 reads a stall the same way).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from robustctl.config import ProgressSpec
from robustctl.errors import HostError
from robustctl.inventory import Host
from robustctl.transport.fanout import fan_out

if TYPE_CHECKING:
    from robustctl.transport.pool import TransportPool

__all__ = [
    "MAX_HEARTBEAT_BYTES",
    "MAX_LINE_CHARS",
    "READER",
    "HostProgress",
    "ProgressReading",
    "RankProgress",
    "ReaderFile",
    "host_progress",
    "parse_heartbeat",
    "parse_log_tail",
    "read_progress",
    "reader_files",
    "unix_time",
]

MAX_HEARTBEAT_BYTES = 65_536
"""Most bytes read of one heartbeat file (minimegatron's are ~400 bytes; a bigger file is cut and
then is not valid JSON: reported, not parsed)."""
MAX_LINE_CHARS = 4096
"""Longest log line searched, in characters (longer lines are cut): bounds the pattern's work per line."""
MAX_STEP = 10**15
"""Largest step accepted from a host (a larger number is reported as not a step)."""

READER = r"""
import glob, json, os, stat, sys
mode, where, nmax, nbytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def read(path, tail):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        return {"path": path, "error": e.strerror or str(e), "missing": e.errno == 2}
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return {"path": path, "error": "not a regular file"}
        if tail and st.st_size > nbytes:
            os.lseek(fd, st.st_size - nbytes, 0)
        chunks, left = [], nbytes
        while left > 0:
            b = os.read(fd, min(left, 1 << 16))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        data = b"".join(chunks)
        return {"path": path, "mtime": st.st_mtime, "size": st.st_size,
                "cut": st.st_size > len(data), "text": data.decode("utf-8", "replace")}
    finally:
        os.close(fd)
if mode == "files":
    names = sorted(glob.glob(where))
    out = {"matched": len(names), "files": [read(n, False) for n in names[:nmax]]}
else:
    r = read(where, True)
    out = {"matched": 0 if r.get("missing") else 1, "files": [] if r.get("missing") else [r]}
out["now"] = __import__("time").time()
sys.stdout.write(json.dumps(out))
"""
"""The node-side reader, run as ``python -c READER MODE PATH MAX_FILES MAX_BYTES``: prints one JSON
object ``{matched, files: [{path, mtime, size, cut, text} | {path, error}], now}``."""


@dataclass(frozen=True)
class RankProgress:
    """One progress entry: a rank's heartbeat file, or a host's log.

    Attributes:
        host: inventory name. source: the file it came from. rank: the rank (from the heartbeat's
        ``rank``; None for a log). step: the latest step. at: its UNIX time (host clock).
    """

    host: str
    source: str
    rank: int | None
    step: int
    at: float


@dataclass(frozen=True)
class HostProgress:
    """What one host's progress reading gave.

    Attributes:
        host. entries: its ranks' (or its log's) progress. matched: files the glob matched (more than
        were read when above ``max_files``). problems: one line per file that could not be used (not
        JSON, no step, not a regular file). error: one line when the host could not be read at all
        (unreachable, timed out, the reader failed); None when it was read.
    """

    host: str
    entries: tuple[RankProgress, ...] = ()
    matched: int = 0
    problems: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class ProgressReading:
    """One reading of the progress signal on every host of a job.

    Attributes:
        job. hosts: one :class:`HostProgress` per host, in the order given. read_at: control-side UNIX
        time of the reading.
    """

    job: str
    hosts: tuple[HostProgress, ...]
    read_at: float

    @property
    def entries(self) -> tuple[RankProgress, ...]:
        """Every entry of every host."""
        return tuple(e for h in self.hosts for e in h.entries)

    @property
    def errors(self) -> tuple[str, ...]:
        """``HOST: why`` for each host that could not be read."""
        return tuple(f"{h.host}: {h.error}" for h in self.hosts if h.error is not None)

    @property
    def complete(self) -> bool:
        """Every host was read (some may have no signal)."""
        return not self.errors

    @property
    def step(self) -> int | None:
        """The job's step: the minimum over every entry (None when no entry was read)."""
        steps = [e.step for e in self.entries]
        return min(steps) if steps else None

    @property
    def max_step(self) -> int | None:
        """The most advanced entry's step (None when no entry was read)."""
        steps = [e.step for e in self.entries]
        return max(steps) if steps else None

    @property
    def at(self) -> float | None:
        """When every entry had reached :attr:`step` at the latest: the oldest entry time (None: none)."""
        times = [e.at for e in self.entries]
        return min(times) if times else None

    def since(self, started_at: float) -> ProgressReading:
        """This reading with only the entries made at or after ``started_at`` (a restart's time)."""
        return ProgressReading(
            self.job,
            tuple(
                HostProgress(
                    h.host, tuple(e for e in h.entries if e.at >= started_at), h.matched, h.problems, h.error
                )
                for h in self.hosts
            ),
            self.read_at,
        )


def _step(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and 0 <= value <= MAX_STEP:
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and 0 <= value <= MAX_STEP:
        return int(value)
    return None


def unix_time(value: Any) -> float | None:
    """A UNIX time a host reported: a finite number in [0, 1e11), else None (an integer past a double's
    range included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        t = float(value)
    except OverflowError:  # an integer past a double's range: not a time, not an internal error
        return None
    return t if math.isfinite(t) and 0 <= t < 1e11 else None


def parse_heartbeat(
    host: str, path: str, text: str, mtime: float, spec: ProgressSpec
) -> tuple[RankProgress | None, str | None]:
    """One heartbeat file's entry, or why it has none.

    Args:
        host: the inventory name of the host the file is on.
        path: the file's path there (the entry's ``source``, and the start of a problem line).
        text: the file's content.
        mtime: the file's modification time (UNIX seconds, host clock): the step's time when the
            document gives none under ``spec.time_field``.
        spec: the job's ``progress:`` section (the step and time keys).

    Returns:
        ``(entry, None)``, or ``(None, "PATH: why")`` for a file that is not a JSON object, has no
        integer step in ``spec.step_field`` (0 … :data:`MAX_STEP`), or was cut at the read bound.
    """
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None, f"{path}: not a JSON document"
    if not isinstance(doc, dict):
        return None, f"{path}: not a JSON object"
    step = _step(doc.get(spec.step_field))
    if step is None:
        return None, f"{path}: no integer {spec.step_field!r}"
    at = unix_time(doc.get(spec.time_field)) if spec.time_field else None
    rank = doc.get("rank")
    rank_i = rank if isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank <= 10**7 else None
    return RankProgress(host, path, rank_i, step, at if at is not None else mtime), None


def parse_log_tail(text: str, pattern: re.Pattern[str]) -> int | None:
    """The step of the last line of ``text`` in which ``pattern`` matches (group ``step``), or None.

    A line is searched up to :data:`MAX_LINE_CHARS` characters (a tail that starts mid-line has its
    first, partial line dropped by the caller). A match
    whose ``step`` group is not a decimal integer in 0 … :data:`MAX_STEP` is ignored.
    """
    for line in reversed(text.splitlines()):
        m = pattern.search(line[:MAX_LINE_CHARS])
        if m is None:
            continue
        raw = m.group("step")
        if raw is None:
            continue
        raw = raw.strip()
        if raw.isascii() and raw.isdigit() and len(raw) <= 16:
            value = int(raw)
            if value <= MAX_STEP:
                return value
    return None


@dataclass(frozen=True)
class ReaderFile:
    """One file of the progress reader's document, read: ``text`` is what was searched (a log tail
    without its cut first line), ``entry`` the step it gave or ``problem`` why it gave none (both None:
    a heartbeat without a step), ``is_log`` whether it is a log (else a heartbeat file)."""

    path: str
    text: str
    mtime: float
    entry: RankProgress | None
    problem: str | None
    is_log: bool
    size: Any


def reader_files(
    host: str, doc: Any, spec: ProgressSpec, pattern: re.Pattern[str] | None
) -> Iterator[ReaderFile | str]:
    """Each file of the progress reader's document ``doc`` for ``host``: a :class:`ReaderFile`, or a
    problem line for a file that could not be read (error, unreadable, a heartbeat past
    :data:`MAX_HEARTBEAT_BYTES`). The one parse of the reader's files (:func:`read_progress` and the
    watch's progress signal both read through it).

    Args:
        host: the inventory name of the host the reader ran on.
        doc: the reader's JSON document, as parsed.
        spec: the job's ``progress:`` section (at most ``spec.max_files`` files are read).
        pattern: the log pattern (a ``step`` group), or None for heartbeat files.

    Yields:
        A :class:`ReaderFile` per file read, or a ``"PATH: why"`` line for a file that could not be.

    Raises:
        HostError: ``doc`` is not the reader's document.
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
        raise HostError(host, "the progress reader printed no document")
    for f in doc["files"][: spec.max_files]:
        if not isinstance(f, dict):
            continue
        path = str(f.get("path", "?"))[:4096]
        if "error" in f:
            yield f"{path}: {' '.join(str(f['error']).split())[:200]}"
            continue
        text = f.get("text")
        mtime = unix_time(f.get("mtime"))
        if not isinstance(text, str) or mtime is None:
            yield f"{path}: unreadable"
            continue
        if pattern is None:
            if f.get("cut"):
                yield f"{path}: larger than {MAX_HEARTBEAT_BYTES} bytes"
                continue
            entry, why = parse_heartbeat(host, path, text, mtime, spec)
            yield ReaderFile(path, text, mtime, entry, why, False, f.get("size"))
            continue
        if f.get("cut"):
            text = text.split("\n", 1)[1] if "\n" in text else ""
        step = parse_log_tail(text, pattern)
        if step is None:
            why = f"{path}: no line matches the pattern in its last {spec.tail_bytes} bytes"
            yield ReaderFile(path, text, mtime, None, why, True, f.get("size"))
        else:
            yield ReaderFile(
                path, text, mtime, RankProgress(host, path, None, step, mtime), None, True, f.get("size")
            )


def host_progress(
    host: str, doc: Any, entries: Sequence[RankProgress], problems: Sequence[str]
) -> HostProgress:
    """A host's :class:`HostProgress` from its entries and problems (at most 64 problems kept) and the
    reader's ``matched`` count (the entries' count when the reader gave none)."""
    matched = doc.get("matched") if isinstance(doc, dict) else None
    return HostProgress(
        host,
        tuple(entries),
        matched if isinstance(matched, int) and not isinstance(matched, bool) else len(entries),
        tuple(problems[:64]),
    )


def _parse_host(host: str, doc: Any, spec: ProgressSpec, pattern: re.Pattern[str] | None) -> HostProgress:
    entries: list[RankProgress] = []
    problems: list[str] = []
    for f in reader_files(host, doc, spec, pattern):
        if isinstance(f, str):
            problems.append(f)
        elif f.entry is not None:
            entries.append(f.entry)
        elif f.problem is not None:
            problems.append(f.problem)
    return host_progress(host, doc, entries, problems)


def reader_argv(host: Host, spec: ProgressSpec) -> list[str]:
    """The argv that reads ``spec``'s progress on ``host`` (the host's Python, with its wrapper)."""
    if spec.files is not None:
        args = [
            "files",
            spec.files.replace("{host}", host.name),
            str(spec.max_files),
            str(MAX_HEARTBEAT_BYTES),
        ]
    else:
        assert spec.log is not None
        args = ["log", spec.log.replace("{host}", host.name), "1", str(spec.tail_bytes)]
    return [*host.python.wrapper, host.python.path, "-c", READER, *args]


def read_progress(
    pool: TransportPool,
    job: str,
    hosts: Sequence[Host],
    spec: ProgressSpec,
    *,
    concurrency: int = 64,
    clock: Any = time.time,
) -> ProgressReading:
    """Read the progress signal on every host (see the module docstring).

    Args:
        pool: the transports.
        job: its name (for the reading).
        hosts: the job's hosts.
        spec: the job's ``progress:`` section.
        concurrency: hosts at once.
        clock: a callable giving the reading's time, UNIX seconds.

    Returns:
        A :class:`ProgressReading`; a host that could not be read has ``error`` set (nothing raised).
    """
    pattern = re.compile(spec.pattern) if spec.pattern is not None else None

    def work(host: Host, deadline: float) -> HostProgress:
        timeout = max(0.5, deadline - time.monotonic())
        res = pool.run(host, reader_argv(host, spec), timeout_s=timeout)
        if res.exit_status != 0:
            raise HostError(host.name, f"progress reader exited {res.exit_status}: {res.stderr_tail()}")
        try:
            doc = json.loads(res.stdout.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            raise HostError(host.name, "the progress reader printed no JSON document") from None
        return _parse_host(host.name, doc, spec, pattern)

    result = fan_out(list(hosts), work, concurrency=concurrency, host_timeout_s=spec.timeout_s, retries=1)
    rows = tuple(
        o.value
        if o.ok and o.value is not None
        else HostProgress(o.host.name, error=o.error or o.outcome.value)
        for o in result.outcomes
    )
    return ProgressReading(job, rows, float(clock()))
