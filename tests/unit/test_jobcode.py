"""Hot update, rollback and the progress signal, on real git repositories (one work tree per simulated
host, reached through the local transport) and real progress files.

Where a command restarts the job (``update stage --urgent``, ``rollback``), the restart step is
injected (the ``restart=`` argument of the library calls, or ``default_restart`` monkeypatched for the
CLI): it records what it was asked and returns an ActionResult-shaped object.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from robustctl.actions import open_context
from robustctl.cli.main import main
from robustctl.commands import update as update_mod
from robustctl.commands.progress import WaitOutcome, WaitProgressRequest, run_wait_progress, wait_for_progress
from robustctl.commands.update import (
    RollbackOutcome,
    RollbackRequest,
    UpdateListRequest,
    UpdateStageRequest,
    run_rollback,
    run_update_list,
    run_update_stage,
)
from robustctl.config import ProgressSpec
from robustctl.errors import ActionRefused, ConfigError, HostError, UsageError
from robustctl.exit_codes import ExitCode
from robustctl.inventory import load_inventory
from robustctl.jobcode import records
from robustctl.jobcode.git import (
    check_ref,
    common_commit,
    inspect_hosts,
    names_command,
    parse_config_list,
    switch_code,
)
from robustctl.jobcode.progress import HostProgress, ProgressReading, RankProgress, read_progress
from robustctl.store import Store
from robustctl.transport.pool import TransportPool

HOSTS = ("node1", "node2", "node3")


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    out = subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True, env=env)
    return out.stdout.strip()


def commit(repo: Path, text: str) -> str:
    (repo / "train.py").write_text(text)
    git(repo, "add", "train.py")
    git(repo, "commit", "-q", "-m", text)
    return git(repo, "rev-parse", "HEAD")


def head(tmp: Path, host: str) -> str:
    return git(tmp / "hosts" / host / "code", "rev-parse", "HEAD")


@dataclass
class Bed:
    tmp: Path
    inv: Path
    state: Path
    c1: str
    c2: str
    c3: str
    only12: str  # a commit fetched by node1 and node2 only

    def tree(self, host: str) -> Path:
        return self.tmp / "hosts" / host / "code"


@pytest.fixture
def bed(tmp_path: Path) -> Bed:
    origin = tmp_path / "origin"
    origin.mkdir()
    git(origin, "init", "-q", "-b", "main")
    c1 = commit(origin, "v1")
    git(origin, "tag", "v1")
    c2 = commit(origin, "v2")
    git(origin, "tag", "v2")
    c3 = commit(origin, "v3")
    for h in HOSTS:
        (tmp_path / "hosts" / h).mkdir(parents=True)
        subprocess.run(["git", "clone", "-q", str(origin), str(tmp_path / "hosts" / h / "code")], check=True)
    only12 = commit(origin, "v4")
    for h in HOSTS[:2]:
        git(tmp_path / "hosts" / h / "code", "fetch", "-q", "origin")
    (tmp_path / "progress").mkdir()
    inv = {
        "hosts": [{"name": h, "transport": "local"} for h in HOSTS],
        "jobs": {
            "j": {
                "hosts": "node[1-3]",
                "ranks_per_host": 1,
                "layout": {"dp": 3},
                "code": {"path": str(tmp_path / "hosts" / "{host}" / "code"), "stable_after_steps": 5},
                "progress": {"files": str(tmp_path / "progress" / "{host}" / "rank*.json")},
            }
        },
    }
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(inv))
    return Bed(tmp_path, path, tmp_path / "state.db", c1, c2, c3, only12)


def heartbeat(bed: Bed, host: str, rank: int, step: int, at: float) -> None:
    d = bed.tmp / "progress" / host
    d.mkdir(exist_ok=True)
    (d / f"rank{rank:05d}.json").write_text(
        json.dumps({"rank": rank, "pid": 1, "step": step, "phase": "train", "time": at, "loss": 1.0})
    )


def job_hosts(bed: Bed) -> tuple[Any, Any]:
    inv = load_inventory(bed.inv, environ={})
    job = inv.job("j")
    return job, list(job.hosts)


# ---- refs, inspection ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ref", ["-n", "--upload-pack=x", "a b", "HEAD:train.py", "x\x00", "", "é", "a" * 300]
)
def test_bad_refs_are_refused_before_any_host(ref: str) -> None:
    with pytest.raises(UsageError):
        check_ref(ref)


@pytest.mark.parametrize("ref", ["v1", "main~1", "HEAD^", "3f2c1e0", "origin/main", "release/1.4"])
def test_good_refs_pass(ref: str) -> None:
    assert check_ref(ref) == ref


def test_ref_resolves_to_one_commit_on_every_host(bed: Bed) -> None:
    job, hosts = job_hosts(bed)
    codes = inspect_hosts(TransportPool(), hosts, job.code, "v1")
    assert common_commit(codes, "v1") == bed.c1
    assert {c.head for c in codes} == {bed.c3} and {c.branch for c in codes} == {"main"}


def test_ref_missing_on_one_host_names_it(bed: Bed) -> None:
    job, hosts = job_hosts(bed)
    codes = inspect_hosts(TransportPool(), hosts, job.code, bed.only12)
    with pytest.raises(UsageError, match=r"^node3: ref '[0-9a-f]{40}' does not name a commit"):
        common_commit(codes, bed.only12)


def test_path_that_is_not_a_work_tree_is_a_config_error_naming_the_host(bed: Bed) -> None:
    job, hosts = job_hosts(bed)
    subprocess.run(["rm", "-rf", str(bed.tree("node2") / ".git")], check=True)
    codes = inspect_hosts(TransportPool(), hosts, job.code, "v1")
    with pytest.raises(ConfigError, match=r"^node2: .*is not a git work tree"):
        common_commit(codes, "v1")


# ---- switch, all or none ------------------------------------------------------------------------


def test_a_work_tree_config_that_names_commands_runs_nothing(bed: Bed) -> None:
    """A host's work tree whose .git/config names an fsmonitor command and a hooks directory with a
    post-checkout hook: reading the tree (git status) and switching it (git checkout) run neither."""
    ran = bed.tmp / "ran"
    tree = bed.tree("node2")
    hooks = bed.tmp / "evil-hooks"
    hooks.mkdir()
    (hooks / "post-checkout").write_text(f"#!/bin/sh\necho hook >> {ran}\n")
    (hooks / "post-checkout").chmod(0o755)
    git(tree, "config", "core.fsmonitor", f"echo fsmonitor >> {ran}; false")
    git(tree, "config", "core.hooksPath", str(hooks))
    job, hosts = job_hosts(bed)
    assert all(h.ok for h in inspect_hosts(TransportPool(), hosts, job.code))
    with contextlib.closing(open_context(bed.inv, bed.state)) as ctx:
        assert switch_code(ctx, "j", None, bed.c1).ok
    assert head(bed.tmp, "node2") == bed.c1
    assert not ran.exists(), ran.read_text()
    git(tree, "status", "--porcelain")  # the same tree read by git itself does run them
    assert ran.exists()


# ---- nothing a work tree holds executes ---------------------------------------------------------


def stat_dirty(path: Path) -> None:
    """Give ``path`` stat data its index does not hold: git status reads it again, through its clean filter."""
    os.utime(path, (1_000_000_000, 1_000_000_000))


def attributes(tree: Path, line: str = "* filter=x diff=x merge=x") -> None:
    """Attributes of the work tree (``.git/info/attributes``: no commit needed)."""
    (tree / ".git" / "info").mkdir(exist_ok=True)
    (tree / ".git" / "info" / "attributes").write_text(line + "\n")


def plain_git(tree: Path, *args: str) -> None:
    """git itself in ``tree``, as a login shell would run it (its exit status is not asked)."""
    subprocess.run(["git", "-C", str(tree), *args], capture_output=True, check=False)


def refusal(bed: Bed, host: str) -> str:
    """The one line inspecting the job's hosts gives ``host`` (the only host not read), after checking
    that it is a refusal and a configuration error naming the host."""
    job, hosts = job_hosts(bed)
    codes = inspect_hosts(TransportPool(), hosts, job.code, "v1")
    bad = [c for c in codes if not c.ok]
    assert [c.host for c in bad] == [host] and bad[0].problem == "refused", codes
    with pytest.raises(ConfigError, match=f"^{host}: "):
        common_commit(codes, "v1")
    assert "safe.directory" not in str(bad[0].error) and "\n" not in str(bad[0].error)
    return str(bad[0].error)


@pytest.mark.parametrize(
    "key, live",
    [
        ("filter.x.clean", "status"),
        ("filter.x.smudge", "checkout"),
        ("filter.x.process", "status"),
        ("diff.external", None),
        ("diff.x.textconv", None),
        ("merge.x.driver", None),
        ("core.sshCommand", None),
        ("credential.helper", None),
        ("remote.origin.uploadpack", None),
        ("hook.x.command", None),
        ("gpg.program", None),
    ],
)
def test_a_tree_whose_config_names_a_command_is_refused_and_runs_nothing(
    bed: Bed, key: str, live: str | None
) -> None:
    """node2's .git/config sets a key whose value is a command (attributes select driver x for every
    file, train.py's stat data is stale): inspecting refuses node2 with one line naming the file and the
    key (exit 78), switching switches nothing, and the command never runs. ``live``: the git command
    that, run by hand in the same tree, does run it."""
    ran = bed.tmp / "ran"
    tree = bed.tree("node2")
    attributes(tree)
    git(tree, "config", key, f"echo {key} >> {ran}; false")
    if key == "hook.x.command":
        git(tree, "config", "hook.x.event", "post-checkout")
    stat_dirty(tree / "train.py")
    error = refusal(bed, "node2")
    assert f".git/config sets {key.lower()}, a command git would run" in error, error
    with contextlib.closing(open_context(bed.inv, bed.state)) as ctx:
        res = switch_code(ctx, "j", None, bed.c1)
    assert not res.ok and {h.status for h in res.hosts} == {"not-run"}
    assert all(head(bed.tmp, h) == bed.c3 for h in HOSTS)
    assert not ran.exists(), ran.read_text()
    if live == "status":
        plain_git(tree, "status")
    elif live == "checkout":
        plain_git(tree, "checkout", "-q", bed.c1)
    assert ran.exists() == (live is not None)


def test_a_command_named_through_an_include_chain_is_refused(bed: Bed) -> None:
    """.git/config includes a file that includes another that conditionally includes a third, which sets
    diff.external: the refusal names the third file and the key."""
    ran = bed.tmp / "ran"
    tree = bed.tree("node1")
    git(tree, "config", "include.path", "one.cfg")
    (tree / ".git" / "one.cfg").write_text(f"[include]\n\tpath = {bed.tmp / 'two.cfg'}\n")
    (bed.tmp / "two.cfg").write_text(f'[includeIf "gitdir:{tree}/.git"]\n\tpath = three.cfg\n')
    (bed.tmp / "three.cfg").write_text(f"[diff]\n\texternal = echo external >> {ran}\n")
    error = refusal(bed, "node1")
    assert f"{bed.tmp / 'three.cfg'} sets diff.external" in error, error
    assert not ran.exists()


def test_a_command_in_the_worktree_config_is_refused(bed: Bed) -> None:
    ran = bed.tmp / "ran"
    tree = bed.tree("node3")
    attributes(tree)
    git(tree, "config", "extensions.worktreeConfig", "true")
    git(tree, "config", "--worktree", "filter.x.clean", f"echo clean >> {ran}; cat")
    stat_dirty(tree / "train.py")
    assert "config.worktree sets filter.x.clean" in refusal(bed, "node3")
    assert not ran.exists()
    plain_git(tree, "status")
    assert ran.exists()


def test_a_config_a_checkout_brings_in_is_read_before_the_next_checkout(bed: Bed) -> None:
    """node1 and node2 include ../hostile.cfg, a file only commit v5 holds (it defines the smudge filter
    their attributes select). Switching both to v5: node2's checkout fails; putting node1 back would
    run the filter v5 brought, so robustctl refuses to (restore-failed, NOT put back) and runs nothing."""
    ran = bed.tmp / "ran"
    origin = bed.tmp / "origin"
    (origin / "hostile.cfg").write_text(f'[filter "x"]\n\tsmudge = echo smudge >> {ran}; cat\n')
    git(origin, "add", "hostile.cfg")
    v5 = commit(origin, "v5")
    for h in HOSTS[:2]:
        git(bed.tree(h), "fetch", "-q", "origin")
        git(bed.tree(h), "config", "include.path", "../hostile.cfg")
        attributes(bed.tree(h), "train.py filter=x")
    (bed.tree("node2") / ".git" / "index.lock").write_text("")
    with contextlib.closing(open_context(bed.inv, bed.state)) as ctx:
        res = switch_code(ctx, "j", ["node1", "node2"], v5)
    rows = {h.host: h for h in res.hosts}
    assert not res.ok and rows["node2"].status == "failed" and rows["node1"].status == "restore-failed"
    assert "hostile.cfg sets filter.x.smudge" in rows["node1"].detail and "NOT put back: node1" in res.message
    assert head(bed.tmp, "node1") == v5
    assert not ran.exists(), ran.read_text()
    plain_git(bed.tree("node1"), "checkout", "-q", "main")  # git itself, putting it back, runs it
    assert ran.exists()


def test_a_partial_clone_fetches_nothing_and_its_url_command_never_runs(bed: Bed) -> None:
    """node2 is a partial clone (blob:none) whose remote is an ext:: URL (a command) that its own
    configuration allows: checking out a commit whose files it lacks would fetch them through that
    command. robustctl's checkout fails instead (no transport is allowed) and nothing is switched."""
    ran = bed.tmp / "ran"
    origin = bed.tmp / "origin"
    git(origin, "config", "uploadpack.allowFilter", "true")
    tree = bed.tree("node2")
    subprocess.run(["rm", "-rf", str(tree)], check=True)
    subprocess.run(["git", "clone", "-q", "--filter=blob:none", f"file://{origin}", str(tree)], check=True)
    git(tree, "checkout", "-q", bed.c3)
    git(tree, "config", "remote.origin.url", f"ext::sh -c touch% {ran}")
    git(tree, "config", "protocol.ext.allow", "always")
    assert inspect_hosts(TransportPool(), job_hosts(bed)[1], job_hosts(bed)[0].code)[1].ok
    with contextlib.closing(open_context(bed.inv, bed.state)) as ctx:
        res = switch_code(ctx, "j", ["node2"], bed.c1)
    assert not res.ok and res.hosts[0].status == "failed" and head(bed.tmp, "node2") == bed.c3
    assert not ran.exists()
    plain_git(tree, "checkout", "-q", bed.c1)
    assert ran.exists()


