"""Issue 21, item 3: one host reporting NaN or Infinity used to end ``sweep --json``, ``diagnose
--json`` and ``playbook run`` (with or without ``--json``) in ``internal error: ... not JSON
compliant``, exit 3, with no document.

The rule (README, "Outputs"; :func:`robustctl.models.strict_jsonable`): every JSON document robustctl
writes is strict JSON, a non-finite float written as the string ``"NaN"``, ``"Infinity"`` or
``"-Infinity"``. These are the regression cases, one per command, through the CLI with a fake
transport answering for the hosts, each run twice: with the probe documents parsed as shipped
(:func:`robustctl.probes.host_json` reads a host's non-finite numbers as null) and with that parse
letting them through (any other way a float reaches a result: the writers must hold on their own).
``test_fuzz_json.py`` sends generated numbers everywhere.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import robustctl.probes
from robustctl.cli.main import main
from robustctl.exit_codes import ExitCode
from robustctl.models import NON_FINITE_JSON, strict_jsonable
from robustctl.playbooks import journal
from robustctl.report.console import dump_json, emit_json
from robustctl.store import Store, journal_query
from robustctl.testing.fake_transport import FakeTransport
from robustctl.transport.pool import TransportPool

EXIT_CODES = {int(c) for c in ExitCode}
NO_GPU = {
    "available": False,
    "reason": "nvmlInit: NVML Shared Library Not Found",
    "reason_code": "library_not_found",
}
STRICT_CHECK = (
    "import json, sys\n"
    "def no(c): raise SystemExit('non-standard JSON token ' + c)\n"
    "json.load(sys.stdin, parse_constant=no)\n"
)
"""A ``notify`` command that exits non-zero unless its standard input is strict JSON."""


def _reject(token: str) -> Any:
    raise ValueError(f"non-standard JSON token {token}")


def strict(text: str) -> Any:
    """``text`` parsed as strict RFC 8259 JSON (``NaN``, ``Infinity`` tokens fail)."""
    return json.loads(text, parse_constant=_reject)


def install(monkeypatch: pytest.MonkeyPatch, fake: FakeTransport) -> None:
    """Every TransportPool the commands build answers through ``fake``."""
    init = TransportPool.__init__

    def patched(self: TransportPool, **kw: Any) -> None:
        init(self, **{**kw, "override": fake})

    monkeypatch.setattr(TransportPool, "__init__", patched)


def non_finite_strings(doc: Any) -> set[str]:
    """The ``"NaN"``/``"Infinity"``/``"-Infinity"`` string values in ``doc``."""
    return set(_strings(doc)) & set(NON_FINITE_JSON.values())


def _strings(doc: Any) -> Iterator[str]:
    if isinstance(doc, dict):
        for v in doc.values():
            yield from _strings(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _strings(v)
    elif isinstance(doc, str):
        yield doc


@pytest.fixture(params=["parsed", "let-through"])
def let_through(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """True when a host's non-finite numbers get past the probe parse (Python's own ``json.loads``)."""
    if request.param == "let-through":
        monkeypatch.setattr(robustctl.probes, "host_json", json.loads)
        return True
    return False


@pytest.fixture
def hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, healthy_host_data: dict[str, Any], let_through: bool
) -> Path:
    """An inventory of node1 and node2, answered by a fake transport: node2 healthy, node1 healthy
    but for NaN and ±Infinity where its probe reports its NIC, InfiniBand port and load (the load
    check keeps its numbers as evidence, so they reach the documents); returns the inventory."""

    def answer(poison: bool) -> Any:
        def run(argv: Any) -> dict[str, Any]:
            import time

            d = json.loads(json.dumps(healthy_host_data))
            d["clock"]["time"] = time.time()
            if poison:
                d["nics"][0].update(mtu=math.nan, speed_mbps=math.inf)
                d["infiniband"][0]["rate_gbps"] = math.nan
                d["load"]["load1"] = -math.inf
            return d

        return run

    install(
        monkeypatch,
        FakeTransport({n: {"host": answer(n == "node1"), "nvml": NO_GPU} for n in ("node1", "node2")}),
    )
    inv = tmp_path / "inv.yaml"
    policy = {"max_cluster_fraction": 1.0, "max_job_fraction": 1.0, "circuit_breaker_fraction": 1.0}
    inv.write_text(
        yaml.safe_dump({"hosts": [{"name": "node[1-2]", "address": "127.0.0.[2-3]"}], "policy": policy})
    )
    monkeypatch.setenv("NO_COLOR", "1")
    return inv


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``main(argv)``: its exit code (one of the table), stdout and stderr (no internal error)."""
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    assert code in EXIT_CODES, (code, err)
    assert "internal error" not in err and "Traceback" not in err, err
    return code, out, err


# --- the rule, function by function ---------------------------------------------------------------


