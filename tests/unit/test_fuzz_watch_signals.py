"""Property-based tests of the watch's signal parsers (issue 22, item 2): any bytes a host's progress or
log-tail reader prints, any reader document, any training-log line, any pods, any Slurm state and
exit code, any samples and any stored check states, any pod-log text the Kubernetes API answers.

Contract: a host's output becomes a parsed reading or a one-line HostError of that host, nothing else
raised; every result within its bounds (samples, problems, exits, checks, bytes); the progress entries
are exactly those of :func:`robustctl.jobcode.progress.read_progress` on the same output; a loss is
read in every spelling the test-bed jobs write, and a NaN is the worst loss of its step. Seeded and
bounded by the ``ci`` profile (tests/conftest.py); each case is cheap (documents of a few files).
"""

from __future__ import annotations

import base64
import json
import math
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.config import KubernetesSettings, ProgressSpec
from robustctl.errors import HostError
from robustctl.inventory import load_inventory
from robustctl.jobcode.progress import MAX_STEP, read_progress
from robustctl.schedulers.base import SchedulerError
from robustctl.schedulers.kubernetes import Kubernetes
from robustctl.sweep.history import HOST_CHECK, CheckState
from robustctl.testing.fake_transport import FakeTransport
from robustctl.transport.base import CommandResult
from robustctl.transport.pool import TransportPool
from robustctl.watch.logscan import MAX_LINE_CHARS, MAX_LINES, MAX_TAIL_BYTES
from robustctl.watch.rules import MAX_STEP_TIME_S
from robustctl.watch.signals import (
    MAX_EXITS,
    MAX_HOST_CHECKS,
    MAX_SAMPLES,
    POD_LOG_LIMIT_BYTES,
    POD_LOG_TAIL_LINES,
    Liveness,
    StepSample,
    findings_from_states,
    merge_samples,
    parse_progress_output,
    parse_sacct,
    parse_slurm_exit_code,
    parse_tail_output,
    parse_training_line,
    pod_liveness,
    read_job,
    read_progress_signal,
    slurm_job_liveness,
)
from tests.unit.test_fuzz_watch_rules import FRAGMENTS

pytestmark = pytest.mark.fuzz

HEARTBEATS = ProgressSpec(files="/b/rank*.json", max_files=8)
LOG = ProgressSpec(log="/b/train.log", pattern=r"iteration\s+(?P<step>\d+)/")
LOG_PATTERN = re.compile(LOG.pattern or "")

NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, -1, 10**15, 10**15 + 1, 1e11, 2.5, 0.0, -0.0, 10**400]),
)
LOSS_TEXTS = st.sampled_from(
    ["NaN", "Infinity", "-Infinity", "nan", "inf", "-inf", "+inf", "INF", "1.234567E+00", "1e999", "-nan"]
)
JSON_SCALAR = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=20), LOSS_TEXTS)
JSON = st.recursive(
    JSON_SCALAR,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _dumps(doc: Any) -> str:
    """JSON text of ``doc`` as a reader's Python would print it (NaN/Infinity tokens, huge ints as text)."""
    try:
        return json.dumps(doc)
    except ValueError:  # an int past Python's digit limit for str()
        return json.dumps(str(doc)[:50])


@st.composite
def heartbeat_texts(draw: st.DrawFn) -> str:
    """A heartbeat file's text: mostly an object with step/time/loss/step_s of any value, or any JSON."""
    if draw(st.booleans()):
        doc = {
            "step": draw(st.one_of(st.integers(-5, 2 * MAX_STEP), NUMBERS, JSON_SCALAR)),
            "time": draw(st.one_of(st.floats(0, 2e9), NUMBERS, JSON_SCALAR)),
            "loss": draw(st.one_of(NUMBERS, LOSS_TEXTS, JSON_SCALAR)),
            "step_s": draw(st.one_of(st.floats(0, 100), NUMBERS, JSON_SCALAR)),
            "rank": draw(st.one_of(st.integers(-1, 10**8), JSON_SCALAR)),
        }
        return _dumps(doc)
    return _dumps(draw(JSON))


@st.composite
def reader_docs(draw: st.DrawFn, log: bool) -> dict[str, Any]:
    """A progress reader's document: files that are heartbeats (or log tails), errors, or junk."""
    files: list[Any] = []
    for i in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from(["file", "file", "error", "junk"]))
        path = f"/b/rank{i}.json"
        if kind == "error":
            files.append({"path": path, "error": draw(st.text(max_size=30)), "missing": draw(st.booleans())})
        elif kind == "junk":
            files.append(draw(JSON))
        else:
            text = (
                "\n".join(draw(st.lists(st.sampled_from([*FRAGMENTS[:6], *LINES]), max_size=8)))
                if log
                else draw(heartbeat_texts())
            )
            files.append(
                {
                    "path": path,
                    "mtime": draw(st.one_of(st.floats(0, 2e9), JSON_SCALAR)),
                    "size": draw(st.one_of(st.integers(0, 10**9), JSON_SCALAR)),
                    "cut": draw(st.booleans()),
                    "text": text if draw(st.integers(0, 9)) else draw(JSON_SCALAR),
                }
            )
    doc: dict[str, Any] = {"matched": draw(st.one_of(st.integers(0, 20), JSON_SCALAR)), "files": files}
    if draw(st.booleans()):
        doc["now"] = draw(st.one_of(st.floats(0, 2e9), JSON_SCALAR))
    return doc


