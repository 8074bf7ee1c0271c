"""The SSH transport (paramiko), with connection reuse, strict host keys and hard deadlines.

Security defaults follow OpenSSH: host keys are checked against known_hosts and an unknown key is
refused (``StrictHostKeyChecking=yes``) unless ``accept_new_host_keys`` is set, which records
unknown keys but still refuses changed ones (``accept-new``). Only key and agent authentication are
used; no password is ever asked for, stored or logged. ``~/.ssh/config`` is honoured for HostName,
User, Port, IdentityFile, UserKnownHostsFile and ProxyJump (one hop), below explicit inventory values.

Files: every path this transport reads (identity files and the certificates beside them, the default
``~/.ssh/id_*`` keys, known_hosts, the SSH client config) comes from the inventory, the environment
or the home directory, and is read by robustctl itself through
:func:`robustctl.inputfile.read_regular` under a bound per kind (:data:`MAX_IDENTITY_BYTES`,
:data:`MAX_SSH_CERT_BYTES`, :data:`MAX_KNOWN_HOSTS_BYTES`, :data:`MAX_SSH_CONFIG_BYTES`): a FIFO,
a device or a directory is refused without blocking, and paramiko is handed the text (keys through
an ``AuthStrategy`` of in-memory keys, ``SSHConfig.from_text``, host keys added one by one), never a
path it would open itself. A refused file is a :class:`~robustctl.errors.ConfigError` naming the
file, the host and the setting it came from.

Deadlines: TCP connect, SSH banner and authentication each use ``connect_timeout_s``; a command is
abandoned (channel closed) when its ``timeout_s`` passes. stdout and stderr are drained while the
command runs, so output cannot stall the channel window; stdout is bounded (the command is stopped
past ``max_stdout``) and only the last part of stderr is kept.
"""

from __future__ import annotations

import contextlib
import getpass
import io
import logging
import os
import select
import socket
import stat
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import paramiko
from paramiko.auth_strategy import AuthSource, AuthStrategy, InMemoryPrivateKey, SourceResult
from paramiko.pkey import PublicBlob

from robustctl import interrupts
from robustctl.errors import CommandTimeout, ConfigError, HostKeyError, HostUnreachable, OutputTooLarge
from robustctl.inputfile import NotReadable, file_kind, open_regular, read_bounded, read_regular
from robustctl.process import OutputLimitExceeded, TailBuffer
from robustctl.transport.base import MAX_STDERR_BYTES, MAX_STDOUT_BYTES, CommandResult, remote_command

if TYPE_CHECKING:
    from robustctl.inventory import Host

# paramiko logs connection failures (with tracebacks) that robustctl already reports as one line per
# host; without a handler Python's last-resort handler would print them on stderr.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False

DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")
DEFAULT_SSH_CONFIG = Path("~/.ssh/config")
DEFAULT_IDENTITIES = ("~/.ssh/id_rsa", "~/.ssh/id_ecdsa", "~/.ssh/id_ed25519")
"""Keys tried when neither the inventory nor the SSH config names one (paramiko's and OpenSSH's
defaults, in paramiko's order); each one that is missing, not a regular file or not a usable key is
skipped, as OpenSSH skips them."""
_READ_CHUNK = 1 << 16

MAX_IDENTITY_BYTES = 64 << 10
"""Largest SSH identity (private key) file read, bytes. An OpenSSH private key is a few KiB: a
16384-bit RSA key, the largest ``ssh-keygen`` makes, is about 12.5 KiB in OpenSSH's format; 64 KiB
leaves room for a PEM key with headers and comments."""
MAX_SSH_CERT_BYTES = 64 << 10
"""Largest OpenSSH certificate (``KEY-cert.pub``, beside an identity file) read, bytes: one public
key, its principals and options and the CA's signature, a few KiB even with hundreds of principals."""
MAX_KNOWN_HOSTS_BYTES = 32 << 20
"""Largest known_hosts file read, bytes. A line is about 100 (Ed25519) to 650 bytes (RSA 3072 with a
hashed name), so 32 MiB holds all three key types of some 30,000 hosts: more than the largest
training clusters (12,500 machines of 8 GPUs for 100,000 GPUs)."""
MAX_SSH_CONFIG_BYTES = 4 << 20
"""Largest SSH client config read, bytes: a ``Host`` block per machine is about 100 bytes, so 4 MiB
holds 40,000 of them."""
_KEY_CLASSES: tuple[type[paramiko.PKey], ...] = (paramiko.RSAKey, paramiko.ECDSAKey, paramiko.Ed25519Key)
"""The private key types tried on an identity file, in paramiko's own order (``SSHClient._auth``)."""
_CERT_SUFFIX = "-cert.pub"


