"""Property-based tests of the ``code:`` and ``progress:`` inventory sections and of the progress
parsers (heartbeat JSON, log tail + pattern): whatever they hold, loading raises nothing but
ConfigError (FILE:LINE), parsing raises nothing, and what comes back is bounded (steps in
0 … MAX_STEP, at most one entry per file, a log line searched up to MAX_LINE_CHARS). And of a job's
work tree: whatever command its own git configuration names, however included, reading and switching
it (what ``update stage``, ``rollback`` and ``restart`` run) runs none of them.

Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from robustctl.config import CodeSpec, ProgressSpec
from robustctl.errors import ConfigError
from robustctl.inventory import Host, load_inventory
from robustctl.jobcode.git import inspect_hosts, switch_work_trees
from robustctl.jobcode.progress import MAX_LINE_CHARS, MAX_STEP, _parse_host, parse_heartbeat, parse_log_tail
from robustctl.transport.pool import TransportPool

pytestmark = pytest.mark.fuzz

KEYS = ("path", "stable_after_s", "stable_after_steps", "update_window_s", "files", "step_field", "time_field",
        "max_files", "log", "pattern", "tail_bytes", "timeout_s", "bogus")  # fmt: skip
VALUES = (
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30) | st.sampled_from(["/srv/{host}/code", "(?P<step>\\d+)", "(?P<step>", "((a+)+)+$",
                                              "/run/*.json", "\x00", "relative", "(?P<step>x)(?P<step>y)"])
    | st.lists(st.integers(), max_size=3)
)  # fmt: skip
SECTION = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=6) | VALUES


@given(code=SECTION, progress=SECTION)
def test_any_code_or_progress_section_loads_or_is_a_config_error(
    code: Any, progress: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("inv") / "inv.yaml"
    job: dict[str, Any] = {"hosts": "n1", "code": code, "progress": progress}
    path.write_text(yaml.safe_dump({"hosts": [{"name": "n1", "address": "127.0.0.2"}], "jobs": {"j": job}}))
    try:
        inv = load_inventory(path, environ={})
    except ConfigError as exc:
        assert str(exc).startswith(f"{path}:") and "\n" not in str(exc)
        return
    spec = inv.job("j")
    if spec.progress is not None and spec.progress.pattern is not None:
        assert "step" in re.compile(spec.progress.pattern).groupindex


LOG_WORDS = st.sampled_from(["iteration", " ", "\n", "step=", "/", "12", "99999999999999999999", "٣", "\r",
                             "\x00", "é", "-5", "lm loss"])  # fmt: skip
PATTERNS = st.sampled_from([r"iteration\s+(?P<step>\d+)", r"step=(?P<step>\S+)", r"(?P<step>\d*)",
                            r"(?P<step>.+)", r"(?P<step>(a|\d)+)?$"])  # fmt: skip


@given(text=st.lists(LOG_WORDS | st.text(max_size=8), max_size=60).map("".join), pattern=PATTERNS)
def test_log_tail_parsing_never_raises_and_is_bounded(text: str, pattern: str) -> None:
    step = parse_log_tail(text, re.compile(pattern))
    assert step is None or (isinstance(step, int) and 0 <= step <= MAX_STEP)


def test_a_huge_line_is_searched_only_up_to_the_bound() -> None:
    line = "x" * (MAX_LINE_CHARS + 10) + " iteration 5"
    assert parse_log_tail(line, re.compile(r"iteration\s+(?P<step>\d+)")) is None
    assert parse_log_tail("iteration 5\n" + line, re.compile(r"iteration\s+(?P<step>\d+)")) == 5


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats() | st.text(max_size=5),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.sampled_from(["step", "time", "rank", "x"]), kids, max_size=4),
    max_leaves=12,
)  # fmt: skip


@given(doc=JSONISH, raw=st.text(max_size=40))
def test_heartbeat_parsing_never_raises(doc: Any, raw: str) -> None:
    spec = ProgressSpec(files="/p/*.json")
    for text in (json.dumps(doc), raw):
        entry, why = parse_heartbeat("n1", "/p/r.json", text, 1.0, spec)
        assert (entry is None) != (why is None)
        if entry is not None:
            assert 0 <= entry.step <= MAX_STEP and entry.at == entry.at


@given(doc=JSONISH)
def test_a_hostile_reader_document_is_an_error_or_entries(doc: Any) -> None:
    spec = ProgressSpec(files="/p/*.json")
    try:
        host = _parse_host("n1", doc, spec, None)
    except Exception as exc:
        assert type(exc).__name__ == "HostError"
        return
    assert len(host.entries) <= len(doc["files"]) and len(host.problems) <= 64


# ---- a work tree's configuration runs nothing ---------------------------------------------------

REFUSED = ("filter.x.clean", "filter.x.smudge", "filter.x.process", "hook.x.command", "diff.external",
           "diff.x.textconv", "diff.x.command", "merge.x.driver", "core.editor", "sequence.editor",
           "core.askPass", "credential.helper", "core.sshCommand", "core.gitProxy", "remote.origin.uploadpack",
           "remote.origin.receivepack", "uploadpack.packObjectsHook", "gpg.program",
           "lfs.customtransfer.x.path")  # fmt: skip
"""Keys that name a command: a tree that sets one is refused."""
SWITCHED_OFF = ("core.fsmonitor", "core.hooksPath", "core.pager", "pager.status", "pager.checkout")
"""Keys robustctl's own git options override: a tree that sets them is read and switched."""
PLACES = ("config", "include-chain", "include-if", "worktree")
URLS = ("path", "ssh", "ext")


