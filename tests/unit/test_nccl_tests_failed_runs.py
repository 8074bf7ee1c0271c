"""nccl-tests runs that failed (with or without a table): the real failed runs of
tests/data/nccl-tests/INDEX.md ("Failed runs") judged as their threads judged them, the error-line
classes, hosts, pids and devices, and the bounds on what is kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from robustctl.analysis import nccl_tests
from robustctl.analysis.detect import analyze_text
from robustctl.analysis.nccl_tests import (
    ERROR_CLASSES,
    MAX_ERROR_LINE_CHARS,
    error_class,
    evaluate,
    looks_like_nccl_tests,
    parse_nccl_tests,
)
from robustctl.models import Status

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl-tests"


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_nccltests264_cuda_system_not_initialized_names_the_host() -> None:
    """Fabric manager not running: CUDA's 'system not yet initialized' on host `test`."""
    a = analyze_text(load("issue-nccltests264-h100-8gpu-cuda-system-not-initialized.txt"))
    assert (a.kind, a.status) == ("nccl-tests", Status.CRITICAL)
    r = parse_nccl_tests(load("issue-nccltests264-h100-8gpu-cuda-system-not-initialized.txt"))
    assert r.error_class == "cuda-device" and r.failed and r.rows == ()
    assert [(h.host, h.pids) for h in r.error_hosts] == [("test", (54340,))]
    assert "on test (pid 54340)" in a.summary and "CUDA device state" in a.summary
    finding = a.findings[0]
    assert "fabric manager" in finding.message and "'system not yet initialized'" in finding.message
    assert finding.evidence["error_class"] == "cuda-device"


def test_nccltests252_ib_completion_error_is_ib_on_kolyoz2() -> None:
    """No header at all: recognised by nccl-tests' failure lines; the NET/IB WARN decides the class
    over the 'remote process exited or there was a network error' lines."""
    text = load("issue-nccltests252-h100-2node-ib-completion-error.txt")
    assert looks_like_nccl_tests(text)
    r = parse_nccl_tests(text)
    assert r.error_class == "ib-transport"
    assert r.error_counts == {"ib-transport": 1, "other": 3}
    (kolyoz2,) = r.error_hosts
    assert kolyoz2.host == "kolyoz2" and kolyoz2.pids == (25146, 25172, 25169) and kolyoz2.devices == (0,)
    assert kolyoz2.classes == ("ib-transport", "other")
    v = evaluate(r)
    assert v.status is Status.CRITICAL
    assert "IB/RoCE transport" in v.summary and "kolyoz2" in v.summary
    assert "vendor err 81" in v.findings[0].message and "GPU Direct RDMA" in v.findings[0].message
    kinds = [e["kind"] for e in v.findings[0].evidence["error_lines"]]
    assert kinds == ["warn", "test-failure", "test-failure", "test-failure"]


def test_nccltests14_socket_warn_wins_over_the_libibverbs_warn() -> None:
    """Old format (no '#', 'NCCL failure common.cu:874'); the libibverbs WARN is no IB failure (the
    maintainer: "to be ignored"); the socket WARN is the cause."""
    text = load("issue-nccltests14-docker-8gpu-socket-no-interface.txt")
    a = analyze_text(text)
    assert (a.kind, a.status) == ("nccl-tests", Status.CRITICAL)
    r = parse_nccl_tests(text)
    assert r.error_class == "socket-bootstrap"
    assert r.error_counts == {"other": 2, "socket-bootstrap": 1}
    assert [(h.host, h.pids, h.devices) for h in r.error_hosts] == [("e66aa18dc444", (3171,), (0,))]
    assert r.header["nGpus"] == "8"
    assert "NCCL_SOCKET_IFNAME" in a.findings[0].message and "Socket creation failed" in a.findings[0].message


def test_nccltests5_unhandled_cuda_error_is_other_and_names_the_rank_host() -> None:
    """NCCL 1.0 too old: 'unhandled cuda error' is no device state; the rank lines name node03."""
    text = load("issue-nccltests5-p100-8gpu-nccl1-unhandled-cuda.txt")
    a = analyze_text(text)
    assert (a.kind, a.status) == ("nccl-tests", Status.CRITICAL)
    r = parse_nccl_tests(text)
    assert r.error_class == "other" and r.hosts == ("node03",) and r.error_hosts == ()
    assert r.failures == ("NCCL failure all_reduce.cu:95 'unhandled cuda error'",)
    assert "on node03" in a.summary and "(other)" in a.summary


