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
