# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Benchmark (not a test): LlamaFactory SFT tokens/s with ``use_hyper_parallel`` (our FSDP, 2 ranks, torchrun)
vs LlamaFactory's own FSDP2 path (``accelerate launch`` with an ``fsdp_version: 2`` config, 2 ranks), same tiny
Llama, same data and hyper-parameters, interleaved rounds. Run with the LlamaFactory venv's python
(``make llamafactory-bench``): ``python benchmarks/integration_llamafactory.py WORK [--rounds 3] [--steps 16]``.

Tokens/s is LlamaFactory's own ``effective_tokens_per_sec`` (non-pad tokens of the dataset x epochs / train
runtime / world size); the ratio is per round (ours / theirs), then the median.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "llamafactory"))
import check  # noqa: E402  # pylint: disable=wrong-import-position

FSDP2_CONFIG = """compute_environment: LOCAL_MACHINE
distributed_type: FSDP
fsdp_config:
  fsdp_version: 2
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_reshard_after_forward: true
  fsdp_state_dict_type: FULL_STATE_DICT
  fsdp_offload_params: false
  fsdp_cpu_ram_efficient_loading: false
mixed_precision: 'no'
machine_rank: 0
main_training_function: main
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
use_cpu: true
"""


def _run(work, name, steps, backend):
    hp = {} if backend == "hyper_parallel" else None
    extra = {"max_steps": steps, "include_effective_tokens_per_second": True}
    check.RUNS[name] = ("llama", 2, hp, None, extra)
    path = check._yaml(work, name, "llama", 2, hp, extra)  # pylint: disable=protected-access
    shutil.rmtree(os.path.join(work, name), ignore_errors=True)
    env = check.lf_env(2)
    bindir = os.path.dirname(sys.executable)
    if backend == "hyper_parallel":
        cmd = [os.path.join(bindir, "llamafactory-cli"), "train", path]
    else:
        env.pop("FORCE_TORCHRUN", None)
        accel = os.path.join(work, "fsdp2.yaml")
        with open(accel, "w", encoding="utf-8") as fh:
            fh.write(FSDP2_CONFIG)
        # LlamaFactory lives in its own venv (.venv-llamafactory), not in the one pylint runs in
        import llamafactory.launcher as launcher  # pylint: disable=import-outside-toplevel,import-error,no-name-in-module,consider-using-from-import
        cmd = [os.path.join(bindir, "accelerate"), "launch", "--config_file", accel, launcher.__file__, path]
    log = os.path.join(work, f"{name}.log")
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as fh:
        proc = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=900, check=False, cwd=work)
    wall = time.perf_counter() - start
    if proc.returncode:
        with open(log, encoding="utf-8") as fh:
            raise RuntimeError(f"{name} exited {proc.returncode}:\n{fh.read()[-4000:]}")
    with open(os.path.join(work, name, "train_results.json"), encoding="utf-8") as fh:
        metrics = json.load(fh)
    losses, _ = check.history(work, name)
    return metrics["effective_tokens_per_sec"], metrics["train_runtime"], wall, losses[-1]


def main(argv: Optional[List[str]] = None) -> None:
    """Interleaved rounds; prints the table and the median ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=16)
    args = parser.parse_args(argv)
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    if not os.path.isdir(os.path.join(work, "models", "llama")):
        subprocess.run([sys.executable, os.path.join(ROOT, "examples", "llamafactory", "make_assets.py"),
                        os.path.join(work, "models")], check=True)
    ratios = []
    print(f"load: {os.getloadavg()}")
    print(f"{'round':>5s} {'backend':>16s} {'tokens/s/rank':>14s} {'train_runtime s':>16s} {'wall s':>8s} "
          f"{'last loss':>10s}")
    for r in range(args.rounds):
        got = {}
        order = ("accelerate_fsdp2", "hyper_parallel") if r % 2 == 0 else ("hyper_parallel", "accelerate_fsdp2")
        for backend in order:
            tps, runtime, wall, loss = _run(work, f"bench_{backend}", args.steps, backend)
            got[backend] = tps
            print(f"{r:5d} {backend:>16s} {tps:14.1f} {runtime:16.2f} {wall:8.1f} {loss:10.4f}", flush=True)
        ratios.append(got["hyper_parallel"] / got["accelerate_fsdp2"])
    print(f"\ntokens/s ratio hyper_parallel / accelerate FSDP2 per round: {[round(x, 3) for x in ratios]}; "
          f"median {statistics.median(ratios):.3f}; load {os.getloadavg()}")


if __name__ == "__main__":
    main()
