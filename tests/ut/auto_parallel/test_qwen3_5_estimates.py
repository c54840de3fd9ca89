# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Auto-parallel entries of the hybrid Qwen3.5 layers: the shape's parameter counts equal the model built on the
meta device (both kinds of layer, dense and MoE, debug and published sizes), the published shapes equal the
flavors' configs, the linear-attention flop count of the projections equals FlopCounterMode on a real layer,
and the memory estimates of 0.8B / 35B-A3B (printed) grow and shrink the way the plan says."""
import pytest
import torch

from hyper_parallel.auto_parallel import ParallelPlan, TrainConfig, estimate_memory, model_shape
from hyper_parallel.auto_parallel.shape import PUBLISHED_SHAPES
from hyper_parallel.auto_parallel.time_model import layer_flops, linear_attention_flops
from hyper_parallel.models import get_model_spec, init_empty_weights


def _count(model):
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


@pytest.mark.parametrize("model_name, flavor, published", [
    ("qwen3_5", "debug", None), ("qwen3_5_moe", "debug_moe", None), ("qwen3_5", "0.8B", "qwen3.5-0.8b"),
    ("qwen3_5_moe", "35B-A3B", "qwen3.5-35b-a3b")])
def test_shape_parameters_equal_the_model(model_name, flavor, published):
    spec = get_model_spec(model_name)
    with init_empty_weights():
        model = spec.build(flavor)
    shape = model_shape(spec.config(flavor))
    assert shape.total_params() == _count(model), (flavor, shape.total_params(), _count(model))
    if published:
        assert PUBLISHED_SHAPES[published].total_params() == shape.total_params()
        print(f"{published}: {shape.total_params():,} parameters, {shape.active_params():,} active")


def test_linear_projection_flops_match_flop_counter():
    """FlopCounterMode counts the projections' matmuls of a Gated DeltaNet layer (the rule's einsums and the
    triangular solve are counted only partly by torch, so the rule term is checked for its scaling instead)."""
    from torch.utils.flop_counter import FlopCounterMode
    from hyper_parallel.models.qwen3_5.model import Qwen3_5GatedDeltaNet
    config = get_model_spec("qwen3_5").config("debug")
    shape = model_shape(config)
    layer = Qwen3_5GatedDeltaNet(config)
    x = torch.randn(2, 16, config.hidden_size)
    with FlopCounterMode(display=False) as counter:
        for proj in (layer.in_proj_q, layer.in_proj_k, layer.in_proj_v, layer.in_proj_z, layer.in_proj_b,
                     layer.in_proj_a):
            proj(x)
        layer.out_proj(torch.randn(2, 16, layer.out_proj.in_features))
    proj_flops, rule = linear_attention_flops(shape, 32)
    assert proj_flops == counter.get_total_flops()
    assert linear_attention_flops(shape, 64)[1] == 2 * rule and linear_attention_flops(shape, 64, tp=2)[1] == rule
    index = config.layer_types.index("linear_attention")
    assert layer_flops(shape, index, 32, 16) > proj_flops


@pytest.mark.parametrize("name", ["qwen3.5-0.8b", "qwen3.5-35b-a3b"])
def test_memory_estimates_of_the_published_sizes(name):
    shape = PUBLISHED_SHAPES[name]
    train = TrainConfig(global_batch=8, seq_len=4096, compute_bytes=2)
    moe = shape.is_moe
    one = estimate_memory(shape, ParallelPlan(dp_shard=8, ep=8 if moe else 1), train)
    tp = estimate_memory(shape, ParallelPlan(dp_shard=4, tp=2, ep=8 if moe else 1), train)
    print(f"{name}: 8 ranks FSDP{' x EP8' if moe else ''}: {one.peak_bytes / 2**30:.1f} GiB/rank; with TP2: "
          f"{tp.peak_bytes / 2**30:.1f} GiB/rank ({ {k: round(v / 2**30, 2) for k, v in one.components.items()} })")
    assert one.peak_bytes > 0 and tp.peak_bytes > 0
    assert one.components != tp.components
