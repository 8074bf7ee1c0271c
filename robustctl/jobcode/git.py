"""A job's code as a git work tree on each of its hosts: resolve, inspect, switch (all or none).

Every host holds the job's code at ``jobs.NAME.code.path`` (``{host}`` replaced by the host's inventory
name). robustctl runs ``git`` there over the host's transport, one argv list per command
(``env GIT_TERMINAL_PROMPT=0 LC_ALL=C git -c … -C PATH ...``, quoted once by the transport; the
``-c`` settings, :data:`GIT_NO_EXEC`, keep the work tree's own configuration from running commands), each with a
timeout, fanned out with bounded concurrency (:func:`robustctl.transport.fanout.fan_out`).

* :func:`inspect_hosts` reads each host's work tree: its ``HEAD`` commit, branch, whether tracked files
  have local changes, and (given a ref) the commit the ref names there
  (``git rev-parse --verify --quiet REF^{commit}``). A host whose path is not a git work tree, whose
  ref does not exist, or that cannot be reached is reported with one line naming it.
* :func:`switch_work_trees` checks one commit out on every host, all or none: every host's previous
  ``HEAD`` (and branch) is recorded first; the checkouts run (``git checkout --detach COMMIT``), each
  followed by reading ``HEAD`` back; if any host failed, every host that was switched is put back (its
  branch, else its previous commit, read back too) and the result says so. A dirty work tree (local
  changes to tracked files) refuses the whole switch before anything runs: a checkout would carry the
  changes along, and the job would run a version nobody staged.

Refs are checked before any host sees them (:func:`check_ref`): a ref that starts with ``-`` would be
read by git as an option.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from robustctl.config import CodeSpec
from robustctl.errors import ActionRefused, ConfigError, HostError, UsageError
from robustctl.inventory import Host
from robustctl.transport.fanout import fan_out

if TYPE_CHECKING:
    from robustctl.actions import ActionContext
    from robustctl.transport.pool import TransportPool

__all__ = [
    "GIT_NO_EXEC",
    "GIT_TIMEOUT_S",
    "MAX_REF_CHARS",
    "HostCode",
    "HostSwitch",
    "SwitchResult",
    "check_ref",
    "code_hosts",
    "common_commit",
    "current_versions",
    "inspect_hosts",
    "require_clean",
    "switch_code",
    "switch_work_trees",
    "work_tree",
]

GIT_NO_EXEC = (
    "-c",
    "core.fsmonitor=false",  # `git status` would run the command a work tree's config names
    "-c",
    "core.hooksPath=/dev/null",  # `git checkout` would run the tree's post-checkout hook
    "-c",
    "core.pager=cat",
)
"""Configuration on every git command robustctl runs in a job's work tree: what the tree's own
``.git/config`` could make git execute on the host, switched off (``-c`` outranks the repository's
configuration)."""
MAX_REF_CHARS = 256
"""Longest ref accepted (git's own limit on a ref name is the file system's, 255 bytes a component)."""
GIT_TIMEOUT_S = 60.0
"""Timeout of one git command on one host: a local checkout of a large repository takes seconds; a
host that needs a minute is reported timed out rather than waited on."""

_REF = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_./@{}^~+-]*$")
_COMMIT = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


def check_ref(ref: str) -> str:
    """``ref`` when it can be handed to git as a revision (a branch, tag, commit, ``HEAD~1``, ``v1.2``).

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
        ``ref-missing``, ``failed`` (None when fine).
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


def _git(
    pool: TransportPool, host: Host, path: str, args: Sequence[str], deadline: float
) -> tuple[int, str, str]:
    """Run ``git -C path ARGS`` on ``host``; (exit status, stdout, last stderr line)."""
    timeout = max(0.5, min(GIT_TIMEOUT_S, deadline - time.monotonic()))
    argv = ["env", "GIT_TERMINAL_PROMPT=0", "LC_ALL=C", "git", *GIT_NO_EXEC, "-C", path, *args]
    res = pool.run(host, argv, timeout_s=timeout)
    return res.exit_status, res.stdout.decode("utf-8", "replace").strip(), res.stderr_tail()


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
    rc_s, status, err_s = _git(pool, host, path, ["status", "--porcelain", "--untracked-files=no"], deadline)
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
    return HostCode(host.name, path, head, branch if rc_b == 0 and branch else None, bool(status), target)


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
        ref: a ref to resolve on each host (already passed through :func:`check_ref`), or None.
        concurrency: hosts at once. timeout_s: per host budget (each git command at most
            :data:`GIT_TIMEOUT_S`).

    Returns one :class:`HostCode` per host; an unreadable host or missing ref is an entry with
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

    Raises:
        ConfigError: a host's path is not a git work tree (fix the inventory's ``code.path``).
        UsageError: the ref is missing on a host, or names different commits on different hosts.
        HostError: a host could not be reached or timed out (exit 3: could not check).
        (Each message is one line naming the first host concerned.)
    """
    bad = [c for c in codes if not c.ok]
    if bad:
        line = _first_problem(codes)
        if bad[0].problem == "not-a-work-tree":
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
    rc, _, err = _git(pool, host, path, ["checkout", "-q", "--detach", commit], deadline)
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
    if rc == 0 and now == code.head and (branch if rc_b == 0 and branch else None) == code.branch:
        return now  # never moved (its own checkout failed before touching HEAD)
    if code.branch is not None:
        rc, _, _ = _git(pool, host, path, ["checkout", "-q", code.branch], deadline)
        if rc == 0:
            rc, head, _ = _git(pool, host, path, ["rev-parse", "--verify", "HEAD^{commit}"], deadline)
            if rc == 0 and head == code.head:
                return head
    rc, _, err = _git(pool, host, path, ["checkout", "-q", "--detach", code.head], deadline)
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
        commit: a full commit id (40 or 64 hex digits), e.g. from :func:`common_commit`.
        codes: the hosts' :func:`inspect_hosts` reading with ``ref=commit`` (None: read now).

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

    Raises:
        UsageError: the job is not in the inventory. ConfigError: the job has no ``code:`` section, or
        a host of the job is not in the inventory.
    """
    names = list(hosts) if hosts is not None else list(ctx.job_hosts(job).hosts)
    spec = ctx.inventory.job(job).code
    if spec is None:
        raise ConfigError(
            f"{ctx.inventory.source}: job {job} has no code: section (code: {{path: /path/to/git/work/tree}})"
        )
    return spec, [ctx.inventory.by_name(n) for n in names]


def switch_code(
    ctx: ActionContext,
    job: str,
    hosts: Sequence[str] | None,
    commit: str,
    *,
    pool: TransportPool | None = None,
) -> SwitchResult:
    """Check ``commit`` out on every host of ``job`` (``hosts``: names, None: the job's current machines),
    all or none (:func:`switch_work_trees`), with the inventory's fan-out settings.

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
            concurrency=ctx.inventory.diagnose.concurrency,
            timeout_s=ctx.inventory.diagnose.host_timeout_s,
        )
    finally:
        if own:
            p.close()
