#!/usr/bin/env bash
# The GPU evidence in one go: run on a GPU machine from the repository root.
#
#   bash scripts/gpu-carry.sh                 # here, on the build machine: fills .gpu-carry/
#   bash scripts/gpu-check.sh                 # there: figures as JSON into $OUT (default ./gpu-out)
#   bash scripts/gpu-check.sh --cpu-rehearsal # here: the same steps at tiny sizes, GPU rows "no GPU"
#
# It uses the machine's python3 with torch (and timm) and what .gpu-carry/
# holds: the abi3 wheel of batchcast, the stripped release `batchcast`
# binary, and wheels/ (tensorsocket 0.0.5, pyzmq, tornado, pytest and its
# dependencies, nvidia-ml-py), unpacked into a private site directory for the
# modules the machine lacks. It checks those inputs first and stops within
# seconds, naming what is missing. Then, each step with its own time budget
# (seconds; override with the environment variables named):
#   1. tests      ($TESTS_S, 150)    pytest: tests/python/test_gpu.py (-m gpu: the consumer's
#                                    own copies and the device plane) and the stand-in
#                                    ordering tests, junit XML in tests.xml
#   2. listener   ($LISTENER_S, 60)  scripts/gpu_listener_check.py: `batchcast run`'s
#                                    NVML listener against nvidia-smi, its overhead, MPS, MIG
#   3. transport  ($TRANSPORT_S, 130) scripts/gpu_transport.py: a GPU consumer's GB/s
#                                    against plain pinned and pageable copies; then
#                                    scripts/gpu_plane_bench.py: the device plane against
#                                    each consumer copying, N = 1, 2, 4, 8 (plane.json)
#   4. benchmark  ($BENCH_S, 180)    bench/collocated.py on the GPU: timm models,
#                                    shared vs independent vs TensorSocket vs the ceiling
#                                    ($BENCH_MODELS, $BENCH_TRAINERS, $BENCH_MODES: its
#                                    --model, --trainers and --modes)
# $STEPS picks steps (default "tests listener transport bench"). $OUT gets:
# summary.json (each step's status, rewritten as it goes), env.json, tests.xml,
# listener.json, transport.json, plane.json, bench.json and check.log (everything printed).
# A step that runs out of time is stopped and what it wrote stays.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
rehearsal=0
case "${1:-}" in
    --cpu-rehearsal) rehearsal=1 ;;
    "") ;;
    *) echo "usage: $0 [--cpu-rehearsal]" >&2; exit 2 ;;
esac
OUT="${OUT:-$root/gpu-out}"
mkdir -p "$OUT"
carry="${BATCHCAST_GPU_CARRY:-$root/.gpu-carry}"
start=$SECONDS
exec > >(tee -a "$OUT/check.log") 2>&1

log() { echo "[gpu-check +$((SECONDS - start))s] $*"; }
die() { log "STOP: $*"; step_status inputs failed "$*"; exit 2; }

# step_status STEP STATUS [DETAIL]: records a step's outcome in summary.json.
step_status() {
    "${py:-python3}" - "$OUT/summary.json" "$1" "$2" "${3:-}" "$rehearsal" <<'PY'
import json, os, sys, time
path, step, status, detail, rehearsal = sys.argv[1:]
try:
    with open(path) as f:
        doc = json.load(f)
except (OSError, ValueError):
    doc = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "steps": {}}
doc["cpu_rehearsal"] = rehearsal == "1"
doc["steps"][step] = {"status": status, "detail": detail, "at": time.strftime("%H:%M:%S", time.gmtime())}
tmp = path + ".tmp"
with open(tmp, "w") as f:
    json.dump(doc, f, indent=1)
os.replace(tmp, path)
PY
}

# run_step NAME SECONDS COMMAND...: runs one step under its budget (if $STEPS names it).
steps=" ${STEPS:-tests listener transport bench} "
run_step() {
    local name=$1 budget=$2
    shift 2
    case "$steps" in *" $name "*) ;; *) log "$name: not in \$STEPS"; return 0 ;; esac
    log "$name: starting (budget ${budget} s)"
    step_status "$name" running
    timeout --kill-after=10 "$budget" "$@"
    local rc=$?
    case $rc in
        0) step_status "$name" ok; log "$name: ok" ;;
        124|137) step_status "$name" "timed out" "after ${budget} s"; log "$name: timed out after ${budget} s" ;;
        *) step_status "$name" failed "exit status $rc"; log "$name: failed (exit status $rc)" ;;
    esac
}

# -- inputs (seconds) -------------------------------------------------------
if [ "$rehearsal" = 1 ]; then
    py="${PYTHON:-$root/.venv/bin/python}"
    [ -x "$py" ] || die "no $py: run scripts/test-python.sh once (it makes the venv), or set PYTHON"
    bin="${BATCHCAST_BIN:-$root/target/release/batchcast}"
    [ -x "$bin" ] || die "no $bin: cargo build --release -p batchcast-cli"
