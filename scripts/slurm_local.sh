#!/usr/bin/env bash
# A real single-node SLURM cluster on this machine (Debian's slurm-wlm and munge), for
# trying and testing the SLURM launcher: one node (this host, all its CPUs) in one
# partition, `debug`. Everything it writes (config, munge key and socket, state, spool,
# logs, pid files) sits under one folder, and `stop` ends only the daemons it started.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/slurm_local.sh install|start|stop|status|env

  install  apt-get install slurm-wlm and munge where they are missing (root)
  start    write the config and start munged, slurmctld and slurmd (root); waits until
           the node is idle. Does nothing when the cluster already runs.
  stop     cancel this cluster's jobs and stop the daemons that `start` started
  status   the daemons and `sinfo`; exit 0 when the node answers, 3 when not
  env      the variables that point SLURM's commands at this cluster, for
             eval "$(scripts/slurm_local.sh env)"
then e.g.  python train.py -m hydra/launcher=slurm hydra.launcher.partition=debug \
             hydra.launcher.gpus_per_node=0 hydra.launcher.mem_gb=1 model=rf,mlp

Environment: OODMOL_SLURM_DIR (default /tmp/oodmol-slurm) the cluster's folder;
OODMOL_SLURM_PORT (default 6817) slurmctld's port, slurmd takes the next one;
OODMOL_SLURM_TIMEOUT (default 60) seconds to wait for the node.
USAGE
}

dir=${OODMOL_SLURM_DIR:-/tmp/oodmol-slurm}
port=${OODMOL_SLURM_PORT:-6817}
timeout_s=${OODMOL_SLURM_TIMEOUT:-60}
conf=$dir/etc/slurm.conf
socket=$dir/munge/munge.socket.2
host=$(hostname -s)
export SLURM_CONF=$conf
DAEMONS=(munged slurmctld slurmd)

die() {
  echo "slurm_local.sh: $*" >&2
  exit 1
}

# The pid of one of our daemons, if it still runs: its pid file names a live process of
# that program started with this folder's files (a recycled pid is not ours).
running_pid() {
  local name=$1 pid
  pid=$(cat "$dir/run/$name.pid" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$dir/" || return 1
  echo "$pid"
}

node_state() {
  timeout 10 sinfo --noheader --nodes="$host" --format=%t 2>/dev/null | head -n 1
}

cmd_install() {
  local missing=()
  for program in munged slurmctld slurmd sbatch; do
    command -v "$program" >/dev/null || missing+=("$program")
  done
  if ((${#missing[@]} == 0)); then
    echo "SLURM and munge are installed ($(sbatch --version))"
    return
  fi
  ((EUID == 0)) || die "missing ${missing[*]}; installing needs root: apt-get install slurm-wlm munge"
  command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
  export DEBIAN_FRONTEND=noninteractive
  local apt=(timeout 600 apt-get install -y -q --no-install-recommends slurm-wlm munge)
  "${apt[@]}" >/dev/null || { timeout 300 apt-get update -q >/dev/null && "${apt[@]}" >/dev/null; } ||
    die "apt-get could not install slurm-wlm and munge"
  echo "installed $(sbatch --version)"
}

write_config() {
  local node cpus memory
  node=$(slurmd -C | head -n 1)
  cpus=$(grep -o 'CPUs=[0-9]*' <<<"$node" | cut -d= -f2)
  memory=$(grep -o 'RealMemory=[0-9]*' <<<"$node" | cut -d= -f2)
  mkdir -p "$dir"/{etc,munge,run,log,state,spool}
  chmod 700 "$dir/munge"
  cat >"$conf" <<CONF
# Written by scripts/slurm_local.sh: one node, no accounting database (sacct answers
# nothing, so submitit warns that job states may be inaccurate and reads results from
# its files instead).
ClusterName=oodmol-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/slurmd-%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
PlugStackConfig=$dir/etc/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
MailProg=/bin/true
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
KillWait=30
MinJobAge=600
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
  : >"$dir/etc/plugstack.conf" # no SPANK plugins (not the system's /etc/slurm one)
  if [[ ! -s $dir/munge/munge.key ]]; then
    (umask 077 && head -c 1024 /dev/urandom >"$dir/munge/munge.key")
  fi
}

start_daemon() {
  local name=$1
  shift
  if running_pid "$name" >/dev/null; then return; fi
  "$@" || die "$name did not start; see $dir/log/$name.log"
}

cmd_start() {
  ((EUID == 0)) || die "start needs root (slurmd runs jobs as their users)"
  for program in munged slurmctld slurmd sinfo; do
    command -v "$program" >/dev/null || die "$program is missing; run: $0 install"
  done
  local all_up=1
  for name in "${DAEMONS[@]}"; do running_pid "$name" >/dev/null || all_up=0; done
  if ((all_up)) && [[ $(node_state) =~ ^(idle|mix|alloc) ]]; then
    echo "the cluster already runs ($dir): node $host $(node_state)"
    return
  fi
  write_config
  start_daemon munged munged --force --key-file="$dir/munge/munge.key" --socket="$socket" \
    --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed"
  start_daemon slurmctld slurmctld -f "$conf"
  start_daemon slurmd slurmd -f "$conf"
  local deadline=$((SECONDS + timeout_s)) state=""
  until [[ $state =~ ^(idle|mix|alloc) ]]; do
    if ((SECONDS > deadline)); then
      for log in "$dir"/log/*.log; do
        echo "--- $log" >&2
        tail -n 15 "$log" >&2
      done
      die "node $host is not up after ${timeout_s}s (state: ${state:-no answer})"
    fi
    sleep 0.5
    state=$(node_state)
  done
  echo "the cluster runs ($dir): node $host $state; point SLURM's commands at it with"
  echo "  export SLURM_CONF=$conf"
}

cmd_stop() {
  if running_pid slurmctld >/dev/null; then
    local jobs
    jobs=$(timeout 10 squeue --noheader --format=%A 2>/dev/null | sort -u | tr '\n' ' ')
    if [[ -n ${jobs// /} ]]; then
      # shellcheck disable=SC2086 # one argument per job id
      timeout 10 scancel $jobs || true
      local deadline=$((SECONDS + 40))
      while [[ -n $(timeout 10 squeue --noheader 2>/dev/null) ]] && ((SECONDS < deadline)); do
        sleep 0.5
      done
    fi
  fi
  for name in slurmd slurmctld munged; do
    local pid
    pid=$(running_pid "$name") || continue
    kill "$pid"
    for _ in {1..100}; do
      running_pid "$name" >/dev/null || break
      sleep 0.1
    done
    if running_pid "$name" >/dev/null; then kill -KILL "$pid"; fi
    echo "stopped $name ($pid)"
  done
}

cmd_status() {
  local up=0
  for name in "${DAEMONS[@]}"; do
    local pid
    if pid=$(running_pid "$name"); then echo "$name: running ($pid)"; else echo "$name: not running"; fi
  done
  if [[ -f $conf ]] && running_pid slurmctld >/dev/null && timeout 10 sinfo 2>/dev/null; then
    up=1
  fi
  ((up)) || {
    echo "the cluster in $dir is not up (start it with: $0 start)"
    exit 3
  }
}

case ${1:-} in
  install) cmd_install ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) echo "export SLURM_CONF=$conf" ;;
  -h | --help) usage ;;
  *)
    usage >&2
    exit 2
    ;;
esac
