#!/usr/bin/env python3
"""robustctl node-side probe ``jobprocs``: list a training job's processes on this host, or stop them.

Standalone with the shared prelude ``_prelude.py`` (Python >= 3.8, stdlib only); never imports
robustctl. Prints exactly one JSON document (see ``diagnostics/README.md``).

Rank processes are found exactly as the ``stacks`` probe finds them (its ``scan``: ``--match REGEX``
on the command line, the rank from ``--rank-env`` or ``--rank-cmdline``, mains, children and
launchers told apart by the process tree). The control side streams the ``stacks`` probe's source
along (``run_streamed("jobprocs", <this source>, <stacks source>)``); run by hand, ``stacks.py`` is
read from beside this file.

``--stop`` ends every process tree found: the launchers (torchrun's agent) and every descendant of
theirs, the rank mains and every descendant (data-loader workers, checkpoint writers). It sends
SIGCONT and SIGTERM to all of them, waits up to ``--grace`` seconds for them to go, sends SIGKILL to
what is left (and to any matching process that appeared meanwhile), waits up to ``--kill-wait``
seconds, then scans again. A process counts as gone when its ``/proc`` entry is gone, belongs to a
new process (another start time: the PID was reused) or is a zombie (dead, waiting for its parent).

Each scan's pattern searches are bounded as in ``stacks`` (``MATCH_CMDLINE_CHARS``, ``MATCH_BUDGET_S``):
a first scan past the budget is the probe's ``error`` (nothing is signalled); a later scan of
``--stop`` past it still lets the SIGKILL reach what the first scan found, and its line is
``stop.error`` and ``error``.

``data``::

    {processes: [{pid, ppid, rank, local_rank, role: "main"|"child", parent_pid, cmdline, state,
                  comm, rank_source, environ_error}],   # at the first scan (stacks' scan entries)
     launchers: [{pid, cmdline}],
     match: str, scanned: int,
     stop: null | {signalled: [pid], termed_gone: [pid], killed: [pid], remaining: [pid],
                   remaining_cmdlines: [str], elapsed_s: float,
                   error: str|null},   # a later scan that failed (its pattern's budget)
     error: str|null}
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time
from typing import Any, Sequence

from _prelude import Document, load_source, probe_main

PROBE = "jobprocs"
POLL_S = 0.1
_SCAN: Any = None  # the stacks probe's module (its scan), set by main


def start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/PID/stat`` (start time in clock ticks), or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
        return int(raw[raw.rindex(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int, started: int | None) -> bool:
    """Whether ``pid`` is still the process that started at ``started`` and not a zombie."""
    if start_time(pid) != started:
        return False
    return _SCAN.current_state(pid) not in (None, "Z")


def children_map() -> dict[int, list[int]]:
    """``{ppid: [pid]}`` of every process now."""
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                _, ppid = _SCAN.read_stat("/proc", int(name))
            except (OSError, ValueError, IndexError):
                continue
            out.setdefault(ppid, []).append(int(name))
    return out


def ancestors() -> set[int]:
    """This probe and its ancestors (the SSH session, the shell): never signalled."""
    out = set()
    p = os.getpid()
    while p > 1 and p not in out:
        out.add(p)
        try:
            p = _SCAN.read_stat("/proc", p)[1]
        except (OSError, ValueError, IndexError):
            break
    return out


def find(
    args: argparse.Namespace,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int, dict[int, int | None]]:
    """Scan (stacks' ``scan``); return ``(processes, launchers, scanned, {pid: start time})`` of every
    process of the job's trees (launchers and their descendants included).

    Raises:
        MatchTimeout (stacks'): the scan's pattern searches ran past their budget.
    """
    match_re = re.compile(args.match)
    rank_re = re.compile(args.rank_cmdline) if args.rank_cmdline else None
    processes, launchers, scanned, _ = _SCAN.scan(args, match_re, rank_re)
    pids = {e["pid"] for e in processes}
    kids = children_map()
    for launcher in launchers:
        pids.add(launcher["pid"])
        pids.update(_SCAN._descendants(launcher["pid"], kids))
    for pid in list(pids):
        pids.update(_SCAN._descendants(pid, kids))
    pids -= ancestors()
    return processes, launchers, scanned, {pid: start_time(pid) for pid in sorted(pids)}


def signal_all(victims: dict[int, int | None], sig: int) -> None:
    for pid, started in victims.items():
        if alive(pid, started):
            try:
                os.kill(pid, sig)
            except OSError:
                pass


def wait_gone(victims: dict[int, int | None], seconds: float) -> list[int]:
    """Wait up to ``seconds`` for every victim to go; return those still alive."""
    deadline = time.monotonic() + seconds
    while True:
        left = [pid for pid, started in victims.items() if alive(pid, started)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(POLL_S)


def stop(args: argparse.Namespace, victims: dict[int, int | None]) -> dict[str, Any]:
    """TERM, grace, KILL, verify (see the module docstring)."""
    t0 = time.monotonic()
    signalled = sorted(victims)
    signal_all(victims, signal.SIGCONT)
    signal_all(victims, signal.SIGTERM)
    left = set(wait_gone(victims, args.grace))
    termed_gone = sorted(pid for pid in victims if pid not in left)
    error = None
    try:
        late = find(args)[3]  # a worker forked or a launcher restarted a rank meanwhile
    except _SCAN.MatchTimeout as exc:  # the first scan's processes still get their SIGKILL
        late, error = {}, f"scan after SIGTERM: {exc}"
    for pid, started in late.items():
        if pid not in victims:
            victims[pid] = started
            signalled.append(pid)
    survivors = {pid: victims[pid] for pid in victims if alive(pid, victims[pid])}
    signal_all(survivors, signal.SIGKILL)
    wait_gone(survivors, args.kill_wait)
    try:
        final = find(args)[3]
    except _SCAN.MatchTimeout as exc:
        final, error = {}, error or f"scan after SIGKILL: {exc}"
    remaining = sorted({p for p, s in survivors.items() if alive(p, s)} | set(final))
    cmdlines = []
    for pid in remaining[:20]:
        argv = _SCAN.read_cmdline("/proc", pid)
        cmdlines.append(f"{pid}: " + (" ".join(argv)[:200] if argv else "?"))
    return {
        "signalled": sorted(signalled),
        "termed_gone": termed_gone,
        "killed": sorted(survivors),
        "remaining": remaining,
        "remaining_cmdlines": cmdlines,
        "elapsed_s": round(time.monotonic() - t0, 3),
        "error": error,
    }


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--match", required=True, help="regex searched in each process command line")
    p.add_argument("--rank-env", default="RANK", help="environment variable holding the global rank")
    p.add_argument("--local-rank-env", default="LOCAL_RANK", help="variable holding the local rank")
    p.add_argument("--rank-cmdline", default=None, help="regex whose first group is the rank")
    p.add_argument("--stop", action="store_true", help="TERM, wait --grace, KILL, verify")
    p.add_argument("--grace", type=float, default=30.0, help="seconds between SIGTERM and SIGKILL")
    p.add_argument("--kill-wait", type=float, default=5.0, help="seconds to wait after SIGKILL")


def check_args(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    if args.grace <= 0 or args.kill_wait <= 0:
        p.error("--grace and --kill-wait must be positive")
    if args.timeout is None or args.timeout <= 0:
        args.timeout = args.grace + args.kill_wait + 20.0
    args.ranks = None  # stacks' scan: every rank


def collect(args: argparse.Namespace, doc: Document) -> None:
    doc.set("match", args.match)
    doc.set("processes", [])
    doc.set("launchers", [])
    doc.set("scanned", 0)
    doc.set("stop", None)
    doc.set("error", None)
    try:
        re.compile(args.match)
        if args.rank_cmdline:
            re.compile(args.rank_cmdline)
    except re.error as exc:
        doc.set("error", f"bad regular expression: {exc}")
        doc.error(f"bad regular expression: {exc}")
        return
    try:
        processes, launchers, scanned, victims = find(args)
    except _SCAN.MatchTimeout as exc:  # nothing is signalled on a scan that did not finish
        doc.set("error", str(exc))
        doc.error(str(exc))
        return
    doc.set("processes", processes)
    doc.set("launchers", launchers)
    doc.set("scanned", scanned)
    if args.stop:
        result = stop(args, victims)
        doc.set("stop", result)
        if result["error"]:
            doc.set("error", result["error"])
            doc.error(result["error"])


def main(argv: Sequence[str] | None = None, stacks_source: str | None = None) -> int:
    global _SCAN
    if stacks_source is None:
        with open(
            os.path.join(os.path.dirname(os.path.abspath(__file__)), "stacks.py"), encoding="utf-8"
        ) as f:
            stacks_source = f.read()
    _SCAN = load_source("_robustctl_stacks_scan", stacks_source)
    return probe_main(PROBE, add_args, collect, argv, timeout_s=None, check_args=check_args, grace_s=2.0)


if __name__ == "__main__":
    sys.exit(main())
