"""Property tests of every path-valued setting (issue 21, item 4): whatever the path names, robustctl
opens it as a bounded regular file and never blocks.

For each setting (SSH identity file, known_hosts, the SSH client config and an IdentityFile it names,
kubeconfig and a credential file it names, slurm.conf) the path is generated as one of: missing, a
directory, a FIFO (no writer: a plain ``open`` would wait forever), a character device (``/dev/zero``,
``/dev/null``), a regular file one byte past the setting's bound, a symbolic link to any of those, or
a valid file. Contract: a valid file (and, where the setting is optional, a missing one) gets past
the file and on to the network (a loopback port that refuses); anything else is one ConfigError line
naming the path, exit code 78. Each call runs in a thread: one still blocked at the deadline has its
FIFO opened for writing (which releases it) and fails the test, so a regression fails instead of
hanging. A file far past the bound is refused before it is read: the call allocates a few KiB, not the file.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from hypothesis import given
from hypothesis import strategies as st

from robustctl.config import KubernetesSettings, SchedulerSettings, SlurmSettings
from robustctl.errors import ConfigError, HostUnreachable
from robustctl.exit_codes import ExitCode
from robustctl.inventory import Host, load_inventory
from robustctl.schedulers import kubernetes, slurm
from robustctl.transport import ssh
from robustctl.transport.ssh import SshTransport, preflight

pytestmark = pytest.mark.fuzz

HUGE_PAST_BOUND = 64 << 20
"""A "huge" file is this many bytes past its setting's bound (sparse: no disk), so reading it
whole, or even up to the bound of the largest kind (known_hosts, 32 MiB), shows in the memory peak."""
PEAK_LIMIT = 16 << 20
"""Most memory a refused huge file may cost (traced peak of the call, bytes): it is refused by its
size before any read, so the peak is a few KiB; reading it would cost ≥ 64 MiB."""
RELEASE_AFTER_S = 60.0
"""How long a call may run before it counts as blocked (each takes milliseconds; a loaded CI machine
gets a wide margin, and only a call that never returns reaches it)."""

KEY = (
    ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    .private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    .decode()
)
HOST_LINE = "127.0.0.2 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHnZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ\n"


@pytest.fixture(scope="module")
def refused_port() -> Iterator[int]:
    """A loopback port that refuses connections: bound, never listening."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    yield s.getsockname()[1]
    s.close()


