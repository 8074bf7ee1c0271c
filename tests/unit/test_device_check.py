"""scripts/device-check.sh and scripts/device-wheels.sh on a machine without a GPU (issue 25).

The device check runs its GPU steps only where a GPU answers: here every one of them must say
"skipped: no GPU found" in the summary, and the script must exit 0 having written it. The wheel set's
closure check (``device-wheels.sh --check``) runs on synthetic wheels made here: no network.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHECK = REPO / "scripts" / "device-check.sh"
WHEELS = REPO / "scripts" / "device-wheels.sh"
GPU_STEPS = ("pytest", "diagnose", "nvml", "replay")
MAX_OUT_FILES = 8  # what the device call brings back


def run_check(out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The device check with this interpreter, its output folder ``out``, and ``env`` laid over."""
    full = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": "", **env}
    return subprocess.run(["bash", str(CHECK)], capture_output=True, text=True, timeout=120, env=full)


def summary_lines(out: Path) -> dict[str, str]:
    """The summary's step lines by step name, and its last line under ``"end"``."""
    lines = (out / "summary.txt").read_text().splitlines()
    steps = {line.split()[0]: line for line in lines[:-1]}
    return {**steps, "end": lines[-1]}


def assert_gpu_steps_skipped(out: Path) -> dict[str, str]:
    lines = summary_lines(out)
    assert list(lines) == ["setup", *GPU_STEPS, "end"], lines
    for step in GPU_STEPS:
        assert lines[step].endswith("skipped: no GPU found"), lines[step]
    assert lines["end"].startswith("no GPU found ("), lines["end"]
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= MAX_OUT_FILES
    assert {"summary.txt", "env.txt", "logs.tar.gz"} <= set(files), files
    assert not {"gpu-junit.xml", "diagnose.json", "replay.json"} & set(files), files
    return lines


