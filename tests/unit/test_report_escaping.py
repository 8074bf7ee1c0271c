"""Text is data, never markup: hostile strings pass through every renderer literally.

Every string that came from a user, a file, a host or the store is escaped by
:func:`robustctl.report.console.escape` (or rendered as :func:`~robustctl.report.console.as_text`)
before rich sees it, so ``[/]`` cannot raise ``MarkupError``, ``[link=...]`` cannot hide its text and
an ``ESC`` from a host cannot reach the terminal.
"""

from __future__ import annotations

import re
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from robustctl.actions.standby import Readiness
from robustctl.cli.main import main
from robustctl.models import CheckResult, HostReport, LevelSummary, Outcome, RunReport, Status
from robustctl.report.console import as_text, escape, printable

HOSTILE = ("[/]", "[bold]x", "[link=file:///etc/passwd]click[/link]", "\x1b[31mred")
"""Each must show literally (the ESC as ``\\x1b``)."""

SHOWN = ("[/]", "[bold]x", "[link=file:///etc/passwd]click[/link]", "\\x1b[31mred")
ALL = " ".join(HOSTILE)


def console() -> tuple[Console, StringIO]:
    buf = StringIO()
    return Console(file=buf, width=200, color_system=None, highlight=False), buf


def assert_literal(text: str) -> None:
    for s in SHOWN:
        assert s in text, (s, text)
    assert "\x1b" not in text


def test_escape_and_as_text_make_markup_and_control_characters_plain() -> None:
    c, buf = console()
    c.print(f"[bold]{escape(ALL)}[/]")
    c.print(as_text(ALL))
    c.print(escape("ends with a backslash \\"))
    out = buf.getvalue()
    assert_literal(out.splitlines()[0])
    assert_literal(out.splitlines()[1])
    assert "tab\tand\nnewline" in as_text("tab\tand\nnewline").plain


def test_diagnose_run_table_and_plan() -> None:
    from robustctl.report.diagnose import print_plan, render_run

    check = CheckResult(
        name=f"gpu {HOSTILE[0]}", level=0, status=Status.CRITICAL, summary=ALL, device=HOSTILE[1]
    )
    hosts = (
        HostReport(
            host=f"h{HOSTILE[1]}",
            address="127.0.0.2",
            status=Status.CRITICAL,
            outcome=Outcome.OK,
            checks=(check,),
        ),
        HostReport(host=HOSTILE[2], address="127.0.0.3", status=Status.OK, outcome=Outcome.OK),
    )
    report = RunReport(
        status=Status.CRITICAL,
        hosts=hosts,
        levels=(LevelSummary(0, "quick", False, reason=ALL),),
        suspects=(HOSTILE[2],),
        unknown=(HOSTILE[3],),
        started_at=0.0,
        finished_at=1.0,
    )
    c, buf = console()
    render_run(report, c, verbose=True)
    assert_literal(buf.getvalue())
    plan = {
        "levels": [{"level": 0, "name": "quick"}, {"level": 1, "name": "x", "skipped": ALL}],
        "hosts": [{"host": ALL, "transport": "ssh", "address": "127.0.0.2", "command": ALL}],
        "all_levels": False,
        "concurrency": 1,
        "host_timeout_s": 1.0,
        "deadline_s": 2.0,
        "notes": [ALL],
    }
    c, buf = console()
    print_plan(plan, c)
    assert_literal(buf.getvalue().replace("\n", ""))


def test_stacks_report_frames_and_hosts() -> None:
    from robustctl.report.stacks import render_stacks
    from robustctl.stacks.model import Frame, ProcessDump, ThreadStack
    from robustctl.stacks.result import analyze_stacks

    def mk(rank: int, fn: str) -> ProcessDump:
        frames = (Frame(fn, "m.py", 1), Frame("<module>", "train.py", 1))
        return ProcessDump((ThreadStack("1", "MainThread", frames),), rank=rank, pid=100 + rank, host=ALL)

    dumps = [mk(r, "all_reduce" if r else ALL) for r in range(4)]
    dumps.append(ProcessDump((), rank=4, error=ALL))
    c, buf = console()
    render_stacks(analyze_stacks(dumps), c, verbose=True)
    assert_literal(buf.getvalue())


