# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Parallel plan of Qwen3-VL-MoE: expert parallelism for the language model's MoE layers and FSDP for the rest
(TorchTitan's rule, as :func:`~hyper_parallel.models.llama3.parallelize.parallelize_llama_moe`: the experts are
split over ``ep`` ranks borrowed from the data-parallel ones and sharded by ``fully_shard`` over the remaining
``dp / ep``; routers data parallel; one FSDP unit per vision block, per decoder layer and the root)."""
from __future__ import annotations

from typing import Any

__all__ = ["parallelize_qwen3_vl_moe", "apply_vl_moe_meshes"]

_EXPERTS = "model.language_model.layers.*.mlp.experts"


def parallelize_qwen3_vl_moe(model: Any, dp_mesh: Any, *, ep: int, async_dispatch: bool = True) -> Any:
    """EP over ``ep`` of the ``dp_mesh`` (1-D) ranks for every MoE layer of a
    :class:`~hyper_parallel.models.qwen3_vl_moe.model.Qwen3VLMoeForConditionalGeneration`, then FSDP over
    ``dp_mesh``. Gradients are the average over the data-parallel ranks of their losses; register the
    expert-bias update with ``hyper_parallel.moe.register_moe_load_balancing_hook(model, optimizer)`` when
    balancing aux-loss-free. Returns the model (changed in place)."""
    from hyper_parallel.tp import parallelize_module  # pylint: disable=import-outside-toplevel
    from hyper_parallel.fsdp._torch.fully_shard import fully_shard  # pylint: disable=import-outside-toplevel
    from hyper_parallel.moe._torch.styles import (ExpertParallel, fully_shard_experts,  # noqa  # pylint: disable=C0415
                                                  init_expert_mesh)
    if dp_mesh.ndim != 1:
        raise ValueError(f"parallelize_qwen3_vl_moe(dp_mesh): expected a 1-D data-parallel mesh, got {dp_mesh}")
    dp = dp_mesh.size()
    text = model.config.text
    expert_mesh = init_expert_mesh(dp_mesh.device_type, dp_shard=dp, tp=1, ep=ep)
    parallelize_module(model, expert_mesh["ep"], {_EXPERTS: ExpertParallel(async_dispatch=async_dispatch)})
    for block in model.model.visual.blocks:
        fully_shard(block, mesh=dp_mesh)
    for i, layer in enumerate(model.model.language_model.layers):
        if text.is_moe_layer(i):
            layer.mlp.set_token_groups(dp_mesh.get_group(0), None, data_parallel_size=dp)
            fully_shard_experts(layer.mlp.experts, expert_mesh, data_parallel_size=dp)
            fully_shard(layer.mlp.router, mesh=dp_mesh)
        fully_shard(layer, mesh=dp_mesh)
    return fully_shard(model, mesh=dp_mesh)


def _decoder_layers(model: Any) -> list:
    """``(index, layer)`` of a whole model's decoder layers (a list) or a pipeline stage module's (a ``ModuleDict``
    keyed by the original indices)."""
    layers = model.model.language_model.layers
    return [(int(k), v) for k, v in layers.items()] if hasattr(layers, "items") else list(enumerate(layers))


def apply_vl_moe_meshes(model: Any, meshes: Any, *, async_dispatch: bool = True) -> Any:
    """Expert parallelism and FSDP / HSDP of a vision-language model with a MoE language model (or of a pipeline
    stage module of one) on ``meshes``, the
    :class:`~hyper_parallel.models.llama3.parallelize.MoEMeshes` of :func:`~hyper_parallel.models.llama3.
    parallelize.moe_meshes` (built over this rank's pipeline stage, with ``dp_replicate`` for HSDP): the text MoE
    models' rule (TorchTitan's) with the vision blocks as dense units. The experts are split over
    ``meshes.expert["ep"]`` and sharded over its ``efsdp`` dim (which takes in the HSDP replicas), the routers and
    shared experts over ``meshes.flat``, the vision blocks, decoder layers and the root over ``meshes.fsdp`` (2-D
    ``(replicate, shard)`` under HSDP); the balancing statistics come from every rank of the stage
    (``meshes.token_group``). Gradients are the average over the loss replicas. Returns the model."""
    # pylint: disable=import-outside-toplevel
    import fnmatch

    from hyper_parallel.fsdp._torch.fully_shard import fully_shard
    from hyper_parallel.moe._torch.styles import ExpertParallel, fully_shard_experts
    from hyper_parallel.tp import parallelize_module
    m, text = meshes, model.config.text
    if any(fnmatch.fnmatchcase(name, _EXPERTS) for name, _ in model.named_modules()):  # a stage may hold none
        parallelize_module(model, m.expert["ep"], {_EXPERTS: ExpertParallel(async_dispatch=async_dispatch)})
    visual = getattr(model.model, "visual", None)  # a pipeline stage module may hold no vision tower
    for block in (visual.blocks if visual is not None else ()):
        fully_shard(block, mesh=m.fsdp)
    for i, layer in _decoder_layers(model):
        if text.is_moe_layer(i):
            layer.mlp.set_token_groups(m.token_group, m.sequence_group, data_parallel_size=m.replicas,
                                       averaged_sequence_ranks=m.cp)
            fully_shard_experts(layer.mlp.experts, m.expert, data_parallel_size=m.data_parallel_size)
            for part in (layer.mlp.router, getattr(layer.mlp, "shared_experts", None)):
                if part is not None:
                    fully_shard(part, mesh=m.flat)
        fully_shard(layer, mesh=m.fsdp)
    return fully_shard(model, mesh=m.fsdp)
