"""tests/support/needs.py: "needed here" skips outside CI and fails in it; CI's allow-list of skips
matches the skip reasons the tests really give, and reads them from a pytest JUnit report."""

from __future__ import annotations

import ast
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.support.needs import ALLOWED_SKIPS, REQUIRE_ENV, allowed_skip, needed, skipped_tests

TESTS = Path(__file__).resolve().parents[1]


def test_needed_goes_on_when_nothing_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REQUIRE_ENV, "1")
    assert needed(None) is None


def test_needed_skips_with_the_reason_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in (None, "0", ""):
        if value is None:
            monkeypatch.delenv(REQUIRE_ENV, raising=False)
        else:
            monkeypatch.setenv(REQUIRE_ENV, value)
        with pytest.raises(pytest.skip.Exception, match=r"^no sshd here$"):
            needed("no sshd here")


def test_needed_fails_with_the_reason_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=r"^ROBUSTCTL_REQUIRE_TESTBED=1 but no sshd here$"):
        needed("no sshd here")


def _skip_reasons() -> set[str]:
    """Every skip reason written as a plain string under tests/: ``pytest.skip("…")``,
    ``skipif(…, reason="…")``, and what ``gpu_unavailable_reason`` (tests/conftest.py) returns."""
    found: set[str] = set()
    for path in TESTS.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr == "skip" and node.args and isinstance(node.args[0], ast.Constant):
                    found.add(str(node.args[0].value))
                if node.func.attr in ("skip", "skipif"):
                    found |= {str(k.value.value) for k in node.keywords if k.arg == "reason"
                              and isinstance(k.value, ast.Constant)}  # fmt: skip
            if isinstance(node, ast.FunctionDef) and node.name == "gpu_unavailable_reason":
                found |= {str(r.value.value) for r in ast.walk(node) if isinstance(r, ast.Return)
                          and isinstance(r.value, ast.Constant) and r.value.value}  # fmt: skip
    return found


def test_every_allowed_skip_is_a_reason_the_tests_give() -> None:
    reasons = _skip_reasons()
    assert "root reads files regardless of permissions" in reasons  # the scan finds skipif reasons
    stale = [pattern for pattern, _ in ALLOWED_SKIPS if not any(re.search(pattern, r) for r in reasons)]
    assert stale == [], f"ALLOWED_SKIPS entries no test skips with: {stale}"


@pytest.mark.parametrize(
    "message",
    [
        "no NVIDIA GPU here (no nvidia-smi, /dev/nvidia*, /proc/driver/nvidia)",
        "torch.cuda.is_available() is False and nvidia-smi lists no GPU",
        "root reads files regardless of permissions",
        "no Python 3.8 interpreter here",
        "one GPU: no intra-host all-reduce",
    ],
)
def test_allowed_skips(message: str) -> None:
    assert allowed_skip(message)


@pytest.mark.parametrize(
    "message",
    [
        "could not import 'torch': No module named 'torch'",  # CI installs torch
        "py-spy is not installed (pip install py-spy)",  # a dev dependency
        "the SSH testbed needs root",
        "needs a testbed of at least 6 hosts (ROBUSTCTL_TESTBED_HOSTS)",
        "needs standbys",
        "xfail: examples come with the action-command rework",
        "",
    ],
)
def test_other_skips_are_not_allowed(message: str) -> None:
    assert allowed_skip(message) is None


def test_skipped_tests_reads_skips_and_xfails_of_a_junit_report() -> None:
    report = ET.fromstring(
        '<testsuites><testsuite name="pytest" tests="4" skipped="3">'
        '<testcase classname="tests.unit.test_a" name="test_gpu">'
        '<skipped type="pytest.skip" message="no NVIDIA GPU here (x)">tests/unit/test_a.py:3: no NVIDIA'
        "</skipped></testcase>"
        '<testcase classname="tests.unit.test_a" name="test_b[1]">'
        '<skipped type="pytest.skip" message="a &lt;fake&gt; reason">…</skipped></testcase>'
        '<testcase classname="tests.unit.test_a" name="test_c"><skipped type="pytest.xfail" message="later" />'
        "</testcase>"
        '<testcase classname="tests.unit.test_a" name="test_ran" />'
        "</testsuite></testsuites>"
    )
    assert skipped_tests(report) == [
        ("tests.unit.test_a::test_gpu", "no NVIDIA GPU here (x)"),
        ("tests.unit.test_a::test_b[1]", "a <fake> reason"),
        ("tests.unit.test_a::test_c", "xfail: later"),
    ]
