#!/usr/bin/env bash
# The wheels robustctl needs on the GPU device machine beyond the packages its image already has, for
# CPython 3.12 on manylinux x86-64, downloaded into .whl/ (ignored by git; it travels with the device
# call, which carries at most 64 MiB with the repository). scripts/device-check.sh installs them there
# with `pip install --no-index --no-deps --target`: the device machine has no network.
#
#   bash scripts/device-wheels.sh           download the pinned set into .whl/, then --check it
#   bash scripts/device-wheels.sh --check   prove the set in .whl/ complete, downloading nothing:
#       1. every wheel installs into an empty target with `pip install --no-index --no-deps` resolved
#          for CPython 3.12 manylinux x86-64 (pip's --python-version/--platform: the local Python may
#          be another version);
#       2. every Requires-Dist of every wheel, and robustctl's [project].dependencies with its `node`
#          extra (the GPU path: nvidia-ml-py, numpy, py-spy), its environment markers evaluated for
#          CPython 3.12 on Linux x86-64, names a wheel in .whl/ whose version satisfies it or a package
#          of the image (IMAGE_PACKAGES below).
#
# Environment: WHEEL_DIR (default .whl), PYTHON (default python3; needs pip and packaging),
# DEVICE_WHEELS_PYPROJECT (default pyproject.toml), DEVICE_WHEELS_SKIP_INSTALL=1 (--check: the
# closure only, no pip; the unit tests' synthetic wheels are not installable).
# Exit: 0 complete, 1 something missing or not installable, 2 usage.
set -euo pipefail

cd "$(dirname "$0")/.."
WHEEL_DIR=${WHEEL_DIR:-.whl}
PYTHON=${PYTHON:-python3}
PYPROJECT=${DEVICE_WHEELS_PYPROJECT:-pyproject.toml}

# What the device image has installed already (robustctl's dependencies and the test tools): not
# downloaded. A requirement on one of these is met by the image, whatever version it asks for.
IMAGE_PACKAGES="typer rich pyyaml psutil pytest pytest-timeout pytest-xdist hypothesis numpy nvidia-ml-py
torch click typing-extensions shellingham markdown-it-py pygments mdurl prometheus-client packaging
pluggy iniconfig"

# The pinned set: the versions the development virtualenv has (`.venv/bin/pip list`); pydantic-core
# is the exact one pydantic requires. typing-extensions is in the image too, but pydantic 2.14 needs
# >= 4.16.0, newer than an image may carry: the wheel (45 KiB) goes first on the device's PYTHONPATH.
WHEELS=(
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
    typing-extensions==4.16.0
    simpleeval==1.0.8
    paramiko==5.1.0 cryptography==50.0.2 bcrypt==5.0.0 pynacl==1.6.2 cffi==2.1.1 pycparser==3.12 invoke==3.0.3
    py-spy==0.4.3
)
# Published as a source distribution only: built here into a pure-Python (py3-none-any) wheel.
SDISTS=(python-hostlist==2.3.0)

MAX_MIB=40
# The set's size limit: the device call carries at most 64 MiB with the repository; 40 leaves room for
# the checkout.

PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64
           manylinux1_x86_64)
# Older glibc tags than the image's are fine; when a package is not found, the newer tags are added.
MORE_PLATFORMS=(manylinux_2_24_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64 manylinux_2_35_x86_64)

platform_args() {
    local p
    for p in "$@"; do printf -- '--platform\n%s\n' "$p"; done
}

target_args() {
    echo --only-binary=:all:
    echo --python-version=3.12
    echo --implementation=cp
}

download() {
    local spec=$1 args
    mapfile -t args < <(target_args; platform_args "${PLATFORMS[@]}")
    if "$PYTHON" -m pip download -q --no-deps "${args[@]}" -d "$WHEEL_DIR" "$spec"; then
        return 0
    fi
    echo "device-wheels: $spec: retrying with the newer manylinux tags too" >&2
    mapfile -t args < <(target_args; platform_args "${PLATFORMS[@]}" "${MORE_PLATFORMS[@]}")
    "$PYTHON" -m pip download -q --no-deps "${args[@]}" -d "$WHEEL_DIR" "$spec"
}

