"""Local transport: argv lists, no shell, timeouts kill the process group; probe runner errors."""

from __future__ import annotations

import sys
import time

import pytest

from robustctl.config import PythonSettings, SshSettings
from robustctl.errors import CommandTimeout, HostUnreachable, ProbeError
from robustctl.inventory import Host
from robustctl.probes import STREAM_BOOT, parse_document, probe_argv, run_probe
from robustctl.transport.base import remote_command
from robustctl.transport.local import LocalTransport

LOCAL = Host("localhost", "local", "local", SshSettings(), PythonSettings(path=sys.executable))


def test_runs_argv_without_a_shell() -> None:
    t = LocalTransport()
    res = t.run(LOCAL, [sys.executable, "-c", "import sys; print(sys.argv[1])", "a;echo pwned"], timeout_s=10)
    assert res.exit_status == 0
    assert res.stdout.decode().strip() == "a;echo pwned"


def test_stdin_is_fed_and_closed() -> None:
    res = LocalTransport().run(LOCAL, [sys.executable, "-"], stdin=b"print(6*7)\n", timeout_s=10)
    assert res.stdout.strip() == b"42"


def test_timeout_kills_the_whole_group() -> None:
    t0 = time.monotonic()
    code = "import subprocess,sys,time; subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)']); time.sleep(60)"
    with pytest.raises(CommandTimeout, match="timed out after 0.5s"):
        LocalTransport().run(LOCAL, [sys.executable, "-c", code], timeout_s=0.5)
    assert time.monotonic() - t0 < 10


def test_missing_program_is_unreachable() -> None:
    with pytest.raises(HostUnreachable, match="cannot run"):
        LocalTransport().run(LOCAL, ["/nonexistent/python3"], timeout_s=5)


def test_remote_command_quotes_once() -> None:
    assert remote_command(["python3", "-", "--root", "/a b;rm -rf /"]) == "python3 - --root '/a b;rm -rf /'"
    with pytest.raises(ValueError):
        remote_command([])


def test_probe_argv_uses_wrapper_and_root() -> None:
    h = Host(
        "n1",
        "127.0.0.2",
        "ssh",
        SshSettings(),
        PythonSettings(path="python3", wrapper=["docker", "exec", "-i", "trainer"]),
        probe_root="/host",
    )
    assert probe_argv(h, ["--timeout", "5"]) == [
        "docker",
        "exec",
        "-i",
        "trainer",
        "python3",
        "-c",
        STREAM_BOOT,
        "--root",
        "/host",
        "--timeout",
        "5",
    ]


def test_parse_document_picks_the_probe_json() -> None:
    assert parse_document(b'noise\n{"probe": "host", "data": {}}\n', "host") == {"probe": "host", "data": {}}
    assert parse_document(b'{"probe": "nvml"}', "host") is None
    assert parse_document(b"not json", "host") is None
    assert parse_document(b"", "host") is None


def test_probe_crash_and_garbage_are_one_line_probe_errors() -> None:
    t = LocalTransport()
    # A python that runs a crashing script instead of the probe: wrapper injects `-c` code.
    bad = Host(
        "g",
        "local",
        "local",
        SshSettings(),
        PythonSettings(path="-c", wrapper=[sys.executable, "-c", "print('garbage')"]),
    )
    with pytest.raises(ProbeError, match="^g: probe host failed: .*garbage"):
        run_probe(t, bad, "host", deadline=time.monotonic() + 10)
    boom = Host(
        "b",
        "local",
        "local",
        SshSettings(),
        PythonSettings(path="-c", wrapper=[sys.executable, "-c", "raise RuntimeError('probe exploded')"]),
    )
    with pytest.raises(ProbeError, match="^b: probe host failed: RuntimeError: probe exploded$"):
        run_probe(t, boom, "host", deadline=time.monotonic() + 10)
