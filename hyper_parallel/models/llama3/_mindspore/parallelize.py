# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The TP (+ sequence parallel, + loss parallel), EP and FSDP plan of the MindSpore Llama family (Llama 3,
Qwen3, Qwen3-MoE, DeepSeek-V3; the model code never mentions a mesh): the torch plan's styles
(``llama_tp_plan``, Qwen3's ``qk_norm_plan``, DeepSeek-V3's MLA entries, ``llama_moe_tp_plan``) applied by
``hyper_parallel.tp`` 's MindSpore styles, the MoE experts split by ``hyper_parallel.moe._mindspore.
expert_parallel``, then ``fully_shard`` (``hyper_parallel.fsdp._mindspore``) per decoder layer and on the
root.

Under TP a MoE block (no TP entry, as on torch) routes its rank's sequence shard; its parameters are replicated
over the TP ranks and their gradients summed over them (each rank saw other tokens). Under EP the experts'
gradients come out of the token all-to-all's adjoint summed over the expert-parallel ranks; they are scaled by
``1 / dp`` (the average the FSDP reduction gives every other parameter) and ``fully_shard`` leaves them alone."""
from __future__ import annotations

import types

from hyper_parallel.models.llama3.parallelize import (llama_moe_tp_plan, llama_tp_plan,
                                                      retie_embeddings, stage_plan, with_attention_plan)
from hyper_parallel.models.spec import fsdp_mesh as fsdp_mesh_of

__all__ = ["parallelize_llama3", "parallelize_fsdp_only", "llama_tp_plan", "shadow_parameters", "check_layout"]


def check_layout(model, world_mesh, dims, fn_name: str = "parallelize_llama3", attention_plan=None,
                 sequence_parallel: bool = True) -> None:
    """Errors naming the degree the MindSpore plan cannot apply to ``model`` and why."""
    cfg = model.config
    moe = getattr(cfg, "moe", None) is not None
    if dims.tp > 1 and dims.dp_replicate > 1:
        raise ValueError(f"{fn_name} (MindSpore): TP with dp_replicate > 1 (HSDP x TP) is not supported by MindSpore "
                         "fully_shard; set parallelism.dp_replicate = 1")
    if getattr(dims, "ep", 1) > 1:
        _check_ep(cfg, dims, fn_name)
    if dims.tp > 1:
        _check_tp(cfg, dims.tp, fn_name, attention_plan is None)
        if moe and not sequence_parallel:
            raise ValueError(f"{fn_name} (MindSpore): TP of a MoE model needs parallelism.sequence_parallel = true "
                             "(each MoE block routes its rank's sequence shard)")
        if "tp" not in tuple(world_mesh.mesh_dim_names or ()):
            raise ValueError(f"{fn_name} (MindSpore): the world mesh {world_mesh.mesh_dim_names} has no 'tp' "
                             "dimension")


def _check_ep(cfg, dims, fn_name: str) -> None:
    if getattr(cfg, "moe", None) is None:
        raise ValueError(f"{fn_name} (MindSpore): parallelism.ep={dims.ep} needs a model with MoE layers")
    if dims.ep != dims.dp_shard or any(getattr(dims, n) > 1 for n in ("tp", "cp", "dp_replicate")):
        raise ValueError(f"{fn_name} (MindSpore): parallelism.ep={dims.ep} must equal dp_shard={dims.dp_shard} with "
                         f"tp = cp = dp_replicate = 1 (got tp={dims.tp}, cp={dims.cp}, dp_replicate="
                         f"{dims.dp_replicate}): the experts' FSDP over the ranks EP leaves (efsdp) and EP borrowed "
                         "from TP / CP ranks are torch-only")


def _check_tp(cfg, tp: int, fn_name: str, llama_attention: bool) -> None:
    sizes = {"intermediate_size": cfg.intermediate_size, "vocab_size": cfg.vocab_size}
    if llama_attention:
        sizes.update(num_attention_heads=cfg.num_attention_heads, num_key_value_heads=cfg.num_key_value_heads)
    for what, value in sizes.items():
        if value % tp:
            raise ValueError(f"{fn_name} (MindSpore): {what}={value} is not divisible by the TP degree {tp}")


def shadow_parameters(cell, fn) -> None:
    """Replace ``cell.construct`` by one that sees each of ``cell`` 's own parameters as ``fn(parameter)`` (e.g.
    an identity whose backward all-reduces or scales the gradient); under ``fully_shard`` the value shadowed is
    the gathered one ``fully_shard`` installed, restored afterwards (the MindSpore ``SequenceParallel`` 's
    mechanism: MindSpore has no parameter gradient hooks in PyNative)."""
    inner = cell.construct
    names = [n for n, _ in cell.parameters_and_names(expand=False)]

    def construct(this, *args, **kwargs):
        saved = {n: this.__dict__[n] for n in names if n in this.__dict__}
        for n in names:
            this.__dict__[n] = fn(saved.get(n, this._params[n]))  # pylint: disable=protected-access
        try:
            return inner(*args, **kwargs)
        finally:
            for n in names:
                if n in saved:
                    this.__dict__[n] = saved[n]
                else:
                    this.__dict__.pop(n, None)

    cell.construct = types.MethodType(construct, cell)


def _param_cells(cell):
    return [c for _, c in cell.cells_and_names() if list(c.parameters_and_names(expand=False))]


def _moe_cells(model):
    from hyper_parallel.moe._mindspore.moe import MoE  # pylint: disable=import-outside-toplevel
    return [c for _, c in model.cells_and_names() if isinstance(c, MoE)]


def _moe_under_tp(moes, tp_mesh) -> None:
    """Each MoE block's parameters see the gradient summed over the TP ranks (their sequence shards)."""
    from hyper_parallel.platform import get_platform  # pylint: disable=import-outside-toplevel
    plat, group = get_platform("mindspore"), tp_mesh.get_group(0)
    for moe in moes:
        for cell in _param_cells(moe):
            shadow_parameters(cell, lambda p: plat.grad_all_reduce(p, group))