LINES = [
    "iteration        7/       0 | lm loss: nan | number of nan iterations:   1 |",
    " iteration      120/   50000 | elapsed time per iteration (ms): 1234.5/1200.0 | lm loss: 2.345678E+00 |",
    "iteration 99999999999999999/ | lm loss: 1.0",
    "iteration 5/ | elapsed time per iteration (ms): 0.0 | lm loss: -inf |",
    "iteration 5/ | elapsed time per iteration (ms): 99999999999999.9 | lm loss: 1e99999 |",
    "iteration\t3/x | lm loss: 1_000 |",
]


def _check_host(host: Any, spec: ProgressSpec) -> None:
    p = host.progress
    assert len(p.entries) <= spec.max_files and len(p.problems) <= 64 and len(host.samples) <= MAX_SAMPLES
    assert all(0 <= e.step <= MAX_STEP and math.isfinite(e.at) for e in p.entries)
    for s in host.samples:
        assert 0 <= s.step <= MAX_STEP
        assert s.step_time_s is None or 0 < s.step_time_s <= MAX_STEP_TIME_S
        assert s.at is None or math.isfinite(s.at)
        assert s.loss is None or isinstance(s.loss, float)
    assert host.now is None or (math.isfinite(host.now) and 0 <= host.now < 1e11)
    for t in host.tails:
        assert t.scan is not None and t.error is None


@given(out=st.binary(max_size=600), log=st.booleans())
def test_any_bytes_from_the_progress_reader(out: bytes, log: bool) -> None:
    spec = LOG if log else HEARTBEATS
    try:
        host = parse_progress_output("n1", out, spec, LOG_PATTERN if log else None)
    except HostError as exc:
        assert exc.host == "n1" and "\n" not in str(exc)
        return
    _check_host(host, spec)


@given(doc=st.one_of(reader_docs(log=False), JSON))
def test_any_heartbeat_document(doc: Any) -> None:
    try:
        host = parse_progress_output("n1", _dumps(doc).encode(), HEARTBEATS, None)
    except HostError:
        assert not (isinstance(doc, dict) and isinstance(doc.get("files"), list))
        return
    _check_host(host, HEARTBEATS)
    assert len(host.samples) == len(host.progress.entries)  # one sample per heartbeat read
    for entry, sample in zip(host.progress.entries, host.samples, strict=True):
        text = next(f["text"] for f in doc["files"] if isinstance(f, dict) and f.get("path") == entry.source)
        raw = json.loads(text).get("loss")
        if isinstance(raw, bool) or raw is None:
            assert sample.loss is None
        elif (isinstance(raw, float) and math.isnan(raw)) or raw in ("NaN", "nan", "-nan"):
            assert sample.loss is not None and math.isnan(sample.loss)
        elif raw in ("Infinity", "inf", "+inf", "INF", "1e999"):
            assert sample.loss == math.inf
        elif raw in ("-Infinity", "-inf"):
            assert sample.loss == -math.inf


