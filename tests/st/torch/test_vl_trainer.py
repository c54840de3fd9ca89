# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""VLTrainer on 2 gloo ranks: Qwen3-VL (debug flavor) under FSDP, Qwen3-VL-MoE under FSDP x EP and under TP
(experts whole on each TP rank), Qwen3.5-VL under TP (both layer kinds; packed rows: the document mask resets the
linear-attention state) and under PP (Mpipe: its hybrid decoder stages), trained on the generated image-caption set through a processor folder written offline,
checkpointed; the losses equal one process training the same global batches (the other layouts: the composition
matrix's rows)."""
import os

import pytest

from hyper_parallel.testing import multi_rank
from hyper_parallel.trainer.config import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(scope="module")
def vl_folder(tmp_path_factory):
    from hyper_parallel.trainer.vl_data import draw_caption_set
    from hyper_parallel.trainer.vl_sft import make_vl_processor, vl_texts
    folder = tmp_path_factory.mktemp("vl_data")
    captions = draw_caption_set(folder / "set", n=20, seed=3)
    make_vl_processor(folder / "processor", vl_texts(captions))
    return str(folder)


def _config(folder, out, **par):
    overrides = [("data.paths", [os.path.join(folder, "set", "captions.jsonl")]),
                 ("data.processor", "hf:" + os.path.join(folder, "processor")), ("job.out_dir", out),
                 ("training.steps", 3), ("metrics.progress", False), ("metrics.plot", False),
                 ("metrics.eval_every", 3), ("checkpoint.interval", 3), ("demo.compare_steps", 0)]
    overrides += [(f"parallelism.{k}", v) for k, v in par.items()]
    return load_config(os.path.join(ROOT, "configs", "vl_demo.toml"), overrides)


LAYOUTS = {"fsdp": {"dp_shard": 2}, "moe_ep": {"dp_shard": 2, "ep": 2}, "moe_tp": {"dp_shard": 1, "tp": 2},
           "qwen3_5_tp": {"dp_shard": 1, "tp": 2},
           # pipeline parallel: the vision encoder on stage 0 with layers 0-1 (GPipe), or alone ahead (Mpipe)
           "pp_stage0_gpipe": {"dp_shard": 1, "pp": 2, "pp_schedule": "GPipe"},
           "pp_mpipe": {"dp_shard": 1, "pp": 2, "vl_encoder": "mpipe"},
           "pp_stage0_moe": {"dp_shard": 1, "pp": 2},
           "pp_mpipe_moe": {"dp_shard": 1, "pp": 2, "vl_encoder": "mpipe"},
           # Qwen3.5-VL's hybrid decoder in the language-model stage (packed rows: per-document positions)
           "pp_mpipe_qwen3_5": {"dp_shard": 1, "pp": 2, "vl_encoder": "mpipe"}}
MODELS = {"moe_ep": "qwen3_vl_moe", "moe_tp": "qwen3_vl_moe", "qwen3_5_tp": "qwen3_5_vl",
          "pp_stage0_moe": "qwen3_vl_moe", "pp_mpipe_moe": "qwen3_vl_moe", "pp_mpipe_qwen3_5": "qwen3_5_vl"}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@multi_rank(world_size=2, timeout=300)
def test_vl_trainer_two_ranks_equal_one_process(tmp_path, vl_folder, layout):
    """Losses (training and held out) equal one process; under PP also every final parameter (the stages'
    parameters gathered by name; the one-process run keeps its model)."""
    import torch.distributed as dist
    from hyper_parallel.devtools.composition import full_parameters
    from hyper_parallel.trainer.api import derived_config
    from hyper_parallel.trainer.vl import VLTrainer, trainer_class
    cfg = _config(vl_folder, str(tmp_path / layout), **LAYOUTS[layout])
    cfg.optimizer["eps"] = 1e-3  # the matrix's AdamW eps: last-bit gradient rounding stays last-bit in the weights
    cfg.model.name = MODELS.get(layout, cfg.model.name)
    assert trainer_class(cfg) is VLTrainer
    trainer = VLTrainer(cfg)
    history = trainer.train()
    assert [m["step"] for m in history] == [1, 2, 3] and "eval_loss" in history[2]
    assert all(m["grad_norm"] > 0 for m in history)
    trainer.checkpointer.wait()
    assert trainer.checkpointer.latest_step() == 3
    assert trainer.dataset.images >= 10 and trainer.dataset.stats.loss_tokens > 0
    pp = layout.startswith("pp")
    params = full_parameters(trainer.backend.model, True) if pp else {}
    if dist.get_rank() == 0:
        # the MoE routers' auxiliary loss is taken per microbatch: PP with m microbatches is one process with
        # grad_accum = m (contiguous microbatches: Mpipe does not regroup the rows of such a model)
        accum = cfg.parallelism.pp_microbatches if pp and "moe" in layout else 1
        single_cfg = derived_config(cfg, parallelism={"dp_shard": -1, "tp": 1, "ep": 1, "pp": 1,
                                                      "vl_encoder": "stage0"},
                                    training={"grad_accum": accum},
                                    metrics={"jsonl": False, "eval_every": 3 if pp else 0},
                                    checkpoint={"enable": False}, job={"out_dir": str(tmp_path / "single")})
        one = VLTrainer(single_cfg, distributed=False)
        single = one.train()
        for a, b in zip(history, single):
            assert abs(a["loss"] - b["loss"]) <= 2e-5 * abs(b["loss"]), (layout, a["step"], a["loss"], b["loss"])
        if pp:
            assert abs(history[2]["eval_loss"] - single[2]["eval_loss"]) <= 2e-5 * single[2]["eval_loss"], layout
            ref = full_parameters(one.backend.model, False)
            assert set(params) == set(ref), sorted(set(params) ^ set(ref))[:4]
            for name, value in ref.items():  # the matrix's measure: max |a - b| / max |b| per tensor
                err = float((params[name] - value).abs().max() / value.abs().max().clamp(min=1e-12))
                assert err <= 1e-5, (layout, name, err)
        one.close()
    trainer.close()
    dist.barrier()
