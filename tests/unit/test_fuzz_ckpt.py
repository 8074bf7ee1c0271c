"""Property-based tests of the checkpoint inputs: the ``ckpt`` probe on hostile directories, the
control side's parsing of whatever a host sends, the judgement of any reads, and the ``ckpt:`` section
of the inventory. Contract: no traceback, only the documented errors, bounded output.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

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
