#!/usr/bin/env bash
# The device check: one call on a GPU machine measures the GPU path and writes everything
# under $OUT: versions.txt, gpu_tests.log/.xml (each precision test records the relative
# change it measured), epochs*.md/.json (seconds per epoch beside BOOM's Table 4,
# utilisation, peak memory), seeds*.md (one model's seeds side by side, then one alone),
# nvidia_smi.csv (utilisation sampled every 0.5 s through the whole check), all packed at
# the end into check.tar.gz (a call brings back at most 8 files), and report.md, which
# sums them up (bench/gpu_report.py). Each step has a time limit, so the check ends within
# the sum of its steps' limits whatever fails.
#
#   bench/gpu_pack.sh                              # here: .gpu/ (wheels, sources, caches)
#   OUT=/some/folder bench/gpu_check.sh [STEP...]  # there, in the checkout, .gpu carried
#   bench/gpu_check.sh --dry-run [STEP...]         # the same steps on this CPU, small
#
# STEPs (default: tests epochs): tests, epochs, epochs-bf16 (the models of BF16_MODELS
# under bf16-mixed), epochs-host (the models of HOST_MODELS with their batches built on
# the host and copied over, data_on_device=false: what keeping the data on the device
# gives, beside `epochs`), seeds (SEEDS_MODEL's seeds 0..2 side by side, then seed 0
# alone). MODELS, TESTS_K (a pytest -k expression) and the limits (seconds: TESTS_S,
# EPOCHS_S, BF16_S, HOST_S, SEEDS_S per step, MODEL_S of training per model) override the
# defaults; a step that runs out of time keeps what it wrote.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
DRY=0
[[ ${1:-} == --dry-run ]] && { DRY=1; shift; }
STEPS=("${@:-tests epochs}")
read -ra STEPS <<<"${STEPS[*]}"
OUT=${OUT:-$REPO/gpu_check_out}
mkdir -p "$OUT"
PY=${PY:-python3}
[[ -x .venv/bin/python && $DRY == 1 ]] && PY=.venv/bin/python
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore

