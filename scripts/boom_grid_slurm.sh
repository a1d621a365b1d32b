#!/usr/bin/env bash
# The full BOOM grid (configs/experiment/boom.yaml) on SLURM through Hydra's submitit
# launcher; configs/hydra/launcher/slurm.yaml requeues jobs that hit their time limit or
# are pre-empted, and a requeued run resumes from its last.ckpt by itself.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/boom_grid_slurm.sh [options] [-- overrides...]

Runs  python train.py -m experiment=boom hydra/launcher=slurm ...  : one SLURM job per
model x task x seed. The command waits until every job has ended, so start it inside
tmux or screen (or with nohup). Fill OODMOL_DATA_DIR first (scripts/prepare_data.sh),
on a disk every node sees.

Options (default: the environment variable, else configs/hydra/launcher/slurm.yaml):
  -p, --partition P  SLURM partition                    (OODMOL_SLURM_PARTITION)
  -A, --account A    account charged for the jobs       (OODMOL_SLURM_ACCOUNT)
  -t, --time MIN     time limit of each job, in minutes (OODMOL_SLURM_TIME)
  -g, --gpus N       GPUs per job; runs use trainer=gpu, or trainer=cpu when N=0
                                                        (OODMOL_SLURM_GPUS)
  -n, --dry-run      print the command and the number of jobs; submit nothing
  -h, --help         show this help
Overrides after -- go to train.py and may change the grid, e.g. -- model=rf,mlp seed=0

Environment: PYTHON (default .venv/bin/python if present, else python).
USAGE
}

partition=${OODMOL_SLURM_PARTITION:-} account=${OODMOL_SLURM_ACCOUNT:-}
time_min=${OODMOL_SLURM_TIME:-} gpus=${OODMOL_SLURM_GPUS:-} dry_run=0
while (($#)); do
  case $1 in
    -p | --partition) partition=${2:?$1 needs a value}; shift 2 ;;
    -A | --account) account=${2:?$1 needs a value}; shift 2 ;;
    -t | --time) time_min=${2:?$1 needs a value}; shift 2 ;;
    -g | --gpus) gpus=${2:?$1 needs a value}; shift 2 ;;
    -n | --dry-run) dry_run=1; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
  esac
done

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -z ${PYTHON:-} ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python; fi
fi

overrides=(experiment=boom hydra/launcher=slurm)
if [[ -n $partition ]]; then overrides+=("hydra.launcher.partition=$partition"); fi
if [[ -n $account ]]; then overrides+=("hydra.launcher.account=$account"); fi
if [[ -n $time_min ]]; then overrides+=("hydra.launcher.timeout_min=$time_min"); fi
if [[ -n $gpus ]]; then overrides+=("hydra.launcher.gpus_per_node=$gpus"); fi
# A GPU job that trained on the CPU would waste its GPU; an explicit trainer= wins.
if [[ " $* " != *" trainer="* ]]; then
  if [[ ${gpus:-1} == 0 ]]; then overrides+=(trainer=cpu); else overrides+=(trainer=gpu); fi
fi
overrides+=("$@")

# The number of jobs as Hydra's basic sweeper forms the grid: the experiment's sweep
# params, each replaced by a command-line override of the same key, times the rest.
count_jobs() {
  "$PYTHON" - "$@" <<'PY'
import math
import sys

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

import oodmol.config  # noqa: F401  (resolves the grid's ${oodmol.tasks:boom})

params = OmegaConf.load("configs/experiment/boom.yaml").hydra.sweeper.params
lines = [f"{key}={value}" for key, value in params.items()] + sys.argv[1:]
sizes = {
    o.get_key_element(): len(list(o.sweep_string_iterator())) if o.is_sweep_override() else 1
    for o in OverridesParser.create().parse_overrides(lines)
}
print(math.prod(sizes.values()))
PY
}

command=("$PYTHON" train.py -m "${overrides[@]}")
if ((dry_run)); then
  printf '%q ' "${command[@]}"
  echo
  echo "$(count_jobs "${overrides[@]}") jobs"
  exit 0
fi
exec "${command[@]}"
