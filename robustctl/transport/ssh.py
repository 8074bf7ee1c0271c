"""The SSH transport (paramiko), with connection reuse, strict host keys and hard deadlines.

Security defaults follow OpenSSH: host keys are checked against known_hosts and an unknown key is
refused (``StrictHostKeyChecking=yes``) unless ``accept_new_host_keys`` is set, which records
unknown keys but still refuses changed ones (``accept-new``). Only key and agent authentication are
used; no password is ever asked for, stored or logged. ``~/.ssh/config`` is honoured for HostName,
User, Port, IdentityFile, UserKnownHostsFile and ProxyJump (one hop), below explicit inventory values.

Deadlines: TCP connect, SSH banner and authentication each use ``connect_timeout_s``; a command is
abandoned (channel closed) when its ``timeout_s`` passes. stdout and stderr are drained while the
command runs, so output cannot stall the channel window; stdout is bounded (the command is stopped
past ``max_stdout``) and only the last part of stderr is kept.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import paramiko

from robustctl import interrupts
from robustctl.errors import CommandTimeout, ConfigError, HostKeyError, HostUnreachable, OutputTooLarge
from robustctl.transport.base import MAX_STDERR_BYTES, MAX_STDOUT_BYTES, CommandResult, remote_command
from robustctl.transport.process import OutputLimitExceeded, TailBuffer

if TYPE_CHECKING:
    from robustctl.inventory import Host

# paramiko logs connection failures (with tracebacks) that robustctl already reports as one line per
# host; without a handler Python's last-resort handler would print them on stderr.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False

DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")
DEFAULT_SSH_CONFIG = Path("~/.ssh/config")
_READ_CHUNK = 1 << 16


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


class _KnownHostsIndex:
    """A known_hosts file's lines by host name (plain names), and its hashed (``|1|``) lines."""

    def __init__(self, plain: dict[str, list[tuple[int, str]]], hashed: list[tuple[str, int, str]]) -> None:
        self.plain = plain
        self.hashed = hashed

    @classmethod
    def read(cls, path: Path) -> _KnownHostsIndex:
        """Index ``path`` (comments, blank lines and ``@`` marker lines skipped, as paramiko does)."""
        plain: dict[str, list[tuple[int, str]]] = {}
        hashed: list[tuple[str, int, str]] = []
        with path.open(encoding="utf-8", errors="replace") as fh:
            for n, raw in enumerate(fh):
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
        with self._lock:
            client.get_host_keys().add(hostname, key.get_name(), key)
            self._path.parent.mkdir(parents=True, exist_ok=True)
            line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
            with self._path.open("a", encoding="ascii") as fh:
                fh.write(line)


def preflight(hosts: Sequence[Host]) -> None:
    """Check what can be checked before connecting: identity files exist and are readable.

    Raises:
        ConfigError: ``"FILE: identity file ...: why"`` for the first unreadable identity file.
    """
    seen: set[str] = set()
    for h in hosts:
        if h.transport != "ssh" or not h.ssh.identity_file or h.ssh.identity_file in seen:
            continue
        seen.add(h.ssh.identity_file)
        path = Path(h.ssh.identity_file).expanduser()
        try:
            with path.open("rb") as fh:
                head = fh.read(64)
        except OSError as exc:
            raise ConfigError(f"{path}: identity file of host {h.name} unreadable: {exc.strerror}") from None
        if b"PRIVATE KEY" not in head:
            raise ConfigError(f"{path}: identity file of host {h.name} is not a private key")


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
        ids = (s.identity_file,) if s.identity_file else tuple(cfg.get("identityfile", ()))
        kh = s.known_hosts or _first(cfg.get("userknownhostsfile")) or str(DEFAULT_KNOWN_HOSTS)
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
        )

    def known_host_keys(self, path: Path, name: str) -> list[paramiko.PKey]:
        """The keys ``path`` (a known_hosts file) holds for ``name`` (``host`` or ``[host]:port``).

        The file is read and indexed by host name once per transport, and again only when it changes
        (size, mtime or inode: e.g. a key recorded by ``--accept-new-host-keys``); only the lines of
        ``name`` are parsed (hashed ``|1|`` names are matched by their HMAC, as OpenSSH and paramiko
        do). ``SSHClient.load_host_keys`` instead parses the whole file for every connection, and
        paramiko 5.1's parser checks each line against all lines before it: O(lines²), 0.9 s of CPU
        for 2,000 hosts, per connection (``python -m bench ssh-connect`` measures it).

        Raises:
            OSError: the file cannot be read. paramiko.SSHException: a line of ``name`` is malformed.
        """
        st = path.stat()
        sig = (st.st_mtime_ns, st.st_size, st.st_ino)
        with self._known_hosts_lock:
            hit = self._known.get(path)
        if hit is None or hit[0] != sig:
            hit = (sig, _KnownHostsIndex.read(path))
            with self._known_hosts_lock:
                self._known[path] = hit
        return hit[1].keys_for(name)

    def _ssh_config(self) -> paramiko.SSHConfig:
        if self._config is None:
            if self._config_path.is_file():
                try:
                    self._config = paramiko.SSHConfig.from_path(str(self._config_path))
                except (OSError, paramiko.ssh_exception.ConfigParseError) as exc:
                    raise ConfigError(f"{self._config_path}: cannot parse: {exc}") from None
            else:
                self._config = paramiko.SSHConfig()
        return self._config

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
        sock = self._open_socket(name, ep)
        client = paramiko.SSHClient()
        if ep.known_hosts.is_file():
            # Only this host's keys, under the name SSHClient.connect looks up (port 22: the bare
            # name, else "[name]:port").
            name = ep.hostname if ep.port == 22 else f"[{ep.hostname}]:{ep.port}"
            try:
                keys = self.known_host_keys(ep.known_hosts, name)
            except (OSError, paramiko.SSHException) as exc:
                sock.close()
                raise ConfigError(f"{ep.known_hosts}: cannot read known_hosts: {exc}") from None
            for key in keys:
                client.get_host_keys().add(name, key.get_name(), key)
        policy: paramiko.MissingHostKeyPolicy
        if ep.accept_new:
            policy = _AcceptNewPolicy(ep.known_hosts, self._known_hosts_lock)
        else:
            policy = paramiko.RejectPolicy()
        client.set_missing_host_key_policy(policy)
        t = ep.connect_timeout_s
        try:
            client.connect(
                ep.hostname,
                port=ep.port,
                username=ep.user,
                key_filename=list(ep.identity_files) or None,  # type: ignore[arg-type]  # paramiko accepts a list
                look_for_keys=not ep.identity_files,
                allow_agent=True,
                sock=sock,
                timeout=t,
                banner_timeout=t,
                auth_timeout=t,
                channel_timeout=t,
            )
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
        jep = Endpoint(
            hostname=str(cfg.get("hostname", jhost)),
            port=int(jport or cfg.get("port", "22")),
            user=user or cfg.get("user") or ep.user,
            identity_files=tuple(str(Path(i).expanduser()) for i in cfg.get("identityfile", ()))
            or ep.identity_files,
            known_hosts=ep.known_hosts,
            proxy_jump=None,
            connect_timeout_s=ep.connect_timeout_s,
            accept_new=ep.accept_new,
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

        Raises:
            HostUnreachable, HostKeyError: connection or authentication failed.
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