@dataclass(frozen=True)
class Endpoint:
    """Effective connection parameters of one host after merging inventory and ~/.ssh/config."""

    hostname: str
    port: int
    user: str | None
    identity_files: tuple[str, ...]
    known_hosts: Path
    proxy_jump: str | None
    connect_timeout_s: float
    accept_new: bool
    identity_origin: str = "ssh.identity_file"
    """The setting ``identity_files`` came from, for messages: ``ssh.identity_file``,
    ``ROBUSTCTL_SSH_IDENTITY``, ``IdentityFile in PATH``."""
    known_hosts_origin: str = "ssh.known_hosts"
    """The setting ``known_hosts`` came from, for messages (as ``identity_origin``; empty for the
    built-in ``~/.ssh/known_hosts``)."""


def _refused(path: object, what: str, reason: str, origin: str = "") -> str:
    """One line for a file that cannot be used: ``"PATH: WHAT is a FIFO, not a regular file (from
    SETTING)"``, or ``"PATH: WHAT unreadable: no such file (from SETTING)"`` for a reason that is not
    an ``is ...`` (``reason`` of a :class:`NotReadable`, or why it is no key)."""
    why = f" {reason}" if reason.startswith("is ") else f" unreadable: {reason}"
    return f"{path}: {what}{why}" + (f" (from {origin})" if origin else "")


def _env_origin(var: str, value: str | None, setting: str) -> str:
    """``var`` when the environment variable ``var`` holds ``value`` (the setting came from it), else
    ``setting``."""
    return var if value and os.environ.get(var) == value else setting


def _parse_private_key(text: str) -> paramiko.PKey | None:
    """The private key in ``text`` (OpenSSH or PEM; RSA, ECDSA or Ed25519); None when it is encrypted
    (robustctl never asks for a passphrase: the agent may hold the key).

    Args:
        text: the identity file's text.

    Returns:
        The key; None when it is encrypted.

    Raises:
        ValueError: not a private key of a type paramiko reads.
    """
    encrypted = False
    for cls in _KEY_CLASSES:
        try:
            return cls.from_private_key(io.StringIO(text))
        except paramiko.PasswordRequiredException:
            encrypted = True
        except Exception:  # noqa: S112 - another type's key or malformed text: SSHException, ValueError,
            continue  # AssertionError, IndexError, nacl's errors (paramiko's parsers raise them all)
    if encrypted:
        return None
    raise ValueError("is not a private key paramiko can read (RSA, ECDSA or Ed25519, OpenSSH or PEM)")


def load_identity(path: str, *, host: str, origin: str) -> paramiko.PKey | None:
    """The private key of identity file ``path`` (with its ``-cert.pub`` certificate when one is
    beside it), read by robustctl under :data:`MAX_IDENTITY_BYTES`, never by paramiko.

    ``path`` may also name the certificate (``KEY-cert.pub``), as paramiko and OpenSSH allow: the key
    is then the path without the suffix.

    Args:
        path: the file (``~`` expanded already).
        host: the host it is for, for messages.
        origin: the setting that named it, for messages.

    Returns:
        The key; None when it is encrypted (skipped: no passphrase is ever asked for).

    Raises:
        ConfigError: ``"PATH: identity file of host H is a FIFO, not a regular file (from SETTING)"``,
            missing, unreadable, larger than the bound, or not a private key; the same for a
            certificate beside it that exists but cannot be read or does not fit the key.
    """
    key_path, cert_path = (
        (path[: -len(_CERT_SUFFIX)], path) if path.endswith(_CERT_SUFFIX) else (path, path + _CERT_SUFFIX)
    )
    what = f"identity file of host {host}"
    try:
        raw = read_regular(key_path, MAX_IDENTITY_BYTES)
    except NotReadable as exc:
        raise ConfigError(_refused(key_path, what, exc.reason, origin)) from None
    try:
        key = _parse_private_key(raw.decode("utf-8", "replace"))
    except ValueError as exc:
        raise ConfigError(_refused(key_path, what, str(exc), origin)) from None
    try:
        cert = read_regular(cert_path, MAX_SSH_CERT_BYTES)
    except NotReadable as exc:
        if exc.missing:
            return key
        raise ConfigError(_refused(cert_path, f"certificate of the {what}", exc.reason, origin)) from None
    if key is not None:
        try:
            blob = PublicBlob.from_string(cert.decode("utf-8", "replace"))
        except Exception as exc:  # malformed base64 or fields: ValueError, binascii.Error, SSHException...
            why = f"is not an OpenSSH certificate ({exc})"
            raise ConfigError(_refused(cert_path, f"certificate of the {what}", why, origin)) from None
        if not blob.key_type.startswith(key.get_name()):
            why = f"is for a {blob.key_type} key, not {key.get_name()}"
            raise ConfigError(_refused(cert_path, f"certificate of the {what}", why, origin))
        key.public_blob = blob
    return key