@given(doc=reader_docs(log=True))
def test_any_log_tail_document(doc: dict[str, Any]) -> None:
    host = parse_progress_output("n1", _dumps(doc).encode(), LOG, LOG_PATTERN)
    _check_host(host, LOG)
    assert len(host.tails) <= len(doc["files"])


@given(docs=st.lists(st.one_of(reader_docs(log=False), st.binary(max_size=40)), min_size=2, max_size=2))
def test_the_progress_entries_are_those_read_progress_reads(tmp_path_factory: Any, docs: list[Any]) -> None:
    """The same output on the same hosts gives the same ProgressReading hosts as read_progress."""
    path = tmp_path_factory.mktemp("inv") / "inv.yaml"
    path.write_text(
        "hosts: [{name: n1, transport: local}, {name: n2, transport: local}]\n"
        "jobs: {j: {hosts: 'n[1-2]', ranks_per_host: 1, layout: {dp: 2}, "
        "progress: {files: /b/rank*.json, max_files: 8}}}\n"
    )
    job = load_inventory(path).job("j")
    for d in docs:  # the reader prints at most max_files files; past that read_progress reads on, this stops
        if isinstance(d, dict):
            d["files"] = d["files"][: HEARTBEATS.max_files]
    outs = {
        h.name: d if isinstance(d, bytes) else _dumps(d).encode()
        for h, d in zip(job.hosts, docs, strict=True)
    }

    def answer(host: str) -> Any:
        return lambda argv: CommandResult(host, 0, outs[host], b"", 0.0)

    pool = TransportPool(override=FakeTransport(answers={h: {"?": answer(h)} for h in outs}))
    assert job.progress is not None
    old = read_progress(pool, "j", job.hosts, job.progress, clock=lambda: 7.0)
    new, read_at = read_progress_signal(pool, job, job.hosts, clock=lambda: 7.0)
    assert new.reading is not None and read_at == 7.0

    def rows(hosts: Any) -> list[Any]:  # a problem is one line here: whitespace runs compared as one space
        return [
            (h.host, h.entries, h.matched, [" ".join(p.split()) for p in h.problems], h.error is None)
            for h in hosts
        ]

    assert rows(new.reading.hosts) == rows(old.hosts)
    assert (new.unknown is None) == bool(old.entries)
    assert len(new.samples) <= MAX_SAMPLES and len({s.step for s in new.samples}) == len(new.samples)


@st.composite
def tail_docs(draw: st.DrawFn, paths: list[str], nbytes: int) -> dict[str, Any]:
    files: list[Any] = []
    for path in paths:
        kind = draw(st.sampled_from(["ok", "ok", "error", "junk", "wrong", "big", "bad64"]))
        data = draw(st.binary(max_size=nbytes))
        entry: Any = {"path": path, "size": draw(JSON_SCALAR), "start": draw(JSON_SCALAR)}
        if kind == "ok":
            entry["data"] = base64.b64encode(data).decode()
        elif kind == "error":
            entry = {"path": path, "error": draw(st.text(max_size=300)), "missing": draw(JSON_SCALAR)}
        elif kind == "junk":
            entry = draw(JSON)
        elif kind == "wrong":
            entry["path"] = path + "x"
        elif kind == "big":
            entry["data"] = base64.b64encode(data + b"0123456789").decode()
        else:
            entry["data"] = draw(st.text(max_size=40))
        files.append(entry)
    return {"now": draw(JSON_SCALAR), "files": files[: draw(st.integers(0, len(files)))]}


PATHS = ["/l/a.log", "/l/b.log", "/l/c.log"]


@given(out=st.binary(max_size=600))
def test_any_bytes_from_the_tail_reader(out: bytes) -> None:
    try:
        files, now = parse_tail_output("n1", out, PATHS, 64)
    except HostError as exc:
        assert exc.host == "n1" and "\n" not in str(exc)
        return
    assert [f.path for f in files] == PATHS and (now is None or math.isfinite(now))


@given(doc=tail_docs(PATHS, 8))
def test_any_tail_reader_document(doc: dict[str, Any]) -> None:
    files, _ = parse_tail_output("n1", _dumps(doc).encode(), PATHS, 8)
    assert [f.path for f in files] == PATHS
    for f, sent in zip(files, [*doc["files"], None, None, None], strict=False):
        assert (f.data is None) != (f.error is None)
        assert f.data is None or len(f.data) <= 8
        assert f.error is None or (len(f.error) <= 300 and "\n" not in f.error)
        assert f.start >= 0 and (f.size is None or f.size >= 0)
        if f.data is not None:
            assert isinstance(sent, dict) and base64.b64decode(sent["data"]) == f.data