def test_analysis_report_file_names_and_findings(tmp_path: Path) -> None:
    from robustctl.analysis.detect import analyze_paths
    from robustctl.report.analysis import render_analysis

    d = tmp_path / "[bold]x [link=file:" / "etc]click[" / "link] ["
    d.mkdir(parents=True)
    f = d / "].log"  # the path reads "[bold]x [link=file:/etc]click[/link] [/].log"
    f.write_text(f"NVRM: Xid (PCI:0000:3b:00): 79, {ALL}\n")
    c, buf = console()
    render_analysis(analyze_paths([f]), c, verbose=True)
    out = buf.getvalue()
    assert "[bold]x [link=file:/etc]click[/link] [/].log" in out.replace("\n", "")
    assert "\x1b" not in out


def test_standby_check_lines() -> None:
    from robustctl.commands.standby import CheckedStandby
    from robustctl.report.actions import render_standby_check

    c, buf = console()
    render_standby_check([CheckedStandby(host=HOSTILE[1], readiness=Readiness.BAD, summary=ALL)], c)
    assert_literal(buf.getvalue())


INVENTORY = """\
gpus_per_host: 2
hosts:
  - name: node[01-04]
    address: 127.0.0.[2-5]
  - name: spare01
    address: 127.0.0.9
    state: standby
    labels: {rack: "[bold]x [/] [link=file:///etc/passwd]click[/link] \\e[31mred"}
policy: {max_cluster_fraction: 1.0, max_job_fraction: 1.0, circuit_breaker_fraction: 0.9}
"""


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY)
    monkeypatch.setenv("ROBUSTCTL_INVENTORY", str(inv))
    monkeypatch.setenv("ROBUSTCTL_STATE", str(tmp_path / "state.db"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "250")
    return inv


def test_stored_reasons_render_literally_in_every_later_command(
    cli: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["evict", "node01", "--reason", ALL, "--yes", "-q"]) == 0
    assert main(["evict", "node02", "--reason", ALL, "--yes"]) == 0  # plan and result rendered
    assert_literal(capsys.readouterr().err)
    assert main(["standby", "add", "spare01", "--reason", ALL, "--yes"]) == 0
    capsys.readouterr()
    for argv in (["audit"], ["standby", "list"], ["hosts"], ["inventory", "show", str(cli)]):
        assert main(argv) == 0, argv
        assert_literal(capsys.readouterr().err.replace("\n", ""))


def test_one_line_errors_show_control_characters_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "dir\x1b[31m"
    state.mkdir()
    assert main(["hosts", "--state", str(state)]) == 78
    err = capsys.readouterr().err
    assert "dir\\x1b[31m" in err and "\x1b" not in err


def test_progress_description_is_data() -> None:
    from robustctl.report.progress import RichProgress

    buf = StringIO()
    c = Console(file=buf, width=200, force_terminal=True, color_system=None)
    p = RichProgress(c)
    p.start("L0 [/] [bold]x", 2)  # a MarkupError here before
    p.advance("h1", Outcome.OK)
    p.stop()
    out = buf.getvalue()  # every frame drawn, the last one erased (a transient bar)
    assert "L0 [/] [bold]x" in out, out  # the description shown as given: escaped, not read as markup
    assert "1/2" in out, out


@pytest.mark.parametrize("width", [200, 100])  # the wide table and the narrow one-line layout
def test_analysis_details_and_evidence_from_files(width: int) -> None:
    from robustctl.analysis import Finding
    from robustctl.analysis.detect import AnalysisReport, ArtefactAnalysis
    from robustctl.report.analysis import render_analysis

    ev = {"xid": ALL, "count": 2, "category": ALL, "action": ALL, "name": ALL, "pci": ALL, "last": ALL}
    kernel = ArtefactAnalysis(
        "k.log", "kernel-log", Status.CRITICAL, ALL, (Finding(Status.CRITICAL, ALL, ev, ALL),), {}
    )
    details = {
        "collective": ALL,
        "collective_source": ALL,
        "rank_count_source": ALL,
        "hosts": [ALL],
        "peak_placement": ALL,
        "error_column": ALL,
        "rows": [{"dtype": ALL, "redop": ALL, "out_of_place": {"busbw_gbps": 1.0, "wrong": 0}}],
    }
    nccl = ArtefactAnalysis("n.log", "nccl-tests", Status.OK, ALL, (Finding(Status.OK, ALL),), details)
    buf = StringIO()
    c = Console(file=buf, width=width, color_system=None, highlight=False)
    render_analysis(AnalysisReport(Status.CRITICAL, (kernel, nccl)), c, verbose=True)
    assert_literal(buf.getvalue().replace("\n", ""))


# --- issue 21, item 9: control and bidi characters from hosts in every output format -------------

RAW = ("\x1b", "\x00", "\u202e", "\r")
"""ESC, NUL, RIGHT-TO-LEFT OVERRIDE and CR: none may reach a terminal, the HTML page or the textfile raw."""

UNPRINTABLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff\ud800-\udfff]"
)
"""C0 (but tab and newline), DEL, C1, zero-width and bidi marks, line/paragraph separators, the bidi
embeddings, overrides and isolates, the BOM, and lone surrogates."""


