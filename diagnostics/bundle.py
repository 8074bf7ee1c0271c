"""Run several probes in one Python process (one remote interpreter start instead of one per probe).

The control side streams this file followed by a call ``run_bundle([...])`` whose argument lists
``{"name", "args", "source"}`` per probe. Each probe runs as ``__main__`` with its own ``sys.argv``,
its stdout and stderr captured; the bundle prints ONE JSON document::

    {"probe": "bundle", "version": 1, "results": [
        {"name": "host", "stdout": "<the probe's document>", "stderr": "<tail>", "exit_code": 0}, ...]}

A probe that raises or exits non-zero is reported in its entry; the next probe still runs.
"""

import contextlib
import io
import json
import sys
import traceback

STDERR_TAIL = 4000


def run_bundle(probes):
    results = []
    for p in probes:
        out, err = io.StringIO(), io.StringIO()
        code = 0
        sys.argv = [p["name"] + ".py", *p["args"]]
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                exec(compile(p["source"], p["name"] + ".py", "exec"), {"__name__": "__main__"})
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            err.write(traceback.format_exc())
            code = 1
        results.append(
            {
                "name": p["name"],
                "stdout": out.getvalue(),
                "stderr": err.getvalue()[-STDERR_TAIL:],
                "exit_code": code,
            }
        )
    sys.stdout.write(json.dumps({"probe": "bundle", "version": 1, "results": results}) + "\n")
    sys.stdout.flush()
