#!/usr/bin/env bash
# Build every task's data ahead of a sweep: download (or read offline) and validate the
# sources, write the split files and the feature caches, so that the sweep's jobs only
# read them instead of racing to build them.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/prepare_data.sh [options] [-- overrides...]

For every task and split, runs
  oodmol data prepare task=<task> split=<split> featurizers=[<featurizers>]
which validates the task's data, writes its split file and builds its feature caches
under OODMOL_DATA_DIR (default: data/, see data/README.md).

Options (comma-separated lists of names from configs/):
  -t, --tasks T        tasks (default: those of configs/experiment/boom.yaml)
  -s, --splits S       splits (default: ood)
  -f, --featurizers F  featurizers (default: descriptors)
  -h, --help           show this help
Overrides after -- go to every command, e.g. -- threads=8 progress=false

Environment: PYTHON (default .venv/bin/python if present, else python),
OODMOL_SOURCE_DIR (offline copies of the sources), OODMOL_DATA_DIR.
Example: scripts/prepare_data.sh -t qm9_homo,lipophilicity -s ood,scaffold -f descriptors,graph3d
USAGE
}

tasks="" splits=ood featurizers=descriptors
while (($#)); do
  case $1 in
    -t | --tasks) tasks=${2:?$1 needs a value}; shift 2 ;;
    -s | --splits) splits=${2:?$1 needs a value}; shift 2 ;;
    -f | --featurizers) featurizers=${2:?$1 needs a value}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
  esac
done

# Paths relative to the caller's folder must keep their meaning after the cd below.
absolute() { if [[ $1 == /* ]]; then echo "$1"; else echo "$PWD/$1"; fi; }
for name in OODMOL_SOURCE_DIR OODMOL_DATA_DIR; do
  if [[ -n ${!name:-} ]]; then export "$name=$(absolute "${!name}")"; fi
done
if [[ ${PYTHON:-} == */* ]]; then PYTHON=$(absolute "$PYTHON"); fi

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -z ${PYTHON:-} ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python; fi
fi
if [[ -z $tasks ]]; then
  tasks=$("$PYTHON" -c 'from oodmol.config import benchmark_tasks
print(",".join(benchmark_tasks("boom")))')
fi

IFS=, read -ra task_list <<<"$tasks"
IFS=, read -ra split_list <<<"$splits"
# Features belong to molecules, not splits: a task's second split reopens its caches.
for task in "${task_list[@]}"; do
  for split in "${split_list[@]}"; do
    echo "== $task / $split: $featurizers"
    "$PYTHON" -m oodmol.cli data prepare "task=$task" "split=$split" "featurizers=[$featurizers]" "$@"
  done
done