def test_a_submodule_and_its_own_config_are_not_looked_into(bed: Bed) -> None:
    """node2's tree holds a submodule whose own configuration names a clean filter for its files
    (stale stat data): reading node2 runs no git inside the submodule, so not that filter either."""
    ran = bed.tmp / "ran"
    sub = bed.tmp / "sub"
    sub.mkdir()
    git(sub, "init", "-q", "-b", "main")
    (sub / ".gitattributes").write_text("* filter=z\n")
    (sub / "f").write_text("f\n")
    git(sub, "add", ".")
    git(sub, "commit", "-q", "-m", "sub")
    tree = bed.tree("node2")
    git(tree, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "sub")
    git(tree, "commit", "-q", "-m", "sub")
    git(tree / "sub", "config", "filter.z.clean", f"echo clean >> {ran}; cat")
    stat_dirty(tree / "sub" / "f")
    job, hosts = job_hosts(bed)
    code = inspect_hosts(TransportPool(), hosts, job.code)[1]
    assert code.ok and not code.dirty, code
    assert not ran.exists()
    plain_git(tree, "status")
    assert ran.exists()


def test_the_login_users_own_filter_still_runs(bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    """A filter the login user's ~/.gitconfig defines (as git-lfs installs one) is the user's own: a
    tree whose attributes select it is read and switched, through the filter."""
    ran = bed.tmp / "ran"
    home = bed.tmp / "home"
    home.mkdir()
    script = bed.tmp / "user-filter"
    script.write_text(f"#!/bin/sh\necho user >> {ran}\nexec cat\n")
    script.chmod(0o755)
    (home / ".gitconfig").write_text(f'[filter "x"]\n\tclean = {script}\n\tsmudge = {script}\n')
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    for h in HOSTS:
        attributes(bed.tree(h), "train.py filter=x")
    with contextlib.closing(open_context(bed.inv, bed.state)) as ctx:
        res = switch_code(ctx, "j", None, bed.c1)
    assert res.ok, res.message
    assert all(head(bed.tmp, h) == bed.c1 for h in HOSTS)
    assert ran.exists()


def owner_check_available(tree: Path) -> bool:
    """Whether this git honours GIT_TEST_ASSUME_DIFFERENT_OWNER (2.35.2 and later)."""
    env = {**os.environ, "GIT_TEST_ASSUME_DIFFERENT_OWNER": "1"}
    out = subprocess.run(["git", "-C", str(tree), "status"], capture_output=True, text=True, env=env)
    return out.returncode != 0 and "safe.directory" in out.stderr


def test_a_tree_owned_by_another_user_is_refused_without_safe_directory_advice(
    bed: Bed, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not owner_check_available(bed.tree("node1")):
        pytest.skip("this git does not simulate another owner (GIT_TEST_ASSUME_DIFFERENT_OWNER)")
    monkeypatch.setenv("GIT_TEST_ASSUME_DIFFERENT_OWNER", "1")
    job, hosts = job_hosts(bed)
    codes = inspect_hosts(TransportPool(), hosts, job.code, "v1")
    assert {c.problem for c in codes} == {"refused"}
    assert codes[0].error == (
        f"{bed.tree('node1')} is owned by another user; robustctl will not read it "
        "(run as its owner or fix the ownership)"
    )
    i, s = ("-i", str(bed.inv)), ("--state", str(bed.state))
    for argv in (
        ("update", "stage", "--job", "j", "--ref", "v1", "--reason", "r"),
        ("rollback", "--job", "j", "--to", "v1", "--dry-run"),
    ):
        code, _, err = cli(*argv, *i, *s)
        assert code == ExitCode.CONFIG and err.count("\n") == 1, err
        assert err.startswith("robustctl: error: node1: ") and "owned by another user" in err, err
        assert "safe.directory" not in err


def test_update_stage_and_rollback_dry_run_refuse_a_tree_whose_config_names_a_command(bed: Bed) -> None:
    ran = bed.tmp / "ran"
    tree = bed.tree("node3")
    attributes(tree)
    git(tree, "config", "filter.x.clean", f"echo clean >> {ran}; cat")
    stat_dirty(tree / "train.py")
    i, s = ("-i", str(bed.inv)), ("--state", str(bed.state))
    for argv in (
        ("update", "stage", "--job", "j", "--ref", "v1", "--reason", "r"),
        ("rollback", "--job", "j", "--to", "v1", "--dry-run"),
    ):
        code, _, err = cli(*argv, *i, *s)
        assert code == ExitCode.CONFIG and err.count("\n") == 1, err
        assert err.startswith("robustctl: error: node3: ") and "sets filter.x.clean" in err, err
    assert not ran.exists()


def test_config_listing_parse_and_command_keys() -> None:
    listed = (
        "file:.git/config\0core.bare\nfalse\0file:/x/a b.cfg\0alias.s\n!sh -c 'a\nb'\0command line:\0flag\0"
    )
    assert parse_config_list(listed) == [
        ("file:.git/config", "core.bare", "false"),
        ("file:/x/a b.cfg", "alias.s", "!sh -c 'a\nb'"),
        ("command line:", "flag", None),
    ]
    assert parse_config_list("") == []
    for key in ("filter.LFS.process", "Filter.x.Clean", "credential.https://h.example.com/x.helper",
                "lfs.customtransfer.a.b.path", "hook.lint.command", "gpg.ssh.defaultKeyCommand", "diff.external"):  # fmt: skip
        assert names_command(key), key
    for key in ("core.hooksPath", "core.fsmonitor", "core.pager", "filter.x.required", "remote.origin.url",
                "include.path", "hook.lint.event", "diff.x.binary", "credential.username"):  # fmt: skip
        assert not names_command(key), key


def test_switch_checks_out_on_every_host_and_verifies(bed: Bed) -> None:
    with contextlib.closing(open_context(bed.inv, bed.state)) as ctx:
        res = switch_code(ctx, "j", None, bed.c1)
    assert res.ok, res.message
    assert [h.status for h in res.hosts] == ["switched"] * 3
    assert all(head(bed.tmp, h) == bed.c1 for h in HOSTS)
    with contextlib.closing(open_context(bed.inv, bed.state)) as ctx:  # rerun: nothing to do
        again = switch_code(ctx, "j", None, bed.c1)
    assert [h.status for h in again.hosts] == ["unchanged"] * 3


def test_a_checkout_that_fails_on_one_host_leaves_nothing_switched(bed: Bed) -> None:
    (bed.tree("node2") / ".git" / "index.lock").write_text("")  # git refuses to check out here
    with contextlib.closing(open_context(bed.inv, bed.state)) as ctx:
        res = switch_code(ctx, "j", None, bed.c1)
    assert not res.ok and res.message.startswith("nothing switched: node2: git checkout")
    statuses = {h.host: h.status for h in res.hosts}
    assert statuses == {"node1": "restored", "node2": "failed", "node3": "restored"}
    assert all(head(bed.tmp, h) == bed.c3 for h in HOSTS)
    assert git(bed.tree("node1"), "symbolic-ref", "--short", "HEAD") == "main"  # its branch, not detached
    assert res.half_applied == ()


def test_a_commit_missing_on_one_host_runs_nothing(bed: Bed) -> None:
    with contextlib.closing(open_context(bed.inv, bed.state)) as ctx:
        res = switch_code(ctx, "j", None, bed.only12)
    assert not res.ok and "node3" in res.message
    assert {h.status for h in res.hosts} == {"not-run"}
    assert all(head(bed.tmp, h) == bed.c3 for h in HOSTS)


def test_a_dirty_work_tree_refuses_the_switch(bed: Bed) -> None:
    (bed.tree("node3") / "train.py").write_text("local edit")
    with (
        contextlib.closing(open_context(bed.inv, bed.state)) as ctx,
        pytest.raises(ActionRefused, match="^node3: "),
    ):
        switch_code(ctx, "j", None, bed.c1)
    assert all(head(bed.tmp, h) == bed.c3 for h in HOSTS)


# ---- progress -----------------------------------------------------------------------------------


def test_progress_from_heartbeat_files(bed: Bed) -> None:
    job, hosts = job_hosts(bed)
    heartbeat(bed, "node1", 0, 12, 1000.0)
    heartbeat(bed, "node2", 1, 10, 1001.0)
    (bed.tmp / "progress" / "node3").mkdir()
    os.mkfifo(bed.tmp / "progress" / "node3" / "rank00002.json")  # never opened for a blocking read
    r = read_progress(TransportPool(), "j", hosts, job.progress)
    assert r.step == 10 and r.max_step == 12 and r.at == 1000.0 and r.complete
    assert [e.rank for e in r.entries] == [0, 1]
    assert "not a regular file" in r.hosts[2].problems[0]


def test_progress_reads_at_most_max_files(bed: Bed) -> None:
    job, hosts = job_hosts(bed)
    for rank in range(5):
        heartbeat(bed, "node1", rank, 100 + rank, 1000.0)
    spec = job.progress.model_copy(update={"max_files": 2})
    r = read_progress(TransportPool(), "j", hosts[:1], spec)
    assert r.hosts[0].matched == 5 and len(r.entries) == 2


def test_progress_from_a_log_tail(bed: Bed) -> None:
    _, hosts = job_hosts(bed)
    log = bed.tmp / "train.log"
    lines = [f" [2025-01-01] iteration {i:8d}/ 1000 | lm loss: 1.0E+00" for i in range(1, 3000)]
    log.write_text("\n".join(lines) + "\nsaving checkpoint\n")
    spec = ProgressSpec(log=str(log), pattern=r"iteration\s+(?P<step>\d+)/", tail_bytes=4096)
    r = read_progress(TransportPool(), "j", hosts[:1], spec)
    assert r.step == 2999 and r.entries[0].at == pytest.approx(log.stat().st_mtime)
    missing = ProgressSpec(log=str(bed.tmp / "none.log"), pattern=r"(?P<step>\d+)")
    r2 = read_progress(TransportPool(), "j", hosts[:1], missing)
    assert r2.step is None and r2.complete  # no log here: no signal, not an error


def test_an_unreachable_host_makes_the_reading_incomplete(bed: Bed) -> None:
    job, hosts = job_hosts(bed)
    heartbeat(bed, "node1", 0, 5, 1000.0)
    broken = [hosts[0], hosts[1].__class__(**{**hosts[1].__dict__, "python": hosts[1].python.model_copy(
        update={"path": str(bed.tmp / "no-python")})})]  # fmt: skip
    r = read_progress(TransportPool(), "j", broken, job.progress)
    assert not r.complete and r.errors[0].startswith("node2: ")


# ---- records, stability -------------------------------------------------------------------------


def test_pending_update_latest_wins_and_window_forces(tmp_path: Path) -> None:
    now = [1000.0]
    with Store.open(tmp_path / "s.db", clock=lambda: now[0]) as store:
        assert records.pending_update(store, "j", now[0]) == (None, (), False)
        a = records.record_change(
            store, "j", ref="v2", commit="b" * 40, from_ref="a" * 40, reason="x", window_s=60
        )
        now[0] = 1010.0
        b = records.record_change(
            store, "j", ref="v3", commit="c" * 40, from_ref="a" * 40, reason="y", window_s=60
        )
        assert records.pending_update(store, "j", 1030.0) == ("c" * 40, (a.id, b.id), False)
        assert records.pending_update(store, "j", 1060.0) == ("c" * 40, (a.id, b.id), True)
        records.mark_applied(store, "j", (a.id, b.id), forced=True)
        states = [c.state for c in records.changes(store, "j")]
        assert states == [records.ChangeState.SUPERSEDED, records.ChangeState.FORCED]
        assert records.pending_update(store, "j", 2000.0) == (None, (), False)
        with pytest.raises(Exception, match="keeps its job"):
            store._conn.execute("UPDATE code_changes SET reason='rewritten' WHERE id=?", (a.id,))
        with pytest.raises(Exception, match="append-only"):
            store._conn.execute("DELETE FROM code_changes")


def reading(step: int, at: float, complete: bool = True) -> ProgressReading:
    rows = (HostProgress("node1", (RankProgress("node1", "f", 0, step, at),)),)
    if not complete:
        rows = (*rows, HostProgress("node2", error="unreachable"))
    return ProgressReading("j", rows, at)


def test_a_version_becomes_stable_by_steps_after_its_restart(bed: Bed) -> None:
    job, _ = job_hosts(bed)
    spec = job.code  # stable_after_steps 5, stable_after_s 1800
    with Store.open(bed.state) as store:
        v = records.record_version_start(store, "j", bed.c2, started_at=1000.0)
        assert (
            records.evaluate_stability(store, "j", spec, reading(50, 900.0)).base_step is None
        )  # before start
        assert records.evaluate_stability(store, "j", spec, reading(100, 1010.0)).base_step == 100
        assert records.evaluate_stability(store, "j", spec, reading(104, 1020.0)).stable_at is None
        assert (
            records.evaluate_stability(store, "j", spec, reading(105, 1030.0, complete=False)).stable_at
            is None
        )
        v = records.evaluate_stability(store, "j", spec, reading(106, 1040.0))
        assert v is not None and v.stable_at == 1040.0 and v.steps_seen == 6
        assert records.last_stable_version(store, "j").commit == bed.c2
        records.record_version_start(store, "j", bed.c3, started_at=2000.0)
        v3 = records.evaluate_stability(store, "j", spec, reading(3, 3900.0))  # 1900 s after its start
        assert v3.stable_at == 3900.0  # by time: still making steps 1800 s after the restart


# ---- commands -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FakeRestart:
    exit_code: int = 0
    kind: str = "apply"
    schema_version: int = 1
    outcome: str = "applied"


def injected(calls: list[tuple[str, str]], rc: int = 0) -> Any:
    def restart(job: str, reason: str, req: Any, confirm: Any, show: Any) -> FakeRestart:
        calls.append((job, reason))
        return FakeRestart(exit_code=rc)

    return restart


def test_stage_records_a_lazy_change_and_urgent_restarts(bed: Bed) -> None:
    calls: list[tuple[str, str]] = []
    req = UpdateStageRequest(job="j", ref="v1", reason="fused rmsnorm", inventory=bed.inv, state=bed.state)
    res = run_update_stage(req, restart=injected(calls))
    assert res.commit == bed.c1 and res.from_commit == bed.c3 and res.change is not None
    assert res.change.state is records.ChangeState.PENDING and calls == []
    urgent = UpdateStageRequest(
        job="j", ref="v2", reason="loss spike", urgent=True, inventory=bed.inv, state=bed.state
    )
    res2 = run_update_stage(urgent, restart=injected(calls))
    assert calls == [("j", "urgent update v2: loss spike")] and res2.exit_code == 0
    lst = run_update_list(UpdateListRequest(job="j", inventory=bed.inv, state=bed.state))
    assert lst.pending_commit == bed.c2 and len(lst.pending_ids) == 2
    assert all(head(bed.tmp, h) == bed.c3 for h in HOSTS)  # staging never touches the work trees


def test_stage_with_a_ref_missing_on_one_host_records_nothing(bed: Bed) -> None:
    req = UpdateStageRequest(job="j", ref=bed.only12, reason="x", inventory=bed.inv, state=bed.state)
    with pytest.raises(UsageError, match="^node3: "):
        run_update_stage(req)
    with Store.open(bed.state) as store:
        assert records.changes(store, "j") == []


def test_rollback_without_a_stable_version_is_refused(bed: Bed) -> None:
    with pytest.raises(ActionRefused, match="no version of job j has run stably"):
        run_rollback(RollbackRequest(job="j", inventory=bed.inv, state=bed.state), confirm=lambda p: True)


def test_rollback_to_the_last_stable_version_switches_all_and_restarts(bed: Bed) -> None:
    with Store.open(bed.state) as store:
        records.record_version_start(store, "j", bed.c2, started_at=1000.0, base_step=0)
        records.evaluate_stability(
            store, "j", records.CodeSpec(path="/x", stable_after_steps=5), reading(9, 1100.0)
        )
        bad = records.record_change(store, "j", ref="v3", commit=bed.c3, from_ref=bed.c2, reason="new kernel")
        records.mark_applied(store, "j", (bad.id,), forced=False)
        pend = records.record_change(store, "j", ref="v1", commit=bed.c1, from_ref=bed.c3, reason="later")
        records.record_version_start(store, "j", bed.c3, started_at=store.clock())
    calls: list[tuple[str, str]] = []
    dry = run_rollback(RollbackRequest(job="j", dry_run=True, inventory=bed.inv, state=bed.state))
    assert dry.outcome is RollbackOutcome.DRY_RUN and dry.plan.commit == bed.c2
    assert dry.plan.rolled_back == (bad.id,) and dry.plan.pending == (pend.id,)
    res = run_rollback(
        RollbackRequest(job="j", reason="TypeError at step 3", inventory=bed.inv, state=bed.state),
        confirm=lambda p: True,
        restart=injected(calls),
    )
    assert res.outcome is RollbackOutcome.APPLIED and res.exit_code == 0, res.message
    assert all(head(bed.tmp, h) == bed.c2 for h in HOSTS) and calls == [("j", "TypeError at step 3")]
    with Store.open(bed.state) as store:
        by_id = {c.id: c for c in records.changes(store, "j")}
        assert by_id[bad.id].state is records.ChangeState.ROLLED_BACK
        assert by_id[pend.id].state is records.ChangeState.SUPERSEDED
        assert records.pending_update(store, "j", store.clock()) == (None, (), False)
        assert records.versions(store, "j")[-1].commit == bed.c2
        audit = store.audit()[-1]
        assert audit.action == "rollback" and audit.status == "applied"
        assert [s.status for s in audit.steps] == ["done", "done", "done"]


def test_rollback_passes_over_the_version_the_hosts_run_even_when_it_ran_stably(bed: Bed) -> None:
    """c3 (what the hosts run) ran 2 steps, enough to be stable, then failed: the rollback is to c2."""
    spec = records.CodeSpec(path="/x", stable_after_steps=2)
    with Store.open(bed.state) as store:
        records.record_version_start(store, "j", bed.c2, started_at=1000.0, base_step=0)
        records.evaluate_stability(store, "j", spec, reading(9, 1100.0))
        records.record_version_start(store, "j", bed.c3, started_at=2000.0, base_step=0)
        records.evaluate_stability(store, "j", spec, reading(2, 2010.0))
        assert records.last_stable_version(store, "j").commit == bed.c3
    dry = run_rollback(RollbackRequest(job="j", dry_run=True, inventory=bed.inv, state=bed.state))
    assert dry.outcome is RollbackOutcome.DRY_RUN and dry.plan.commit == bed.c2, dry.plan


def test_rollback_when_only_the_running_version_ran_stably_is_refused(bed: Bed) -> None:
    with Store.open(bed.state) as store:
        records.record_version_start(store, "j", bed.c3, started_at=2000.0, base_step=0)
        records.evaluate_stability(
            store, "j", records.CodeSpec(path="/x", stable_after_steps=2), reading(5, 2010.0)
        )
    calls: list[tuple[str, str]] = []
    with pytest.raises(ActionRefused, match=r"already runs .* the only version that has run stably"):
        run_rollback(
            RollbackRequest(job="j", inventory=bed.inv, state=bed.state),
            confirm=lambda p: True,
            restart=injected(calls),
        )
    assert calls == [] and all(head(bed.tmp, h) == bed.c3 for h in HOSTS)


def test_rollback_where_one_checkout_fails_leaves_nothing_switched(bed: Bed) -> None:
    (bed.tree("node3") / ".git" / "index.lock").write_text("")
    calls: list[tuple[str, str]] = []
    res = run_rollback(
        RollbackRequest(job="j", to="v1", inventory=bed.inv, state=bed.state),
        confirm=lambda p: True,
        restart=injected(calls),
    )
    assert res.outcome is RollbackOutcome.FAILED and res.exit_code == ExitCode.UNKNOWN
    assert calls == [] and all(head(bed.tmp, h) == bed.c3 for h in HOSTS)
    with Store.open(bed.state) as store:
        audit = store.audit()[-1]
        assert audit.status == "failed" and [s.status for s in audit.steps] == ["failed"]
        assert records.changes(store, "j") == []


def test_wait_for_progress_outcomes() -> None:
    clock = [0.0]

    def run(seq: list[ProgressReading], **kw: Any) -> Any:
        it = iter(seq)
        last = [seq[-1]]

        def reader() -> ProgressReading:
            last[0] = next(it, last[0])
            return last[0]

        def sleep(s: float) -> None:
            clock[0] += s

        return wait_for_progress(
            WaitProgressRequest(job="j", timeout_s=30, poll_s=10, **kw),
            reader,
            monotonic=lambda: clock[0],
            sleep=sleep,
        )

    ok = run([reading(10, 1.0), reading(10, 2.0), reading(12, 3.0)], min_new_steps=2)
    assert ok.outcome is WaitOutcome.PROGRESS and ok.new_steps == 2 and ok.exit_code == 0
    stuck = run([reading(10, 1.0)])
    assert stuck.outcome is WaitOutcome.NO_PROGRESS and stuck.exit_code == 2 and stuck.readings == 4
    gone = run([reading(10, 1.0, complete=False)], since_step=5)
    assert gone.outcome is WaitOutcome.UNREADABLE and gone.exit_code == 3
    assert run([reading(7, 1.0)], since_step=5, min_new_steps=2).exit_code == 0
    with pytest.raises(UsageError):
        run([reading(1, 1.0)], min_new_steps=0)


def test_a_job_whose_ranks_exited_ends_the_wait_even_after_steps() -> None:
    """Steps written just before the ranks died are not progress: the wait ends ``exited`` (exit 2)."""
    clock = [0.0]
    seq = iter([reading(0, 1.0), reading(2, 2.0)])
    scans: list[str | None] = [None, "node1: rank(s) 0 not running"]

    def gone() -> str | None:
        return scans.pop(0) if scans else "node1: rank(s) 0 not running"

    def sleep(s: float) -> None:
        clock[0] += s

    res = wait_for_progress(
        WaitProgressRequest(job="j", timeout_s=30, poll_s=10, min_new_steps=1),
        lambda: next(seq),
        gone=gone,
        monotonic=lambda: clock[0],
        sleep=sleep,
    )
    assert res.outcome is WaitOutcome.EXITED and res.exit_code == ExitCode.CRITICAL
    assert res.last_step == 2 and res.readings == 2 and "rank(s) 0 not running" in res.exited
    alive = wait_for_progress(
        WaitProgressRequest(job="j", timeout_s=30, poll_s=10),
        iter([reading(0, 1.0), reading(2, 2.0)]).__next__,
        gone=lambda: None,
        monotonic=lambda: clock[0],
        sleep=sleep,
    )
    assert alive.outcome is WaitOutcome.PROGRESS and alive.exited == ""


def test_run_wait_progress_reads_hosts_and_marks_stability(bed: Bed) -> None:
    with Store.open(bed.state) as store:
        records.record_version_start(store, "j", bed.c3, started_at=1000.0, base_step=0)
    for i, h in enumerate(HOSTS):
        heartbeat(bed, h, i, 7, 2000.0)
    res = run_wait_progress(
        WaitProgressRequest(
            job="j", since_step=0, min_new_steps=5, timeout_s=5, inventory=bed.inv, state=bed.state
        )
    )
    assert res.outcome is WaitOutcome.PROGRESS and res.last_step == 7
    with Store.open(bed.state) as store:
        assert records.last_stable_version(store, "j").commit == bed.c3


def audit_restart(
    store: Store, job: str, launch_at: float, status: str = "done", kind: str = "launch"
) -> None:
    """A ``restart`` audit record as apply_plan writes it: its start step (launch or requeue) at ``launch_at``."""
    now = [launch_at - 5.0]
    store.clock = lambda: now[0]
    steps = [{"kind": "stop_job", "host": "node1"}, {"kind": kind, "host": "node1"}]
    aid = store.audit_begin(
        "restart", ["node1"], "test", plan={"action": "restart", "job": job, "steps": steps}
    )
    store.audit_step_start(aid, 0, "stop")
    store.audit_step_end(aid, 0, "done", "")
    now[0] = launch_at
    store.audit_step_start(aid, 1, kind)
    store.audit_step_end(aid, 1, status, "")
    store.audit_finish(aid, "applied" if status == "done" else "failed", "")


def test_last_start_is_the_newest_done_launch_or_requeue_of_the_job(tmp_path: Path) -> None:
    from robustctl.actions.restart import last_start

    with Store.open(tmp_path / "s.db") as store:
        assert last_start(store, "j") is None
        audit_restart(store, "j", 1000.0)
        audit_restart(store, "other", 3000.0)  # another job's restart is not this one's
        assert last_start(store, "j") == 1000.0
        audit_restart(store, "j", 2000.0, kind="requeue")  # Slurm, Kubernetes
        assert last_start(store, "j") == 2000.0
        audit_restart(store, "j", 2500.0, status="failed")  # a launch that failed started nothing
        assert last_start(store, "j") == 2000.0


def test_the_wait_ignores_entries_of_the_run_stopped_before_the_last_start(
    bed: Bed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stopped run got to step 50; the restart at t=1000 resumed from checkpoint 40. Counted, the
    stale step 50 would be the baseline and the new run would have to pass step 53 to count."""
    from robustctl.commands import progress as progress_mod

    with Store.open(bed.state) as store:
        audit_restart(store, "j", 1000.0)
    for i, h in enumerate(HOSTS):
        heartbeat(bed, h, i, 50, 990.0)
    new_run = iter([(41, 1002.0), (44, 1005.0)])

    def read_then_step(*args: Any, **kwargs: Any) -> ProgressReading:
        """Each reading of the wait, then the new run's next step: the wait sees 50, 41, then 44."""
        reading = read_progress(*args, **kwargs)
        step = next(new_run, None)
        if step is not None:
            for i, h in enumerate(HOSTS):
                heartbeat(bed, h, i, *step)
        return reading

    monkeypatch.setattr(progress_mod, "read_progress", read_then_step)
    res = run_wait_progress(
        WaitProgressRequest(
            job="j", min_new_steps=3, timeout_s=30, poll_s=0.2, inventory=bed.inv, state=bed.state
        )
    )
    assert res.readings == 3, res
    assert res.counted_since == 1000.0
    assert res.outcome is WaitOutcome.PROGRESS and res.baseline_step == 41 and res.last_step == 44, res


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_cli_exit_codes(bed: Bed, monkeypatch: pytest.MonkeyPatch) -> None:
    i, s = ("-i", str(bed.inv)), ("--state", str(bed.state))
    code, out, _ = cli("update", "stage", "--job", "j", "--ref", "v2", "--reason", "r", *i, *s, "--json")
    assert code == 0 and json.loads(out)["commit"] == bed.c2
    code, _, err = cli("update", "stage", "--job", "j", "--ref", bed.only12, "--reason", "r", *i, *s)
    assert code == ExitCode.USAGE and "node3: ref" in err and err.count("\n") == 1
    assert cli("update", "stage", "--job", "j", "--ref", "-x", "--reason", "r", *i, *s)[0] == ExitCode.USAGE
    assert (
        cli("update", "stage", "--job", "nojob", "--ref", "v1", "--reason", "r", *i, *s)[0] == ExitCode.USAGE
    )
    code, out, _ = cli("update", "list", "--job", "j", *i, *s, "--json")
    assert code == 0 and json.loads(out)["kind"] == "update-list"
    code, _, err = cli("rollback", "--job", "j", *i, *s, "--yes")
    assert code == ExitCode.CRITICAL and "no version of job j has run stably" in err
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(update_mod, "default_restart", injected(calls))
    code, out, _ = cli("rollback", "--job", "j", "--to", "v1", *i, *s, "--yes", "--json", "-q")
    assert code == 0 and json.loads(out)["outcome"] == "applied" and len(calls) == 1
    assert all(head(bed.tmp, h) == bed.c1 for h in HOSTS)
    subprocess.run(["rm", "-rf", str(bed.tree("node1") / ".git")], check=True)
    code, _, err = cli("rollback", "--job", "j", "--to", "v1", *i, *s, "--yes")
    assert code == ExitCode.CONFIG and err.startswith("robustctl: error: node1: ")


def test_a_job_without_code_section_is_a_config_error(bed: Bed) -> None:
    data = yaml.safe_load(bed.inv.read_text())
    del data["jobs"]["j"]["code"]
    bed.inv.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="has no code: section"):
        run_update_stage(
            UpdateStageRequest(job="j", ref="v1", reason="x", inventory=bed.inv, state=bed.state)
        )


def test_unreachable_host_is_exit_3() -> None:
    from robustctl.jobcode.git import HostCode

    codes = (
        HostCode("node1", "/c", "a" * 40, target="a" * 40),
        HostCode("node2", "/c", error="refused", problem="unreachable"),
    )
    with pytest.raises(HostError, match="^node2: refused") as exc:
        common_commit(codes, "v1")
    assert exc.value.exit_code == ExitCode.UNKNOWN


def test_a_job_name_with_a_lone_surrogate_is_escaped_by_every_code_change_write(tmp_path: Path) -> None:
    """record_change escapes such a name; marking the change applied or rolled back, and reading the
    job's changes, use the same escaped name instead of failing to encode it."""
    from robustctl.jobcode import records
    from robustctl.store import Store

    job = "llm\udcff"
    with Store.open(tmp_path / "s.db") as s:
        first = records.record_change(s, job, ref="v2", commit="a" * 40, from_ref="v1", reason="update")
        records.mark_applied(s, job, [first.id], forced=False)
        assert [c.state for c in records.changes(s, job)] == [records.ChangeState.APPLIED]
        records.mark_rollback(s, job, [first.id], "back to v1")
        assert [c.state.value for c in records.changes(s, job)] == ["rolled-back"]
