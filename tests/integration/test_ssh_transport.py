"""robustctl's SSH transport against real sshd processes on loopback."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from robustctl.errors import CommandTimeout, ConfigError, HostKeyError, HostUnreachable, OutputTooLarge
from robustctl.inventory import Host, load_inventory
from robustctl.transport.base import MAX_STDERR_BYTES
from robustctl.transport.ssh import SshTransport, preflight

from .testbed import Testbed


def hosts_of(testbed: Testbed, tmp_path: Path, **overrides: object) -> list[Host]:
    inv = load_inventory(testbed.write_inventory(tmp_path / "inv.yaml", **overrides), environ={})
    return list(inv.hosts)


def test_runs_argv_quoted_once_with_stdin(testbed: Testbed, tmp_path: Path) -> None:
    h = hosts_of(testbed, tmp_path)[0]
    t = SshTransport()
    try:
        res = t.run(
            h, ["python3", "-c", "import sys; print(sys.argv[1])", "a;echo pwned $HOME"], timeout_s=20
        )
        assert res.exit_status == 0
        assert res.stdout.decode().strip() == "a;echo pwned $HOME"
        res = t.run(
            h, ["python3", "-"], stdin=b"import os; print(os.environ['ROBUSTCTL_PROBE_ROOT'])", timeout_s=20
        )
        assert res.stdout.decode().strip() == str(testbed.host_root(0))
        res = t.run(h, ["python3", "-c", "import sys; sys.stderr.write('e'); sys.exit(3)"], timeout_s=20)
        assert (res.exit_status, res.stderr) == (3, b"e")
    finally:
        t.close()


def test_connection_is_reused(testbed: Testbed, tmp_path: Path) -> None:
    h = hosts_of(testbed, tmp_path)[1]
    t = SshTransport()
    try:
        t.run(h, ["true"], timeout_s=20)
        t0 = time.monotonic()
        for _ in range(20):
            assert t.run(h, ["true"], timeout_s=20).exit_status == 0
        per_cmd = (time.monotonic() - t0) / 20
        # A new connection costs a key exchange; 20 reused channels must not each pay it.
        assert per_cmd < 0.5
    finally:
        t.close()


def test_large_output_on_both_streams_does_not_deadlock(testbed: Testbed, tmp_path: Path) -> None:
    h = hosts_of(testbed, tmp_path)[2]
    code = "import sys; sys.stdout.write('o'*5_000_000); sys.stderr.write('e'*3_000_000)"
    t = SshTransport()
    try:
        res = t.run(h, ["python3", "-c", code], timeout_s=60)
        # all of stdout (under its bound); stderr: its last MAX_STDERR_BYTES
        assert len(res.stdout) == 5_000_000 and res.stderr == b"e" * MAX_STDERR_BYTES
    finally:
        t.close()


def test_command_deadline(testbed: Testbed, tmp_path: Path) -> None:
    h = hosts_of(testbed, tmp_path)[3]
    t = SshTransport()
    try:
        t0 = time.monotonic()
        with pytest.raises(CommandTimeout, match="timed out after 1s"):
            t.run(h, ["sleep", "30"], timeout_s=1)
        assert time.monotonic() - t0 < 15  # the 1 s timeout, not the command's 30 s
        assert t.run(h, ["true"], timeout_s=20).exit_status == 0  # the connection still works
    finally:
        t.close()


def test_stopped_and_frozen_hosts_are_unreachable_in_bounded_time(testbed: Testbed, tmp_path: Path) -> None:
    hs = hosts_of(testbed, tmp_path, ssh={"connect_timeout_s": 1.5})
    testbed.stop_host(4)
    testbed.freeze_host(5)
    t = SshTransport()
    try:
        t0 = time.monotonic()
        with pytest.raises(HostUnreachable, match="connection refused"):
            t.run(hs[4], ["true"], timeout_s=20)
        assert time.monotonic() - t0 < 10  # well inside the command's 20 s: refused, not timed out
        t0 = time.monotonic()
        with pytest.raises(HostUnreachable, match="no SSH banner within 1.5s"):
            t.run(hs[5], ["true"], timeout_s=20)
        assert time.monotonic() - t0 < 10  # the 1.5 s banner timeout, not the command's 20 s
    finally:
        t.close()


def test_unknown_host_key_refused_then_accept_new_records_it(testbed: Testbed, tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts_empty"
    kh.write_text("")
    h = hosts_of(testbed, tmp_path, ssh={"known_hosts": str(kh)})[0]
    t = SshTransport()
    with pytest.raises(HostKeyError, match="unknown host key .*--accept-new-host-keys"):
        t.run(h, ["true"], timeout_s=20)
    t.close()
    t = SshTransport(accept_new_host_keys=True)
    assert t.run(h, ["true"], timeout_s=20).exit_status == 0
    t.close()
    assert f"[{testbed.address(0)}]:{testbed.port} ssh-ed25519 " in kh.read_text()
    # Now known: strict checking passes without the flag.
    t = SshTransport()
    assert t.run(h, ["true"], timeout_s=20).exit_status == 0
    t.close()


def test_changed_host_key_is_refused_even_with_accept_new(testbed: Testbed, tmp_path: Path) -> None:
    # Pretend host 0's address had host 1's key: a mismatch, like a man in the middle.
    real = testbed.known_hosts.read_text().splitlines()
    key1 = next(line for line in real if line.startswith(f"[{testbed.address(1)}]")).split(" ", 1)[1]
    kh = tmp_path / "known_hosts_wrong"
    kh.write_text(f"[{testbed.address(0)}]:{testbed.port} {key1}\n")
    h = hosts_of(testbed, tmp_path, ssh={"known_hosts": str(kh)})[0]
    t = SshTransport(accept_new_host_keys=True)
    with pytest.raises(HostKeyError, match="does not match"):
        t.run(h, ["true"], timeout_s=20)
    t.close()


def test_wrong_user_fails_authentication(testbed: Testbed, tmp_path: Path) -> None:
    h = hosts_of(testbed, tmp_path, ssh={"user": "nobody-here"})[0]
    t = SshTransport()
    with pytest.raises(HostKeyError, match="authentication failed for nobody-here@"):
        t.run(h, ["true"], timeout_s=20)
    t.close()


def test_ssh_config_is_honoured(testbed: Testbed, tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        f"Host node01\n  HostName {testbed.address(0)}\n  Port {testbed.port}\n  User {testbed.user}\n"
        f"  IdentityFile {testbed.identity_file}\n  UserKnownHostsFile {testbed.known_hosts}\n"
    )
    inv = tmp_path / "bare.yaml"
    inv.write_text(f"python: {{path: {testbed.python}}}\nhosts:\n  - name: node01\n")
    (h,) = load_inventory(inv, environ={}).hosts
    t = SshTransport(ssh_config=cfg)
    try:
        ep = t.endpoint(h)
        assert (ep.hostname, ep.port, ep.user) == (testbed.address(0), testbed.port, testbed.user)
        assert t.run(h, ["true"], timeout_s=20).exit_status == 0
    finally:
        t.close()


def test_preflight_rejects_unreadable_identity(testbed: Testbed, tmp_path: Path) -> None:
    hs = hosts_of(testbed, tmp_path, ssh={"identity_file": str(tmp_path / "missing_key")})
    with pytest.raises(ConfigError, match=r"missing_key: identity file of host node01 unreadable"):
        preflight(hs)
    notakey = tmp_path / "notakey"
    notakey.write_text("hello")
    hs = hosts_of(testbed, tmp_path, ssh={"identity_file": str(notakey)})
    with pytest.raises(ConfigError, match="is not a private key"):
        preflight(hs)


def test_proxy_jump_through_another_host(testbed: Testbed, tmp_path: Path) -> None:
    jump = f"{testbed.user}@{testbed.address(0)}:{testbed.port}"
    h = hosts_of(testbed, tmp_path, ssh={"proxy_jump": jump})[1]
    t = SshTransport()
    try:
        res = t.run(
            h, ["python3", "-c", "import os; print(os.environ['ROBUSTCTL_PROBE_ROOT'])"], timeout_s=20
        )
        assert res.stdout.decode().strip() == str(testbed.host_root(1))  # ran on host 1, not the jump host
    finally:
        t.close()
    testbed.stop_host(0)
    t = SshTransport()
    with pytest.raises(HostUnreachable, match="connection refused"):
        t.run(h, ["true"], timeout_s=20)
    t.close()


def test_a_host_that_floods_stdout_is_stopped_at_the_bound(testbed: Testbed, tmp_path: Path) -> None:
    h = hosts_of(testbed, tmp_path)[2]
    t = SshTransport(max_stdout=1 << 20)
    flood = "import sys\nwhile True: sys.stdout.buffer.write(b'x' * 65536)"
    try:
        with pytest.raises(OutputTooLarge, match=r"printed more than 1048576 bytes on stdout; stopped"):
            t.run(h, ["python3", "-c", flood], timeout_s=60)
        # the connection stays usable, and stderr keeps only its last part
        res = t.run(
            h, ["python3", "-c", "import sys; sys.stderr.write('e' * (3 << 20) + 'LAST')"], timeout_s=60
        )
        assert len(res.stderr) == MAX_STDERR_BYTES and res.stderr.endswith(b"eLAST")
    finally:
        t.close()
