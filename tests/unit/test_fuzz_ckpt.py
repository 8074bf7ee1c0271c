"""Property-based tests of the checkpoint inputs: the ``ckpt`` probe on hostile directories, the
control side's parsing of whatever a host sends, the judgement of any reads, and the ``ckpt:`` section
of the inventory. Contract: no traceback, only the documented errors, bounded output.

Containment (issue 21, item 8): checkpoint trees with symbolic links at random levels (the iteration
directory, an ``mp_rank`` directory, the shard, the tracker; pointing outside the root or inside it,
relative or absolute, dangling, or at themselves) are scanned by the ``ckpt`` probe and staged through
the ``shard`` probe's read, write, commit and abort: every descriptor either probe opens resolves
under the checkpoint root, nothing outside the root changes, and no shard reached through a link is
called readable.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from robustctl.ckpt.scan import parse_read
from robustctl.ckpt.state import CheckpointError, CheckpointUnknown, evaluate, pick_restart_iteration
from robustctl.config import MAX_CKPT_ENTRIES, ParallelLayout
from robustctl.errors import ConfigError
from robustctl.inventory import load_inventory
from robustctl.probes import load_probe

pytestmark = pytest.mark.fuzz

ANY = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=30,
)
SHARD = st.fixed_dictionaries(
    {},
    optional={
        "name": ANY,
        "rank": st.integers(-3, 40) | ANY,
        "tp": st.integers(-1, 4) | ANY,
        "pp": st.integers(-1, 4) | ANY,
        "size": st.integers(-1, 2**40) | ANY,
        "readable": st.booleans() | ANY,
        "error": ANY,
    },
)
ITERATION = st.fixed_dictionaries(
    {},
    optional={
        "iteration": st.integers(-1, 10**9) | ANY,
        "shards": st.lists(SHARD | ANY, max_size=12) | ANY,
        "error": ANY,
    },
)
DATA = st.fixed_dictionaries(
    {},
    optional={
        "exists": st.booleans() | ANY,
        "error": ANY,
        "truncated": st.booleans(),
        "tracker": st.fixed_dictionaries({}, optional={"iteration": ANY, "raw": ANY}) | ANY,
        "iterations": st.lists(ITERATION | ANY, max_size=8) | ANY,
    },
)
LAYOUT = ParallelLayout(tp=2, pp=2, dp=2)


@given(DATA, st.sampled_from(("rank", "mp_rank")), st.integers(1, 5), st.integers(1, 20))
def test_parse_read_takes_anything_and_stays_bounded(
    data: dict[str, Any], shards: str, iters: int, entries: int
) -> None:
    read = parse_read("node1", data, layout=LAYOUT, shards=shards, max_iterations=iters, max_entries=entries)
    assert len(read.iterations) <= iters and len(read.copies) <= entries
    assert all(0 <= c.rank < LAYOUT.world_size and c.host == "node1" for _, c in read.copies)
    assert read.ok == (read.error is None)
    if data.get("exists") is not True:
        assert not read.ok and read.copies == ()


@given(st.lists(st.tuples(DATA, st.sampled_from(("node1", "node2", "node3", "node4"))), max_size=4))
def test_any_reads_are_judged_or_refused_with_a_checkpoint_error(
    reads: list[tuple[dict[str, Any], str]],
) -> None:
    parsed = [
        parse_read(h, d, layout=LAYOUT, shards="rank", max_iterations=8, max_entries=64) for d, h in reads
    ]
    state = evaluate(
        parsed,
        job="j",
        dir="/ckpt",
        shared=False,
        shards="rank",
        world_size=8,
        needed=range(8),
        hosts=["node1", "node2", "node3", "node4"],
    )
    assert all(it.complete == (not it.missing) for it in state.iterations)
    for want in ("latest-complete", 0, 5):
        try:
            pick = pick_restart_iteration(state, want)
        except (CheckpointError, CheckpointUnknown) as exc:
            assert "\n" not in str(exc)
        else:
            it = state.iteration(pick.iteration) if pick.iteration is not None else None
            assert it is not None and it.complete and pick.note


NAMES = st.sampled_from(
    ("iter_0000010", "iter_0000020", "iter_1", "iter_00000x0", "iter_99999999999999", "rank_00001.pt",
     "rank_1.pt.tmp9", "mp_rank_00", "mp_rank_01_002", "latest_checkpointed_iteration.txt", "é", "[b]")
) | st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=12)  # fmt: skip


@st.composite
def tree(draw: st.DrawFn) -> list[tuple[str, str, bytes]]:
    """(iteration dir, entry, content); content b"DIR" makes a directory."""
    out = []
    for _ in range(draw(st.integers(0, 8))):
        out.append((draw(NAMES), draw(NAMES), draw(st.sampled_from((b"", b"x", b"PK\x03\x04", b"DIR")))))
    return out


@pytest.fixture(scope="module")
def probe() -> Any:
    return load_probe("ckpt")


@given(tree(), st.binary(max_size=100), st.sampled_from(("rank", "mp_rank")))
def test_probe_on_hostile_directories(
    probe: Any,
    tmp_path_factory: pytest.TempPathFactory,
    entries: list[tuple[str, str, bytes]],
    tracker: bytes,
    shards: str,
) -> None:
    root = tmp_path_factory.mktemp("ckpt-fuzz")
    try:
        for it, name, content in entries:
            d = root / it
            if d.exists() and not d.is_dir():
                continue
            d.mkdir(exist_ok=True)
            p = d / name
            if p.exists():
                continue
            if content == b"DIR":
                p.mkdir()
                (p / "model_optim_rng.pt").write_bytes(b"PK")
            else:
                p.write_bytes(content)
        tfile = root / "latest_checkpointed_iteration.txt"
        if not tfile.exists():
            tfile.write_bytes(tracker)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = probe.main(
                ["--dir", str(root), "--shards", shards, "--max-entries", "40", "--timeout", "20"]
            )
        assert code == 0
        doc = json.loads(out.getvalue())
        data = doc["data"]
        assert doc["probe"] == "ckpt" and data["exists"] is True
        t = data["tracker"]
        if t["iteration"] is not None:
            assert t["raw"].isdigit() and int(t["raw"]) == t["iteration"]
        for it in data["iterations"]:
            for sh in it["shards"]:
                assert sh["readable"] == (sh["error"] is None)
                if sh["size"] == 0:
                    assert not sh["readable"]
        read = parse_read("h", data, layout=LAYOUT, shards=shards, max_iterations=64, max_entries=100)
        assert read.ok or read.error
    finally:
        shutil.rmtree(root, ignore_errors=True)


CKPT = (
    st.fixed_dictionaries(
        {},
        optional={
            "dir": st.sampled_from(("/ckpt", "/ckpt/{host}", "relative", "", "/a/{rank}", "/{", "/x" * 3000))
            | ANY,
            "shared": ANY,
            "shards": st.sampled_from(("rank", "mp_rank", "torch_dist")) | ANY,
            "tracker": st.sampled_from(("latest_checkpointed_iteration.txt", "a/b", "", "t\x00")) | ANY,
            "max_iterations": st.integers(-1, 20_000) | ANY,
            "max_entries": st.integers(-1, 2_000_000) | ANY,
            "timeout_s": st.floats(allow_nan=True) | ANY,
            "extra": ANY,
        },
    )
    | ANY
)


@pytest.fixture(scope="module")
def inv_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-ckpt-inv")


@given(CKPT)
def test_ckpt_section_loads_or_is_one_config_error(inv_dir: Path, ckpt: Any) -> None:
    data = {
        "hosts": [{"name": "node[1-2]", "address": "127.0.0.[2-3]"}],
        "jobs": {"j": {"hosts": "node[1-2]", "layout": {"dp": 2}, "ckpt": ckpt}},
    }
    path = inv_dir / "inv.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8", errors="surrogatepass")
    try:
        inv = load_inventory(path, environ={})
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path))
        return
    spec = inv.job("j").ckpt
    if spec is not None:
        assert spec.dir.startswith("/") and 1 <= spec.max_iterations <= 10_000
        assert 1 <= spec.max_entries <= MAX_CKPT_ENTRIES and spec.timeout_s <= 86_400
        assert os.sep not in spec.tracker
        assert "{" not in spec.dir.replace("{host}", "")


# ---- containment: symbolic links at any level of a checkpoint tree -------------------------------

SECRET = b"outside-the-checkpoint-directory"
LINK = st.sampled_from(("outside-abs", "outside-rel", "inside-abs", "inside-rel", "self", "dangling"))
"""Where a symbolic link put in place of a directory or file of the tree points."""


@st.composite
def linked_tree(draw: st.DrawFn) -> dict[str, Any]:
    """Iterations, each (number, link or None for the iteration directory, shards); each shard (rank,
    link or None for its mp_rank directory, link or None for the file); a link or None for the tracker."""
    iterations = []
    for number in draw(st.lists(st.sampled_from((10, 20, 30)), min_size=1, max_size=3, unique=True)):
        shards = [
            (rank, draw(st.none() | LINK), draw(st.none() | LINK))
            for rank in draw(st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True))
        ]
        iterations.append((number, draw(st.none() | LINK), shards))
    return {"iterations": iterations, "tracker": draw(st.none() | LINK)}


def _link(at: Path, how: str, root: Path, outside: Path, inside: Path, outside_twin: Path) -> None:
    """Make ``at`` a symbolic link of kind ``how`` (see :data:`LINK`)."""
    target = {
        "outside-abs": outside_twin,
        "outside-rel": Path(os.path.relpath(outside_twin, at.parent)),
        "inside-abs": inside,
        "inside-rel": Path(os.path.relpath(inside, at.parent)),
        "self": Path(at.name),
        "dangling": root / "nowhere" / at.name,
    }[how]
    at.symlink_to(target)


def build(base: Path, tree: dict[str, Any], shards: str) -> tuple[Path, Path]:
    """The checkpoint root and a directory beside it (outside) holding twins of every name, each
    file :data:`SECRET`; iter_0000099 inside the root is a real iteration the inside links reach."""
    root, outside = base / "ck", base / "outside"
    for d in (root, outside):
        d.mkdir()
    real = root / "iter_0000099"

    def shard_path(it: Path, rank: int) -> tuple[Path | None, Path]:
        if shards == "rank":
            return None, it / f"rank_{rank:05d}.pt"
        sub = it / f"mp_rank_{rank:02d}"
        return sub, sub / "model_optim_rng.pt"

    for it in (real, outside / "iter", outside):
        for rank in range(4):
            sub, f = shard_path(it, rank)
            for d in (it, sub):
                if d is not None:
                    d.mkdir(exist_ok=True)
            f.write_bytes(b"inside" if it == real else SECRET)
    (outside / "latest_checkpointed_iteration.txt").write_bytes(b"77")
    for number, it_link, it_shards in tree["iterations"]:
        it = root / f"iter_{number:07d}"
        if it_link is not None:
            _link(it, it_link, root, real, outside / "iter", outside / "iter")
            continue
        it.mkdir()
        for rank, dir_link, file_link in it_shards:
            sub, f = shard_path(it, rank)
            twin_sub, twin_f = shard_path(outside, rank)
            in_sub, in_f = shard_path(real, rank)
            if sub is not None:
                if dir_link is not None:
                    assert twin_sub is not None and in_sub is not None
                    _link(sub, dir_link, root, in_sub, in_sub, twin_sub)
                    continue
                sub.mkdir()
            if file_link is not None:
                _link(f, file_link, root, in_f, in_f, twin_f)
            else:
                f.write_bytes(b"shard")
    tracker = root / "latest_checkpointed_iteration.txt"
    if tree["tracker"] is not None:
        _link(tracker, tree["tracker"], root, real / "rank_00000.pt", real / "rank_00000.pt",
              outside / "latest_checkpointed_iteration.txt")  # fmt: skip
    else:
        tracker.write_bytes(b"30")
    return root, outside


def snapshot(d: Path) -> dict[str, bytes | str]:
    """Every entry under ``d`` (links not followed): file contents, link targets, directories."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(d):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            out[p] = (
                ("->" + os.readlink(p))
                if os.path.islink(p)
                else (Path(p).read_bytes() if os.path.isfile(p) else "dir")
            )
    return out


