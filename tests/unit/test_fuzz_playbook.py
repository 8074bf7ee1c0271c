"""Playbook expressions and files under hostile input: whatever the text, :func:`compile_expr` and
:func:`evaluate` answer or raise :class:`ExpressionError` (one line), evaluation stays bounded (no huge
numbers, strings or lists), and a playbook file of any content validates or is a PlaybookError.
Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples."""

from __future__ import annotations

import resource
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.errors import ConfigError
from robustctl.playbooks.expr import (
    MAX_EXPR_CHARS,
    MAX_NUMBER,
    ExpressionError,
    compile_expr,
    evaluate,
)
from robustctl.playbooks.schema import PlaybookError, parse_playbook
from tests.unit.test_fuzz_inventory import NON_STRING_KEYS

pytestmark = pytest.mark.fuzz

NAMES: dict[str, Any] = {
    "steps": {
        "diag": {"exit_code": 2, "suspects": ["node01", "node02"], "step": {"status": "done"}, "items": 3},
        "evict": {"exit_code": None, "step": {"status": "not-run"}},
    },
    "params": {"job": "llama", "hosts": "node01,node02"},
}

TOKENS = (
    "steps", "params", ".", "diag", "evict", "exit_code", "suspects", "step", "status", "items", "keys",
    "__class__", "__globals__", "_x", "(", ")", "[", "]", "0", "1", "-1", "2", "9" * 30, "1e308", "'a'",
    '"done"', "==", "!=", "<", ">", "in", "not", "and", "or", "if", "else", "+", "-", "*", "/", "%", "**",
    "len", "any", "all", "min", "max", "sum", "lambda", ":", ",", " ", "x", "true", "null", "None",
    "import", "__import__", "open", "eval", "f'{1}'", "\x00", "\udcff", "\n", "[x for x in steps]",
    "'a'*999999", "format", "mro",
)  # fmt: skip

EXPR = st.lists(st.sampled_from(TOKENS), max_size=30).map(" ".join) | st.text(max_size=200)


@given(EXPR)
def test_any_text_compiles_or_raises_expression_error(text: str) -> None:
    try:
        c = compile_expr(text)
    except ExpressionError as exc:
        assert "\n" not in str(exc).strip() or "does not parse" in str(exc)
        return
    try:
        value = evaluate(c, NAMES)
    except ExpressionError:
        return
    assert _bounded(value)


def _bounded(value: Any) -> bool:
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, (int, float)):
        return abs(value) <= MAX_NUMBER or value != value
    if isinstance(value, str):
        return len(value) <= 100_000
    if isinstance(value, list):
        return len(value) <= 1000 and all(_bounded(v) for v in value)
    if isinstance(value, dict):
        return True  # a document of the data itself
    return False


@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=8).map(" ".join))
def test_expressions_with_the_data_never_escape_the_data(text: str) -> None:
    """Whatever compiles yields plain data, never a Python object (a method, a class, a module)."""
    try:
        value = evaluate(compile_expr(text), NAMES)
    except ExpressionError:
        return
    assert isinstance(value, (bool, int, float, str, list, dict, type(None)))


@pytest.mark.parametrize(
    "text",
    [
        "9" * 16 + " * " + "9" * 15,  # literal out of range
        "999999999999999 * 999999999999999",
        "steps.diag.suspects * 1000000",
        "params.job + params.job",
        "2 ** 1000000",
        "'x' * 100000000",
        "(" * 250 + "1" + ")" * 250,  # past the parser's nesting limit
        "x" * (MAX_EXPR_CHARS + 1),
        " + ".join(["1"] * 150),
        "steps.diag.__class__",
        "steps.diag.items()",
        "len.__self__",
        "[x for x in steps.diag.suspects]",
        "__import__('os')",
    ],
)
def test_big_or_escaping_expressions_are_refused(text: str) -> None:
    with pytest.raises(ExpressionError):
        evaluate(compile_expr(text), NAMES)


def test_a_key_named_like_a_method_is_the_key() -> None:
    assert evaluate(compile_expr("steps.diag.items + 1"), NAMES) == 4
    assert evaluate(compile_expr("steps.diag.exit_code == 2 and len(steps.diag.suspects) > 0"), NAMES) is True
    assert evaluate(compile_expr('"node01" in steps.diag.suspects and steps.evict.exit_code == null'), NAMES)
    assert evaluate(compile_expr('steps["diag"].suspects[-1]'), NAMES) == "node02"
    assert evaluate(compile_expr("max(steps.diag.suspects) if true else 0"), NAMES) == "node02"