def test_failed_run_exits_2_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    from robustctl.cli.main import main

    code = main(["analyze", str(DATA / "issue-nccltests252-h100-2node-ib-completion-error.txt")])
    assert code == 2
    out = capsys.readouterr()
    assert "IB/RoCE transport" in out.out + out.err


@pytest.mark.parametrize(
    ("message", "cls"),
    [
        ("transport/nvls.cc:254 NCCL WARN Cuda failure 1 'invalid argument'", "nvls"),
        ("transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer with error 4", "ib-transport"),
        (
            "misc/ibvwrap.cc:187 NCCL WARN Call to ibv_modify_qp failed with error Network is unreachable",
            "ib-transport",
        ),
        ("NCCL WARN NET/IB : Got completion with error IBV_WC_RETRY_EXC_ERR", "ib-transport"),
        ("init.cc:1 NCCL WARN Cuda failure 'no CUDA-capable device is detected'", "cuda-device"),
        ("init.cc:263 NCCL WARN Cuda failure 'cudaErrorDevicesUnavailable'", "cuda-device"),
        ("NCCL WARN Cuda failure 'uncorrectable ECC error encountered'", "cuda-device"),
        ("misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer", "socket-bootstrap"),
        ("bootstrap.cc:37 NCCL WARN Bootstrap : no socket interface found", "socket-bootstrap"),
        ("NCCL WARN NCCL_SOCKET_IFNAME set to eth9 but no interface matched", "socket-bootstrap"),
        ("misc/ibvwrap.cu:61 WARN Failed to open libibverbs.so[.1]", "other"),
        ("transport/net_ib.cc:62 NCCL WARN NET/IB : No device found.", "other"),
        (
            "net.cc:1 NCCL WARN NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
            "other",
        ),
        ("enqueue.cc:47 NCCL WARN Cuda failure 'named symbol not found'", "other"),
    ],
)
def test_each_line_class(message: str, cls: str) -> None:
    r = parse_nccl_tests(f"node7:100:101 [3] {message}")
    assert [e.error_class for e in r.errors] == [cls]
    assert (r.errors[0].host, r.errors[0].pid, r.errors[0].device) == ("node7", 100, 3)


def test_run_class_precedence() -> None:
    assert error_class({"socket-bootstrap": 9, "ib-transport": 1}) == "ib-transport"
    assert error_class({"nvls": 1, "cuda-device": 1, "other": 5}) == "cuda-device"
    assert error_class({"other": 2}) == "other" and error_class({}) is None
    assert list(ERROR_CLASSES) == ["cuda-device", "nvls", "ib-transport", "socket-bootstrap", "other"]


def test_fatal_communicator_line_fails_a_run_with_a_table() -> None:
    """Error lines after a complete table are findings: a communicator's fatal error makes it CRITICAL,
    a WARN naming a transport beside a complete table a WARNING, a benign WARN an OK finding; the
    table's figures are kept."""
    table = load("bitdeer-h100-8gpu-1node-allreduce.txt")
    fatal = "node1:55:66 [2] NCCL INFO comm 0x1 rank 2 nranks 8 - communicator encountered a fatal error"
    v = evaluate(parse_nccl_tests(table + "\n" + fatal + "\n"))
    assert v.status is Status.CRITICAL and v.details["peak_busbw_gbps"] == pytest.approx(470.73)
    assert any(
        f.message.startswith("the run failed") and "node1 (pid 55; GPU 2)" in f.message for f in v.findings
    )
    warn = "host:1:2 [0] transport/net_ib.cc:99 NCCL WARN NET/IB : port down"
    v = evaluate(parse_nccl_tests(table + "\n" + warn + "\n"))
    assert v.status is Status.WARNING and "NCCL warned" in v.summary
    benign = "host:1:2 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]"
    v = evaluate(parse_nccl_tests(table + "\n" + benign + "\n"))
    assert v.status is Status.OK and any("Failed to open libibverbs" in f.message for f in v.findings)
    no_ib = "host:1:2 [0] transport/net_ib.cc:62 NCCL WARN NET/IB : No device found."
    assert evaluate(parse_nccl_tests(table + "\n" + no_ib + "\n")).status is Status.OK  # sockets carry on
    assert evaluate(parse_nccl_tests(table)).status is Status.OK


