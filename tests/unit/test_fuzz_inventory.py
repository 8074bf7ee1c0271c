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
