"""A job's code as a git work tree on each of its hosts: resolve, inspect, switch (all or none).

Every host holds the job's code at ``jobs.NAME.code.path`` (``{host}`` replaced by the host's inventory
name). robustctl runs ``git`` there over the host's transport, one argv list per command
(``env GIT_TERMINAL_PROMPT=0 LC_ALL=C GIT_ALLOW_PROTOCOL= GIT_NO_LAZY_FETCH=1 git --no-pager -c … -C PATH
...``, quoted once by the transport), each with a timeout, fanned out with bounded concurrency
(:func:`robustctl.transport.fanout.fan_out`).

* :func:`inspect_hosts` reads each host's work tree: its ``HEAD`` commit, branch, whether tracked files
  have local changes, and (given a ref) the commit the ref names there
  (``git rev-parse --verify --quiet REF^{commit}``). A host whose path is not a git work tree, whose
  ref does not exist, whose work tree robustctl refuses (below), or that cannot be reached is
  reported with one line naming it.
* :func:`switch_work_trees` checks one commit out on every host, all or none: every host's previous
  ``HEAD`` (and branch) is recorded first; the checkouts run (``git checkout --detach COMMIT``), each
  followed by reading ``HEAD`` back; if any host failed, every host that was switched is put back (its
  branch, else its previous commit, read back too) and the result says so. A dirty work tree (local
  changes to tracked files) refuses the whole switch before anything runs: a checkout would carry the
  changes along, and the job would run a version nobody staged.

Refs are checked before any host sees them (:func:`check_ref`): a ref that starts with ``-`` would be
read by git as an option.

Nothing a work tree holds executes. A work tree's ``.git/config`` (with what it includes:
``include.path``, ``includeIf``, a ``config.worktree``) and its attributes (``.gitattributes``,
``.git/info/attributes``) are not robustctl's user's: the tree may have come from anywhere. robustctl runs
only ``rev-parse``, ``symbolic-ref``, ``status``, ``checkout`` and ``config --list``, and of what git can
be made to execute, those reach:

* hooks (``post-checkout``, ``reference-transaction``): ``-c core.hooksPath=/dev/null`` on every call
  (no hook file can exist under it); the fsmonitor command that ``status`` and ``checkout`` start:
  ``-c core.fsmonitor=false``; pagers (``core.pager``, ``pager.<cmd>``): ``--no-pager``. A ``-c``
  setting outranks every configuration file, included ones too (:data:`GIT_NO_EXEC`).
* transports, and with them ``core.sshCommand``, ``core.gitProxy``, ``remote.<name>.uploadpack``,
  ``ext::`` URLs, remote helpers and credential helpers: only a fetch reaches them, and the one these
  commands can start is the lazy fetch of a partial clone's missing objects. ``GIT_ALLOW_PROTOCOL=``
  (empty: no protocol allowed) refuses every transport before it starts, whatever the tree's
  ``protocol.*.allow`` says (the variable outranks configuration); ``GIT_NO_LAZY_FETCH=1`` stops the
  lazy fetch itself where git knows it (the security releases of May 2024 on: 2.39.4, 2.45.1); either
  alone closes it (:data:`GIT_ENV`).
* submodules: ``status`` would run ``git status`` inside each, and ``checkout`` a checkout when
  ``submodule.recurse`` is set; a submodule reads its own configuration, which is never listed here.
  ``status --ignore-submodules=dirty`` (a moved submodule still counts as a change; its work tree is
  not looked into) and ``checkout --no-recurse-submodules`` start no git inside a submodule.
* filter drivers: an attribute ``filter=NAME`` makes ``status`` (when a file's stat data changed) and
  ``checkout`` run ``filter.NAME.clean``, ``.smudge`` or ``.process``. Attributes come from the tree
  and no option turns them off, and blanking the driver would check out different bytes than the
  tree's owner meant. So right before each ``status`` and ``checkout`` robustctl reads the tree's own
  configuration (``git config --local --includes --show-origin -z --list``, and ``--worktree`` too
  when ``extensions.worktreeConfig`` is on: reading configuration runs nothing) and refuses the work
  tree, naming host, file and key, when it sets any key of :data:`COMMAND_KEYS` to a command: the
  filter drivers, configured hooks (``hook.NAME.command``, which git 2.54 and later run whatever
  ``core.hooksPath`` says), and every other key whose value git, or a program git starts for these
  commands (a filter such as git-lfs runs ``git credential`` and reads ``lfs.customtransfer.*``),
  runs as a command. Filters the login user set up (``~/.gitconfig``, ``/etc/gitconfig``: git-lfs)
  still run: that configuration is the user's own. Being read right before each command, the list
  follows what a checkout changed (an ``include.path`` into the work tree, ``includeIf "onbranch:"``).
* diff and merge drivers, ``textconv``, ``diff.external``, editors and ``gpg.program`` belong to
  commands robustctl never runs (diff, merge, commit, rebase, tag); a tree that names one is refused
  all the same (:data:`COMMAND_KEYS`).

git refuses a repository owned by another user ("dubious ownership") and advises adding it to
``safe.directory``; robustctl says instead that the path is owned by another user and that it will
not read it (exit 78), and never advises weakening ``safe.directory``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from robustctl.config import CodeSpec
from robustctl.errors import ActionRefused, ConfigError, HostError, UsageError
from robustctl.inventory import Host
from robustctl.transport.fanout import fan_out

if TYPE_CHECKING:
    from robustctl.actions import ActionContext
    from robustctl.transport.pool import TransportPool

__all__ = [
    "COMMAND_KEYS",
    "GIT_ENV",
    "GIT_NO_EXEC",
    "GIT_TIMEOUT_S",
    "MAX_REF_CHARS",
    "SHOWN_CHARS",
    "HostCode",
    "HostSwitch",
    "SwitchResult",
    "check_ref",
    "code_hosts",
    "common_commit",
    "current_versions",
    "inspect_hosts",
    "inspect_job",
    "job_code_hosts",
    "names_command",
    "parse_config_list",
    "require_clean",
    "switch_code",
    "switch_work_trees",
    "work_tree",
]

GIT_NO_EXEC = ("--no-pager", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null")
"""git's own options on every command robustctl runs in a job's work tree: no pager (``core.pager``,
``pager.<cmd>``), no fsmonitor command (``status`` and ``checkout`` would start the one the tree's
configuration names), hooks looked for under ``/dev/null``, where no file can be (``checkout`` runs
``post-checkout`` and ``reference-transaction``). A ``-c`` setting outranks every configuration file."""
GIT_ENV = ("GIT_TERMINAL_PROMPT=0", "LC_ALL=C", "GIT_ALLOW_PROTOCOL=", "GIT_NO_LAZY_FETCH=1")
"""The environment of every git command robustctl runs (through ``env``): never prompt, messages in
English (they are matched), no transport at all (``GIT_ALLOW_PROTOCOL`` empty allows no protocol and
outranks the tree's ``protocol.*.allow``: the lazy fetch of a partial clone's missing objects, the one
fetch these commands can start, is refused before ``core.sshCommand``, ``remote.*.uploadpack``, an
``ext::`` URL or a credential helper could run), and no lazy fetch where git knows the variable
(2.39.4, 2.45.1 and later: git's May 2024 security releases)."""
COMMAND_KEYS = (
    "filter.*.clean",  # status (a file whose stat data changed), checkout: an attribute filter=NAME
    "filter.*.smudge",
    "filter.*.process",
    "hook.*.command",  # configured hooks: git 2.54 and later run them whatever core.hooksPath says
    "diff.external",
    "diff.*.command",
    "diff.*.textconv",
    "merge.*.driver",
    "core.editor",
    "sequence.editor",
    "core.askpass",
    "credential.helper",  # git credential, which git-lfs (a filter) runs for its downloads
    "credential.*.helper",
    "core.sshcommand",  # git-lfs reads it for an ssh remote
    "core.gitproxy",
    "remote.*.uploadpack",
    "remote.*.receivepack",
    "uploadpack.packobjectshook",
    "core.alternaterefscommand",
    "gpg.program",
    "gpg.*.program",
    "gpg.ssh.defaultkeycommand",
    "lfs.customtransfer.*.path",  # git-lfs (a filter) runs the transfer agent the repository names
    "lfs.extension.*.clean",
    "lfs.extension.*.smudge",
)
"""Configuration keys whose value is a command that git, or a program git starts (a filter such as
git-lfs), runs; ``*`` stands for any subsection, dots included; matched on the lower-cased key. A work
tree whose own configuration (``.git/config``, ``config.worktree``, what they include) sets one to a
non-empty value is refused before ``status`` or ``checkout`` runs there. The fsmonitor, hooks-path and
pager keys are not here: :data:`GIT_NO_EXEC` switches them off on every call, so a tree that sets them
(``core.hooksPath`` for a hook manager, ``core.fsmonitor`` in a large repository) is still read. From git's
config documentation (git-config(1), gitattributes(5) "filter", githooks(5)) and git-lfs-config(5)."""
SHOWN_CHARS = 120
"""Longest configuration file name or key quoted in a message (what a host sends is bounded before
it is shown; a real key or path is shorter)."""
MAX_REF_CHARS = 256
"""Longest ref accepted (git's own limit on a ref name is the file system's, 255 bytes a component)."""
GIT_TIMEOUT_S = 60.0
"""Timeout of one git command on one host: a local checkout of a large repository takes seconds; a
host that needs a minute is reported timed out rather than waited on."""

_REF = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_./@{}^~+-]*$")
_COMMIT = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


