#!/usr/bin/env bash
# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
# A throw-away Slurm cluster on this one host, for testing scripts/slurm/train.sbatch (Debian's slurm-wlm):
# one slurmctld and two slurmd ("nodes" n1 and n2 on 127.0.0.1, private ports), no munge (auth/none), state
# in DIR. Usage:  local_cluster.sh start DIR | stop DIR.  After start, `export SLURM_CONF=DIR/slurm.conf`.
set -euo pipefail
cmd=${1:?start|stop}; dir=$(mkdir -p "${2:?DIR}" && cd "$2" && pwd)
base=${HP_SLURM_PORT:-$((17000 + RANDOM % 2000))}
case "$cmd" in
start)
  mkdir -p "$dir/state" "$dir/spool/n1" "$dir/spool/n2" "$dir/log"
  cpus=$(nproc); mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 4 ))
  cat > "$dir/slurm.conf" <<CONF
ClusterName=hp
SlurmctldHost=$(hostname)(127.0.0.1)
SlurmctldPort=$base
SlurmdPort=$((base + 1))
SlurmUser=$(id -un)
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
MpiDefault=none
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
InactiveLimit=0
KillWait=5
NodeName=n1 NodeHostname=$(hostname) NodeAddr=127.0.0.1 Port=$((base + 2)) CPUs=$cpus RealMemory=$mem State=UNKNOWN
NodeName=n2 NodeHostname=$(hostname) NodeAddr=127.0.0.1 Port=$((base + 3)) CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=30 State=UP OverSubscribe=FORCE:4
CONF
  export SLURM_CONF=$dir/slurm.conf
  slurmctld -i -f "$SLURM_CONF"
  slurmd -N n1 -f "$SLURM_CONF"
  slurmd -N n2 -f "$SLURM_CONF"
  for _ in $(seq 60); do
    if sinfo -h -o '%T' 2>/dev/null | grep -qx idle && [ "$(sinfo -h -N -o '%T' | grep -c idle)" = 2 ]; then
      echo "slurm: 2 nodes idle (SLURM_CONF=$SLURM_CONF)"; exit 0
    fi
    sleep 1
  done
  echo "slurm: nodes did not come up; see $dir/log" >&2; sinfo -N >&2 || true; exit 1 ;;
stop)
  for f in "$dir"/slurmd-*.pid "$dir"/slurmctld.pid; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done ;;
esac
