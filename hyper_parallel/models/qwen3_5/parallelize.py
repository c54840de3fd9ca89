# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Parallel plans of Qwen3.5 and Qwen3.5-MoE (the hybrid Gated DeltaNet + gated full-attention decoder).

* **TP + SP** (:func:`qwen3_5_tp_plan`, per layer by its kind): full attention shards its heads
  (``q_proj`` — each head's query and gate side by side — ``k_proj``, ``v_proj`` column-wise, ``o_proj``
  row-wise, the per-head QK-norms over the heads dim); Gated DeltaNet shards its key heads (``in_proj_q``,
  ``in_proj_k``, the conv channels ``conv_q`` / ``conv_k``) and its value heads (``in_proj_v`` / ``z`` / ``b`` /
  ``a``, ``conv_v``, ``A_log``, ``dt_bias``) column-wise (:class:`GatedDeltaNetTensorParallel` for the
  parameters that are not a Linear), ``out_proj`` row-wise, the gated norm over the heads dim. A rank's value
  heads are exactly the ones its key heads serve (grouped heads are contiguous). Dense MLPs, embedding, norms
  and LM head as Llama's; MoE blocks route their rank's sequence shard (their parallelism is EP).
* **CP** (:func:`qwen3_5_cp_plan`): the sequence is split contiguously (``load_balance=None``): full-attention
  layers run our CP attention (``cp_method``), Gated DeltaNet layers pass the conv halo and the recurrent
  state from rank to rank (:class:`hyper_parallel.cp.style.LinearAttentionContextParallel`).
* **FSDP / HSDP**, **EP** (+ FSDP / HSDP of the experts; with CP and HSDP too), activation policy, meta-device
  init: as Llama's (:func:`hyper_parallel.models.llama3.parallelize.parallelize_llama3` / ``apply_moe_parallel``).
* **PP**: :func:`pipeline_qwen3_5` splits the layers of both kinds in any stage (``layers_per_stage``).
"""
from __future__ import annotations

from hyper_parallel.core.placement import Replicate, Shard
from hyper_parallel.models.llama3.parallelize import (_init_local_shards, _moe_dense_mesh, apply_moe_parallel,
                                                      llama_tp_plan, moe_meshes, moe_stage_meshes,
                                                      parallelize_llama_moe, pipeline_llama3, retie_embeddings,
                                                      stage_plan)
from hyper_parallel.models.spec import fsdp_mesh as fsdp_mesh_of
from hyper_parallel.tp import (ColwiseParallel, ParallelStyle, PrepareModuleInput, RowwiseParallel, SequenceParallel,
                               parallelize_module)

__all__ = ["qwen3_5_tp_plan", "qwen3_5_cp_plan", "check_tp", "GatedDeltaNetTensorParallel", "DocumentContextParallel",
           "parallelize_qwen3_5", "pipeline_qwen3_5", "held_layers"]


class GatedDeltaNetTensorParallel(ParallelStyle):
    """TP of a Gated DeltaNet module's own parameters: the conv channels (``conv_q`` / ``conv_k`` / ``conv_v``
    ``.weight``), ``A_log`` and ``dt_bias`` become ``Shard(0)`` DTensors (the module computes on their local
    shards); with ``sequence_parallel`` the module's input is gathered from ``Shard(1)`` as well (the
    gather's backward is one reduce-scatter)."""

    def __init__(self, sequence_parallel: bool = True) -> None:
        self.sequence_parallel = sequence_parallel

    def apply(self, module, device_mesh):
        """Shard the parameters in place; returns ``module``."""
        from hyper_parallel.tp._torch.styles import distribute_param
        for conv in (module.conv_q, module.conv_k, module.conv_v):
            distribute_param(conv, "weight", device_mesh, [Shard(0)])
        for name in ("A_log", "dt_bias"):
            distribute_param(module, name, device_mesh, [Shard(0)])
        if self.sequence_parallel:
            PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                               partial_grad_on_gather=True).apply(module, device_mesh)
        return module


def held_layers(model) -> list:
    """``(index, layer)`` of the decoder layers ``model`` holds (all of them, or a pipeline stage's)."""
    layers = model.model.layers
    return [(int(k), v) for k, v in layers.items()] if hasattr(layers, "items") else list(enumerate(layers))


def _attention_entries(prefix: str, seq) -> dict:
    heads = SequenceParallel(sequence_dim=2, use_local_output=True)
    return {f"{prefix}.q_proj": ColwiseParallel(), f"{prefix}.k_proj": ColwiseParallel(),
            f"{prefix}.v_proj": ColwiseParallel(), f"{prefix}.o_proj": RowwiseParallel(output_layouts=seq),
            f"{prefix}.q_norm": heads, f"{prefix}.k_norm": heads}


