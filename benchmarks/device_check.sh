#!/usr/bin/env bash
# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
#
# The first look at a machine with CUDA GPUs, in at most 10 minutes: DTensor / op parity on the GPUs (NCCL), TP,
# FSDP, PP, EP and CP through hp-train on the debug configs, each against one process (the trainer's own
# comparison: --demo.compare_steps), and the side-by-side benchmarks (ours over torch's); one summary table at
# the end. On a machine without a CUDA GPU it prints one line and exits 0.
#
#   bash benchmarks/device_check.sh            # from the repository root, in the environment of `make install`
#
# Env: PYTHON (default .venv/bin/python, else python3), NPROC (ranks, default min(GPUs, 2)), OUT (run folder).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() and torch.cuda.device_count() > 0 else 1)' \
    2>/dev/null; then
  echo "device_check: no CUDA GPU on this machine (torch.cuda.is_available() is False); nothing to check"
  exit 0
fi
gpus=$("$PY" -c 'import torch; print(torch.cuda.device_count())')
NPROC=${NPROC:-$(( gpus < 2 ? gpus : 2 ))}
OUT=${OUT:-runs/device_check}
mkdir -p "$OUT"
rows=()
start_all=$SECONDS

run() {  # run NAME TIMEOUT CMD...: one row of the summary (status, seconds, the last line worth reading)
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS log="$OUT/$name.log" status
  timeout "$limit" "$@" >"$log" 2>&1
  case $? in 0) status=PASS ;; 124) status=TIMEOUT ;; *) status=FAIL ;; esac
  local note
  note=$(grep -E 'PARITY|demo checks|DEMO CHECK|ratio|x torch|ours/torch|error' "$log" | tail -n 1 | cut -c1-70)
  rows+=("$(printf '%-22s %-8s %6ss  %s' "$name" "$status" "$((SECONDS - t0))" "$note")")
  echo "device_check: $name $status ($((SECONDS - t0)) s, log $log)"
}

hp_train() {  # hp_train NAME CONFIG OVERRIDES...: 3 steps on NPROC ranks against one process
  local name=$1 config=$2; shift 2
  run "$name" 90 "$PY" -m hyper_parallel.trainer.cli --config "configs/$config" --job.nproc "$NPROC" \
    --training.steps 3 --demo.resume_steps 0 --demo.compare_steps 3 --checkpoint.enable false \
    --metrics.progress false --metrics.plot false --metrics.eval_every 0 --job.out_dir "$OUT/$name" "$@"
}

echo "device_check: $gpus GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1); $NPROC ranks"
run dtensor-op-parity 90 "$PY" -m torch.distributed.run --standalone --nproc_per_node "$NPROC" benchmarks/device_check.py
hp_train tp tp.toml --parallelism.tp "$NPROC" --parallelism.dp_shard 1
hp_train fsdp tp.toml --parallelism.tp 1 --parallelism.dp_shard "$NPROC"
hp_train pp pp.toml --parallelism.pp "$NPROC" --parallelism.dp_shard 1
hp_train ep-fsdp demo.toml --parallelism.ep "$NPROC" --training.steps 3
hp_train cp cp.toml --parallelism.cp "$NPROC" --parallelism.dp_shard 1
# side by side, ours over torch's (these benchmarks build CPU meshes today: their numbers are gloo, not NCCL)
run bench-redistribute 45 "$PY" benchmarks/redistribute.py
run bench-fsdp 60 "$PY" benchmarks/fsdp.py
run bench-tp 60 "$PY" benchmarks/tp.py

echo
echo "device_check summary ($gpus GPU(s), $NPROC ranks, $((SECONDS - start_all)) s)"
printf '%-22s %-8s %7s  %s\n' check status time note
printf '%s\n' "${rows[@]}"
printf '%s\n' "${rows[@]}" | grep -qv ' PASS ' && exit 1
exit 0
