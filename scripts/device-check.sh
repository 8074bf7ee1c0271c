#!/usr/bin/env bash
# The GPU paths of robustctl, run for real in one call on a machine with an NVIDIA GPU and no network
# (issue 25). From the repository root, after `make device-wheels` filled .whl/ on a machine with one:
#
#   OUT=/some/folder bash scripts/device-check.sh        (OUT defaults to ./build/device-out)
#
# Steps, each under its own `timeout`; a failed step does not stop the next. The whole run stays within
# DEVICE_CHECK_BUDGET_S (default 360 s): a step gets the smaller of its own limit and what is left.
#   0 setup     pip-install .whl/*.whl into $DEVICE_CHECK_SITE (default /tmp/site) without a network,
#               PYTHONPATH=site:repo; `nvidia-smi -q`; torch's version, CUDA and device name; pip list.
#   1 pytest    the gpu-marked tests (every tests/unit file with @pytest.mark.gpu) with -x, JUnit.
#   2 diagnose  `python3 -m robustctl diagnose --all-levels --json` on this machine (the embedded
#               default inventory: localhost, local transport): L0 real NVML, L1 burn on CUDA, L2;
#     nvml      then the NVML probe's own document (diagnostics/nvml.py; every field, in the logs).
#   3 replay    the SDC replay workload on CUDA twice, digests compared; the L4 reference step
#               (robustctl.diagnose.alignment's seed, width, layers, steps) in two processes at once
#               on one GPU, digests compared; and what the probe says to two NCCL ranks on one GPU.
#   4 summary   one line per step: name, rc, seconds, a key figure.
# No GPU (no nvidia-smi listing one, or torch.cuda unavailable): the GPU steps each print
# "skipped: no GPU found", the summary says so, and the script exits 0.
#
# $OUT receives at most 8 files (what the device call brings back): nvidia-smi-q.txt, env.txt,
# gpu-junit.xml, diagnose.json, replay.json, summary.txt, logs.tar.gz (every step's output, its last
# DEVICE_CHECK_LOG_BYTES bytes).
#
# Environment: OUT; PYTHON (default python3); DEVICE_CHECK_BUDGET_S; DEVICE_CHECK_SITE;
# DEVICE_CHECK_WHEELS (default .whl); DEVICE_CHECK_COMMIT (the commit env.txt names; default: git HEAD,
# marked "tree may differ"); DEVICE_CHECK_SKIP_INSTALL=1 (no step 0 install: the packages are
# importable already); DEVICE_CHECK_NO_GPU=1 (act as if no GPU were found: the tests' switch).
# Exit: 0 every step ran and passed, or no GPU was found; 1 some step failed or timed out.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
REPO=$PWD
OUT=${OUT:-./build/device-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 1
PYTHON=${PYTHON:-python3}
BUDGET_S=${DEVICE_CHECK_BUDGET_S:-360}
# 6 minutes: the device is lent for about 15 minutes in all, start-up included, and a second try of
# this script must still fit after a first one.
SITE=${DEVICE_CHECK_SITE:-/tmp/site}
WHEELS=${DEVICE_CHECK_WHEELS:-.whl}
LOG_BYTES=${DEVICE_CHECK_LOG_BYTES:-262144}
# 256 KiB of each step's output: a failing test's traceback and the probes' stderr fit; a runaway
# loop of output does not fill the disk or the packed logs.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/device-check.XXXXXX") || exit 1
LOGS=$WORK/logs
mkdir -p "$LOGS"
SUMMARY=$OUT/summary.txt
START=$(date +%s)
FAILED=0
# PIP_BREAK_SYSTEM_PACKAGES: an externally managed image Python (PEP 668) still installs into --target.
export PYTHONDONTWRITEBYTECODE=1 PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1
: >"$SUMMARY"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
left() { echo $((BUDGET_S - ($(date +%s) - START))); }

# record NAME RC SECONDS FIGURE: one summary line, also printed.
record() {
    local line
    line=$(printf '%-9s rc=%-3s %6ss  %s' "$1" "$2" "$3" "$4")
    echo "$line" >>"$SUMMARY"
    echo "== $line"
}

# bounded NAME LIMIT CMD...: run CMD under min(LIMIT, budget left), its output's tail in logs/NAME.log
# (the last lines also printed); returns CMD's status (124/137: timed out, 125: no budget left).
bounded() {
    local name=$1 limit=$2 rc t
    shift 2
    t=$(left)
    ((t -= 5))
    if ((t < 5)); then
        echo "$name: not run: the ${BUDGET_S}s budget is spent" | tee "$LOGS/$name.log"
        return 125
    fi
    ((t > limit)) && t=$limit
    echo "-- $name (limit ${t}s): $*"
    timeout -k 5 "$t" "$@" 2>&1 | tail -c "$LOG_BYTES" >"$LOGS/$name.log"
    rc=${PIPESTATUS[0]}
    tail -n 8 "$LOGS/$name.log" | cut -c 1-300
    return "$rc"
}

# figure KIND FILE: the key figure of a step's output file, one line (python: JSON and XML parsing).
figure() {
    "$PYTHON" - "$@" <<'PY' 2>/dev/null || echo "no figure: $2 unreadable"
import json
import sys
import xml.etree.ElementTree as ET

kind, path = sys.argv[1], sys.argv[2]
if kind == "junit":
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    n = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    passed = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
    names = [c.get("name") for c in root.iter("testcase") if c.find("failure") is not None or c.find("error") is not None]
    skips = sorted({(s.get("message") or "")[:80] for s in root.iter("skipped")})
    print(f"passed={passed} failed={n['failures']} errors={n['errors']} skipped={n['skipped']}"
          + (f" failing={','.join(names)}" if names else "") + (f" skip reasons={skips}" if skips else ""))
elif kind == "diagnose":
    doc = json.load(open(path))
    checks = [c for h in doc.get("hosts", []) for c in h.get("checks", [])]
    burn = [c["summary"] for c in checks if c["name"] in ("burn.tflops", "burn.verify")]
    nvml = [f"{c['name'][5:]}={c['status']}" for c in checks if c["name"].startswith("nvml.")]
    fields = sorted({k for c in checks if c["name"].startswith("nvml.") for k in c.get("evidence", {})})
    l2 = [c["summary"] for c in checks if c.get("level") == 2]
    print(f"status={doc.get('status')} exit={doc.get('exit_code')}; burn: {' / '.join(burn) or '-'};"
          f" nvml: {' '.join(nvml) or '-'}; nvml evidence: {','.join(fields) or '-'}; L2: {' / '.join(l2) or '-'}")
elif kind == "nvml":
    doc = json.loads(open(path).read().strip().splitlines()[-1])
    data = doc.get("data", {})
    gpus = data.get("gpus") or []
    seen = sorted({k for g in gpus for k, v in g.items() if v is not None and k not in ("query_errors", "error", "error_code")})
    unseen = sorted({k for g in gpus for k, v in g.items() if v is None} - {"error", "error_code"})
    errs = {k: v[:60] for g in gpus for k, v in (g.get("query_errors") or {}).items()}
    print(f"count={data.get('count')} driver={data.get('driver_version')} cuda={data.get('cuda_driver_version')};"
          f" fields seen: {','.join(seen) or '-'}; null: {','.join(unseen) or '-'}; query errors: {errs or '-'}"
          + (f"; unavailable: {data.get('reason')}" if data.get("available") is False else ""))
elif kind == "replay":
    doc = json.load(open(path))
    det, l4, two = doc["determinism"], doc["alignment"], doc["two_ranks_one_gpu"]
    print(f"determinism: digests equal={det['digests_equal']} ({len(det['runs'])} runs,"
          f" backend={det['runs'][0].get('backend')}); L4 on one GPU: {len(l4['runs'])} processes,"
          f" digests equal={l4['digests_equal']}; two ranks on one GPU:"
          f" {two.get('error') or two.get('reason') or 'ran, digest ' + str(two.get('digest'))}")
PY
}

# ------------------------------------------------------------------------------------------ step 0
GPU=""
NO_GPU_WHY=""
t0=$(now)
rc=0
if [[ ${DEVICE_CHECK_SKIP_INSTALL:-} == 1 ]]; then
    echo "setup: install skipped (DEVICE_CHECK_SKIP_INSTALL=1)"
elif ! compgen -G "$WHEELS/*.whl" >/dev/null; then
    echo "setup: no wheel in $WHEELS/: run \`make device-wheels\` on a machine with a network first"
    rc=1
elif "$PYTHON" -m pip --version >/dev/null 2>&1; then
    bounded install 60 "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target "$SITE" "$WHEELS"/*.whl || rc=$?
else # no pip in the image: a wheel is a zip of its site-packages files (py-spy's binary stays in .data)
    bounded install 60 "$PYTHON" -c 'import sys, zipfile
for whl in sys.argv[2:]:
    zipfile.ZipFile(whl).extractall(sys.argv[1])
print("no pip: extracted", len(sys.argv) - 2, "wheels into", sys.argv[1])' "$SITE" "$WHEELS"/*.whl || rc=$?
fi
export PYTHONPATH="$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$SITE/bin:$PATH"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: $(uname -srm)"
    echo "python: $("$PYTHON" -c 'import sys; print(sys.version.split()[0], sys.executable)' 2>&1)"
    # The device copy's git HEAD can be stale (its tree is the caller's working tree, not HEAD's):
    # the caller passes the real commit; otherwise HEAD and the count of changed files are said.
    if [[ -n ${DEVICE_CHECK_COMMIT:-} ]]; then
        echo "commit: $DEVICE_CHECK_COMMIT"
    else
        echo "commit: $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown) (tree may differ:" \
            "$(git -C "$REPO" status --porcelain 2>/dev/null | wc -l) changed files)"
    fi
} >"$OUT/env.txt"
if [[ ${DEVICE_CHECK_NO_GPU:-} == 1 ]]; then
    NO_GPU_WHY="DEVICE_CHECK_NO_GPU=1"
