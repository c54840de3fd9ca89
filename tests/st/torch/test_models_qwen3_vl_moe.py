# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3-VL-MoE against transformers' ``Qwen3VLMoeForConditionalGeneration`` (one process): real images of two
sizes, a text-only sample, padding and a 4-frame video; logits and every gradient equal; the state dict both
ways bit-exact; every config.json field honoured or refused by name."""
import dataclasses

import pytest
import torch

import transformers
from hyper_parallel.models.qwen3_vl_moe import (FLAVORS, Qwen3VLMoeForConditionalGeneration, config_from_hf,
                                                config_to_hf, from_hf, to_hf)
from tests.st.torch.vl_inputs import vl_batch

TOL = 1e-5


def _config():
    """The debug flavor without the auxiliary loss: transformers' forward adds none, so gradients compare."""
    cfg = FLAVORS["debug"]
    return dataclasses.replace(cfg, text=dataclasses.replace(
        cfg.text, moe=dataclasses.replace(cfg.text.moe, aux_loss_coeff=0.0)))


def _models(seed=0):
    cfg = _config()
    hf_cfg = transformers.Qwen3VLMoeConfig(**config_to_hf(cfg))
    hf_cfg._attn_implementation = "sdpa"  # pylint: disable=protected-access
    torch.manual_seed(seed)
    hf = transformers.Qwen3VLMoeForConditionalGeneration(hf_cfg)
    with torch.no_grad():  # weights large enough that every path (routers and DeepStack included) moves the logits
        for p in hf.parameters():
            p.normal_(0.0, 0.2)
    ours = Qwen3VLMoeForConditionalGeneration(config_from_hf(hf_cfg))
    missing, unexpected = ours.load_state_dict(from_hf(hf.state_dict(), ours.config), strict=True)
    assert not missing and not unexpected
    return cfg, hf, ours


def test_logits_and_gradients_equal_transformers():
    cfg, hf, ours = _models()
    batch = vl_batch(cfg)
    assert len(batch["image_grid_thw"]) == 2 and not torch.equal(*batch["image_grid_thw"])  # two sizes
    ref = hf(**batch).logits
    got = ours(**batch)
    keep = batch["attention_mask"].bool()
    scale = ref[keep].abs().max().detach()
    diff = float((ref[keep] - got[keep]).abs().max().detach() / scale)
    print(f"qwen3_vl_moe logits: max |diff| / max |logit| = {diff:.2e}")
    assert scale > 1.0 and diff <= TOL
    weights = torch.randn_like(ref) * keep[..., None]
    (ref * weights).sum().backward()
    (got * weights).sum().backward()
    theirs = to_hf({n: p.grad for n, p in ours.named_parameters()}, ours.config)
    worst = 0.0
    for name, p in hf.named_parameters():
        assert p.grad is not None and name in theirs, name
        worst = max(worst, float((theirs[name] - p.grad).abs().max() / p.grad.abs().max().clamp_min(1e-3)))
    print(f"qwen3_vl_moe gradients: worst max |diff| / max |grad| = {worst:.2e}")
    assert worst <= TOL and len(theirs) == len(dict(hf.named_parameters()))
    routers = [n for n in theirs if n.endswith("mlp.gate.weight")]
    assert len(routers) == 2 and all(float(theirs[n].abs().max()) > 0 for n in routers)


def test_state_dict_both_ways_bit_exact(tmp_path):
    _, hf, ours = _models(seed=3)
    original = hf.state_dict()
    exported = to_hf(ours.state_dict(), ours.config)
    assert sorted(exported) == sorted(k for k in original if k != "lm_head.weight")  # tied head left out
    assert all(torch.equal(exported[k], original[k]) for k in exported)
    back = from_hf(exported, ours.config)
    assert all(torch.equal(back[k], v) for k, v in ours.state_dict().items())
    hf.save_pretrained(tmp_path / "hf")  # a folder written by transformers reads back to the same model
    loaded = transformers.Qwen3VLMoeForConditionalGeneration.from_pretrained(tmp_path / "hf")
    assert config_from_hf(loaded.config) == ours.config
    with pytest.raises(ValueError, match="expert_bias is not zero"):
        sd = ours.state_dict()
        sd["model.language_model.layers.1.mlp.expert_bias"] = torch.ones(4)
        to_hf(sd, ours.config)


@pytest.mark.parametrize("level, key, value, message", [
    ("text_config", "hidden_act", "gelu", "text_config: config.json hidden_act='gelu' is not supported"),
    ("text_config", "attention_bias", True, "attention_bias=True is not supported"),
    ("text_config", "decoder_sparse_step", 2, "decoder_sparse_step=2 is not supported"),
    ("text_config", "mlp_only_layers", [2], r"mlp_only_layers=\[2\] is not supported"),
    ("text_config", "attention_dropout", 0.1, "attention_dropout=0.1 is not supported"),
    ("text_config", "new_knob", 3, "new_knob=3 is not a field this model knows"),
    ("vision_config", "hidden_act", "relu", "vision_config: config.json hidden_act='relu' is not supported"),
    ("top", "some_flag", True, "some_flag=True is not a field this model knows"),
])
def test_every_field_honoured_or_refused(level, key, value, message):
    hf_dict = transformers.Qwen3VLMoeConfig(**config_to_hf(FLAVORS["debug"])).to_dict()
    assert config_from_hf(hf_dict) == FLAVORS["debug"]  # every field transformers writes is classified
    (hf_dict if level == "top" else hf_dict[level])[key] = value
    with pytest.raises(ValueError, match=message):
        config_from_hf(hf_dict)
