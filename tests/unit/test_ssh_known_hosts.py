"""known_hosts read once per SSH transport, indexed by host name: the same keys as paramiko's own
``HostKeys.lookup`` (plain, ``[host]:port`` and hashed ``|1|`` names), re-read when the file changes,
and only the target's lines parsed (a malformed line of another host does not stop a connection)."""

from __future__ import annotations

import base64
from pathlib import Path

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from hypothesis import given, settings
from hypothesis import strategies as st

from robustctl.transport.ssh import SshTransport


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