@pytest.fixture(scope="module", autouse=True)
def _hermetic_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """An empty HOME (no default keys, known_hosts or ~/.kube/config of the developer's) and no agent."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(tmp_path_factory.mktemp("home")))
        mp.delenv("SSH_AUTH_SOCK", raising=False)
        mp.delenv("KUBECONFIG", raising=False)
        mp.delenv("SLURM_CONF", raising=False)
        yield


Use = Callable[[], None]


@dataclass(frozen=True)
class Setting:
    """One path-valued setting: ``prepare(path, tmp, port)`` sets up what uses the path (inventory,
    configs) and returns the call that opens it; what a valid file holds; its byte bound (None:
    robustctl never reads it, only checks its kind); whether a missing file is fine."""

    name: str
    prepare: Callable[[Path, Path, int], Use]
    valid: str
    bound: int | None
    optional: bool


def _host(tmp: Path, port: int, **ssh_settings: str) -> Host:
    inv = tmp / "inv.yaml"
    ssh_block = {"port": port, **ssh_settings}
    inv.write_text(yaml.safe_dump({"hosts": [{"name": "n1", "address": "127.0.0.1", "ssh": ssh_block}]}))
    (h,) = load_inventory(inv, environ={}).hosts
    return h


def _valid_key(tmp: Path) -> Path:
    key = tmp / "id_valid"
    key.write_text(KEY)
    return key


def _ssh_run(h: Host, ssh_config: Path, preflight_config: Path | None = None) -> Use:
    """Preflight (when the inventory names the path), then run a command: past the files, the
    refused port ends it (HostUnreachable)."""

    def use() -> None:
        preflight([h], ssh_config=preflight_config or ssh_config)
        t = SshTransport(ssh_config=ssh_config)
        try:
            with pytest.raises(HostUnreachable):
                t.run(h, ["true"], timeout_s=10)
        finally:
            t.close()

    return use


def _identity(path: Path, tmp: Path, port: int) -> Use:
    h = _host(tmp, port, identity_file=str(path), known_hosts=str(tmp / "kh-none"))
    return _ssh_run(h, tmp / "no-config")


def _known_hosts(path: Path, tmp: Path, port: int) -> Use:
    h = _host(tmp, port, identity_file=str(_valid_key(tmp)), known_hosts=str(path))
    return _ssh_run(h, tmp / "no-config")


def _ssh_config(path: Path, tmp: Path, port: int) -> Use:
    h = _host(tmp, port, identity_file=str(_valid_key(tmp)), known_hosts=str(tmp / "kh-none"))
    return _ssh_run(h, path)


def _config_identity(path: Path, tmp: Path, port: int) -> Use:
    cfg = tmp / "ssh_config"
    cfg.write_text(f"Host *\n  IdentityFile {path}\n  UserKnownHostsFile {tmp / 'kh-none'}\n")
    return _ssh_run(_host(tmp, port), cfg)


def _kubeconfig(path: Path, tmp: Path, port: int) -> Use:
    def use() -> None:
        kubernetes.read_kubeconfig(path, origin="KUBECONFIG", context=None)

    return use


def _kube_credential(path: Path, tmp: Path, port: int) -> Use:
    cfg = tmp / "kubeconfig"
    cfg.write_text(
        json.dumps({
            "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
            "users": [{"name": "u", "user": {"tokenFile": str(path)}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        })
    )  # fmt: skip

    def use() -> None:
        doc = kubernetes.read_kubeconfig(cfg, origin="KUBECONFIG", context=None)
        held = path.read_text(encoding="utf-8", errors="replace")  # a regular file: it was read
        assert doc["users"][0]["user"] == {"token": held}  # read by robustctl, handed over inline

    return use


def _slurm_conf(path: Path, tmp: Path, port: int) -> Use:
    settings = SchedulerSettings(kind="slurm", slurm=SlurmSettings(conf=str(path)))

    def use() -> None:
        slurm.create(settings)

    return use


def _kube_load(path: Path, tmp: Path, port: int) -> Use:
    """The whole client set-up (the kubernetes package, when installed) on a kubeconfig at ``path``."""
    pytest.importorskip("kubernetes.config")  # imported here, not in the measured call
    settings = SchedulerSettings(kind="kubernetes", kubernetes=KubernetesSettings(kubeconfig=str(path)))

    def use() -> None:
        kubernetes.create(settings)

    return use


KUBECONFIG = json.dumps({
    "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
    "users": [{"name": "u", "user": {"token": "t"}}],
    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
    "current-context": "x",
})  # fmt: skip
SETTINGS = (
    Setting("ssh.identity_file", _identity, KEY, ssh.MAX_IDENTITY_BYTES, optional=False),
    Setting("ssh.known_hosts", _known_hosts, HOST_LINE, ssh.MAX_KNOWN_HOSTS_BYTES, optional=True),
    Setting("ssh config", _ssh_config, "Host 127.0.0.*\n  User someone\n", ssh.MAX_SSH_CONFIG_BYTES, optional=True),
    Setting("IdentityFile in ssh config", _config_identity, KEY, ssh.MAX_IDENTITY_BYTES, optional=False),
    Setting("scheduler.kubernetes.kubeconfig", _kubeconfig, KUBECONFIG, kubernetes.MAX_KUBECONFIG_BYTES, optional=False),
    Setting("kubeconfig client", _kube_load, KUBECONFIG, kubernetes.MAX_KUBECONFIG_BYTES, optional=False),
    Setting("kubeconfig tokenFile", _kube_credential, "t0ken", kubernetes.MAX_KUBE_CREDENTIAL_BYTES, optional=False),
    Setting("scheduler.slurm.conf", _slurm_conf, "ClusterName=c\n", None, optional=True),
)  # fmt: skip
KINDS = ("missing", "directory", "fifo", "/dev/zero", "/dev/null", "huge", "valid")


def make(tmp: Path, kind: str, setting: Setting, links: int, content: bytes = b"") -> tuple[Path, list[Path]]:
    """The path of ``kind`` for ``setting`` (``"random"``: a regular file of ``content``), reached
    through a chain of ``links`` symbolic links (relative and absolute in turn), and its FIFOs."""
    target = tmp / f"target-{kind.strip('/').replace('/', '-')}"
    fifos: list[Path] = []
    if kind == "directory":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)
        fifos.append(target)
    elif kind.startswith("/dev/"):
        target = Path(kind)
    elif kind == "huge":  # sparse: costs no disk
        with target.open("wb") as fh:
            fh.truncate((setting.bound or 0) + HUGE_PAST_BOUND)
    elif kind == "valid":
        target.write_text(setting.valid)
    elif kind == "random":
        target.write_bytes(content)
    path = target
    for n in range(links):
        lnk = tmp / f"link{n}"
        lnk.symlink_to(path.name if n % 2 == 0 and path.parent == tmp else path)
        path = lnk
    return path, fifos


def finishes(fn: Callable[[], None], fifos: list[Path]) -> BaseException | None:
    """Run ``fn`` in a thread; its exception, or None. A call still running after
    :data:`RELEASE_AFTER_S` is released (each FIFO opened for writing, then closed: a reader blocked
    in ``open`` gets end of file) and fails the test."""
    box: list[BaseException | None] = [None]

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # handed to the test thread
            box[0] = exc

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(RELEASE_AFTER_S)
    if th.is_alive():
        for f in fifos:
            fd = os.open(f, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        th.join(RELEASE_AFTER_S)
        pytest.fail(f"blocked on {fifos or 'a path'}")
    return box[0]


def check(tmp: Path, port: int, setting: Setting, kind: str, links: int, content: bytes = b"") -> None:
    """Use a path of ``kind`` for ``setting``: success where the setting accepts it, else one
    ConfigError line naming the path (exit 78); never blocked; a huge file refused unread."""
    path, fifos = make(tmp, kind, setting, links, content)
    use = setting.prepare(path, tmp, port)
    measure = kind == "huge" and setting.bound is not None
    if measure:
        tracemalloc.start()
    try:
        exc = finishes(use, fifos)
        peak = tracemalloc.get_traced_memory()[1] if measure else 0
    finally:
        if measure:
            tracemalloc.stop()
    if kind == "random":  # whatever the bytes: taken, or one config error
        assert exc is None or isinstance(exc, ConfigError), f"{setting.name}: {exc!r}"
    elif (
        kind == "valid"
        or (kind == "missing" and setting.optional)
        or (kind == "huge" and setting.bound is None)
    ):
        assert exc is None, f"{setting.name} refused a {kind} file: {exc!r}"
    else:
        assert isinstance(exc, ConfigError), f"{setting.name}, {kind}: {exc!r}"
    if exc is None:
        return
    msg = str(exc)
    assert "\n" not in msg and exc.exit_code == ExitCode.CONFIG
    if kind == "random":
        return
    assert str(path) in msg or str(path.resolve()) in msg, msg
    if kind in ("fifo", "/dev/zero", "/dev/null"):
        assert "not a regular file" in msg, msg
    if kind == "directory":
        assert "is a directory" in msg, msg
    if measure:
        assert peak < PEAK_LIMIT, (setting.name, peak)


@pytest.mark.parametrize("links", [0, 1, 2])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("setting", SETTINGS, ids=[s.name for s in SETTINGS])
def test_each_kind_of_path_for_each_setting(
    tmp_path: Path, refused_port: int, setting: Setting, kind: str, links: int
) -> None:
    """Every (setting, kind, symbolic links) case, each run."""
    check(tmp_path, refused_port, setting, kind, links)


@given(
    setting=st.sampled_from(SETTINGS),
    kind=st.sampled_from(KINDS) | st.just("random"),
    links=st.integers(0, 3),
    content=st.binary(max_size=512) | st.text(max_size=300).map(str.encode),
)
def test_any_path_and_any_content_is_taken_or_one_config_error(
    tmp_path_factory: pytest.TempPathFactory, refused_port: int, setting: Setting, kind: str, links: int,
    content: bytes,
) -> None:  # fmt: skip
    check(tmp_path_factory.mktemp("paths"), refused_port, setting, kind, links, content)


def test_a_credential_inline_in_the_kubeconfig_wins_and_its_file_is_never_opened(tmp_path: Path) -> None:
    """As the client does: ``token`` beside ``tokenFile`` is used and the file (a FIFO here) is not read."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cfg = tmp_path / "kubeconfig"
    user = {"tokenFile": str(fifo), "token": "inline", "client-key": "key.pem"}
    cfg.write_text(json.dumps({
        "users": [{"name": "u", "user": user}, {"name": "other", "user": {"tokenFile": str(fifo)}}],
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}], "current-context": "x",
    }))  # fmt: skip
    (tmp_path / "key.pem").write_bytes(b"KEY")  # relative to the kubeconfig's directory
    box: list[dict[str, object]] = []
    assert (
        finishes(
            lambda: box.append(kubernetes.read_kubeconfig(cfg, origin="KUBECONFIG", context=None)), [fifo]
        )
        is None
    )
    users = box[0]["users"]
    assert isinstance(users, list)
    assert users[0]["user"] == {"token": "inline", "client-key-data": base64.b64encode(b"KEY").decode()}
    assert users[1]["user"] == {"tokenFile": str(fifo)}  # another context's user: left to the client