def _linear_entries(prefix: str, seq, sequence_parallel: bool) -> dict:
    plan = {f"{prefix}.in_proj_{n}": ColwiseParallel() for n in "qkvzba"}
    plan.update({f"{prefix}.out_proj": RowwiseParallel(output_layouts=seq),
                 f"{prefix}.norm": SequenceParallel(sequence_dim=2, use_local_output=True),
                 prefix: GatedDeltaNetTensorParallel(sequence_parallel)})
    return plan


def qwen3_5_tp_plan(model, sequence_parallel: bool = True, loss_parallel: bool = False) -> dict:
    """The TP (+SP, +loss parallel) plan of ``model`` (a whole model or a pipeline stage), keyed per layer by
    its kind (see the module docstring)."""
    seq = Shard(1) if sequence_parallel else Replicate()
    base = llama_tp_plan(sequence_parallel, loss_parallel)
    plan = {k: v for k, v in base.items() if not k.startswith("model.layers.")}
    config = model.config
    for i, layer in held_layers(model):
        pre = f"model.layers.{i}"
        for key, style in base.items():
            if key.startswith("model.layers.*.") and "_layernorm" in key:
                plan[key.replace("*", str(i), 1)] = style
            elif key.startswith("model.layers.*.mlp") and not config.is_moe_layer(i):
                plan[key.replace("*", str(i), 1)] = style
        if layer.layer_type == "linear_attention":
            plan.update(_linear_entries(f"{pre}.linear_attn", seq, sequence_parallel))
        else:
            plan.update(_attention_entries(f"{pre}.self_attn", seq))
            if sequence_parallel:
                plan[f"{pre}.self_attn"] = base["model.layers.*.self_attn"]
    return plan


def check_tp(config, tp: int) -> None:
    """One-line errors naming each size the TP degree ``tp`` does not divide."""
    sizes = [("num_attention_heads", config.num_attention_heads), ("num_key_value_heads", config.num_key_value_heads),
             ("linear_num_key_heads", config.linear_num_key_heads),
             ("linear_num_value_heads", config.linear_num_value_heads), ("vocab_size", config.vocab_size)]
    if config.moe is None or config.first_k_dense_layers:
        sizes.append(("intermediate_size", config.intermediate_size))
    for what, value in sizes:
        if value % tp:
            raise ValueError(f"parallelize_qwen3_5: {what}={value} is not divisible by the TP degree {tp}")


class DocumentContextParallel(ParallelStyle):
    """Marks the text model (``model.model``) as split over the CP mesh: with packed documents (positions that
    restart) its full-attention layers get the document mask of the whole sequence (see
    ``Qwen3_5TextModel.cp_mesh``)."""

    def apply(self, module, device_mesh):
        """Record ``device_mesh`` on ``module``; returns it."""
        module.cp_mesh = device_mesh
        return module


def qwen3_5_cp_plan(model, method: str = "allgather", async_cp: bool = False) -> dict:
    """The CP plan: contiguous sequence split; full-attention layers run CP attention (``method``; ``async_cp``:
    the asynchronous variant) with packed documents' masks over the whole sequence, Gated DeltaNet layers pass
    the conv halo and recurrent state rank to rank (reset at document starts)."""
    from hyper_parallel.cp.style import AsyncContextParallel, ContextParallel, LinearAttentionContextParallel
    attention = AsyncContextParallel if async_cp else ContextParallel
    plan = {"model": DocumentContextParallel()}
    for i, layer in held_layers(model):
        if layer.layer_type == "linear_attention":
            plan[f"model.layers.{i}.linear_attn"] = LinearAttentionContextParallel()
        else:
            plan[f"model.layers.{i}.self_attn"] = attention(method=method, load_balance=None)
    return plan


def _before_fsdp(activation):
    def run(module) -> None:
        if activation is not None:
            from hyper_parallel.activation import apply_activation_policy
            apply_activation_policy(module, activation)
    return run


def _parallelize_moe(model, world_mesh, dims, loss_parallel, async_dispatch, before_fsdp, cp_plan):
    if dims.etp > 1:  # expert tensor parallelism: the [ep, tp] expert mesh of parallelize_llama_moe
        _parallelize_moe_etp(model, world_mesh, dims, loss_parallel, async_dispatch, before_fsdp)
        return
    meshes = moe_meshes(world_mesh, dims, cp_plan=cp_plan)
    if meshes is None:  # one rank per stage: nothing to distribute
        before_fsdp(model)
        return
    apply_moe_parallel(model, meshes, tp_plan=qwen3_5_tp_plan(model, True, loss_parallel) if dims.tp > 1 else None,
                       async_dispatch=async_dispatch, before_fsdp=before_fsdp)