def hostile_sweep(text: str) -> Any:
    """A sweep whose every string from a host or the store holds ``text`` (host names and check
    names too: the textfile's label values)."""
    from robustctl.commands.sweep import SweepHost, SweepResult
    from robustctl.sweep import history
    from robustctl.sweep.lemons import Evidence, Lemon
    from robustctl.sweep.policy import CheckClass, Decision, Finding

    host, check = f"n1{text}", f"host.xid{text}"
    h = SweepHost(host, Status.CRITICAL, False, 0, {check: "critical", "host.nic": text}, error=text,
                  named=True, pending=(text,))  # fmt: skip
    ch = history.CheckChange(host, check, 1.0, text, "critical", f"XID 79 {text}", text)
    counters = history.HostCounters(host, 3, 2, 0, 1.0, 2.0, "critical")
    lemon = Lemon(host, 3, 0, ("failures",), (Evidence("failure", 1.0, text),))
    decision = Decision(host, (Finding(check, CheckClass.HARDWARE, text, True, text),))
    return SweepResult(0.0, 1.0, (h,), (text,), (decision,), {"suspect": [host], "drained": [], "skipped": [text],
                       "error": text}, (lemon,), {host: (ch,)}, {host: counters}, (text,), "s.db",
                       RunReport(Status.OK, (), (), (), (), 0, 1), ettr=(hostile_job(text),))  # fmt: skip


def hostile_job(text: str) -> Any:
    """A job's ETTR whose job name, incident id, playbook and evicted machines hold ``text`` (and a
    cause that is no cause: drawn as ``c-other``)."""
    from robustctl.commands.ettr import JobEttr, TimelineInterval
    from robustctl.config import SignalClass
    from robustctl.watch.ledger import UNPRODUCTIVE_CAUSES, IncidentRow

    row = IncidentRow(f"i{text}", SignalClass.HANG, f"pb{text}", 10.0, 20.0, 40.0, False, 30.0,
                      (f"m{text}", text), None, tuple((c, 0.0) for c in UNPRODUCTIVE_CAUSES))  # fmt: skip
    intervals = (TimelineInterval("productive", 0.0, 10.0), TimelineInterval(f"x{text}", 10.0, 40.0),
                 TimelineInterval("detection", 40.0, 100.0))  # fmt: skip
    return JobEttr(f"job{text}", 0.7, 0.7, 86_400.0, 70.0, 100.0, {c.value: 10.0 for c in UNPRODUCTIVE_CAUSES},
                   0.0, 100.0, intervals, 0, (row,), 0)  # fmt: skip


