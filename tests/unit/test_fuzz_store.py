"""Property-based tests of what reaches the state store from outside: ``--reason`` and
``--force-reason`` text, host and job names, ``--state`` paths, and the finding text a host sends
(suspect recording). The real CLI runs in process against a store in a temporary directory.

Contracts checked: the exit code is in the table and no catch-all fires; nothing is written outside
the store's directory; the store stays readable (``audit --json`` and ``hosts --json`` parse) and
holds the text literally (lone surrogates as their ``\\udcXX`` escape, the one change SQLite's UTF-8
forces); tables escape it (no raw control character reaches the terminal); a reason past
:data:`~robustctl.commands.actions.MAX_REASON_BYTES` or with a NUL is a usage error (64) and stores
nothing; every stored field is cut at :data:`~robustctl.store.MAX_TEXT`.
Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.cli.main import main
from robustctl.commands.actions import MAX_REASON_BYTES
from robustctl.store import MAX_TEXT, MachineState, Store
from robustctl.suspects import record_suspects
from tests.unit.test_fuzz_hostrange import INNER_CATCH_ALLS

pytestmark = pytest.mark.fuzz

INVENTORY = """\
gpus_per_host: 2
hosts:
  - name: node[01-08]
    address: 127.0.0.[2-9]
  - name: spare[1-4]
    address: 127.0.0.[10-13]
jobs:
  llama:
    hosts: node[01-08]
    layout: {tp: 2, pp: 4, dp: 2}
policy: {max_cluster_fraction: 1.0, max_job_fraction: 1.0, circuit_breaker_fraction: 1.0,
         max_evictions_per_hour: 100000}