def check_ref(ref: str) -> str:
    """``ref`` when it can be handed to git as a revision (a branch, tag, commit, ``HEAD~1``, ``v1.2``).

    Args:
        ref: the ``--ref`` value, as given.

    Returns:
        ``ref`` itself, unchanged.

    Raises:
        UsageError: empty, longer than :data:`MAX_REF_CHARS`, starting with ``-`` (git would read an
            option), or holding a character outside ``A-Za-z0-9_./@{}^~+-`` (spaces, ``:``, control
            characters, NUL).
    """
    if not ref or len(ref) > MAX_REF_CHARS or not _REF.match(ref):
        shown = ref[:60].encode("unicode_escape").decode("ascii")
        raise UsageError(
            f"--ref {shown!r} is not a git revision robustctl accepts: letters, digits and _./@{{}}^~+- "
            f"only, not starting with '-', at most {MAX_REF_CHARS} characters (e.g. 3f2c1e0, v1.4, main~1)"
        )
    return ref


def work_tree(spec: CodeSpec, host: Host) -> str:
    """The work tree's path on ``host``: ``spec.path`` with ``{host}`` replaced by the host's name."""
    return spec.path.replace("{host}", host.name)


@dataclass(frozen=True)
class HostCode:
    """One host's work tree as :func:`inspect_hosts` read it.

    Attributes:
        host: inventory name. path: the work tree. head: the commit checked out (None when unknown).
        branch: the branch checked out (None: detached HEAD, or unknown). dirty: tracked files have
        local changes. target: the commit the asked ref names there (None: not asked, or missing).
        error: one line when the host could not be read or the ref is missing (None when fine).
        problem: what kind of error: ``unreachable``, ``timed_out``, ``not-a-work-tree``,
        ``refused`` (robustctl will not read it: owned by another user, or its own git configuration
        names a command, :data:`COMMAND_KEYS`), ``ref-missing``, ``failed`` (None when fine).
    """

    host: str
    path: str
    head: str | None = None
    branch: str | None = None
    dirty: bool = False
    target: str | None = None
    error: str | None = None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        """True when the host was read (and the asked ref exists there)."""
        return self.error is None


