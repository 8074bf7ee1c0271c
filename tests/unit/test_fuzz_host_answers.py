"""Property-based tests of what a hostile host can send: generated probe documents through the whole
path a host's answer takes (fan-out, transport failures, checks, the sweep's history, the HTML report, the Prometheus
textfile, ``--json`` and the terminal table), then ``history``, ``hosts`` and ``lemons`` reading the
store those answers were recorded in.

Each example starts from what the real probes report for a healthy host (``diagnostics/host.py``
over a seeded root, ``diagnostics/nvml.py`` over a fake NVML injection) and replaces a few values,
anywhere in the document, with hostile ones: control and bidi characters, markup, NaN and ±Infinity,
integers past 64 bits, far-future times, wrong types and nesting; or sends raw bytes instead of a
document. Contract:

- no traceback and no catch-all: every command ends with an exit code from the table, and a check
  that raised on its input ("check failed: ...") never appears;
- ``--json`` output is strict JSON (no ``NaN``/``Infinity`` tokens) whose host strings are exact;
- the HTML report and the textfile carry no raw control or bidi character, the textfile parses
  with the official Prometheus client;
- the terminal table carries no raw ESC;
- what was recorded reads back through ``history``, ``hosts`` and ``lemons``.

Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from robustctl.cli.main import main
from robustctl.commands.base import result_json
from robustctl.commands.diagnose import diagnose_request, run_diagnose
from robustctl.commands.sweep import run_sweep, sweep_request
from robustctl.errors import CommandTimeout, HostUnreachable
from robustctl.exit_codes import ExitCode
from robustctl.models import Status
from robustctl.report.console import dump_json
from robustctl.report.sweep import render_sweep, write_sweep_files
from robustctl.testing.fake_transport import FakeTransport
from robustctl.transport.base import CommandResult
from robustctl.transport.pool import TransportPool

pytestmark = pytest.mark.fuzz

REPO = Path(__file__).resolve().parents[2]
HOSTS = ("node1", "node2", "node3")
EXIT_CODES = {int(c) for c in ExitCode}

# Raw control characters (C0 but newline and tab, DEL, C1) and the bidi and zero-width format
# characters that reorder or hide text on screen: none may reach HTML or the textfile raw.
UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")

HOSTILE_STRINGS = (
    "\x1b[31mred\x1b[0m", "\x1b]0;title\x07", "nul\x00byte", "carriage\rreturn", "\u202eevil\u202c",
    "zero\u200bwidth", "[bold red]markup[/]", "[link=file:///etc/passwd]x[/link]", "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>', "{job:>1000000000}", "%s%s%n", "a\nb\nc", '\\"}\n# EOF', "\ud7ff\ue000",
    "x" * 5000, "", " ", "ok", "critical", "NaN", "Infinity",
)  # fmt: skip
HOSTILE_TEXT = st.sampled_from(HOSTILE_STRINGS) | st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40
)
HOSTILE_NUMBERS = st.sampled_from(
    [float("nan"), float("inf"), float("-inf"), 1e300, -1e300, 5e-324, 253402300800.0, 2**63, -(2**63), 2**70, -1, 0]
) | st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**70), 2**70)  # fmt: skip
HOSTILE_LEAF = HOSTILE_TEXT | HOSTILE_NUMBERS | st.none() | st.booleans()
HOSTILE = st.recursive(
    HOSTILE_LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(HOSTILE_TEXT, inner, max_size=3),
    max_leaves=8,
)
RAW_ANSWERS = st.sampled_from([
    b"", b"\x00\xff{not json", b"NaN", b'{"probe": "host", "version": 1, "data": NaN}',
    b'{"probe": "host", "version": 1, "data": {"clock": {"time": Infinity}}, "errors": []}',
    b"[" * 100_000, b'{"a": 1}' * 1000, "\u202e".encode() * 10,
])  # fmt: skip


def _reject_constant(token: str) -> Any:
    raise ValueError(f"non-standard JSON token {token}")


def strict_json(text: str) -> Any:
    """``text`` parsed as strict RFC 8259 JSON (a NaN or Infinity token fails)."""
    return json.loads(text, parse_constant=_reject_constant)


@pytest.fixture(scope="module")
def healthy(_healthy_host_probe: dict[str, Any], healthy_nvml_data: dict[str, Any]) -> dict[str, Any]:
    """The real probes' documents for a healthy host: ``{"host": data, "nvml": data}`` (2 GPUs)."""
    return {"host": _healthy_host_probe, "nvml": healthy_nvml_data}


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path (keys and indexes) to a value inside ``doc``, containers included."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:4]):
            yield (*prefix, i)
            yield from _paths(v, (*prefix, i))


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    for step in path[:-1]:
        doc = doc[step]
    doc[path[-1]] = value


@st.composite
def failed_run(draw: st.DrawFn) -> Any:
    """A run that printed no document: an exit status with hostile stderr, or a transport error."""
    why = draw(HOSTILE_TEXT)
    return draw(
        st.sampled_from(
            [
                CommandResult("h", draw(st.integers(1, 255)), b"", why.encode("utf-8", "replace"), 0.001),
                HostUnreachable("h", why),
                CommandTimeout("h", why),
            ]
        )
    )


@st.composite
def hostile_document(draw: st.DrawFn, base: dict[str, Any]) -> Any:
    """``base`` with one to five values replaced by hostile ones (or, one time in ten each, raw
    bytes or a failed run)."""
    roll = draw(st.integers(0, 9))
    if roll == 0:
        return draw(RAW_ANSWERS)
    if roll == 1:
        return draw(failed_run())
    doc = json.loads(json.dumps(base))
    paths = sorted(_paths(doc), key=repr)
    for _ in range(draw(st.integers(1, 5))):
        path = draw(st.sampled_from(paths))
        try:
            _replace(doc, path, draw(HOSTILE))
        except (KeyError, IndexError, TypeError):
            continue  # an earlier replacement took this path's parent away
    return doc


