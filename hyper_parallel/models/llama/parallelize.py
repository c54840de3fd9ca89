# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Parallelisation plans for the Llama model (the model code itself never mentions a mesh)."""
from __future__ import annotations

from hyper_parallel.core.placement import Replicate, Shard
from hyper_parallel.tp import (ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel,
                               parallelize_module)

__all__ = ["llama_tp_plan", "parallelize_llama"]


def llama_tp_plan(sequence_parallel: bool = True, loss_parallel: bool = False, fused_sp_grad: bool = True) -> dict:
    """The TP (+SP, +loss parallel) plan, keyed by fnmatch globs over HF module names.

    With sequence parallel the residual stream is sharded on the sequence dim (local tensors) and
    norms run on ``Shard(1)`` DTensors; attention and MLP gather the sequence on entry and
    reduce-scatter on exit. With loss parallel the logits stay ``Shard(-1)`` DTensors (vocabulary
    split) for ``loss_parallel()`` / ``vocab_parallel_cross_entropy``. ``fused_sp_grad`` makes the
    sequence gather's backward one reduce-scatter (see ``PrepareModuleInput``).
    """
    seq = Shard(1) if sequence_parallel else Replicate()
    plan = {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq),
        "model.layers.*.self_attn.q_proj": ColwiseParallel(),
        "model.layers.*.self_attn.k_proj": ColwiseParallel(),
        "model.layers.*.self_attn.v_proj": ColwiseParallel(),
        "model.layers.*.self_attn.o_proj": RowwiseParallel(output_layouts=seq),
        "model.layers.*.mlp.gate_proj": ColwiseParallel(),
        "model.layers.*.mlp.up_proj": ColwiseParallel(),
        "model.layers.*.mlp.down_proj": RowwiseParallel(output_layouts=seq),
        "lm_head": ColwiseParallel(input_layouts=seq, output_layouts=Shard(-1) if loss_parallel else Replicate(),
                                   use_local_output=not loss_parallel),
    }
    if sequence_parallel:
        plan.update({
            "model.layers.*.input_layernorm": SequenceParallel(use_local_output=True),
            "model.layers.*.post_attention_layernorm": SequenceParallel(use_local_output=True),
            "model.norm": SequenceParallel(use_local_output=True),
            "model.layers.*.self_attn": PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(Replicate(),),
                                                           partial_grad_on_gather=fused_sp_grad),
            "model.layers.*.mlp": PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(Replicate(),),
                                                     partial_grad_on_gather=fused_sp_grad),
        })
    return plan


def parallelize_llama(model, tp_mesh, *, sequence_parallel: bool = True, loss_parallel: bool = False,
                      fused_sp_grad: bool = True):
    """Apply :func:`llama_tp_plan` to ``model`` on the 1-D ``tp_mesh``; returns the model."""
    cfg = model.config
    n = tp_mesh.size()
    for what, value in (("num_attention_heads", cfg.num_attention_heads),
                        ("num_key_value_heads", cfg.num_key_value_heads),
                        ("intermediate_size", cfg.intermediate_size), ("vocab_size", cfg.vocab_size)):
        if value % n:
            raise ValueError(f"parallelize_llama: {what}={value} is not divisible by the TP degree {n}")
    return parallelize_module(model, tp_mesh, llama_tp_plan(sequence_parallel, loss_parallel, fused_sp_grad))
