"""Property-based tests of host ranges and parallel layouts: whatever the text, ``expand``,
``collapse``, ``compact_ranges`` and ``parse_layout`` either answer or raise their one typed error in
one line, and every command's ``--hosts`` (and ``analyze --layout``) exits 0-2 or 64, never 3.

Contracts checked: ``count`` agrees with ``expand`` without expanding; ``expand(collapse(expand(x)))``
names the same hosts as ``expand(x)``; ``compact_ranges`` reads back through a host range to the same
integers; rank → coordinates → rank is the identity and groups partition the ranks; a range past
:data:`~robustctl.inventory.hostrange.MAX_EXPANSION` hosts (``node[1-1000000000]``,
``n[1-99999][1-99999]``, an inventory of many big entries) is refused by the count, in a child
process whose address space is capped at 1 GiB (an expansion would die there of MemoryError).
Seeded and bounded by the ``ci`` profile (tests/conftest.py); ``make fuzz`` runs many more examples.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from robustctl.cli.main import main
from robustctl.errors import InventoryError, UsageError
from robustctl.inventory.hostrange import MAX_EXPANSION, collapse, compact_ranges, count, expand
from robustctl.inventory.topology import DIMS, MAX_WORLD_SIZE, Topology, parse_layout

pytestmark = pytest.mark.fuzz

INNER_CATCH_ALLS = ("internal error", "analysis failed", "check failed:", "Traceback")
"""Texts of the CLI's and the inner catch-alls (fanout, diagnose engine, analyze detection): a bug if seen."""

TOKENS = (
    "[", "]", ",", "-", "[1-3]", "[01-10]", "[0-99999]", "[1-1000000000]", "[3-1]", "[1,2]", "[]", "[a]",
    "[-]", "[1-]", " ", "\t", "\n", "\x00", "\udcff", "é", "node", "n", "127.0.0.", "0" * 30, "%", "'",
    ";", "$(id)", "-oProxyCommand=x", "[/]",
)  # fmt: skip

NUMBER = st.integers(0, 120).map(str) | st.sampled_from(("00", "007", "99999", "1000000000", "0" * 25 + "1"))


@st.composite
def ranges(draw: st.DrawFn) -> str:
    """A structured host range: parts of a prefix and a few bracket groups, some bounds reversed."""
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        name = draw(st.sampled_from(("node", "n", "gpu-", "r", "127.0.0.", "")))
        for _ in range(draw(st.integers(0, 3))):
            items = []
            for _ in range(draw(st.integers(1, 3))):
                lo = draw(NUMBER)
                items.append(lo if draw(st.booleans()) else f"{lo}-{draw(NUMBER)}")
            name += "[" + ",".join(items) + "]" + draw(st.sampled_from(("", "x", "-", "b")))
        parts.append(name)
    return ",".join(parts)


@st.composite
def tokens(draw: st.DrawFn) -> str:
    return "".join(draw(st.lists(st.sampled_from(TOKENS) | st.text(max_size=3), max_size=12)))


PATTERNS = ranges() | tokens() | st.text(max_size=40)


def _one_line(exc: Exception) -> None:
    text = str(exc)
    assert text and "\n" not in text, f"not one line: {text!r}"


@given(PATTERNS)
def test_expand_answers_or_raises_inventory_error(pattern: str) -> None:
    try:
        names = expand(pattern)
    except InventoryError as exc:
        _one_line(exc)
        return
    assert names and all(n and n == n.strip() for n in names)
    assert len(names) <= MAX_EXPANSION
    assert count(pattern.strip()) == len(names)  # the count the cap uses is exact


@given(ranges() | tokens())
def test_collapse_round_trip(pattern: str) -> None:
    try:
        names = expand(pattern)
    except InventoryError:
        return
    again = expand(collapse(names))
    assert sorted(set(again)) == sorted(set(names))


@given(st.lists(st.text(max_size=12), max_size=20))
def test_collapse_never_raises(names: list[str]) -> None:
    assert isinstance(collapse(names), str)


