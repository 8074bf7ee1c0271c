"""Python's own stack texts as stacks evidence: :mod:`faulthandler` dumps and exception tracebacks.

Two texts a job leaves without py-spy, parsed into the :class:`~robustctl.stacks.model.ProcessDump`
model py-spy dumps use, so clustering and blame treat them alike:

* **faulthandler dumps** (``faulthandler.dump_traceback``, ``dump_traceback_later``, ``register``
  on a signal, as the agent writes ``stacks/rankRRRRR.txt`` on SIGUSR1, and the fatal-error handler),
  in the format of CPython's ``Python/traceback.c``: a thread header ``Thread 0x00007f…  (most
  recent call first):`` or ``Current thread 0x… (most recent call first):`` (all threads, one blank
  line between two threads), or ``Stack (most recent call first):`` (one thread), optionally after
  ``Fatal Python error: …`` or ``Timeout (0:00:05)!``; then frame lines ``  File "x.py", line 12 in
  func``, most recent call first (innermost first, as py-spy's), with the markers ``  <no Python
  frame>``, ``  <tstate is freed>``, ``  Garbage-collecting`` and ``  ...`` (more than 100 frames).
  faulthandler does not name threads: CPython lists the newest thread first, so the main thread is
  the last one listed, or, when the list was cut, the last whose outermost frame is ``<module>``;
  that thread is named ``MainThread``. A file the agent appended several dumps to (one per signal)
  gives its last dump: a thread header that follows a frame line with no blank line between, or
  that repeats a thread id, starts a new dump.
* **exception tracebacks** (``Traceback (most recent call last):``, ``  File "x.py", line 12, in
  func`` lines, then ``ErrorType: message``, e.g. torch's ``DistBackendError`` or a rank's crash):
  the rank's error, a process with ``error`` set (``exception: RuntimeError: NCCL error … (at
  train.py:42 in step)``) and no threads, as py-spy's own error output gives, so blame names it
  next to a dominant class.

Lines prefixed ``[rankN]:`` (torch's per-rank log prefix) are that rank's; a file may hold many
ranks this way. Other lines are the file's rank (from its name, :func:`robustctl.stacks.parse.rank_from_name`).
Per rank the later of its last dump and its last exception is used. Anything else in the text (log
lines, ``Extension modules:`` lists) is skipped. Nothing here raises anything but
:class:`~robustctl.stacks.model.DumpParseError`, on a text with neither form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from robustctl.stacks.model import DumpParseError, Frame, ProcessDump, ThreadStack
from robustctl.stacks.parse import infer_role

__all__ = [
    "MAX_ERROR_CHARS",
    "MAX_FRAMES_PER_THREAD",
    "MAX_STREAMS",
    "MAX_THREADS_PER_DUMP",
    "ParsedTracebacks",
    "looks_like_exception",
    "looks_like_faulthandler",
    "looks_like_traceback",
    "parse_traceback_text",
]

MAX_THREADS_PER_DUMP = 1000
"""Threads kept per dump: faulthandler prints at most 100 (``MAX_NTHREADS`` in CPython's
``Python/traceback.c``); ten times that leaves room for pasted dumps run together, and a hostile text
cannot grow one dump without bound. Threads past it are dropped (the dump keeps the first ones)."""

MAX_FRAMES_PER_THREAD = 1000
"""Frames kept per thread (or exception traceback): faulthandler prints at most 100
(``MAX_FRAME_DEPTH``); an exception traceback of a deep recursion prints up to the recursion limit,
1000 by default. Frames past it are dropped (the innermost are kept for a dump, whose frames come
innermost first)."""

MAX_STREAMS = 100_000
"""Distinct ``[rankN]:`` prefixes followed in one text: one per rank of a job of 100K ranks (as
:data:`robustctl.analysis.detect.MAX_GROUP_MEMBERS`); lines of further ranks are skipped."""

MAX_ERROR_CHARS = 300
"""Longest error line kept for an exception: NCCL's messages run to a few hundred characters on one
line (``DistBackendError: NCCL error in: …/ProcessGroupNCCL.cpp:1970, unhandled system error …``);
the head names the error, the rest is cut with ``…``."""

_PREFIX_RE = re.compile(r"^\[[Rr]ank(\d{1,7})\]:[ ]?")
_HEADER_RE = re.compile(
    r"^(?:(?P<cur>Current thread|Thread) (?P<tid>0x[0-9A-Fa-f]+)(?: \[[^\]]*\])?|(?P<stack>Stack))"
    r" \(most recent call first\):\s*$"
)
_FATAL_RE = re.compile(r"^Fatal Python error: (?P<msg>.*)$")
_TIMEOUT_RE = re.compile(r"^Timeout \(\d+:\d\d:\d\d(?:\.\d+)?\)!\s*$")
_FH_FRAME_RE = re.compile(r'^\s+File (?:"(?P<file>.*)"|\?\?\?), line (?P<line>\d+|\?\?\?) in (?P<func>\S.*)$')
_FH_MARKER_RE = re.compile(r"^\s+(?:<no Python frame>|<tstate is freed>|Garbage-collecting|\.\.\.)\s*$")
_TB_START_RE = re.compile(r"^Traceback \(most recent call last\):\s*$")
_TB_FRAME_RE = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+), in (?P<func>\S.*)$')
_EXC_RE = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)(?::(?P<msg>.*))?$")

_P = r"^(?:\[[Rr]ank\d{1,7}\]:[ ]?)?"
_SNIFF_FH_RE = re.compile(
    _P + r"(?:(?:Current thread|Thread) 0x[0-9A-Fa-f]+(?: \[[^\]\n]*\])?|Stack) \(most recent call first\):"
    r"[ \t]*\r?\n" + _P[1:] + r"[ \t]+(?:File |<no Python frame>|<tstate is freed>|Garbage-collecting)",
    re.M,
)
_SNIFF_TB_RE = re.compile(
    _P + r"Traceback \(most recent call last\):[ \t]*\r?\n" + _P[1:] + r'[ \t]+File ".*", line \d+, in ', re.M
)


def looks_like_faulthandler(text: str) -> bool:
    """True when ``text`` holds a faulthandler dump: a thread or ``Stack`` header followed by a frame
    line (or a marker such as ``<no Python frame>``). Cheap; never raises.

    Args:
        text: the text (its head is enough: the first header is what counts).

    Returns:
        Whether a dump header with its first frame line is in it.
    """
    return "(most recent call first):" in text and _SNIFF_FH_RE.search(text) is not None


def looks_like_exception(text: str) -> bool:
    """True when ``text`` holds a Python exception traceback: ``Traceback (most recent call last):``
    followed by a ``File "…", line N, in …`` line. Cheap; never raises.

    Args:
        text: the text.

    Returns:
        Whether a traceback header with its first frame line is in it.
    """
    return "Traceback (most recent call last):" in text and _SNIFF_TB_RE.search(text) is not None


def looks_like_traceback(text: str) -> bool:
    """:func:`looks_like_faulthandler` or :func:`looks_like_exception`.

    Args:
        text: the text.

    Returns:
        Whether either form is in it.
    """
    return looks_like_faulthandler(text) or looks_like_exception(text)


@dataclass(frozen=True)
class ParsedTracebacks:
    """What one text held.

    Attributes:
        dumps: one process per rank stream (a dump's threads, or an exception as ``error``), in the
            order the streams first appeared.
        notes: observations for the report: a ``Fatal Python error`` a dump was printed under (the
            process crashed there), streams past :data:`MAX_STREAMS`.
    """

    dumps: tuple[ProcessDump, ...]
    notes: tuple[str, ...] = ()


@dataclass
class _Dump:
    """A faulthandler dump being read."""

    threads: list[tuple[str, bool, list[Frame]]] = field(default_factory=list)
    fatal: str | None = None
    ids: set[str] = field(default_factory=set)


@dataclass
class _Stream:
    """One rank's lines (a ``[rankN]:`` prefix, or the unprefixed lines)."""

    rank: int | None
    dump: _Dump | None = None
    frames: list[Frame] | None = None  # the thread being read
    after_frame: bool = False  # the previous line was a frame line of the current dump
    tb: list[Frame] | None = None  # an exception traceback being read (outermost first)
    last: _Dump | str | None = None  # the latest dump ended, or exception read

    def end_dump(self) -> None:
        if self.dump is not None and self.dump.threads:
            self.last = self.dump
        self.dump, self.frames, self.after_frame = None, None, False


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def _exception_error(name: str, msg: str | None, frames: list[Frame]) -> str:
    """``exception: RuntimeError: message (at train.py:42 in step)``, one line."""
    head = f"{name}: {msg}" if msg else name
    where = ""
    if frames:
        f = frames[-1]  # the innermost: a traceback lists the most recent call last
        where = f" (at {f.file.rsplit('/', 1)[-1]}:{f.line} in {f.function})"
    return _cut(f"exception: {head}") + where[:MAX_ERROR_CHARS]


class _Parser:
    """One pass over the lines of a text, each line to its rank's stream."""

    def __init__(self, rank: int | None) -> None:
        self.streams: dict[int | None, _Stream] = {}
        self.file_rank = rank
        self.dropped = 0

    def stream(self, key: int | None) -> _Stream | None:
        s = self.streams.get(key)
        if s is None:
            if len(self.streams) >= MAX_STREAMS:
                self.dropped += 1
                return None
            s = self.streams[key] = _Stream(key if key is not None else self.file_rank)
        return s

    def feed(self, raw: str) -> None:
        key: int | None = None
        line = raw
        m = _PREFIX_RE.match(raw)
        if m is not None:
            key, line = int(m.group(1)), raw[m.end() :]
        s = self.stream(key)
        if s is None:
            return
        if s.tb is not None and self._traceback_line(s, line):
            return
        if self._dump_line(s, line):
            return
        if _TB_START_RE.match(line):
            s.tb = []
            return
        if line.strip():
            s.frames, s.after_frame = None, False  # other text ends the thread being read
        else:
            s.after_frame = False

    @staticmethod
    def _traceback_line(s: _Stream, line: str) -> bool:
        """Feed an exception traceback; True when the line was its."""
        assert s.tb is not None
        fm = _TB_FRAME_RE.match(line)
        if fm is not None:
            if len(s.tb) < MAX_FRAMES_PER_THREAD:
                s.tb.append(Frame(fm.group("func").rstrip(), fm.group("file"), int(fm.group("line"))))
            return True
        if not line.strip() or line[:1].isspace():
            return True  # source lines, carets, "[Previous line repeated N more times]"
        frames, s.tb = s.tb, None
        em = _EXC_RE.match(line.rstrip())
        if em is None or _TB_START_RE.match(line):
            return False  # not an exception line: the traceback was cut; the line is read again
        s.end_dump()
        s.last = _exception_error(em.group("name"), (em.group("msg") or "").strip(), frames)
        return True

    @staticmethod
    def _dump_line(s: _Stream, line: str) -> bool:
        """Feed a faulthandler dump; True when the line was its."""
        if s.frames is not None:
            fm = _FH_FRAME_RE.match(line)
            if fm is not None:
                if len(s.frames) < MAX_FRAMES_PER_THREAD:
                    ln = fm.group("line")
                    s.frames.append(
                        Frame(
                            fm.group("func").rstrip(),
                            fm.group("file") or "???",
                            int(ln) if ln.isdigit() else None,
                        )
                    )
                s.after_frame = True
                return True
            if _FH_MARKER_RE.match(line):
                s.after_frame = True
                return True
        hm = _HEADER_RE.match(line)
        if hm is not None:
            tid = hm.group("tid") or "current"
            d = s.dump
            fresh = d is not None and d.fatal is not None and not d.threads
            if d is None or (not fresh and (hm.group("stack") or s.after_frame or tid in d.ids)):
                s.end_dump()
                d = s.dump = _Dump()
            if len(d.threads) < MAX_THREADS_PER_DUMP:
                frames: list[Frame] = []
                d.threads.append((tid, hm.group("cur") == "Current thread", frames))
                d.ids.add(tid)
                s.frames = frames
            else:
                s.frames = None
            s.after_frame = False
            return True
        fatal = _FATAL_RE.match(line)
        if fatal is not None or _TIMEOUT_RE.match(line):
            s.end_dump()
            s.dump = _Dump(fatal=_cut(fatal.group("msg")) if fatal is not None else None)
            return True
        return False

    def result(self, source: str | None) -> ParsedTracebacks:
        dumps: list[ProcessDump] = []
        notes: list[str] = []
        for s in self.streams.values():
            s.end_dump()  # a dump still open at the end is the latest
            what = s.last
            if what is None:
                continue
            if isinstance(what, str):
                dumps.append(ProcessDump((), rank=s.rank, error=what, source=source))
                continue
            threads = _threads(what)
            dumps.append(ProcessDump(threads, rank=s.rank, role=infer_role(threads), source=source))
            if what.fatal:
                who = f"rank {s.rank}" if s.rank is not None else (source or "a process")
                notes.append(
                    f"{who}: Fatal Python error: {what.fatal} (its faulthandler stacks are where it crashed)"
                )
        if self.dropped:
            notes.append(f"{source or 'text'}: lines of more than {MAX_STREAMS} [rankN]: prefixes skipped")
        return ParsedTracebacks(tuple(dumps), tuple(notes))


def _threads(d: _Dump) -> tuple[ThreadStack, ...]:
    """The dump's threads, the main one named ``MainThread`` (see the module docstring)."""
    main = len(d.threads) - 1
    modules = [i for i, (_, _, fr) in enumerate(d.threads) if fr and fr[-1].function == "<module>"]
    if modules and (not d.threads[main][2] or d.threads[main][2][-1].function != "<module>"):
        main = modules[-1]
    return tuple(
        ThreadStack(tid, "MainThread" if i == main else None, tuple(frames))
        for i, (tid, _, frames) in enumerate(d.threads)
    )


def parse_traceback_text(
    text: str, *, source: str | None = None, rank: int | None = None
) -> ParsedTracebacks:
    """Parse the faulthandler dumps and exception tracebacks of a text (see the module docstring).

    Args:
        text: the text (one rank's file, or a log of ``[rankN]:``-prefixed lines).
        source: stored as each process's ``source`` (a path, ``ARCHIVE:MEMBER``).
        rank: the rank of the unprefixed lines (e.g. from the file name); ``None`` when unknown.

    Returns:
        One process per rank stream with a dump or an exception (its last one), and notes.

    Raises:
        DumpParseError: neither a faulthandler dump nor an exception traceback is in ``text``.
    """
    parser = _Parser(rank)
    for line in text.splitlines():
        parser.feed(line)
    parsed = parser.result(source)
    if not parsed.dumps:
        raise DumpParseError("no faulthandler dump or Python exception traceback found")
    return parsed
