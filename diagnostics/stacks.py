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
5. Before py-spy, a rank's **main** process is read through the in-job agent's debug server
   (``robustctl.agent``: torch's ``_WorkerServer`` on ``RUN_DIR/debug/rankRRRRR.sock``), unless
   ``--no-debug-server``. Its socket is found from the process itself: the inodes of its
   ``/proc/PID/fd/*`` links ``socket:[INODE]``, looked up in ``/proc/PID/net/unix`` among the
   listening sockets, named ``rankRRRRR.sock`` (the owner of a process may read these without ptrace
   rights); else from the agent's heartbeat files (``--run-dir DIR``: ``DIR/rank*.json``;
   ``--heartbeats GLOB``), their ``pid``/``rank`` and ``debug_socket``. The server is asked for
   ``dump_traceback`` (faulthandler text of every thread), ``pyspy_dump`` (py-spy text, run by the
   rank on itself) and ``fr_trace_json`` (its Flight Recorder ring), each within
   ``--debug-timeout`` seconds and the probe's deadline, each answer bounded
   (``DEBUG_MAX_TEXT_BYTES``, ``DEBUG_MAX_FR_BYTES``, all traces together ``DEBUG_FR_TOTAL_BYTES``).
   When a stack came back the process's ``source`` is ``"debug-server"``; else (no socket, a server
   error, a timeout: ``fallback_reason``) py-spy reads it as in 4 and ``source`` is ``"py-spy"``.
   The HTTP-over-unix-socket client is a copy of ``robustctl/agent/client.py``'s (a test keeps them
   equal): the probe still imports nothing of robustctl.

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
                   complete: bool|null,     # the MainThread reaches <module> (null: no dump)
                   source: "debug-server"|"py-spy"|null,  # what read it (null: nothing did)
                   fallback_reason: "no socket"|"server error"|"timed out"|null,  # main read by py-spy
                   fallback_detail: str|null,             # the debug server's failure, one line
                   debug_socket: str|null, debug_socket_from: "process"|"heartbeat"|null,
                   debug: {traceback: str|null,   # dump_traceback's faulthandler text
                           pyspy: str|null,       # pyspy_dump's py-spy text
                           fr_trace: str|null,    # fr_trace_json's JSON text
                           errors: [str]}|null} ],  # the handlers that failed
     launchers: [ {pid: int, cmdline: str} ],
     py_spy: {path: str, version: str|null} | null,
     match: str, requested_ranks: [int]|null, unmatched_ranks: [int],
     options: {nonblocking: bool, native: bool, timeout_s: float, per_process_timeout_s: float,
               parallel: int, retries: int, debug_server: bool, debug_timeout_s: float},
     scanned: int,                # /proc entries looked at
     error: str|null}             # a probe-level failure: py-spy missing, bad --match

A py-spy thread, compacted to ``{thread_id, thread_name, os_thread_id, active, owns_gil, frames: [{name,
filename, module, short_filename, line}]}`` (``locals`` and py-spy internals dropped), frames innermost
first. Processes are sorted by (rank, role, pid).
"""

from __future__ import annotations

import argparse
import glob
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

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
            pattern: the compiled pattern.
            text: the command line.
            option: ``--match`` or ``--rank-cmdline`` (for the message).
            pid: whose command line (for the message).

        Returns:
            The match, or None.

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
    """Find the rank processes.

    Args:
        args: the probe's arguments (``--match``, ``--ranks``, the rank variables).
        match_re: ``--match`` compiled.
        rank_re: ``--rank-cmdline`` compiled, or None.

    Returns:
        ``(processes, launchers, scanned, unmatched ranks)`` (dicts without dumps).

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
    """The processes whose command line matches ``--match`` (py-spy and sibling probes left out). The
    rank comes from ``--rank-env`` in the environment, else ``--rank-cmdline`` on the command line.

    Args:
        args: the probe's arguments.
        proc: the ``/proc`` to read.
        table: ``{pid: (state, ppid)}`` of the scan.
        excluded: pids never matched (the probe and its ancestors).
        match_re: ``--match`` compiled.
        rank_re: ``--rank-cmdline`` compiled, or None.

    Returns:
        ``({pid: {rank, local_rank, rank_source, environ_error}}, {pid: command line})``.

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
        "source": None,
        "fallback_reason": None,
        "fallback_detail": None,
        "debug_socket": None,
        "debug_socket_from": None,
        "debug": None,
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


def dump_all(
    pyspy: str | None, entries: list[dict[str, Any]], args: argparse.Namespace, deadline: float
) -> None:
    """Read ``entries`` with up to ``args.parallel`` workers at once, all before ``deadline``: a rank's
    main process through its debug server when it has one (:func:`debug_one`), else, and every
    child, with py-spy (:func:`dump_one`; ``pyspy`` None: py-spy is missing, nothing else is read)."""
    lock = threading.Lock()
    todo = list(entries)
    beats = read_heartbeats(heartbeat_patterns(args)) if args.debug_server else ({}, {})
    fr = FrBudget(DEBUG_FR_TOTAL_BYTES)

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                entry = todo.pop(0)
            if deadline - time.monotonic() <= 0.05:
                entry["error"] = "not dumped: the probe's --timeout ran out"
                continue
            if args.debug_server and entry["role"] == "main" and entry["state"] != "Z":
                if through_debug_server(entry, args, deadline, beats, fr):
                    continue
            left = deadline - time.monotonic()
            if pyspy is None or left <= 0.05:
                entry["error"] = "not dumped: " + (
                    "py-spy not found" if pyspy is None else "the probe's --timeout ran out"
                )
                continue
            dump_one(
                pyspy, entry, args.nonblocking, args.native, min(args.per_process_timeout, left), args.retries
            )
            entry["source"] = "py-spy"

    threads = [
        threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(args.parallel, len(todo))))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + 1.0)


def through_debug_server(
    entry: dict[str, Any],
    args: argparse.Namespace,
    deadline: float,
    beats: tuple[dict[int, str], dict[int, str]],
    fr: FrBudget,
) -> bool:
    """Read a rank's main process through its debug server; False (with ``fallback_reason``) when it
    has none or the server did not give a stack."""
    path, how = find_agent_socket("/proc", entry, beats)
    if path is None:
        entry["fallback_reason"] = "no socket"
        entry["fallback_detail"] = (
            "no debug-server socket (none listening in the process, none in a heartbeat)"
        )
        return False
    entry["debug_socket_from"] = how
    return debug_one(entry, path, args, deadline, fr)


# ---------------------------------------------------------------------- debug-server client
# BEGIN copy of robustctl/agent/client.py (MAX_RESPONSE_BYTES, MAX_ERROR_CHARS, _HANDLER,
# FetchError, _UnixConnection, _one_line, fetch): the probe streams alone and never imports
# robustctl; tests/unit/test_probe_stacks_agent.py fails when the two differ.
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
"""Most bytes of one answer (a larger one is an error): a Flight Recorder dump of 2,000 entries, the
largest ring people run (``TORCH_FR_BUFFER_SIZE=2000``), is ~1.5 MB of JSON with stack frames; a
py-spy dump of a rank with 200 threads ~200 KB."""
MAX_ERROR_CHARS = 300
"""Longest server text quoted in a :class:`FetchError`."""

_HANDLER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


class FetchError(Exception):
    """The debug server could not be asked or did not answer: no socket, refused, timed out, an
    answer other than 200, or one over the size bound. The message is one line naming the socket."""


class _UnixConnection(http.client.HTTPConnection):
    """An HTTP connection whose transport is the unix socket ``path``."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.unix_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def _one_line(data: bytes) -> str:
    return " ".join(data.decode("utf-8", "replace").split())[:MAX_ERROR_CHARS]


def fetch(
    socket_path: str,
    handler: str,
    timeout_s: float = 10.0,
    *,
    params: Mapping[str, str] | None = None,
    max_bytes: int = MAX_RESPONSE_BYTES,
) -> bytes:
    """The answer of ``handler`` from the debug server on ``socket_path``.

    Args:
        socket_path: the rank's socket (the heartbeat's ``debug_socket``).
        handler: a handler name (``dump_traceback``, ``pyspy_dump``, ``fr_trace_json``, ``ping``).
        timeout_s: the whole exchange's deadline, seconds (connect, send, every read).
        params: query parameters the handler reads (``pyspy_dump``: ``native``, ``subprocesses``).
        max_bytes: most bytes accepted.

    Returns:
        The answer's body.

    Raises:
        ValueError: ``handler`` is not a handler name, or ``timeout_s`` is not positive.
        FetchError: see :class:`FetchError`.
    """
    if not _HANDLER.fullmatch(handler):
        raise ValueError(f"not a debug-server handler name: {handler[:80]!r}")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, not {timeout_s!r}")
    deadline = time.monotonic() + timeout_s
    query = f"?{urllib.parse.urlencode(dict(params))}" if params else ""
    conn = _UnixConnection(socket_path, timeout_s)
    where = f"debug server {socket_path}"
    try:
        conn.request("POST", f"/handler/{handler}{query}", body=b"", headers={"Connection": "close"})
        resp = conn.getresponse()
        length = resp.getheader("Content-Length")
        if length is not None and length.isdigit() and int(length) > max_bytes:
            raise FetchError(f"{where}: {handler} answers {length} bytes, over the {max_bytes} bound")
        chunks: list[bytes] = []
        got = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise FetchError(f"{where}: {handler} did not answer within {timeout_s:g} s")
            if conn.sock is not None:
                conn.sock.settimeout(left)
            chunk = resp.read1(65536)
            if not chunk:
                break
            got += len(chunk)
            if got > max_bytes:
                raise FetchError(f"{where}: {handler} answers more than {max_bytes} bytes")
            chunks.append(chunk)
        body = b"".join(chunks)
        if resp.status != 200:
            raise FetchError(f"{where}: {handler} answered {resp.status} {resp.reason}: {_one_line(body)}")
        return body
    except FetchError:
        raise
    except TimeoutError:
        raise FetchError(f"{where}: {handler} did not answer within {timeout_s:g} s") from None
    except (OSError, http.client.HTTPException) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        raise FetchError(f"{where}: {handler}: {' '.join(why.split())[:MAX_ERROR_CHARS]}") from None
    finally:
        conn.close()


# END copy of robustctl/agent/client.py


# --------------------------------------------------------------------------- the agent's debug server
DEBUG_CALL_TIMEOUT_S = 3.0
"""Default seconds of one call to a rank's debug server (``--debug-timeout``). Measured on the test bed
with the rank blocked in a collective: ``dump_traceback`` 0.01 s, ``pyspy_dump`` 0.08 s,
``fr_trace_json`` 0.1 s; 30x that is left for a loaded host. A rank whose interpreter cannot run the
handler (the GIL held in native code) costs at most this per call before py-spy is tried."""
DEBUG_MAX_TEXT_BYTES = 2 * 1024 * 1024
"""Most bytes kept of a ``dump_traceback`` or ``pyspy_dump`` answer: faulthandler prints at most 100
threads of 100 frames (CPython's ``Python/traceback.c``), ~1 MB at 100 characters a frame; a py-spy
text dump of 200 threads is ~200 KB. A larger answer is refused (the rank falls back to py-spy)."""
DEBUG_MAX_FR_BYTES = 4 * 1024 * 1024
"""Most bytes of one rank's ``fr_trace_json`` answer: a ring of 2,000 entries (a large
``TORCH_FR_BUFFER_SIZE``) is ~1.5 MB of JSON with stack frames; a larger trace is not kept."""
DEBUG_FR_TOTAL_BYTES = 8 * 1024 * 1024
"""Most bytes of Flight Recorder traces one probe document carries, all ranks of the host together:
the controller refuses a command's output past 16 MiB (``robustctl.process.MAX_STDOUT_BYTES``) and the
stacks themselves need room. Traces past it are left out (``debug.errors`` says so)."""
MAX_FDS_SCANNED = 65536
"""Most entries of ``/proc/PID/fd`` looked at when finding a rank's listening socket: a training
process holds a few hundred (NCCL, gloo, data-loader pipes); its open-file limit is often 65536 or
1048576, and the scan of one process stays a few milliseconds at this bound."""
MAX_HEARTBEAT_FILES = 4096
"""Most heartbeat files read (``--run-dir``/``--heartbeats``): as ``jobs.J.progress.max_files``'s
upper bound, a host of 4096 ranks."""
MAX_HEARTBEAT_BYTES = 65536
"""Most bytes read of one heartbeat file: the agent writes a few hundred (``rank``, ``pid``, ``step``,
``debug_socket``, a step's extra fields)."""
SO_ACCEPTCON = 0x10000
"""``__SO_ACCEPTCON`` in the Flags column of ``/proc/net/unix``: the socket listens (``net/unix/af_unix.c``)."""
AGENT_SOCKET_RE = re.compile(r"(?:^|/)rank(\d+)\.sock$")
"""The agent's socket name (``robustctl.agent``: ``RUN_DIR/debug/rankRRRRR.sock``)."""
FALLBACK_REASONS = ("no socket", "server error", "timed out")
"""Why a rank's evidence came from py-spy and not its debug server (``fallback_reason``)."""


def socket_inodes(proc: str, pid: int) -> set[int]:
    """Inodes of the sockets ``pid`` holds open (``/proc/PID/fd/*`` → ``socket:[INODE]``); empty when
    unreadable (another user's process without privileges, a process gone)."""
    out: set[int] = set()
    base = os.path.join(proc, str(pid), "fd")
    try:
        names = os.listdir(base)
    except OSError:
        return out
    for name in names[:MAX_FDS_SCANNED]:
        try:
            link = os.readlink(os.path.join(base, name))
        except OSError:
            continue
        if link.startswith("socket:[") and link.endswith("]"):
            inode = to_int(link[8:-1])
            if inode is not None:
                out.add(inode)
    return out


def unix_listeners(proc: str, pid: int, inodes: set[int]) -> list[str]:
    """Paths of the listening unix sockets among ``inodes``, from ``/proc/PID/net/unix`` (the process's
    own network namespace); abstract sockets (``@name``) and unnamed ones are left out."""
    if not inodes:
        return []
    try:
        raw = read_bytes(os.path.join(proc, str(pid), "net", "unix")).decode("utf-8", "replace")
    except OSError:
        return []
    out = []
    for line in raw.splitlines()[1:]:
        fields = line.split(None, 7)  # Num RefCount Protocol Flags Type St Inode Path
        if len(fields) < 8 or fields[7].startswith("@"):
            continue
        try:
            flags, inode = int(fields[3], 16), int(fields[6])
        except ValueError:
            continue
        if flags & SO_ACCEPTCON and inode in inodes:
            out.append(fields[7].strip())
    return sorted(out)


def pick_agent_socket(paths: Sequence[str], rank: int | None) -> str | None:
    """The agent's socket among a process's listening ``paths``: ``rankRRRRR.sock`` of its own rank
    first, else the only one named like an agent socket, else None."""
    named = [p for p in paths if AGENT_SOCKET_RE.search(p)]
    if rank is not None:
        for p in named:
            m = AGENT_SOCKET_RE.search(p)
            if m is not None and int(m.group(1)) == rank:
                return p
    return named[0] if len(named) == 1 else None


def read_heartbeats(patterns: Sequence[str]) -> tuple[dict[int, str], dict[int, str]]:
    """``({pid: socket}, {rank: socket})`` from the agent's heartbeat files matching ``patterns``
    (globs), each a JSON object with ``debug_socket`` (unreadable or foreign files are skipped)."""
    by_pid: dict[int, str] = {}
    by_rank: dict[int, str] = {}
    files: list[str] = []
    for pattern in patterns:
        files.extend(sorted(glob.glob(pattern)))
    for path in files[:MAX_HEARTBEAT_FILES]:
        try:
            with open(path, "rb") as f:
                doc = json.loads(f.read(MAX_HEARTBEAT_BYTES).decode("utf-8", "replace"))
        except (OSError, ValueError):
            continue
        sock = doc.get("debug_socket") if isinstance(doc, dict) else None
        if not isinstance(sock, str) or not sock:
            continue
        pid, rank = to_int(doc.get("pid")), to_int(doc.get("rank"))
        if pid is not None:
            by_pid[pid] = sock
        if rank is not None:
            by_rank[rank] = sock
    return by_pid, by_rank


def heartbeat_patterns(args: argparse.Namespace) -> list[str]:
    """The heartbeat globs the probe was told: ``--heartbeats`` as given, ``--run-dir D`` as
    ``D/rank*.json``."""
    out = list(args.heartbeats or ())
    out.extend(os.path.join(d, "rank*.json") for d in args.run_dir or ())
    return out


def find_agent_socket(
    proc: str, entry: dict[str, Any], beats: tuple[dict[int, str], dict[int, str]]
) -> tuple[str | None, str | None]:
    """``(socket path, how found)`` of a rank main process's debug server: its own listening sockets
    (``"process"``), else the heartbeat of its pid or rank (``"heartbeat"``); ``(None, None)``.

    A path that does not exist in the probe's view but does under ``/proc/PID/root`` (the rank runs in
    another mount namespace, a container) is given in that form."""
    pid = entry["pid"]
    path = pick_agent_socket(unix_listeners(proc, pid, socket_inodes(proc, pid)), entry["rank"])
    how = "process" if path else None
    if path is None:
        path = beats[0].get(pid) or (beats[1].get(entry["rank"]) if entry["rank"] is not None else None)
        how = "heartbeat" if path else None
    if path is not None and not os.path.exists(path):
        inside = os.path.join(proc, str(pid), "root") + path
        if os.path.exists(inside):
            path = inside
    return path, how


def fallback_reason(error: str) -> str:
    """The kind of a debug-server failure (:data:`FALLBACK_REASONS`) from :class:`FetchError`'s line:
    nothing listening at the path (missing, refused) is ``no socket``."""
    low = error.lower()
    if "did not answer within" in low or "timed out" in low:
        return "timed out"
    if "no such file" in low or "connection refused" in low:
        return "no socket"
    return "server error"


def debug_params(args: argparse.Namespace) -> dict[str, str]:
    """``pyspy_dump``'s query parameters for the probe's py-spy mode."""
    if args.native:
        return {"native": "1"}
    return {"nonblocking": "1"} if args.nonblocking else {}


class FrBudget:
    """What is left of :data:`DEBUG_FR_TOTAL_BYTES` for one probe's Flight Recorder traces (threads)."""

    def __init__(self, total: int) -> None:
        self.left = total
        self.lock = threading.Lock()

    def take(self, size: int) -> bool:
        """Whether ``size`` more bytes fit (and, if so, count them)."""
        with self.lock:
            if size > self.left:
                return False
            self.left -= size
            return True


def debug_one(
    entry: dict[str, Any], path: str, args: argparse.Namespace, deadline: float, fr: FrBudget
) -> bool:
    """Ask a rank's debug server for its stacks (``dump_traceback``, ``pyspy_dump``) and its Flight
    Recorder trace (``fr_trace_json``), each call within ``--debug-timeout`` and the probe's deadline.

    Fills ``debug`` (``{traceback, pyspy, fr_trace, errors}``, texts as received) and ``source``
    ``"debug-server"`` when a stack came back, and returns True; else sets ``fallback_reason`` and
    ``fallback_detail`` (the first failure) and returns False, for py-spy to read the process.
    """
    t0 = time.monotonic()
    got: dict[str, Any] = {"traceback": None, "pyspy": None, "fr_trace": None, "errors": []}
    calls = (
        ("traceback", "dump_traceback", None, DEBUG_MAX_TEXT_BYTES),
        ("pyspy", "pyspy_dump", debug_params(args), DEBUG_MAX_TEXT_BYTES),
        ("fr_trace", "fr_trace_json", None, DEBUG_MAX_FR_BYTES),
    )
    first_error: str | None = None
    for key, handler, params, limit in calls:
        left = deadline - time.monotonic()
        if left <= 0.05:
            first_error = first_error or f"debug server {path}: {handler}: the probe's --timeout ran out"
            break
        try:
            body = fetch(path, handler, min(args.debug_timeout, left), params=params, max_bytes=limit)
        except FetchError as exc:
            first_error = first_error or str(exc)
            got["errors"].append(str(exc)[:ERROR_MAX])
            if key == "traceback" and fallback_reason(str(exc)) == "no socket":
                break  # nothing listens there: the other handlers cannot answer either
            if key == "pyspy" and got["traceback"] is None:
                break  # neither stack came back: the trace alone is no stack evidence
            continue
        if key == "fr_trace" and not fr.take(len(body)):
            got["errors"].append(
                f"fr_trace_json: {len(body)} bytes left out (the probe's traces budget is spent)"
            )
            continue
        got[key] = body.decode("utf-8", "replace")
    entry["elapsed_s"] = round(time.monotonic() - t0, 6)
    entry["debug_socket"] = path
    if got["traceback"] is None and got["pyspy"] is None:
        detail = first_error or f"debug server {path}: no stack"
        entry["fallback_reason"] = fallback_reason(detail)
        entry["fallback_detail"] = detail[:ERROR_MAX]
        return False
    entry["debug"] = got
    entry["source"] = "debug-server"
    entry["error"] = None
    return True


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
    p.add_argument(
        "--no-debug-server", dest="debug_server", action="store_false", help="py-spy only, never the agent"
    )
    p.add_argument(
        "--debug-timeout", type=float, default=DEBUG_CALL_TIMEOUT_S, help="per debug-server call, seconds"
    )
    p.add_argument("--run-dir", action="append", default=[], help="the agent's run dir (its heartbeats)")
    p.add_argument("--heartbeats", action="append", default=[], help="glob of the agent's heartbeat files")


def check_args(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    if args.ranks is not None:
        try:
            args.ranks = parse_ranks(args.ranks)
        except ValueError as exc:
            p.error(f"--ranks: {exc}")
    if args.timeout <= 0 or args.per_process_timeout <= 0 or args.parallel < 1 or args.retries < 0:
        p.error("--timeout, --per-process-timeout and --parallel must be positive, --retries >= 0")
    if not args.debug_timeout > 0:
        p.error("--debug-timeout must be positive")


def finalize(data: dict[str, Any]) -> None:
    """Anything still unread when the document goes out ran out of time (a process its debug server
    answered for has no py-spy ``dump`` but a ``source``)."""
    for e in data.get("processes") or ():
        if e["dump"] is None and e["error"] is None and e.get("source") is None:
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
            "debug_server": bool(args.debug_server),
            "debug_timeout_s": args.debug_timeout,
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