def _answer(host: str, probe: str, doc: Any) -> Any:
    if isinstance(doc, bytes):
        return CommandResult(host, 0, doc, b"", 0.001)
    if isinstance(doc, (CommandResult, BaseException)):
        return doc
    if probe == "host" and isinstance(doc.get("clock"), dict) and doc["clock"].get("time") is None:

        def stamped(argv: Any) -> Any:
            import time

            out = json.loads(json.dumps(doc))
            out["clock"]["time"] = time.time()  # the healthy clock, unless the example replaced it
            return out

        return stamped
    return doc


def _inventory(tmp: Path) -> Path:
    path = tmp / "inv.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "hosts": [{"name": "node[1-3]", "address": "127.0.0.[2-4]"}],
                "policy": {
                    "max_cluster_fraction": 1.0,
                    "max_job_fraction": 1.0,
                    "circuit_breaker_fraction": 1.0,
                },
            }
        )
    )
    return path


@st.composite
def fleet_answers(draw: st.DrawFn, healthy: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per host, per probe: the healthy document or a hostile one (at least one host hostile)."""
    answers: dict[str, dict[str, Any]] = {}
    hostile_host = draw(st.sampled_from(HOSTS))
    for host in HOSTS:
        answers[host] = {}
        for probe in ("host", "nvml"):
            bad = draw(st.booleans()) or (host == hostile_host and probe == "host")
            doc = draw(hostile_document(healthy[probe])) if bad else healthy[probe]
            answers[host][probe] = _answer(host, probe, doc)
    return answers


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _no_internal_error(code: int, err: str) -> None:
    assert code in EXIT_CODES, (code, err)
    assert "internal error" not in err and "Traceback" not in err, err


@given(data=st.data())
def test_hostile_answers_through_sweep_outputs_and_history(
    healthy: dict[str, Any], data: st.DataObject
) -> None:
    answers = data.draw(fleet_answers(healthy))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        state, prom, page = tmp / "s.db", tmp / "r.prom", tmp / "r.html"
        req = sweep_request(inventory=_inventory(tmp), state=state, textfile=prom, html=page, environ={})
        res = run_sweep(
            req, pool=TransportPool(override=FakeTransport(answers)), clock=lambda: 1_800_000_000.0
        )
        write_sweep_files(req, res)

        assert sorted(h.host for h in res.hosts) == list(HOSTS)
        assert int(res.exit_code) in EXIT_CODES
        assert all(isinstance(h.status, Status) for h in res.hosts)
        document = dump_json(result_json(res))
        strict_json(document)
        assert "check failed:" not in document, document[:2000]

        html = page.read_text(encoding="utf-8")
        assert html.rstrip().endswith("</html>")
        assert not UNPRINTABLE.search(html), repr(UNPRINTABLE.search(html))
        assert "<script>alert" not in html and "<img src=x" not in html

        textfile = prom.read_text(encoding="utf-8")
        assert not UNPRINTABLE.search(textfile), repr(UNPRINTABLE.search(textfile))
        families = {f.name for f in text_string_to_metric_families(textfile)}
        assert "robustctl_host_named" in families

        table = io.StringIO()
        render_sweep(res, Console(file=table, width=160, color_system=None, force_terminal=False))
        assert "\x1b" not in table.getvalue()

        for argv in (
            ["history", "--state", str(state), "--json"],
            ["hosts", "-i", str(req.inventory.source), "--state", str(state), "--json"],
            ["lemons", "--state", str(state), "--json"],
        ):
            code, out, err = _cli(argv)
            _no_internal_error(code, err)
            if code in (0, 1, 2):
                strict_json(out)
        code, out, err = _cli(["history", "--state", str(state)])
        _no_internal_error(code, err)
        assert "\x1b" not in out + err


@given(data=st.data())
def test_hostile_answers_through_diagnose_fan_out(healthy: dict[str, Any], data: st.DataObject) -> None:
    answers = data.draw(fleet_answers(healthy))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        req = diagnose_request(inventory=_inventory(tmp), level=0, state=tmp / "s.db", environ={})
        res = run_diagnose(req, pool=TransportPool(override=FakeTransport(answers)))
        doc = strict_json(dump_json(result_json(res)))
        assert doc["exit_code"] in EXIT_CODES
        text = json.dumps(doc)
        assert "check failed:" not in text, text[:2000]


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_clock_sent_as_a_non_finite_number_is_unread_not_healthy(
    healthy: dict[str, Any], token: str, tmp_path: Path
) -> None:
    """A NaN compares false with every threshold: read as null, the clock check says unread (UNKNOWN)."""
    text = json.dumps(
        {"probe": "host", "version": 1, "time": 1.0, "data": {**healthy["host"], "clock": {"time": 0}}}
    )
    raw = text.replace('"clock": {"time": 0}', '"clock": {"time": ' + token + "}").encode()
    answers: dict[str, dict[str, Any]] = {h: {"host": CommandResult(h, 0, raw, b"", 0.001)} for h in HOSTS}
    req = diagnose_request(inventory=_inventory(tmp_path), level=0, state=tmp_path / "s.db", environ={})
    res = run_diagnose(req, pool=TransportPool(override=FakeTransport(answers)))
    doc = strict_json(dump_json(result_json(res)))
    clock = [c for h in doc["hosts"] for c in h["checks"] if c["name"] == "host.clock"]
    assert clock and {c["status"] for c in clock} == {"unknown"}, clock