@given(st.lists(st.integers(0, 10**6), max_size=60))
def test_compact_ranges_reads_back(values: list[int]) -> None:
    text = compact_ranges(values)
    if not values:
        assert text == ""
        return
    assert [int(n[1:]) for n in expand(f"r[{text}]")] == sorted(set(values))


def test_huge_ranges_are_refused_by_the_count() -> None:
    for pattern in ("node[1-1000000000]", "n[1-99999][1-99999]", "n[0-9999]," * 101, "x" + "[0-1]" * 21):
        with pytest.raises(InventoryError, match=rf"expands to \d+ hosts \(limit {MAX_EXPANSION}\)"):
            expand(pattern)
    with pytest.raises(InventoryError, match="bracket groups"):
        expand("n" + "[1]" * 3000)  # python-hostlist recursed once per group: RecursionError, exit 3
    with pytest.raises(InventoryError, match="names no host"):
        expand(",")  # was an empty target set, refused by a safety rail with exit 2
    with pytest.raises(InventoryError, match="characters long"):
        expand("n," * 40_000)


# --- layouts ----------------------------------------------------------------------------------


@st.composite
def layouts(draw: st.DrawFn) -> str:
    keys = draw(st.lists(st.sampled_from((*DIMS, "order", "TP", "xx", "")), max_size=6))
    items = []
    for k in keys:
        if k == "order":
            v = "-".join(draw(st.permutations(DIMS))) if draw(st.booleans()) else draw(st.text(max_size=8))
        else:
            v = draw(NUMBER | st.sampled_from(("0", "-1", "1.5", "２", "nan", "1e3", "")))
        items.append(f"{k}={v}" if draw(st.integers(0, 9)) else k)
    return draw(st.sampled_from((",", " ", ", ", ",,"))).join(items)


@given(layouts() | st.text(max_size=40), st.none() | st.integers(-5, 2 * MAX_WORLD_SIZE))
def test_parse_layout_answers_or_raises_usage_error(text: str, world: int | None) -> None:
    try:
        layout = parse_layout(text, world_size=world)
    except UsageError as exc:
        _one_line(exc)
        return
    assert 1 <= layout.world_size <= MAX_WORLD_SIZE
    assert world is None or layout.world_size == world


SMALL = st.integers(1, 4)


@given(
    SMALL, SMALL, SMALL, SMALL, SMALL, st.permutations(DIMS), st.integers(1, 8), st.data()
)  # fmt: skip
def test_rank_coords_rank_round_trip(
    tp: int, cp: int, ep: int, dp: int, pp: int, order: list[str], g: int, data: st.DataObject
) -> None:
    layout = parse_layout(f"tp={tp},cp={cp},ep={ep},dp={dp},pp={pp},order={'-'.join(order)}")
    topo = Topology(layout, ranks_per_host=g)
    w = layout.world_size
    for rank in data.draw(st.lists(st.integers(0, w - 1), min_size=1, max_size=8)):
        assert topo.rank_of(topo.coords(rank)) == rank
        for kind in DIMS:
            group = topo.group_of(rank, kind)
            assert rank in group and len(group) == topo.group_size(kind)
    for kind in (*DIMS, "job"):
        seen = sorted(r for grp in topo.groups(kind) for r in grp)
        assert seen == list(range(w))  # the groups of a kind partition the ranks
    with pytest.raises(UsageError):
        topo.coords(w)
    with pytest.raises(UsageError):
        topo.coords(-1)


# --- the flags, through the CLI --------------------------------------------------------------

INVENTORY = """\
gpus_per_host: 2
hosts:
  - name: node[01-08]
    address: 127.0.0.[2-9]
  - name: spare[1-2]
    address: 127.0.0.[10-11]
jobs:
  llama:
    hosts: node[01-08]
    layout: {tp: 2, pp: 4, dp: 2}
"""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fuzz-hostrange")
    (d / "inv.yaml").write_text(INVENTORY)
    (d / "dump.txt").write_text('Process 1: python train.py\nThread 0x1 (idle): "MainThread"\n')
    return d