class _GitFailed(HostError):
    """A git command exited non-zero (``kind`` says what that means)."""

    def __init__(self, host: str, message: str, kind: str) -> None:
        super().__init__(host, message)
        self.kind = kind


_NOT_OWNER = (b"dubious ownership", b"unsafe repository", b"safe.directory")
"""What git's stderr says when it refuses a repository another user owns (2.35.2 and later)."""
_FALSE = frozenset({"false", "no", "off", "0", ""})
"""The values git reads as boolean false."""
_STATUS = ("status", "--porcelain", "--untracked-files=no", "--ignore-submodules=dirty")
"""Local changes to tracked files; a submodule counts when it moved, and no git runs inside it."""
_CHECKOUT = ("checkout", "-q", "--no-recurse-submodules")
"""A checkout that starts no git inside a submodule, whatever ``submodule.recurse`` says."""


def _shown(text: str) -> str:
    """``text`` for a one-line message: control characters escaped, at most :data:`SHOWN_CHARS`."""
    shown = text[:SHOWN_CHARS].encode("unicode_escape").decode("ascii")
    return shown + ("…" if len(text) > SHOWN_CHARS else "")


def _run_git(
    pool: TransportPool, host: Host, path: str, args: Sequence[str], deadline: float
) -> tuple[int, str, str]:
    """Run ``git -C path ARGS`` on ``host`` (:data:`GIT_ENV`, :data:`GIT_NO_EXEC`); (exit status,
    stdout as sent, last stderr line).

    Args:
        pool: transports to the hosts.
        host: the host to run git on.
        path: the work tree on ``host`` (``git -C``).
        args: git's arguments after ``-C path``.
        deadline: the :func:`time.monotonic` time by which the host's work must end; the command's
            timeout is what is left of it, at least 0.5 s and at most :data:`GIT_TIMEOUT_S`.

    Returns:
        ``(exit status, stdout decoded as UTF-8 with bad bytes replaced, last stderr line)``.

    Raises:
        _GitFailed: ``refused``, git refused the repository as owned by another user (its own advice,
            to add the path to ``safe.directory``, is never passed on).
    """
    timeout = max(0.5, min(GIT_TIMEOUT_S, deadline - time.monotonic()))
    argv = ["env", *GIT_ENV, "git", *GIT_NO_EXEC, "-C", path, *args]
    res = pool.run(host, argv, timeout_s=timeout)
    if res.exit_status != 0 and any(m in res.stderr for m in _NOT_OWNER):
        raise _GitFailed(
            host.name,
            f"{path} is owned by another user; robustctl will not read it (run as its owner or fix the ownership)",
            "refused",
        )
    return res.exit_status, res.stdout.decode("utf-8", "replace"), res.stderr_tail()