def _default_identity(path: str) -> paramiko.PKey | None:
    """A default key (:data:`DEFAULT_IDENTITIES`, ``~`` expanded) or None when it is missing, not a
    regular file, past :data:`MAX_IDENTITY_BYTES`, encrypted or no key: OpenSSH skips such defaults."""
    try:
        return _parse_private_key(read_regular(path, MAX_IDENTITY_BYTES).decode("utf-8", "replace"))
    except (NotReadable, ValueError):
        return None


class _KeysThenAgent(AuthStrategy):
    """Public-key authentication with keys robustctl read itself: the identity keys, then the SSH
    agent's keys, then the default keys (paramiko's ``SSHClient._auth`` order), never a password."""

    def __init__(
        self, username: str, keys: Sequence[paramiko.PKey], defaults: Sequence[paramiko.PKey]
    ) -> None:
        super().__init__(ssh_config=paramiko.SSHConfig())
        self._username = username
        self._keys = keys
        self._defaults = defaults
        self._agent: paramiko.Agent | None = None

    def get_sources(self) -> Iterator[AuthSource]:
        for key in self._keys:
            yield InMemoryPrivateKey(self._username, key)
        try:
            self._agent = paramiko.Agent()
            agent_keys: tuple[paramiko.PKey, ...] = tuple(self._agent.get_keys())
        except (paramiko.SSHException, OSError):
            agent_keys = ()
        for key in agent_keys:
            yield InMemoryPrivateKey(self._username, key)
        for key in self._defaults:
            yield InMemoryPrivateKey(self._username, key)

    def authenticate(self, transport: paramiko.Transport) -> list[SourceResult]:
        try:
            return super().authenticate(transport)
        finally:
            if self._agent is not None:
                self._agent.close()
                self._agent = None


class _KnownHostsIndex:
    """A known_hosts file's lines by host name (plain names), and its hashed (``|1|``) lines."""

    def __init__(self, plain: dict[str, list[tuple[int, str]]], hashed: list[tuple[str, int, str]]) -> None:
        self.plain = plain
        self.hashed = hashed

    @classmethod
    def parse(cls, text: str) -> _KnownHostsIndex:
        """Index the text of a known_hosts file (comments, blank lines and ``@`` marker lines skipped,
        as paramiko does)."""
        plain: dict[str, list[tuple[int, str]]] = {}
        hashed: list[tuple[str, int, str]] = []
        for n, raw in enumerate(text.split("\n")):  # lines as a file reads them (not splitlines)
            line = raw.strip()
            if not line or line.startswith(("#", "@")):
                continue
            for host in line.split(None, 1)[0].split(","):
                if host.startswith("|1|"):
                    hashed.append((host, n, line))
                else:
                    plain.setdefault(host, []).append((n, line))
        return cls(plain, hashed)

    def keys_for(self, name: str) -> list[paramiko.PKey]:
        """The keys of ``name``'s lines, parsed now: one per key type, the first line's (as paramiko's
        ``HostKeys.lookup``); a line whose key type paramiko lacks is skipped.

        Args:
            name: the name to look up (``host`` or ``[host]:port``), plain or matched against hashed names.

        Returns:
            The keys, in the order of their first lines in the file; empty when none.

        Raises:
            paramiko.SSHException: one of them is malformed (paramiko's ``InvalidHostKey``).
        """
        found = list(self.plain.get(name, ()))
        found += [
            (n, ln) for token, n, ln in self.hashed if paramiko.HostKeys.hash_host(name, token) == token
        ]
        keys: dict[str, paramiko.PKey] = {}
        for n, line in sorted(set(found)):  # file order
            try:
                entry = paramiko.hostkeys.HostKeyEntry.from_line(line)
            except paramiko.hostkeys.InvalidHostKey:
                raise paramiko.SSHException(f"line {n + 1}: malformed key of {name}") from None
            if entry is not None and entry.key is not None:
                keys.setdefault(entry.key.get_name(), entry.key)  # paramiko's lookup: the first line's
        return list(keys.values())