def test_warn_lines_alone_are_not_nccl_tests() -> None:
    """Any NCCL application prints WARN lines: without an nccl-tests line the text is not this kind."""
    text = "node1:55:66 [2] transport/nvls.cc:254 NCCL WARN Cuda failure 1 'invalid argument'\n"
    assert not looks_like_nccl_tests(text)
    assert looks_like_nccl_tests(text + "node1: Test NCCL failure common.cu:1097 'unhandled cuda error'\n")


def test_error_lines_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nccl_tests, "MAX_ERROR_LINES", 3)
    monkeypatch.setattr(nccl_tests, "MAX_ERROR_HOSTS", 2)
    lines = [
        f"h{i}:{i}:1 [0] misc/socket.cc:50 NCCL WARN socketProgress: closed " + "x" * 1000 for i in range(10)
    ]
    lines.append("h99:9:9 [1] transport/net_ib.cc:1 NCCL WARN NET/IB : error")  # a class first seen late
    r = parse_nccl_tests("\n".join(lines))
    assert len(r.errors) == 4 and r.errors_dropped == 7
    assert r.errors[-1].error_class == "ib-transport" and r.error_class == "ib-transport"
    assert all(len(e.text) == MAX_ERROR_LINE_CHARS for e in r.errors[:3])
    assert [h.host for h in r.error_hosts] == ["h0", "h1"]
    assert r.error_counts == {"socket-bootstrap": 10, "ib-transport": 1}


def test_failure_host_survives_a_host_label_prefix() -> None:
    """A pdsh-style `host:` label before nccl-tests' own `HOST: Test NCCL failure` keeps the latter."""
    r = parse_nccl_tests(
        "(pid=7, ip=127.0.0.3) node2: node2: Test NCCL failure common.cu:1005 'internal error'"
    )
    assert r.failures == ("node2: Test NCCL failure common.cu:1005 'internal error'",)
    assert [h.host for h in r.error_hosts] == ["node2"]


def test_nccl1705_nvls_warns_behind_timestamps_name_the_gpus() -> None:
    """NCCL WARN lines only (the paste stops before nccl-tests' failure line): not nccl-tests output on
    its own, but read as nccl-tests output the NVLS class and the GPUs of bm-h100-02 come out."""
    text = load("issue-nccl1705-h100-nvls-invalid-argument.txt")
    assert not looks_like_nccl_tests(text)
    r = parse_nccl_tests(text)
    assert r.error_class == "nvls" and r.error_counts == {"nvls": 4}
    (host,) = r.error_hosts
    assert (host.host, host.pids, host.devices) == ("bm-h100-02", (630335,), (2, 1, 6, 5))
    v = evaluate(r)
    assert v.status is Status.CRITICAL and "NVLS/NVSwitch" in v.summary
    assert "NCCL_NVLS_ENABLE=0" in v.findings[0].message
    with_failure = text + "bm-h100-02: Test NCCL failure common.cu:1097 'unhandled cuda error'\n"
    a = analyze_text(with_failure)
    assert (a.kind, a.status) == ("nccl-tests", Status.CRITICAL) and "NVLS/NVSwitch" in a.summary


def test_memory_is_bounded_on_endless_error_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """5,000 WARN lines, each from a new host and 2,000 characters long, read as a stream: what is kept
    stops at the caps (50 lines, each cut; the host cap, lowered here to 500), so the peak stays far
    below the 10 MB the lines take."""
    import tracemalloc

    monkeypatch.setattr(nccl_tests, "MAX_ERROR_HOSTS", 500)

    def lines() -> object:
        for i in range(5_000):
            yield f"gpu{i:05d}:{i}:{i} [{i % 8}] transport/net_ib.cc:1 NCCL WARN NET/IB : error " + "z" * 2000

    tracemalloc.start()
    try:
        r = parse_nccl_tests(lines())  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(r.errors) == nccl_tests.MAX_ERROR_LINES and r.errors_dropped == 5_000 - len(r.errors)
    assert len(r.error_hosts) == 500 and r.error_counts == {"ib-transport": 5_000}
    assert peak < 2 * 1024 * 1024, peak
