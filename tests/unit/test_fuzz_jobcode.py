"""Property-based tests of the ``code:`` and ``progress:`` inventory sections and of the progress
parsers (heartbeat JSON, log tail + pattern): whatever they hold, loading raises nothing but
ConfigError (FILE:LINE), parsing raises nothing, and what comes back is bounded (steps in
0 … MAX_STEP, at most one entry per file, a log line searched up to MAX_LINE_CHARS).

Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from robustctl.config import ProgressSpec
from robustctl.errors import ConfigError
from robustctl.inventory import load_inventory
from robustctl.jobcode.progress import MAX_LINE_CHARS, MAX_STEP, _parse_host, parse_heartbeat, parse_log_tail

pytestmark = pytest.mark.fuzz

KEYS = ("path", "stable_after_s", "stable_after_steps", "update_window_s", "files", "step_field", "time_field",
        "max_files", "log", "pattern", "tail_bytes", "timeout_s", "bogus")  # fmt: skip
VALUES = (
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30) | st.sampled_from(["/srv/{host}/code", "(?P<step>\\d+)", "(?P<step>", "((a+)+)+$",
                                              "/run/*.json", "\x00", "relative", "(?P<step>x)(?P<step>y)"])
    | st.lists(st.integers(), max_size=3)
)  # fmt: skip
SECTION = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=6) | VALUES


@given(code=SECTION, progress=SECTION)
def test_any_code_or_progress_section_loads_or_is_a_config_error(
    code: Any, progress: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("inv") / "inv.yaml"
    job: dict[str, Any] = {"hosts": "n1", "code": code, "progress": progress}
    path.write_text(yaml.safe_dump({"hosts": [{"name": "n1", "address": "127.0.0.2"}], "jobs": {"j": job}}))
    try:
        inv = load_inventory(path, environ={})
    except ConfigError as exc:
        assert str(exc).startswith(f"{path}:") and "\n" not in str(exc)
        return
    spec = inv.job("j")
    if spec.progress is not None and spec.progress.pattern is not None:
        assert "step" in re.compile(spec.progress.pattern).groupindex


LOG_WORDS = st.sampled_from(["iteration", " ", "\n", "step=", "/", "12", "99999999999999999999", "٣", "\r",
                             "\x00", "é", "-5", "lm loss"])  # fmt: skip
PATTERNS = st.sampled_from([r"iteration\s+(?P<step>\d+)", r"step=(?P<step>\S+)", r"(?P<step>\d*)",
                            r"(?P<step>.+)", r"(?P<step>(a|\d)+)?$"])  # fmt: skip


@given(text=st.lists(LOG_WORDS | st.text(max_size=8), max_size=60).map("".join), pattern=PATTERNS)
def test_log_tail_parsing_never_raises_and_is_bounded(text: str, pattern: str) -> None:
    step = parse_log_tail(text, re.compile(pattern))
    assert step is None or (isinstance(step, int) and 0 <= step <= MAX_STEP)


def test_a_huge_line_is_searched_only_up_to_the_bound() -> None:
    line = "x" * (MAX_LINE_CHARS + 10) + " iteration 5"
    assert parse_log_tail(line, re.compile(r"iteration\s+(?P<step>\d+)")) is None
    assert parse_log_tail("iteration 5\n" + line, re.compile(r"iteration\s+(?P<step>\d+)")) == 5


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats() | st.text(max_size=5),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.sampled_from(["step", "time", "rank", "x"]), kids, max_size=4),
    max_leaves=12,
)  # fmt: skip


@given(doc=JSONISH, raw=st.text(max_size=40))
def test_heartbeat_parsing_never_raises(doc: Any, raw: str) -> None:
    spec = ProgressSpec(files="/p/*.json")
    for text in (json.dumps(doc), raw):
        entry, why = parse_heartbeat("n1", "/p/r.json", text, 1.0, spec)
        assert (entry is None) != (why is None)
        if entry is not None:
            assert 0 <= entry.step <= MAX_STEP and entry.at == entry.at


@given(doc=JSONISH)
def test_a_hostile_reader_document_is_an_error_or_entries(doc: Any) -> None:
    spec = ProgressSpec(files="/p/*.json")
    try:
        host = _parse_host("n1", doc, spec, None)
    except Exception as exc:
        assert type(exc).__name__ == "HostError"
        return
    assert len(host.entries) <= len(doc["files"]) and len(host.problems) <= 64