def _expert_parallel(moes, ep_mesh, dp: int) -> list:
    """Split every MoE block's experts over ``ep_mesh``; their gradients scaled by ``1 / dp``. Returns the expert
    parameters (for ``fully_shard(ignored_params=...)``)."""
    from hyper_parallel.moe._mindspore.moe import expert_parallel  # pylint: disable=import-outside-toplevel
    from hyper_parallel.platform import get_platform  # pylint: disable=import-outside-toplevel
    plat = get_platform("mindspore")
    ignored = []
    for moe in moes:
        expert_parallel(moe, ep_mesh)
        if dp > 1:
            shadow_parameters(moe.experts, lambda p: plat.scale_grad(p, 1.0 / dp))
        ignored += [moe.experts.gate_proj, moe.experts.up_proj, moe.experts.down_proj]
    return ignored


def _pure_replicate(dims) -> bool:
    """Data parallel without sharding: ``dp_replicate > 1`` and every other degree 1."""
    return dims.dp_replicate > 1 and all(getattr(dims, n, 1) == 1 for n in ("dp_shard", "cp", "tp", "pp", "ep"))


def _apply_tp(model, tp_mesh, *, sequence_parallel: bool, loss_parallel: bool, attention_plan, after_tp) -> None:
    from hyper_parallel.tp import parallelize_module  # pylint: disable=import-outside-toplevel
    cfg = model.config
    if getattr(cfg, "moe", None) is not None:
        plan = llama_moe_tp_plan(cfg, loss_parallel, attention_plan)
    else:
        plan = with_attention_plan(llama_tp_plan(sequence_parallel, loss_parallel), cfg, attention_plan,
                                   sequence_parallel)
    parallelize_module(model, tp_mesh, stage_plan(model, plan, sequence_parallel))
    retie_embeddings(model)
    if after_tp is not None:
        after_tp(model, tp_mesh)
    _moe_under_tp(_moe_cells(model), tp_mesh)


def parallelize_llama3(model, world_mesh, parallel_dims, *, sequence_parallel: bool = True,
                       loss_parallel: bool = False, activation=None, attention_plan=None, after_tp=None,
                       fn_name: str = "parallelize_llama3", **fsdp_kwargs):
    """The MindSpore registry entries' ``parallelize_fn`` (Llama 3, Qwen3, Qwen3-MoE, DeepSeek-V3): TP + SP
    (+ loss parallel: the logits stay a ``Shard(-1)`` DTensor for ``LlamaForCausalLM.loss``) on
    ``world_mesh["tp"]`` with Qwen3's QK-norm entries and tied embeddings re-tied, MoE blocks on their sequence
    shard; EP of the MoE experts over ``world_mesh["dp_shard"]`` (``ep == dp_shard``); then FSDP (HSDP with
    ``dp_replicate > 1``) per decoder layer and on the root over ``dp_shard`` (``fsdp_kwargs`` go to
    ``fully_shard``); data parallel alone (``dp_replicate > 1``, nothing sharded) is ``replicate`` (full
    parameters, the gradient all-reduce started in buckets during backward). ``attention_plan(config,
    sequence_parallel)``: TP entries replacing Llama's q/k/v/o ones; ``after_tp(model, tp_mesh)``: a model's
    own step after the TP styles (DeepSeek-V3's shared RoPE key gradient). Context parallel runs in the
    attention (``hyper_parallel.cp._mindspore``), pipeline parallel applies this to each stage cell.
    ``activation`` policies are refused with an error naming the key."""
    if activation:
        raise ValueError(f"{fn_name} (MindSpore): an activation policy ([activation]) is not supported by the "
                         "MindSpore trainer path; remove the [activation] section")
    dims = parallel_dims
    check_layout(model, world_mesh, dims, fn_name, attention_plan, sequence_parallel)
    if dims.tp > 1:
        _apply_tp(model, world_mesh["tp"], sequence_parallel=sequence_parallel, loss_parallel=loss_parallel,
                  attention_plan=attention_plan, after_tp=after_tp)
    ignored = _expert_parallel(_moe_cells(model), world_mesh["dp_shard"], dims.dp) if dims.ep > 1 else []
    shard_mesh = fsdp_mesh_of(world_mesh, dims)
    if shard_mesh is not None and _pure_replicate(dims):  # DDP: gradient all-reduce during backward
        from hyper_parallel.fsdp._mindspore.replicate import replicate  # pylint: disable=import-outside-toplevel
        return replicate(model, mesh=shard_mesh)
    if shard_mesh is not None:
        from hyper_parallel.fsdp._mindspore.fully_shard import fully_shard  # pylint: disable=import-outside-toplevel
        if ignored:
            fsdp_kwargs["ignored_params"] = ignored
        for layer in model.model.layers:
            fully_shard(layer, mesh=shard_mesh, **fsdp_kwargs)
        fully_shard(model, mesh=shard_mesh, **fsdp_kwargs)
    return model


def parallelize_fsdp_only(model, world_mesh, parallel_dims, *, fn_name: str = "parallelize", **options):
    """Kept for callers of the earlier API: :func:`parallelize_llama3` (TP, EP and FSDP / HSDP now apply to
    every model of the family)."""
    return parallelize_llama3(model, world_mesh, parallel_dims, fn_name=fn_name, **options)
