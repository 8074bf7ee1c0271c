"""``robustctl analyze`` with bad or huge input: flat memory, special files, corrupt gzip, layout caps."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from robustctl.analysis import nccl_tests
from robustctl.analysis.detect import MAX_LINE_BYTES, UNKNOWN_KIND, analyze_file, analyze_paths
from robustctl.cli.main import main
from robustctl.errors import UsageError
from robustctl.exit_codes import ExitCode
from robustctl.inventory.topology import MAX_WORLD_SIZE, parse_layout
from robustctl.models import Status

DATA = Path(__file__).resolve().parents[1] / "data"
REPO = Path(__file__).resolve().parents[2]
XID_LINES = DATA / "kernel-log" / "xid-lines.txt"

# A generator of large logs, run in the child so the test process itself never holds them.
_GEN = textwrap.dedent(
    """
    import sys
    kind, size, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open(out, "w") as f:
        n = i = 0
        if kind == "dcgm-diag":
            hdr = "| Diagnostic                | Result                                         |\\n"
            f.write(hdr)
            n = len(hdr)
        if kind == "nccl-tests":
            hdr = ("# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor)\\n"
                   "#       size         count      type   redop    root     time   algbw   busbw "
                   "#wrong     time   algbw   busbw #wrong\\n")
            f.write(hdr)
            n = len(hdr)
        while n < size:
            if kind == "dcgm-diag":
                ln = ("| Memory                    | Fail - GPU: 0                                  |\\n"
                      if i % 1000 == 0 else
                      f"| {'Warning' if i % 100 == 0 else ''}   | GPU {i % 8} row remap pending, line {i} |\\n")
            elif kind == "kernel-log":
                if i % 10 == 0:
                    ln = f"[{i}.000001] NVRM: Xid (PCI:0000:{i % 256:02x}:00): 79, pid={i}, name=python3\\n"
                else:
                    ln = f"[{i}.000002] kernel: eth0: link up, 100Gbps, full-duplex, lpa {i}\\n"
            else:
                ln = (f"{8 << (i % 31):>12} {2 << (i % 31):>12}     float     sum      -1    36.02"
                      f"  {i % 97}.00  {i % 89}.00      0    35.71   1.00   1.00      0\\n")
            f.write(ln)
            n += len(ln)
            i += 1
        if kind == "nccl-tests":
            f.write("# Out of bounds values : 0 OK\\n# Avg bus bandwidth    : 101.2\\n")
    """
)

# Analyse in a child and report its peak RSS (Linux: ru_maxrss in KiB).
_MEASURE = textwrap.dedent(
    """
    import json, resource, subprocess, sys, time
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "robustctl", "analyze", sys.argv[1], "--json"],
                       capture_output=True, text=True)
    rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    doc = json.loads(p.stdout)
    print(json.dumps({"rc": p.returncode, "rss_mib": rss_kib / 1024, "s": time.monotonic() - t0,
                      "kind": doc["artefacts"][0]["kind"], "summary": doc["artefacts"][0]["summary"]}))
    """
)


def _measure(tmp_path: Path, kind: str, size: int) -> dict[str, object]:
    log = tmp_path / f"big-{kind}.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", _GEN, kind, str(size), str(log)], check=True, env=env)
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(log)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss units and /proc are Linux's")
@pytest.mark.parametrize(("kind", "size_mib"), [("kernel-log", 64), ("nccl-tests", 16), ("dcgm-diag", 12)])
def test_memory_stays_flat_on_a_large_log(tmp_path: Path, kind: str, size_mib: int) -> None:
    """Reading whole files made a 200 MB nccl-tests log take 9.6 GB RSS; streaming keeps it flat.

    The bound (300 MiB) is far below the file's size in Python objects (several times the file)."""
    got = _measure(tmp_path, kind, size_mib * 1024 * 1024)
    assert got["kind"] == kind
    assert got["rc"] in (0, 1, 2)
    assert isinstance(got["rss_mib"], float) and got["rss_mib"] < 300, got
    assert isinstance(got["s"], float) and got["s"] < 120, got


def test_nccl_rows_beyond_the_cap_are_counted_not_kept() -> None:
    row = "     1048576        262144     float     sum      -1    36.02   29.11   50.94      0    35.71   29.36   51.38      0"
    wrong = "     1048576        262144     float     sum      -1    36.02   29.11   50.94      7    35.71   29.36   51.38      0"
    faster = "     1048576        262144     float     sum      -1    36.02   29.11   90.50      0    35.71   29.36   51.38      0"
    lines = iter([row] * (nccl_tests.MAX_ROWS + 5) + [wrong, faster, row])
    result = nccl_tests.parse_nccl_tests(lines)
    assert len(result.rows) == nccl_tests.MAX_ROWS + 2  # the wrong row and the new peak are kept
    assert result.rows_dropped == 6
    verdict = nccl_tests.evaluate(result)
    assert verdict.status is Status.CRITICAL  # the wrong values past the cap are still judged
    assert verdict.details["peak_busbw_gbps"] == 90.5
    assert "6 more unremarkable rows not kept" in verdict.summary


def test_streamed_kernel_log_counts_every_event(tmp_path: Path) -> None:
    line = "[  1.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=7, name=python3, GPU has fallen off the bus.\n"
    log = tmp_path / "k.log"
    log.write_text(line * 5000 + "x" * (3 * MAX_LINE_BYTES) + "\n" + line)
    a = analyze_file(log)
    assert a.kind == "kernel-log"
    assert a.details["event_count"] == 5001
    assert a.details["lines"] == 5002
    assert len(a.details["events"]) == 1000 and a.details["events_truncated"]
    (f,) = a.findings
    assert f.evidence["count"] == 5001