def test_without_a_gpu_every_gpu_step_says_skipped_and_the_script_exits_0(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_check(out, DEVICE_CHECK_SKIP_INSTALL="1", DEVICE_CHECK_NO_GPU="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = assert_gpu_steps_skipped(out)
    assert "DEVICE_CHECK_NO_GPU=1" in lines["end"]
    for step in GPU_STEPS:
        assert f"{step}: skipped: no GPU found" in proc.stdout
    env = (out / "env.txt").read_text()
    assert "python: " in env and "torch: " in env
    with tarfile.open(out / "logs.tar.gz") as tar:
        assert tar.getnames() == ["logs"]  # no step ran, so no step log


def test_a_gpu_listed_by_nvidia_smi_but_not_by_torch_is_no_gpu(tmp_path: Path) -> None:
    """``nvidia-smi`` lists a GPU (a fake one on PATH) but torch sees no CUDA: no GPU step runs, and
    what nvidia-smi said is kept."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "-L" ]; then echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0000)"; exit 0; fi\n'
        'echo "==============NVSMI LOG=============="\n'
        'echo "Attached GPUs                             : 1"\n'
    )  # fmt: skip
    smi.chmod(0o755)
    out = tmp_path / "out"
    proc = run_check(out, DEVICE_CHECK_SKIP_INSTALL="1", PATH=f"{bin_dir}:{os.environ['PATH']}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = assert_gpu_steps_skipped(out)
    assert "torch.cuda is not available" in lines["end"]
    assert "Attached GPUs" in (out / "nvidia-smi-q.txt").read_text()
    assert "nvidia-smi -L: GPU 0: NVIDIA H100" in (out / "env.txt").read_text()


def test_setup_installs_the_wheel_folder_without_a_network(tmp_path: Path) -> None:
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    make_wheel(wheels, "devcheck-probe", "1.0")
    out = tmp_path / "out"
    proc = run_check(
        out, DEVICE_CHECK_WHEELS=str(wheels), DEVICE_CHECK_SITE=str(site), DEVICE_CHECK_NO_GPU="1"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary_lines(out)["setup"].split()[1] == "rc=0"
    assert (site / "devcheck_probe.py").is_file()
    assert (site / "devcheck_probe-1.0.dist-info" / "METADATA").is_file()
    with tarfile.open(out / "logs.tar.gz") as tar:
        assert "logs/install.log" in tar.getnames()


def test_setup_without_wheels_says_how_to_get_them(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_check(out, DEVICE_CHECK_WHEELS=str(tmp_path / "none"), DEVICE_CHECK_NO_GPU="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr  # no GPU: the summary is the result
    assert "run `make device-wheels`" in proc.stdout
    assert summary_lines(out)["setup"].split()[1] == "rc=1"


def test_the_scripts_parse() -> None:
    for script in (CHECK, WHEELS):
        subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)
        if shutil.which("shellcheck"):
            proc = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0, proc.stdout


# ------------------------------------------------------------------------------- the wheel closure
def make_wheel(
    folder: Path, name: str, version: str, requires: tuple[str, ...] = (), tag: str = "py3-none-any"
) -> Path:
    """A minimal installable wheel: one empty module, METADATA with ``requires``, WHEEL, RECORD."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{name.replace('-', '_')}-{version}"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{name.replace('-', '_')}.py": b"",
        f"{dist}.dist-info/METADATA": meta.encode(),
        f"{dist}.dist-info/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n".encode(),
    }
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\n"
    files[f"{dist}.dist-info/RECORD"] = (record + f"{dist}.dist-info/RECORD,,\n").encode()
    whl = folder / f"{dist}-{tag}.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
    return whl


PYPROJECT = """\
[project]
name = "demo"
dependencies = ["foo>=1", "typer>=0.12"]
[project.optional-dependencies]
node = ["bar"]
dev = ["not-shipped"]
"""

CLOSED: dict[str, tuple[str, tuple[str, ...]]] = {
    "foo": (
        "1.0",
        (
            "baz>=2; python_version >= '3.9'",
            "win-only; sys_platform == 'win32'",
            "docs-thing; extra == 'docs'",
            "old-thing; python_version < '3.9'",
            "pypy-only; implementation_name == 'pypy'",
            "typing-extensions>=4.0",
        ),
    ),
    "bar": ("1.0", ()),
    "baz": ("2.1", ("pytest",)),
}
"""A closed synthetic set: every requirement that applies to CPython 3.12 on Linux is in the folder
(``baz``) or the image (``typer``, ``typing-extensions``, ``pytest``); the rest carry markers that
rule them out (Windows, an extra, Python < 3.9, PyPy)."""


def closure_check(folder: Path, tmp_path: Path, install: bool = False) -> subprocess.CompletedProcess[str]:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(PYPROJECT)
    env = {**os.environ, "WHEEL_DIR": str(folder), "PYTHON": sys.executable}
    env["DEVICE_WHEELS_PYPROJECT"] = str(pyproject)
    if not install:
        env["DEVICE_WHEELS_SKIP_INSTALL"] = "1"
    return subprocess.run(
        ["bash", str(WHEELS), "--check"], capture_output=True, text=True, timeout=120, env=env
    )


def write_set(folder: Path, packages: dict[str, tuple[str, tuple[str, ...]]], **tags: str) -> None:
    for name, (version, requires) in packages.items():
        make_wheel(folder, name, version, requires, tags.get(name, "py3-none-any"))


def test_a_closed_wheel_set_installs_and_passes_the_check(tmp_path: Path) -> None:
    write_set(tmp_path / "whl", CLOSED)
    proc = closure_check(tmp_path / "whl", tmp_path, install=True)
    assert proc.returncode == 0, proc.stderr
    assert "every wheel installs into an empty target" in proc.stdout
    assert "closed: 3 wheels" in proc.stdout


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"bar": None}, "pyproject.toml [project] requires 'bar': neither in"),  # the node extra's
        ({"baz": None}, "foo-1.0-py3-none-any.whl requires \"baz>=2; python_version >= '3.9'\""),
        ({"baz": ("1.9", ())}, "baz 1.9 in"),  # there, but too old
        ({"bar": ("1.0", ("paramiko>=3",))}, "bar-1.0-py3-none-any.whl requires 'paramiko>=3'"),
        ({"foo": None}, "requires 'foo>=1': neither in"),  # robustctl's own dependency
    ],
    ids=["extra-root", "marker-applies", "version", "not-in-image", "project-root"],
)
def test_an_open_wheel_set_fails_the_check_naming_what_is_missing(
    tmp_path: Path, change: dict[str, tuple[str, tuple[str, ...]] | None], message: str
) -> None:
    packages = {**CLOSED, **change}
    write_set(tmp_path / "whl", {k: v for k, v in packages.items() if v is not None})
    proc = closure_check(tmp_path / "whl", tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert message in proc.stderr, proc.stderr
    assert "closed:" not in proc.stdout


def test_a_wheel_for_another_platform_or_a_second_version_fails_the_check(tmp_path: Path) -> None:
    write_set(tmp_path / "whl", CLOSED, bar="cp312-cp312-win_amd64")
    make_wheel(tmp_path / "whl", "baz", "2.2")
    proc = closure_check(tmp_path / "whl", tmp_path)
    assert proc.returncode == 1
    assert "bar-1.0-cp312-cp312-win_amd64.whl: no tag for CPython 3.12 manylinux x86-64" in proc.stderr
    assert "baz: two versions in" in proc.stderr


def test_a_wheel_that_does_not_install_fails_the_check(tmp_path: Path) -> None:
    write_set(tmp_path / "whl", CLOSED, bar="cp311-cp311-win_amd64")
    proc = closure_check(tmp_path / "whl", tmp_path, install=True)
    assert proc.returncode == 1
    assert "does not install into an empty target" in proc.stderr