def _git(
    pool: TransportPool, host: Host, path: str, args: Sequence[str], deadline: float
) -> tuple[int, str, str]:
    """:func:`_run_git` with stdout stripped of surrounding white space."""
    rc, out, err = _run_git(pool, host, path, args, deadline)
    return rc, out.strip(), err


def parse_config_list(text: str) -> list[tuple[str, str, str | None]]:
    """``git config --show-origin -z --list`` output as ``(origin, key, value)``, in git's order.

    ``value`` is None for a key written without ``=`` (git reads it as boolean true). Each entry is
    ``ORIGIN NUL KEY [LF VALUE] NUL``; a key holds no LF, a value may.
    """
    parts = text.split("\0")
    out: list[tuple[str, str, str | None]] = []
    for origin, item in zip(parts[0::2], parts[1::2], strict=False):
        key, lf, value = item.partition("\n")
        out.append((origin, key, value if lf else None))
    return out


def names_command(key: str) -> bool:
    """True when configuration ``key`` (as git lists it) is one of :data:`COMMAND_KEYS`."""
    low = key.lower()
    return any(fnmatchcase(low, pattern) for pattern in COMMAND_KEYS)


def _own_config(
    pool: TransportPool, host: Host, path: str, deadline: float
) -> list[tuple[str, str, str | None]]:
    """The work tree's own configuration, includes followed: ``.git/config``, and ``config.worktree``
    when ``extensions.worktreeConfig`` is on (the login user's and the system's are left out).

    Args:
        pool: transports to the hosts.
        host: the host of the work tree.
        path: the work tree on ``host``.
        deadline: the :func:`time.monotonic` time by which the host's work must end.

    Returns:
        ``(origin, key, value)`` of every entry, in git's order (:func:`parse_config_list`).

    Raises:
        _GitFailed: ``refused``, git could not list it (a malformed file, a git without
            ``--show-origin``: older than 2.8).
    """

    def listed(scope: str) -> list[tuple[str, str, str | None]]:
        argv = ["config", scope, "--includes", "--show-origin", "-z", "--list"]
        rc, out, err = _run_git(pool, host, path, argv, deadline)
        if rc != 0:
            raise _GitFailed(
                host.name, f"{path}: cannot read its git configuration ({err or f'git exit {rc}'})", "refused"
            )
        return parse_config_list(out)

    entries = listed("--local")
    ext = [v for _, k, v in entries if k.lower() == "extensions.worktreeconfig"]
    if ext and (ext[-1] is None or ext[-1].strip().lower() not in _FALSE):
        entries += listed("--worktree")  # without the extension it would read .git/config again
    return entries


def _refuse_commands(pool: TransportPool, host: Host, path: str, deadline: float) -> None:
    """Raise ``refused`` when the work tree's own configuration sets a :data:`COMMAND_KEYS` key.

    Runs right before every ``status`` and ``checkout``: a checkout can change what the configuration
    includes (a file in the work tree, ``includeIf "onbranch:"``).
    """
    named = [(o, k) for o, k, v in _own_config(pool, host, path, deadline) if v and names_command(k)]
    if named:
        origin, key = named[0]
        where = origin.removeprefix("file:")
        more = f" (and {len(named) - 1} more such key(s))" if len(named) > 1 else ""
        raise _GitFailed(
            host.name,
            f"{path}: {_shown(where)} sets {_shown(key)}, a command git would run{more}; robustctl will not "
            "read or switch a work tree whose own git configuration names a command (remove it there, "
            "or set it in the login user's ~/.gitconfig)",
            "refused",
        )


def _branch(rc: int, name: str) -> str | None:
    """The branch ``symbolic-ref --short HEAD`` printed; None when detached, or a name that a later
    ``checkout NAME`` could not take as a branch (empty, starting with ``-``: an option)."""
    return name if rc == 0 and _REF.match(name) else None


def _checkout_cmd(
    pool: TransportPool, host: Host, path: str, target: str, deadline: float, *, detach: bool
) -> tuple[int, str, str]:
    """``git checkout`` of ``target`` (a commit with ``detach``, else a branch), once the work tree's
    configuration has been read again and found to name no command (:func:`_refuse_commands`)."""
    _refuse_commands(pool, host, path, deadline)
    return _git(pool, host, path, [*_CHECKOUT, *(("--detach",) if detach else ()), target], deadline)