if [[ -d .gpu/whl && $DRY == 0 ]]; then
  # the packages the machine lacks, installed beside its own (never torch)
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/whl/*.whl ||
    { echo "gpu_check: the carried wheels did not install" >&2; exit 2; }
  export PYTHONPATH=/tmp/site:$REPO/src:$REPO
else
  export PYTHONPATH=$REPO/src:$REPO${PYTHONPATH:+:$PYTHONPATH}
fi
export OODMOL_SOURCE_DIR=${OODMOL_SOURCE_DIR:-$REPO/.gpu/source}
export OODMOL_DATA_DIR=${OODMOL_DATA_DIR:-/tmp/oodmol-gpu-check-data}
mkdir -p "$OODMOL_DATA_DIR"
if [[ -f .gpu/data.tar.xz && ! -d $OODMOL_DATA_DIR/features ]]; then
  $PY -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='data')" \
    .gpu/data.tar.xz "$OODMOL_DATA_DIR"
fi

if ((DRY)); then
  DEVICE=cpu
  MODELS=${MODELS:-mlp,egnn}
  BF16_MODELS=${BF16_MODELS:-egnn}
  HOST_MODELS=${HOST_MODELS:-mlp,egnn}
  TESTS_S=${TESTS_S:-300} EPOCHS_S=${EPOCHS_S:-240} MODEL_S=${MODEL_S:-20}
  EXTRA=(max_molecules=600)
  TESTS_K=${TESTS_K:-cpu or tf32_matmuls or default_trainer or matmul}
else
  DEVICE=cuda
  # the families no call has reached yet first (docs/benchmarks/speed.md), then those the
  # goals name (Chemprop, EGNN, ET, GotenNet), then the rest: a call reaches about six
  MODELS=${MODELS:-mace,chemberta,modernbert,molformer,graphormer3d,geoformer,dimenetpp,visnet,chemprop,egnn,et,gotennet,mlp,schnet,painn,ignn,tgnn}
  BF16_MODELS=${BF16_MODELS:-et,gotennet}
  HOST_MODELS=${HOST_MODELS:-chemprop,egnn,mlp,schnet}
  # each end-to-end GPU test's command is a fresh interpreter there (tests/helpers/door_helpers.py):
  # the tests took 118 s on 14 workers of an H200 machine's 16 cores
  TESTS_S=${TESTS_S:-210} EPOCHS_S=${EPOCHS_S:-260} MODEL_S=${MODEL_S:-35}
  EXTRA=()
  TESTS_K=${TESTS_K:-}
fi
SEEDS_MODEL=${SEEDS_MODEL:-egnn}
BF16_S=${BF16_S:-$EPOCHS_S} HOST_S=${HOST_S:-$EPOCHS_S} SEEDS_S=${SEEDS_S:-$EPOCHS_S}
started=$SECONDS
step() { printf '[gpu_check %4ds] %s\n' $((SECONDS - started)) "$*" | tee -a "$OUT/steps.log"; }

versions() {
  $PY - <<'EOF'
import importlib.metadata as m, platform, torch
print("python", platform.python_version())
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", p.name, f"{p.total_memory / 2**30:.0f} GiB", p.multi_processor_count, "SMs")
for name in ("lightning", "torch-geometric", "rdkit", "hydra-core", "numpy", "e3nn", "transformers"):
    try:
        print(name, m.version(name))
    except m.PackageNotFoundError:
        print(name, "missing")
EOF
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader
  echo "cores $(nproc)"
}

tests() {
  step "GPU tests (${TESTS_S} s at most)${TESTS_K:+: -k $TESTS_K}"
  local parallel=() select=()
  local workers=$(($(nproc) > 4 ? $(nproc) - 2 : 2))  # 14 on a 16-core machine
  $PY -c "import xdist" 2>/dev/null && parallel=(-n "${TEST_WORKERS:-$workers}")
  [[ -n $TESTS_K ]] && select=(-k "$TESTS_K")
  # -v: each test's outcome on its own line, so a step cut short still names its failures
  timeout -k 5 "$TESTS_S" $PY -m pytest -v -rfE -p no:cacheprovider "${parallel[@]}" \
    --junitxml="$OUT/gpu_tests.xml" tests/e2e/test_gpu_path.py "${select[@]}" \
    >"$OUT/gpu_tests.log" 2>&1
  echo "exit $?" >>"$OUT/gpu_tests.log"
  grep -E "FAILED|ERROR" "$OUT/gpu_tests.log" | head -n 20
  tail -n 3 "$OUT/gpu_tests.log"
}

# epochs NAME LIMIT MODELS [train.py overrides...]: each model's epochs on csd10k_density
epochs() {
  local name=$1 limit=$2 models=$3
  shift 3
  step "$name on csd10k_density: $models $* (${MODEL_S} s of training each, $limit s in all)"
  timeout -k 5 "$limit" $PY -m bench.gpu_epochs --device "$DEVICE" --tasks csd10k_density \
    --models "$models" --epochs 3 --budget-s "$MODEL_S" --out "$OUT/$name.json" \
    "${EXTRA[@]}" "$@" >"$OUT/$name.md" 2>"$OUT/$name.err"
  echo "exit $?" >>"$OUT/$name.err"
  cat "$OUT/$name.md"
}

# three seeds of one model as three processes sharing the device, then seed 0 alone: what
# one device gives several seeds at once
seeds() {
  step "seeds: $SEEDS_MODEL, seeds 0,1,2 side by side, then seed 0 alone"
  local pids=() seed threads=$(($(nproc) / 3 > 0 ? $(nproc) / 3 : 1))
  for seed in 0 1 2; do
    timeout -k 5 "$SEEDS_S" $PY -m bench.gpu_epochs --device "$DEVICE" --tasks csd10k_density \
      --models "$SEEDS_MODEL" --epochs 3 --budget-s "$MODEL_S" --out "$OUT/seeds$seed.json" \
      --threads "$threads" --no-grid "${EXTRA[@]}" "seed=$seed" >"$OUT/seeds$seed.md" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  timeout -k 5 "$SEEDS_S" $PY -m bench.gpu_epochs --device "$DEVICE" --tasks csd10k_density \
    --models "$SEEDS_MODEL" --epochs 3 --budget-s "$MODEL_S" --out "$OUT/seed_alone.json" \
    --threads "$threads" --no-grid "${EXTRA[@]}" seed=0 >"$OUT/seed_alone.md" 2>&1
  grep -h "^| $SEEDS_MODEL | csd10k_density" "$OUT"/seeds?.md "$OUT/seed_alone.md"
}

step "versions"
versions >"$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"
sampler=
if command -v nvidia-smi >/dev/null && ((!DRY)); then
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,nounits \
    -lms 500 >"$OUT/nvidia_smi.csv" 2>/dev/null &
  sampler=$!
fi
for name in "${STEPS[@]}"; do
  case $name in
    tests) tests ;;
    epochs) epochs epochs "$EPOCHS_S" "$MODELS" ;;
    epochs-bf16) epochs epochs-bf16 "$BF16_S" "$BF16_MODELS" --no-grid trainer.precision=bf16-mixed ;;
    epochs-host) epochs epochs-host "$HOST_S" "$HOST_MODELS" --no-grid data_on_device=false ;;
    seeds) seeds ;;
    *) echo "gpu_check: no step '$name' (tests, epochs, epochs-bf16, epochs-host, seeds)" >&2
       exit 2 ;;
  esac
done
[[ -n $sampler ]] && kill "$sampler" 2>/dev/null
step "report"
$PY -m bench.gpu_report "$OUT" >"$OUT/report.md" 2>"$OUT/report.err" || cat "$OUT/report.err"
step "done"
# a call brings back at most 8 files: report.md, and everything in one archive
(cd "$OUT" && find . -maxdepth 1 -type f ! -name report.md ! -name check.tar.gz -printf '%P\n' |
  tar -czf check.tar.gz -T - --remove-files)