else
    py="${PYTHON:-python3}"
    command -v "$py" >/dev/null || die "no $py on PATH"
    [ -d "$carry" ] || die "no $carry: run scripts/gpu-carry.sh on the build machine and carry .gpu-carry"
    bin="$carry/batchcast"
    [ -x "$bin" ] || die "no executable $bin in the carry (scripts/gpu-carry.sh strips and copies it)"
    wheel=$(ls "$carry"/batchcast-*abi3*.whl 2>/dev/null | head -n 1)
    [ -n "$wheel" ] || die "no batchcast abi3 wheel in $carry (scripts/gpu-carry.sh builds it)"
    command -v nvidia-smi >/dev/null || die "nvidia-smi is not on PATH: is this the GPU machine?"
    "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'torch.cuda.is_available() is False')" \
        || die "torch with CUDA is not usable from $py"
    # The carried wheels, unpacked into a private site directory, for the
    # modules this machine does not have already (its own stay in charge).
    site=/tmp/batchcast-gpu-site
    rm -rf "$site"
    "$py" - "$site" "$wheel" "$carry"/wheels/*.whl <<'PY' || die "could not unpack the carried wheels"
import importlib.util, sys, zipfile
site, wheels = sys.argv[1], sys.argv[2:]
modules = {"batchcast": None, "tensorsocket": "tensorsocket", "pyzmq": "zmq", "tornado": "tornado",
           "pytest": "pytest", "pluggy": "pluggy", "iniconfig": "iniconfig", "packaging": "packaging",
           "pygments": "pygments", "nvidia_ml_py": "pynvml"}
for whl in wheels:
    dist = whl.rsplit("/", 1)[-1].split("-")[0]
    module = modules.get(dist, dist)
    if module is not None and importlib.util.find_spec(module) is not None:
        print(f"  {dist}: the machine's own")
        continue
    zipfile.ZipFile(whl).extractall(site)
    print(f"  {dist}: carried")
PY
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export BATCHCAST_BIN="$bin"
"$bin" --version >/dev/null || die "$bin does not run"
"$py" -c "import batchcast, pytest, tensorsocket" || die "batchcast, pytest or tensorsocket cannot be imported by $py"
log "inputs ok: $("$bin" --version), python $("$py" -c 'import sys; print(sys.version.split()[0])')"
step_status inputs ok

# -- the machine ------------------------------------------------------------
"$py" - "$OUT/env.json" <<'PY'
import json, os, platform, subprocess, sys, time
import torch
env = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "python": sys.version.split()[0],
       "torch": torch.__version__, "cuda": torch.version.cuda, "cpus": os.cpu_count(),
       "kernel": platform.release()}
try:
    import timm
    env["timm"] = timm.__version__
except ImportError:
    env["timm"] = None
fields = ("name,uuid,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max,"
          "mig.mode.current,compute_mode,clocks.max.sm,power.limit")
try:
    out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    env["gpus"] = [dict(zip(fields.split(","), (v.strip() for v in line.split(",")))) for line in out]
except (OSError, subprocess.SubprocessError) as e:
    env["gpus"] = {"status": "no GPU", "reason": str(e)}
with open(sys.argv[1], "w") as f:
    json.dump(env, f, indent=1)
print(json.dumps(env))
PY

# -- 1. tests ---------------------------------------------------------------
# -p no:warnings: the suite turns warnings into errors, which on another torch
# build would fail a GPU test for a deprecation notice.
run_step tests "${TESTS_S:-150}" "$py" -m pytest -p no:cacheprovider -p no:warnings -q -rA \
    --junitxml="$OUT/tests.xml" tests/python/test_gpu.py tests/python/test_device_transfers.py

# -- 2. the run store's GPU listener ------------------------------------------
listener_budget=${LISTENER_S:-60}
if [ "$rehearsal" = 1 ]; then
    run_step listener "$listener_budget" "$py" scripts/gpu_listener_check.py --cpu-rehearsal \
        --batchcast-bin "$bin" --python "$py" --out "$OUT/listener.json" --budget $((listener_budget - 10))
else
    run_step listener "$listener_budget" "$py" scripts/gpu_listener_check.py \
        --batchcast-bin "$bin" --python "$py" --out "$OUT/listener.json" --budget $((listener_budget - 10))
fi

# -- 3. transport --------------------------------------------------------------
# The consumer's own copies, then the device plane (each runs whatever the
# other did; the step fails if either did).
if [ "$rehearsal" = 0 ]; then
    transport_cmd='"$0" scripts/gpu_transport.py --out "$1/transport.json"; a=$?
        "$0" scripts/gpu_plane_bench.py --out "$1/plane.json" --cell-timeout 40; b=$?
        exit $((a | b))'
else
    transport_cmd='"$0" scripts/gpu_plane_bench.py --cpu-rehearsal --out "$1/plane.json" \
        --consumers 1,2 --batches 20 --batch 16 --size 32'
fi
run_step transport "${TRANSPORT_S:-130}" bash -c "$transport_cmd" "$py" "$OUT"

# -- 4. the collocated benchmark ----------------------------------------------
bench_budget=${BENCH_S:-180}
if [ "$rehearsal" = 1 ]; then
    run_step bench "$bench_budget" "$py" bench/collocated.py --device cpu --model resnet18 \
        --images 64 --batch-size 16 --image-size 64 --trainers 1,2 --epochs 1 \
        --modes ceiling,independent,shared-native --warmup 1 \
        --budget $((bench_budget - 20)) --batchcast-bin "$bin" --json "$OUT/bench.json"
else
    # Priority groups (a "/" starts the next): what the budget leaves out
    # is named as skipped in the JSON.
    run_step bench "$bench_budget" "$py" bench/collocated.py --device cuda \
        --model "${BENCH_MODELS:-resnet18,mobilenetv3_large_100/resnet50}" \
        --trainers "${BENCH_TRAINERS:-1,4/2,8}" \
        --modes "${BENCH_MODES:-ceiling,independent,shared-native,tensorsocket-gpu/shared-python}" \
        --images 4096 --epochs 1 --batch-size 128 --image-size 224 --workers auto \
        --repeats 2 --budget $((bench_budget - 20)) --timeout 60 --stall-timeout 10 \
        --batchcast-bin "$bin" --json "$OUT/bench.json"
fi

log "done in $((SECONDS - start)) s; figures in $OUT"
step_status all done "$((SECONDS - start)) s"
