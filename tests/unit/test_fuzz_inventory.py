"""Property-based tests of the inventory loader (issue 9): whatever the file holds, loading it either
succeeds or raises ConfigError/InventoryError (one line), and ``robustctl inventory validate`` exits 0 or
78, never 3 and never with a traceback.

Inputs: random text, random YAML structures (dumped by PyYAML, some under ``hosts:``), nested aliases,
mutated copies of the valid inventories of ``test_inventory.py``, and random environment overrides.
Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from robustctl.cli.main import main
from robustctl.errors import ConfigError
from robustctl.inventory import Inventory, load_inventory
from tests.unit.test_inventory import BILLION_LAUGHS, GOOD, JOBS

pytestmark = pytest.mark.fuzz

SEEDS = (GOOD, JOBS, BILLION_LAUGHS)

TOKENS = (
    "&a ", "*a", "&b ", "*b", "!!python/object:os.system ", "!!binary ", "!!int ", "!!float ", "!!set ",
    "? ", ": ", "- ", "[", "]", "{", "}", ",", "#", "'", '"', "\t", "\n", "  ", "---\n", "...\n",
    "%YAML 1.1\n", "<<: *a\n", "2024-13-45", "1e999", "0x", "~", "null", "yes", "\x00", "\ufeff", "é",
    "name: ", "hosts:", "node[01-", "[/]", "127.0.0.1", "9" * 40,
)  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """A valid inventory with a few characters deleted, replaced or inserted (YAML tokens mostly)."""
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(("delete", "insert", "replace", "duplicate")))
        if op == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 20)) :]
        elif op == "insert":
            text = text[:i] + draw(st.sampled_from(TOKENS) | st.text(max_size=5)) + text[i:]
        elif op == "replace":
            text = text[:i] + draw(st.sampled_from(TOKENS)) + text[i + 1 :]
        else:
            j = draw(st.integers(i, len(text)))
            text = text[:i] + text[i:j] * draw(st.integers(2, 4)) + text[j:]
    return text


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=20)
    | st.sampled_from(
        ("node[01-04]", "127.0.0.[2-5]", "local", "ssh", "standby", "tp-cp-ep-dp-pp", "(", "\\")
    )
)
KEYS = st.sampled_from(
    ("hosts", "name", "address", "ssh", "port", "diagnose", "concurrency", "jobs", "layout", "process",
     "match", "labels", "state", "transport", "python", "wrapper", "policy", "scheduler", "kind", "thresholds")
) | st.text(max_size=8)  # fmt: skip
STRUCTURES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=25,
)


@st.composite
def generated(draw: st.DrawFn) -> str:
    """A random YAML structure, as a document or as the value of ``hosts:``."""
    data: Any = draw(STRUCTURES)
    if draw(st.booleans()):
        data = {"hosts": data, **draw(st.dictionaries(KEYS, STRUCTURES, max_size=3))}
    return yaml.safe_dump(data, allow_unicode=draw(st.booleans()))


@st.composite
def aliases(draw: st.DrawFn) -> str:
    """Nested aliases: each level a list of ``width`` references to the previous one."""
    width, depth = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    lines = ["a0: &a0 [lol]"]
    for k in range(1, depth + 1):
        lines.append(f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * width)}]")
    lines.append(f"hosts: [*a{depth}]" if draw(st.booleans()) else f"hosts: [{{name: n, labels: *a{depth}}}]")
    return "\n".join(lines) + "\n"


DOCUMENTS = st.text(max_size=300) | generated() | mutated() | aliases()
ENV_VARS = ("ROBUSTCTL_CONCURRENCY", "ROBUSTCTL_HOST_TIMEOUT", "ROBUSTCTL_DEADLINE", "ROBUSTCTL_SSH_USER")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-inventory")


def _write(workdir: Path, text: str) -> Path:
    path = workdir / "cluster.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return path


def _load(path: Path, environ: dict[str, str]) -> Inventory | None:
    try:
        return load_inventory(path, environ=environ)
    except ConfigError as exc:  # InventoryError is a ConfigError
        assert str(exc) and "\n" not in str(exc), f"not one line: {exc!r}"
        assert str(exc).startswith(("$ROBUSTCTL_", str(path))), f"names neither file nor variable: {exc}"
        return None


@given(DOCUMENTS)
def test_loader_raises_only_config_errors(workdir: Path, text: str) -> None:
    _load(_write(workdir, text), {})


@given(
    mutated(),
    st.dictionaries(
        st.sampled_from(ENV_VARS), st.text(max_size=12) | st.from_regex(r"-?\d{1,25}", fullmatch=True)
    ),
)
def test_loader_with_environment_overrides(workdir: Path, text: str, env: dict[str, str]) -> None:
    _load(_write(workdir, text), env)


@given(st.binary(max_size=200))
def test_loader_on_random_bytes(workdir: Path, data: bytes) -> None:
    path = workdir / "cluster.yaml"
    path.write_bytes(data)
    _load(path, {})


@given(DOCUMENTS)
def test_validate_exits_0_or_78(workdir: Path, text: str) -> None:
    path = _write(workdir, text)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["inventory", "validate", str(path)])
    assert code in (0, 78), f"exit {code}: {err.getvalue()[-2000:]}"
    assert "Traceback" not in err.getvalue()


# Issue 21, item 10: a key of another type than a string is named at its own line, as written.
NULLS = st.sampled_from(("null", "Null", "NULL", "~"))
BOOLS = st.sampled_from(("true", "false", "True", "FALSE", "yes", "No", "on", "OFF", "y", "n"))
INTS = st.integers(-(10**30), 10**30).map(str) | st.sampled_from(("0x1F", "0b101", "1_000", "+5", "017"))
FLOATS = st.floats(allow_nan=False, allow_infinity=False).map(repr).filter(
    lambda t: "." in t
) | st.sampled_from((".inf", "-.inf", ".NaN", "1.5e+3", "6.8523015e+5", "1_000.5"))
DATES = st.dates().map(lambda d: d.isoformat()).filter(lambda t: t[0] != "0") | st.sampled_from(
    ("2001-12-14t21:59:43.10-05:00", "2001-12-14 21:59:43.10 -5", "2002-12-14")
)


def _reads_as_no_string(text: str) -> bool:
    node = yaml.compose(f"{text}: 1", Loader=yaml.SafeLoader)
    return bool(node.value[0][0].tag != "tag:yaml.org,2002:str")


NON_STRING_KEYS = (NULLS | BOOLS | INTS | FLOATS | DATES).filter(_reads_as_no_string)
"""Plain scalars YAML 1.1 (PyYAML's SafeLoader) reads as null, a boolean, an integer, a float or a date
(checked: the filter drops one the resolver would read as a string)."""

KEY_DOC = [
    (0, "hosts:"),
    (2, "- name: n1"),
    (4, "labels:"),
    (6, "rack: r1"),
    (0, "jobs:"),
    (2, "j:"),
    (4, "hosts: n1"),
    (4, "process:"),
    (6, "match: train"),
]
"""A valid inventory, (indent, line) by line; a key may go after any line at an indent of a mapping
open there (a key at indent 2 after ``hosts:`` would be a sequence's sibling, so slots are listed)."""
KEY_SLOTS = ((0, 0), (2, 4), (4, 6), (9, 0), (6, 4), (7, 4), (9, 6), (9, 4))
"""(insert before line index, indent) pairs where a mapping of KEY_DOC continues; KEY_PATHS: its path."""
KEY_PATHS = {
    (0, 0): "",
    (2, 4): "hosts[0].",
    (4, 6): "hosts[0].labels.",
    (9, 0): "",
    (6, 4): "jobs.j.",
    (7, 4): "jobs.j.",
    (9, 6): "jobs.j.process.",
    (9, 4): "jobs.j.",
}


@st.composite
def documents_with_a_non_string_key(draw: st.DrawFn) -> tuple[str, int, str, str]:
    """``(text, line of the key, key as written, its dotted path)``: KEY_DOC with blank and comment
    lines anywhere and one key that reads as no string, at a random line."""
    slot = draw(st.sampled_from(KEY_SLOTS))
    key = draw(NON_STRING_KEYS)
    lines: list[str] = []
    key_line = 0
    for i, (indent, text) in enumerate([*KEY_DOC, (0, "")]):
        for _ in range(draw(st.integers(0, 2))):
            lines.append(draw(st.sampled_from(("", "   ", "# a comment", "  # indented: comment"))))
        if i == slot[0]:
            lines.append(" " * slot[1] + f"{key}: {draw(st.sampled_from(('1', 'x', '[a]', '{}', 'null')))}")
            key_line = len(lines)
        if text:
            lines.append(" " * indent + text)
    return "\n".join(lines) + "\n", key_line, key, f"{KEY_PATHS[slot]}{key}"


@given(documents_with_a_non_string_key())
def test_a_non_string_key_is_named_at_its_line(workdir: Path, case: tuple[str, int, str, str]) -> None:
    text, line, key, dotted = case
    path = _write(workdir, text)
    try:
        load_inventory(path, environ={})
    except ConfigError as exc:
        assert str(exc).startswith(f"{path}:{line}: {dotted}: key {key!r} reads as "), (str(exc), text)
    else:
        pytest.fail(f"key {key!r} at line {line} was accepted:\n{text}")
