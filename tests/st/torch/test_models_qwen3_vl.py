# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3-VL against transformers' ``Qwen3VLForConditionalGeneration`` (the numerical reference), one process:
real images (drawn with Pillow, preprocessed by transformers' Qwen2-VL image processor) of two sizes in one
sample, a text-only sample, left and right padding, and a video of four frames; logits and every gradient
equal; the configuration round-trips; unsupported settings are refused by name."""
import dataclasses

import pytest
import torch

import transformers
from hyper_parallel.models.qwen3_vl import (FLAVORS, Qwen3VLForConditionalGeneration, config_from_hf, config_to_hf,
                                            rope_index)
from hyper_parallel.models.qwen3_vl.state_dict_adapter import hf_state_dict, vision_qkv_from_hf
from tests.st.torch.vl_inputs import vl_batch as _batch

def _models(seed=0):
    cfg = FLAVORS["debug"]
    hf_cfg = transformers.Qwen3VLConfig(**config_to_hf(cfg))
    hf_cfg._attn_implementation = "sdpa"  # pylint: disable=protected-access
    torch.manual_seed(seed)
    hf = transformers.Qwen3VLForConditionalGeneration(hf_cfg)
    with torch.no_grad():  # weights large enough that every path (DeepStack included) moves the logits
        for p in hf.parameters():
            p.normal_(0.0, 0.2)
    ours = Qwen3VLForConditionalGeneration(config_from_hf(hf_cfg))
    missing, unexpected = ours.load_state_dict(vision_qkv_from_hf(hf.state_dict()), strict=True)
    assert not missing and not unexpected
    return cfg, hf, ours


def test_logits_and_gradients_equal_transformers_with_images_text_and_video():
    cfg, hf, ours = _models()
    batch = _batch(cfg)
    ref = hf(**batch).logits
    got = ours(**batch)
    keep = batch["attention_mask"].bool()
    scale = ref[keep].abs().max()
    assert scale > 1.0
    print("logits: max |diff| / max |logit| =", float((ref[keep] - got[keep]).abs().max().detach() / scale))
    assert (ref[keep] - got[keep]).abs().max() <= 1e-5 * scale
    weights = torch.randn_like(ref) * keep[..., None]
    (ref * weights).sum().backward()
    (got * weights).sum().backward()
    theirs = vision_qkv_from_hf({n: p.grad for n, p in hf.named_parameters()})  # the fused qkv grad split
    checked, worst = 0, 0.0
    for name, p in ours.named_parameters():
        g_ref = theirs[name]
        assert g_ref is not None and p.grad is not None, name
        worst = max(worst, float((p.grad - g_ref).abs().max() / g_ref.abs().max().clamp_min(1e-3)))
        checked += 1
    print("gradients: worst max |diff| / max |grad| =", worst)
    assert worst <= 1e-5
    assert checked == len(theirs)  # every parameter (the tied head counted once; qkv as its three blocks)
    # the pixels really move the logits (vision tower, merger and DeepStack): other pixels, other logits
    with torch.no_grad():
        blank = ours(**{**batch, "pixel_values": torch.zeros_like(batch["pixel_values"]),
                        "pixel_values_videos": torch.zeros_like(batch["pixel_values_videos"])})
    for row in (0, 2):
        assert (blank[row][keep[row]] - got[row][keep[row]]).abs().max() > 1e-3
    assert torch.equal(blank[1], got[1].detach())  # the text-only sample does not see them
    with pytest.raises(ValueError, match="more image placeholder tokens in input_ids than image_grid_thw"):
        ours(batch["input_ids"], batch["attention_mask"])


def test_rope_index_matches_transformers():
    cfg, hf, _ = _models()
    batch = _batch(cfg)
    ref, _ = hf.model.get_rope_index(batch["input_ids"], batch["mm_token_type_ids"], batch["image_grid_thw"],
                                     batch["video_grid_thw"].clone(), batch["attention_mask"])
    got = rope_index(batch["input_ids"], cfg, batch["image_grid_thw"], batch["video_grid_thw"],
                     batch["attention_mask"])
    assert torch.equal(ref, got)


def test_config_round_trip_and_refusals():
    cfg = FLAVORS["debug"]
    hf_cfg = transformers.Qwen3VLConfig(**config_to_hf(cfg))
    assert config_from_hf(hf_cfg) == cfg
    assert config_from_hf(hf_cfg.to_dict()) == cfg
    bad = config_to_hf(cfg)
    bad["text_config"]["hidden_act"] = "gelu"
    with pytest.raises(ValueError, match=r"text_config.hidden_act='gelu' is not supported"):
        config_from_hf(bad)
    bad = config_to_hf(cfg)
    bad["text_config"]["rope_parameters"]["rope_type"] = "yarn"
    with pytest.raises(ValueError, match=r"rope_parameters.rope_type='yarn'"):
        config_from_hf(bad)
    with pytest.raises(ValueError, match="mrope_section"):
        dataclasses.replace(cfg, mrope_section=(1, 1, 1))


def test_checkpoint_saved_by_transformers_loads_and_exports_bit_exact(tmp_path):
    cfg, hf, _ = _models(seed=3)
    hf.save_pretrained(tmp_path / "hf")
    loaded = transformers.Qwen3VLForConditionalGeneration.from_pretrained(tmp_path / "hf")
    ours = Qwen3VLForConditionalGeneration(config_from_hf(loaded.config))
    ours.load_state_dict(vision_qkv_from_hf(loaded.state_dict()))
    assert "model.visual.blocks.0.attn.q_proj.weight" in ours.state_dict()
    exported = hf_state_dict(ours.state_dict(), ours.config)
    assert "lm_head.weight" not in exported and cfg.text.tie_word_embeddings
    original = hf.state_dict()
    assert all(torch.equal(exported[k], original[k]) for k in exported)
    assert set(original) - set(exported) == {"lm_head.weight"}
