"""Which rank, three ways: each injected hang of the test-bed job, named from the debug server, from
Flight Recorder alone and from py-spy alone, beside what ``torchfrtrace`` says of the same dumps.

For each hang kind of ``tests/jobs/minimegatron.py`` (compute, p2p_recv, dataloader, checkpoint,
skip_collective, wrong_size) the harness runs the job on the loopback test bed (:data:`LAYOUT`,
:data:`RANKS_PER_HOST` ranks on each of 2 sshd hosts, the in-job agent and ``--flight-recorder``
on), injects the hang on one rank (the truth), waits until no rank finishes a step for
:data:`STALL_S`, then asks:

* **debug server**: ``robustctl stacks --json`` (it reads each rank through its agent's debug server
  first, py-spy only as the fallback, and joins the Flight Recorder traces it fetched to its
  verdict); the harness also fetches every rank's ``fr_trace_json`` and ``dump_traceback`` itself
  through the rank's socket (:func:`robustctl.agent.client.fetch`) and keeps them;
* **Flight Recorder alone**: those ``fr_trace_json`` dumps written to a directory,
  ``robustctl analyze DIR --layout ... -G ... --json``;
* **py-spy alone**: ``robustctl stacks --no-debug-server --json``, py-spy over each host's sshd;
* **torchfrtrace** (installed with torch) on the same dumps as pickles, as dumped (gloo's
  ``pg_config`` is empty), and again with ``pg_config`` filled from the layout
  (:func:`job_groups`), so its own analysis can run.

Each path's ranks are its likely culprits when it names any, else its suspects (the rule of the
stacks report's ``agreement``); :func:`judge` compares them with the truth. The reversible hangs
(compute, dataloader, checkpoint) share one job, released after each; the others leave the job's
collectives out of step for good and get a job each. Prints one table (:func:`render_table`);
``--out FILE`` writes it, and every path's summary, as JSON.

``python -m bench evidence [--out FILE] [--keep] [--cases kind,...]`` (about 2 minutes on the 2-core
test machine).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

LAYOUT = {"tp": 2, "pp": 2, "dp": 2}
"""The job's layout: the smallest that has a TP, a DP and a PP group of more than one rank each, so
every hang kind has peers to block (8 ranks)."""
RANKS_PER_HOST = 4
"""Ranks per simulated host: 2 hosts, the first pipeline stage on node01, the second on node02."""
FR_ENTRIES = 200
"""Flight Recorder entries kept per process group (``--flight-recorder``): more than the collectives
a group sees between two cases of the shared job (about 6 a step), so the ring holds the hang's."""
CKPT_EVERY = 2
"""Checkpoint interval of the jobs, steps: the checkpoint hang blocks rank 0 at most 2 x this many
steps after it is injected (the stuck save, then the next one that waits for it)."""
FAULT_STEP = 3
"""Step at which the irreversible hangs start (fixed at launch through ``ROBUSTCTL_FAULT``): past the
first step the harness waits for, so every rank has a debug server and a heartbeat by then."""
STALL_S = 2.0
"""No rank finished a step for this long: the job is hung (steps take ~0.3 s on the test bed, so 2 s
is six steps' worth: never a slow step)."""
STALL_TIMEOUT_S = 90.0
"""Longest wait for a hang to stop the job (the checkpoint hang takes up to 2 x :data:`CKPT_EVERY`
steps; a busy 2-core machine slows each)."""
START_TIMEOUT_S = 180.0
"""Longest wait for 8 ranks to start and finish a step (30-60 s on a busy 2-core machine)."""
FETCH_TIMEOUT_S = 10.0
"""Budget of one debug-server call (the handlers answer in 0.01-0.1 s; a rank's server thread does
not need the rank's Python to be free)."""
TOOL_TIMEOUT_S = 180.0
"""Budget of one CLI run (``robustctl stacks``/``analyze``, ``torchfrtrace``): a hung tool fails the
harness instead of hanging it."""
ENV = {"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "HOME": "/nonexistent", "COLUMNS": "200"}
"""Environment of the CLI runs: no user configuration, no colour (as the stacks CLI tests run it)."""

PATHS = ("debug_server", "flight_recorder", "py_spy", "torchfrtrace", "torchfrtrace_layout")
"""The table's columns after the hang kind, in order."""
PATH_TITLES = {
    "debug_server": "debug server (`stacks`)",
    "flight_recorder": "Flight Recorder alone (`analyze`)",
    "py_spy": "py-spy alone",
    "torchfrtrace": "torchfrtrace",
    "torchfrtrace_layout": "torchfrtrace, pg_config from the layout",
}


@dataclass(frozen=True)
class Case:
    """One injected hang.

    Attributes:
        kind: the hang kind (minimegatron's ``hang:KIND``).
        spec: the fault spec.
        truth: the rank(s) the hang was injected on.
        shared: released by clearing the fault (runs in the shared job); else a job of its own with
            the spec fixed at launch.
    """

    kind: str
    spec: str
    truth: tuple[int, ...]
    shared: bool


CASES = (
    Case("compute", "hang:compute:rank=5", (5,), True),
    Case("p2p_recv", f"hang:p2p_recv:rank=6:step={FAULT_STEP}", (6,), False),
    Case("dataloader", "hang:dataloader:rank=2", (2,), True),
    Case("checkpoint", "hang:checkpoint:rank=0", (0,), True),
    Case("skip_collective", f"hang:skip_collective:rank=1:step={FAULT_STEP}", (1,), False),
    Case("wrong_size", f"hang:wrong_size:rank=7:step={FAULT_STEP}", (7,), False),
)
"""The hangs, in the table's order; ranks spread over both hosts, both stages and both replicas."""


@dataclass(frozen=True)
class Answer:
    """What one path named for one case.

    Attributes:
        named: the ranks it names (likely culprits, else suspects; empty when none).
        verdict: :func:`judge`'s word against the truth.
        note: one line of what it said (its summary, or why it named nothing).
        exit_code: the tool's exit status (None where no tool ran as a process).
    """

    named: tuple[int, ...]
    verdict: str
    note: str
    exit_code: int | None = None


@dataclass
class Row:
    """One case's line of the table: the truth and each path's answer (keyed by :data:`PATHS`)."""

    kind: str
    truth: tuple[int, ...]
    answers: dict[str, Answer] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------------
# Judging (pure: unit-tested on recorded inputs)
# --------------------------------------------------------------------------------------------------


def judge(named: Sequence[int], truth: Sequence[int]) -> str:
    """Compare a path's ranks with the truth.

    Args:
        named: the ranks the path named.
        truth: the ranks the hang was injected on.

    Returns:
        ``"right"`` (the same ranks), ``"also others"`` (every true rank and more), ``"partly"``
        (some true ranks, not all), ``"wrong"`` (ranks, none true) or ``"none"`` (no rank).
    """
    got, want = set(named), set(truth)
    if not got:
        return "none"
    if got == want:
        return "right"
    if want <= got:
        return "also others"
    return "partly" if got & want else "wrong"


def _ranks(values: Any) -> tuple[int, ...]:
    return tuple(sorted({int(v) for v in values if isinstance(v, int) and not isinstance(v, bool)}))


def stacks_named(doc: Mapping[str, Any]) -> tuple[int, ...]:
    """The ranks a ``robustctl stacks --json`` document (or a stacks report's JSON) names.

    Args:
        doc: the document.

    Returns:
        Its ``likely_culprits`` when it has any, else its ``suspect_ranks`` (sorted, distinct).
    """
    return _ranks(doc.get("likely_culprits") or ()) or _ranks(doc.get("suspect_ranks") or ())


def fr_named(doc: Mapping[str, Any]) -> tuple[tuple[int, ...], str]:
    """The ranks ``robustctl analyze --json`` of a directory of Flight Recorder dumps names.

    Args:
        doc: the analyze document (``artefacts``: one per input or group).

    Returns:
        ``(ranks, summary)``: the ranks of the flight-recorder artefact's suspects marked
        ``likely_culprit`` when there are any, else of all its suspects; and its summary line (or
        why there is none).
    """
    for art in doc.get("artefacts") or ():
        if art.get("kind") != "flight-recorder":
            continue
        suspects = (art.get("details") or {}).get("suspects") or []
        likely = [s.get("rank") for s in suspects if s.get("likely_culprit")]
        ranks = _ranks(likely) or _ranks(s.get("rank") for s in suspects)
        return ranks, str(art.get("summary") or "")
    return (), "no Flight Recorder artefact in the document"


_MISSING = re.compile(r"missing ranks: \{([\d,\s]*)\}")
_CULPRIT = re.compile(r"Culprit rank (\d+)")


def torchfrtrace_answer(exit_code: int, output: str) -> tuple[tuple[int, ...], str]:
    """What ``torchfrtrace`` said of a directory of dumps.

    It has no verdict line: it prints a block per collective it finds wrong, with ``missing ranks:
    {…}`` (ranks that did not join) or ``Culprit rank N; Error type: …`` (a mismatch), for every
    blocked group of a cascade; the ranks it names are the union of those.

    Args:
        exit_code: its exit status.
        output: its stdout and stderr together.

    Returns:
        ``(ranks, note)``: the ranks its blocks name; the note is the last line of a traceback when it
        crashed, else how many blocks it printed and the exit status.
    """
    named: set[int] = set()
    blocks = 0
    for m in _MISSING.finditer(output):
        blocks += 1
        named.update(int(x) for x in m.group(1).replace(",", " ").split())
    for m in _CULPRIT.finditer(output):
        blocks += 1
        named.add(int(m.group(1)))
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    if "Traceback (most recent call last):" in output:
        return tuple(sorted(named)), f"crashed: {lines[-1][:160] if lines else '?'}"
    if not blocks:
        last = next((ln for ln in reversed(lines) if "tabulate" not in ln), "no output")
        return (), f"no collective reported ({last[:120]})"
    return tuple(sorted(named)), f"{blocks} problem block(s), exit {exit_code}"


def job_groups(tp: int, pp: int, dp: int) -> list[list[int]]:
    """The job's process groups in the order minimegatron creates them: the world, then every TP,
    DP and PP group (Megatron's rank order, TP fastest), so the group named ``"i"`` in its Flight
    Recorder dumps is entry ``i``.

    Args:
        tp: tensor-parallel size.
        pp: pipeline-parallel size.
        dp: data-parallel size.

    Returns:
        Each group's ranks.
    """

    def rank(t: int, d: int, p: int) -> int:
        return t + tp * (d + dp * p)

    tp_groups = [[rank(t, d, p) for t in range(tp)] for p in range(pp) for d in range(dp)]
    dp_groups = [[rank(t, d, p) for d in range(dp)] for p in range(pp) for t in range(tp)]
    pp_groups = [[rank(t, d, p) for p in range(pp)] for d in range(dp) for t in range(tp)]
    return [list(range(tp * pp * dp)), *tp_groups, *dp_groups, *pp_groups]


def with_layout_pg_config(dump: dict[str, Any], groups: Sequence[Sequence[int]]) -> dict[str, Any]:
    """``dump`` with ``pg_config`` rebuilt from the job's groups (gloo leaves it empty).

    Args:
        dump: a Flight Recorder dump (torch's dictionary).
        groups: :func:`job_groups`.

    Returns:
        A copy whose ``pg_config`` maps each group's name to ``{"name", "desc", "ranks"}`` as
        ProcessGroupNCCL writes it (``ranks`` a JSON list in a string).
    """
    out = dict(dump)
    out["pg_config"] = {
        str(i): {
            "name": str(i),
            "desc": "default_pg" if i == 0 else f"group {i}",
            "ranks": json.dumps(list(g)),
        }
        for i, g in enumerate(groups)
    }
    return out


def _cell(answer: Answer | None) -> str:
    if answer is None:
        return "not run"
    if answer.verdict == "none":
        return f"— ({answer.note[:70]})"
    mark = {"right": "✓", "also others": "⊇", "partly": "≈", "wrong": "✗"}[answer.verdict]
    return f"{','.join(str(r) for r in answer.named)} {mark}"


def render_table(rows: Sequence[Row]) -> str:
    """The table as Markdown: one line per case, truth then each path's ranks and mark.

    Marks: ✓ the true rank(s) exactly, ⊇ the true rank(s) and others, ≈ some of them, ✗ other ranks
    only, — none named (with what the path said).

    Args:
        rows: the cases.

    Returns:
        The Markdown text (header, separator, one line per row).
    """
    head = ["hang", "truth", *(PATH_TITLES[p] for p in PATHS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row.kind, ",".join(map(str, row.truth)), *(_cell(row.answers.get(p)) for p in PATHS)]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def table_json(rows: Sequence[Row]) -> dict[str, Any]:
    """The table as one JSON document: ``{"layout", "paths", "rows": [{kind, truth, answers, extra}]}``.

    Args:
        rows: the cases.

    Returns:
        The document (JSON-ready).
    """
    return {
        "layout": {**LAYOUT, "ranks_per_host": RANKS_PER_HOST},
        "paths": list(PATHS),
        "rows": [
            {
                "kind": r.kind,
                "truth": list(r.truth),
                "answers": {k: {**asdict(a), "named": list(a.named)} for k, a in r.answers.items()},
                "extra": r.extra,
            }
            for r in rows
        ],
    }


# --------------------------------------------------------------------------------------------------
# Asking the live job
# --------------------------------------------------------------------------------------------------


def _layout_arg() -> str:
    return ",".join(f"{k}={v}" for k, v in LAYOUT.items())


def _run(argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> tuple[int, str, str]:
    proc = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, cwd=REPO, env=dict(env or ENV)
    )
    return proc.returncode, proc.stdout, proc.stderr


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def fetch_evidence(progress_dir: Path, world: int, out: Path) -> dict[str, Any]:
    """Every rank's ``fr_trace_json`` and ``dump_traceback`` through its debug server.

    Writes ``out/fr/nccl_trace_rank_R.json`` (the dump as the server gave it),
    ``out/tracebacks/rankRRRRR.txt`` and ``out/fr-pickle/rank_R`` (the same dump pickled, what
    ``torchfrtrace`` reads).

    Args:
        progress_dir: the job's run directory (heartbeats naming each rank's ``debug_socket``).
        world: ranks in the job.
        out: the case's directory.

    Returns:
        ``{"fetched": ranks with both answers, "errors": {rank: why}, "fetch_s": seconds}``.
    """
    from robustctl.agent.client import FetchError, fetch

    t0 = time.perf_counter()
    for sub in ("fr", "tracebacks", "fr-pickle"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    errors: dict[int, str] = {}
    fetched: list[int] = []
    for rank in range(world):
        try:
            beat = json.loads((progress_dir / f"rank{rank:05d}.json").read_text())
            sock = str(beat["debug_socket"])
            fr = fetch(sock, "fr_trace_json", FETCH_TIMEOUT_S)
            tb = fetch(sock, "dump_traceback", FETCH_TIMEOUT_S)
            as_pickle = pickle.dumps(json.loads(fr))
        except (OSError, ValueError, KeyError, FetchError) as exc:
            errors[rank] = f"{type(exc).__name__}: {exc}"[:200]
            continue
        (out / "fr" / f"nccl_trace_rank_{rank}.json").write_bytes(fr)
        (out / "tracebacks" / f"rank{rank:05d}.txt").write_bytes(tb)
        (out / "fr-pickle" / f"rank_{rank}").write_bytes(as_pickle)
        fetched.append(rank)
    return {"fetched": fetched, "errors": errors, "fetch_s": round(time.perf_counter() - t0, 3)}


def ask_stacks_cli(
    inventory: Path, truth: Sequence[int], *, debug_server: bool = True
) -> tuple[Answer, dict[str, Any]]:
    """``robustctl stacks --json``: the debug server first, py-spy the fallback; or py-spy alone.

    Args:
        inventory: the test bed's inventory with the job.
        truth: the true ranks.
        debug_server: False: ``--no-debug-server`` (py-spy over each host's sshd for every rank).

    Returns:
        The answer and extra facts (the evidence line, the agreement with Flight Recorder).
    """
    argv = [sys.executable, "-m", "robustctl", "stacks", "-i", str(inventory), "-j", "mini"]
    argv += [
        "--samples",
        "1",
        "--no-record",
        "--json",
        "-q",
        *([] if debug_server else ["--no-debug-server"]),
    ]
    code, out, err = _run(argv)
    doc = _json_or_none(out)
    if not isinstance(doc, dict):
        line = (err.strip().splitlines() or ["no output"])[-1]
        return Answer((), "none", f"no JSON: {line[:120]}", code), {}
    named = stacks_named(doc)
    evidence = (doc.get("evidence") or {}).get("summary")
    agreement = (doc.get("agreement") or {}).get("summary")
    extra = {"evidence": evidence, "agreement": agreement, "status": doc.get("status")}
    return Answer(named, judge(named, truth), str(doc.get("summary") or ""), code), extra


def ask_flight_recorder(case_dir: Path, truth: Sequence[int]) -> Answer:
    """``robustctl analyze`` of the fetched Flight Recorder dumps alone.

    Args:
        case_dir: the case's directory (its ``fr/``).
        truth: the true ranks.

    Returns:
        The answer.
    """
    argv = [sys.executable, "-m", "robustctl", "analyze", str(case_dir / "fr")]
    code, out, err = _run([*argv, "--layout", _layout_arg(), "-G", str(RANKS_PER_HOST), "--json", "-q"])
    doc = _json_or_none(out)
    if not isinstance(doc, dict):
        line = (err.strip().splitlines() or ["no output"])[-1]
        return Answer((), "none", f"no JSON: {line[:120]}", code)
    named, summary = fr_named(doc)
    return Answer(named, judge(named, truth), summary, code)


def ask_torchfrtrace(case_dir: Path, truth: Sequence[int], *, layout_groups: bool) -> Answer:
    """``torchfrtrace`` on the case's dumps (pickled), as dumped or with ``pg_config`` from the layout.

    Args:
        case_dir: the case's directory (its ``fr-pickle/``).
        truth: the true ranks.
        layout_groups: fill ``pg_config`` from :func:`job_groups` first (into ``fr-pickle-layout/``).

    Returns:
        The answer (exit status, the ranks its blocks name).
    """
    src = case_dir / "fr-pickle"
    if layout_groups:
        dst = case_dir / "fr-pickle-layout"
        dst.mkdir(exist_ok=True)
        groups = job_groups(LAYOUT["tp"], LAYOUT["pp"], LAYOUT["dp"])
        for f in sorted(src.iterdir()):
            dump = pickle.loads(f.read_bytes())  # written by fetch_evidence from JSON: plain data
            (dst / f.name).write_bytes(pickle.dumps(with_layout_pg_config(dump, groups)))
        src = dst
    tool = Path(sys.executable).with_name("torchfrtrace")
    argv = (
        [str(tool)] if tool.exists() else [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace"]
    )
    code, out, err = _run([*argv, str(src), "-p", "rank_"], env={**ENV, "PYTHONWARNINGS": "ignore"})
    named, note = torchfrtrace_answer(code, out + "\n" + err)
    (case_dir / f"torchfrtrace{'-layout' if layout_groups else ''}.txt").write_text(out + err)
    return Answer(named, judge(named, truth), note, code)


def ask_all(case: Case, job: Any, inventory: Path, case_dir: Path) -> Row:
    """Every path's answer on the hung job.

    Args:
        case: the hang.
        job: the running :class:`tests.integration.jobrunner.MiniJob`, hung.
        inventory: its inventory.
        case_dir: where this case's evidence goes.

    Returns:
        The case's row.
    """
    row = Row(case.kind, case.truth)
    row.extra["steps"] = {str(k): v for k, v in sorted(job.steps_done().items())}
    row.extra["fetch"] = fetch_evidence(job.progress_dir, job.world_size, case_dir)
    t0 = time.perf_counter()
    try:
        row.answers["debug_server"] = _with_evidence(
            row, "debug_server", ask_stacks_cli(inventory, case.truth)
        )
    except Exception as exc:  # a path that fails is a finding of the table, not the harness's end
        row.answers["debug_server"] = _failed(exc)
    row.extra["debug_server_s"] = round(time.perf_counter() - t0, 2)
    asks = (
        ("flight_recorder", lambda: ask_flight_recorder(case_dir, case.truth)),
        (
            "py_spy",
            lambda: _with_evidence(row, "py_spy", ask_stacks_cli(inventory, case.truth, debug_server=False)),
        ),
        ("torchfrtrace", lambda: ask_torchfrtrace(case_dir, case.truth, layout_groups=False)),
        ("torchfrtrace_layout", lambda: ask_torchfrtrace(case_dir, case.truth, layout_groups=True)),
    )
    for path, ask in asks:
        t0 = time.perf_counter()
        try:
            row.answers[path] = ask()
        except Exception as exc:
            row.answers[path] = _failed(exc)
        row.extra[f"{path}_s"] = round(time.perf_counter() - t0, 2)
    return row


def _with_evidence(row: Row, path: str, got: tuple[Answer, dict[str, Any]]) -> Answer:
    """Keep a stacks run's extra facts in ``row.extra[path]``; return its answer."""
    row.extra[path] = got[1]
    return got[0]


def _failed(exc: BaseException) -> Answer:
    """The answer of a path that raised (a tool that timed out, a collection that failed)."""
    return Answer((), "none", f"failed: {type(exc).__name__}: {' '.join(str(exc).split())[:120]}")


# --------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------


def _new_job(tb: Any, work: Path, name: str, env_faults: str | None = None) -> Any:
    from tests.integration.jobrunner import MiniJob

    return MiniJob(
        tb,
        work / name,
        **LAYOUT,
        ranks_per_host=RANKS_PER_HOST,
        ckpt_every=CKPT_EVERY,
        env_faults=env_faults,
        job_args=["--flight-recorder", str(FR_ENTRIES)],
    )


def _case_row(case: Case, job: Any, work: Path) -> Row:
    """Hang ``job`` as ``case`` says (a shared job: through its fault file), ask every path, release."""
    if case.shared:
        job.set_faults(case.spec)
    job.wait_stalled(STALL_S, timeout=STALL_TIMEOUT_S)
    inventory = job.write_inventory(work / f"inv-{case.kind}.yaml")
    row = ask_all(case, job, inventory, work / case.kind)
    if case.shared:
        job.clear_faults()
        job.wait_step(max(job.steps_done().values()) + 1, timeout=STALL_TIMEOUT_S)
    return row


def run(cases: Sequence[Case], work: Path) -> list[Row]:
    """Start the test bed and the jobs, hang each case, ask every path.

    Args:
        cases: the hangs to run.
        work: scratch directory (the test bed, the jobs, each case's evidence).

    Returns:
        One row per case, in the order of ``cases``.
    """
    sys.path.insert(0, str(REPO))
    from tests.integration.testbed import Testbed

    world = LAYOUT["tp"] * LAYOUT["pp"] * LAYOUT["dp"]
    rows: dict[str, Row] = {}
    with Testbed(work / "tb", world // RANKS_PER_HOST) as tb:
        shared = [c for c in cases if c.shared]
        if shared:
            with _new_job(tb, work, "shared") as job:
                job.start(timeout=START_TIMEOUT_S)
                for case in shared:
                    print(f"  {case.kind}: {case.spec}", flush=True)
                    rows[case.kind] = _case_row(case, job, work)
        for case in (c for c in cases if not c.shared):
            print(f"  {case.kind}: {case.spec} (a job of its own)", flush=True)
            with _new_job(tb, work, case.kind + "-job", env_faults=case.spec) as job:
                job.start(timeout=START_TIMEOUT_S)
                rows[case.kind] = _case_row(case, job, work)
    return [rows[c.kind] for c in cases]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the harness; print the table (and write it as JSON with ``--out``).

    Args:
        argv: command-line arguments (default: ``sys.argv[1:]``).

    Returns:
        0 when every case ran (whatever each path named: a miss is a finding), 2 on a bad argument.
    """
    ap = argparse.ArgumentParser(prog="python -m bench evidence", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="write the table and every answer as JSON here")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory (dumps, tracebacks)")
    ap.add_argument("--cases", default=None, help="comma-separated hang kinds (default: all six)")
    args = ap.parse_args(list(argv) if argv is not None else None)
    known = {c.kind: c for c in CASES}
    cases = list(CASES)
    if args.cases:
        bad = [k for k in args.cases.split(",") if k not in known]
        if bad:
            print(f"python -m bench evidence: unknown hang kind(s) {bad} (known: {', '.join(known)})")
            return 2
        cases = [known[k] for k in args.cases.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-evidence-"))
    t0 = time.perf_counter()
    try:
        rows = run(cases, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    took = time.perf_counter() - t0
    print(
        f"which rank, three ways: {len(rows)} hangs, layout {_layout_arg()}, {RANKS_PER_HOST} ranks per host"
    )
    print(render_table(rows))
    for row in rows:
        notes = "; ".join(f"{p}: {a.note}" for p, a in row.answers.items() if a.note)
        print(f"  {row.kind}: {notes}")
    print(f"  ({took:.0f} s{', evidence kept in ' + str(work) if args.keep else ''})")
    if args.out is not None:
        args.out.write_text(json.dumps({**table_json(rows), "elapsed_s": round(took, 1)}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
