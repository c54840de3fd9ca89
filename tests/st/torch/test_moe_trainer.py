# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: MoE models through the trainer (``LLMTrainer``, what ``hp-train`` runs) on 2 gloo ranks against one process:
qwen3_moe (auxiliary-loss balancing) under TP + SP, with and without expert tensor parallelism (``etp = 2``), and under PP with several micro-batches (the router losses
are per micro-batch, like gradient accumulation: equal to one process with ``grad_accum`` = the micro-batch
count); deepseek_v3 (expert bias) under PP over several steps. One process group for all cases."""
import os

from hyper_parallel.testing import multi_rank
from hyper_parallel.trainer.config import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SMALL = [("data.max_corpus_mb", 0.3), ("training.seq_len", 32), ("training.global_batch", 4),
         ("optimizer.total_steps", 100), ("metrics.progress", False), ("metrics.plot", False),
         ("metrics.jsonl", False), ("demo.resume_steps", 0), ("demo.compare_steps", 0), ("checkpoint.enable", False)]


def _run(name, out, cache, extra, grad_accum):
    import torch
    import torch.distributed as dist
    from hyper_parallel.trainer.api import LLMTrainer, derived_config
    cfg = load_config(os.path.join(ROOT, "configs", name),
                      SMALL + [("job.out_dir", out), ("data.cache_dir", cache)] + list(extra))
    history = LLMTrainer(cfg).train()
    if dist.get_rank() == 0:
        single_cfg = derived_config(cfg, parallelism={"dp_shard": -1, "tp": 1, "cp": 1, "ep": 1, "etp": 1, "pp": 1,
                                                      "pp_layers_per_stage": []},
                                    training={"grad_accum": grad_accum}, job={"out_dir": out + "-single"})
        single_trainer = LLMTrainer(single_cfg, distributed=False)
        single_trainer.setup()
        torch.set_num_threads(1)  # the other rank waits at the barrier; 2 threads crawl on a shared machine
        single = single_trainer.train()
        for a, b in zip(history, single):
            for key in ("loss", "grad_norm"):
                assert abs(a[key] - b[key]) <= 2e-5 * abs(b[key]), (name, extra, a["step"], key, a[key], b[key])
    dist.barrier()
    return history


@multi_rank(world_size=2, timeout=900)
def test_moe_models_match_one_process_under_tp_and_pp(tmp_path, trainer_cache_dir):
    cache = trainer_cache_dir
    qwen = [("model.name", "qwen3_moe"), ("model.flavor", "debug"), ("training.steps", 3)]
    _run("tp.toml", str(tmp_path / "tp"), cache, qwen, 1)
    _run("tp.toml", str(tmp_path / "etp"), cache, qwen + [("parallelism.etp", 2)], 1)  # ETP: experts split over tp
    _run("pp.toml", str(tmp_path / "pp"), cache, qwen + [("parallelism.pp_microbatches", 4)], 4)
    deepseek = [("model.name", "deepseek_v3"), ("model.flavor", "debug"), ("training.steps", 4),
                ("parallelism.pp_microbatches", 2)]
    _run("pp.toml", str(tmp_path / "ds"), cache, deepseek, 2)
