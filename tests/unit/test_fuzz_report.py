"""Property-based tests of the ``evict --from-report`` reader (issue 9): whatever the file holds,
:func:`robustctl.actions.evict.load_report` returns host-name tuples or raises a one-line ConfigError
naming the file (exit 78), never another exception.

Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.actions.evict import load_report
from robustctl.errors import ConfigError
from robustctl.exit_codes import ExitCode

pytestmark = pytest.mark.fuzz

VALID = (
    {"kind": "diagnose", "schema_version": 1, "suspects": ["node02", "node06"]},
    {
        "kind": "stacks",
        "schema_version": 1,
        "suspect_hosts": ["node05"],
        "over_eviction": ["node05", "node06"],
        "group": {"kind": "pp", "index": 1, "ranks": [4, 5]},
    },
)

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(("kind", "schema_version", "suspects", "suspect_hosts", "over_eviction", "group"))
            | st.text(max_size=6),
            inner,
            max_size=5,
        )
    ),
    max_leaves=20,
)


@st.composite
def documents(draw: st.DrawFn) -> bytes:
    """A valid report with one key replaced, a random JSON value, or a valid report's text mutated."""
    choice = draw(st.integers(0, 2))
    if choice == 0:
        doc: dict[str, Any] = dict(draw(st.sampled_from(VALID)))
        doc[draw(st.sampled_from(("schema_version", *sorted(doc))))] = draw(JSON_VALUES)
        return json.dumps(doc).encode()
    if choice == 1:
        return json.dumps(draw(JSON_VALUES)).encode()
    text = json.dumps(draw(st.sampled_from(VALID)))
    i = draw(st.integers(0, len(text)))
    return (text[:i] + draw(st.text(max_size=4)) + text[i + draw(st.integers(0, 5)) :]).encode(
        "utf-8", "surrogatepass"
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-report")


@given(documents() | st.binary(max_size=100))
def test_report_reader_raises_only_config_errors(workdir: Path, data: bytes) -> None:
    path = workdir / "report.json"
    path.write_bytes(data)
    try:
        targets = load_report(path)
    except ConfigError as exc:
        assert exc.exit_code == ExitCode.CONFIG
        assert str(exc).startswith(f"{path}: ") and "\n" not in str(exc), repr(exc)
        return
    assert targets.kind in ("diagnose", "stacks")
    assert all(isinstance(h, str) for h in targets.suspects + targets.over_eviction)


# --- issue 21, item 9: any text from a host, in every output format but JSON --------------------------

ANY_TEXT = st.text(st.characters(codec=None) | st.characters(categories=["Cs"]) | st.sampled_from(
    "\x1b\x00\r\n\t\x7f\x85\x9b\u200b\u200e\u2028\u2029\u202a\u202e\u2066\u2069\ufeff\U000e0041"
), max_size=40)  # fmt: skip
"""Text of every Unicode category (controls, format and bidi characters, lone surrogates, unassigned
code points), the dangerous ones drawn often."""

ESCAPED = {"Cc", "Cf", "Cs", "Cn", "Zl", "Zp"}


@given(ANY_TEXT)
def test_printable_leaves_no_control_bidi_or_surrogate_and_is_a_fixed_point(text: str) -> None:
    import unicodedata

    from robustctl.report.console import printable

    for newlines in (True, False):
        shown = printable(text, newlines=newlines)
        kept = "\t\n" if newlines else ""
        assert all(ch in kept or unicodedata.category(ch) not in ESCAPED for ch in shown), ascii(shown)
        assert printable(shown, newlines=newlines) == shown
        shown.encode("utf-8")  # no lone surrogate left: a file write cannot fail on it
    plain_text = "".join(ch for ch in text if unicodedata.category(ch) not in ESCAPED or ch in "\t\n")
    assert printable(plain_text) == plain_text  # nothing printable is touched


@given(ANY_TEXT)
def test_any_host_text_reaches_html_textfile_and_terminal_printable(text: str) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from robustctl.report.console import printable
    from tests.unit.test_report_escaping import UNPRINTABLE, hostile_sweep, sweep_outputs

    page, textfile, terminal = sweep_outputs(hostile_sweep(text))
    assert not UNPRINTABLE.search(page), ascii(UNPRINTABLE.search(page))
    assert not UNPRINTABLE.search(textfile), ascii(UNPRINTABLE.search(textfile))
    assert "\x1b" not in terminal and not UNPRINTABLE.search(terminal), ascii(terminal)
    families = {f.name: f for f in text_string_to_metric_families(textfile)}
    (named,) = families["robustctl_host_named"].samples
    assert named.labels["host"] == printable(f"n1{text}")  # the textfile reads back as shown
    checks = {s.labels["check"] for s in families["robustctl_check_status"].samples}
    assert checks == {printable(f"host.xid{text}"), "host.nic"}
