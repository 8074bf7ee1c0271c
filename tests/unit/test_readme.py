"""The README's tour runs: every tour command that needs no inventory, cluster or missing file is
run as written, so the docs cannot drift from the CLI."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from robustctl.cli.main import main
from robustctl.exit_codes import ExitCode

ROOT = Path(__file__).resolve().parent.parent.parent
NEEDS_A_CLUSTER = {"-i", "--inventory", "--job", "-j", "--from-report"}
ACTIONS = {"evict", "return"}  # act on named hosts of an inventory
SLOW = {("diagnose",)}  # a full run of this machine (all four levels): `make run` and the integration tests


def tour() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"^## A quick tour\n+```\n(.*?)^```", text, flags=re.S | re.M)
    assert m, "README.md has no code block under '## A quick tour'"
    return [line for line in m.group(1).splitlines() if line.startswith("robustctl ")]


def runnable(argv: list[str]) -> str | None:
    """Why this tour command cannot run here, or None when it can."""
    if NEEDS_A_CLUSTER & set(argv) or argv[0] in ACTIONS or "|" in argv or "cluster.yaml" in argv:
        return "needs an inventory or a cluster"
    if tuple(argv) in SLOW:
        return "a full diagnose run"
    if argv[:2] == ["playbook", "resume"]:
        return "needs a run that was killed"
    if argv[0] == "standby" and argv[1] != "size":
        return "needs standbys"
    if argv[0] == "analyze" and not all((ROOT / a).exists() for a in argv[1:] if not a.startswith("-")):
        return "names files of the reader's own"
    return None


def test_the_tour_is_found_and_mostly_runnable() -> None:
    lines = tour()
    assert len(lines) >= 15
    ran = [line for line in lines if runnable(shlex.split(line, comments=True)[1:]) is None]
    assert len(ran) >= 5, ran


@pytest.mark.parametrize("line", tour())
def test_tour_command_runs(
    line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = shlex.split(line, comments=True)[1:]
    why = runnable(argv)
    if why is not None:
        pytest.skip(why)
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("ROBUSTCTL_STATE", str(tmp_path / "state.db"))
    monkeypatch.delenv("ROBUSTCTL_INVENTORY", raising=False)
    code = main(argv)
    err = capsys.readouterr().err
    assert code not in (ExitCode.USAGE, ExitCode.CONFIG, ExitCode.UNKNOWN), err
    assert "Traceback" not in err and "internal error" not in err
    said = re.search(r"P99: (\d+)", line)
    if said:  # the tour says what it prints
        assert main([*argv, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert int(said.group(1)) in doc.values(), doc