"""

HOSTILE = (
    "[/]", "[bold red]x[/]", "[link=file:///etc/passwd]x[/link]", "\x1b[2J\x1b]0;owned\x07", "\x9b31m",
    "\r\n", "\x00", "\udcff", "\ud800", "\udc80abc", "'; DROP TABLE audit; --", "\" OR 1=1 --",
    "%s%n%x", "{0}{}", "\u202e\u200b", "é漢字🙂", "\\", "x" * 5000, "y" * (MAX_REASON_BYTES - 1),
)  # fmt: skip
# Any code point, surrogates (what undecodable argv bytes become) included.
ANY_CHAR = st.characters(exclude_categories=())
TEXT = (
    st.text(ANY_CHAR, max_size=40)
    | st.sampled_from(HOSTILE)
    | st.lists(st.sampled_from(HOSTILE) | st.text(ANY_CHAR, max_size=4), max_size=5).map("".join)
)


def stored(text: str) -> str:
    """``text`` as the store keeps it: each lone surrogate as its ``\\uXXXX`` escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def acceptable(text: str) -> bool:
    return "\x00" not in text and len(text.encode("utf-8", "surrogatepass")) <= MAX_REASON_BYTES


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``box/inv.yaml`` and ``box/state/`` (the store's directory); the tests run with ``box`` as cwd."""
    d = tmp_path_factory.mktemp("fuzz-store")
    (d / "inv.yaml").write_text(INVENTORY)
    (d / "state").mkdir()
    return d


def snapshot(root: Path, prune: str = "state") -> dict[str, tuple[int, int]]:
    """Size and mtime of every path under ``root``, not looking inside ``root/prune``."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d != root / prune]
        for name in dirnames + filenames:
            p = here / name
            st_ = p.lstat()
            out[str(p.relative_to(root))] = (st_.st_size, st_.st_mtime_ns)
    return out


def fresh_store(box: Path) -> Path:
    """A new store file for one example (the tables render every record: one store would grow)."""
    for old in (box / "state").glob("ex-*"):
        old.unlink()
    return box / "state" / f"ex-{os.urandom(4).hex()}.db"


def cli(box: Path, argv: list[str], state: Path | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    inv = [] if argv[0] == "audit" else ["-i", str(box / "inv.yaml")]
    full = [*argv, *inv, "--state", str(state or box / "state" / "s.db")]
    old = Path.cwd()
    os.chdir(box)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(full)
    finally:
        os.chdir(old)
    e = err.getvalue()
    for text in INNER_CATCH_ALLS:
        assert text not in e, e[-2000:]
    return code, out.getvalue(), e


def read_back(box: Path, state: Path | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    code, out, err = cli(box, ["audit", "--json"], state)
    assert code == 0, err
    records = json.loads(out)["records"]
    code, out, err = cli(box, ["hosts", "--all", "--json"], state)
    assert code == 0, err
    return records, json.loads(out)["hosts"]


def outside_store(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    return sorted(
        k for k in set(before) | set(after) if not k.startswith("state") and before.get(k) != after.get(k)
    )


@given(TEXT, st.sampled_from(("evict", "return", "standby add", "evict --force")), st.integers(1, 8))
def test_reason_text_reaches_the_store_literally(box: Path, reason: str, action: str, n: int) -> None:
    before = snapshot(box)
    state = fresh_store(box)
    host = f"node0{n}" if action != "standby add" else f"spare{1 + n % 4}"
    if action == "evict --force":
        argv = ["evict", host, "--reason", "fuzz", "--force", "--force-reason", reason, "--yes", "-q"]
    else:
        argv = [*action.split(), host, "--reason", reason, "--yes", "-q"]
    code, _, err = cli(box, argv, state)
    assert outside_store(before, snapshot(box)) == []
    if not acceptable(reason) or (action == "evict --force" and not reason.strip()):
        assert code == 64 and "reason" in err and len(err.strip().splitlines()) == 1, err
        return
    assert code in (0, 2), err  # applied, nothing to do, or refused by a rail (standby add of a spare)
    records, hosts = read_back(box, state)
    last = records[-1]
    if action == "evict --force":
        assert last["plan"]["force_reason"] == reason  # the plan is JSON: kept exactly, surrogates too
    elif reason:
        assert last["reason"] == stored(reason)
    if last["status"] == "applied" and action in ("evict", "standby add") and reason:
        assert any(h["host"] == host and h["reason"] == stored(reason) for h in hosts)
    # the tables render the same text escaped: no raw control character reaches the terminal
    for argv in (["audit"], ["hosts", "--all"]):
        c, _, table = cli(box, argv, state)
        assert c == 0
        assert not any(ch in table for ch in "\x00\x07\x1b\x9b"), repr(table[-500:])


@given(TEXT)
def test_hostile_names_are_usage_errors(box: Path, name: str) -> None:
    before = snapshot(box)
    state = box / "state" / "names.db"
    for argv in (
        ["evict", name, "--reason", "r", "--yes", "-q"],
        ["evict", "node01", "--job", name, "--over-evict", "pp", "--reason", "r", "--dry-run", "-q"],
        ["return", name, "--reason", "r", "--yes", "-q"],
        ["standby", "add", name, "--yes", "-q"],
        ["standby", "activate", "--for", name, "--job", name, "--yes", "-q"],
        ["standby", "activate", "--for", "node01", "--job", "llama", "--standby", name, "--dry-run", "-q"],
    ):
        code, _, err = cli(box, argv, state)
        assert code in (0, 2, 64, 78), f"{argv}: exit {code}: {err[-1000:]}"
    assert outside_store(before, snapshot(box)) == []
    read_back(box, state)


STATE_NAMES = st.lists(
    st.sampled_from(("%2e%2e", "..", "a#b", "c?mode=memory", "%00", "x%2Fy", "é", "\udcff", " ", "-", "s.db"))
    | st.text(st.characters(exclude_categories=(), exclude_characters="/\x00"), min_size=1, max_size=8),
    min_size=1,
    max_size=3,
)


@given(STATE_NAMES)
def test_state_paths_stay_in_their_directory(box: Path, parts: list[str]) -> None:
    state = box / "state" / "paths"
    state.mkdir(exist_ok=True)
    path = state.joinpath(*parts)
    if not path.resolve().is_relative_to(state.resolve()):
        return  # a literal ".." leaves the directory by the user's own choice
    before = snapshot(box, prune="state/paths")
    code, _, err = cli(box, ["evict", "node01", "--reason", "r", "--yes", "-q"], state=path)
    assert code in (0, 78), err  # written, or a file SQLite cannot open (a name too long)
    changed = sorted(k for k, v in snapshot(box, prune="state/paths").items() if before.get(k) != v)
    assert changed == [], changed  # nothing changed outside the store's own directory
    if code == 0:
        assert path.is_file()  # the store is the file named, not one a URI parameter picked
        with Store.open(path) as s:
            assert s.machine("node01") is not None


@given(st.dictionaries(st.sampled_from([f"node0{i}" for i in range(1, 9)]) | TEXT, TEXT, max_size=4))
def test_finding_text_from_hosts(box: Path, named: dict[str, str]) -> None:
    """Suspect recording takes host names and findings from reports: whatever they hold is stored."""
    path = fresh_store(box)
    with Store.open(path) as store:
        result = record_suspects(store, named, source="diagnose")
        for host in result.marked:
            rec = store.machine(host.encode("utf-8", "backslashreplace").decode())
            assert rec is not None and rec.state is MachineState.SUSPECT
            assert len(rec.reason) <= 200
    _, hosts = read_back(box, path)  # the CLI reads it
    assert sorted(h["host"] for h in hosts if h["source"] == "store") == sorted(map(stored, result.marked))


def test_every_stored_field_is_bounded(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.db") as s:
        aid = s.audit_begin("evict", ["node01"], "r" * (MAX_TEXT + 10), message="m" * (3 * MAX_TEXT))
        s.audit_step_start(aid, 0, "d" * (MAX_TEXT * 2))
        s.audit_step_end(aid, 0, "done", "\ud800" * (MAX_TEXT + 1))
        s.set_state("node01", MachineState.EVICTED, "x" * (MAX_TEXT * 4))
        rec = s.audit()[0]
        assert len(rec.reason) < MAX_TEXT + 40 and rec.reason.endswith(f"[cut: {MAX_TEXT + 10} characters]")
        assert len(rec.message) < MAX_TEXT + 40 and len(rec.steps[0].description) < MAX_TEXT + 40
        assert rec.steps[0].detail.startswith("\\ud800\\ud800")
        machine = s.machine("node01")
        assert machine is not None and len(machine.reason) < MAX_TEXT + 40


def test_reason_limits_are_usage_errors(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "inv.yaml").write_text(INVENTORY)
    for reason in ("a\x00b", "x" * (MAX_REASON_BYTES + 1), "é" * (MAX_REASON_BYTES // 2 + 1)):
        code, _, err = cli(tmp_path, ["evict", "node01", "--reason", reason, "--yes"])
        assert code == 64 and "--reason" in err, err
    code, _, err = cli(tmp_path, ["evict", "node01", "--reason", "x" * MAX_REASON_BYTES, "--yes", "-q"])
    assert code == 0, err
    with Store.open(tmp_path / "state" / "s.db") as s:
        assert [r.reason for r in s.audit()] == ["x" * MAX_REASON_BYTES]  # the refused ones wrote nothing