build_sdist() {
    local spec=$1 tmp
    tmp=$(mktemp -d)
    "$PYTHON" -m pip download -q --no-deps --no-binary=:all: -d "$tmp" "$spec"
    "$PYTHON" -m pip wheel -q --no-deps -w "$tmp/wheel" "$tmp"/*.tar.gz
    for w in "$tmp"/wheel/*.whl; do
        case $w in
            *-py3-none-any.whl | *-py2.py3-none-any.whl) cp "$w" "$WHEEL_DIR/" ;;
            *) echo "device-wheels: $spec built a platform wheel ($w), not a pure-Python one" >&2
               rm -rf "$tmp"; return 1 ;;
        esac
    done
    rm -rf "$tmp"
}

install_check() {
    local target args
    target=$(mktemp -d)
    mapfile -t args < <(target_args; platform_args "${PLATFORMS[@]}" "${MORE_PLATFORMS[@]}" manylinux_2_26_x86_64 manylinux_2_5_x86_64)
    if ! "$PYTHON" -m pip install -q --root-user-action=ignore --no-index --no-deps --no-compile "${args[@]}" --target "$target" \
            "$WHEEL_DIR"/*.whl; then
        rm -rf "$target"
        echo "device-wheels: the set does not install into an empty target with --no-index" >&2
        return 1
    fi
    echo "device-wheels: every wheel installs into an empty target (--no-index, CPython 3.12 manylinux x86-64)"
    rm -rf "$target"
}

closure_check() {
    IMAGE_PACKAGES="$IMAGE_PACKAGES" "$PYTHON" - "$WHEEL_DIR" "$PYPROJECT" <<'PY'
"""Every requirement of the wheels in a folder, and of robustctl, met by the folder or the image."""
import sys
import zipfile
from email.parser import Parser
from pathlib import Path
import os

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib
from packaging.requirements import Requirement
from packaging.tags import cpython_tags, compatible_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

ENV = {  # the device: CPython 3.12 on Linux x86-64
    "implementation_name": "cpython", "implementation_version": "3.12.0", "os_name": "posix",
    "platform_machine": "x86_64", "platform_python_implementation": "CPython", "platform_system": "Linux",
    "python_full_version": "3.12.0", "python_version": "3.12", "sys_platform": "linux", "extra": "",
}
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(35, 4, -1)]
PLATFORMS += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]
TAGS = set(cpython_tags((3, 12), platforms=PLATFORMS)) | set(compatible_tags((3, 12), "cp312", PLATFORMS))

folder, pyproject = Path(sys.argv[1]), Path(sys.argv[2])
image = {canonicalize_name(n) for n in os.environ["IMAGE_PACKAGES"].split()}
have = {}  # name -> version
needs = []  # (who, requirement)
problems = []
wheels = sorted(folder.glob("*.whl"))
if not wheels:
    problems.append(f"no wheel in {folder}/")
for whl in wheels:
    try:
        name, version, _, tags = parse_wheel_filename(whl.name)
    except Exception as exc:
        problems.append(f"{whl.name}: not a wheel file name ({exc})")
        continue
    if not tags & TAGS:
        problems.append(f"{whl.name}: no tag for CPython 3.12 manylinux x86-64")
    try:
        with zipfile.ZipFile(whl) as z:
            meta = [n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
            text = z.read(meta[0]).decode("utf-8") if meta else None
    except (OSError, zipfile.BadZipFile) as exc:
        problems.append(f"{whl.name}: unreadable ({exc})")
        continue
    if text is None:
        problems.append(f"{whl.name}: no .dist-info/METADATA")
        continue
    if name in have:
        problems.append(f"{name}: two versions in {folder}/ ({have[name]}, {version}): remove the stale one")
    have[name] = version
    for line in Parser().parsestr(text).get_all("Requires-Dist") or []:
        needs.append((whl.name, line))
project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
roots = list(project.get("dependencies", [])) + list(project.get("optional-dependencies", {}).get("node", []))
needs += [(f"{pyproject.name} [project]", line) for line in roots]
for who, line in needs:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate(ENV):
        continue  # another Python/platform, or an extra
    name = canonicalize_name(req.name)
    if name in have:
        if req.specifier and not req.specifier.contains(have[name], prereleases=True):
            problems.append(f"{who} requires {line!r}: {name} {have[name]} in {folder}/ does not satisfy it")
    elif name not in image:
        problems.append(f"{who} requires {line!r}: neither in {folder}/ nor in the image")
for p in problems:
    print(f"device-wheels: {p}", file=sys.stderr)
if problems:
    sys.exit(1)
print(f"device-wheels: closed: {len(have)} wheels, {len(needs)} requirements met by {folder}/ or the image")
PY
}

check() {
    if [[ ${DEVICE_WHEELS_SKIP_INSTALL:-} != 1 ]]; then
        install_check
    fi
    closure_check
}

case ${1:-} in
    --check) check; exit ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

mkdir -p "$WHEEL_DIR"
for spec in "${WHEELS[@]}"; do
    download "$spec"
done
for spec in "${SDISTS[@]}"; do
    name=${spec%%==*}
    if compgen -G "$WHEEL_DIR/${name//-/_}-${spec#*==}-*.whl" >/dev/null; then
        continue  # built already
    fi
    build_sdist "$spec"
done
ls -l "$WHEEL_DIR"
whls=("$WHEEL_DIR"/*.whl)
kib=$(du -sk "$WHEEL_DIR" | cut -f1)
echo "device-wheels: ${#whls[@]} wheels, $((kib / 1024)) MiB ($kib KiB) in $WHEEL_DIR/"
if (( kib > MAX_MIB * 1024 )); then
    echo "device-wheels: over $MAX_MIB MiB: the device call carries at most 64 MiB with the repository" >&2
    exit 1
fi
check
