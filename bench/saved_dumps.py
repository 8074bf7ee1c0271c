"""``robustctl analyze`` of saved py-spy dumps, end to end: 10K and 100K ranks as files, a directory, a tar.gz.

The dumps are the ranks of :func:`bench.stacks.build` (one rank of the last PP stage stuck in compute,
its PP stage-mates in p2p recv, one rank waiting for data, two unreadable, the rest in the DP
all-reduce) written as a user saves them: ``rank{N}.txt`` with py-spy's text output (a ``Process``
header, ``Python v3.10`` line, three threads of ~40, 4 and 3 frames), every tenth rank as
``rank{N}.json`` (``py-spy dump --json``), the unreadable ranks as py-spy's error output.

Timed, on one core (this process, single-threaded), best of ``--repeats`` runs:

* ``cluster``: :func:`~robustctl.stacks.cluster.cluster` + :func:`~robustctl.stacks.blame.blame`
  of the parsed ranks (the baseline: the same ranks, already in memory);
* ``files``: ``robustctl analyze rank0.txt rank1.json ... --layout ... -G 8 -q`` run through the CLI's
  ``main(argv)`` (argument parsing, reading, parsing, clustering, blame, the report);
* ``dir``: ``robustctl analyze DIR ...``; ``tar.gz``: ``robustctl analyze dumps.tar.gz ...`` (GNU
  format, as ``tar czf`` writes it).

The CLI runs as a user runs it (the verdict on stderr, no ``--json``: writing the JSON document of
100,000 inputs is a separate cost). The files are read from the page cache (each form runs once
before it is timed when ``--repeats`` > 1).

Printed: CPU seconds per input form (wall time beside it), each as a ratio against the clustering
of the same ranks, and PASS/FAIL for the target: 100K ranks end to end in ≤ 10 s.

Run alone: ``python -m bench saved-dumps [--sizes 10000,100000] [--repeats 2]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import shutil
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.stacks import build
from robustctl.inventory.topology import Topology
from robustctl.stacks.model import ProcessDump

TARGET_S = 10.0
"""Target: 100K saved dumps analysed end to end in at most this many seconds on one core."""
DEFAULT_SIZES = (10_000, 100_000)
_ERROR = (
    "Permission Denied: Try running again with elevated permissions by going 'sudo env \"PATH=$PATH\" !!'\n"
)


def _short(path: str) -> str:
    return path.rsplit("site-packages/", 1)[-1].rsplit("/lib/python3.10/", 1)[-1]


def dump_text(d: ProcessDump) -> str:
    """``py-spy dump --pid P`` text output for ``d`` (py-spy 0.4 layout)."""
    if d.error is not None:
        return _ERROR
    lines = [
        f"Process {d.pid}: /opt/venv/bin/python -u /workspace/Megatron-LM/pretrain_gpt.py "
        f"--tensor-model-parallel-size 8 RANK={d.rank}",
        "Python v3.10.12 (/usr/bin/python3.10)",
        "",
    ]
    for t in d.threads:
        lines.append(f'Thread {t.thread_id} (idle): "{t.name}"')
        lines.extend(f"    {f.function} ({_short(f.file)}:{f.line})" for f in t.frames)
    return "\n".join(lines) + "\n"


def dump_json(d: ProcessDump) -> str:
    """``py-spy dump --json --pid P`` output for ``d`` (a list of thread objects)."""
    if d.error is not None:
        return _ERROR
    doc = [
        {
            "pid": d.pid,
            "thread_id": 140_000_000_000_000 + i,
            "thread_name": t.name,
            "os_thread_id": int(t.thread_id),
            "active": False,
            "owns_gil": False,
            "frames": [
                {
                    "name": f.function,
                    "filename": f.file,
                    "module": None,
                    "short_filename": _short(f.file),
                    "line": f.line,
                    "locals": None,
                    "is_entry": j == 0,
                    "is_shim_entry": False,
                }
                for j, f in enumerate(t.frames)
            ],
            "process_info": None,
        }
        for i, t in enumerate(d.threads)
    ]
    return json.dumps(doc, indent=2) + "\n"


def write_dumps(root: Path, n: int) -> tuple[Path, Path, Topology, int]:
    """Write the ``n`` ranks' dumps into ``root/dumps`` and a ``root/dumps.tar.gz`` of them.

    Returns:
        ``(directory, archive, topology, stuck_rank)``.
    """
    dumps, topo = build(n, fresh=False)
    d = root / "dumps"
    d.mkdir(parents=True)
    stuck = topo.rank_of({"tp": 0, "dp": 0, "pp": topo.layout.pp - 1})
    for x in dumps:
        if x.rank is not None and x.rank % 10 == 9:
            (d / f"rank{x.rank}.json").write_text(dump_json(x))
        else:
            (d / f"rank{x.rank}.txt").write_text(dump_text(x))
    archive = root / "dumps.tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=6, format=tarfile.GNU_FORMAT) as tf:
        for p in sorted(d.iterdir()):
            tf.add(p, arcname=f"dumps/{p.name}")
    return d, archive, topo, stuck


def _best(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    wall = cpu = float("inf")
    for _ in range(repeats):
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return wall, cpu


def _cli(argv: list[str]) -> int:
    from robustctl.cli.main import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(argv)


def _named(argv: list[str], stuck: int) -> bool:
    """The run exits CRITICAL and names the stuck rank among its suspects."""
    from robustctl.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main([*argv, "--json", "-q"])
    return code == 2 and stuck in json.loads(out.getvalue()).get("suspect_ranks", [])


def run(sizes: Sequence[int], repeats: int) -> list[dict[str, Any]]:
    """Time every input form for each size; one dict per (size, form)."""
    from robustctl.stacks.analyze import load_dumps
    from robustctl.stacks.blame import blame
    from robustctl.stacks.cluster import cluster

    rows: list[dict[str, Any]] = []
    for n in sizes:
        root = Path(tempfile.mkdtemp(prefix="bench-saved-dumps-"))
        try:
            d, archive, topo, stuck = write_dumps(root, n)
            files = sorted(str(p) for p in d.iterdir())
            lay = topo.layout
            flags = ["--layout", f"tp={lay.tp},pp={lay.pp},dp={lay.dp}", "-G", "8"]
            parsed, _inputs = load_dumps(files)
            _w, c_cluster = _best(lambda p=parsed, t=topo: blame(cluster(p), t), repeats)
            del parsed
            forms: list[tuple[str, Callable[[], object]]] = [
                ("files", lambda a=[*files, *flags]: _cli(["analyze", *a])),
                ("dir", lambda a=[str(d), *flags]: _cli(["analyze", *a])),
                ("tar.gz", lambda a=[str(archive), *flags]: _cli(["analyze", *a])),
            ]
            args = {"files": [*files, *flags], "dir": [str(d), *flags], "tar.gz": [str(archive), *flags]}
            for form, fn in forms:
                w, c = _best(fn, repeats)
                rows.append(
                    {
                        "ranks": n,
                        "form": form,
                        "cpu_s": round(c, 3),
                        "wall_s": round(w, 3),
                        "cluster_cpu_s": round(c_cluster, 3),
                        "ratio": round(c / max(c_cluster, 1e-9), 1),
                        "named": _named(["analyze", *args[form]], stuck),
                    }
                )
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print a table; 0 (PASS) or 1 (FAIL on the 100K target)."""
    ap = argparse.ArgumentParser(prog="python -m bench saved-dumps", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sizes", default=",".join(str(s) for s in DEFAULT_SIZES), help="comma-separated rank counts"
    )
    ap.add_argument("--repeats", type=int, default=2, help="runs per form; the best is kept")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON on stdout")
    args = ap.parse_args(list(argv) if argv is not None else None)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    rows = run(sizes, args.repeats)
    if args.json:
        print(json.dumps(rows, indent=2))
    out = sys.stderr if args.json else sys.stdout
    print(f"{'ranks':>7} {'input':10} {'CPU s':>7} {'(wall)':>8} {'cluster':>8} {'ratio':>6}", file=out)
    for r in rows:
        print(
            f"{r['ranks']:>7} {r['form']:10} {r['cpu_s']:>7.2f} {r['wall_s']:>8.2f} "
            f"{r['cluster_cpu_s']:>8.2f} {r['ratio']:>5.1f}x",
            file=out,
        )
    ok = all(r["named"] for r in rows)
    print(f"stuck rank named by every run: {'PASS' if ok else 'FAIL'}", file=out)
    for r in rows:
        if r["ranks"] == 100_000:
            passed = r["cpu_s"] <= TARGET_S
            ok = ok and passed
            print(
                f"100K ranks from {r['form']}: {r['cpu_s']:.2f} s CPU, target ≤ {TARGET_S:.0f} s: "
                f"{'PASS' if passed else 'FAIL'}",
                file=out,
            )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
