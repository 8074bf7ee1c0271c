"""``rollback`` and ``update stage`` over real SSH: three loopback sshd hosts, each with its own git work
tree of the job's code (``code.path`` with ``{host}``).

The restart after a rollback is injected (``robustctl.commands.update.default_restart`` monkeypatched):
this file tests the all-or-none checkout over SSH; the restart back ends are tested with them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from robustctl.cli.main import main
from robustctl.commands import update as update_mod
from robustctl.exit_codes import ExitCode

from .conftest import require_testbed
from .testbed import Testbed

HOSTS = ("node01", "node02", "node03")
ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True,
                          env=ENV).stdout.strip()  # fmt: skip


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    require_testbed()
    with Testbed(tmp_path_factory.mktemp("update-bed"), 3) as tb:
        yield tb


@pytest.fixture
def trees(bed: Testbed, tmp_path: Path) -> dict[str, Any]:
    origin = tmp_path / "origin"
    origin.mkdir()
    git(origin, "init", "-q", "-b", "main")
    commits = []
    for v in ("v1", "v2", "v3"):
        (origin / "train.py").write_text(v)
        git(origin, "add", "train.py")
        git(origin, "commit", "-q", "-m", v)
        git(origin, "tag", v)
        commits.append(git(origin, "rev-parse", "HEAD"))
    for h in HOSTS:
        subprocess.run(["git", "clone", "-q", str(origin), str(tmp_path / h / "code")], check=True)
    (origin / "train.py").write_text("v4")
    git(origin, "commit", "-qam", "v4")
    only12 = git(origin, "rev-parse", "HEAD")
    for h in HOSTS[:2]:
        git(tmp_path / h / "code", "fetch", "-q", "origin")
    job = {"hosts": "node[01-03]", "ranks_per_host": 1, "layout": {"dp": 3},
           "code": {"path": str(tmp_path / "{host}" / "code"), "stable_after_steps": 1}}  # fmt: skip
    inv = bed.write_inventory(tmp_path / "inv.yaml", jobs={"j": job})
    return {"tmp": tmp_path, "inv": inv, "state": tmp_path / "state.db", "c": commits, "only12": only12}


def heads(t: dict[str, Any]) -> list[str]:
    return [git(t["tmp"] / h / "code", "rev-parse", "HEAD") for h in HOSTS]


def cli(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, err.getvalue()


@pytest.fixture
def restarts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    @dataclasses.dataclass(frozen=True)
    class Done:
        exit_code: int = 0
        kind: str = "apply"
        schema_version: int = 1

    def restart(job: str, reason: str, req: Any, confirm: Any, show: Any) -> Any:
        calls.append(job)
        return Done()

    monkeypatch.setattr(update_mod, "default_restart", restart)
    return calls


def test_rollback_switches_every_host_over_ssh(trees: dict[str, Any], restarts: list[str]) -> None:
    i, s = ("-i", str(trees["inv"])), ("--state", str(trees["state"]))
    code, err = cli("rollback", "--job", "j", "--to", "v1", "--yes", "-q", *i, *s)
    assert code == 0, err
    assert heads(trees) == [trees["c"][0]] * 3 and restarts == ["j"]


def test_a_ref_missing_on_one_host_leaves_nothing_switched(
    trees: dict[str, Any], restarts: list[str]
) -> None:
    i, s = ("-i", str(trees["inv"])), ("--state", str(trees["state"]))
    before = heads(trees)
    code, err = cli("rollback", "--job", "j", "--to", trees["only12"], "--yes", "-q", *i, *s)
    assert code == ExitCode.USAGE and "node03: ref" in err, err
    code, err = cli("update", "stage", "--job", "j", "--ref", trees["only12"], "--reason", "r", *i, *s)
    assert code == ExitCode.USAGE and "node03: ref" in err, err
    (trees["tmp"] / "node02" / "code" / ".git" / "index.lock").write_text("")
    code, err = cli("rollback", "--job", "j", "--to", "v2", "--yes", *i, *s)
    assert code == ExitCode.UNKNOWN and "node02" in err, err
    assert heads(trees) == before and restarts == []
