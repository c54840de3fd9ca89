# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: MoE models through the trainer (``LLMTrainer``, what ``hp-train`` runs) on 2 gloo ranks against one process:
qwen3_moe (auxiliary-loss balancing) under TP + SP, with and without expert tensor parallelism (``etp = 2``), and under PP with several micro-batches (the router losses
are per micro-batch, like gradient accumulation: equal to one process with ``grad_accum`` = the micro-batch
count); deepseek_v3 (expert bias) under PP over several steps; qwen3_moe under FSDP x EP x gradient accumulation, whose
ranks' micro-batches together are one process's micro-batches (``DistributedBatchLoader(micro_batches=...)``),
equal in final parameters to one process with the same ``grad_accum`` and, as a control, not to one process without
accumulation (the semantics matter). One process group for all cases."""
import os

from hyper_parallel.testing import multi_rank
from hyper_parallel.trainer.config import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SMALL = [("data.max_corpus_mb", 0.3), ("training.seq_len", 32), ("training.global_batch", 4),
         ("optimizer.total_steps", 100), ("metrics.progress", False), ("metrics.plot", False),
         ("metrics.jsonl", False), ("demo.resume_steps", 0), ("demo.compare_steps", 0), ("checkpoint.enable", False),
         ("optimizer.eps", 1e-3)]  # as the composition matrix: AdamW's update stays linear in tiny gradients, so the
#                                    final-parameter check sees real errors, not last-bit rounding turned lr-sized


def _param_err(params, ref):
    """Worst relative error (max |a-b| / max |b|) over the parameters of two full state dicts."""
    assert set(params) == set(ref)
    return max(float((params[k].double() - v.double()).abs().max() / v.double().abs().max().clamp(min=1e-12))
               for k, v in ref.items())


def _single(cfg, out, grad_accum):
    import torch
    from hyper_parallel.devtools.composition import full_parameters
    from hyper_parallel.trainer.api import LLMTrainer, derived_config
    single_cfg = derived_config(cfg, parallelism={"dp_shard": -1, "tp": 1, "cp": 1, "ep": 1, "etp": 1, "pp": 1,
                                                  "pp_layers_per_stage": []},
                                training={"grad_accum": grad_accum}, job={"out_dir": out})
    single_trainer = LLMTrainer(single_cfg, distributed=False)
    single_trainer.setup()
    torch.set_num_threads(1)  # the other rank waits at the barrier; 2 threads crawl on a shared machine
    history = single_trainer.train()
    return history, full_parameters(single_trainer.backend.model, False)


def _run(name, out, cache, extra, grad_accum, control_accum=None):
    """The layout of ``configs/name`` + ``extra`` vs one process with ``grad_accum``: losses and grad norms within
    2e-5, final parameters within 1e-5. ``control_accum``: one process with that ``grad_accum`` must NOT match
    (final parameters off by more than 1e-4): the micro-batch cut changes the training."""
    import torch.distributed as dist
    from hyper_parallel.devtools.composition import full_parameters
    from hyper_parallel.trainer.api import LLMTrainer
    cfg = load_config(os.path.join(ROOT, "configs", name),
                      SMALL + [("job.out_dir", out), ("data.cache_dir", cache)] + list(extra))
    trainer = LLMTrainer(cfg)
    history = trainer.train()
    params = full_parameters(trainer.backend.model, True)
    if dist.get_rank() == 0:
        single, single_params = _single(cfg, out + "-single", grad_accum)
        for a, b in zip(history, single):
            for key in ("loss", "grad_norm"):
                assert abs(a[key] - b[key]) <= 2e-5 * abs(b[key]), (name, extra, a["step"], key, a[key], b[key])
        err = _param_err(params, single_params)
        assert err <= 1e-5, (name, extra, "final parameters", err)
        if control_accum is not None:
            control = _param_err(params, _single(cfg, out + "-control", control_accum)[1])
            assert control > 1e-4, (name, extra, f"grad_accum={control_accum} should differ", control)
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
    fsdp_ep_ga = qwen + [("parallelism.tp", 1), ("parallelism.dp_shard", 2), ("parallelism.ep", 2),
                         ("training.grad_accum", 2)]
    _run("tp.toml", str(tmp_path / "ga"), cache, fsdp_ep_ga, 2, control_accum=1)
