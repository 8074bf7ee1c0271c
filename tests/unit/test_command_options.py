"""Option layering in one place: inventory file < environment ROBUSTCTL_* < flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from robustctl.commands.diagnose import diagnose_request
from robustctl.commands.options import DiagnoseFlags, diagnose_settings, parse_duration, state_path
from robustctl.config import DiagnoseSettings
from robustctl.errors import ConfigError, UsageError


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    p = tmp_path / "inv.yaml"
    p.write_text(
        "diagnose: {concurrency: 8, host_timeout_s: 30, deadline_s: 300, burn: {seconds: 4}}\n"
        "hosts:\n  - {name: n1, address: 127.0.0.2}\n"
    )
    return p


def test_file_then_environment_then_flags(inv: Path) -> None:
    r = diagnose_request(inventory=inv, environ={})
    assert (r.settings.concurrency, r.settings.host_timeout_s, r.settings.deadline_s) == (8, 30, 300)
    assert r.settings.burn.seconds == 4
    env = {"ROBUSTCTL_CONCURRENCY": "16", "ROBUSTCTL_HOST_TIMEOUT": "45"}
    r = diagnose_request(inventory=inv, environ=env)
    assert (r.settings.concurrency, r.settings.host_timeout_s, r.settings.deadline_s) == (16, 45, 300)
    r = diagnose_request(inventory=inv, environ=env, concurrency=2, deadline_s=60, burn_seconds=1)
    assert (r.settings.concurrency, r.settings.host_timeout_s, r.settings.deadline_s) == (2, 45, 60)
    assert r.settings.burn.seconds == 1


def test_environment_applies_to_the_embedded_default() -> None:
    r = diagnose_request(environ={"ROBUSTCTL_CONCURRENCY": "3"})
    assert r.inventory.source == "<embedded default>" and r.settings.concurrency == 3
    assert diagnose_request(environ={}).settings.concurrency == DiagnoseSettings().concurrency


def test_inventory_from_environment(inv: Path) -> None:
    r = diagnose_request(environ={"ROBUSTCTL_INVENTORY": str(inv)})
    assert r.inventory.source == str(inv) and [h.name for h in r.hosts] == ["n1"]


def test_bad_environment_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"\$ROBUSTCTL_CONCURRENCY='zero'"):
        diagnose_settings(DiagnoseSettings(), environ={"ROBUSTCTL_CONCURRENCY": "zero"})


def test_flags_over_settings_are_validated() -> None:
    assert diagnose_settings(DiagnoseSettings(), DiagnoseFlags(concurrency=5), environ={}).concurrency == 5
    with pytest.raises(UsageError):
        diagnose_settings(DiagnoseSettings(), DiagnoseFlags(concurrency=0), environ={})


def test_state_path_flag_over_environment(tmp_path: Path) -> None:
    assert state_path(tmp_path / "a.db", {"ROBUSTCTL_STATE": "/x.db"}) == tmp_path / "a.db"
    assert state_path(None, {"ROBUSTCTL_STATE": str(tmp_path / "b.db")}) == tmp_path / "b.db"
    assert state_path(None, {"XDG_STATE_HOME": str(tmp_path)}) == tmp_path / "robustctl" / "state.db"


def test_parse_duration() -> None:
    assert [parse_duration(t) for t in ("90", "90s", "30m", "24h", "7d", "2w")] == [
        90,
        90,
        1800,
        86400,
        604800,
        1209600,
    ]
    with pytest.raises(UsageError):
        parse_duration("soon")


def test_cli_layers_the_same_way(
    inv: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from robustctl.cli.main import main

    monkeypatch.setenv("ROBUSTCTL_CONCURRENCY", "16")
    monkeypatch.setenv("ROBUSTCTL_DEADLINE", "200")
    assert main(["diagnose", "-i", str(inv), "--dry-run", "--json", "-q", "--deadline", "100"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["concurrency"], plan["host_timeout_s"], plan["deadline_s"]) == (16, 30, 100)
