"""The SSH transport's local files.

known_hosts is read once per SSH transport, indexed by host name: the same keys as paramiko's own
``HostKeys.lookup`` (plain, ``[host]:port`` and hashed ``|1|`` names), re-read when the file changes,
and only the target's lines parsed (a malformed line of another host does not stop a connection).

Every file (identity, its certificate, known_hosts, the SSH config) is read by robustctl as a
bounded regular file and paramiko gets the text (issue 21, item 4): a FIFO identity file, from the
inventory or from ``ROBUSTCTL_SSH_IDENTITY``, ends the command at once with exit 78 (run in a
subprocess with a timeout, so a regression fails instead of hanging); tests/unit/test_fuzz_paths.py
holds the property over every path-valued setting.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import threading
from pathlib import Path

import paramiko
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from hypothesis import given, settings
from hypothesis import strategies as st

from robustctl.errors import ConfigError
from robustctl.exit_codes import ExitCode
from robustctl.transport.ssh import MAX_IDENTITY_BYTES, SshTransport, _AcceptNewPolicy, load_identity


def _key(seed: int) -> paramiko.PKey:
    """A fixed ed25519 public key per ``seed``."""
    priv = ed25519.Ed25519PrivateKey.from_private_bytes(bytes([seed % 256]) * 32)
    text = priv.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return paramiko.Ed25519Key(data=base64.b64decode(text.split()[1]))


def _line(names: str, key: paramiko.PKey) -> str:
    return f"{names} {key.get_name()} {key.get_base64()}"


def test_plain_port_hashed_and_multi_name_lines(tmp_path: Path) -> None:
    k1, k2, k3, k4 = (_key(i) for i in range(1, 5))
    hashed = paramiko.HostKeys.hash_host("[127.0.0.4]:2222")
    kh = tmp_path / "known_hosts"
    kh.write_text(
        "# a comment\n\n"
        + _line("127.0.0.2", k1) + "\n"
        + _line("[127.0.0.3]:2222,node03", k2) + "\n"
        + _line(hashed, k3) + "\n"
        + "@cert-authority *.example " + f"{k4.get_name()} {k4.get_base64()}\n"
        + "[127.0.0.9]:2222 ssh-ed25519 not-base64!!\n"  # another host's broken line
    )  # fmt: skip
    t = SshTransport()
    assert [k.get_base64() for k in t.known_host_keys(kh, "127.0.0.2")] == [k1.get_base64()]
    assert [k.get_base64() for k in t.known_host_keys(kh, "[127.0.0.3]:2222")] == [k2.get_base64()]
    assert [k.get_base64() for k in t.known_host_keys(kh, "node03")] == [k2.get_base64()]
    assert [k.get_base64() for k in t.known_host_keys(kh, "[127.0.0.4]:2222")] == [k3.get_base64()]
    assert t.known_host_keys(kh, "127.0.0.3") == []  # port 22 is another name
    assert t.known_host_keys(kh, "x.example") == []  # marker lines are not host keys
    with pytest.raises(paramiko.SSHException):
        t.known_host_keys(kh, "[127.0.0.9]:2222")


def test_read_once_then_again_when_the_file_changes(tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text(_line("127.0.0.2", _key(1)) + "\n")
    t = SshTransport()
    assert t.known_host_keys(kh, "127.0.0.5") == []
    first = t._known[kh]
    t.known_host_keys(kh, "127.0.0.2")
    assert t._known[kh] is first  # not read again
    with kh.open("a") as fh:  # what --accept-new-host-keys does
        fh.write(_line("127.0.0.5", _key(5)) + "\n")
    assert [k.get_base64() for k in t.known_host_keys(kh, "127.0.0.5")] == [_key(5).get_base64()]


NAMES = st.sampled_from(["127.0.0.2", "127.0.0.3", "[127.0.0.2]:2222", "[127.0.0.4]:22", "node01", "node02"])


@pytest.mark.fuzz
@settings(max_examples=40, deadline=None)
@given(
    entries=st.lists(
        st.tuples(st.lists(NAMES, min_size=1, max_size=3), st.integers(1, 6), st.booleans()), max_size=8
    ),
    name=NAMES,
)
def test_same_keys_as_paramikos_lookup(
    tmp_path_factory: pytest.TempPathFactory, entries: list[tuple[list[str], int, bool]], name: str
) -> None:
    kh = tmp_path_factory.mktemp("kh") / "known_hosts"
    lines = []
    for names, seed, hash_it in entries:
        shown = ",".join(paramiko.HostKeys.hash_host(n) if hash_it else n for n in names)
        lines.append(_line(shown, _key(seed)))
    kh.write_text("\n".join(lines) + "\n")
    theirs = paramiko.HostKeys(str(kh)).lookup(name) or {}
    ours = SshTransport().known_host_keys(kh, name)
    assert {k.get_name(): k.get_base64() for k in ours} == {t: k.get_base64() for t, k in theirs.items()}


# ---- files read as bounded regular files -----------------------------------------------------------

CLI_TIMEOUT_S = 120
"""Deadline of one robustctl run in a subprocess: it ends in about a second; a run that blocks on a
FIFO never ends, and the timeout turns that into a failure."""


def _openssh_key(seed: int, password: bytes | None = None) -> str:
    priv = ed25519.Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32)
    enc = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    return priv.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, enc).decode()


@pytest.mark.parametrize("via", ["inventory", "ROBUSTCTL_SSH_IDENTITY"])
def test_a_fifo_identity_file_ends_the_command_at_once_with_the_config_code(tmp_path: Path, via: str) -> None:
    fifo = tmp_path / "id_fifo"
    os.mkfifo(fifo)  # no writer: a plain open() of it waits forever
    ssh = {"port": 1, **({"identity_file": str(fifo)} if via == "inventory" else {})}
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"hosts": [{"name": "n1", "address": "127.0.0.1", "ssh": ssh}]}))
    env = {**os.environ, "HOME": str(tmp_path), "NO_COLOR": "1"}
    env.pop("ROBUSTCTL_SSH_IDENTITY", None)
    if via != "inventory":
        env["ROBUSTCTL_SSH_IDENTITY"] = str(fifo)
    p = subprocess.run(
        [sys.executable, "-m", "robustctl", "diagnose", "-i", str(inv), "--level", "0"],
        env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
    )  # fmt: skip
    assert p.returncode == ExitCode.CONFIG, p.stderr
    origin = "ssh.identity_file" if via == "inventory" else "ROBUSTCTL_SSH_IDENTITY"
    line = f"{fifo}: identity file of host n1 is a FIFO, not a regular file (from {origin})"
    assert line in p.stderr and "Traceback" not in p.stderr


def test_identity_files_are_read_by_robustctl_with_their_certificate(tmp_path: Path) -> None:
    key = tmp_path / "id_ed25519"
    key.write_text(_openssh_key(7))
    loaded = load_identity(str(key), host="n1", origin="ssh.identity_file")
    assert loaded is not None and loaded.get_base64() == _key(7).get_base64()
    assert loaded.public_blob is None
    # a certificate beside the key is attached (paramiko's own rule), also when the path names it
    blob = paramiko.Message()  # paramiko checks the blob's type; the CA's signature is the server's to check
    blob.add_string("ssh-ed25519-cert-v01@openssh.com")
    blob.add_string(b"nonce")
    cert = tmp_path / "id_ed25519-cert.pub"
    cert.write_text(f"ssh-ed25519-cert-v01@openssh.com {base64.b64encode(blob.asbytes()).decode()} n1\n")
    for name in (key, cert):
        with_cert = load_identity(str(name), host="n1", origin="ssh.identity_file")
        assert with_cert is not None and with_cert.public_blob is not None
        assert with_cert.public_blob.key_type == "ssh-ed25519-cert-v01@openssh.com"
    os.unlink(cert)
    os.mkfifo(cert)  # a FIFO beside the key: refused, not opened for reading
    with pytest.raises(
        ConfigError, match=r"id_ed25519-cert.pub: certificate of the identity file of host n1 is a FIFO"
    ):
        load_identity(str(key), host="n1", origin="ssh.identity_file")
    # an encrypted key is skipped (no passphrase is ever asked for: the agent may hold it)
    key.write_text(_openssh_key(7, b"secret"))
    os.unlink(cert)
    assert load_identity(str(key), host="n1", origin="ssh.identity_file") is None


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, r"n1 is a character device, not a regular file \(from IdentityFile in /x/config\)$"),
        ("x" * (MAX_IDENTITY_BYTES + 1), f"n1 is larger than {MAX_IDENTITY_BYTES} bytes"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n", "n1 is not a private key"),
        ("", "n1 is not a private key"),
    ],
)  # fmt: skip
def test_an_identity_file_that_is_no_usable_key_is_one_config_error(
    tmp_path: Path, content: str | None, why: str
) -> None:
    path = "/dev/zero" if content is None else str(tmp_path / "id")
    if content is not None:
        Path(path).write_text(content)
    with pytest.raises(ConfigError, match=why) as err:
        load_identity(path, host="n1", origin="IdentityFile in /x/config")
    assert str(err.value).startswith(f"{path}: identity file of host n1 ") and "\n" not in str(err.value)


def test_accept_new_never_blocks_on_a_known_hosts_fifo(tmp_path: Path) -> None:
    """The key of an unknown host is appended with O_NONBLOCK: a FIFO put there meanwhile is refused."""
    fifo = tmp_path / "known_hosts"
    os.mkfifo(fifo)
    policy = _AcceptNewPolicy(fifo, threading.Lock())
    errors: list[BaseException] = []

    def record() -> None:
        try:
            policy.missing_host_key(paramiko.SSHClient(), "[127.0.0.2]:2222", _key(3))
        except BaseException as exc:
            errors.append(exc)

    th = threading.Thread(target=record, daemon=True)
    th.start()
    th.join(CLI_TIMEOUT_S)
    if th.is_alive():  # a blocking open for writing waits for a reader: be one, then fail
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        pytest.fail("recording a host key blocked on a FIFO")
    assert len(errors) == 1 and isinstance(errors[0], ConfigError)
    assert "cannot record the host key of [127.0.0.2]:2222" in str(errors[0])
