# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Parallel plans of DeepSeek-V3: MLA under TP + SP (the low-rank down projections ``q_a_proj`` and
``kv_a_proj_with_mqa`` column-split with their outputs gathered, the up projections ``q_b_proj`` /
``kv_b_proj`` column-parallel over heads, ``o_proj`` row-parallel), EP (+ FSDP of the experts) for the
MoE blocks, FSDP per layer, PP split."""
from __future__ import annotations

from hyper_parallel.core.placement import Replicate, Shard
from hyper_parallel.models.llama3.parallelize import parallelize_llama3, pipeline_llama3
from hyper_parallel.tp import ColwiseParallel, RowwiseParallel

__all__ = ["deepseek_attention_tp_plan", "parallelize_deepseek_v3", "pipeline_deepseek_v3", "check_mla_tp",
           "shared_rope_key_grad"]


def deepseek_attention_tp_plan(config, sequence_parallel: bool = True) -> dict:
    """The MLA entries that replace Llama's q/k/v/o entries in the TP plan."""
    seq = Shard(1) if sequence_parallel else Replicate()
    plan = {"model.layers.*.self_attn.kv_a_proj_with_mqa": ColwiseParallel(output_layouts=Replicate()),
            "model.layers.*.self_attn.kv_b_proj": ColwiseParallel(),
            "model.layers.*.self_attn.o_proj": RowwiseParallel(output_layouts=seq)}
    if config.q_lora_rank:
        plan.update({"model.layers.*.self_attn.q_a_proj": ColwiseParallel(output_layouts=Replicate()),
                     "model.layers.*.self_attn.q_b_proj": ColwiseParallel()})
    else:
        plan["model.layers.*.self_attn.q_proj"] = ColwiseParallel()
    return plan


def check_mla_tp(config, tp: int) -> None:
    """Errors naming the MLA size that ``tp`` does not divide."""
    sizes = {"num_attention_heads": config.num_attention_heads,
             "kv_lora_rank + qk_rope_head_dim": config.kv_lora_rank + config.qk_rope_head_dim}
    if config.q_lora_rank:
        sizes["q_lora_rank"] = config.q_lora_rank
    for what, value in sizes.items():
        if value % tp:
            raise ValueError(f"parallelize_deepseek_v3: {what}={value} is not divisible by the TP degree {tp}")


def shared_rope_key_grad(model, tp_group) -> None:
    """Under TP each rank's heads use the one decoupled RoPE key (the last ``qk_rope_head_dim`` outputs of
    ``kv_a_proj_with_mqa``), so its gradient is a partial sum per rank: a forward hook passes that slice
    through ``grad_all_reduce`` (identity forward, all-reduce of the gradient) over ``tp_group``."""
    from hyper_parallel.platform import get_platform
    plat = get_platform("torch")
    split = model.config.kv_lora_rank

    def hook(_module, _inputs, out):
        import torch
        return torch.cat((out[..., :split], plat.grad_all_reduce(out[..., split:], tp_group)), dim=-1)

    for name, module in model.named_modules():
        if name.endswith("self_attn.kv_a_proj_with_mqa"):
            module.register_forward_hook(hook)


def parallelize_deepseek_v3(model, world_mesh, parallel_dims, **options):
    """The registry's ``parallelize_fn`` for DeepSeek-V3 (see :func:`parallelize_llama3` for ``options``):
    Llama's plan with :func:`deepseek_attention_tp_plan` as the attention entries and
    :func:`shared_rope_key_grad` under TP."""
    busy = {n: getattr(parallel_dims, n) for n in ("tp", "ep", "pp", "cp") if getattr(parallel_dims, n) > 1}
    if getattr(model, "mtp", None) is not None and busy:
        raise ValueError(f"parallelize_deepseek_v3: the multi-token-prediction layers (num_nextn_predict_layers="
                         f"{model.config.num_nextn_predict_layers}) have no TP / EP / PP / CP plan yet, got {busy}; "
                         "use FSDP / HSDP only or a config without MTP layers")
    if parallel_dims.tp > 1:
        check_mla_tp(model.config, parallel_dims.tp)
    options.setdefault("fn_name", "parallelize_deepseek_v3")
    parallelize_llama3(model, world_mesh, parallel_dims, attention_plan=deepseek_attention_tp_plan, **options)
    if parallel_dims.tp > 1:  # after the TP styles: the hook sees the projection's local output
        shared_rope_key_grad(model, world_mesh["tp"].get_group())
    return model


def pipeline_deepseek_v3(model, world_mesh, parallel_dims, **kwargs):
    """The registry's ``pipelining_fn`` for DeepSeek-V3 (:func:`pipeline_llama3`; a model with MTP layers is
    refused: the split has no stage for them yet)."""
    if getattr(model, "mtp", None) is not None:
        raise ValueError("pipeline_deepseek_v3: the multi-token-prediction layers have no pipeline stage yet; use a "
                         "config with num_nextn_predict_layers=0")
    return pipeline_llama3(model, world_mesh, parallel_dims, **kwargs)
