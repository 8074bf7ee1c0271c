#!/usr/bin/env python3
"""Run several probes in one Python process (one remote interpreter start instead of one per probe).

Standalone with the shared prelude ``_prelude.py``
(Python >= 3.8, stdlib only); never imports robustctl. The control side streams the
prelude, then ``run_streamed("bundle", <this source>, [{"name", "args", "source"}, ...])``
(``robustctl/probes.py``). Each probe is loaded as a module and its ``main`` called with the
bundle's own arguments (the host's common arguments, e.g. ``--root /host``) followed by the probe's
arguments; its stdout and stderr are captured. The bundle prints ONE JSON document::

    {"probe": "bundle", "version": 1, "results": [
        {"name": "host", "stdout": "<the probe's document>", "stderr": "<tail>", "exit_code": 0}, ...]}

A probe that raises or exits non-zero is reported in its entry; the next probe still runs. A probe
whose watchdog fires ends the process: its timed-out document is captured and the bundle prints
its document (the probes not run yet have no entry) before the process exits.

By hand: ``python3 diagnostics/bundle.py --probes host,nvml [common arguments]`` runs the probes
that sit beside this file.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback
from typing import Any, Sequence

from _prelude import EXIT_HOOKS, load_source

STDERR_TAIL = 4000


def run_bundle(common: Sequence[str], probes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Run ``probes`` in order and print the bundle document (see the module docstring); returns it."""
    real_stdout = sys.stdout
    results: list[dict[str, Any]] = []
    document: dict[str, Any] = {"probe": "bundle", "version": 1, "results": results}
    current: dict[str, Any] = {}

    def print_document() -> None:
        if current:  # a watchdog fired inside this probe: keep what it printed
            results.append(
                {
                    "name": current["name"],
                    "stdout": current["out"].getvalue(),
                    "stderr": current["err"].getvalue()[-STDERR_TAIL:],
                    "exit_code": 0,
                }
            )
            current.clear()
        real_stdout.write(json.dumps(document) + "\n")
        real_stdout.flush()

    EXIT_HOOKS.append(print_document)
    try:
        for p in probes:
            out, err = io.StringIO(), io.StringIO()
            current.update(name=p["name"], out=out, err=err)
            code = 0
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    module = load_source(p["name"], p["source"])
                    code = module.main([*common, *p["args"]])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                err.write(traceback.format_exc())
                code = 1
            current.clear()
            results.append(
                {
                    "name": p["name"],
                    "stdout": out.getvalue(),
                    "stderr": err.getvalue()[-STDERR_TAIL:],
                    "exit_code": code,
                }
            )
        print_document()
    finally:
        EXIT_HOOKS.remove(print_document)
    return document


def main(argv: Sequence[str] | None = None, probes: Sequence[dict[str, Any]] | None = None) -> int:
    """Run ``probes`` (streamed) or, by hand, those named by ``--probes`` beside this file."""
    args = list(sys.argv[1:] if argv is None else argv)
    if probes is None:
        names: list[str] = []
        rest: list[str] = []
        it = iter(args)
        for a in it:
            if a == "--probes":
                names += next(it, "").split(",")
            elif a.startswith("--probes="):
                names += a[len("--probes=") :].split(",")
            else:
                rest.append(a)
        names = [n for n in names if n]
        if not names or "-h" in rest or "--help" in rest:
            sys.stderr.write("usage: bundle.py --probes NAME[,NAME...] [common probe arguments]\n")
            return 0 if "-h" in rest or "--help" in rest else 2
        here = os.path.dirname(os.path.abspath(__file__))
        probes = []
        for n in names:
            with open(os.path.join(here, f"{n}.py"), encoding="utf-8") as f:
                probes.append({"name": n, "args": [], "source": f.read()})
        args = rest
    run_bundle(args, probes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
