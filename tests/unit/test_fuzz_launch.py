"""Property-based tests of the ``launch:`` section (restart on the inventory back end).

Whatever a template holds (braces, placeholders known or not, format specs, conversions, attribute
and index access, control characters, huge numbers), loading the inventory either succeeds or raises
a ConfigError naming FILE:LINE, and ``robustctl restart --dry-run`` exits 0, 64 or 78, never 3 and
never with a traceback. A placeholder's format spec (any fill, width and precision up to hundreds of
digits) is refused or accepted within a few MiB of memory, never a MemoryError or OverflowError. A template accepted at load always fills (``render_launch``) for every rank
and machine, with and without a checkpoint: the check at load is the whole check.
Seeded and bounded by the ``ci`` profile (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from robustctl.cli.main import main
from robustctl.config import LAUNCH_PLACEHOLDERS, MAX_LAUNCH_TEXT
from robustctl.errors import ConfigError
from robustctl.inventory import load_inventory
from robustctl.jobs.launch import render_launch
from tests.unit.test_fuzz_hostrange import INNER_CATCH_ALLS

pytestmark = pytest.mark.fuzz

NAMES = (*LAUNCH_PLACEHOLDERS, "host", "RANK", "0", "", "rank.real", "job[0]", "rank[0]", "__class__")
SPECS = ("", ":05d", ":>8", ":x", ":q", ":{rank}", ":" + "9" * 30, ":.3f", ":,", "!r", "!s", "!x")
PIECES = (
    st.text(max_size=6)
    | st.sampled_from(("{", "}", "{{", "}}", "--", "=", "\x00", "\n", "[/]", "é", "\udcff"))
    | st.builds(lambda n, s: "{" + n + s + "}", st.sampled_from(NAMES), st.sampled_from(SPECS))
)
TEMPLATES = st.lists(PIECES, max_size=6).map("".join)


@st.composite
def launch_sections(draw: st.DrawFn) -> dict[str, Any]:
    section: dict[str, Any] = {"command": draw(st.lists(TEMPLATES, min_size=0, max_size=4))}
    if draw(st.booleans()):
        section["per"] = draw(st.sampled_from(("host", "rank", "node", "")))
    if draw(st.booleans()):
        section["env"] = draw(
            st.dictionaries(
                st.sampled_from(("A", "B_1", "RANK", "1X", "", "NCCL_DEBUG")), TEMPLATES, max_size=3
            )
        )
    for key in ("cwd", "log_dir"):
        if draw(st.booleans()):
            section[key] = draw(TEMPLATES)
    for key in ("master_port", "stop_grace_s", "start_timeout_s"):
        if draw(st.booleans()):
            section[key] = draw(
                st.sampled_from((0, -1, 1, 1024, 65535, 70000, 1e999, "nan", 10**30, "x", None, 3.5))
            )
    return section


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-launch")


def write(workdir: Path, launch: dict[str, Any]) -> Path:
    data = {
        "hosts": [{"name": "n[1-2]", "address": "127.0.0.[2-3]"}],
        "jobs": {
            "j": {"hosts": "n[1-2]", "layout": {"dp": 2}, "process": {"match": "train"}, "launch": launch}
        },
    }
    path = workdir / "inv.yaml"
    try:
        path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    except UnicodeEncodeError:  # a lone surrogate: written escaped (YAML double-quoted \u escapes)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@given(launch_sections())
def test_launch_templates_load_or_fail_with_file_line_and_always_fill(
    workdir: Path, launch: dict[str, Any]
) -> None:
    path = write(workdir, launch)
    try:
        inv = load_inventory(path, environ={})
    except ConfigError as exc:
        assert re.match(rf"^{re.escape(str(path))}:\d+: ", str(exc)), str(exc)
        assert "Traceback" not in str(exc)
        return
    job = inv.job("j")
    for ckpt in (None, 0, 1234567):
        procs = render_launch(job, job.hosts, ckpt)
        assert len(procs) == 2  # 2 machines of 1 rank: one process each, per rank or per host
        for p in procs:
            assert all(isinstance(a, str) for a in p.argv)
            assert p.env["MASTER_ADDR"] == "127.0.0.2"


@given(launch_sections())
def test_restart_dry_run_exits_from_the_table(workdir: Path, launch: dict[str, Any]) -> None:
    path = write(workdir, launch)
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(
            ["restart", "--job", "j", "-i", str(path), "--state", str(workdir / "s.db"), "--dry-run", "-q"]
        )
    assert code in (0, 64, 78), err.getvalue()
    assert not any(t in err.getvalue() for t in INNER_CATCH_ALLS), err.getvalue()
    assert "Traceback" not in err.getvalue()


# Issue 21, item 2: a format spec is read, never applied, before its numbers are known to be small.
NUMBERS = (
    st.integers(0, 5000).map(str)
    | st.sampled_from(("4096", "4097", "1000000000", "5" + "0" * 9, "9" * 19, "9" * 400, "0" * 50 + "7"))
    | st.builds(lambda d, n: d * n, st.sampled_from(("\u0669", "\u0665", "\uff19", "1")), st.integers(1, 12))
)
FILLS = st.sampled_from(
    ("", " ", "0", "*", "x", "\n", "\t", "é", "\u0669", "<", ">", "=", "^", "%", "{", "}", "!", ":")
)
FORMAT_SPECS = st.builds(
    lambda fill, align, sign, z, alt, zero, width, group, precision, kind: (
        (fill + align if align else "") + sign + z + alt + zero + width + group + precision + kind
    ),
    FILLS,
    st.sampled_from(("", "<", ">", "=", "^")),
    st.sampled_from(("", "+", "-", " ")),
    st.sampled_from(("", "z")),
    st.sampled_from(("", "#")),
    st.sampled_from(("", "0")),
    st.sampled_from(("",)) | NUMBERS,
    st.sampled_from(("", ",", "_")),
    st.sampled_from(("", ".")) | NUMBERS.map(lambda n: "." + n),
    st.sampled_from(("", "d", "s", "x", "f", "e", "%", "n", "c", "b", "o", "g", "q")),
) | st.text(max_size=8)
SPEC_TEMPLATES = st.lists(
    st.builds(
        lambda name, spec, tail: "{" + name + ":" + spec + tail + "}",
        st.sampled_from(tuple(LAUNCH_PLACEHOLDERS)),
        FORMAT_SPECS,
        st.sampled_from(("", "", "", "{rank}", "{", "}")),  # a nested placeholder, a stray brace
    )
    | st.text(max_size=4),
    min_size=1,
    max_size=4,
).map("".join)
"""Templates of one to four placeholders with generated specs: any fill (a brace, a digit, a newline),
widths and precisions from 0 to hundreds of digits (ASCII, ARABIC-INDIC and full-width), any type."""

PEAK_BYTES = 4 << 20
"""Most bytes loading one inventory may hold at once (tracemalloc): a few hundred KiB in practice;
a width formatted before it is checked would take a gigabyte."""


@given(st.lists(SPEC_TEMPLATES, min_size=1, max_size=3), st.sampled_from(("rank", "host")))
def test_any_format_spec_loads_or_fails_with_file_line_in_bounded_memory(
    workdir: Path, command: list[str], per: str
) -> None:
    import tracemalloc

    path = write(workdir, {"command": command, "per": per})
    tracemalloc.start()
    try:
        try:
            inv = load_inventory(path, environ={})
        except ConfigError as exc:
            assert re.match(rf"^{re.escape(str(path))}:\d+: ", str(exc)), str(exc)
            assert "\n" not in str(exc)
            inv = None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BYTES, f"loading held {peak} bytes at once"
    if inv is not None:
        job = inv.job("j")
        for p in render_launch(job, job.hosts, 12):  # accepted: fills, each argument bounded
            assert all(len(a) <= MAX_LAUNCH_TEXT + 100 for a in p.argv), [len(a) for a in p.argv]