@given(line=st.one_of(st.text(max_size=200), st.sampled_from(LINES), st.sampled_from(FRAGMENTS)))
def test_any_text_as_a_training_line(line: str) -> None:
    s = parse_training_line(line, "src")
    if s is None:
        return
    assert 0 <= s.step <= MAX_STEP and s.at is None and s.source == "src"
    assert s.step_time_s is None or 0 < s.step_time_s <= MAX_STEP_TIME_S
    assert s.step_time_s is not None or s.loss is not None


@given(
    step=st.integers(0, MAX_STEP),
    loss=st.floats(allow_nan=True, allow_infinity=True),
    ms=st.floats(0.001, 1e6),
)
def test_a_megatron_line_reads_back_its_values(step: int, loss: float, ms: float) -> None:
    shown = f"{loss:.6E}" if math.isfinite(loss) else str(loss)
    line = (
        f" [2025-01-01 00:00:00] iteration {step:8d}/{100:8d} | consumed samples: {step * 8:12d} | elapsed time "
        f"per iteration (ms): {ms:.1f} | learning rate: 1.000000E-04 | lm loss: {shown} | loss scale: 1.0 |"
    )
    s = parse_training_line(line)
    assert s is not None and s.step == step
    assert s.loss is not None and (math.isnan(s.loss) if math.isnan(loss) else s.loss == float(shown))
    want = float(f"{ms:.1f}") / 1000.0
    assert s.step_time_s == (want if want > 0 else None)


SAMPLES = st.builds(
    StepSample,
    st.one_of(st.integers(0, 40), st.sampled_from([-1, MAX_STEP + 1])),
    st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 2e9)),
    st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    st.text(max_size=5),
)


@given(old=st.lists(SAMPLES, max_size=30), new=st.lists(SAMPLES, max_size=30), limit=st.integers(-2, 50))
def test_any_samples_merge_into_one_bounded_series(
    old: list[StepSample], new: list[StepSample], limit: int
) -> None:
    got = merge_samples(old, new, limit=limit)
    assert len(got) <= max(1, limit)
    steps = [s.step for s in got]
    assert steps == sorted(set(steps)) and all(0 <= s <= MAX_STEP for s in steps)
    for s in got:
        assert s.step_time_s is None or 0 < s.step_time_s <= MAX_STEP_TIME_S
        assert s.at is None or (math.isfinite(s.at) and 0 <= s.at < 1e11)
        given_losses = [x.loss for x in (*old, *new) if x.step == s.step and x.loss is not None]
        if any(math.isnan(x) for x in given_losses):
            assert s.loss is not None and math.isnan(s.loss)
        elif given_losses:
            assert s.loss == max(given_losses, key=lambda x: (math.isinf(x) and x > 0, math.isinf(x), x))


EXIT_CODES = st.one_of(st.integers(-(2**40), 2**40), JSON_SCALAR)


@st.composite
def pods(draw: st.DrawFn) -> Any:
    if not draw(st.integers(0, 5)):
        return draw(JSON)
    state_kind = draw(st.sampled_from(["running", "terminated", "waiting", "junk"]))
    term = {
        "exitCode": draw(EXIT_CODES),
        "signal": draw(EXIT_CODES),
        "reason": draw(JSON_SCALAR),
        "message": draw(st.one_of(st.sampled_from(FRAGMENTS), JSON_SCALAR)),
        "finishedAt": draw(
            st.one_of(st.sampled_from(["2025-01-01T00:00:00Z", "9999-12-31T23:59:59+14:00"]), JSON_SCALAR)
        ),
    }
    state: Any = {
        "running": {"running": {}},
        "terminated": {"terminated": term},
        "waiting": {"waiting": {"reason": draw(st.sampled_from(["CrashLoopBackOff", "ContainerCreating"]))}},
        "junk": draw(JSON),
    }[state_kind]
    index = draw(st.one_of(st.integers(-2, 6).map(str), JSON_SCALAR, st.sampled_from(["²", "0x1", "1" * 20])))
    return {
        "metadata": {
            "name": draw(JSON_SCALAR),
            "labels": {"batch.kubernetes.io/job-completion-index": index},
            "deletionTimestamp": draw(st.one_of(st.none(), st.text(max_size=3))),
        },
        "spec": {"nodeName": draw(JSON_SCALAR)},
        "status": {
            "phase": draw(st.sampled_from(["Running", "Pending", "Failed", "Succeeded", "Unknown", None])),
            "containerStatuses": draw(
                st.one_of(st.just([{"name": "c", "state": state, "lastState": {"terminated": term}}]), JSON)
            ),
        },
    }