def test_strict_jsonable_spells_non_finite_floats_and_keeps_the_rest() -> None:
    doc = {"a": [math.nan, math.inf, -math.inf], "b": (1e308, 5e-324, -0.0, 2**80, True, None, "NaN")}
    assert strict_jsonable(doc) == {
        "a": ["NaN", "Infinity", "-Infinity"],
        "b": [1e308, 5e-324, -0.0, 2**80, True, None, "NaN"],
    }
    back = strict(dump_json(doc))
    assert [float(x) for x in back["a"]][1:] == [math.inf, -math.inf] and math.isnan(float(back["a"][0]))


def test_emit_json_without_a_destination_builds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command without ``--json`` calls emit_json with nowhere to write: the document is not
    built, so no value in it can fail that command (the root of the ``playbook run`` crash)."""
    calls: list[Any] = []
    monkeypatch.setattr("robustctl.report.console.dump_json", lambda obj: calls.append(obj) or "{}")
    emit_json({"x": math.nan}, to_stdout=False, output=None)
    assert calls == []


def test_the_journal_keeps_strict_json() -> None:
    """What the journal keeps is what ``--json`` prints and what ``steps.ID`` shows."""
    kept = journal.cap_result({"kind": "diagnose", "x": [math.nan, -math.inf], "exit_code": 0})
    assert kept == {"kind": "diagnose", "x": ["NaN", "-Infinity"], "exit_code": 0}
    big = journal.cap_result({"kind": "k", "v": math.inf, "pad": "x" * (journal.MAX_RESULT_BYTES + 1)})
    assert big["truncated"] is True and big["v"] == "Infinity"


# --- each command through the CLI -----------------------------------------------------------------


def test_sweep_json_html_and_textfile_with_nan_from_a_host(
    hosts: Path, let_through: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, prom, page = tmp_path / "s.db", tmp_path / "r.prom", tmp_path / "r.html"
    code, out, _ = run(["sweep", "-i", str(hosts), "--state", str(state), "--json",
                        "--textfile", str(prom), "--html", str(page)], capsys)  # fmt: skip
    doc = strict(out)
    assert doc["kind"] == "sweep" and doc["exit_code"] == code
    assert sorted(h["host"] for h in doc["hosts"]) == ["node1", "node2"]
    assert page.read_text().rstrip().endswith("</html>") and "robustctl_host_named" in prom.read_text()
    for argv in (
        ["lemons", "--state", str(state), "--json"],
        ["history", "node1", "--state", str(state), "--json"],
        ["hosts", "-i", str(hosts), "--state", str(state), "--json"],
    ):
        c, o, _ = run(argv, capsys)
        assert strict(o)["exit_code"] == c


def test_diagnose_json_with_nan_from_a_host(
    hosts: Path, let_through: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        ["diagnose", "-i", str(hosts), "-l", "0", "--state", str(tmp_path / "s.db"), "--json"], capsys
    )
    doc = strict(out)
    assert doc["kind"] == "diagnose" and doc["exit_code"] == code
    node1, node2 = sorted(doc["hosts"], key=lambda h: str(h["host"]))
    assert node2["status"] == "ok" and not non_finite_strings(node2)
    if let_through:  # the load check's evidence holds load1: -Infinity
        assert non_finite_strings(node1) == {"-Infinity"}, node1


PLAYBOOK = f"""\
name: nan-probe
description: diagnose both hosts, then hand the run to a hook that reads strict JSON only
steps:
  - id: diag
    kind: diagnose
    args: {{level: 0, hosts: "node[1-2]"}}
  - id: hook
    kind: notify
    args: {{command: {json.dumps([sys.executable, "-c", STRICT_CHECK])}}}
"""


@pytest.mark.parametrize("json_out", [False, True], ids=["table", "json"])
def test_playbook_run_with_nan_from_a_host(
    hosts: Path, let_through: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str], json_out: bool
) -> None:
    """The run reaches its end and ends 0 with or without ``--json``; the notify hook gets strict
    JSON; the journal keeps strict JSON, whose ``"-Infinity"`` is what ``steps.diag`` shows."""
    pb = tmp_path / "pb.yaml"
    pb.write_text(PLAYBOOK)
    state = tmp_path / "s.db"
    argv = ["playbook", "run", str(pb), "-i", str(hosts), "--state", str(state), "--yes"]
    code, out, err = run([*argv, "--json"] if json_out else argv, capsys)
    assert code == 0 and "reached the end" in err, err
    if json_out:
        doc = strict(out)
        assert doc["exit_code"] == 0 and [s["status"] for s in doc["steps"]] == ["done", "done"], doc["steps"]
        assert non_finite_strings(doc["steps"][0]) == ({"-Infinity"} if let_through else set())
    else:
        assert out == ""
    with Store.open(state) as store:
        (one,) = journal.runs(store)
        rec = journal.run_record(store, one.id)
        assert rec is not None
        diag, hook = rec.steps
        assert diag.result is not None
        assert non_finite_strings(dict(diag.result)) == ({"-Infinity"} if let_through else set())
        assert (hook.step, hook.status, hook.exit_code) == ("hook", "done", 0), hook
        for (text,) in journal_query(store, "SELECT result FROM playbook_steps WHERE result IS NOT NULL"):
            strict(text)