def sweep_outputs(result: Any) -> tuple[str, str, str]:
    """(the HTML page, the Prometheus textfile, the terminal) of a sweep result."""
    from robustctl.report.html import sweep_html
    from robustctl.report.prometheus import sweep_textfile
    from robustctl.report.sweep import render_sweep

    c, buf = console()
    render_sweep(result, c)
    return sweep_html(result), sweep_textfile(result), buf.getvalue()


def test_printable_shows_controls_bidi_and_separators_as_escapes() -> None:
    text = "a\x1b[31mb\x00c\rd\u202ee\u200bf\ufeffg\x9bh\x7fi\u2028j\udce9k\U000e0041l\tm\nn é 中 ✓"
    shown = printable(text)
    assert shown == (
        "a\\x1b[31mb\\x00c\\x0dd\\u202ee\\u200bf\\ufeffg\\x9bh\\x7fi\\u2028j\\udce9k\\U000e0041l\tm\nn é 中 ✓"
    )
    assert printable("tab\tnew\nline", newlines=False) == "tab\\x09new\\x0aline"
    assert printable(None) == "None" and printable("plain [ascii] \\") == "plain [ascii] \\"


def test_control_and_bidi_characters_from_a_host_reach_no_output_raw() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    page, textfile, terminal = sweep_outputs(hostile_sweep("".join(RAW) + "x\u2066y\u2069"))
    for name, out in (("html", page), ("textfile", textfile), ("terminal", terminal)):
        for ch in RAW:
            assert ch not in out, (name, ch)
        assert not UNPRINTABLE.search(out), (name, UNPRINTABLE.search(out))
    assert "\\x1b\\x00\\u202e\\x0dx\\u2066y\\u2069" in page  # shown, not dropped
    assert "\\x1b\\x00\\u202e\\x0dx" in terminal
    families = {f.name: f for f in text_string_to_metric_families(textfile)}
    (sample,) = families["robustctl_host_named"].samples
    assert sample.labels["host"] == "n1\\x1b\\x00\\u202e\\x0dx\\u2066y\\u2069"  # read back as shown


def test_a_jobs_timeline_shows_hostile_names_as_text() -> None:
    """Markup, quotes, control and bidi characters in a job name, an incident id, a playbook, an
    evicted machine or a cause reach the jobs section escaped: no element, no attribute broken out
    of, no raw control or bidi character, and no class made of them."""
    from robustctl.report.html import sweep_html

    evil = '<script>alert("x")</script>\'" onmouseover="y\x1b\u202e'
    page = sweep_html(hostile_sweep(evil))
    jobs = page[page.index("<h2>Jobs</h2>") :]
    assert (
        "<script" not in jobs and 'onmouseover="' not in jobs and "\x1b" not in jobs and "\u202e" not in jobs
    )
    shown = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&#x27;&quot; onmouseover=&quot;y\\x1b\\u202e"
    assert f'<div class="timeline" data-job="job{shown}">' in jobs
    assert f'<section class="job" data-job="job{shown}"><h3>job{shown}</h3>' in jobs
    assert f"<td>i{shown}</td><td>hang</td><td>pb{shown}</td><td>30.0</td><td>m{shown}, {shown}</td>" in jobs
    assert '<span class="seg c-other" style="width:30.000%"' in jobs  # an unknown cause: no class of its text
    assert f'title="x{shown} 1970-01-01 00:00:10 UTC – 1970-01-01 00:00:40 UTC (30.0 s)"' in jobs


def test_history_terminal_shows_a_stored_detail_escaped() -> None:
    from robustctl.commands.history import HistoryResult
    from robustctl.report.sweep import render_history
    from robustctl.sweep import history

    text = "".join(RAW)
    state = history.CheckState("n1", "host.xid", "critical", 1.0, 2.0, 1, text, ())
    change = history.CheckChange("n1", "host.xid", 1.0, None, "critical", text, "sweep")
    counters = history.HostCounters("n1", 1, 1, 0, 1.0, 2.0, "critical")
    c, buf = console()
    render_history(HistoryResult("n1", 0.0, counters, (state,), (change,), "s.db"), c)
    out = buf.getvalue()
    assert not any(ch in out for ch in RAW) and "\\x1b\\x00\\u202e\\x0d" in out
