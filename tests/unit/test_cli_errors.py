"""Flags are usage errors (64), files and outputs are config errors (78): never exit 3 for bad input.

Bounds (documented in the options' help and the README): ``--deadline``/``--host-timeout``/
``--burn-seconds`` at most a day (86,400 s, the inventory's own bound); ``stacks --interval``/
``--sample-interval`` at most an hour; ``standby size --machines`` at most 1,000,000
(:data:`robustctl.actions.standby.MAX_POOL_MACHINES`), ``--history-days`` at most 3,650.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from robustctl.actions import open_context
from robustctl.actions.standby import MAX_POOL_MACHINES, check_standbys, pool_size
from robustctl.cli.main import main
from robustctl.commands.standby import StandbySizeRequest, run_standby_size
from robustctl.errors import HostUnreachable, UsageError
from robustctl.store import MachineState, Store, StoreError
from robustctl.testing.fake_transport import FakeTransport
from robustctl.transport.pool import TransportPool

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("flag", ["--deadline", "--host-timeout", "--burn-seconds"])
@pytest.mark.parametrize("value", ["inf", "1e308", "nan", "-inf", "86401"])
def test_diagnose_numeric_flags_are_bounded_usage_errors(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diagnose", "--dry-run", "--json", flag, value]) == 64
    out, err = capsys.readouterr()
    assert out == ""
    assert flag in err and "Traceback" not in err


def test_diagnose_deadline_at_the_bound_serialises(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "--dry-run", "--json", "--deadline", "86400"]) == 0
    assert '"deadline_s": 86400.0' in capsys.readouterr().out


@pytest.mark.parametrize("hosts", ["node[1-", "nosuchhost", "node[3-1]"])
def test_diagnose_bad_hosts_flag_is_a_usage_error(hosts: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "--dry-run", "--hosts", hosts]) == 64
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("robustctl: error:")


def test_standby_size_machines_is_capped_and_fast(capsys: pytest.CaptureFixture[str]) -> None:
    t0 = time.monotonic()
    assert main(["standby", "size", "--machines", str(10**15), "--daily-failure-rate", "0.001"]) == 64
    assert "--machines" in capsys.readouterr().err
    with pytest.raises(UsageError, match="1,000,000"):
        pool_size(MAX_POOL_MACHINES + 1, 0.001)
    assert pool_size(MAX_POOL_MACHINES, 0.5) > 0  # the worst case at the cap: one O(k) pass
    assert time.monotonic() - t0 < 20
    for days in (float("inf"), float("nan"), 0.0, 3651.0):
        with pytest.raises(UsageError, match="--history-days"):
            run_standby_size(StandbySizeRequest(machines=10, from_history=True, history_days=days))


INVENTORY = """\
hosts:
  - name: node[01-02]
    address: 127.0.0.[2-3]
  - name: spare1
    address: 127.0.0.10
    state: standby
"""


def test_standby_check_skips_a_store_standby_the_inventory_no_longer_has(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY)
    ctx = open_context(inv, tmp_path / "state.db")
    try:
        ctx.store.set_state("ghost", MachineState.STANDBY, "removed from the inventory since")
        fake = FakeTransport({"spare1": {"host": HostUnreachable("spare1", "connection refused")}})
        checked = check_standbys(ctx, TransportPool(override=fake))
        assert [h for h, _, _ in checked.results] == ["spare1"]
        assert checked.not_in_inventory == ("ghost",)
    finally:
        ctx.close()
    inv.write_text(INVENTORY.replace("    state: standby\n", ""))
    ctx = open_context(inv, tmp_path / "state.db")
    try:
        ctx.store.set_state("spare1", MachineState.ACTIVE, "back in service")
        with pytest.raises(UsageError, match="not in the inventory, so not checked: ghost"):
            check_standbys(ctx, TransportPool(override=FakeTransport({})))
    finally:
        ctx.close()


def _robustctl(args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "robustctl", *args], env=env, text=True, timeout=60, **kw
    )


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize(
    "args",
    [
        ["diagnose", "--dry-run", "--json"],
        ["standby", "size", "--machines", "100", "--daily-failure-rate", "0.01"],
    ],
)
def test_a_full_stdout_is_one_line_and_exit_78(args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        p = _robustctl(args, stdout=full, stderr=subprocess.PIPE)
    assert p.returncode == 78
    assert (
        p.stderr.strip().splitlines()[-1]
        == "robustctl: error: cannot write output to stdout: No space left on device"
    )
    assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr


def test_a_state_path_that_is_not_a_regular_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for bad in (Path(os.devnull), fifo, tmp_path):
        with pytest.raises(StoreError, match="not a regular file"):
            Store.open(bad)
    assert not Path(os.devnull + "-journal").exists() and not (tmp_path / "fifo-journal").exists()
    assert main(["hosts", "--state", os.devnull]) == 78
    assert "not a regular file" in capsys.readouterr().err


def test_inventory_show_and_stacks_bad_hosts_flag_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = tmp_path / "c.yaml"
    inv.write_text(
        "hosts:\n  - name: n[1-2]\n    address: 127.0.0.[2-3]\n"
        "jobs:\n  j:\n    hosts: n[1-2]\n    layout: {tp: 1, pp: 1, dp: 2}\n"
    )
    assert main(["inventory", "show", str(inv), "--hosts", "n9"]) == 64
    assert main(["stacks", "-i", str(inv), "-j", "j", "--hosts", "n[1-"]) == 64
    err = capsys.readouterr().err
    assert "unknown host 'n9'" in err and "Traceback" not in err


def test_diagnose_settings_refuse_non_finite_flags_naming_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from robustctl.commands.options import DiagnoseFlags, diagnose_settings
    from robustctl.inventory import default_inventory

    base = default_inventory().diagnose
    for flags, name in [
        (DiagnoseFlags(deadline_s=float("inf")), "--deadline"),
        (DiagnoseFlags(host_timeout_s=1e308), "--host-timeout"),
        (DiagnoseFlags(burn_seconds=float("nan")), "--burn-seconds"),
        (DiagnoseFlags(concurrency=10**20), "--concurrency"),
    ]:
        with pytest.raises(UsageError, match=f"bad {name}:"):
            diagnose_settings(base, flags, {})
    assert main(["diagnose", "--dry-run", "--concurrency", str(10**20)]) == 64
    assert "bad --concurrency" in capsys.readouterr().err
