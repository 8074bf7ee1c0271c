#!/usr/bin/env python3
"""robustctl node-side probe ``stacks``: py-spy dumps of a training job's rank processes on this host.

Standalone with the shared prelude ``_prelude.py``
(Python >= 3.8, stdlib only, plus the ``py-spy`` binary); never imports robustctl. Prints
exactly one JSON document (see ``diagnostics/README.md``).

What it does:

1. Scans ``/proc`` for rank processes: processes whose command line (arguments joined by spaces)
   matches ``--match REGEX`` (``re.search``). The global rank comes from the environment variable
   ``--rank-env`` (default ``RANK``) in ``/proc/PID/environ``, else from the first group of
   ``--rank-cmdline REGEX`` applied to the command line; the local rank from ``--local-rank-env``.
   An unreadable environ (EPERM) is recorded (``environ_error``), not fatal.
2. Tells a rank's **main** process from its **children** by the process tree: a matching process
   whose nearest matching ancestor has the same rank is a child (a forked data-loader worker or
   checkpoint writer inherits its rank's command line and environment); every other descendant of a
   main process is a child too (e.g. a spawned helper; a dead, unreaped child shows as state ``Z``
   with command line ``[comm] <defunct>``). A matching process without a rank whose
   matching descendants have ranks is a **launcher** (torchrun's agent): listed apart, not dumped.
   The probe itself, its ancestors, its py-spy children and other ``stacks`` probes with the same
   ``--match`` are never matched. The patterns see the first ``MATCH_CMDLINE_CHARS`` characters
   of a command line, and all their searches in one scan get ``MATCH_BUDGET_S`` seconds together:
   a pattern that backtracks past that is reported (``error``: ``--match: ... budget ...``, no
   processes), not left to spin until the command's timeout.
3. ``--ranks 4-7,9``: keeps only the main processes of these global ranks (and their children);
   mains whose rank is unknown are always kept (they are evidence). Requested ranks with no main
   process are listed in ``unmatched_ranks``.
4. Runs ``py-spy dump --pid P --json [--nonblocking] [--native]`` for every kept process, in parallel
   threads (``--parallel``), each with ``--per-process-timeout`` seconds, all within ``--timeout``;
   ``RUST_BACKTRACE=0`` in py-spy's environment. A process py-spy cannot read (permission denied,
   ``D`` state, not Python, gone, zombie, timed out) gets ``dump: null`` and a one-line ``error``:
   evidence, never a crash of the probe.

``py-spy`` is ``--py-spy PATH``, else the first ``py-spy`` on ``PATH``, else one beside
``sys.executable`` (a virtual environment's ``bin``). ``--root`` and ``--nvml-injection`` (common
probe arguments) are accepted and ignored: process ids only mean something in the probe's own PID
namespace, so the live ``/proc`` is always the one scanned.

``data``::

    {processes: [ {pid: int, ppid: int, rank: int|null, local_rank: int|null,
                   role: "main"|"child", parent_pid: int|null,   # the rank's main pid, for a child
                   cmdline: str, state: "R"|"S"|"D"|"Z"|...|null,  # /proc/PID/stat at scan time
                   comm: str|null,          # /proc/PID/comm (PyTorch names its workers pt_data_worker)
                   rank_source: "env"|"cmdline"|null, environ_error: str|null,
                   dump: [thread]|null,     # py-spy's JSON thread list, frame "locals" removed
                   error: str|null,         # why dump is null
                   elapsed_s: float|null,   # wall seconds of the py-spy calls for this process
                   attempts: int,           # py-spy calls made (a transient failure is retried)
                   complete: bool|null} ],  # the MainThread reaches <module> (null: no dump)
     launchers: [ {pid: int, cmdline: str} ],
     py_spy: {path: str, version: str|null} | null,
     match: str, requested_ranks: [int]|null, unmatched_ranks: [int],
     options: {nonblocking: bool, native: bool, timeout_s: float, per_process_timeout_s: float,
               parallel: int, retries: int},
     scanned: int,                # /proc entries looked at
     error: str|null}             # a probe-level failure: py-spy missing, bad --match

A py-spy thread, compacted to ``{thread_id, thread_name, os_thread_id, active, owns_gil, frames: [{name,
filename, module, short_filename, line}]}`` (``locals`` and py-spy internals dropped), frames innermost
first. Processes are sorted by (rank, role, pid).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Sequence

from _prelude import Document, probe_main

PROBE = "stacks"
CMDLINE_MAX = 1000
ERROR_MAX = 300
MATCH_CMDLINE_CHARS = 32768
"""Most characters of a command line (from its start) that ``--match`` and ``--rank-cmdline`` are
searched in. A Megatron-LM launch with a hundred flags is a few KiB; Linux lets one process's
arguments reach megabytes, and a pattern's work grows with its subject (quadratically or worse for
one that backtracks), so the rest of a longer line is not searched."""
MATCH_BUDGET_S = 5.0
"""Wall seconds all the pattern searches of one scan may take together. An ordinary pattern over a few
thousand processes takes milliseconds (1000x room on a loaded host); a pattern that backtracks
catastrophically (``(a|aa)+$`` on a long line of a's) is stopped when the budget is spent and the scan
fails with ``MatchTimeout``, well inside the probes' own timeouts (``stacks`` 30 s; ``jobprocs``
scans three times within ``--grace`` + ``--kill-wait`` + 20 s)."""


class MatchTimeout(Exception):
    """The pattern searches of one scan ran past their budget; ``str()`` is one line saying which."""


class _Expired(Exception):
    """Raised by the interval timer's handler inside a search (caught by :class:`MatchBudget`)."""


