"""Property-based tests of issue 21, item 3: whatever numbers a host sends -- NaN, ±Infinity, the
largest and smallest floats, integers past 64 bits, in any numeric field of its probe documents --
every command that prints JSON prints one strict JSON document (RFC 8259: no ``NaN`` or
``Infinity`` token; :func:`robustctl.models.strict_jsonable` writes a non-finite float as the
string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``) whose ``exit_code`` is the command's, an exit
code of the table, and never the catch-all's ``internal error``.

Each example starts from what the real probes report for healthy hosts (``diagnostics/host.py`` over
a seeded root, ``diagnostics/nvml.py`` over a fake NVML injection; the stacks document is built from
the captured py-spy dumps of ``tests/data/pyspy/captured-gloo-4ranks``) and replaces numbers
anywhere in them; the hosts answer through a fake transport. Half the examples let the non-finite
numbers past the probe parse (:func:`robustctl.probes.host_json` reads them as null): the writers
must hold on their own. ``analyze`` reads files instead: an nccl-tests table and py-spy JSON dumps
with their numbers replaced.

Commands: ``sweep --json`` (with ``--html`` and ``--textfile``), ``history``, ``hosts``, ``lemons``,
``diagnose``, ``playbook run`` (with ``--json`` and without), ``stacks``, ``analyze``.

Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

import robustctl.probes
from robustctl.cli.main import main
from robustctl.exit_codes import ExitCode
from robustctl.testing.fake_transport import FakeTransport
from robustctl.transport.pool import TransportPool

pytestmark = pytest.mark.fuzz

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
PYSPY = DATA / "pyspy" / "captured-gloo-4ranks"
NCCL = DATA / "nccl-tests" / "bitdeer-h100-8gpu-1node-allreduce.txt"
HOSTS = ("node1", "node2")
EXIT_CODES = {int(c) for c in ExitCode}

NUMBERS = st.sampled_from([
    math.nan, math.inf, -math.inf, 1.7976931348623157e308, -1e308, 5e-324, -5e-324, 2.2250738585072014e-308,
    -0.0, 1e-300, 2**63, 2**64 + 1, -(2**63) - 1, 10**30, 0, -1,
]) | st.floats() | st.integers()  # fmt: skip
"""What a host may send where a number belongs: non-finite, extreme and tiny floats, huge integers."""

NUMBER_TEXT = st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1e999", "1e308", "5e-324",
                               "-0", "18446744073709551617", "0", "1e-300"])  # fmt: skip
"""What a tool's text output may hold where a number belongs (nccl-tests prints C's ``%g``)."""

PLAYBOOK = """\
name: numbers
description: diagnose both hosts
steps:
  - id: diag
    kind: diagnose
    args: {level: 0, hosts: "node[1-2]"}
"""


def _reject(token: str) -> Any:
    raise ValueError(f"non-standard JSON token {token}")


def strict_json(text: str) -> Any:
    """``text`` parsed as strict RFC 8259 JSON (a NaN or Infinity token fails)."""
    return json.loads(text, parse_constant=_reject)


# --- the documents the hosts start from -------------------------------------------------------------


def _stacks_doc(index: int) -> dict[str, Any]:
    """Host ``index``'s ``stacks`` probe data: ranks ``2*index`` and ``2*index + 1`` as py-spy read them."""
    processes = [
        {"pid": 1000 + r, "rank": r, "local_rank": r % 2, "rank_source": "env", "role": "main", "comm": "python",
         "cmdline": "python g.py", "state": "S", "parent_pid": 1, "error": None, "attempts": 1, "complete": True,
         "elapsed_s": 0.05, "dump": json.loads((PYSPY / f"rank{r}.json").read_text())}
        for r in (2 * index, 2 * index + 1)
    ]  # fmt: skip
    return {"processes": processes, "launchers": [], "unmatched_ranks": [], "scanned": 40,
            "requested_ranks": [2 * index, 2 * index + 1], "py_spy": {"version": "0.4.0"}}  # fmt: skip


@pytest.fixture(scope="module")
def healthy(_healthy_host_probe: dict[str, Any], healthy_nvml_data: dict[str, Any]) -> dict[str, Any]:
    """Per host, the probes' documents of a healthy host: ``{host: {"host", "nvml", "stacks"}}``."""
    nvml = healthy_nvml_data
    return {
        h: {"host": _healthy_host_probe, "nvml": nvml, "stacks": _stacks_doc(i)} for i, h in enumerate(HOSTS)
    }


