#!/usr/bin/env bash
# The device check: one call on a GPU machine measures the GPU path and writes everything
# under $OUT: versions.txt, gpu_tests.log, gpu_epochs.md/.json (seconds per epoch beside
# BOOM's Table 4, utilisation, peak memory), nvidia_smi.csv (utilisation sampled every
# 0.5 s through the whole check), and report.md, which sums them up. Each step has a time
# limit, so the check ends within about CHECK_S seconds whatever fails.
#
#   bench/gpu_pack.sh                       # here: .gpu/ (wheels, source files, caches)
#   OUT=/some/folder bench/gpu_check.sh     # there, in the checkout, with .gpu carried
#   bench/gpu_check.sh --dry-run            # the same steps on this machine's CPU, small
#
# MODELS (comma-separated) and the step limits (TESTS_S, EPOCHS_S, MODEL_S) override the
# defaults; a step that runs out of time keeps what it wrote (gpu_epochs.json resumes).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
DRY=0
[[ ${1:-} == --dry-run ]] && DRY=1
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
if [[ -f .gpu/data.tar.xz ]]; then
  $PY -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='data')" \
    .gpu/data.tar.xz "$OODMOL_DATA_DIR"
fi

if ((DRY)); then
  DEVICE=cpu
  MODELS=${MODELS:-mlp,egnn}
  TESTS_S=${TESTS_S:-300} EPOCHS_S=${EPOCHS_S:-240} MODEL_S=${MODEL_S:-20}
  EXTRA=(max_molecules=600)
  TESTS=(tests/e2e/test_gpu_path.py -k "cpu or tf32_matmuls or default_trainer or matmul")
else
  DEVICE=cuda
  # the models of BOOM's Table 4 first (the goals name Chemprop, EGNN, ET and GotenNet)
  MODELS=${MODELS:-chemprop,egnn,et,gotennet,mlp,schnet,painn,mace,ignn,tgnn,chemberta,modernbert,molformer,graphormer3d,geoformer,dimenetpp,visnet}
  TESTS_S=${TESTS_S:-150} EPOCHS_S=${EPOCHS_S:-260} MODEL_S=${MODEL_S:-35}
  EXTRA=()
  TESTS=(tests/e2e/test_gpu_path.py)
fi
started=$SECONDS
step() { printf '[gpu_check %4ds] %s\n' $((SECONDS - started)) "$*" | tee -a "$OUT/steps.log"; }

step "versions"
{
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
  nproc
} >"$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"

sampler=
if command -v nvidia-smi >/dev/null && ((!DRY)); then
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,nounits \
    -lms 500 >"$OUT/nvidia_smi.csv" 2>/dev/null &
  sampler=$!
fi

step "GPU tests (${TESTS_S} s at most)"
parallel=()
$PY -c "import xdist" 2>/dev/null && parallel=(-n "${TEST_WORKERS:-12}")
timeout -k 5 "$TESTS_S" $PY -m pytest -q -p no:cacheprovider "${parallel[@]}" "${TESTS[@]}" \
  >"$OUT/gpu_tests.log" 2>&1
echo "exit $?" >>"$OUT/gpu_tests.log"
tail -n 15 "$OUT/gpu_tests.log"

step "epochs on csd10k_density: $MODELS (${MODEL_S} s of training each, ${EPOCHS_S} s in all)"
timeout -k 5 "$EPOCHS_S" $PY -m bench.gpu_epochs --device "$DEVICE" --tasks csd10k_density \
  --models "$MODELS" --epochs 3 --budget-s "$MODEL_S" --out "$OUT/gpu_epochs.json" \
  "${EXTRA[@]}" >"$OUT/gpu_epochs.md" 2>"$OUT/gpu_epochs.err"
echo "exit $?" >>"$OUT/gpu_epochs.err"
cat "$OUT/gpu_epochs.md"

[[ -n $sampler ]] && kill "$sampler" 2>/dev/null
step "report"
{
  echo "# Device check, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo '```'
  cat "$OUT/versions.txt"
  echo '```'
  echo "## GPU tests"
  echo '```'
  tail -n 25 "$OUT/gpu_tests.log"
  echo '```'
  echo "## Epochs"
  cat "$OUT/gpu_epochs.md"
  echo '```'
  tail -n 5 "$OUT/gpu_epochs.err"
  echo '```'
  echo "## Steps"
  echo '```'
  cat "$OUT/steps.log"
  echo '```'
} >"$OUT/report.md"
step "done"
