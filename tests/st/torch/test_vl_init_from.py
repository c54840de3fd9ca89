# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""VLTrainer starts from a Hugging Face folder and exports one (``[model] init_from`` / ``[checkpoint]
export_hf``), 2 gloo ranks under FSDP: a Qwen3.5 vision-language model written by transformers'
``save_pretrained`` (random weights, the processor's special token ids) is read shard by shard through the
adapter (packed Gated DeltaNet tensors split), trained one step at learning rate 0 and exported: every exported
tensor equals the original bit for bit (the parameters are allocated uninitialised before the load, so a tensor
the load missed would differ), transformers reads the export back with its processor files, and the model's
name and size come from ``config.json``."""
import json
import os

import pytest
import torch
from safetensors.torch import load_file

import transformers
from hyper_parallel.testing import multi_rank
from hyper_parallel.trainer.config import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _tensors(folder):
    out = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            out.update(load_file(os.path.join(folder, name)))
    return out


@pytest.fixture(scope="module")
def hf_vl_folder(tmp_path_factory):
    """(data folder, an HF Qwen3_5ForConditionalGeneration folder whose token ids and vocabulary fit it)."""
    from hyper_parallel.models import get_model_spec
    from hyper_parallel.trainer.vl_data import draw_caption_set
    from hyper_parallel.trainer.vl_sft import VLProcessor, make_vl_processor, vl_texts
    folder = tmp_path_factory.mktemp("vl_init")
    make_vl_processor(folder / "processor", vl_texts(draw_caption_set(folder / "set", n=12, seed=5)))
    proc = VLProcessor(str(folder / "processor"))
    spec = get_model_spec("qwen3_5_vl")
    cfg = spec.config("debug", vocab_size=-(-proc.vocab_size // 64) * 64, **proc.token_ids)
    hf_cfg = transformers.Qwen3_5Config(**spec.state_dict_adapter(cfg).hf_config())
    torch.manual_seed(0)
    hf = transformers.Qwen3_5ForConditionalGeneration(hf_cfg).float()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("norm.weight") or name.endswith("dt_bias"):
                p.add_(torch.randn_like(p) * 0.3)
    hf.save_pretrained(folder / "hf")
    return str(folder)


@multi_rank(world_size=2, timeout=300)
def test_vl_init_from_hf_and_export_bit_exact(tmp_path, hf_vl_folder):
    import torch.distributed as dist
    from hyper_parallel.trainer.vl import VLTrainer
    out = str(tmp_path / "run")
    overrides = [("model.name", "qwen3_5_vl"), ("model.flavor", "hf"), ("model.init_from", "hf:" + os.path.join(hf_vl_folder, "hf")),
                 ("data.paths", [os.path.join(hf_vl_folder, "set", "captions.jsonl")]),
                 ("data.processor", "hf:" + os.path.join(hf_vl_folder, "processor")), ("job.out_dir", out),
                 ("training.steps", 1), ("optimizer.lr", 0.0), ("optimizer.weight_decay", 0.0),
                 ("metrics.progress", False), ("metrics.plot", False), ("metrics.eval_every", 0),
                 ("checkpoint.enable", False), ("checkpoint.export_hf", True), ("demo.compare_steps", 0)]
    raw = load_config(os.path.join(ROOT, "configs", "vl_demo.toml"), overrides)
    assert raw.model.name == "qwen3_5_vl" and raw.model.flavor == "hf"
    trainer = VLTrainer(raw)
    history = trainer.train()
    assert len(history) == 1 and history[0]["loss"] > 0
    trainer.close()
    if dist.get_rank() == 0:
        exported, original = _tensors(os.path.join(out, "hf")), _tensors(os.path.join(hf_vl_folder, "hf"))
        assert sorted(exported) == sorted(original)
        assert all(torch.equal(exported[k], original[k]) for k in original)
        with open(os.path.join(out, "hf", "config.json"), encoding="utf-8") as fh:
            assert json.load(fh)["architectures"] == ["Qwen3_5ForConditionalGeneration"]
        back = transformers.Qwen3_5ForConditionalGeneration.from_pretrained(os.path.join(out, "hf"))
        assert all(torch.equal(p, original[n]) for n, p in back.state_dict().items() if n in original)
        assert os.path.isfile(os.path.join(out, "hf", "preprocessor_config.json"))
    dist.barrier()