def test_evaluation_memory_stays_bounded() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for text in ("'ab' in params.job", "steps.diag.suspects == steps.diag.suspects", "sum([1, 2, 3]) * 1000"):
        evaluate(compile_expr(text), NAMES)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000  # KiB


PLAYBOOK_TOKENS = (
    "name: x\n", "steps:\n", "  - id: a\n", "    kind: diagnose\n", "    kind: evict\n", "params: {job: {}}\n",
    "    when: steps.a.exit_code == 2\n", "    next: a\n", "    on_failure: {goto: b}\n", "  - id: b\n",
    "    kind: notify\n", "    args: {command: [true]}\n", "    retries: 3\n", "&a [1]\n", "*a\n", "- \n",
    ": :\n", "\t", "\x00", "\udcff", "'", "{", "]", "    timeout_s: 1e999\n", "    args: {hosts_from: 'x'}\n",
)  # fmt: skip


@given(st.lists(st.sampled_from(PLAYBOOK_TOKENS), max_size=14).map("".join) | st.text(max_size=300))
def test_any_playbook_text_validates_or_is_a_config_error(text: str) -> None:
    try:
        pb = parse_playbook(text, "fuzz.yaml")
    except PlaybookError as exc:
        assert exc.errors and all(e.startswith("fuzz.yaml") for e in exc.errors)
        return
    except ConfigError as exc:  # pragma: no cover - every error is a PlaybookError
        pytest.fail(f"not a PlaybookError: {exc}")
    assert pb.spec.steps


def test_a_step_graph_of_many_steps_is_bounded() -> None:
    def step(i: int) -> str:
        when = f"    when: steps.s{i - 1}.exit_code == 0\n" if i else ""
        return f'  - id: s{i}\n    kind: notify\n    args: {{command: ["true"]}}\n' + when

    pb = parse_playbook("name: many\nsteps:\n" + "".join(step(i) for i in range(64)), "many.yaml")
    assert len(pb.spec.steps) == 64
    with pytest.raises(PlaybookError) as exc:
        parse_playbook("name: many\nsteps:\n" + "".join(step(i) for i in range(65)), "m.yaml")
    assert "steps: List should have at most 64 items" in str(exc.value)


# Issue 21, item 10: a key of another type than a string is named at its own line, as written.
PLAYBOOK_DOC = [
    (0, "name: p"),
    (0, "params:"),
    (2, "job: {required: true}"),
    (0, "steps:"),
    (2, "- id: a"),
    (4, "kind: notify"),
    (4, "args:"),
    (6, "command: ['true']"),
]
"""A valid playbook, (indent, line) by line."""
PLAYBOOK_SLOTS = {(0, 0): "", (2, 2): "params.", (3, 0): "", (5, 4): "steps[0].", (8, 6): "steps[0].args."}
"""(insert before line index, indent) where a mapping of PLAYBOOK_DOC continues, and its dotted path."""


@st.composite
def playbooks_with_a_non_string_key(draw: st.DrawFn) -> tuple[str, int, str]:
    """``(text, line of the key, the error's expected start after FILE:LINE)``."""
    slot = draw(st.sampled_from(sorted(PLAYBOOK_SLOTS)))
    key = draw(NON_STRING_KEYS)
    lines: list[str] = []
    key_line = 0
    for i, (indent, text) in enumerate([*PLAYBOOK_DOC, (0, "")]):
        for _ in range(draw(st.integers(0, 2))):
            lines.append(draw(st.sampled_from(("", "  ", "# a comment"))))
        if i == slot[0]:
            lines.append(" " * slot[1] + f"{key}: {draw(st.sampled_from(('1', 'x', '[a]', 'null')))}")
            key_line = len(lines)
        if text:
            lines.append(" " * indent + text)
    return "\n".join(lines) + "\n", key_line, f"{PLAYBOOK_SLOTS[slot]}{key}: key {key!r} reads as "


@given(playbooks_with_a_non_string_key())
def test_a_non_string_key_in_a_playbook_is_named_at_its_line(case: tuple[str, int, str]) -> None:
    text, line, expected = case
    with pytest.raises(PlaybookError) as info:
        parse_playbook(text, "fuzz.yaml")
    assert info.value.errors[0].startswith(f"fuzz.yaml:{line}: {expected}"), (info.value.errors, text)
