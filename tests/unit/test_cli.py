"""The CLI boundary: help everywhere, exit codes from the one table, one-line errors, JSON on stdout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from robustctl.cli.main import app, command_tree, main
from robustctl.exit_codes import ExitCode


def commands() -> list[list[str]]:
    """Every command path (root, each command, each group and its subcommands), from the click tree."""
    import typer.main

    out: list[list[str]] = []

    def walk(cmd: Any, path: list[str]) -> None:
        out.append(path)
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return out


def description(path: list[str]) -> str:
    """The first line of the command's docstring or help (what its help must show)."""
    import typer.main

    cmd: Any = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return " ".join((cmd.help or "").strip().split("\n\n")[0].split())


@pytest.mark.parametrize("cmd", [pytest.param(c, id=" ".join(c) or "root") for c in commands()])
def test_every_command_has_help_with_description_and_examples(
    cmd: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    assert main([*cmd, "--help"]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.replace("│", " ").split())
    assert "Usage:" in out
    assert description(cmd) and description(cmd) in flat
    assert "Examples:" in out and "$ robustctl" in out


def test_switches_show_no_type_tag(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["--help"]) == 0
    root = capsys.readouterr().out
    assert main(["diagnose", "--help"]) == 0
    diag = capsys.readouterr().out
    for line in [*root.splitlines(), *diag.splitlines()]:
        if any(f" {opt} " in line for opt in ("--verbose", "--version", "--json", "--dry-run", "--help")):
            assert "<bool>" not in line and "<int>" not in line, line
    assert "<int range>" in diag  # options that take a value keep their type


def test_verbose_after_the_subcommand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from robustctl.cli.common import State

    inv = tmp_path / "c.yaml"
    inv.write_text("hosts:\n  - name: n1\n    address: 127.0.0.2\n")
    for argv, level in (
        (["diagnose", "-i", str(inv), "--dry-run", "-v"], 1),
        (["-v", "diagnose", "-i", str(inv), "--dry-run", "-vv"], 3),
        (["diagnose", "--verbose", "-i", str(inv), "--dry-run"], 1),
        (["diagnose", "-i", str(inv), "--dry-run"], 0),
    ):
        assert main(argv) == 0, argv
        assert State.verbose == level, argv
    capsys.readouterr()


def test_shell_completion_is_offered(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The shell named on the command line, not detected from the processes above this one (under
    # make that is /bin/sh, which typer does not support): typer's switch for this, read when it
    # builds the command tree, so the tree is built again as in a new process.
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    command_tree.cache_clear()
    try:
        assert main(["--show-completion", "bash"]) == 0
        assert "_ROBUSTCTL_COMPLETE" in capsys.readouterr().out
    finally:
        command_tree.cache_clear()  # the next test's tree is built in its own environment


def test_exit_code_table_is_stable() -> None:
    assert {e.name: int(e) for e in ExitCode} == {
        "OK": 0,
        "WARNING": 1,
        "CRITICAL": 2,
        "UNKNOWN": 3,
        "USAGE": 64,
        "CONFIG": 78,
        "INTERRUPTED": 130,
    }


@pytest.mark.parametrize(
    "argv",
    [["nonsense"], ["diagnose", "--level", "7"], ["diagnose", "--no-such-flag"], ["inventory", "validate"]],
)
def test_usage_errors_exit_64_not_critical(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == ExitCode.USAGE
    assert "Traceback" not in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("robustctl ")


def test_bad_inventory_is_78_with_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "c.yaml"
    inv.write_text("hosts:\n  - name: n1\n    adress: 127.0.0.2\n")
    assert main(["inventory", "validate", str(inv)]) == ExitCode.CONFIG
    err = capsys.readouterr().err
    assert err.strip() == f"robustctl: error: {inv}:3: hosts[0].adress: unknown key 'adress'"
    assert main(["diagnose", "-i", str(inv)]) == ExitCode.CONFIG


def test_hostile_host_name_is_a_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "c.yaml"
    inv.write_text("hosts:\n  - name: 'a;rm -rf /'\n")
    assert main(["diagnose", "-i", str(inv), "--dry-run"]) == ExitCode.CONFIG
    assert "invalid host name 'a;rm -rf /'" in capsys.readouterr().err


def test_inventory_validate_and_show_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "c.yaml"
    inv.write_text("hosts:\n  - name: n[1-3]\n    address: 127.0.0.[2-4]\n  - name: s1\n    state: standby\n")
    assert main(["inventory", "validate", str(inv), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is True and doc["hosts"] == {"active": 3, "standby": 1}
    assert doc["kind"] == "inventory-validate" and doc["schema_version"] == 1
    assert main(["inventory", "show", str(inv), "--json", "--hosts", "n[2-3]"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [h["address"] for h in doc["hosts"]] == ["127.0.0.3", "127.0.0.4"]
    assert doc["kind"] == "inventory" and doc["schema_version"] == 1


def test_unknown_host_selection_is_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "c.yaml"
    inv.write_text("hosts:\n  - name: n[1-3]\n    address: 127.0.0.[2-4]\n")
    assert main(["diagnose", "-i", str(inv), "--hosts", "n9", "--dry-run"]) == ExitCode.USAGE  # a flag
    assert "unknown host 'n9'" in capsys.readouterr().err


def test_dry_run_plan_connects_to_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "c.yaml"
    inv.write_text(
        "ssh: {user: ops, port: 2222}\npython: {path: python3, wrapper: [docker, exec, -i, trainer]}\n"
        "hosts:\n  - name: n[1-2]\n    address: 127.0.0.[2-3]\n"
    )
    assert main(["diagnose", "-i", str(inv), "--dry-run", "--json", "--level", "1", "-q"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["kind"] == "diagnose-plan" and plan["schema_version"] == 1
    assert [lv["level"] for lv in plan["levels"]] == [0, 1]
    assert plan["hosts"][0]["ssh"] == "ops@127.0.0.2:2222"
    assert plan["hosts"][0]["command"].startswith("docker exec -i trainer python3 -c ")


def test_output_file_unwritable_is_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "c.yaml"
    inv.write_text("hosts:\n  - name: n1\n    address: 127.0.0.2\n")
    code = main(
        ["diagnose", "-i", str(inv), "--dry-run", "-q", "-o", str(tmp_path / "no" / "dir" / "x.json")]
    )
    assert code == ExitCode.CONFIG
    assert "cannot write" in capsys.readouterr().err


def test_control_side_import_is_light() -> None:
    import subprocess
    import sys

    code = (
        "import sys, robustctl.cli.main; "
        "heavy = ('torch', 'paramiko', 'pynvml', 'kubernetes', 'numpy', 'robustctl.transport.ssh'); "
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


def test_defaults_in_option_help_are_shown_not_eaten_as_markup(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["diagnose", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "[default: 64]" in out and "Hosts contacted at once ." not in out