@given(
    items=st.lists(pods(), max_size=8), machines=st.integers(0, 4), g=st.integers(1, 8), p=st.integers(1, 4)
)
def test_any_pods(items: list[Any], machines: int, g: int, p: int) -> None:
    signal, tails = pod_liveness(items, machines=machines, ranks_per_host=g, pods_per_host=p)
    assert len(signal.exits) <= MAX_EXITS and signal.exits_total >= len(signal.exits)
    assert (signal.state is Liveness.DEAD) == (signal.exits_total > 0)
    assert signal.ranks_running is None or 0 <= signal.ranks_running <= machines * g
    assert signal.ranks_expected == machines * g
    for e in signal.exits:
        assert len(e.reason) <= 300 and (e.at is None or math.isfinite(e.at))
    assert all(t.scan is not None for t in tails)
    assert signal.state is not Liveness.UNKNOWN or signal.unknown


@given(state=st.one_of(st.text(max_size=30), st.sampled_from(["RUNNING", "FAILED", "COMPLETED", "COMPLETING"])),
       code=st.one_of(st.text(max_size=12), st.sampled_from(["0:0", "1:0", "0:15", "256:0"])),
       reason=st.text(max_size=40))  # fmt: skip
def test_any_slurm_state_and_exit_code(state: str, code: str, reason: str) -> None:
    signal = slurm_job_liveness("12", state, code, 8, reason)
    assert signal.backend == "slurm" and len(signal.detail) <= 400 and "\n" not in signal.detail
    assert (signal.state is Liveness.DEAD) == bool(signal.exits)
    exit_code, sig = parse_slurm_exit_code(code)
    assert (exit_code is None) == (sig is None)
    assert exit_code is None or 0 <= exit_code <= 255
    assert all(len(r) == 4 for r in parse_sacct(state + "\n" + code + "|" + reason))


STATUSES = st.sampled_from(["ok", "warning", "critical", "unknown", "junk"])


@given(
    rows=st.lists(
        st.tuples(st.sampled_from(["n1", "n2", "n3"]), st.sampled_from([HOST_CHECK, "nvml.count", "host.nic", "x" * 300]), STATUSES),
        max_size=20,
    )
)  # fmt: skip
def test_any_check_states(rows: list[tuple[str, str, str]]) -> None:
    states = {(h, c): CheckState(h, c, s, 1.0, 2.0, 1, "d" * 500, ()) for h, c, s in rows}
    f = findings_from_states(states, ["n1", "n2", "n4"])
    assert sorted([*(h.host for h in f.hosts), *f.unseen]) == ["n1", "n2", "n4"]
    for h in f.hosts:
        assert h.critical == (states[(h.host, HOST_CHECK)].status == "critical")
        assert len(h.checks) <= MAX_HOST_CHECKS and all(len(c.detail) <= 200 for c in h.checks)
        assert all(
            states[(h.host, c.check)].status == "critical" for c in h.checks if (h.host, c.check) in states
        )


