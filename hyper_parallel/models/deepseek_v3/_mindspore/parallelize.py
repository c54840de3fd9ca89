# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The MindSpore plans of DeepSeek-V3: the torch plan's MLA TP entries (``deepseek_attention_tp_plan``: the low-rank
down projections column-split with their outputs gathered, the up projections column-parallel over heads,
``o_proj`` row-parallel) applied by the MindSpore TP styles, the shared RoPE key's gradient summed over the TP ranks,
EP / FSDP of the MoE blocks (:func:`hyper_parallel.models.llama3._mindspore.parallelize.parallelize_llama3`), and the
Llama stage split for PP. Context parallel is refused: MLA's value heads are narrower than its query/key heads and
its softmax scale is not ``head_dim ** -0.5``, which the MindSpore CP attention does not take."""
from __future__ import annotations

import types

from mindspore import mint

from hyper_parallel.models.deepseek_v3.parallelize import check_mla_tp, deepseek_attention_tp_plan
from hyper_parallel.models.llama3._mindspore.parallelize import parallelize_llama3
from hyper_parallel.models.llama3._mindspore.pipeline import pipeline_llama3

__all__ = ["parallelize_deepseek_v3", "pipeline_deepseek_v3", "shared_rope_key_grad"]


def shared_rope_key_grad(model, tp_mesh) -> None:
    """Under TP each rank's heads use the one decoupled RoPE key (the last ``qk_rope_head_dim`` outputs of
    ``kv_a_proj_with_mqa``), so its gradient is a partial sum per rank: each ``kv_a_proj_with_mqa`` passes that
    slice through ``grad_all_reduce`` (identity forward, all-reduce of the gradient) over the TP group (the torch
    plan's forward hook, as a wrapped ``construct``)."""
    from hyper_parallel.platform import get_platform  # pylint: disable=import-outside-toplevel
    plat, group = get_platform("mindspore"), tp_mesh.get_group(0)
    split = model.config.kv_lora_rank
    for name, cell in model.cells_and_names():
        if name.endswith("self_attn.kv_a_proj_with_mqa"):
            inner = cell.construct

            def construct(_cell, x, inner=inner):
                out = inner(x)
                return mint.cat((out[..., :split], plat.grad_all_reduce(out[..., split:], group)), -1)

            cell.construct = types.MethodType(construct, cell)


def _after_tp(model, tp_mesh) -> None:
    shared_rope_key_grad(model, tp_mesh)


def parallelize_deepseek_v3(model, world_mesh, parallel_dims, **options):
    """The MindSpore ``parallelize_fn`` of DeepSeek-V3: :func:`parallelize_llama3` with the MLA TP entries and
    :func:`shared_rope_key_grad` (see there for ``options``)."""
    if parallel_dims.tp > 1:
        check_mla_tp(model.config, parallel_dims.tp)
    options.setdefault("fn_name", "parallelize_deepseek_v3")
    return parallelize_llama3(model, world_mesh, parallel_dims, attention_plan=deepseek_attention_tp_plan,
                              after_tp=_after_tp, **options)


def pipeline_deepseek_v3(model, world_mesh, parallel_dims, **kwargs):
    """The MindSpore ``pipelining_fn`` of DeepSeek-V3 (:func:`pipeline_llama3`: the same stage split)."""
    return pipeline_llama3(model, world_mesh, parallel_dims, **kwargs)