class _AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """Record an unknown host key in known_hosts (OpenSSH ``accept-new``); changed keys still fail."""

    def __init__(self, known_hosts: Path, lock: threading.Lock) -> None:
        self._path = known_hosts
        self._lock = lock

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        """Record ``key`` for ``hostname`` (appended to the file, which must be a regular file).

        Args:
            client: the connecting client; the key is added to its host keys too.
            hostname: the name the key is recorded under (``host`` or ``[host]:port``).
            key: the server's host key.

        Raises:
            ConfigError: the known_hosts path exists but is not a regular file (opened for appending
                with ``O_NONBLOCK``: a FIFO never blocks the connection), or cannot be written.
        """
        with self._lock:
            client.get_host_keys().add(hostname, key.get_name(), key)
            line = f"{hostname} {key.get_name()} {key.get_base64()}\n".encode("ascii")
            try:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(
                    self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o666
                )
            except OSError as exc:
                raise ConfigError(
                    f"{self._path}: cannot record the host key of {hostname}: {exc.strerror or exc}"
                ) from None
            try:
                mode = os.fstat(fd).st_mode
                if not stat.S_ISREG(mode):
                    raise ConfigError(
                        f"{self._path}: cannot record the host key of {hostname}: known_hosts is a "
                        f"{file_kind(mode)}, not a regular file"
                    )
                os.write(fd, line)
            except OSError as exc:
                raise ConfigError(
                    f"{self._path}: cannot record the host key of {hostname}: {exc.strerror or exc}"
                ) from None
            finally:
                os.close(fd)


def preflight(hosts: Sequence[Host], *, ssh_config: Path | None = None) -> None:
    """Check what can be checked before connecting, each file read as a bounded regular file: the
    identity files the inventory (or ``ROBUSTCTL_SSH_IDENTITY``) names are private keys; the
    known_hosts files it names, when they exist, are regular files within :data:`MAX_KNOWN_HOSTS_BYTES`;
    the SSH client config (``ssh_config``, default ``~/.ssh/config``), when a host honours it, reads.

    Args:
        hosts: the inventory hosts; only those with ``transport: ssh`` are checked.
        ssh_config: the SSH client config file; None: ``~/.ssh/config``.

    Raises:
        ConfigError: ``"FILE: identity file of host H is a FIFO, not a regular file (from SETTING)"``
            (or missing, too large, not a private key), the same for a known_hosts file or the SSH
            config; the first such file, one line.
    """
    seen: set[tuple[str, str]] = set()
    for h in hosts:
        if h.transport != "ssh":
            continue
        ident = h.ssh.identity_file
        if ident and ("id", ident) not in seen:
            seen.add(("id", ident))
            path = Path(ident).expanduser()
            what = f"identity file of host {h.name}"
            origin = _env_origin("ROBUSTCTL_SSH_IDENTITY", ident, "ssh.identity_file")
            try:
                head = read_regular(path, MAX_IDENTITY_BYTES)[:4096]
            except NotReadable as exc:
                raise ConfigError(_refused(path, what, exc.reason, origin)) from None
            if b"PRIVATE KEY" not in head:
                raise ConfigError(_refused(path, what, "is not a private key", origin))
        kh = h.ssh.known_hosts
        if kh and ("kh", kh) not in seen:
            seen.add(("kh", kh))
            path = Path(kh).expanduser()
            origin = _env_origin("ROBUSTCTL_SSH_KNOWN_HOSTS", kh, "ssh.known_hosts")
            try:  # the kind and size only: the transport reads it when it connects
                fd = open_regular(path)
                try:
                    if os.fstat(fd).st_size > MAX_KNOWN_HOSTS_BYTES:
                        raise NotReadable(f"is larger than {MAX_KNOWN_HOSTS_BYTES} bytes")
                finally:
                    os.close(fd)
            except NotReadable as exc:
                if not exc.missing:  # a missing one is created by --accept-new-host-keys
                    raise ConfigError(
                        _refused(path, f"known_hosts of host {h.name}", exc.reason, origin)
                    ) from None
    if any(h.transport == "ssh" and h.ssh.use_ssh_config for h in hosts):
        read_ssh_config((ssh_config or DEFAULT_SSH_CONFIG).expanduser())


