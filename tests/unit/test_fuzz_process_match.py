"""Property-based tests of the job's process pattern (issue 21, item 11).

A generated regular expression (a small grammar: atoms, groups, alternation, greedy and lazy
quantifiers nested in each other, anchors) in ``process.match`` is either refused at load, a
ConfigError naming FILE:LINE and the key, or the ``stacks`` probe's scan searches it in any
generated command line within the scan's budget (:class:`MatchBudget` of ``diagnostics/stacks.py``):
the search answers as ``re.search`` does on the line's first ``MATCH_CMDLINE_CHARS`` characters, or
it stops with MatchTimeout once the budget is spent. It never spins on: a pattern that backtracks for
ever and is not refused would hang the test. Seeded and bounded by the ``ci`` profile
(tests/conftest.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import event, given
from hypothesis import strategies as st

from robustctl.errors import ConfigError
from robustctl.inventory import load_inventory
from robustctl.probes import load_probe

pytestmark = pytest.mark.fuzz

STACKS: Any = load_probe("stacks")
BUDGET_S = 0.05
"""The scan's budget in these tests (the probe's is MATCH_BUDGET_S): a pattern that backtracks costs
an example 50 ms, not 5 s."""

ATOMS = st.sampled_from(("a", "b", "aa", ".", r"\s", r"\d", "[ab]", "x", "-", r"\w"))
QUANTIFIERS = st.sampled_from(("", "", "*", "+", "?", "{2}", "{1,3}", "{2,}", "*?", "+?", "{1,40}"))
GENERATED = st.recursive(
    st.builds(str.__add__, ATOMS, QUANTIFIERS),
    lambda inner: st.builds(
        lambda opening, branches, quantifier: opening + "|".join(branches) + ")" + quantifier,
        st.sampled_from(("(", "(?:")),
        st.lists(st.lists(inner, min_size=1, max_size=3).map("".join), min_size=1, max_size=3),
        QUANTIFIERS,
    ),
    max_leaves=8,
).flatmap(
    lambda body: st.builds(
        lambda head, tail: head + body + tail,
        st.sampled_from(("", "^", "x ")),
        st.sampled_from(("", "$", "!")),
    )
)
OVERLAPPING = st.builds(
    lambda alternatives, quantifier, tail: f"({alternatives}){quantifier}{tail}",
    st.sampled_from(("a|aa", "aa|a", "a|a?", ".|a", r"\w|a", "x|a|aa", "a|ab|b")),
    st.sampled_from(("+", "*", "{2,}", "+?")),
    st.sampled_from(("$", "!", "b$", "x")),
)
"""Alternatives that overlap under one repeat: no nested repetition, so they load, and on a long run
of a's that does not end as they need they backtrack exponentially (only the budget stops them)."""
PATTERNS = GENERATED | OVERLAPPING
"""Patterns of up to 8 atoms: ``((a+)*b)+``, ``(?:\\s*x)+?``, ``(a|aa)+$`` and the like."""
COMMAND_LINES = st.text(alphabet="ab x-!0 \t", max_size=120) | st.builds(
    lambda head, n, tail: head + "a" * n + tail,
    st.sampled_from(("", "x ", "python train.py --")),
    st.integers(0, 80) | st.integers(30, 80),
    st.sampled_from(("", "!", "b", " x", "aab")),
)
"""Command lines, many of them long runs of one letter ending in a character that fails the match:
the subject on which nested or overlapping repeats backtrack."""


CASES = st.tuples(PATTERNS, COMMAND_LINES) | st.tuples(
    OVERLAPPING,
    st.builds(lambda n, tail: "x " + "a" * n + tail, st.integers(30, 80), st.sampled_from(("!", "c"))),
)
"""(pattern, command line) pairs; the second kind always runs past the budget (or matches fast)."""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-process-match")


def write(workdir: Path, pattern: str) -> Path:
    data = {
        "hosts": [{"name": "n1", "address": "127.0.0.2"}],
        "jobs": {"j": {"hosts": "n1", "process": {"match": pattern}}},
    }
    path = workdir / "inv.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@given(CASES)
def test_a_pattern_is_refused_at_load_or_searched_within_the_budget(
    workdir: Path, case: tuple[str, str]
) -> None:
    pattern, line = case
    path = write(workdir, pattern)
    try:
        load_inventory(path, environ={})
    except ConfigError as exc:
        assert re.match(rf"^{re.escape(str(path))}:\d+: jobs\.j\.process\.match: ", str(exc)), str(exc)
        assert "\n" not in str(exc)
        event("refused at load")
        return
    compiled = re.compile(pattern)
    budget = STACKS.MatchBudget(BUDGET_S)
    try:
        found = budget.search(compiled, line, "--match", 7)
    except STACKS.MatchTimeout as exc:
        assert budget.left == 0.0
        assert str(exc).startswith(f"--match: the pattern's searches ran past their {BUDGET_S:g} s budget")
        event("stopped by the budget")
        return
    expected = compiled.search(line[: STACKS.MATCH_CMDLINE_CHARS])  # as quick as the search just done
    assert (found.span() if found else None) == (expected.span() if expected else None)
    event("answered")


@pytest.mark.parametrize("pattern", ["(a+)+$", "(a*)*b", "((a|b)+x?)+", r"(?:\s*a)+!", "(a{1,40})+$"])
def test_the_grammar_reaches_nested_repetition_and_load_refuses_it(workdir: Path, pattern: str) -> None:
    """The kinds of pattern the grammar above generates that must never reach a host."""
    with pytest.raises(ConfigError, match=r"jobs\.j\.process\.match: nested repetition"):
        load_inventory(write(workdir, pattern), environ={})
