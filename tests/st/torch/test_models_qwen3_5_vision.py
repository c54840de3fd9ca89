# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The Qwen3.5 vision tower (transformers' ``Qwen3_5VisionModel``: Qwen3-VL's ViT without DeepStack) is our
``Qwen3VLVisionModel`` with no DeepStack levels: on real images of two sizes and a 4-frame video the merged
embeddings and every gradient equal transformers' (fp32); its config fields are honoured or refused."""
import dataclasses

import pytest
import torch

import transformers
from hyper_parallel.models.qwen3_vl.model import Qwen3VLVisionModel
from hyper_parallel.models.qwen3_vl.state_dict_adapter import vision_config_from_hf, vision_qkv_from_hf
from tests.st.torch.vl_inputs import vl_batch

TOL = 1e-5


def test_qwen3_5_vision_tower_equals_transformers():
    hf_cfg = transformers.Qwen3_5VisionConfig(depth=3, hidden_size=32, intermediate_size=64, num_heads=2,
                                             patch_size=8, out_hidden_size=64, num_position_embeddings=64)
    hf_cfg._attn_implementation = "sdpa"  # pylint: disable=protected-access
    torch.manual_seed(0)
    hf = transformers.models.qwen3_5.modeling_qwen3_5.Qwen3_5VisionModel(hf_cfg)
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.2)
    cfg = vision_config_from_hf(hf_cfg)
    assert cfg.deepstack_visual_indexes == () and cfg.depth == 3
    ours = Qwen3VLVisionModel(cfg)
    missing, unexpected = ours.load_state_dict(vision_qkv_from_hf(hf.state_dict()), strict=True)
    assert not missing and not unexpected
    from hyper_parallel.models.qwen3_vl import FLAVORS
    batch = vl_batch(FLAVORS["debug"])
    pixels = torch.cat([batch["pixel_values"], batch["pixel_values_videos"]])
    grid = torch.cat([batch["image_grid_thw"], batch["video_grid_thw"]])
    assert len({tuple(g) for g in grid.tolist()}) == 3  # two image sizes and a video
    ref = hf(pixels, grid).pooler_output
    got, deepstack = ours(pixels, grid)
    assert deepstack == [] and got.shape == ref.shape == (int(grid.prod(-1).sum()) // 4, 64)
    scale = ref.abs().max().detach()
    diff = float((ref - got).abs().max().detach() / scale)
    print(f"qwen3_5 vision tower: max |diff| / max |out| = {diff:.2e}")
    assert diff <= TOL
    weights = torch.randn_like(ref)
    (ref * weights).sum().backward()
    (got * weights).sum().backward()
    theirs = vision_qkv_from_hf({n: p.grad for n, p in hf.named_parameters()})  # the fused qkv grad split
    worst = max(float((p.grad - theirs[n]).abs().max() / theirs[n].abs().max().clamp_min(1e-3))
                for n, p in ours.named_parameters())
    print(f"qwen3_5 vision tower gradients: worst max |diff| / max |grad| = {worst:.2e}")
    assert worst <= TOL and len(theirs) == len(dict(ours.named_parameters()))


@pytest.mark.parametrize("key, value, message", [
    ("hidden_act", "relu", "vision_config: config.json hidden_act='relu' is not supported"),
    ("window_size", 112, "window_size=112 is not a field this model knows"),
])
def test_qwen3_5_vision_fields_refused_by_name(key, value, message):
    hf_dict = transformers.Qwen3_5VisionConfig().to_dict()
    assert dataclasses.asdict(vision_config_from_hf(hf_dict))["out_hidden_size"] == 3584
    with pytest.raises(ValueError, match=message):
        vision_config_from_hf({**hf_dict, key: value})