class MatchBudget:
    """Searches patterns in command lines, every search of one scan within ``seconds`` of wall time.

    Each search is armed with an interval timer (``signal.setitimer(ITIMER_REAL)``, the time left):
    CPython's regex engine checks for signals while it backtracks (checked on 3.8 to 3.13), so the
    handler's exception stops a runaway search in the middle. The previous SIGALRM handler and timer
    are put back after each search. Where no handler can be installed (a thread other than the main
    one, e.g. the probe loaded into a test's worker thread), the time is checked between searches
    only. The subject is cut to ``MATCH_CMDLINE_CHARS`` characters first.
    """

    def __init__(self, seconds: float) -> None:
        self.budget = seconds
        self.left = seconds
        self._active = False  # inside a search: only then does the handler raise
        self._handler: Any = None  # the SIGALRM handler to put back (None: none was replaced)
        self._timer: tuple[float, float] | None = None  # the timer to put back (delay, interval)

    def _expire(self, signum: int, frame: Any) -> None:
        if self._active:
            raise _Expired()

    def search(self, pattern: re.Pattern[str], text: str, option: str, pid: int) -> re.Match[str] | None:
        """``pattern.search`` of the first ``MATCH_CMDLINE_CHARS`` characters of ``text``.

        Args:
            pattern: the compiled pattern. text: the command line. option: ``--match`` or
                ``--rank-cmdline`` (for the message). pid: whose command line (for the message).

        Raises:
            MatchTimeout: this scan's searches ran past the budget.
        """
        if self.left <= 0:
            raise MatchTimeout(self._message(option, pid))
        subject = text[:MATCH_CMDLINE_CHARS]
        start = time.monotonic()
        try:
            try:
                self._active = True
                self._arm()
                return pattern.search(subject)
            finally:
                self._active = False
        except _Expired:
            self.left = 0.0
            raise MatchTimeout(self._message(option, pid)) from None
        finally:
            spent = time.monotonic() - start
            self._disarm(spent)
            self.left = max(0.0, self.left - spent)

    def _arm(self) -> None:
        """Install the handler and start the timer (the time left), where that can be done (the main
        thread, a platform with interval timers); what they replace is kept for :meth:`_disarm`."""
        self._handler = self._timer = None
        try:
            handler = signal.signal(signal.SIGALRM, self._expire)
        except (ValueError, AttributeError, OSError):
            return
        self._handler = signal.SIG_DFL if handler is None else handler  # None: set outside Python
        try:
            self._timer = signal.setitimer(signal.ITIMER_REAL, max(0.001, self.left))
        except OSError:  # signal.ItimerError: checked between searches only
            signal.signal(signal.SIGALRM, self._handler)
            self._handler = None

    def _disarm(self, spent: float) -> None:
        """Stop the timer; put back the previous handler and what is left of a previous timer (a test
        runner's)."""
        if self._handler is None:
            return
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._handler)
        if self._timer is not None and self._timer[0] > 0:
            signal.setitimer(signal.ITIMER_REAL, max(0.001, self._timer[0] - spent), self._timer[1])
        self._handler = self._timer = None

    def _message(self, option: str, pid: int) -> str:
        return (
            f"{option}: the pattern's searches ran past their {self.budget:g} s budget (at the command "
            f"line of pid {pid}): it backtracks too much (nested or overlapping repeats?); simplify it"
        )