KEPT = frozenset({"rank", "local_rank"})
"""Keys whose numbers are kept: a rank outside the job's layout is a usage error of ``stacks`` (64, one
line, no document) by design of its own, not a JSON writer's concern."""


def _numbers_replaced(draw: st.DrawFn, doc: Any) -> Any:
    """``doc`` with each number (not a bool) kept or, one time in two, replaced by one of :data:`NUMBERS`
    (the numbers under the keys of :data:`KEPT` excepted)."""
    if isinstance(doc, dict):
        return {k: v if k in KEPT else _numbers_replaced(draw, v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_numbers_replaced(draw, v) for v in doc]
    if isinstance(doc, (int, float)) and not isinstance(doc, bool) and draw(st.booleans()):
        return draw(NUMBERS)
    return doc


@st.composite
def fleet(draw: st.DrawFn, healthy: dict[str, Any], probes: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Per host, per probe in ``probes``: the healthy document with its numbers replaced (one host at
    least; the other healthy or not)."""
    hostile = draw(st.sampled_from(HOSTS))
    out: dict[str, dict[str, Any]] = {}
    for host in HOSTS:
        out[host] = {}
        for probe in probes:
            doc = healthy[host][probe]
            if host == hostile or draw(st.booleans()):
                doc = _numbers_replaced(draw, doc)
            out[host][probe] = _stamped(doc) if probe == "host" else doc
    return out


def _stamped(doc: dict[str, Any]) -> Any:
    """A host answer whose clock reads the time of the call, unless the example replaced it."""

    def answer(argv: Any) -> Any:
        if isinstance(doc.get("clock"), dict) and doc["clock"].get("time") is None:
            return {**doc, "clock": {**doc["clock"], "time": time.time()}}
        return doc

    return answer


# --- running the CLI with those hosts -----------------------------------------------------------------


@contextlib.contextmanager
def hosts_answering(answers: dict[str, dict[str, Any]], let_through: bool) -> Iterator[Path]:
    """A temporary directory holding ``inv.yaml`` (node1, node2; job ``j1`` with 2 ranks on each)
    whose hosts answer ``answers`` through a fake transport; with ``let_through`` the probe parse
    keeps non-finite numbers."""
    fake = FakeTransport(answers)
    init = TransportPool.__init__

    def patched(self: TransportPool, **kw: Any) -> None:
        init(self, **{**kw, "override": fake})

    with tempfile.TemporaryDirectory() as d, pytest.MonkeyPatch.context() as mp:
        mp.setattr(TransportPool, "__init__", patched)
        if let_through:
            mp.setattr(robustctl.probes, "host_json", json.loads)
        mp.setenv("NO_COLOR", "1")
        mp.setenv("COLUMNS", "160")
        inv = {
            "hosts": [{"name": "node[1-2]", "address": "127.0.0.[2-3]"}],
            "jobs": {"j1": {"hosts": "node[1-2]", "layout": {"tp": 2, "dp": 2}, "ranks_per_host": 2,
                            "process": {"match": "python"}}},
            "policy": {"max_cluster_fraction": 1.0, "max_job_fraction": 1.0, "circuit_breaker_fraction": 1.0},
        }  # fmt: skip
        (Path(d) / "inv.yaml").write_text(yaml.safe_dump(inv))
        yield Path(d)


def cli(argv: list[str], *, prints_json: bool = True) -> tuple[int, Any]:
    """Run ``robustctl ARGV``: its exit code (one of the table, never the catch-all) and its strict
    JSON document (whose ``exit_code`` is the command's), or None when ``prints_json`` is False."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    assert code in EXIT_CODES, (argv, code, err.getvalue()[-2000:])
    assert "internal error" not in err.getvalue() and "Traceback" not in err.getvalue(), err.getvalue()[
        -2000:
    ]
    if not prints_json:
        assert out.getvalue() == ""
        return code, None
    doc = strict_json(out.getvalue())
    assert doc["exit_code"] == code, (argv, doc.get("exit_code"), code)
    return code, doc


# --- the properties -------------------------------------------------------------------------------


@given(data=st.data(), let_through=st.booleans())
def test_host_numbers_through_sweep_and_what_reads_its_history(
    healthy: dict[str, Any], data: st.DataObject, let_through: bool
) -> None:
    with hosts_answering(data.draw(fleet(healthy, ("host", "nvml"))), let_through) as d:
        inv, state, prom, page = str(d / "inv.yaml"), str(d / "s.db"), d / "r.prom", d / "r.html"
        _, doc = cli(
            ["sweep", "-i", inv, "--state", state, "--json", "--textfile", str(prom), "--html", str(page)]
        )
        assert sorted(h["host"] for h in doc["hosts"]) == list(HOSTS)
        assert page.read_text(encoding="utf-8").rstrip().endswith("</html>")
        assert "robustctl_host_named" in {f.name for f in text_string_to_metric_families(prom.read_text())}
        for host in HOSTS:
            cli(["history", host, "--state", state, "--json"])
        cli(["hosts", "-i", inv, "--state", state, "--json"])
        cli(["lemons", "--state", state, "--json"])


@given(data=st.data(), let_through=st.booleans(), json_out=st.booleans())
def test_host_numbers_through_diagnose_and_a_playbook_run(
    healthy: dict[str, Any], data: st.DataObject, let_through: bool, json_out: bool
) -> None:
    """``diagnose --json``, then ``playbook run`` of a diagnose step, with ``--json`` or without (the
    run used to crash after its end without ``--json``: the document nobody asked for was built)."""
    with hosts_answering(data.draw(fleet(healthy, ("host", "nvml"))), let_through) as d:
        inv = str(d / "inv.yaml")
        _, doc = cli(["diagnose", "-i", inv, "-l", "0", "--state", str(d / "d.db"), "--json"])
        assert sorted(h["host"] for h in doc["hosts"]) == list(HOSTS)
        (d / "pb.yaml").write_text(PLAYBOOK)
        run = ["playbook", "run", str(d / "pb.yaml"), "-i", inv, "--state", str(d / "p.db"), "--yes"]
        if json_out:
            _, doc = cli([*run, "--json"])
            assert [s["step"] for s in doc["steps"]] == ["diag"]
        else:
            cli(run, prints_json=False)


@given(data=st.data(), let_through=st.booleans())
def test_host_numbers_through_stacks(healthy: dict[str, Any], data: st.DataObject, let_through: bool) -> None:
    with hosts_answering(data.draw(fleet(healthy, ("stacks",))), let_through) as d:
        _, doc = cli(["stacks", "-i", str(d / "inv.yaml"), "-j", "j1", "--samples", "1",
                      "--state", str(d / "s.db"), "--json"])  # fmt: skip
        assert doc["kind"] == "stacks"


_NCCL_NUMBER = re.compile(r"(?<=\s)-?\d+(?:\.\d+)?(?=\s|$)", re.M)


@st.composite
def numbers_replaced(draw: st.DrawFn, doc: Any) -> Any:
    """``doc`` with its numbers replaced as :func:`_numbers_replaced` does."""
    return _numbers_replaced(draw, doc)


@given(data=st.data())
def test_artefact_numbers_through_analyze(data: st.DataObject) -> None:
    """nccl-tests' numbers (``nan``, ``inf``, ``1e999`` where ``%g`` printed a bandwidth) and py-spy
    JSON dumps whose numbers may be anything (``NaN`` tokens included): ``analyze --json`` stays strict."""
    nccl = _NCCL_NUMBER.sub(
        lambda m: data.draw(NUMBER_TEXT) if data.draw(st.booleans()) else m.group(), NCCL.read_text()
    )
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "nccl.txt").write_text(nccl)
        _, doc = cli(["analyze", str(Path(d) / "nccl.txt"), "--json"])
        assert doc["kind"] == "analyze"
        dumps = []
        for r in (0, 1):
            dumps.append(Path(d) / f"rank{r}.json")
            dumps[-1].write_text(
                json.dumps(data.draw(numbers_replaced(json.loads((PYSPY / f"rank{r}.json").read_text()))))
            )
        _, doc = cli(["analyze", *map(str, dumps), "--json"])
        assert doc["kind"] == "stacks"
