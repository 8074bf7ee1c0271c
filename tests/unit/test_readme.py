"""The README's tour runs: every tour command that needs no inventory, cluster or missing file is
run as written, so the docs cannot drift from the CLI.

The lines are split at collection, not skipped: :func:`runnable` says why a line cannot run here, and
such a line is still checked to name real commands and options of the CLI (without running it).
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer.main

from robustctl.cli.main import app, main
from robustctl.exit_codes import ExitCode

ROOT = Path(__file__).resolve().parent.parent.parent
NEEDS_A_CLUSTER = {"-i", "--inventory", "--job", "-j", "--from-report"}
ACTIONS = {"evict", "return"}  # act on named hosts of an inventory
SLOW = {("diagnose",)}  # a full run of this machine (all four levels): `make run` and the integration tests
ROOT_OPTIONS = {"-h", "--help", "-v", "--verbose"}  # accepted after any command (main() takes -v anywhere)


def tour() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"^## A quick tour\n+```\n(.*?)^```", text, flags=re.S | re.M)
    assert m, "README.md has no code block under '## A quick tour'"
    return [line for line in m.group(1).splitlines() if line.startswith("robustctl ")]


def words(line: str) -> list[str]:
    """The argv of a tour line, without ``robustctl`` and the comment."""
    return shlex.split(line, comments=True)[1:]


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


TOUR = tour()
RUN = [line for line in TOUR if runnable(words(line)) is None]
NOT_RUN = [line for line in TOUR if runnable(words(line)) is not None]


def alternatives(argv: list[str]) -> list[list[str]]:
    """The commands a line names: ``standby list | check | add HOSTS`` is the README's shorthand for
    ``standby list``, ``standby check`` and ``standby add HOSTS``."""
    if "|" not in argv:
        return [argv]
    parts: list[list[str]] = [[]]
    for word in argv:
        if word == "|":
            parts.append([])
        else:
            parts[-1].append(word)
    group = parts[0][:-1]
    return [parts[0], *([*group, *part] for part in parts[1:])]


@functools.cache
def cli() -> Any:
    """robustctl's command tree (click's, built by typer)."""
    return typer.main.get_command(app)


def command_of(argv: list[str]) -> tuple[list[str], set[str], list[str]]:
    """(the command path ``argv`` names, that command's options, the words after the path)."""
    cmd, path, rest = cli(), [], list(argv)
    while hasattr(cmd, "commands"):  # a group: the next word names one of its commands
        assert rest and rest[0] in cmd.commands, f"robustctl {' '.join(path)}: no command {rest[:1]}"
        path.append(rest.pop(0))
        cmd = cmd.commands[path[-1]]
    options = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")}
    return path, options, rest


def test_the_tour_is_found_and_split_into_lines_run_and_lines_checked() -> None:
    assert len(TOUR) >= 15
    assert len(RUN) >= 10, RUN
    assert sorted(RUN + NOT_RUN) == sorted(TOUR)
    assert all(runnable(words(line)) for line in NOT_RUN)


@pytest.mark.parametrize("line", RUN)
def test_tour_command_runs(
    line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = words(line)
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


@pytest.mark.parametrize("line", NOT_RUN)
def test_tour_line_not_run_here_names_real_commands_and_options(line: str) -> None:
    """A line that cannot run here says why, and every command and option it names exists."""
    argv = words(line)
    assert runnable(argv)
    for command in alternatives(argv):
        path, options, rest = command_of(command)
        named = {w.split("=", 1)[0] for w in rest if w.startswith("-") and w != "-"}
        assert named <= options | ROOT_OPTIONS, f"robustctl {' '.join(path)}: no option {named - options}"


def test_the_command_check_tells_a_wrong_line() -> None:
    path, options, rest = command_of(["standby", "activate", "--for", "node017"])
    assert path == ["standby", "activate"] and "--for" in options and rest == ["--for", "node017"]
    assert "--bogus" not in options
    with pytest.raises(AssertionError, match="no command"):
        command_of(["standby", "nosuch"])
    with pytest.raises(AssertionError, match="no command"):
        command_of(["nosuch"])