def _parallelize_moe_etp(model, world_mesh, dims, loss_parallel, async_dispatch, before_fsdp):
    if dims.cp > 1 or dims.dp_replicate > 1:
        raise ValueError(f"parallelize_qwen3_5: Qwen3.5-MoE with etp > 1 supports pp x dp_shard x tp x ep (no CP or "
                         f"HSDP dp_replicate: the [ep, tp] expert mesh has no replicate / cp dim), got {dims}")
    meshes = moe_stage_meshes(world_mesh, dims) if dims.pp > 1 and dims.dp_shard * dims.tp > 1 else None
    mesh = meshes[0] if meshes else _moe_dense_mesh(world_mesh, dims)
    if mesh is None:  # one rank per stage: nothing to distribute
        before_fsdp(model)
        return
    parallelize_llama_moe(model, mesh, ep=dims.ep, loss_parallel=loss_parallel, async_dispatch=async_dispatch,
                          before_fsdp=before_fsdp, expert_mesh=meshes[1] if meshes else None, etp=dims.etp,
                          flat_mesh=meshes[2] if meshes else None,
                          tp_plan=qwen3_5_tp_plan(model, True, loss_parallel) if dims.tp > 1 else None)


def parallelize_qwen3_5(model, world_mesh, parallel_dims, *, sequence_parallel: bool = True,
                        loss_parallel: bool = False, cp_method: str = "allgather", async_cp: bool = False,
                        cp_load_balance=None, activation=None, async_dispatch: bool = True, init_seed=None,
                        **fsdp_kwargs):
    """The registry's ``parallelize_fn`` of Qwen3.5 and Qwen3.5-MoE: TP + SP (:func:`qwen3_5_tp_plan`) on
    ``world_mesh["tp"]``, CP (:func:`qwen3_5_cp_plan`) on ``world_mesh["cp"]``, the ``activation`` policy, then
    FSDP / HSDP per decoder layer and the root (``fsdp_kwargs`` go to ``fully_shard``); a model with MoE layers
    takes ``apply_moe_parallel`` on :func:`~hyper_parallel.models.llama3.parallelize.moe_meshes` (EP over
    ``parallel_dims.ep`` ranks borrowed from ``dp_shard * cp * tp``; CP and HSDP compose).
    ``init_seed``: materialise a meta-device model's local shards after the plan (layout-independent values).
    ``cp_load_balance`` must be None / ``"none"`` (the recurrence needs a contiguous split). Returns the model
    (apply it to each pipeline stage module under PP)."""
    dims = parallel_dims
    if dims.cp > 1 and cp_load_balance not in (None, "none"):
        raise ValueError(f"parallelize_qwen3_5(cp_load_balance={cp_load_balance!r}): the linear-attention layers pass "
                         "their state along a contiguous split; expected None or 'none'")
    if dims.tp > 1:
        check_tp(model.config, dims.tp)
    before_fsdp = _before_fsdp(activation)
    if model.config.moe is not None:
        _parallelize_moe(model, world_mesh, dims, loss_parallel, async_dispatch, before_fsdp,
                         qwen3_5_cp_plan(model, cp_method, async_cp) if dims.cp > 1 else None)
        return _init_local_shards(model, init_seed)
    if dims.tp > 1:
        parallelize_module(model, world_mesh["tp"], stage_plan(
            model, qwen3_5_tp_plan(model, sequence_parallel, loss_parallel), sequence_parallel))
        retie_embeddings(model)
    if dims.cp > 1:
        parallelize_module(model, world_mesh["cp"], qwen3_5_cp_plan(model, cp_method, async_cp))
    before_fsdp(model)
    shard_mesh = fsdp_mesh_of(world_mesh, dims)
    if shard_mesh is not None:
        from hyper_parallel.fsdp._torch.fully_shard import fully_shard
        for _, layer in held_layers(model):
            fully_shard(layer, mesh=shard_mesh, **fsdp_kwargs)
        fully_shard(model, mesh=shard_mesh, **fsdp_kwargs)
    return _init_local_shards(model, init_seed)


def pipeline_qwen3_5(model, world_mesh, parallel_dims, **kwargs):
    """The registry's ``pipelining_fn`` (Llama's split: layers of both kinds in any stage; ``layers_per_stage``
    places them explicitly). Returns ``(schedule, stage_modules)``."""
    return pipeline_llama3(model, world_mesh, parallel_dims, **kwargs)
