# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The TP (+ sequence parallel, + loss parallel) and FSDP plan of the MindSpore Llama (the model code never
mentions a mesh): the torch plan's styles (``llama_tp_plan``) applied by ``hyper_parallel.tp`` 's MindSpore
styles, then ``fully_shard`` (``hyper_parallel.fsdp._mindspore``) per decoder layer and on the root."""
from __future__ import annotations

from hyper_parallel.models.llama3.parallelize import llama_tp_plan
from hyper_parallel.models.spec import fsdp_mesh as fsdp_mesh_of

__all__ = ["parallelize_llama3", "parallelize_fsdp_only", "llama_tp_plan", "UNSUPPORTED_DIMS"]

#: degrees the MindSpore plan refuses (their implementations are torch-only)
UNSUPPORTED_DIMS = ("ep",)


def _check(model, world_mesh, dims, fn_name: str = "parallelize_llama3") -> None:
    for name in UNSUPPORTED_DIMS:
        if getattr(dims, name, 1) > 1:
            raise ValueError(f"{fn_name} (MindSpore): parallel degree {name}={getattr(dims, name)} is not "
                             f"supported on MindSpore (TP, CP, PP, FSDP and HSDP are); set parallelism.{name} = 1")
    if dims.tp > 1 and dims.dp_replicate > 1:
        raise ValueError("parallelize_llama3 (MindSpore): TP with dp_replicate > 1 (HSDP x TP) is not supported by "
                         "MindSpore fully_shard; set parallelism.dp_replicate = 1")
    cfg = model.config
    if dims.tp > 1:
        for what in ("num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size"):
            if getattr(cfg, what) % dims.tp:
                raise ValueError(f"parallelize_llama3 (MindSpore): {what}={getattr(cfg, what)} is not divisible by "
                                 f"the TP degree {dims.tp}")
    names = tuple(world_mesh.mesh_dim_names or ())
    if dims.tp > 1 and "tp" not in names:
        raise ValueError(f"parallelize_llama3 (MindSpore): the world mesh {names} has no 'tp' dimension")


def _pure_replicate(dims) -> bool:
    """Data parallel without sharding: ``dp_replicate > 1`` and every other degree 1."""
    return dims.dp_replicate > 1 and all(getattr(dims, n, 1) == 1 for n in ("dp_shard", "cp", "tp", "pp", "ep"))


def parallelize_llama3(model, world_mesh, parallel_dims, *, sequence_parallel: bool = True,
                       loss_parallel: bool = False, activation=None, **fsdp_kwargs):
    """The MindSpore registry entry's ``parallelize_fn``: TP + SP (+ loss parallel: the logits stay a
    ``Shard(-1)`` DTensor for ``LlamaForCausalLM.loss``) on ``world_mesh["tp"]``, then FSDP (HSDP with
    ``dp_replicate > 1``) per decoder layer and on the root over ``dp_shard`` (``fsdp_kwargs`` go to
    ``fully_shard``); data parallel alone (``dp_replicate > 1``, nothing sharded) is ``replicate`` (full
    parameters, the gradient all-reduce started in buckets during backward). ``parallel_dims``:
    ``hyper_parallel.models.ParallelDims`` or the trainer's. Context,
    pipeline and expert parallel and ``activation`` policies are refused with an error naming the key."""
    if activation:
        raise ValueError("parallelize_llama3 (MindSpore): an activation policy ([activation]) is not supported by "
                         "the MindSpore trainer path; remove the [activation] section")
    _check(model, world_mesh, parallel_dims)
    cfg = model.config
    if parallel_dims.tp > 1 and (cfg.moe is not None or cfg.tie_word_embeddings or cfg.qk_norm):
        raise ValueError("parallelize_llama3 (MindSpore): TP of MoE, tied-embedding or QK-norm configs is not "
                         "supported on MindSpore (FSDP / HSDP are); set parallelism.tp = 1")
    if parallel_dims.tp > 1:
        from hyper_parallel.tp import parallelize_module  # pylint: disable=import-outside-toplevel
        parallelize_module(model, world_mesh["tp"], llama_tp_plan(sequence_parallel, loss_parallel))
    shard_mesh = fsdp_mesh_of(world_mesh, parallel_dims)
    if shard_mesh is not None and _pure_replicate(parallel_dims):  # DDP: gradient all-reduce during backward
        from hyper_parallel.fsdp._mindspore.replicate import replicate  # pylint: disable=import-outside-toplevel
        return replicate(model, mesh=shard_mesh)
    if shard_mesh is not None:
        from hyper_parallel.fsdp._mindspore.fully_shard import fully_shard  # pylint: disable=import-outside-toplevel
        for layer in model.model.layers:
            fully_shard(layer, mesh=shard_mesh, **fsdp_kwargs)
        fully_shard(model, mesh=shard_mesh, **fsdp_kwargs)
    return model


def parallelize_fsdp_only(model, world_mesh, parallel_dims, *, fn_name: str = "parallelize", activation=None,
                          sequence_parallel: bool = True, loss_parallel: bool = False, **fsdp_kwargs):
    """The MindSpore ``parallelize_fn`` of Qwen3, Qwen3-MoE and DeepSeek-V3: FSDP (HSDP with ``dp_replicate >
    1``) per decoder layer and on the root; TP, CP, PP and EP are refused naming the degree (their MindSpore
    plans are Llama 3's only). ``sequence_parallel`` / ``loss_parallel`` only matter under TP."""
    del sequence_parallel, loss_parallel
    if activation:
        raise ValueError(f"{fn_name} (MindSpore): an activation policy ([activation]) is applied by "
                         "hyper_parallel.activation.apply_recompute_schedule, not by the MindSpore trainer path")
    for name in UNSUPPORTED_DIMS + ("tp",):
        if getattr(parallel_dims, name, 1) > 1:
            raise ValueError(f"{fn_name} (MindSpore): parallel degree {name}={getattr(parallel_dims, name)} is not "
                             f"supported for this model on MindSpore (FSDP and HSDP are); set parallelism.{name} = 1")
    shard_mesh = fsdp_mesh_of(world_mesh, parallel_dims)
    if shard_mesh is not None:
        from hyper_parallel.fsdp._mindspore.fully_shard import fully_shard  # pylint: disable=import-outside-toplevel
        for layer in model.model.layers:
            fully_shard(layer, mesh=shard_mesh, **fsdp_kwargs)
        fully_shard(model, mesh=shard_mesh, **fsdp_kwargs)
    return model