def read_ssh_config(path: Path) -> paramiko.SSHConfig:
    """The OpenSSH client config at ``path``, read under :data:`MAX_SSH_CONFIG_BYTES` and parsed from
    its text; an empty config when nothing is there.

    Args:
        path: the config file (``~`` expanded already).

    Returns:
        The parsed config.

    Raises:
        ConfigError: the path is a FIFO, a device, a directory, unreadable, too large, or does not
            parse; one line naming it.
    """
    try:
        text = read_regular(path, MAX_SSH_CONFIG_BYTES).decode("utf-8", "replace")
    except NotReadable as exc:
        if exc.missing:
            return paramiko.SSHConfig()
        raise ConfigError(_refused(path, "SSH client config", exc.reason)) from None
    try:
        return paramiko.SSHConfig.from_text(text)
    except (paramiko.ssh_exception.ConfigParseError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot parse: {exc}") from None


class SshTransport:
    """Runs commands over SSH, one cached connection per host (thread-safe).

    Args:
        accept_new_host_keys: force ``accept-new`` for every host (the ``--accept-new-host-keys`` flag).
        ssh_config: path of the OpenSSH client config to honour (default ``~/.ssh/config``).
        max_stdout: bound on one command's stdout, bytes.
    """

    def __init__(
        self,
        *,
        accept_new_host_keys: bool = False,
        ssh_config: Path | None = None,
        max_stdout: int = MAX_STDOUT_BYTES,
    ) -> None:
        self.max_stdout = max_stdout
        self._accept_new = accept_new_host_keys
        self._config_path = (ssh_config or DEFAULT_SSH_CONFIG).expanduser()
        self._config: paramiko.SSHConfig | None = None
        self._clients: dict[str, paramiko.SSHClient] = {}
        self._jumps: list[paramiko.SSHClient] = []
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._known_hosts_lock = threading.Lock()
        self._known: dict[Path, tuple[tuple[int, int, int], _KnownHostsIndex]] = {}
        self._keys_lock = threading.Lock()
        self._keys: dict[tuple[str, str], paramiko.PKey | None] = {}
        self._defaults: tuple[paramiko.PKey, ...] | None = None
        self._closed = False

    # -- connection --------------------------------------------------------------------------
    def endpoint(self, host: Host) -> Endpoint:
        """Merge inventory SSH settings with ``~/.ssh/config`` (inventory wins)."""
        s = host.ssh
        cfg: dict[str, Any] = {}
        if s.use_ssh_config:
            cfg = dict(self._ssh_config().lookup(host.address))
        hostname = str(cfg.get("hostname", host.address))
        port = s.port or int(cfg.get("port", 22))
        user = s.user or cfg.get("user")
        in_config = f"in {self._config_path}"
        if s.identity_file:
            ids: tuple[str, ...] = (s.identity_file,)
            id_origin = _env_origin("ROBUSTCTL_SSH_IDENTITY", s.identity_file, "ssh.identity_file")
        else:
            ids, id_origin = tuple(cfg.get("identityfile", ())), f"IdentityFile {in_config}"
        if s.known_hosts:
            kh = s.known_hosts
            kh_origin = _env_origin("ROBUSTCTL_SSH_KNOWN_HOSTS", kh, "ssh.known_hosts")
        elif _first(cfg.get("userknownhostsfile")):
            kh, kh_origin = str(_first(cfg.get("userknownhostsfile"))), f"UserKnownHostsFile {in_config}"
        else:
            kh, kh_origin = str(DEFAULT_KNOWN_HOSTS), ""
        jump = s.proxy_jump or cfg.get("proxyjump")
        if jump in ("none", ""):
            jump = None
        return Endpoint(
            hostname=hostname,
            port=port,
            user=user,
            identity_files=tuple(str(Path(i).expanduser()) for i in ids),
            known_hosts=Path(kh).expanduser(),
            proxy_jump=jump,
            connect_timeout_s=s.connect_timeout_s,
            accept_new=self._accept_new or s.accept_new_host_keys,
            identity_origin=id_origin,
            known_hosts_origin=kh_origin,
        )

    def known_host_keys(self, path: Path, name: str) -> list[paramiko.PKey]:
        """The keys ``path`` (a known_hosts file) holds for ``name`` (``host`` or ``[host]:port``).

        The file is opened as a regular file (:func:`robustctl.inputfile.open_regular`: a FIFO or a
        device is refused, never blocks), read under :data:`MAX_KNOWN_HOSTS_BYTES` and indexed by
        host name once per transport, and again only when it changes (size, mtime or inode of the
        open file: e.g. a key recorded by ``--accept-new-host-keys``); only the lines of ``name`` are
        parsed (hashed ``|1|`` names are matched by their HMAC, as OpenSSH and paramiko do).
        ``SSHClient.load_host_keys`` instead parses the whole file for every connection, and paramiko
        5.1's parser checks each line against all lines before it: O(lines²), 0.9 s of CPU for 2,000
        hosts, per connection (``python -m bench ssh-connect`` measures it).

        Args:
            path: the known_hosts file.
            name: the name to look up: ``host`` or ``[host]:port``.

        Returns:
            The keys the file holds for ``name``, one per key type; empty when none.

        Raises:
            NotReadable: missing (``missing``), not a regular file, unreadable or past the bound.
            paramiko.SSHException: a line of ``name`` is malformed.
        """
        fd = open_regular(path)
        try:
            try:
                st = os.fstat(fd)
            except OSError as exc:
                raise NotReadable(f"cannot read: {exc.strerror or exc}") from None
            sig = (st.st_mtime_ns, st.st_size, st.st_ino)
            with self._known_hosts_lock:
                hit = self._known.get(path)
            if hit is None or hit[0] != sig:
                text = read_bounded(fd, MAX_KNOWN_HOSTS_BYTES).decode("utf-8", "replace")
                hit = (sig, _KnownHostsIndex.parse(text))
                with self._known_hosts_lock:
                    self._known[path] = hit
        finally:
            os.close(fd)
        return hit[1].keys_for(name)

    def _ssh_config(self) -> paramiko.SSHConfig:
        if self._config is None:
            self._config = read_ssh_config(self._config_path)
        return self._config

    def _identity(self, path: str, host: str, origin: str) -> paramiko.PKey | None:
        """:func:`load_identity`, once per transport for each (path, setting)."""
        with self._keys_lock:
            if (path, origin) in self._keys:
                return self._keys[(path, origin)]
        key = load_identity(path, host=host, origin=origin)
        with self._keys_lock:
            self._keys[(path, origin)] = key
        return key

    def _default_keys(self) -> tuple[paramiko.PKey, ...]:
        """The usable keys of :data:`DEFAULT_IDENTITIES`, read once per transport."""
        with self._keys_lock:
            if self._defaults is None:
                found = (_default_identity(str(Path(p).expanduser())) for p in DEFAULT_IDENTITIES)
                self._defaults = tuple(k for k in found if k is not None)
            return self._defaults

    def _host_keys(self, name: str, ep: Endpoint) -> tuple[str, list[paramiko.PKey]]:
        """(the name ``SSHClient.connect`` looks host keys up under, the keys known_hosts holds for it).

        Args:
            name: the inventory name of the host, for messages.
            ep: where the host is reached (hostname, port) and its known_hosts file.

        Returns:
            ``(lookup name, keys)``: ``hostname`` for port 22, else ``[hostname]:port``; the keys the
            file holds for it (empty when the file is missing).

        Raises:
            ConfigError: known_hosts exists but is not a regular file, is unreadable or past
                :data:`MAX_KNOWN_HOSTS_BYTES`, or a line of this host is malformed. A missing file
                holds no keys.
        """
        # port 22: the bare name, else "[name]:port"
        lookup = ep.hostname if ep.port == 22 else f"[{ep.hostname}]:{ep.port}"
        try:
            return lookup, self.known_host_keys(ep.known_hosts, lookup)
        except NotReadable as exc:
            if exc.missing:
                return lookup, []
            what = f"known_hosts of host {name}"
            raise ConfigError(_refused(ep.known_hosts, what, exc.reason, ep.known_hosts_origin)) from None
        except paramiko.SSHException as exc:
            raise ConfigError(f"{ep.known_hosts}: cannot read known_hosts: {exc}") from None

    def _client(self, host: Host) -> paramiko.SSHClient:
        with self._guard:
            if self._closed:
                raise HostUnreachable(host.name, "transport closed (global deadline passed)")
            lock = self._locks.setdefault(host.name, threading.Lock())
        with lock:
            client = self._clients.get(host.name)
            tr = client.get_transport() if client else None
            if client is not None and tr is not None and tr.is_active():
                return client
            client = self._connect(host.name, self.endpoint(host))
            with self._guard:
                self._clients[host.name] = client
            return client

    def _connect(self, name: str, ep: Endpoint) -> paramiko.SSHClient:
        # Every local file first (config errors before any connection), each read by robustctl.
        lookup, host_keys = self._host_keys(name, ep)
        keys = [
            k
            for k in (self._identity(p, name, ep.identity_origin) for p in ep.identity_files)
            if k is not None
        ]
        defaults = () if ep.identity_files else self._default_keys()
        sock = self._open_socket(name, ep)
        client = paramiko.SSHClient()
        for key in host_keys:  # only this host's keys, under the name SSHClient.connect looks up
            client.get_host_keys().add(lookup, key.get_name(), key)
        policy: paramiko.MissingHostKeyPolicy
        if ep.accept_new:
            policy = _AcceptNewPolicy(ep.known_hosts, self._known_hosts_lock)
        else:
            policy = paramiko.RejectPolicy()
        client.set_missing_host_key_policy(policy)
        t = ep.connect_timeout_s
        user = ep.user or getpass.getuser()
        try:
            client.connect(
                ep.hostname,
                port=ep.port,
                username=user,
                sock=sock,
                timeout=t,
                banner_timeout=t,
                auth_timeout=t,
                channel_timeout=t,
                auth_strategy=_KeysThenAgent(user, keys, defaults),
            )
        except ConfigError:  # known_hosts could not record an accepted key
            client.close()
            raise
        except paramiko.BadHostKeyException:
            client.close()
            raise HostKeyError(
                name, f"host key for {ep.hostname}:{ep.port} does not match {ep.known_hosts} (possible MITM)"
            ) from None
        except paramiko.AuthenticationException:
            client.close()
            who = f"{ep.user}@" if ep.user else ""
            raise HostKeyError(name, f"authentication failed for {who}{ep.hostname}:{ep.port}") from None
        except paramiko.SSHException as exc:
            tr = client.get_transport()
            got_banner = tr is not None and bool(getattr(tr, "remote_version", None))
            client.close()
            text = str(exc)
            if "not found in known_hosts" in text:
                raise HostKeyError(
                    name,
                    f"unknown host key for {ep.hostname}:{ep.port} (not in {ep.known_hosts}; "
                    "add it, or pass --accept-new-host-keys)",
                ) from None
            if not got_banner or "banner" in text.lower():
                raise HostUnreachable(name, f"no SSH banner within {t:g}s (sshd hung?)") from None
            raise HostUnreachable(name, f"SSH error: {text}") from None
        except (OSError, EOFError) as exc:
            client.close()
            raise HostUnreachable(name, f"connection failed: {exc}") from None
        tr = client.get_transport()
        if tr is not None:
            tr.set_keepalive(15)
        return client

    def _open_socket(self, name: str, ep: Endpoint) -> Any:
        if ep.proxy_jump:
            return self._open_via_jump(name, ep)
        try:
            sock = socket.create_connection((ep.hostname, ep.port), timeout=ep.connect_timeout_s)
        except ConnectionRefusedError:
            raise HostUnreachable(name, f"connection refused by {ep.hostname}:{ep.port}") from None
        except TimeoutError:
            raise HostUnreachable(
                name, f"TCP connect to {ep.hostname}:{ep.port} timed out after {ep.connect_timeout_s:g}s"
            ) from None
        except OSError as exc:
            raise HostUnreachable(name, f"cannot connect to {ep.hostname}:{ep.port}: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _open_via_jump(self, name: str, ep: Endpoint) -> Any:
        assert ep.proxy_jump is not None
        spec = ep.proxy_jump.split(",")[0]
        user, _, hostport = spec.rpartition("@")
        jhost, _, jport = hostport.partition(":")
        cfg = dict(self._ssh_config().lookup(jhost))
        jump_ids = tuple(str(Path(i).expanduser()) for i in cfg.get("identityfile", ()))
        jep = Endpoint(
            hostname=str(cfg.get("hostname", jhost)),
            port=int(jport or cfg.get("port", "22")),
            user=user or cfg.get("user") or ep.user,
            identity_files=jump_ids or ep.identity_files,
            known_hosts=ep.known_hosts,
            proxy_jump=None,
            connect_timeout_s=ep.connect_timeout_s,
            accept_new=ep.accept_new,
            identity_origin=f"IdentityFile in {self._config_path}" if jump_ids else ep.identity_origin,
            known_hosts_origin=ep.known_hosts_origin,
        )
        jump = self._connect(f"{name} (via jump {jhost})", jep)
        with self._guard:
            self._jumps.append(jump)
        tr = jump.get_transport()
        if tr is None:
            raise HostUnreachable(name, f"jump host {jhost} closed the connection")
        try:
            return tr.open_channel(
                "direct-tcpip", (ep.hostname, ep.port), ("127.0.0.1", 0), timeout=ep.connect_timeout_s
            )
        except (paramiko.SSHException, OSError) as exc:
            raise HostUnreachable(
                name, f"jump host {jhost} cannot reach {ep.hostname}:{ep.port}: {exc}"
            ) from None

    # -- commands ------------------------------------------------------------------------------
    def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout_s: float,
        keep_stdin_open: bool = False,
    ) -> CommandResult:
        """See :meth:`robustctl.transport.base.Transport.run`.

        While the command runs, this transport is registered with :mod:`robustctl.interrupts`, whose
        ``stop_all`` shuts it down: the connection closes, ``sshd`` closes the command's input, and a
        streamed probe (``keep_stdin_open``) stops its own process group.

        Args:
            host: the inventory host (its ``ssh:`` settings say how to reach it).
            argv: the program and its arguments, quoted once for the remote login shell.
            stdin: bytes written to the command's input; None: nothing.
            timeout_s: seconds for the connection and the command; the host's
                ``ssh.command_timeout_s`` caps it.
            keep_stdin_open: leave the input open after ``stdin`` is written, until the command ends.

        Returns:
            The command's exit status (-1 when the server sent none), its stdout, the last of its
            stderr and its elapsed seconds, connection included.

        Raises:
            HostUnreachable: connection or authentication failed.
            HostKeyError: connection or authentication failed.
            CommandTimeout: the command did not finish within ``timeout_s`` (connection included).
            OutputTooLarge: it printed more than ``max_stdout`` bytes; the channel was closed.
        """
        start = time.monotonic()
        limit = min(timeout_s, host.ssh.command_timeout_s)
        deadline = start + limit
        command = remote_command(argv)
        with interrupts.register_closer(host.name, self.shutdown):
            client = self._client(host)
            tr = client.get_transport()
            if tr is None:
                raise HostUnreachable(host.name, "connection lost")
            try:
                chan = tr.open_session(timeout=max(0.1, deadline - time.monotonic()))
            except (paramiko.SSHException, OSError, EOFError) as exc:
                self._drop(host.name)
                raise HostUnreachable(
                    host.name, f"cannot open a session: {exc or 'channel refused'}"
                ) from None
            try:
                chan.exec_command(command)
                if stdin:
                    chan.sendall(stdin)
                if not keep_stdin_open:
                    chan.shutdown_write()
                drained = _drain(chan, deadline, self.max_stdout)
                if drained is None:
                    raise CommandTimeout(host.name, f"command timed out after {limit:g}s")
                out, err = drained
                status = chan.recv_exit_status() if chan.exit_status_ready() else -1
            except OutputLimitExceeded as exc:
                raise OutputTooLarge(host.name, str(exc)) from None
            except (paramiko.SSHException, OSError, EOFError) as exc:
                self._drop(host.name)
                raise HostUnreachable(host.name, f"connection lost during command: {exc}") from None
            finally:
                chan.close()
        return CommandResult(host.name, status, out, err, time.monotonic() - start)

    def _drop(self, name: str) -> None:
        with self._guard:
            client = self._clients.pop(name, None)
        if client is not None:
            client.close()

    def close(self) -> None:
        """Close every cached connection (unblocks threads waiting on them)."""
        with self._guard:
            clients = list(self._clients.values()) + self._jumps
            self._clients.clear()
            self._jumps = []
        for c in clients:
            with contextlib.suppress(Exception):
                c.close()

    def shutdown(self) -> None:
        """Close everything and refuse new connections (used when the global deadline passes)."""
        with self._guard:
            self._closed = True
        self.close()


def _drain(chan: paramiko.Channel, deadline: float, max_stdout: int) -> tuple[bytes, bytes] | None:
    """Read stdout and stderr until both end: ``(stdout, last of stderr)``; ``None`` when ``deadline``
    passes first.

    Args:
        chan: the channel the command runs on.
        deadline: the ``time.monotonic()`` instant to give up at.
        max_stdout: bound on stdout, bytes.

    Returns:
        ``(stdout, last MAX_STDERR_BYTES of stderr)``; None when ``deadline`` passes first.

    Raises:
        OutputLimitExceeded: stdout grew past ``max_stdout`` bytes.
    """
    out, err = bytearray(), TailBuffer(MAX_STDERR_BYTES)
    while True:
        progressed = False
        while chan.recv_ready():
            out += chan.recv(_READ_CHUNK)
            if len(out) > max_stdout:
                raise OutputLimitExceeded(max_stdout)
            progressed = True
        while chan.recv_stderr_ready():
            err.add(chan.recv_stderr(_READ_CHUNK))
            progressed = True
        if (
            chan.exit_status_ready()
            and chan.eof_received
            and not (chan.recv_ready() or chan.recv_stderr_ready())
        ):
            return bytes(out), err.value()
        if chan.closed and not (chan.recv_ready() or chan.recv_stderr_ready()):
            return bytes(out), err.value()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        if not progressed:
            select.select([chan], [], [], min(remaining, 0.05))


def _first(value: Any) -> str | None:
    if isinstance(value, list):
        return str(value[0]) if value else None
    return str(value) if value else None


__all__ = ["Endpoint", "SshTransport", "preflight"]
