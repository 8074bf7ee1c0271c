#!/usr/bin/env python3
"""robustctl node-side probe ``launch``: start a training job's processes on this host, detached.

Standalone with the shared prelude ``_prelude.py`` (Python >= 3.8, stdlib only); never imports
robustctl. Prints exactly one JSON document (see ``diagnostics/README.md``) and returns at once: it
never waits for what it started.

The control side streams the list of processes to start
(``run_streamed("launch", <this source>, [{argv, env, cwd, log}, ...])``, every value already filled
in from the inventory's ``launch:`` templates); by hand, ``--spec FILE`` names a JSON file holding the
same list. Each process is started with ``subprocess.Popen``: no shell, ``argv`` as given, this
environment plus ``env``, in ``cwd`` (None: the current directory), in a new session
(``setsid``: the SSH session's end, the probe's lifeline and a hang-up reach it not), standard input
``/dev/null``, standard output and error appended to ``log`` (its directory created, mode 0755),
after one line starting with :data:`LAUNCH_MARKER` (a log is appended to across launches: the
watch's log scan reads only what follows the newest marker, so a former launch's traceback is not
taken for the new processes'). A leading ``~`` in ``log`` and ``cwd`` is this user's home.

``data``::

    {started: [{index: int, pid: int|null, log: str, error: str|null}], error: str|null}

``error`` per entry: why that process could not start (no such program, no such ``cwd``, a log
file that cannot be opened); the others are still started.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any, Sequence

from _prelude import Document, describe, probe_main

PROBE = "launch"
LAUNCH_MARKER = "[robustctl] launch "
"""First characters of the line written to a log before each process starts (then the UTC time);
``robustctl.watch.logscan.LAUNCH_MARKER`` is the same text."""
_SPEC: list[dict[str, Any]] = []


def start_one(index: int, item: dict[str, Any]) -> dict[str, Any]:
    """Start one process of ``item`` (see the module docstring); never raises."""
    log = os.path.expanduser(str(item.get("log") or "/dev/null"))
    entry: dict[str, Any] = {"index": index, "pid": None, "log": log, "error": None}
    try:
        argv = [str(a) for a in item["argv"]]
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (item.get("env") or {}).items()})
        cwd = os.path.expanduser(str(item["cwd"])) if item.get("cwd") else None
        if log != "/dev/null":
            os.makedirs(os.path.dirname(log) or ".", mode=0o755, exist_ok=True)
        with open(log, "ab") as out:
            if log != "/dev/null":
                stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                out.write(f"{LAUNCH_MARKER}{stamp}: output of a new process follows\n".encode())
                out.flush()
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        entry["pid"] = proc.pid
    except (OSError, KeyError, TypeError, ValueError) as exc:
        entry["error"] = describe(exc)[:300]
    return entry


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--spec", default=None, help="JSON file of [{argv, env, cwd, log}] (run by hand)")


def collect(args: argparse.Namespace, doc: Document) -> None:
    doc.set("started", [])
    doc.set("error", None)
    spec = _SPEC
    if args.spec:
        try:
            with open(args.spec, encoding="utf-8") as f:
                spec = json.load(f)
        except (OSError, ValueError) as exc:
            doc.set("error", f"--spec: {describe(exc)}")
            doc.error(f"--spec: {describe(exc)}")
            return
    if not isinstance(spec, list):
        doc.set("error", "the process list is not a list")
        doc.error("the process list is not a list")
        return
    doc.set("started", [start_one(i, item) for i, item in enumerate(spec)])


def main(argv: Sequence[str] | None = None, spec: list[dict[str, Any]] | None = None) -> int:
    global _SPEC
    _SPEC = list(spec or [])
    return probe_main(PROBE, add_args, collect, argv, timeout_s=30.0)


if __name__ == "__main__":
    sys.exit(main())