elif ! command -v nvidia-smi >/dev/null 2>&1; then
    NO_GPU_WHY="no nvidia-smi"
else
    timeout 30 nvidia-smi -q 2>&1 | head -c 2097152 >"$OUT/nvidia-smi-q.txt"
    smi=$(timeout 30 nvidia-smi -L 2>&1 | head -n 20)
    echo "nvidia-smi -L: $smi" >>"$OUT/env.txt"
    if ! grep -q '^GPU ' <<<"$smi"; then
        NO_GPU_WHY="nvidia-smi lists no GPU"
    fi
fi
torch_line=$(timeout 90 "$PYTHON" -c 'import torch
ok = torch.cuda.is_available()
print(torch.__version__, ok, torch.cuda.get_device_name(0) if ok else "-")' 2>&1 | tail -n 1)
echo "torch: $torch_line" >>"$OUT/env.txt"
if [[ -z $NO_GPU_WHY && $torch_line != *" True "* ]]; then
    NO_GPU_WHY="torch.cuda is not available ($torch_line)"
fi
[[ -z $NO_GPU_WHY ]] && GPU=${torch_line#* True }
pyver=$("$PYTHON" -c 'import platform; print(platform.python_version())' 2>&1 | tail -n 1)
[[ $pyver == 3.12.* ]] || echo "setup: Python $pyver, not 3.12: the cp312 wheels of .whl/ do not install here"
echo "image packages (pip list without the wheels):" >>"$OUT/env.txt"
PYTHONPATH='' timeout 60 "$PYTHON" -m pip list 2>&1 | head -n 300 >>"$OUT/env.txt"
((rc != 0)) && FAILED=1
if [[ -n $GPU ]]; then
    record setup "$rc" "$(since "$t0")" "GPU: $GPU; Python $pyver; torch $torch_line"
else
    record setup "$rc" "$(since "$t0")" "no GPU found: $NO_GPU_WHY; Python $pyver; torch $torch_line"
fi

# gpu_step NAME: true when the step may run; else its "skipped" line, recorded.
gpu_step() {
    if [[ -n $GPU ]]; then
        return 0
    fi
    echo "$1: skipped: no GPU found ($NO_GPU_WHY)"
    record "$1" - 0.0 "skipped: no GPU found"
    return 1
}

# ------------------------------------------------------------------------------------------ step 1
if gpu_step pytest; then
    t0=$(now)
    mapfile -t gpu_tests < <(grep -l '@pytest.mark.gpu' tests/unit/test_*.py)
    ((${#gpu_tests[@]})) || gpu_tests=(tests/unit) # none found by name: let -m gpu select
    rc=0
    bounded pytest 150 "$PYTHON" -m pytest -m gpu -x -q -p no:cacheprovider --timeout 120 \
        --junitxml="$OUT/gpu-junit.xml" "${gpu_tests[@]}" || rc=$?
    ((rc != 0)) && FAILED=1
    record pytest "$rc" "$(since "$t0")" "$(figure junit "$OUT/gpu-junit.xml")"
fi

# ------------------------------------------------------------------------------------------ step 2
if gpu_step diagnose; then
    t0=$(now)
    rc=0
    bounded diagnose 100 "$PYTHON" -m robustctl diagnose --all-levels --json -o "$OUT/diagnose.json" \
        --burn-seconds 5 --host-timeout 75 --deadline 95 --state "$WORK/state.db" || rc=$?
    ((rc > 3)) && FAILED=1 # 0-3: a verdict (healthy, warning, suspects, unchecked hosts)
    record diagnose "$rc" "$(since "$t0")" "$(figure diagnose "$OUT/diagnose.json")"
fi

if gpu_step nvml; then # the raw NVML probe document (in logs.tar.gz): what real NVML returns
    t0=$(now)
    rc=0
    bounded nvml 40 "$PYTHON" diagnostics/nvml.py --timeout 30 || rc=$?
    ((rc != 0)) && FAILED=1
    record nvml "$rc" "$(since "$t0")" "$(figure nvml "$LOGS/nvml.log")"
fi

# ------------------------------------------------------------------------------------------ step 3
if gpu_step replay; then
    t0=$(now)
    rc=0
    bounded replay 100 "$PYTHON" - "$OUT/replay.json" <<'PY' || rc=$?
"""The replay probe on CUDA: twice in a row (determinism), the L4 step twice at once on one GPU."""
import json
import subprocess
import sys

from robustctl.diagnose.alignment import HIDDEN, LAYERS, SEED, STEPS

PROBE = "diagnostics/replay.py"


def start(args):
    print("replay", " ".join(args), flush=True)
    return subprocess.Popen([sys.executable, PROBE, *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc):
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    lines = out.strip().splitlines()
    try:
        doc = json.loads(lines[-1])
    except (IndexError, ValueError):
        doc = {}
    data = dict(doc.get("data") or {})
    data.update(rc=proc.returncode, probe_errors=doc.get("errors"), stderr_tail=err[-2000:])
    print(f"  rc={proc.returncode} digest={data.get('digest')} error={data.get('error')}", flush=True)
    return data


def same(runs):
    digests = {(r.get("digest"), tuple(r.get("loss") or ())) for r in runs}
    return len(digests) == 1 and None not in {r.get("digest") for r in runs}


det_args = ["--backend", "nccl", "--steps", "2", "--timeout", "40"]
det = [finish(start(det_args)) for _ in range(2)]
l4_args = ["--tp=1", "--pp=1", "--dp=1", "--nnodes", "1", "--master-addr", "127.0.0.1", "--backend", "nccl",
           "--steps", str(STEPS), "--seed", str(SEED), "--hidden", str(HIDDEN), "--layers", str(LAYERS),
           "--timeout", "40"]
procs = [start(l4_args) for _ in range(2)]  # both started before either is waited for
l4 = [finish(p) for p in procs]
two = finish(start(["--tp", "2", "--backend", "nccl", "--steps", "1", "--timeout", "30"]))
doc = {
    "determinism": {"args": det_args, "runs": det, "digests_equal": same(det)},
    "alignment": {"args": l4_args, "runs": l4, "digests_equal": same(l4)},
    "two_ranks_one_gpu": two,
}
with open(sys.argv[1], "w") as f:
    json.dump(doc, f, indent=1, sort_keys=True)
ok = doc["determinism"]["digests_equal"] and doc["alignment"]["digests_equal"]
print("replay: digests equal" if ok else "replay: DIGESTS DIFFER or a run failed")
sys.exit(0 if ok else 1)
PY
    ((rc != 0)) && FAILED=1
    record replay "$rc" "$(since "$t0")" "$(figure replay "$OUT/replay.json")"
fi

# ------------------------------------------------------------------------------------------ step 4
tar -czf "$OUT/logs.tar.gz" -C "$WORK" logs
rm -rf "$WORK"
elapsed=$(($(date +%s) - START))
if [[ -z $GPU ]]; then
    echo "no GPU found ($NO_GPU_WHY): GPU steps skipped; ${elapsed}s" >>"$SUMMARY"
    FAILED=0
else
    echo "GPU: $GPU; ${elapsed}s of a ${BUDGET_S}s budget; $( ((FAILED)) && echo 'some step FAILED' || echo 'every step passed')" >>"$SUMMARY"
fi
echo "== summary ($OUT/summary.txt)"
cat "$SUMMARY"
exit "$FAILED"
