"""diagnostics/allreduce.py: intra-host gloo ranks, a cross-host pair on two loopback addresses,
timeouts instead of hangs, and the nccl-tests mode."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from robustctl.checks.allreduce import evaluate_busbw, peak_busbw
from robustctl.models import Status
from robustctl.probes import load_probe, probe_script
from robustctl.thresholds import Thresholds

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "diagnostics" / "allreduce.py"
NCCL_SAMPLE = REPO / "tests" / "data" / "nccl-tests" / "bitdeer-h100-8gpu-1node-allreduce.txt"


allreduce = load_probe("allreduce")


def free_port(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


def start(*args: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdin is not None
    proc.stdin.write(probe_script("allreduce"))
    proc.stdin.close()
    return proc


def finish(proc: subprocess.Popen[bytes], timeout: float = 120) -> dict[str, Any]:
    assert proc.stdout is not None and proc.stderr is not None
    proc.wait(timeout)
    with proc.stdout, proc.stderr:  # closed after reading: no ResourceWarning
        out = proc.stdout.read().decode()
        err = proc.stderr.read().decode()
    assert proc.returncode == 0, err[-2000:]
    lines = out.strip().splitlines()
    assert len(lines) == 1, lines
    doc = json.loads(lines[0])
    assert doc["probe"] == "allreduce"
    return doc


def check_results(data: dict[str, Any], world: int, sizes: list[int]) -> None:
    assert [r["size_bytes"] for r in data["results"]] == sizes
    for r in data["results"]:
        assert r["correct"] is True and r["wrong_elements"] == 0 and r["count"] == r["size_bytes"] // 4
        assert r["algbw_gbps"] == pytest.approx(r["size_bytes"] / r["time_s"] / 1e9, rel=1e-3)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 * (world - 1) / world, rel=1e-6, abs=2e-6)
    assert data["correct"] is True and data["error"] is None


def test_busbw_factor_is_nccl_tests_definition() -> None:
    assert allreduce.busbw_factor(2) == 1.0
    assert allreduce.busbw_factor(8) == 1.75
    assert allreduce.busbw_factor(1) == 0.0


@pytest.mark.external  # a torch process
def test_intra_host_gloo_ranks() -> None:
    pytest.importorskip("torch")
    doc = finish(start("--nproc", "3", "--sizes", "64K,1M", "--iters", "2", "--timeout", "60"))
    data = doc["data"]
    assert data["mode"] == "intra" and data["backend"] == "gloo" and data["device"] == "cpu"
    assert data["world_size"] == 3 and data["master_addr"] == "127.0.0.1" and data["master_port"] > 0
    check_results(data, 3, [64 << 10, 1 << 20])
    (ok,) = evaluate_busbw(data, Thresholds())
    assert ok.status is Status.OK and ok.evidence["peak_busbw_gbps"] == peak_busbw(data) > 0


@pytest.mark.external  # a torch process
def test_cross_host_pair_on_two_loopback_addresses() -> None:
    """Rank 0 on 127.0.0.2 and rank 1 on 127.0.0.3, as two separate probe processes (L3)."""
    pytest.importorskip("torch")
    port = free_port("127.0.0.2")
    common = ["--world-size", "2", "--master-addr", "127.0.0.2", "--master-port", str(port)]
    common += ["--sizes", "1M", "--iters", "2", "--timeout", "60"]
    r0 = start("--rank", "0", "--bind-addr", "127.0.0.2", *common)
    r1 = start("--rank", "1", "--bind-addr", "127.0.0.3", *common)
    d0, d1 = finish(r0)["data"], finish(r1)["data"]
    assert (d0["mode"], d0["rank"], d0["bind_addr"]) == ("rank", 0, "127.0.0.2")
    assert (d1["mode"], d1["rank"], d1["bind_addr"]) == ("rank", 1, "127.0.0.3")
    check_results(d0, 2, [1 << 20])
    check_results(d1, 2, [1 << 20])
    assert d0["results"][0]["time_s"] == d1["results"][0]["time_s"]  # the slowest rank's time, on both


@pytest.mark.external  # a torch process
def test_missing_peer_ends_with_an_error_not_a_hang() -> None:
    pytest.importorskip("torch")
    port = free_port("127.0.0.2")
    base = {
        "backend": "gloo",
        "world": 2,
        "master_addr": "127.0.0.2",
        "master_port": port,
        "sizes": [1024],
        "iters": 1,
        "warmup": 0,
        "threads": 1,
        "gpu": 0,
        "rdzv_timeout": 1.0,
        "op_timeout": 1.0,
    }
    t = time.monotonic()
    alone_rank1 = allreduce.run_rank({**base, "rank": 1, "bind_addr": "127.0.0.3"}, 1)
    assert alone_rank1["results"] == [] and alone_rank1["error"].startswith("rendezvous with 127.0.0.2:")
    sock = allreduce.listening_socket("127.0.0.2", port)
    alone_rank0 = allreduce.run_rank({**base, "rank": 0, "bind_addr": "127.0.0.2"}, 0, sock.detach())
    assert alone_rank0["error"].startswith("process group set-up failed")
    assert time.monotonic() - t < 30


@pytest.mark.external  # a torch process
@pytest.mark.slow
def test_missing_peer_document_within_the_budget() -> None:
    pytest.importorskip("torch")
    port = free_port("127.0.0.2")
    t = time.monotonic()
    doc = finish(start("--rank", "1", "--world-size", "2", "--master-addr", "127.0.0.2",
                       "--master-port", str(port), "--timeout", "5"))  # fmt: skip
    assert time.monotonic() - t < 20
    data = doc["data"]
    # the budget can run out while torch is still importing: then nothing but the error is known
    assert data["error"] and data.get("correct") is None and data.get("results", []) == []
    (r,) = evaluate_busbw(data, Thresholds())
    assert r.status is Status.UNKNOWN and ("failed" in r.summary or "not run: timeout" in r.summary)


def test_nccl_tests_binary_missing(tmp_path: Path) -> None:
    doc = finish(start("--nccl-tests", "--nccl-tests-bin", str(tmp_path / "nope")))
    data = doc["data"]
    assert data["available"] is False and data["reason_code"] == "nccl_tests_missing"
    assert evaluate_busbw(data, Thresholds())[0].status is Status.NOT_APPLICABLE


def test_nccl_tests_output_is_returned_raw(tmp_path: Path) -> None:
    fake = tmp_path / "all_reduce_perf"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "# args: $*" >&2\n'
        f"cat {NCCL_SAMPLE}\n"
    )  # fmt: skip
    fake.chmod(0o755)
    doc = finish(
        start(
            "--nccl-tests",
            "--nccl-tests-bin",
            str(fake),
            "--nproc",
            "8",
            "--sizes",
            "256M,2G",
            "--iters",
            "20",
        )
    )
    data = doc["data"]
    assert data["mode"] == "nccl-tests" and data["returncode"] == 0 and data["error"] is None
    assert data["argv"][1:] == ["-b", str(256 << 20), "-e", str(2 << 30), "-f", "2", "-g", "8",
                                "-n", "20", "-w", "1", "-c", "1"]  # fmt: skip
    assert data["stdout"] == NCCL_SAMPLE.read_text()
    assert "# args: -b" in data["stderr_tail"]
    (r,) = evaluate_busbw(data, Thresholds())
    assert r.status is Status.OK and peak_busbw(data) == pytest.approx(470.73)
    (low,) = evaluate_busbw(data, Thresholds(allreduce_min_busbw_gbps=600))
    assert low.status is Status.CRITICAL


@pytest.mark.parametrize(
    "args",
    [
        ["--rank", "0"],
        ["--rank", "2", "--world-size", "2", "--master-port", "1"],
        ["--rank", "0", "--world-size", "2"],
    ],
)
def test_bad_arguments(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, timeout=30)
    assert proc.returncode == 2 and proc.stdout == b""


@pytest.mark.gpu
def test_intra_host_nccl_over_local_gpus() -> None:
    doc = finish(start("--sizes", "1M,64M", "--iters", "5", "--timeout", "120"))
    data = doc["data"]
    assert data["backend"] == "nccl" and data["device"] == "cuda"
    if data["world_size"] < 2:
        pytest.skip("one GPU: no intra-host all-reduce")
    check_results(data, data["world_size"], [1 << 20, 64 << 20])