def run_cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, err.getvalue()


def _no_catch_all(code: int, err: str, allowed: tuple[int, ...]) -> None:
    assert code in allowed, f"exit {code}: {err[-2000:]}"
    for text in INNER_CATCH_ALLS:
        assert text not in err, err[-2000:]


# Patterns that never name one of the inventory's hosts: commands that would contact a host stop
# at the selection (stacks, standby check); the others run dry.
UNMATCHED = PATTERNS.filter(lambda p: "node" not in p and "spare" not in p)


@given(PATTERNS)
def test_hosts_flag_of_every_dry_command(workdir: Path, pattern: str) -> None:
    inv, state = str(workdir / "inv.yaml"), str(workdir / "state.db")
    for argv in (
        ["inventory", "show", inv, "--hosts", pattern],
        ["diagnose", "-i", inv, "--dry-run", "-q", "--hosts", pattern, "--state", state],
        ["evict", pattern, "-i", inv, "--dry-run", "-q", "--state", state],
        [
            "evict",
            pattern,
            "-i",
            inv,
            "--job",
            "llama",
            "--over-evict",
            "pp",
            "--dry-run",
            "-q",
            "--state",
            state,
        ],
        ["return", pattern, "-i", inv, "--dry-run", "-q", "--state", state],
        ["standby", "add", pattern, "-i", inv, "--dry-run", "-q", "--state", state],
    ):
        code, err = run_cli(argv)
        _no_catch_all(code, err, (0, 2, 64))


@given(UNMATCHED)
def test_hosts_flag_of_contacting_commands(workdir: Path, pattern: str) -> None:
    inv, state = str(workdir / "inv.yaml"), str(workdir / "state.db")
    for argv in (
        ["stacks", "-i", inv, "--job", "llama", "--hosts", pattern, "-q", "--no-record", "--timeout", "1"],
        ["standby", "check", pattern, "-i", inv, "--state", state],
    ):
        code, err = run_cli(argv)
        _no_catch_all(code, err, (64,))


@given(layouts() | st.text(max_size=30), st.none() | st.integers(1, 64))
def test_layout_flag_of_analyze(workdir: Path, layout: str, g: int | None) -> None:
    argv = ["analyze", str(workdir / "dump.txt"), "-q", "--layout", layout]
    code, err = run_cli([*argv, "-G", str(g)] if g is not None else argv)
    _no_catch_all(code, err, (0, 1, 2, 3, 64))


# --- memory: refused by the count, under an address-space cap ---------------------------------


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS as a memory bound: Linux")
def test_huge_ranges_stay_within_memory(tmp_path: Path) -> None:
    import resource

    inv = tmp_path / "big.yaml"
    inv.write_text("hosts:\n" + "".join(f"  - name: r{i}n[0-99999]\n" for i in range(20)))
    code = (
        "import sys\n"
        "from robustctl.errors import InventoryError\n"
        "from robustctl.inventory.hostrange import expand\n"
        "from robustctl.cli.main import main\n"
        "for p in ('node[1-1000000000]', 'n[1-99999][1-99999]', 'n[0-99999],' * 30, 'n' + '[0-9]' * 9):\n"
        "    try:\n        expand(p)\n    except InventoryError as exc:\n        print('refused:', exc)\n"
        "print('show', main(['inventory', 'show', sys.argv[1], '--hosts', 'node[1-1000000000]']))\n"
        "print('validate', main(['inventory', 'validate', sys.argv[2]]))\n"
    )
    limit = 1 << 30

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    (tmp_path / "inv.yaml").write_text(INVENTORY)
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "inv.yaml"), str(inv)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=cap,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("refused:") == 4, out.stdout
    assert "show 64" in out.stdout and "validate 78" in out.stdout, out.stdout + out.stderr[-2000:]
    assert "MemoryError" not in out.stderr and "internal error" not in out.stderr
    assert f"more than {MAX_EXPANSION} hosts" in out.stderr