@st.composite
def pod_logs(draw: st.DrawFn) -> bytes:
    """A container log as the kubelet keeps it: error fragments among any bytes (control characters,
    ANSI sequences, invalid UTF-8), one huge line, or more lines than are asked for."""
    kind = draw(st.sampled_from(["lines", "lines", "binary", "huge-line", "many-lines"]))
    if kind == "lines":
        parts = st.one_of(st.sampled_from(FRAGMENTS).map(str.encode), st.binary(max_size=80))
        return b"\n".join(draw(st.lists(parts, max_size=30)))
    if kind == "binary":
        return draw(st.binary(max_size=2000))
    if kind == "huge-line":
        n = draw(st.sampled_from([MAX_LINE_CHARS + 1, MAX_TAIL_BYTES + 7, POD_LOG_LIMIT_BYTES + 13]))
        unit = draw(st.sampled_from([b"x", b"\xff", b"\x00", b"\x1b[31m", "\u00e9".encode(), b"\r"]))
        return (unit * n)[:n] + draw(st.sampled_from(FRAGMENTS)).encode()
    line = draw(st.binary(min_size=1, max_size=40)).replace(b"\n", b" ")
    return (line + b"\n") * draw(st.sampled_from([POD_LOG_TAIL_LINES + 1, 3 * POD_LOG_TAIL_LINES]))


class _LogApi:
    """list_pods and read_pod_log over ``logs``: as the server answers (``tail_lines`` then
    ``limit_bytes``), or, ``honest`` False, the whole log whatever was asked; a pod without a log fails."""

    def __init__(self, logs: list[bytes | None], honest: bool) -> None:
        self.logs = {f"p{i}": log for i, log in enumerate(logs)}
        self.honest = honest
        self.calls: list[tuple[str, int, int]] = []

    def list_pods(self, namespace: str | None, *, label_selector: str = "", field_selector: str = "") -> Any:
        return [
            {
                "metadata": {"name": name, "labels": {"batch.kubernetes.io/job-completion-index": str(i)}},
                "spec": {"nodeName": f"n{i + 1}", "containers": [{"name": "c"}]},
                "status": {"phase": "Running"},
            }
            for i, name in enumerate(self.logs)
        ]

    def read_pod_log(
        self, namespace: str, name: str, *, container: str | None, limit_bytes: int, tail_lines: int
    ) -> str:
        self.calls.append((name, limit_bytes, tail_lines))
        data = self.logs[name]
        if data is None:
            raise SchedulerError("kubernetes", f"GET namespaces/default/pods/{name}/log", "HTTP 500: boom")
        if self.honest:
            lines = [line for line in re.split(rb"(?<=\n)", data) if line]
            data = b"".join(lines[max(0, len(lines) - tail_lines) :])[:limit_bytes]
        return data.decode("utf-8", "replace")


@given(logs=st.lists(st.one_of(pod_logs(), st.none()), min_size=1, max_size=2), honest=st.booleans())
def test_any_pod_log_text_is_scanned_within_bounds_or_named_unknown(
    tmp_path_factory: Any, logs: list[bytes | None], honest: bool
) -> None:
    path = tmp_path_factory.mktemp("inv") / "inv.yaml"
    path.write_text(
        "hosts: [{name: n1, transport: local}, {name: n2, transport: local}]\n"
        "jobs: {j: {hosts: 'n[1-2]', ranks_per_host: 2, layout: {dp: 4}}}\n"
    )
    job = load_inventory(path).job("j")
    api = _LogApi(logs, honest)
    sched = Kubernetes(api=api, settings=KubernetesSettings())
    r = read_job(job, TransportPool(override=FakeTransport(answers={})), scheduler=sched)
    pod_tails = [t for t in r.logs.tails if t.path.endswith(" log")]
    assert len(pod_tails) == len(logs) and len(api.calls) <= 2 * len(logs)
    assert all(
        limit == POD_LOG_LIMIT_BYTES and 1 <= lines <= POD_LOG_TAIL_LINES for _, limit, lines in api.calls
    )
    for i, (tail, log) in enumerate(zip(pod_tails, logs, strict=True)):
        assert tail.ranks == (2 * i, 2 * i + 1) and tail.host == f"n{i + 1}"
        if log is None:  # never read: never healthy
            assert tail.scan is None and r.logs.unknown is not None and f"pod p{i} " in r.logs.unknown
            continue
        assert tail.scan is not None and tail.error is None
        assert tail.read_bytes <= MAX_TAIL_BYTES and tail.scan.lines_read <= MAX_LINES
    assert r.logs.unknown is None or (len(r.logs.unknown) <= 300 and "\n" not in r.logs.unknown)
    assert not r.logs.errors or r.logs.unknown is not None  # a log not read is never silently healthy
    assert len(r.progress.samples) <= MAX_SAMPLES