# --------------------------------------------------------------------------- /proc
def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def read_stat(proc: str, pid: int) -> tuple[str, int]:
    """``(state, ppid)`` from ``/proc/PID/stat`` (the command name may hold spaces and parens)."""
    raw = read_bytes(os.path.join(proc, str(pid), "stat")).decode("utf-8", "replace")
    rest = raw[raw.rindex(")") + 2 :].split()
    return rest[0], int(rest[1])


def read_cmdline(proc: str, pid: int) -> list[str] | None:
    """The argument list, or None for a kernel thread / a process gone."""
    try:
        raw = read_bytes(os.path.join(proc, str(pid), "cmdline"))
    except OSError:
        return None
    if not raw:
        return None
    return [a.decode("utf-8", "replace") for a in raw.rstrip(b"\0").split(b"\0")]


def read_comm(proc: str, pid: int, default: str | None = "?") -> str | None:
    """``/proc/PID/comm`` (the main thread's name, 15 bytes at most), or ``default`` when unreadable."""
    try:
        return read_bytes(os.path.join(proc, str(pid), "comm")).decode("utf-8", "replace").strip() or default
    except OSError:
        return default


def read_environ(proc: str, pid: int, keys: Sequence[str]) -> tuple[dict[str, str], str | None]:
    """``({key: value}, error)``: only ``keys`` are kept; error is one line when unreadable."""
    try:
        raw = read_bytes(os.path.join(proc, str(pid), "environ"))
    except PermissionError:
        return {}, "environ: permission denied"
    except FileNotFoundError:
        return {}, "environ: process gone"
    except OSError as exc:
        return {}, "environ: " + (exc.strerror or str(exc))
    out = {}
    wanted = set(k.encode() for k in keys if k)
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep and k in wanted:
            out[k.decode()] = v.decode("utf-8", "replace")
    return out, None


def to_int(s: object) -> int | None:
    try:
        return int(str(s).strip())
    except (TypeError, ValueError):
        return None