def _mkfifo(tmp_path: Path) -> Path:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    return fifo


def test_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = _mkfifo(tmp_path)
    t0 = time.monotonic()
    report = analyze_paths([fifo, XID_LINES])
    assert time.monotonic() - t0 < 10
    first, second = report.artefacts
    assert first.kind == UNKNOWN_KIND and first.status is Status.UNKNOWN
    assert str(fifo) in first.summary and "FIFO" in first.summary
    assert second.kind == "kernel-log" and second.status is Status.CRITICAL


def test_fifo_with_layout_and_pyspy_detection_does_not_hang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = _mkfifo(tmp_path)
    code = main(["analyze", str(fifo), "--layout", "tp=2", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == ExitCode.UNKNOWN
    assert "not a regular file" in json.dumps(doc)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_character_device_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["analyze", "/dev/zero", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == ExitCode.UNKNOWN
    (a,) = doc["artefacts"]
    assert a["kind"] == UNKNOWN_KIND and "character device" in a["summary"]


def test_corrupt_gzip_is_one_unreadable_entry_and_others_are_analysed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad_header = tmp_path / "bad-header.gz"
    bad_header.write_bytes(b"\x1f\x8b\x08\x00garbage-garbage-garbage")
    truncated = tmp_path / "truncated.gz"
    body = gzip.compress(XID_LINES.read_bytes() * 2000)
    truncated.write_bytes(body[: len(body) // 2])
    ok = tmp_path / "ok.log"
    ok.write_text(
        "[ 1.0] kernel: eth0: link up\n[ 2.0] kernel: eth1: link up\n[ 3.0] kernel: eth2: link up\n"
    )
    code = main(["analyze", str(bad_header), str(truncated), str(ok), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == ExitCode.UNKNOWN  # only because the two gzip files could not be read
    a, b, c = doc["artefacts"]
    assert a["status"] == "unknown" and "could not read" in a["summary"] and str(bad_header) in a["summary"]
    assert b["status"] == "unknown" and "could not read" in b["summary"] and str(truncated) in b["summary"]
    assert c["kind"] == "kernel-log" and c["status"] == "ok"


@pytest.mark.parametrize(
    "value", ["tp=99999999999999999999", f"tp={MAX_WORLD_SIZE + 1}", "tp=1000,pp=1001", "tp=1" + "0" * 5000]
)
def test_layout_sizes_are_capped(value: str) -> None:
    with pytest.raises(UsageError, match="largest world size"):
        parse_layout(value)


def test_layout_non_ascii_digits_are_a_usage_error() -> None:
    with pytest.raises(UsageError, match="positive integer"):
        parse_layout("tp=\u00b2")


def test_layout_at_the_cap_is_accepted() -> None:
    assert parse_layout(f"tp={MAX_WORLD_SIZE}").world_size == MAX_WORLD_SIZE


def test_huge_layout_on_the_command_line_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["analyze", str(XID_LINES), "--layout", "tp=99999999999999999999"])
    assert code == ExitCode.USAGE
    assert "largest world size" in capsys.readouterr().err


GLOO = DATA / "pyspy" / "captured-gloo-4ranks"


def test_kernel_log_with_layout_is_not_read_as_a_dump(capsys: pytest.CaptureFixture[str]) -> None:
    """``--layout`` with a kernel log read its lines as a py-spy process; now the file is an UNKNOWN
    input naming what it is, and no class or process comes from it."""
    code = main(["analyze", str(XID_LINES), "--layout", "tp=2", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == ExitCode.UNKNOWN
    (inp,) = doc["inputs"]
    assert inp["status"] == "unknown"
    assert "not a py-spy dump" in inp["error"] and "kernel-log" in inp["error"]
    assert doc["classes"] == []


@pytest.mark.parametrize(
    "args",
    [
        ["-G", "3"],  # 4 ranks (0-3) from the dumps
        ["--layout", "tp=2,dp=4", "-G", "3"],
    ],
)
def test_ranks_per_host_must_divide_the_ranks(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    dumps = [str(p) for p in sorted(GLOO.glob("rank*.dump"))]
    code = main(["analyze", *dumps, *args])
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE
    assert "--ranks-per-host 3 does not divide" in err
    assert "Traceback" not in err


def test_ranks_per_host_that_divides_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    """The 4 captured ranks: rank 1 in a recv, rank 3 computing while the others wait (SOURCE.md)."""
    dumps = [str(p) for p in sorted(GLOO.glob("rank*.dump"))]
    assert main(["analyze", *dumps, "-G", "2", "--json"]) == ExitCode.CRITICAL
    doc = json.loads(capsys.readouterr().out)
    assert (doc["kind"], doc["exit_code"], doc["status"]) == ("stacks", 2, "critical")
    assert [i["status"] for i in doc["inputs"]] == ["ok"] * 4 and doc["readable"] == 4
    assert doc["suspect_ranks"] == [1, 3] and doc["likely_culprits"] == [3]
    # With a layout, the 2 ranks per host place rank 3 on the second machine (ranks 2-3).
    assert main(["analyze", *dumps, "--layout", "dp=4", "-G", "2", "--json"]) == ExitCode.CRITICAL
    doc = json.loads(capsys.readouterr().out)
    assert (doc["world_size"], doc["ranks_per_host"]) == (4, 2)
    assert doc["suspect_ranks"] == [3] and doc["suspect_hosts"] == ["machine-1"]
