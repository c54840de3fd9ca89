# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: memory and time formulas against hand-computed cases, FLOPs against torch's FlopCounterMode,
collective costs, pipeline in-flight microbatches."""
import pytest

from hyper_parallel.auto_parallel import (ClusterSpec, ModelShape, ParallelPlan, TrainConfig, collective_time,
                                          estimate_memory, parse_bytes)
from hyper_parallel.auto_parallel.memory import inflight_microbatches, layer_activation_bytes
from hyper_parallel.auto_parallel.time_model import estimate_step_time, layer_flops

# one decoder layer: vocab 16, hidden 8, intermediate 12, 2 heads of 4, 1 kv head
ONE = ModelShape(vocab_size=16, hidden_size=8, intermediate_size=12, num_layers=1, num_heads=2, num_kv_heads=1,
                 head_dim=4)


def test_parameter_count_by_hand():
    # embedding 16*8 = 128; attention q 8*8 + k 8*4 + v 8*4 + o 8*8 = 192; norms 2*8; MLP 3*8*12 = 288;
    # head 16*8 + final norm 8 = 136
    assert ONE.layer_params(0) == (192 + 16 + 288, 0)
    assert ONE.total_params() == 128 + 496 + 136 == 760


def test_one_layer_peak_by_hand():
    train = TrainConfig(global_batch=1, seq_len=4)
    est = estimate_memory(ONE, ParallelPlan(), train)
    # saved per token: norms 6h=48, q+out 2h=16, k+v 2*4=8, SwiGLU 4i=48, rms factors 2 -> 122 values * 4 bytes * 4
    # tokens = 1952; attention log-sum-exp 4 tokens * 2 heads * 4 = 32; rope tables 2 * 4 * 4 * 4 = 128
    layer = 1952 + 32 + 128
    assert layer_activation_bytes(ONE, 0, ParallelPlan(), train, 1) == (layer, 4 * 8 * 4)
    # head: log-softmax output 4*16*4 = 256, final norm 3h per token 4*24*4 = 384
    assert est.components["activations"] == layer + 256 + 384
    assert est.components["params"] == 760 * 4 and est.components["optimizer"] == 760 * 8
    # at backward start the embedding/head gradients (264 params) and the loss + logits gradients (2 * 256)
    assert est.components["grads"] == 264 * 4 and est.components["temporaries"] == 512
    assert est.phase == "backward start"
    assert est.peak_bytes == 3040 + 6080 + (layer + 640) + 1056 + 512 == 13440


def test_two_layer_mlp_like_shape_fsdp_and_recompute_by_hand():
    """Two layers, FSDP over 2: state halves; full recomputation keeps only the layer inputs."""
    two = ModelShape(16, 8, 12, 2, 2, 1, 4)
    train = TrainConfig(global_batch=2, seq_len=4)
    full = estimate_memory(two, ParallelPlan(dp_shard=2), train)
    assert full.components["params"] == two.total_params() * 4 / 2
    assert full.components["optimizer"] == two.total_params() * 8 / 2
    ac = estimate_memory(two, ParallelPlan(dp_shard=2, activation="full"), train)
    assert ac.components["activations"] < full.components["activations"]
    # what is kept per layer with recomputation: its input (1 sequence of 4 tokens x 8 x 4 bytes)
    assert layer_activation_bytes(two, 1, ParallelPlan(activation="full"), train, 1)[1] == 128


def test_tp_splits_the_layer_activations():
    train = TrainConfig(global_batch=1, seq_len=4)
    one = layer_activation_bytes(ONE, 0, ParallelPlan(), train, 1)[0]
    # tp=2 with sequence parallel: norms 4h/2 + 2h gathered, attention and MLP halves
    tp = layer_activation_bytes(ONE, 0, ParallelPlan(tp=1, dp_shard=1), train, 1)[0]
    assert tp == one
    shape = ModelShape(16, 8, 12, 1, 2, 2, 4)
    t1 = layer_activation_bytes(shape, 0, ParallelPlan(), train, 1)[0]
    t2 = layer_activation_bytes(shape, 0, ParallelPlan(tp=2), train, 1)[0]
    assert t2 < t1


def test_inflight_microbatches_follow_the_schedule():
    # 1F1B on 2 ranks: stage 0 warms up 2 microbatches, stage 1 one at a time; GPipe holds all of them
    assert inflight_microbatches(ParallelPlan(pp=2, microbatches=4)) == {0: 2, 1: 1}
    assert inflight_microbatches(ParallelPlan(pp=2, microbatches=4, schedule="GPipe")) == {0: 4, 1: 4}


def test_collective_costs_by_hand():
    c = ClusterSpec(4, 2, 10 ** 9, 1e12, intra_node_bw=1e9, inter_node_bw=1e8, latency=0.0)
    assert collective_time("all_reduce", 1e9, 2, c) == pytest.approx(1.0)  # 2 * (1/2) * 1 GB / 1 GB/s
    assert collective_time("all_gather", 1e9, 2, c) == pytest.approx(0.5)
    assert collective_time("all_gather", 1e9, 4, c) == pytest.approx(7.5)  # crosses nodes: 3/4 * 1e9 / 1e8
    assert collective_time("p2p", 1e6, 2, c) == pytest.approx(1e-3)
    assert collective_time("all_reduce", 1e9, 1, c) == 0.0
    with pytest.raises(ValueError, match="unknown collective 'broadcastx'"):
        collective_time("broadcastx", 1, 2, c)


def test_layer_flops_match_flop_counter_mode():
    import torch as th
    from torch.utils.flop_counter import FlopCounterMode
    from hyper_parallel.auto_parallel import model_shape
    from hyper_parallel.models.llama3 import TINY_CONFIGS
    from hyper_parallel.models.llama3.model import LlamaDecoderLayer, LlamaRotary
    for flavor in ("debug", "small"):
        cfg = TINY_CONFIGS[flavor]
        layer = LlamaDecoderLayer(cfg, 0)
        b, s = 2, 16
        x = th.randn(b, s, cfg.hidden_size)
        cos, sin = LlamaRotary(cfg)(th.arange(s))
        with FlopCounterMode(display=False) as counter:
            layer(x, cos, sin)
        # the CPU attention kernel has no FLOP formula in torch: FlopCounterMode counts the matmuls
        assert layer_flops(model_shape(cfg), 0, b * s, s, attention=False) == counter.get_total_flops(), flavor
        attention = layer_flops(model_shape(cfg), 0, b * s, s) - layer_flops(model_shape(cfg), 0, b * s, s,
                                                                              attention=False)
        assert attention == 4 * b * s * s * cfg.hidden_size  # QK^T and PV: 2 * 2 * b * s^2 * (heads*head_dim)


def test_step_time_parts_and_pipeline_bubble():
    shape = ModelShape(1024, 256, 688, 4, 8, 4, 32)
    cluster = ClusterSpec(2, 2, 10 ** 10, 1e10, 1e9, 1e9, latency=1e-5, mfu=1.0, op_overhead=0.0, comm_overlap=0.0)
    train = TrainConfig(8, 64)
    single = estimate_step_time(shape, ParallelPlan(), train, cluster.with_devices(1))
    # forward + backward = 3x forward FLOPs over the whole batch, plus the head
    assert single.components["compute"] == pytest.approx(
        3 * (4 * layer_flops(shape, 0, 512, 64) + 2 * 512 * 256 * 1024) / 1e10)
    pp = estimate_step_time(shape, ParallelPlan(pp=2, microbatches=2, schedule="GPipe"), train, cluster)
    pp8 = estimate_step_time(shape, ParallelPlan(pp=2, microbatches=8, schedule="GPipe"), train, cluster)
    assert pp.bubble_fraction > pp8.bubble_fraction > 0.0
    ac = estimate_step_time(shape, ParallelPlan(activation="full"), train, cluster.with_devices(1))
    assert ac.components["compute"] == pytest.approx(single.components["compute"] * 4 / 3)


def test_parse_bytes_and_bad_inputs():
    assert parse_bytes("80GiB") == 80 * 1024 ** 3 and parse_bytes("1.5 GB") == 1_500_000_000
    assert parse_bytes(4096) == 4096
    with pytest.raises(ValueError, match="memory size 'lots'"):
        parse_bytes("lots")
    with pytest.raises(ValueError, match="ParallelPlan.tp: expected a positive int"):
        ParallelPlan(tp=0)
    with pytest.raises(ValueError, match="ep=4 must divide"):
        ParallelPlan(dp_shard=2, ep=4)
    with pytest.raises(ValueError, match="TrainConfig.optimizer"):
        TrainConfig(8, 64, optimizer="lamb")
    with pytest.raises(ValueError, match="tp=3 must divide the attention heads"):
        estimate_memory(ONE, ParallelPlan(tp=3), TrainConfig(1, 6))
    with pytest.raises(ValueError, match="ClusterSpec.mfu"):
        ClusterSpec(1, 1, 1, 1.0, 1.0, 1.0, mfu=2.0)


def test_fsdp_buffers_at_the_gradient_reduction_by_hand():
    """Three layers under FSDP over 2 ranks, one token per rank (activations negligible): the peak is the middle
    layer's post-backward hook, which holds the root unit gathered (embedding 128 + head 136 params = 1056 B),
    the head's full-size gradients (136 * 4 = 544 B), and five layer-unit-sized buffers of 496 * 4 = 1984 B:
    its own gathered parameters, the prefetched layer below, its full-size gradients, their packed copy for
    the reduction and the layer above's packed gradients still in their asynchronous reduction; a collective
    library that stages the all-gather output (gloo) adds a sixth."""
    three = ModelShape(16, 8, 12, 3, 2, 1, 4)
    unit = 496 * 4
    est = estimate_memory(three, ParallelPlan(dp_shard=2), TrainConfig(global_batch=2, seq_len=1))
    assert est.phase == "backward (gradient reduction)"
    assert est.components["fsdp_buffers"] == 1056 + 544 + 5 * unit == 11520
    staged = estimate_memory(three, ParallelPlan(dp_shard=2), TrainConfig(2, 1, comm_staging=True))
    assert staged.components["fsdp_buffers"] == 11520 + unit
