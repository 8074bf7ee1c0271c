"""Parsers of py-spy output: ``py-spy dump --json`` and the text format people paste.

Text dumps come in many shapes; every one below was seen in real output (``tests/data/pyspy/``):

* a header per process: ``Process 12345: python train.py ...`` then ``Python v3.10.12 (/usr/bin/python3.10)``;
* thread lines ``Thread 12345 (idle): "MainThread"`` (py-spy ≥ 0.3), ``Thread 0x7FA6E7C01740 (active+gil):
  "MainThread"`` (older releases: pthread id in hex), unnamed threads ``Thread 4076 (idle)``;
* frame lines ``    func (file.py:123)``, ``    func (pkg/mod/file.py:123)``, qualified names on Python ≥ 3.11
  (``    Queue.get (queue.py:171)``), native frames without a line (``    ncclAllReduce (libnccl.so.2)``);
* ``Arguments:``/``Locals:`` blocks of ``py-spy dump --locals`` (skipped);
* headerless stacks (frame lines only), dumps cut in the middle of a line, several processes in one file
  (a new ``Process`` header, or a second ``MainThread``);
* py-spy's error output instead of a dump (``Error: Failed to get process executable name ...`` with its
  ``Caused by:`` lines and, when ``RUST_BACKTRACE=1``, a ``Stack backtrace:`` block; ``Error: Failed to
  suspend process`` with ``Reason: EPERM: Operation not permitted`` lines, as py-spy's ``main.rs`` prints
  an error chain (a process in uninterruptible sleep, or already traced); ``Error: Failed to open process
  - check if it is running.``; ``Error: Failed to find python version from target process``;
  ``Permission Denied: Try running again with elevated permissions ...`` or a bare ``Permission Denied``
  (the Docker variant); ``timeout: sending signal TERM to command 'py-spy'`` or ``py-spy timed out ...``):
  a :class:`ProcessDump` with ``error`` set, the failed dump of that rank.

Garbage (nothing of the above) raises :class:`DumpParseError`; nothing here raises anything else on any text.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from robustctl.inputfile import NotReadable, open_regular
from robustctl.stacks.cluster import Category, frame_category, normalize_path
from robustctl.stacks.model import DumpParseError, Frame, ProcessDump, ProcessRole, ThreadStack

__all__ = [
    "empty_rank_dump",
    "infer_role",
    "looks_like_pyspy",
    "parse_dump_data",
    "parse_dump_file",
    "parse_dump_text",
    "parse_pyspy_json",
    "parse_pyspy_text",
    "rank_from_name",
    "rank_from_text",
    "read_regular_file",
]

MAX_DUMP_BYTES = 64 * 1024 * 1024
"""Largest dump file read by :func:`parse_dump_file`."""

_PROCESS_RE = re.compile(r"^\s*Process (\d+):\s?(.*?)\s*$")
_PYTHON_RE = re.compile(r"^\s*Python v(\S+)(?: \((.*)\))?\s*$")
_THREAD_RE = re.compile(r'^\s*Thread (0x[0-9A-Fa-f]+|\d+)(?: \(([A-Za-z+]+)\))?(?::\s*"(.*)")?\s*:?\s*$')
_FRAME_RE = re.compile(r"^(?P<indent>\s*)(?P<func>\S.*) \((?P<file>[^()\s]+?)(?::(?P<line>\d+))?\)\s*$")
_LOCALS_RE = re.compile(r"^\s+(Arguments|Locals):\s*$")
_ERROR_RE = re.compile(r"^\s*(?:Error|error): (.+?)\s*$")
_PERMISSION_RE = re.compile(r"^\s*(Permission Denied(?:: .+?)?)\s*$", re.IGNORECASE)
_REASON_RE = re.compile(r"^\s*Reason: (.+?)\s*$")
_TIMEOUT_RE = re.compile(
    r"^\s*((?:timeout: sending signal \S+ to command .*py-spy.*)|(?:py-spy timed out.*?))\s*$", re.IGNORECASE
)
_CAUSED_RE = re.compile(r"^\s*Caused by:\s*$")
_CAUSE_ITEM_RE = re.compile(r"^\s+(?:\d+: )?(.+?)\s*$")
_BACKTRACE_RE = re.compile(r"^\s*Stack backtrace:\s*$")
_FENCE_RE = re.compile(r"^\s*```")
_RANK_TEXT_RE = re.compile(r"(?<![A-Za-z0-9_])RANK=(\d+)")
_RANK_ANY_RE = re.compile(r"RANK=(\d+)")
_RANK_LEFT = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_RANK_NAME_RES = (
    re.compile(r"(?:^|[^a-z])rank[_\-.]?(\d+)(?:[^0-9]|$)", re.IGNORECASE),
    re.compile(r"(?:^|[^a-z0-9])r(\d+)(?:[^0-9]|$)", re.IGNORECASE),
)

# A text is taken for py-spy output when it has one of these.
_SNIFF_RES = (
    re.compile(r'^\s*Thread (0x[0-9A-Fa-f]+|\d+) \((idle|active|gil|active\+gil)\)(: ".*")?\s*$', re.M),
    re.compile(r"^\s*Process \d+: .*\n\s*Python v\d", re.M),
    re.compile(r"^Error: Failed to (get process executable name|find python version|open process)", re.M),
    re.compile(r"^Permission Denied: Try running again with elevated permissions", re.M),
    # py-spy's other failures: "Error: Failed to suspend process" + "Reason: EPERM: ...", "Error: No
    # such process (os error 3)", the Docker variant of "Permission Denied", a killed or timed-out py-spy
    re.compile(r"^Error: (?:Failed to [a-z]|No such process|Operation not permitted)", re.M),
    re.compile(r"^Error: .+\n(?:\s*\n)*(?:Reason: |Caused by:)", re.M),
    re.compile(r"^Permission Denied\s*\n(?:\s*\n)*It looks like you are running in a docker container", re.M),
    re.compile(r"^(?:timeout: sending signal \S+ to command .*py-spy|py-spy timed out)", re.M),
)


_FRAME_CACHE: dict[str, Frame | None] = {}
"""Frame line (without its indent) -> its :class:`Frame` (``None``: not a frame line). The ranks of a
job print the same few hundred frame lines, so most lines are one lookup and share one ``Frame``
(frozen, so sharing is safe). Bounded by :data:`_FRAME_CACHE_MAX` entries."""
_FRAME_CACHE_MAX = 65_536
_FRAME_CACHE_LINE = 1024  # longer lines are parsed, not remembered
_NO_FRAME = Frame("", "")  # cache-miss marker


_LINE_CACHE: dict[str, tuple[Frame, int]] = {}
"""Line (as in the text) -> its frame and indent, for frame lines no other pattern matches (see
:func:`_frame_only`); bounded like :data:`_FRAME_CACHE`."""


def _frame_only(line: str, indent: int) -> bool:
    """True when no pattern tried before the frame pattern can match ``line`` in any state."""
    return not (
        (not indent and (_ERROR_RE.match(line) or _PERMISSION_RE.match(line) or _TIMEOUT_RE.match(line)))
        or _PROCESS_RE.match(line)
        or _PYTHON_RE.match(line)
        or _THREAD_RE.match(line)
        or _LOCALS_RE.match(line)
    )


def _frame_line(s: str) -> Frame | None:
    """The frame a line (without its indent) states, else ``None``; remembered in :data:`_FRAME_CACHE`."""
    m = _FRAME_RE.match(s)
    frame = None
    if m:
        ln = m.group("line")
        frame = Frame(function=m.group("func").strip(), file=m.group("file"), line=int(ln) if ln else None)
    if len(s) <= _FRAME_CACHE_LINE:
        if len(_FRAME_CACHE) >= _FRAME_CACHE_MAX:
            _FRAME_CACHE.clear()
        _FRAME_CACHE[s] = frame
    return frame


# --- JSON ------------------------------------------------------------------------------------------


def _opt_bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def _opt_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        return int(v.strip())
    return None


def parse_pyspy_json(obj: Any) -> tuple[ThreadStack, ...]:
    """Parse the decoded output of ``py-spy dump --json`` (py-spy 0.3/0.4).

    Args:
        obj: a list of thread objects ``{thread_id, thread_name, os_thread_id, active, owns_gil,
            frames: [{name, filename, module, short_filename, line, locals}]}``, frames innermost
            first. A single thread object (a mapping) is accepted too.

    Returns:
        One :class:`ThreadStack` per thread, in py-spy's order, frames innermost first. The thread id
        is ``os_thread_id`` when present (the TID that the text format prints), else ``thread_id``.

    Raises:
        DumpParseError: ``obj`` is not a list of thread objects with a ``frames`` list.
    """
    if isinstance(obj, Mapping):
        obj = [obj]
    if not isinstance(obj, list):
        raise DumpParseError(f"py-spy JSON: expected a list of threads, got {type(obj).__name__}")
    threads: list[ThreadStack] = []
    for i, t in enumerate(obj):
        if not isinstance(t, Mapping) or not isinstance(t.get("frames"), list):
            raise DumpParseError(f"py-spy JSON: thread #{i} is not an object with a 'frames' list")
        frames: list[Frame] = []
        for j, f in enumerate(t["frames"]):
            if not isinstance(f, Mapping) or not isinstance(f.get("name"), str):
                raise DumpParseError(f"py-spy JSON: thread #{i} frame #{j} has no 'name'")
            short = f.get("short_filename")
            filename = f.get("filename") or short or "?"
            module = f.get("module")
            frames.append(
                Frame(
                    function=f["name"],
                    file=str(filename),
                    line=_opt_int(f.get("line")),
                    module=str(module) if module else None,
                    short_file=str(short) if short and short != filename else None,
                )
            )
        tid = t.get("os_thread_id")
        if tid is None:
            tid = t.get("thread_id")
        name = t.get("thread_name")
        active = _opt_bool(t.get("active"))
        threads.append(
            ThreadStack(
                thread_id=str(tid) if tid is not None else str(i),
                name=name if isinstance(name, str) else None,
                frames=tuple(frames),
                idle=None if active is None else not active,
                active=active,
                owns_gil=_opt_bool(t.get("owns_gil")),
            )
        )
    return tuple(threads)


def _process_from_record(rec: Mapping[str, Any], source: str | None) -> ProcessDump:
    """A ``{pid, rank, host, role, parent_pid, cmdline, state, comm, error, threads}`` record."""
    threads_obj = rec.get("threads")
    error = rec.get("error")
    threads = parse_pyspy_json(threads_obj) if isinstance(threads_obj, list) else ()
    if not threads and not error:
        raise DumpParseError("py-spy JSON: a process record has neither 'threads' nor 'error'")
    role_v = rec.get("role")
    try:
        role: ProcessRole | None = ProcessRole(role_v) if isinstance(role_v, str) else None
    except ValueError:
        role = None
    dump = ProcessDump(
        threads=threads,
        rank=_opt_int(rec.get("rank")),
        host=str(rec["host"]) if rec.get("host") else None,
        pid=_opt_int(rec.get("pid")),
        role=role or ProcessRole.MAIN,
        parent_pid=_opt_int(rec.get("parent_pid")),
        cmdline=str(rec["cmdline"]) if rec.get("cmdline") else None,
        state=str(rec["state"]) if rec.get("state") else None,
        error=str(error) if error else None,
        source=source,
        comm=str(rec["comm"]) if rec.get("comm") else None,
    )
    if role is None:
        dump = replace(
            dump, role=infer_role(dump.threads, is_child=dump.parent_pid is not None, comm=dump.comm)
        )
    return dump


def _processes_from_json(obj: Any, source: str | None) -> list[ProcessDump]:
    if isinstance(obj, Mapping) and isinstance(obj.get("processes"), list):
        obj = obj["processes"]
    if isinstance(obj, Mapping) and ("threads" in obj or "error" in obj):
        return [_process_from_record(obj, source)]
    if isinstance(obj, list) and obj and all(isinstance(x, Mapping) and "frames" not in x for x in obj):
        return [_process_from_record(x, source) for x in obj]
    if isinstance(obj, Mapping) and "frames" not in obj:
        raise DumpParseError("JSON document is not a py-spy dump (no 'frames', 'threads' or 'processes')")
    threads = parse_pyspy_json(obj)
    pids = {_opt_int(t.get("pid")) for t in obj if isinstance(t, Mapping)} if isinstance(obj, list) else set()
    pid = pids.pop() if len(pids) == 1 else None
    return [ProcessDump(threads=threads, pid=pid, role=infer_role(threads), source=source)]


# --- text ------------------------------------------------------------------------------------------


@dataclass
class _Thread:
    tid: str
    name: str | None
    status: str | None
    frames: list[Frame] = field(default_factory=list)


@dataclass
class _Proc:
    pid: int | None = None
    cmdline: str | None = None
    python: str | None = None
    threads: list[_Thread] = field(default_factory=list)
    error: str | None = None
    rank: int | None = None

    def has_main(self) -> bool:
        return any(t.name == "MainThread" for t in self.threads)

    def empty(self) -> bool:
        return not self.threads and self.error is None


def _status_flags(status: str | None) -> tuple[bool | None, bool | None, bool | None]:
    """(idle, active, owns_gil) from ``idle`` / ``active`` / ``active+gil`` / ``gil``."""
    if status is None:
        return None, None, None
    flags = _STATUS_FLAGS.get(status)
    if flags is None:
        parts = set(status.lower().split("+"))
        active = "active" in parts
        flags = (not active, active, "gil" in parts)
        if len(_STATUS_FLAGS) < 256:
            _STATUS_FLAGS[status] = flags
    return flags


_STATUS_FLAGS: dict[str, tuple[bool, bool, bool]] = {}


def _error_summary(first: str, causes: Sequence[str]) -> str:
    """py-spy's error and its causes as one line: ``Failed to get stack traces: Failed to suspend process
    (EPERM: Operation not permitted)`` (each distinct cause once; the last, the OS error, in parentheses)."""
    msg = first.strip()
    seen: list[str] = []
    for c in causes:
        c = c.strip()
        if c and c != msg and c not in seen:
            seen.append(c)
    if not seen:
        return msg
    *middle, last = seen
    return ": ".join([msg, *middle]) + f" ({last})"


def parse_pyspy_text(
    text: str, *, source: str | None = None, rank: int | None = None
) -> tuple[ProcessDump, ...]:
    """Parse one or more text dumps (``py-spy dump`` without ``--json``), as printed or pasted.

    Args:
        text: the dump text (see the module docstring for the shapes understood).
        source: recorded as each process's ``source`` (a file path), and used for nothing else.
        rank: the rank of the processes when known by the caller (e.g. from the file name); a
            ``RANK=N`` in a process's block takes precedence.

    Returns:
        One :class:`ProcessDump` per process in the order found; frames innermost first. A py-spy
        error block becomes a process with ``error`` set and no threads. The role is inferred from
        the frames (:func:`infer_role`).

    Raises:
        DumpParseError: no thread header, frame line or py-spy error in ``text``.
    """
    procs = _TextParser().parse(text)
    if not procs:
        raise DumpParseError("not a py-spy dump: no thread header, frame line or py-spy error found")
    file_rank = rank_from_text(text)  # one RANK=N in the whole text: the file's rank
    fallback = file_rank if file_rank is not None else rank
    return tuple(_process_dump(p, fallback, source) for p in procs)


def _process_dump(p: _Proc, rank: int | None, source: str | None) -> ProcessDump:
    """The :class:`ProcessDump` of a parsed process block (``rank`` when the block names none)."""
    threads = tuple(ThreadStack(t.tid, t.name, tuple(t.frames), *_status_flags(t.status)) for t in p.threads)
    pid = p.pid
    if pid is None:  # headerless: on Linux the main thread's TID is the PID
        main = next((t for t in p.threads if t.name == "MainThread" and t.tid.isdigit()), None)
        pid = int(main.tid) if main is not None else None
    return ProcessDump(
        threads=threads,
        rank=p.rank if p.rank is not None else rank,
        pid=pid,
        role=infer_role(threads) if p.error is None else ProcessRole.MAIN,
        cmdline=p.cmdline,
        error=p.error,
        source=source,
    )


_HEADER_FIRST = frozenset("EePpTtAL")
"""The first characters (after the indent) of the lines :meth:`_TextParser._header` acts on: py-spy's
error lines, ``Process``/``Python`` headers, ``Thread`` headers, ``Arguments:``/``Locals:``. A frame
line starting with another character skips the call (nearly all of a dump's lines)."""


class _TextParser:
    """One pass over a text dump, a line at a time, in one of three modes.

    ``dump`` (process and thread headers, frame lines, ``Arguments:``/``Locals:`` blocks skipped by
    their indent), ``causes`` (after a py-spy error line: its ``Caused by:`` items and ``Reason:``
    lines) and ``backtrace`` (a ``Stack backtrace:`` block, skipped). An error block ends at the next
    unindented line and becomes a process with ``error`` set.

    Each pattern is tried only on lines that can match it (the first character tells), in a fixed
    order; frame lines, nearly all of a dump, mostly skip them all, and a line seen before as a frame
    line that no other pattern matches is one lookup (:data:`_LINE_CACHE`).
    """

    __slots__ = ("causes", "cur", "err_first", "frame_indent", "in_locals_indent", "mode", "procs", "thread")

    def __init__(self) -> None:
        self.procs: list[_Proc] = []
        self.cur: _Proc | None = None
        self.thread: _Thread | None = None
        self.frame_indent: int | None = None
        self.in_locals_indent: int | None = None
        self.mode = "dump"  # "dump" | "causes" | "backtrace"
        self.causes: list[str] = []
        self.err_first: str | None = None

    def parse(self, text: str) -> list[_Proc]:
        """The non-empty process blocks of ``text``, in order."""
        line_of = _LINE_CACHE.get
        for line in text.splitlines():
            hit = line_of(line)
            thread = self.thread
            if (
                hit is not None
                and thread is not None
                and self.mode == "dump"
                and self.in_locals_indent is None
            ):
                # thread is not None: cur holds it and has no error
                if self.frame_indent is None:
                    self.frame_indent = hit[1]
                if hit[1] <= self.frame_indent:
                    thread.frames.append(hit[0])
                    continue
            # any other line: the dispatch is inline (not a method) because it runs once per line of
            # every dump read, 100,000 files in `robustctl analyze` of a large job
            s = line.lstrip()
            if not s or (s[0] == "`" and s.startswith("```")):
                continue
            indent = len(line) - len(s)
            c = s[0]
            if self.mode != "dump" and self._error_block(line, indent, c):
                continue
            if c in _HEADER_FIRST and self._header(line, indent, c):
                continue
            if self.in_locals_indent is not None and indent > self.in_locals_indent:
                continue
            self.in_locals_indent = None
            if self._frame(line, s, indent):
                continue
            cur = self.cur
            if cur is not None and cur.rank is None and "RANK=" in line:
                rm = _RANK_TEXT_RE.search(line)
                if rm:
                    cur.rank = int(rm.group(1))
            # anything else (a cut line, prose around a paste) is ignored
        self._close_error()
        return [p for p in self.procs if not p.empty()]

    def _error_block(self, line: str, indent: int, c: str) -> bool:
        """In ``causes``/``backtrace`` mode: take the line when it belongs to the block (True); an
        unindented line that does not ends the block (closing the error) and is read as usual."""
        if c == "S" and _BACKTRACE_RE.match(line):
            self.mode = "backtrace"
            return True
        if self.mode == "causes" and c == "C" and _CAUSED_RE.match(line):
            return True
        if self.mode == "causes" and c == "R" and (rm := _REASON_RE.match(line)):  # py-spy's "Reason: ..."
            self.causes.append(rm.group(1))
            return True
        if indent:
            if self.mode == "causes":
                m = _CAUSE_ITEM_RE.match(line)
                if m:
                    self.causes.append(m.group(1))
            return True
        self.mode = "dump"
        self._close_error()
        return False

    def _header(self, line: str, indent: int, c: str) -> bool:
        """A py-spy error line, a ``Process``/``Python`` header, a thread header or the start of a
        locals block: act on it and return True; anything else False."""
        if not indent and c in "EePpTt":
            m = _ERROR_RE.match(line) or _PERMISSION_RE.match(line) or _TIMEOUT_RE.match(line)
            if m:
                self._close_error()
                self.err_first = m.group(1)
                self.mode = "causes"
                return True
        if c == "P":
            m = _PROCESS_RE.match(line)
            if m:
                cur = self._new_proc()
                cur.pid = int(m.group(1))
                cur.cmdline = m.group(2) or None
                rm = _RANK_TEXT_RE.search(line) if "RANK=" in line else None
                if rm:
                    cur.rank = int(rm.group(1))
                return True
            m = _PYTHON_RE.match(line)
            if m and self.cur is not None and not self.cur.threads:
                self.cur.python = m.group(1)
                return True
        elif c == "T":
            m = _THREAD_RE.match(line)
            if m:
                name = m.group(3)
                holder = self.cur
                if holder is None or (name == "MainThread" and holder.has_main()) or holder.error is not None:
                    holder = self._new_proc()
                self.thread = _Thread(tid=m.group(1), name=name, status=m.group(2))
                holder.threads.append(self.thread)
                self.frame_indent, self.in_locals_indent = None, None
                return True
        elif indent and c in "AL" and _LOCALS_RE.match(line):
            self.in_locals_indent = indent
            return True
        return False

    def _frame(self, line: str, s: str, indent: int) -> bool:
        """A frame line (no deeper than the thread's first): append it to the current thread (a new
        headerless process or thread when there is none) and return True; else False."""
        frame = _FRAME_CACHE.get(s, _NO_FRAME)
        if frame is _NO_FRAME:
            frame = _frame_line(s)
        if frame is None or (self.frame_indent is not None and indent > self.frame_indent):
            return False
        cur = self.cur
        if cur is None or cur.error is not None:
            cur = self._new_proc()
        if self.thread is None:
            self.thread = _Thread(tid="?", name=None, status=None)
            cur.threads.append(self.thread)
        if self.frame_indent is None:
            self.frame_indent = indent
        self.thread.frames.append(frame)
        if len(line) <= _FRAME_CACHE_LINE and _frame_only(line, indent):
            if len(_LINE_CACHE) >= _FRAME_CACHE_MAX:
                _LINE_CACHE.clear()
            _LINE_CACHE[line] = (frame, indent)
        return True

    def _new_proc(self) -> _Proc:
        p = _Proc()
        self.procs.append(p)
        self.cur = p
        self.thread, self.frame_indent = None, None
        return p

    def _close_error(self) -> None:
        """End a pending py-spy error: the current process's error when it is still empty, else a
        process of its own."""
        if self.err_first is None:
            return
        msg = _error_summary(self.err_first, self.causes)
        if self.cur is not None and self.cur.empty():
            self.cur.error = msg
        else:
            self.cur = _Proc(error=msg)
            self.procs.append(self.cur)
        self.thread = None
        self.err_first, self.causes = None, []


# --- entry points ----------------------------------------------------------------------------------


def rank_from_name(name: str) -> int | None:
    """The rank a file name states: ``rank12.txt``, ``rank_12.json``, ``rank-3``, ``dump-r12.txt``.

    Only the base name is read; ``rank_pid39.txt`` has no rank (``pid39`` is a process id).
    """
    base = name if "/" not in name and name != "." else Path(name).name
    for rx in _RANK_NAME_RES:
        m = rx.search(base)
        if m:
            return int(m.group(1))
    return None


def rank_from_text(text: str) -> int | None:
    """The rank a ``RANK=N`` in ``text`` states (not ``LOCAL_RANK``); ``None`` when absent or conflicting."""
    if "RANK=" not in text:
        return None
    # _RANK_TEXT_RE's lookbehind defeats the regex engine's literal prefix search: find "RANK=N"
    # and check the character before it here (same matches: "RANK=" cannot overlap itself).
    found = {
        int(m.group(1))
        for m in _RANK_ANY_RE.finditer(text)
        if not m.start() or text[m.start() - 1] not in _RANK_LEFT
    }
    return found.pop() if len(found) == 1 else None


def looks_like_pyspy(text: str) -> bool:
    """True when ``text`` looks like py-spy output: a text dump, a JSON dump or py-spy's error output.

    Cheap and never raises; headerless text stacks count when most non-empty lines are frame lines.
    """
    head = text[:200_000]
    stripped = head.lstrip()
    if stripped[:1] in ("[", "{"):
        return '"frames"' in head and ('"thread_name"' in head or '"filename"' in head)
    if any(rx.search(head) for rx in _SNIFF_RES):
        return True
    lines = [ln for ln in head.splitlines()[:500] if ln.strip() and not _FENCE_RE.match(ln)]
    if len(lines) < 2:
        return False
    frames = sum(1 for ln in lines if _FRAME_RE.match(ln) and re.search(r"\.py:\d+\)\s*$", ln))
    return frames >= 2 and frames >= 0.8 * len(lines)


def parse_dump_text(
    text: str, *, source: str | None = None, rank: int | None = None
) -> tuple[ProcessDump, ...]:
    """Parse a dump in any supported form: py-spy JSON (one document, or one per line) or text.

    JSON forms: a thread list (``py-spy dump --json``); a process record ``{pid, rank, host, role,
    parent_pid, cmdline, state, comm, error, threads}``; a list of such records; ``{"processes": [...]}``.

    Args:
        text: file content.
        source: stored as each process's ``source``.
        rank: the caller's rank for these processes (e.g. from the file name); ranks stated inside the
            dump (``RANK=N``, a record's ``rank``) take precedence.

    Returns:
        The processes found, in the dump's order.

    Raises:
        DumpParseError: garbage, invalid or truncated JSON, or JSON of another shape.
    """
    stripped = text.strip()
    if not stripped:
        raise DumpParseError("empty dump")
    if stripped[0] in "[{":
        try:
            obj = json.loads(stripped)
        except (ValueError, RecursionError):
            obj = None
            lines = [ln for ln in stripped.splitlines() if ln.strip()]
            procs: list[ProcessDump] = []
            try:
                for ln in lines:
                    procs.extend(_processes_from_json(json.loads(ln), source))
            except (ValueError, RecursionError):
                raise DumpParseError("invalid or truncated JSON") from None
            dumps = procs
        else:
            dumps = _processes_from_json(obj, source)
        return tuple(d if d.rank is not None or rank is None else replace(d, rank=rank) for d in dumps)
    return parse_pyspy_text(text, source=source, rank=rank)


def read_regular_file(path: str | Path, limit: int) -> bytes:
    """At most ``limit`` bytes from the start of ``path``, which must be a regular file.

    The file is opened with :func:`robustctl.inputfile.open_regular`, so a FIFO (whose ``open`` would
    wait for a writer, forever) or a device (``/dev/zero``) is refused at once.

    Args:
        path: the file to read.
        limit: the most bytes read.

    Returns:
        The first ``limit`` bytes of the file (all of it when it is shorter).

    Raises:
        DumpParseError: the file cannot be opened or read, or is not a regular file; the message
            starts with the path.
    """
    p = Path(path)
    try:
        fd = open_regular(p)
    except NotReadable as exc:
        if exc.special:
            raise DumpParseError(f"{p}: {exc.reason}: not read") from None
        why = exc.reason if exc.reason.startswith("cannot read") else f"cannot read: {exc.reason}"
        raise DumpParseError(f"{p}: {why}") from None
    try:
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(limit)
    except OSError as exc:
        raise DumpParseError(f"{p}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _other_kind(text: str) -> str:
    """What a file that is not a py-spy dump looks like, for the error message."""
    from robustctl.analysis.detect import detect_kind

    kind = detect_kind(text[:1_000_000])
    if kind is None:
        return "no py-spy thread, frame or error line"
    return f"it is {kind.name} output: analyse it without --layout"


def parse_dump_file(path: str | Path) -> tuple[ProcessDump, ...]:
    """Read and parse one dump file; the rank comes from the dump, else from the file name.

    A file that :func:`looks_like_pyspy` rejects (a kernel log, nccl-tests output, any other text)
    is not parsed as a dump: it would become a bogus "process" whose frames are log lines.

    An empty file named for a rank (``rank5.txt``) is that rank's failed dump
    (:func:`empty_rank_dump`), not garbage.

    Args:
        path: the dump file; its name gives the rank when the dump does not state one.

    Returns:
        The processes of the dump, in the dump's order.

    Raises:
        DumpParseError: the file cannot be read, is not a regular file, is binary or too large, or
            is not a py-spy dump; the message starts with the path.
    """
    p = Path(path)
    return parse_dump_data(read_regular_file(p, MAX_DUMP_BYTES + 1), source=str(p), name=p.name)


def parse_dump_data(data: bytes, *, source: str, name: str) -> tuple[ProcessDump, ...]:
    """Parse the content of one dump file (or archive member) as :func:`parse_dump_file` does.

    Args:
        data: the content, at most ``MAX_DUMP_BYTES + 1`` bytes read (more is over the bound).
        source: what messages and each process's ``source`` call it (a path, ``ARCHIVE:MEMBER``).
        name: the file's own name, the rank's fallback (:func:`rank_from_name`).

    Returns:
        The processes of the dump, in the dump's order (one unreadable process for an empty rank
        file).

    Raises:
        DumpParseError: binary, too large, or not a py-spy dump; the message starts with ``source``.
    """
    if len(data) > MAX_DUMP_BYTES:
        raise DumpParseError(f"{source}: larger than {MAX_DUMP_BYTES // (1024 * 1024)} MiB")
    if b"\x00" in data[:65536]:
        raise DumpParseError(f"{source}: binary file (not a py-spy dump)")
    text = data.decode("utf-8", errors="replace")
    empty = empty_rank_dump(text, source=source, name=name)
    if empty is not None:
        return (empty,)
    if not looks_like_pyspy(text):
        raise DumpParseError(f"{source}: not a py-spy dump ({_other_kind(text)}); not read as one")
    try:
        return parse_dump_text(text, source=source, rank=rank_from_name(name))
    except DumpParseError as exc:
        raise DumpParseError(f"{source}: {exc}") from None


EMPTY_DUMP_ERROR = "empty dump: py-spy printed nothing (timed out or killed?)"
"""The error of an empty rank dump file (:func:`empty_rank_dump`)."""


def empty_rank_dump(text: str, *, source: str, name: str) -> ProcessDump | None:
    """The unreadable process of a rank whose dump file is empty (whitespace only), else ``None``.

    ``timeout 10 py-spy dump --pid P > rank5.txt`` leaves an empty file when py-spy hangs on a process
    it cannot stop (uninterruptible sleep) and is killed: the rank is known from the file name
    (:func:`rank_from_name`), its stacks are not. A file with no rank in its name is not a dump of
    anything and stays an error of the caller's. ``source`` names the input in the result (a path,
    ``ARCHIVE:MEMBER``); ``name`` is the file's own name, read for the rank.
    """
    if text.strip():
        return None
    rank = rank_from_name(name)
    if rank is None:
        return None
    return ProcessDump((), rank=rank, error=EMPTY_DUMP_ERROR, source=source)


# --- roles -----------------------------------------------------------------------------------------


def _files(frames: Iterable[Frame]) -> Iterable[tuple[str, str]]:
    for f in frames:
        yield f.function.rsplit(".", 1)[-1], (f.short_file or f.file).replace("\\", "/")


def _is_mp_child(frames: Sequence[Frame]) -> bool:
    """The thread runs under a multiprocessing bootstrap (a forked or spawned child)."""
    for f in frames:
        if not f.function.endswith(("_bootstrap", "spawn_main", "_main")):  # implied by both tests
            continue
        fn, path = f.function.rsplit(".", 1)[-1], (f.short_file or f.file).replace("\\", "/")
        if path.endswith("multiprocessing/process.py") and fn == "_bootstrap":
            return True
        if path.endswith("multiprocessing/spawn.py") and fn in ("spawn_main", "_main"):
            return True
    return False


def _has_checkpoint(frames: Sequence[Frame]) -> bool:
    return any(
        frame_category(f.function, normalize_path(f.short_file or f.file)) is Category.CHECKPOINT
        for f in frames
    )


DATALOADER_COMM = "pt_data_worker"
"""``/proc/PID/comm`` of a PyTorch data-loader worker: ``torch/utils/data/_utils/worker.py``
``_worker_loop`` names its process with ``torch.multiprocessing._set_thread_name("pt_data_worker")``."""


def infer_role(
    threads: Sequence[ThreadStack], *, is_child: bool | None = None, comm: str | None = None
) -> ProcessRole:
    """Guess a process's role from its stacks, for dumps whose collector did not say.

    Rules (first that applies): a child whose ``comm`` (``/proc/PID/comm``, when the collector read
    it) is ``pt_data_worker`` (:data:`DATALOADER_COMM`), or a thread in
    ``torch/utils/data/_utils/worker.py`` ``_worker_loop`` → DATALOADER; a multiprocessing child
    (``multiprocessing/process.py`` ``_bootstrap`` in the main thread, or ``is_child``) with a
    checkpoint frame anywhere in its main thread (``torch.save``, ``torch.distributed.checkpoint``,
    Megatron ``dist_checkpointing``, a ``*checkpoint*`` writer function such as
    ``_checkpoint_writer_main``, see :func:`robustctl.stacks.cluster.categorize`) → CHECKPOINT, so a
    writer process keeps its role while idle; another multiprocessing child → OTHER; else MAIN. A rank process that saves a checkpoint itself, or in a
    thread, stays MAIN.
    """
    if is_child and comm == DATALOADER_COMM:
        return ProcessRole.DATALOADER
    for t in threads:
        for f in t.frames:
            if "_worker_loop" in f.function:  # implied by the test
                fn, path = f.function.rsplit(".", 1)[-1], (f.short_file or f.file).replace("\\", "/")
                if fn == "_worker_loop" and "torch/utils/data/" in path:
                    return ProcessRole.DATALOADER
    main = next((t for t in threads if t.is_main), threads[0] if threads else None)
    if main is None:
        return ProcessRole.MAIN
    child = bool(is_child) or _is_mp_child(main.frames)
    if child and _has_checkpoint(main.frames):
        return ProcessRole.CHECKPOINT
    if child:
        return ProcessRole.OTHER
    return ProcessRole.MAIN
