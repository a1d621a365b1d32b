#!/usr/bin/env bash
# Packs what bench/gpu_check.sh needs on a GPU machine without network into .gpu/ (git
# ignored through .git/info/exclude): the cp312 wheels that machine lacks, the 10k set's
# source files, and the data caches (validated table, split, feature caches) built here,
# so the device's minutes go to training, not to featurising. A call carries
# .gpu/whl, .gpu/source and .gpu/data.tar.xz (about 58 MB of the 64 MiB a call may carry).
#
#   bench/gpu_pack.sh            # OODMOL_SOURCE_DIR: the offline copies (../shared/data)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$PWD/.venv/bin/python}
PACK=.gpu
[[ -n ${OODMOL_SOURCE_DIR:-} ]] ||
  { echo "gpu_pack: set OODMOL_SOURCE_DIR to the offline copies of the data sets" >&2; exit 2; }
grep -qx "/$PACK/" .git/info/exclude 2>/dev/null || echo "/$PACK/" >>.git/info/exclude
mkdir -p "$PACK/whl" "$PACK/source/csd10k" "$PACK/source/lipophilicity"

# The versions this checkout runs with, so caches keyed by RDKit's version stay valid there.
version() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
# tblite and dftd4 (and their cffi) for the physics featuriser's models
wheels=(hydra-core omegaconf rdkit lmdb selfies torch-optimizer pytorch-ranger tblite dftd4 cffi
  pycparser)
specs=()
for name in "${wheels[@]}"; do specs+=("$name==$(version "$name")"); done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$PACK/whl" "${specs[@]}"
# antlr4-python3-runtime ships as a source distribution only
(cd "$PACK/whl" && python3 -m pip wheel -q --no-deps "antlr4-python3-runtime==$(version antlr4-python3-runtime)")

cp "$OODMOL_SOURCE_DIR"/csd10k/*.csv "$PACK/source/csd10k/"
cp "$OODMOL_SOURCE_DIR"/lipophilicity/*.csv "$PACK/source/lipophilicity/"
OODMOL_DATA_DIR=$PWD/$PACK/data "$PY" -m oodmol.cli data prepare task=csd10k_density \
  featurizers=[graph3d,graph2d,descriptors,tokens] progress=false
# compressed (about 11 MB for 300 MB of caches): carry .gpu/whl, .gpu/source, .gpu/data.tar.xz
tar -C "$PACK/data" --exclude='*.lock' -cf - . | xz -6 -T0 >"$PACK/data.tar.xz"
du -sh --apparent-size "$PACK/whl" "$PACK/source" "$PACK/data.tar.xz"