def _read_host(pool: TransportPool, host: Host, path: str, ref: str | None, deadline: float) -> HostCode:
    rc, _, err = _git(pool, host, path, ["rev-parse", "--show-toplevel"], deadline)
    if rc != 0:
        raise _GitFailed(
            host.name, f"{path} is not a git work tree ({err or f'git exit {rc}'})", "not-a-work-tree"
        )
    rc, head, err = _git(pool, host, path, ["rev-parse", "--verify", "HEAD^{commit}"], deadline)
    if rc != 0 or not _COMMIT.match(head):
        raise _GitFailed(host.name, f"{path}: cannot read HEAD ({err or head[:80]})", "not-a-work-tree")
    rc_b, branch, _ = _git(pool, host, path, ["symbolic-ref", "-q", "--short", "HEAD"], deadline)
    _refuse_commands(pool, host, path, deadline)
    rc_s, status, err_s = _git(pool, host, path, _STATUS, deadline)
    if rc_s != 0:
        raise _GitFailed(host.name, f"{path}: git status failed ({err_s})", "failed")
    target = None
    if ref is not None:
        rc, out, _ = _git(
            pool, host, path, ["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], deadline
        )
        if rc != 0 or not _COMMIT.match(out):
            raise _GitFailed(host.name, f"ref {ref!r} does not name a commit in {path}", "ref-missing")
        target = out
    return HostCode(host.name, path, head, _branch(rc_b, branch), bool(status), target)


def inspect_hosts(
    pool: TransportPool,
    hosts: Sequence[Host],
    spec: CodeSpec,
    ref: str | None = None,
    *,
    concurrency: int = 64,
    timeout_s: float = 120.0,
) -> tuple[HostCode, ...]:
    """Read every host's work tree (and resolve ``ref`` there), in the order given.

    Args:
        pool: transports to the hosts.
        hosts: the hosts to read.
        spec: the job's ``code:`` section (the work tree's path, :func:`work_tree`).
        ref: a ref to resolve on each host (already passed through :func:`check_ref`), or None.
        concurrency: hosts at once.
        timeout_s: per host budget (each git command at most :data:`GIT_TIMEOUT_S`).

    Returns:
        One :class:`HostCode` per host; an unreadable host or missing ref is an entry with
        ``error`` set (nothing is raised for a host).
    """
    by_name = {h.name: h for h in hosts}

    def work(host: Host, deadline: float) -> HostCode:
        path = work_tree(spec, host)
        try:
            return _read_host(pool, host, path, ref, deadline)
        except _GitFailed as exc:
            return HostCode(host.name, path, error=exc.reason, problem=exc.kind)

    result = fan_out(list(hosts), work, concurrency=concurrency, host_timeout_s=timeout_s, retries=1)
    out: list[HostCode] = []
    for o in result.outcomes:
        if o.ok and o.value is not None:
            out.append(o.value)
        else:
            path = work_tree(spec, by_name[o.host.name])
            out.append(HostCode(o.host.name, path, error=o.error or o.outcome.value, problem=o.outcome.value))
    return tuple(out)


def _first_problem(codes: Sequence[HostCode]) -> str:
    bad = [c for c in codes if not c.ok]
    more = f" (and {len(bad) - 1} more host(s))" if len(bad) > 1 else ""
    return f"{bad[0].host}: {bad[0].error}{more}"


def common_commit(codes: Sequence[HostCode], ref: str) -> str:
    """The one commit ``ref`` names on every host.

    Each error's message is one line naming the first host concerned.

    Args:
        codes: every host's reading (:func:`inspect_hosts` with ``ref``).
        ref: the ref that was resolved, for the message.

    Returns:
        The full commit id ``ref`` names on every host.

    Raises:
        ConfigError: a host's path is not a git work tree (fix the inventory's ``code.path``), or
            robustctl refuses it (owned by another user; its own git configuration names a command).
        UsageError: the ref is missing on a host, or names different commits on different hosts.
        HostError: a host could not be reached or timed out (exit 3: could not check).
    """
    bad = [c for c in codes if not c.ok]
    if bad:
        line = _first_problem(codes)
        if bad[0].problem in ("not-a-work-tree", "refused"):
            raise ConfigError(line)
        if bad[0].problem == "ref-missing":
            raise UsageError(line + "; fetch or push it to every host first")
        raise HostError(bad[0].host, line.split(": ", 1)[1])
    targets = {c.target for c in codes}
    if len(targets) != 1 or None in targets:
        first = codes[0]
        other = next(c for c in codes if c.target != first.target)
        raise UsageError(
            f"{other.host}: ref {ref!r} names commit {str(other.target)[:12]} there but "
            f"{str(first.target)[:12]} on {first.host}; give a commit id"
        )
    return str(codes[0].target)


def require_clean(codes: Sequence[HostCode]) -> None:
    """Refuse a switch when a host's work tree has local changes to tracked files.

    Args:
        codes: every host's reading (:func:`inspect_hosts`).

    Raises:
        ActionRefused: naming the first dirty host (exit 2; nothing was switched).
    """
    dirty = [c for c in codes if c.dirty]
    if dirty:
        more = f" (and {len(dirty) - 1} more host(s))" if len(dirty) > 1 else ""
        raise ActionRefused(
            f"{dirty[0].host}: {dirty[0].path} has local changes to tracked files{more}; commit or "
            "discard them there first (a checkout would carry them into the new version)"
        )


def current_versions(codes: Sequence[HostCode]) -> tuple[str | None, tuple[str, ...]]:
    """The commit every readable host runs, and the hosts that disagree with the majority.

    Args:
        codes: every host's reading (:func:`inspect_hosts`), in inventory order.

    Returns:
        ``(commit, disagreeing hosts)``: ``commit`` is the most common ``head`` among readable hosts
        (None when none could be read); hosts whose ``head`` differs, or that could not be read, are
        listed (inventory order).
    """
    counts: dict[str, int] = {}
    for c in codes:
        if c.head is not None:
            counts[c.head] = counts.get(c.head, 0) + 1
    if not counts:
        return None, tuple(c.host for c in codes)
    commit = max(counts, key=lambda k: (counts[k], k))
    return commit, tuple(c.host for c in codes if c.head != commit)


@dataclass(frozen=True)
class HostSwitch:
    """What :func:`switch_work_trees` did on one host.

    Attributes:
        host, path. before: HEAD before (None: unknown). branch: the branch before (None: detached).
        after: HEAD read back at the end (None: unknown). status: ``switched``, ``unchanged`` (already
        at the commit), ``failed`` (its checkout failed), ``restored`` (switched, then put back because
        another host failed), ``restore-failed`` (could not be put back: fix by hand), ``not-run``
        (the preflight failed; nothing ran). detail: one line.
    """

    host: str
    path: str
    before: str | None
    branch: str | None
    after: str | None
    status: str
    detail: str = ""


@dataclass(frozen=True)
class SwitchResult:
    """The outcome of an all-or-none switch.

    Attributes:
        commit: the commit asked for. ok: every host now runs it. hosts: one :class:`HostSwitch` per
        host, in the order given. message: one line (names the first failing host when not ok).
    """

    commit: str
    ok: bool
    hosts: tuple[HostSwitch, ...]
    message: str

    @property
    def half_applied(self) -> tuple[str, ...]:
        """Hosts left on neither the old nor the new version (``restore-failed``): should be empty."""
        return tuple(h.host for h in self.hosts if h.status == "restore-failed")


def _checkout(pool: TransportPool, host: Host, path: str, commit: str, deadline: float) -> str:
    rc, _, err = _checkout_cmd(pool, host, path, commit, deadline, detach=True)
    if rc != 0:
        raise _GitFailed(
            host.name, f"git checkout {commit[:12]} failed in {path}: {err or f'exit {rc}'}", "failed"
        )
    rc, head, err = _git(pool, host, path, ["rev-parse", "--verify", "HEAD^{commit}"], deadline)
    if rc != 0 or head != commit:
        raise _GitFailed(
            host.name, f"{path}: HEAD is {head[:12] or '?'} after checking out {commit[:12]}", "failed"
        )
    return head


def _restore(pool: TransportPool, host: Host, code: HostCode, deadline: float) -> str:
    assert code.head is not None
    path = code.path
    rc, now, _ = _git(pool, host, path, ["rev-parse", "--verify", "HEAD^{commit}"], deadline)
    rc_b, branch, _ = _git(pool, host, path, ["symbolic-ref", "-q", "--short", "HEAD"], deadline)
    if rc == 0 and now == code.head and _branch(rc_b, branch) == code.branch:
        return now  # never moved (its own checkout failed before touching HEAD)
    if code.branch is not None:
        rc, _, _ = _checkout_cmd(pool, host, path, code.branch, deadline, detach=False)
        if rc == 0:
            rc, head, _ = _git(pool, host, path, ["rev-parse", "--verify", "HEAD^{commit}"], deadline)
            if rc == 0 and head == code.head:
                return head
    rc, _, err = _checkout_cmd(pool, host, path, code.head, deadline, detach=True)
    if rc != 0:
        raise _GitFailed(host.name, f"cannot put {path} back on {code.head[:12]}: {err}", "failed")
    rc, head, err = _git(pool, host, path, ["rev-parse", "--verify", "HEAD^{commit}"], deadline)
    if rc != 0 or head != code.head:
        raise _GitFailed(host.name, f"{path}: HEAD is {head[:12] or '?'}, not {code.head[:12]}", "failed")
    return head


def switch_work_trees(
    pool: TransportPool,
    hosts: Sequence[Host],
    spec: CodeSpec,
    commit: str,
    *,
    codes: Sequence[HostCode] | None = None,
    concurrency: int = 64,
    timeout_s: float = 120.0,
) -> SwitchResult:
    """Check ``commit`` out on every host's work tree, all or none (see the module docstring).

    Args:
        pool: transports to the hosts.
        hosts: the hosts to switch.
        spec: the job's ``code:`` section (the work tree's path, :func:`work_tree`).
        commit: a full commit id (40 or 64 hex digits), e.g. from :func:`common_commit`.
        codes: the hosts' :func:`inspect_hosts` reading with ``ref=commit`` (None: read now).
        concurrency: hosts at once.
        timeout_s: per host budget of the checkout, and of the restore (each git command at most
            :data:`GIT_TIMEOUT_S`).

    Returns:
        A :class:`SwitchResult`; ``ok`` False when a host could not be read, the commit is missing on
        a host (nothing ran: every host ``not-run``), or a checkout failed (the switched hosts were put
        back: ``restored``, or ``restore-failed`` when even that failed).

    Raises:
        UsageError: ``commit`` is not a full commit id.
        ActionRefused: a work tree has local changes (:func:`require_clean`); nothing ran.
    """
    if not _COMMIT.match(commit):
        raise UsageError(f"{commit!r} is not a full commit id")
    if codes is None:
        codes = inspect_hosts(pool, hosts, spec, commit, concurrency=concurrency, timeout_s=timeout_s)
    if any(not c.ok or c.target != commit for c in codes):
        bad = [c for c in codes if not c.ok or c.target != commit]
        line = f"{bad[0].host}: {bad[0].error or f'commit {commit[:12]} is missing'}"
        rows = tuple(
            HostSwitch(c.host, c.path, c.head, c.branch, c.head, "not-run", c.error or "") for c in codes
        )
        return SwitchResult(commit, False, rows, f"nothing switched: {line}")
    require_clean(codes)
    by_name = {c.host: c for c in codes}
    todo = [h for h in hosts if by_name[h.name].head != commit]

    def work(host: Host, deadline: float) -> str:
        return _checkout(pool, host, by_name[host.name].path, commit, deadline)

    switched = fan_out(todo, work, concurrency=concurrency, host_timeout_s=timeout_s, retries=0)
    failed = {o.host.name: o.error or o.outcome.value for o in switched.failed}
    if not failed:
        rows = tuple(
            HostSwitch(
                c.host, c.path, c.head, c.branch, commit, "unchanged" if c.head == commit else "switched"
            )
            for c in codes
        )
        n = sum(r.status == "switched" for r in rows)
        return SwitchResult(
            commit, True, rows, f"{commit[:12]} checked out on {n} host(s), {len(rows) - n} already on it"
        )
    # Put back every host that may have moved: the ones that switched, and the failed ones too (a
    # checkout that timed out may still have switched); a host still on its old HEAD is a no-op.
    back = list(todo)

    def undo(host: Host, deadline: float) -> str:
        return _restore(pool, host, by_name[host.name], deadline)

    restored = {
        o.host.name: o
        for o in fan_out(back, undo, concurrency=concurrency, host_timeout_s=timeout_s, retries=1).outcomes
    }
    rows_l: list[HostSwitch] = []
    for c in codes:
        r = restored.get(c.host)
        if c.host in failed:
            status, detail = (
                ("failed", failed[c.host])
                if r is None or r.ok
                else ("restore-failed", f"{failed[c.host]}; {r.error}")
            )
        elif r is None:
            status, detail = "unchanged", "already on the commit"
        elif r.ok:
            status, detail = "restored", f"switched, then put back on {str(c.head)[:12]}"
        else:
            status, detail = "restore-failed", str(r.error)
        after = c.head if status in ("failed", "restored", "unchanged") else None
        if status == "unchanged":
            after = commit
        rows_l.append(HostSwitch(c.host, c.path, c.head, c.branch, after, status, detail))
    first = next(h for h in rows_l if h.status == "failed" or h.status == "restore-failed")
    left = [h.host for h in rows_l if h.status == "restore-failed"]
    tail = (
        f"; NOT put back: {', '.join(left)} (fix by hand)" if left else "; every switched host was put back"
    )
    return SwitchResult(commit, False, tuple(rows_l), f"nothing switched: {first.host}: {first.detail}{tail}")


def code_hosts(
    ctx: ActionContext, job: str, hosts: Sequence[str] | None = None
) -> tuple[CodeSpec, list[Host]]:
    """The job's ``code:`` section and its hosts (``hosts`` names, else its current machines:
    :meth:`ActionContext.job_hosts`), as inventory :class:`~robustctl.inventory.Host` s.

    Args:
        ctx: the open action context.
        job: the inventory job's name.
        hosts: the hosts' names (None: the job's current machines).

    Returns:
        The job's ``code:`` section and its hosts (``hosts``' order, else rank order).

    Raises:
        UsageError: the job is not in the inventory.
        ConfigError: the job has no ``code:`` section, or a host of the job is not in the inventory.
    """
    names = list(hosts) if hosts is not None else list(ctx.job_hosts(job).hosts)
    spec = ctx.inventory.job(job).code
    if spec is None:
        raise ConfigError(
            f"{ctx.inventory.source}: job {job} has no code: section (code: {{path: /path/to/git/work/tree}})"
        )
    return spec, [ctx.inventory.by_name(n) for n in names]


def job_code_hosts(ctx: ActionContext, job: str) -> tuple[CodeSpec, list[Host]]:
    """:func:`code_hosts` of a job a person named (``--job``): the job's ``code:`` section and its
    current machines.

    Args:
        ctx: the open action context.
        job: the inventory job's name, as given.

    Returns:
        The job's ``code:`` section and its hosts (rank order).

    Raises:
        UsageError: the job is not in the inventory (bad input, exit 64).
        ConfigError: the job has no ``code:`` section, or a host of the job is not in the inventory.
    """
    try:
        ctx.inventory.job(job)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    return code_hosts(ctx, job)


def inspect_job(
    ctx: ActionContext, job: str, ref: str | None
) -> tuple[CodeSpec, list[Host], tuple[HostCode, ...]]:
    """Read the work tree of every host of ``job`` (:func:`inspect_hosts`), ``ref`` resolved there too,
    with the inventory's fan-out settings and a pool of its own.

    Args:
        ctx: the open action context.
        job: the inventory job (see :func:`job_code_hosts`).
        ref: a checked ref (:func:`check_ref`) to resolve on every host, or None.

    Returns:
        The job's ``code:`` section, its hosts, and one :class:`HostCode` per host (same order).

    Raises:
        UsageError / ConfigError: see :func:`job_code_hosts` and :func:`inspect_hosts`.
    """
    from robustctl.transport.pool import TransportPool

    spec, hosts = job_code_hosts(ctx, job)
    pool = TransportPool()
    try:
        codes = inspect_hosts(
            pool,
            hosts,
            spec,
            ref,
            concurrency=ctx.inventory.diagnose.concurrency,
            timeout_s=ctx.inventory.diagnose.host_timeout_s,
        )
    finally:
        pool.close()
    return spec, hosts, codes


def switch_code(
    ctx: ActionContext,
    job: str,
    hosts: Sequence[str] | None,
    commit: str,
    *,
    pool: TransportPool | None = None,
    codes: Sequence[HostCode] | None = None,
) -> SwitchResult:
    """Check ``commit`` out on every host of ``job`` (``hosts``: names, None: the job's current machines),
    all or none (:func:`switch_work_trees`), with the inventory's fan-out settings.

    Args:
        ctx: the open action context.
        job: the inventory job's name.
        hosts: the hosts' names (None: the job's current machines).
        commit: a full commit id (40 or 64 hex digits).
        pool: transports to the hosts (None: a pool of its own, closed at the end).
        codes: the hosts' reading with ``ref=commit`` taken when the switch was planned (None: read
            now); the heads it holds are what a failed switch puts back.

    Returns:
        The :class:`SwitchResult` of :func:`switch_work_trees`.

    Raises:
        UsageError / ConfigError: see :func:`code_hosts`, and a ``commit`` that is not a full id.
        ActionRefused: a dirty work tree (nothing ran).
    """
    from robustctl.transport.pool import TransportPool

    spec, targets = code_hosts(ctx, job, hosts)
    own = pool is None
    p = pool or TransportPool()
    try:
        return switch_work_trees(
            p,
            targets,
            spec,
            commit,
            codes=codes,
            concurrency=ctx.inventory.diagnose.concurrency,
            timeout_s=ctx.inventory.diagnose.host_timeout_s,
        )
    finally:
        if own:
            p.close()
