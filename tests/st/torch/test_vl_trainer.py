# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""VLTrainer on 2 gloo ranks: Qwen3-VL (debug flavor) under FSDP, Qwen3-VL-MoE under FSDP x EP and under TP
(experts whole on each TP rank), Qwen3.5-VL under TP (both layer kinds; packed rows: the document mask resets the
linear-attention state), trained on the generated image-caption set through a processor folder written offline,
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


@pytest.mark.parametrize("layout", ["fsdp", "moe_ep", "moe_tp", "qwen3_5_tp"])
@multi_rank(world_size=2, timeout=300)
def test_vl_trainer_two_ranks_equal_one_process(tmp_path, vl_folder, layout):
    import torch.distributed as dist
    from hyper_parallel.trainer.api import derived_config
    from hyper_parallel.trainer.vl import VLTrainer, trainer_class
    par = {"fsdp": {"dp_shard": 2}, "moe_ep": {"dp_shard": 2, "ep": 2}, "moe_tp": {"dp_shard": 1, "tp": 2},
           "qwen3_5_tp": {"dp_shard": 1, "tp": 2}}
    cfg = _config(vl_folder, str(tmp_path / layout), **par[layout])
    cfg.model.name = {"moe_ep": "qwen3_vl_moe", "moe_tp": "qwen3_vl_moe", "qwen3_5_tp": "qwen3_5_vl"}.get(
        layout, cfg.model.name)
    assert trainer_class(cfg) is VLTrainer
    trainer = VLTrainer(cfg)
    history = trainer.train()
    assert [m["step"] for m in history] == [1, 2, 3] and "eval_loss" in history[2]
    assert all(m["grad_norm"] > 0 for m in history)
    trainer.checkpointer.wait()
    assert trainer.checkpointer.latest_step() == 3
    assert trainer.dataset.images >= 10 and trainer.dataset.stats.loss_tokens > 0
    if dist.get_rank() == 0:
        single_cfg = derived_config(cfg, parallelism={"dp_shard": -1, "tp": 1, "ep": 1},
                                    metrics={"jsonl": False, "eval_every": 0}, checkpoint={"enable": False},
                                    job={"out_dir": str(tmp_path / "single")})
        single = VLTrainer(single_cfg, distributed=False).train()
        for a, b in zip(history, single):
            assert abs(a["loss"] - b["loss"]) <= 2e-5 * abs(b["loss"]), (layout, a["step"], a["loss"], b["loss"])
    trainer.close()
    dist.barrier()