def parse_ranks(text: str) -> list[int]:
    """``"4-7,9"`` → ``[4, 5, 6, 7, 9]``. Raises ValueError."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            lo, hi = int(a), int(b)
            if lo < 0 or hi < lo:
                raise ValueError(f"bad rank range {part!r}")
            out.update(range(lo, hi + 1))
        else:
            r = int(part)
            if r < 0:
                raise ValueError(f"bad rank {part!r}")
            out.add(r)
    if not out:
        raise ValueError(f"no rank in {text!r}")
    return sorted(out)


def scan(
    args: argparse.Namespace, match_re: re.Pattern[str], rank_re: re.Pattern[str] | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int, list[int]]:
    """Find the rank processes. Returns ``(processes, launchers, scanned, unmatched ranks)`` (dicts without
    dumps).

    Raises:
        MatchTimeout: the searches of ``match_re`` and ``rank_re`` ran past ``MATCH_BUDGET_S``.
    """
    proc = "/proc"
    table, scanned = _process_table(proc)
    excluded = set()
    p = os.getpid()
    while p in table and p not in excluded and p > 1:  # self and ancestors (ssh session, shell)
        excluded.add(p)
        p = table[p][1]
    children: dict[int, list[int]] = {}
    for pid, (_, ppid) in table.items():
        children.setdefault(ppid, []).append(pid)
    matched, cmdlines = _match(args, proc, table, excluded, match_re, rank_re)
    mains = _mains(table, matched)

    launchers: list[dict[str, Any]] = []
    kept_mains: list[int] = []
    ranked_mains = set(pid for pid in mains if matched[pid]["rank"] is not None)
    for pid in mains:
        if matched[pid]["rank"] is None and _has_ranked_descendant(pid, children, ranked_mains):
            launchers.append({"pid": pid, "cmdline": cmdlines[pid][:CMDLINE_MAX]})
        else:
            kept_mains.append(pid)

    wanted = set(args.ranks) if args.ranks is not None else None
    if wanted is not None:
        kept_mains = [p for p in kept_mains if matched[p]["rank"] is None or matched[p]["rank"] in wanted]

    out: list[dict[str, Any]] = []
    for pid in kept_mains:
        info = matched[pid]
        out.append(_entry(pid, table, cmdlines[pid], info, "main", None, read_comm(proc, pid, None)))
        for child in _descendants(pid, children):
            if child in excluded:
                continue
            if child in matched:
                cinfo, line = matched[child], cmdlines[child]
            else:
                found_child = _child_info(args, proc, table, child, info)
                if found_child is None:
                    continue
                cinfo, line = found_child
            out.append(_entry(child, table, line, cinfo, "child", pid, read_comm(proc, child, None)))
    found = set(e["rank"] for e in out if e["role"] == "main" and e["rank"] is not None)
    unmatched = sorted(wanted - found) if wanted is not None else []
    out.sort(key=lambda e: (e["rank"] if e["rank"] is not None else 1 << 62, e["role"] != "main", e["pid"]))
    return out, launchers, scanned, unmatched


def _process_table(proc: str) -> tuple[dict[int, tuple[str, int]], int]:
    """``({pid: (state, ppid)}, processes listed)`` of ``proc`` (a process gone meanwhile is left out)."""
    table: dict[int, tuple[str, int]] = {}
    scanned = 0
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        scanned += 1
        pid = int(name)
        try:
            table[pid] = read_stat(proc, pid)
        except (OSError, ValueError, IndexError):
            continue
    return table, scanned


def _match(
    args: argparse.Namespace,
    proc: str,
    table: dict[int, tuple[str, int]],
    excluded: set[int],
    match_re: re.Pattern[str],
    rank_re: re.Pattern[str] | None,
) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
    """The processes whose command line matches ``--match`` (py-spy and sibling probes left out):
    ``({pid: {rank, local_rank, rank_source, environ_error}}, {pid: command line})``. The rank comes
    from ``--rank-env`` in the environment, else ``--rank-cmdline`` on the command line.

    Raises:
        MatchTimeout: the searches ran past ``MATCH_BUDGET_S``.
    """
    budget = MatchBudget(MATCH_BUDGET_S)
    keys = [args.rank_env, args.local_rank_env]
    matched: dict[int, dict[str, Any]] = {}
    cmdlines: dict[int, str] = {}
    for pid in table:
        if pid in excluded:
            continue
        argv = read_cmdline(proc, pid)
        if argv is None:
            continue
        line = " ".join(argv)
        if not budget.search(match_re, line, "--match", pid):
            continue
        if os.path.basename(argv[0]) == "py-spy":
            continue
        if is_sibling_probe(argv, args.match):
            continue
        cmdlines[pid] = line
        env, env_err = read_environ(proc, pid, keys)
        rank, source = to_int(env.get(args.rank_env)), None
        if rank is not None:
            source = "env"
        elif rank_re is not None:
            m = budget.search(rank_re, line, "--rank-cmdline", pid)
            if m:
                rank = to_int(m.group(1) if m.groups() else m.group(0))
                source = "cmdline" if rank is not None else None
        matched[pid] = {
            "rank": rank,
            "local_rank": to_int(env.get(args.local_rank_env)),
            "rank_source": source,
            "environ_error": env_err,
        }
    return matched, cmdlines


def _mains(table: dict[int, tuple[str, int]], matched: dict[int, dict[str, Any]]) -> list[int]:
    """The matched processes that are a rank's main process: not a child whose nearest matching
    ancestor carries the same rank (a data-loader worker, a worker's worker)."""

    def nearest_matched_ancestor(pid: int) -> int | None:
        seen = set()
        p = table[pid][1]
        while p in table and p not in seen and p > 1:
            if p in matched:
                return p
            seen.add(p)
            p = table[p][1]
        return None

    main_of: dict[int, int] = {}
    for pid, info in matched.items():
        anc = nearest_matched_ancestor(pid)
        if anc is not None and info["rank"] is not None and matched[anc]["rank"] == info["rank"]:
            main_of[pid] = anc
    for pid in list(main_of):  # resolve chains (a worker's worker) to the top main
        top = main_of[pid]
        while top in main_of:
            top = main_of[top]
        main_of[pid] = top
    return [pid for pid in matched if pid not in main_of]


def _child_info(
    args: argparse.Namespace,
    proc: str,
    table: dict[int, tuple[str, int]],
    child: int,
    main: dict[str, Any],
) -> tuple[dict[str, Any], str] | None:
    """``(info, command line)`` of an unmatched descendant of a main process (its rank from its own
    environment, else the main's); None for a process gone or a py-spy. A dead, unreaped child
    (zombie) is kept as evidence: ``[comm] <defunct>``."""
    argv = read_cmdline(proc, child)
    if argv is None:
        if table.get(child, ("",))[0] != "Z":
            return None
        argv = [f"[{read_comm(proc, child)}] <defunct>"]
    if os.path.basename(argv[0]) == "py-spy":
        return None
    env, env_err = read_environ(proc, child, [args.rank_env, args.local_rank_env])
    crank = to_int(env.get(args.rank_env))
    info = {
        "rank": crank if crank is not None else main["rank"],
        "local_rank": to_int(env.get(args.local_rank_env)),
        "rank_source": "env" if crank is not None else main["rank_source"],
        "environ_error": env_err,
    }
    return info, " ".join(argv)


def is_sibling_probe(argv: list[str], match: str) -> bool:
    """Whether ``argv`` is another stacks probe looking for the same job (same ``--match``)."""
    if "--match=" + match in argv:
        return True
    return any(argv[i] == "--match" and argv[i + 1] == match for i in range(len(argv) - 1))


def _has_ranked_descendant(pid: int, children: dict[int, list[int]], ranked: set[int]) -> bool:
    return any(d in ranked for d in _descendants(pid, children))


def _descendants(pid: int, children: dict[int, list[int]]) -> list[int]:
    out, todo, seen = [], list(children.get(pid, ())), set()
    while todo:
        c = todo.pop()
        if c in seen:
            continue
        seen.add(c)
        out.append(c)
        todo.extend(children.get(c, ()))
    return sorted(out)


def _entry(
    pid: int,
    table: dict[int, tuple[str, int]],
    line: str,
    info: dict[str, Any],
    role: str,
    parent: int | None,
    comm: str | None,
) -> dict[str, Any]:
    state, ppid = table.get(pid, (None, None))
    return {
        "pid": pid,
        "ppid": ppid,
        "rank": info["rank"],
        "local_rank": info["local_rank"],
        "role": role,
        "parent_pid": parent,
        "cmdline": line[:CMDLINE_MAX],
        "state": state,
        "comm": comm,
        "rank_source": info["rank_source"],
        "environ_error": info["environ_error"],
        "dump": None,
        "error": None,
        "elapsed_s": None,
        "attempts": 0,
        "complete": None,
    }


# --------------------------------------------------------------------------- py-spy
def find_pyspy(explicit: str | None) -> str | None:
    """Path of py-spy or None: ``explicit``, PATH, beside ``sys.executable`` (as given, then resolved)."""
    if explicit:
        return explicit if os.path.isfile(explicit) and os.access(explicit, os.X_OK) else None
    found = shutil.which("py-spy")
    if found:
        return found
    for exe in (sys.executable, os.path.realpath(sys.executable or "")):
        if exe:
            cand = os.path.join(os.path.dirname(exe), "py-spy")
            if os.path.isfile(cand) and os.access(cand, os.X_OK):
                return cand
    return None


def pyspy_env() -> dict[str, str]:
    env = dict(os.environ)
    env["RUST_BACKTRACE"] = "0"
    return env


def pyspy_version(path: str, timeout: float) -> str | None:
    try:
        out = subprocess.run(
            [path, "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            env=pyspy_env(),
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = out.stdout.decode("utf-8", "replace").strip()
    return text.split()[-1] if text else None


def one_line(text: str) -> str:
    """py-spy's error as one line: the message without ``Error:``, plus its first ``Caused by`` item."""
    lines = [ln.strip() for ln in text.splitlines()]
    first, cause = "", ""
    for i, line in enumerate(lines):
        if not line or line.lower().startswith(("stack backtrace", "note: run with")):
            if line.lower().startswith("stack backtrace"):
                break
            continue
        if not first:
            first = line[len("Error:") :].strip() if line.startswith("Error:") else line
        elif line.startswith("Caused by"):
            rest = [x for x in lines[i + 1 :] if x]
            if rest:
                cause = rest[0].split(": ", 1)[-1] if rest[0][:1].isdigit() else rest[0]
            break
    out = f"{first} ({cause})" if first and cause and cause != first else first
    return out[:ERROR_MAX]


THREAD_KEYS = ("thread_id", "thread_name", "os_thread_id", "active", "owns_gil")
FRAME_KEYS = ("name", "filename", "module", "short_filename", "line")


def compact(threads: list[Any]) -> list[dict[str, Any]]:
    """py-spy's thread list keeping only the keys above (``locals`` and py-spy internals dropped)."""
    out = []
    for t in threads:
        if not isinstance(t, dict):
            continue
        ct = dict((k, t.get(k)) for k in THREAD_KEYS)
        ct["frames"] = [
            dict((k, f.get(k)) for k in FRAME_KEYS) for f in (t.get("frames") or ()) if isinstance(f, dict)
        ]
        out.append(ct)
    return out


def main_thread_complete(threads: list[dict[str, Any]]) -> bool:
    """Whether the ``MainThread`` of a py-spy thread list reaches a ``<module>`` frame.

    Every main thread of a Python program (a script, ``python -m``, ``-c``, a forked or spawned
    multiprocessing child) has a ``<module>`` frame at or near its outer end. A nonblocking read
    that catches a call being entered can stop at a frame whose link to its caller is not set yet,
    and then shows only the innermost frames. A list with no thread named ``MainThread`` counts as
    complete (nothing to check).
    """
    for t in threads:
        if t.get("thread_name") == "MainThread":
            return any(f.get("name") == "<module>" for f in t.get("frames") or ())
    return True


def dump_one(
    pyspy: str,
    entry: dict[str, Any],
    nonblocking: bool,
    native: bool,
    timeout: float,
    retries: int = 4,
) -> None:
    """Run py-spy on one process; fill ``dump``/``error``/``elapsed_s``/``attempts``/``complete``.

    ``--nonblocking`` reads a running interpreter's memory without pausing it, and sometimes catches
    it mid-update: py-spy fails ("Failed to get stack traces": about 2 % of dumps of a busy
    data-loader worker, measured), or returns a main thread cut short (only its innermost frames, no
    ``<module>``: see :func:`main_thread_complete`). Either is retried up to ``retries`` times within
    ``timeout``, pausing 0.05 s, then twice as long each time (at most 0.5 s), so a transient race is
    never reported as evidence. A dump still incomplete after the retries (an embedded interpreter
    has no ``<module>``) is kept, with ``complete: false``.
    """
    pid = entry["pid"]
    entry["attempts"] = 0
    entry["complete"] = None
    if entry["state"] == "Z":
        entry["error"] = "zombie process (exited, not reaped by its parent)"
        entry["elapsed_s"] = 0.0
        return
    argv = [pyspy, "dump", "--pid", str(pid), "--json"]
    if native:
        argv.append("--native")
    elif nonblocking:
        argv.append("--nonblocking")
    t0 = time.monotonic()
    deadline = t0 + timeout
    while True:
        entry["attempts"] += 1
        left = deadline - time.monotonic()
        try:
            res = subprocess.run(
                argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=max(0.1, left), env=pyspy_env()
            )
        except subprocess.TimeoutExpired:
            entry["elapsed_s"] = round(time.monotonic() - t0, 6)
            entry["state"] = current_state(pid) or entry["state"]
            if entry["dump"] is None:  # else keep the cut-short stack an earlier attempt read
                entry["error"] = f"py-spy timed out after {timeout:.1f} s"
            return
        except OSError as exc:
            entry["elapsed_s"] = round(time.monotonic() - t0, 6)
            if entry["dump"] is None:
                entry["error"] = f"cannot run py-spy: {exc.strerror or exc}"
            return
        entry["elapsed_s"] = round(time.monotonic() - t0, 6)
        if res.returncode == 0:
            try:
                threads = json.loads(res.stdout.decode("utf-8", "replace"))
            except ValueError:
                threads = None
            if isinstance(threads, list):
                entry["dump"] = compact(threads)
                entry["error"] = None
                entry["complete"] = main_thread_complete(entry["dump"])
                if entry["complete"] or not nonblocking or native or not _may_retry(entry, retries, deadline):
                    return
                time.sleep(_pause(entry))
                continue
            why = "py-spy printed no JSON thread list"
        else:
            why = one_line(res.stderr.decode("utf-8", "replace")) or f"py-spy exited {res.returncode}"
        now = current_state(pid)
        if now:
            entry["state"] = now
        if entry["dump"] is not None:  # an earlier attempt read a cut-short stack: better than nothing
            return
        if now is None or now == "Z":
            entry["error"] = f"process gone ({why})"
            return
        entry["error"] = why
        if not _may_retry(entry, retries, deadline) or "ermission" in why:
            return
        time.sleep(_pause(entry))


def _pause(entry: dict[str, Any]) -> float:
    """Seconds to wait before the next attempt: 0.05, 0.1, 0.2, 0.4, then 0.5."""
    return min(0.5, 0.05 * 2 ** (entry["attempts"] - 1))


def _may_retry(entry: dict[str, Any], retries: int, deadline: float) -> bool:
    return entry["attempts"] <= retries and deadline - time.monotonic() >= _pause(entry) + 0.2


def current_state(pid: int) -> str | None:
    try:
        return read_stat("/proc", pid)[0]
    except (OSError, ValueError, IndexError):
        return None


def dump_all(pyspy: str, entries: list[dict[str, Any]], args: argparse.Namespace, deadline: float) -> None:
    """Dump ``entries`` with up to ``args.parallel`` py-spy processes at once, all before ``deadline``."""
    lock = threading.Lock()
    todo = list(entries)

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                entry = todo.pop(0)
            left = deadline - time.monotonic()
            if left <= 0.05:
                entry["error"] = "not dumped: the probe's --timeout ran out"
                continue
            dump_one(
                pyspy, entry, args.nonblocking, args.native, min(args.per_process_timeout, left), args.retries
            )

    threads = [
        threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(args.parallel, len(todo))))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + 1.0)


# --------------------------------------------------------------------------- main
def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--match", required=True, help="regex searched in each process command line")
    p.add_argument("--rank-env", default="RANK", help="environment variable holding the global rank")
    p.add_argument("--local-rank-env", default="LOCAL_RANK", help="variable holding the local rank")
    p.add_argument("--rank-cmdline", default=None, help="regex whose first group is the rank")
    p.add_argument("--ranks", default=None, help="only these global ranks, e.g. 4-7,9")
    p.add_argument("--py-spy", dest="py_spy", default=None, help="py-spy binary")
    p.add_argument("--native", action="store_true", help="py-spy --native (implies blocking)")
    p.add_argument("--nonblocking", dest="nonblocking", action="store_true", default=True)
    p.add_argument("--blocking", dest="nonblocking", action="store_false", help="pause each process")
    p.add_argument("--per-process-timeout", type=float, default=10.0, help="per py-spy call, seconds")
    p.add_argument("--parallel", type=int, default=16, help="py-spy processes at once")
    p.add_argument(
        "--retries", type=int, default=4, help="extra py-spy calls after a failure on a live process"
    )


def check_args(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    if args.ranks is not None:
        try:
            args.ranks = parse_ranks(args.ranks)
        except ValueError as exc:
            p.error(f"--ranks: {exc}")
    if args.timeout <= 0 or args.per_process_timeout <= 0 or args.parallel < 1 or args.retries < 0:
        p.error("--timeout, --per-process-timeout and --parallel must be positive, --retries >= 0")


def finalize(data: dict[str, Any]) -> None:
    """Anything still undumped when the document goes out ran out of time."""
    for e in data.get("processes") or ():
        if e["dump"] is None and e["error"] is None:
            e["error"] = "not dumped: the probe's --timeout ran out"


def collect(args: argparse.Namespace, doc: Document) -> None:
    """Scan, then dump (see the module docstring)."""
    deadline = time.monotonic() + args.timeout
    doc.set("match", args.match)
    doc.set("requested_ranks", args.ranks)
    doc.set(
        "options",
        {
            "nonblocking": bool(args.nonblocking and not args.native),
            "native": bool(args.native),
            "timeout_s": args.timeout,
            "per_process_timeout_s": args.per_process_timeout,
            "parallel": args.parallel,
            "retries": args.retries,
        },
    )
    for key, value in (("processes", []), ("launchers", []), ("unmatched_ranks", []), ("scanned", 0)):
        doc.set(key, value)
    doc.set("py_spy", None)
    doc.set("error", None)

    try:
        match_re = re.compile(args.match)
        rank_re = re.compile(args.rank_cmdline) if args.rank_cmdline else None
    except re.error as exc:
        doc.set("error", f"bad regular expression: {exc}")
        doc.error(f"bad regular expression: {exc}")
        return

    pyspy = find_pyspy(args.py_spy)
    try:
        processes, launchers, scanned, unmatched = scan(args, match_re, rank_re)
    except MatchTimeout as exc:
        doc.set("error", str(exc))
        doc.error(str(exc))
        return
    doc.set("processes", processes)
    doc.set("launchers", launchers)
    doc.set("scanned", scanned)
    doc.set("unmatched_ranks", unmatched)
    if pyspy is None:
        where = args.py_spy or f"PATH and beside {sys.executable}"
        msg = f"py-spy not found (looked in {where}): install py-spy (pip install py-spy)"
        doc.set("error", msg)
        doc.error(msg)
        for e in processes:
            e["error"] = "not dumped: py-spy not found"
    else:
        doc.set("py_spy", {"path": pyspy, "version": pyspy_version(pyspy, min(5.0, args.timeout))})
        dump_all(pyspy, processes, args, deadline)


def main(argv: Sequence[str] | None = None) -> int:
    # The dumps keep their own deadline (--timeout); the watchdog is for a py-spy that hangs past it.
    return probe_main(
        PROBE, add_args, collect, argv, timeout_s=30.0, check_args=check_args, grace_s=2.0, finalize=finalize
    )


if __name__ == "__main__":
    sys.exit(main())