def run_git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    return subprocess.run(
        ["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


@dataclass(frozen=True)
class Template:
    """Work trees built once and copied per example: ``full`` and ``partial`` (a blob:none clone,
    which lacks v1's files) clones of ``origin``, both on ``main`` at v2; every commit's
    ``.gitattributes`` selects driver x for filter, diff and merge."""

    origin: Path
    full: Path
    partial: Path
    v1: str
    v2: str
    hosts: tuple[Host, Host]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    root = tmp_path_factory.mktemp("jobcode-template")
    origin = root / "origin"
    origin.mkdir()
    run_git(origin, "init", "-q", "-b", "main")
    run_git(origin, "config", "uploadpack.allowFilter", "true")
    (origin / ".gitattributes").write_text("* filter=x diff=x merge=x\n")
    commits = []
    for text in ("v1", "v2"):
        (origin / "train.py").write_text(text + "\n")
        run_git(origin, "add", ".")
        run_git(origin, "commit", "-q", "-m", text)
        commits.append(run_git(origin, "rev-parse", "HEAD"))
    full, partial = root / "full", root / "partial"
    subprocess.run(["git", "clone", "-q", str(origin), str(full)], check=True)
    subprocess.run(["git", "clone", "-q", "--filter=blob:none", f"file://{origin}", str(partial)], check=True)
    inv = root / "inv.yaml"
    inv.write_text(yaml.safe_dump({"hosts": [{"name": n, "transport": "local"} for n in ("a", "b")]}))
    a, b = load_inventory(inv, environ={}).hosts
    return Template(origin, full, partial, commits[0], commits[1], (a, b))


def config_text(entries: list[tuple[str, str]]) -> str:
    """``entries`` (key, value) as git configuration file text, each value quoted."""
    out = []
    for key, value in entries:
        section, *sub, name = key.split(".")
        head = f'[{section} "{".".join(sub)}"]' if sub else f"[{section}]"
        quoted = value.replace("\\", "\\\\").replace('"', '\\"')
        out.append(f'{head}\n\t{name} = "{quoted}"\n')
    return "".join(out)


def hostile_tree(tree: Path, markers: Path, keys: frozenset[str], place: str, url: str) -> None:
    """Make ``tree``'s own configuration set every key of ``keys`` (each command touches a file named
    after it in ``markers``), written where ``place`` says, with ``url`` as its remote."""
    hooks = markers.parent / "hooks"
    hooks.mkdir(exist_ok=True)
    for hook in ("post-checkout", "reference-transaction"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {markers}/hook-{hook}\n")
        (hooks / hook).chmod(0o755)
    entries = [
        (k, str(hooks) if k == "core.hooksPath" else f"touch {markers}/{k.lower()}; false")
        for k in sorted(keys)
    ]
    if "hook.x.command" in keys:
        entries.append(("hook.x.event", "post-checkout"))
    git_dir = tree / ".git"
    local = (git_dir / "config").read_text()
    origin_url = next(line for line in local.splitlines() if line.strip().startswith("url = "))
    new_url = {"path": origin_url, "ssh": "\turl = ssh://127.0.0.1/srv/code",
               "ext": f"\turl = ext::sh -c touch% {markers}/url-ext"}[url]  # fmt: skip
    local = local.replace(origin_url, new_url) + config_text([("protocol.ext.allow", "always")])
    text = config_text(entries)
    if place == "config":
        local += text
    elif place == "include-chain":
        (markers.parent / "two.cfg").write_text(text)
        (git_dir / "one.cfg").write_text(config_text([("include.path", str(markers.parent / "two.cfg"))]))
        local += config_text([("include.path", "one.cfg")])
    elif place == "include-if":
        (markers.parent / "if.cfg").write_text(text)
        local += config_text([("includeIf.gitdir:code/.path", str(markers.parent / "if.cfg"))])
    else:
        local += config_text([("extensions.worktreeConfig", "true")])
        (git_dir / "config.worktree").write_text(text)
    (git_dir / "config").write_text(local)


EXAMPLE_SHARE = 4
"""The work-tree property runs a quarter of the profile's examples: each one copies a repository and
starts some 15 to 30 git processes (about 0.3 s on a loaded 2-core machine), where the other properties
here cost microseconds."""


@settings(max_examples=max(1, settings().max_examples // EXAMPLE_SHARE))
@given(
    named=st.just(frozenset()) | st.frozensets(st.sampled_from(REFUSED), min_size=1, max_size=4),
    off=st.frozensets(st.sampled_from(SWITCHED_OFF)),
    place=st.sampled_from(PLACES),
    url=st.sampled_from(URLS),
    partial=st.booleans(),
    other_fails=st.booleans(),
    stale=st.booleans(),
)
def test_no_command_a_work_tree_names_ever_runs(
    template: Template,
    tmp_path_factory: pytest.TempPathFactory,
    named: frozenset[str],
    off: frozenset[str],
    place: str,
    url: str,
    partial: bool,
    other_fails: bool,
    stale: bool,
) -> None:
    """Host a's work tree sets any of the command-bearing keys (directly, through an include chain,
    a conditional include or config.worktree), its remote may be an ext:: or ssh URL, it may be a
    partial clone (checking out v1 would fetch), its stat data may be stale (status would re-read
    files through a clean filter); host b's checkout may fail (a is then put back). Reading both trees
    and switching them to v1 runs no command; a tree that sets a key naming a command is refused with
    one line naming the key; else a full clone is switched (or put back when b failed) and a partial
    one fails without fetching."""
    root = tmp_path_factory.mktemp("jobcode-fuzz")
    try:
        markers = root / "markers"
        markers.mkdir()
        names = ("a", "b") if other_fails else ("a",)
        for name in names:
            source = template.partial if partial and name == "a" else template.full
            shutil.copytree(source, root / name / "code", symlinks=True)
        a = root / "a" / "code"
        hostile_tree(a, markers, named | off, place, url)
        if stale:
            os.utime(a / "train.py", (1_000_000_000, 1_000_000_000))
        if other_fails:
            (root / "b" / "code" / ".git" / "index.lock").write_text("")  # b's checkout fails
        hosts = list(template.hosts[: len(names)])
        spec = CodeSpec(path=str(root / "{host}" / "code"))
        codes = inspect_hosts(TransportPool(), hosts, spec, template.v1, concurrency=2)
        res = switch_work_trees(TransportPool(), hosts, spec, template.v1, codes=codes, concurrency=2)
        assert sorted(os.listdir(markers)) == []
        heads = [run_git(root / n / "code", "rev-parse", "HEAD") for n in names]
        if named:
            error = str(codes[0].error)
            assert codes[0].problem == "refused" and "\n" not in error, codes[0]
            assert any(f" sets {k.lower()}, a command" in error for k in named), error
            assert not res.ok and heads == [template.v2] * len(names)
            return
        assert all(c.ok and not c.dirty for c in codes), codes
        if partial or other_fails:
            assert not res.ok and heads == [template.v2] * len(names) and res.half_applied == (), res
            assert run_git(a, "symbolic-ref", "--short", "HEAD") == "main"
        else:
            assert res.ok and heads == [template.v1], res
    finally:
        shutil.rmtree(root, ignore_errors=True)
