# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (one process): the vision tower's split q/k/v <-> Hugging Face's fused ``qkv`` (bit-exact both ways, any
prefix, bad input named), the vision TP plan per flavor (DeepStack mergers only where the tower has them) and the
divisibility refusals."""
import dataclasses
import fnmatch

import pytest
import torch

from hyper_parallel.models.qwen3_vl import FLAVORS, Qwen3VLForConditionalGeneration
from hyper_parallel.models.qwen3_vl.parallelize import check_vision_tp, qwen3_vl_tp_plan, vision_tp_plan
from hyper_parallel.models.qwen3_vl.state_dict_adapter import vision_qkv_from_hf, vision_qkv_to_hf


def _fused(hidden=8, prefix="model.visual."):
    g = torch.Generator().manual_seed(0)
    return {f"{prefix}blocks.0.attn.qkv.weight": torch.randn(3 * hidden, hidden, generator=g),
            f"{prefix}blocks.0.attn.qkv.bias": torch.randn(3 * hidden, generator=g),
            f"{prefix}blocks.0.attn.proj.weight": torch.randn(hidden, hidden, generator=g),
            "model.language_model.layers.0.self_attn.q_proj.weight": torch.randn(4, 4, generator=g)}


@pytest.mark.parametrize("prefix", ["model.visual.", ""])
def test_qkv_split_and_fuse_are_bit_exact_inverses(prefix):
    hf = _fused(prefix=prefix)
    ours = vision_qkv_from_hf(hf)
    fused = hf[f"{prefix}blocks.0.attn.qkv.weight"]
    assert f"{prefix}blocks.0.attn.qkv.weight" not in ours
    for i, name in enumerate(("q_proj", "k_proj", "v_proj")):  # row block i of the [3, heads, head_dim] layout
        assert torch.equal(ours[f"{prefix}blocks.0.attn.{name}.weight"], fused[8 * i:8 * (i + 1)])
        assert ours[f"{prefix}blocks.0.attn.{name}.weight"].data_ptr() != fused.data_ptr()  # own storage
    assert torch.equal(ours["model.language_model.layers.0.self_attn.q_proj.weight"],
                       hf["model.language_model.layers.0.self_attn.q_proj.weight"])  # the decoder's untouched
    back = vision_qkv_to_hf(ours)
    assert set(back) == set(hf) and all(torch.equal(back[k], hf[k]) for k in hf)


def test_qkv_bad_input_is_named():
    hf = _fused()
    hf["model.visual.blocks.0.attn.qkv.weight"] = torch.zeros(7, 8)
    with pytest.raises(ValueError, match=r"blocks\.0\.attn\.qkv\.weight has shape \(7, 8\)"):
        vision_qkv_from_hf(hf)
    ours = vision_qkv_from_hf(_fused())
    del ours["model.visual.blocks.0.attn.v_proj.bias"]
    with pytest.raises(ValueError, match=r"q_proj\.bias without model\.visual\.blocks\.0\.attn\.v_proj\.bias"):
        vision_qkv_to_hf(ours)


def test_model_state_dict_round_trips_through_the_hf_layout():
    model = Qwen3VLForConditionalGeneration(FLAVORS["debug"])
    sd = model.state_dict()
    assert not any(".attn.qkv." in k for k in sd)
    hf = vision_qkv_to_hf(sd)
    depth = FLAVORS["debug"].vision.depth
    assert sum(k.endswith(".attn.qkv.weight") for k in hf) == depth and len(hf) == len(sd) - 4 * depth
    again = vision_qkv_from_hf(hf)
    assert set(again) == set(sd) and all(torch.equal(again[k], sd[k]) for k in sd)


def test_vision_plan_covers_every_vision_linear_but_the_patch_embedding():
    cfg = FLAVORS["debug"]
    model = Qwen3VLForConditionalGeneration(cfg)
    plan = qwen3_vl_tp_plan(cfg)
    linears = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n.startswith("model.visual.")]
    assert linears and all(any(fnmatch.fnmatch(n, key) for key in plan) for n in linears)
    assert not any(key.startswith("model.visual.") for key in qwen3_vl_tp_plan(cfg, vision=False))
    no_deepstack = dataclasses.replace(cfg.vision, deepstack_visual_indexes=())
    assert not any("deepstack" in key for key in vision_tp_plan(no_deepstack))  # Qwen3.5's tower has none


def test_vision_divisibility_refused_with_one_line():
    vision = FLAVORS["debug"].vision
    check_vision_tp(vision, 2)
    with pytest.raises(ValueError, match=rf"^parallelize_qwen3_vl: vision num_heads={vision.num_heads} is not "
                                         rf"divisible by tp=3 "):
        check_vision_tp(vision, 3)
    odd = dataclasses.replace(vision, intermediate_size=66, num_heads=4, hidden_size=64)
    with pytest.raises(ValueError, match="vision intermediate_size=66 is not divisible by tp=4"):
        check_vision_tp(odd, 4)


def test_stage_modules_keep_the_plan_entries_of_what_they_hold():
    """A pipeline stage module gets the TP entries of the modules it holds (the encoder stage: the vision tower and
    the embedding; the last stage: its layers, the head); a whole model keeps the whole plan."""
    from hyper_parallel.models.qwen3_vl.parallelize import _held  # pylint: disable=protected-access
    from hyper_parallel.models.qwen3_vl.pipeline import Qwen3VLStageModule
    cfg = FLAVORS["debug"]
    model = Qwen3VLForConditionalGeneration(cfg)
    plan = qwen3_vl_tp_plan(cfg)
    assert _held(model, plan) == plan
    first = _held(Qwen3VLStageModule(model, [0], encoder=True, head=False), plan)
    assert "model.visual.blocks.*.attn.q_proj" in first and "model.language_model.embed_tokens" in first
    assert "lm_head" not in first and "model.language_model.layers.*.self_attn.q_proj" in first
    last = _held(Qwen3VLStageModule(model, [1], encoder=False, head=True), qwen3_vl_tp_plan(cfg, vision=False))
    assert "lm_head" in last and "model.language_model.embed_tokens" not in last
    assert not any(key.startswith("model.visual.") for key in last)