@contextlib.contextmanager
def opened_paths() -> Iterator[list[str]]:
    """Record the real path of every descriptor ``os.open`` returns (Linux ``/proc/self/fd``)."""
    real_open = os.open
    seen: list[str] = []

    def recording(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        fd = real_open(path, flags, mode, dir_fd=dir_fd)
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        return fd

    with mock.patch.object(os, "open", recording):
        yield seen


def run_probe_here(module: Any, argv: list[str], data: str | None = None) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = module.main(argv) if data is None else module.main(argv, data)
    assert code == 0
    doc = json.loads(out.getvalue())
    assert not doc["errors"], doc["errors"]
    return dict(doc["data"])


@pytest.fixture(scope="module")
def shard_probe() -> Any:
    return load_probe("shard")


@pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd to see what a descriptor is"
)
@given(linked_tree(), st.sampled_from(("rank", "mp_rank")))
def test_scan_and_staging_never_leave_the_checkpoint_root(
    probe: Any, shard_probe: Any, tmp_path_factory: pytest.TempPathFactory, tree: dict[str, Any], shards: str
) -> None:
    base = tmp_path_factory.mktemp("ckpt-links")
    try:
        root, outside = build(base, tree, shards)
        real_root = os.path.realpath(root)
        before_outside = snapshot(outside)
        with opened_paths() as seen:
            data = run_probe_here(probe, ["--dir", str(root), "--shards", shards, "--timeout", "20"])
            tracker = data["tracker"]
            assert tracker["raw"] != "77"  # the outside tracker is never read
            listed = [(it["name"], sh) for it in data["iterations"] for sh in it["shards"]]
            for it_name, sh in listed:
                parts = [it_name, *sh["name"].split("/")]
                through_link = any(os.path.islink(root.joinpath(*parts[: i + 1])) for i in range(len(parts)))
                if through_link:  # a link at any level: refused, whatever it points at
                    assert not sh["readable"] and "symbolic link" in (sh["error"] or ""), sh
            # staging: read every shard the tree names, then copy one into each iteration
            for number, _, it_shards in tree["iterations"]:
                for rank, _, _ in it_shards:
                    name = (
                        f"rank_{rank:05d}.pt"
                        if shards == "rank"
                        else f"mp_rank_{rank:02d}/model_optim_rng.pt"
                    )
                    path = f"{root}/iter_{number:07d}/{name}"
                    got = run_probe_here(shard_probe, ["--op", "read", "--dir", str(root), "--path", path])
                    if got["error"] is None:
                        assert base64.b64decode(got["data"]) != SECRET
                    tmp = path + ".robustctl-stage.1"
                    w = run_probe_here(
                        shard_probe,
                        ["--op", "write", "--dir", str(root), "--path", tmp],
                        base64.b64encode(b"new").decode(),
                    )
                    if w["error"] is None:
                        run_probe_here(
                            shard_probe,
                            ["--op", "commit", "--dir", str(root), "--path", tmp, "--dest", path, "--size", "3",
                             "--tracker", f"{root}/latest_checkpointed_iteration.txt", "--iteration", str(number)],
                        )  # fmt: skip
                    run_probe_here(shard_probe, ["--op", "abort", "--dir", str(root), "--path", tmp])
        escaped = [p for p in seen if p != real_root and not p.startswith(real_root + os.sep)]
        assert not escaped, escaped
        assert snapshot(outside) == before_outside  # nothing outside the root was written or removed
    finally:
        shutil.rmtree(base, ignore_errors=True)
