# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Parallelisation plans for the Llama model (the model code itself never mentions a mesh)."""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Optional

from hyper_parallel.core.placement import Replicate, Shard
from hyper_parallel.models.spec import fsdp_mesh as fsdp_mesh_of
from hyper_parallel.tp import (ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel,
                               parallelize_module)

__all__ = ["llama_tp_plan", "llama_cp_plan", "parallelize_llama", "llama_moe_tp_plan", "parallelize_llama_moe",
           "pipeline_llama", "parallelize_llama3", "pipeline_llama3", "qk_norm_plan",
           "with_attention_plan", "retie_embeddings", "stage_plan", "moe_stage_meshes", "tied_copies", "MoEMeshes",
           "moe_meshes", "apply_moe_parallel"]


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


def llama_cp_plan(method: str = "ring", async_cp: bool = False, load_balance="headtail") -> dict:
    """The context-parallel plan: every attention module's SDPA runs as CP attention. The caller
    shards input ids, labels and position ids with ``hyper_parallel.cp.context_parallel_shard``."""
    from hyper_parallel.cp import AsyncContextParallel, ContextParallel
    style = (AsyncContextParallel if async_cp else ContextParallel)(method=method, load_balance=load_balance)
    return {"model.layers.*.self_attn": style}


def qk_norm_plan(config) -> dict:
    """TP entries of Qwen3's per-head query/key norms (empty without ``config.qk_norm``): under TP each rank
    holds some heads, so the norm runs as ``SequenceParallel`` over the heads dim (its replicated weight's
    gradient is summed over the TP ranks)."""
    if not getattr(config, "qk_norm", False):
        return {}
    style = SequenceParallel(sequence_dim=2, use_local_output=True)
    return {"model.layers.*.self_attn.q_norm": style, "model.layers.*.self_attn.k_norm": style}


_EXPERTS = "model.layers.*.mlp.experts"
_QKVO = tuple(f"model.layers.*.self_attn.{n}_proj" for n in "qkvo")


def with_attention_plan(plan: dict, config, attention_plan=None, sequence_parallel: bool = True) -> dict:
    """``plan`` with its q/k/v/o entries replaced by ``attention_plan(config, sequence_parallel)`` (a model
    whose attention is not Llama's, e.g. DeepSeek-V3's MLA) and the QK-norm entries added."""
    if attention_plan is not None:
        plan = {k: v for k, v in plan.items() if k not in _QKVO}
        plan.update(attention_plan(config, sequence_parallel))
    plan.update(qk_norm_plan(config))
    return plan


def retie_embeddings(model) -> None:
    """With ``tie_word_embeddings``, make ``lm_head.weight`` the embedding's parameter again after TP gave
    each module its own (both are vocabulary-sharded ``Shard(0)`` on the same mesh)."""
    if getattr(model.config, "tie_word_embeddings", False) and model.lm_head is not None \
            and model.model.embed_tokens is not None:
        model.lm_head.weight = model.model.embed_tokens.weight


def _held_layers(model) -> set:
    layers = model.model.layers
    return set(layers.keys()) if hasattr(layers, "keys") else {str(i) for i in range(len(layers))}


def stage_plan(model, plan: dict, sequence_parallel: bool = False) -> dict:
    """``plan`` without the entries of modules a pipeline stage module does not hold (``pipeline_llama``
    sets the embedding / final norm / head of other stages to None and keeps some layers only): the
    embedding's entry on a non-first stage, the head's before the last, ``model.layers.<i>...`` entries
    of layers held elsewhere (``model.layers.*...`` when the stage holds no layer). Every other key is
    kept, so a mistyped key still fails in ``parallelize_module``. A whole model keeps its plan.

    With ``sequence_parallel`` a stage without the embedding receives the previous stage's residual
    stream as its local sequence shard; the stage gathers it on entry (``model``: the decoder computes
    RoPE positions from the sequence length) and shards it again before its first layer."""
    inner = model.model
    absent = [name for name, mod in (("model.embed_tokens", inner.embed_tokens), ("model.norm", inner.norm),
                                     ("lm_head", model.lm_head)) if mod is None]
    held = _held_layers(model)
    out = {}
    for key, style in plan.items():
        if any(key == a or key.startswith(a + ".") for a in absent):
            continue
        if key.startswith("model.layers."):
            index = key.split(".")[2]
            if (index == "*" and not held) or (index != "*" and index not in held):
                continue
        out[key] = style
    if sequence_parallel and "model.embed_tokens" in absent and held:
        first = min(held, key=int)
        out["model"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                                          use_local_output=True)
        out[f"model.layers.{first}"] = PrepareModuleInput(input_layouts=(Replicate(),),
                                                          desired_input_layouts=(Shard(1),), use_local_output=True)
    return out


def _check_divisible(cfg, n: int, attention: bool = True) -> None:
    sizes = [("intermediate_size", cfg.intermediate_size), ("vocab_size", cfg.vocab_size)]
    if attention:
        sizes = [("num_attention_heads", cfg.num_attention_heads), ("num_key_value_heads", cfg.num_key_value_heads),
                 *sizes]
    for what, value in sizes:
        if value % n:
            raise ValueError(f"parallelize_llama: {what}={value} is not divisible by the TP degree {n}")


def parallelize_llama(model, tp_mesh=None, *, sequence_parallel: bool = True, loss_parallel: bool = False,
                      fused_sp_grad: bool = True, cp_mesh=None, cp_method: str = "ring", async_cp: bool = False,
                      cp_load_balance="headtail", fsdp_mesh=None):
    """Apply TP (:func:`llama_tp_plan` on the 1-D ``tp_mesh``), then CP (:func:`llama_cp_plan` on the 1-D
    ``cp_mesh``), then FSDP (``fully_shard`` per decoder layer and the root on ``fsdp_mesh``; with CP
    the FSDP mesh spans the CP ranks too, as TorchTitan's ``dp_shard x cp``). Returns the model."""
    if tp_mesh is not None:
        _check_divisible(model.config, tp_mesh.size())
        parallelize_module(model, tp_mesh, stage_plan(model, {
            **llama_tp_plan(sequence_parallel, loss_parallel, fused_sp_grad), **qk_norm_plan(model.config)},
            sequence_parallel))
        retie_embeddings(model)
    if cp_mesh is not None:
        parallelize_module(model, cp_mesh, stage_plan(model, llama_cp_plan(cp_method, async_cp, cp_load_balance)))
    if fsdp_mesh is not None:
        from hyper_parallel.fsdp._torch.fully_shard import fully_shard
        for layer in model.model.layers:
            fully_shard(layer, mesh=fsdp_mesh)
        fully_shard(model, mesh=fsdp_mesh)
    return model


def llama_moe_tp_plan(config, loss_parallel: bool = False, attention_plan=None) -> dict:
    """:func:`llama_tp_plan` (with sequence parallel) for a model with MoE layers: the MLP entries are
    kept for the dense layers only, and MoE blocks get no TP entry: they run on each rank's sequence
    shard as it is (their own parallelism is expert parallel, see :func:`parallelize_llama_moe`)."""
    plan = {}
    for key, style in llama_tp_plan(True, loss_parallel).items():
        if key.startswith("model.layers.*.mlp"):
            for i in range(config.num_hidden_layers):
                if not config.is_moe_layer(i):
                    plan[key.replace("*", str(i), 1)] = style
        else:
            plan[key] = style
    return with_attention_plan(plan, config, attention_plan)


def _dense_dims(mesh):
    if mesh.ndim == 1:
        return mesh, None, mesh.size(), 1
    names = mesh.mesh_dim_names or ()
    dp_name = "dp" if "dp" in names else "dp_shard"
    if mesh.ndim != 2 or dp_name not in names or "tp" not in names:
        raise ValueError(f"parallelize_llama_moe(mesh): expected a 1-D data-parallel mesh or a 2-D mesh with dims "
                         f"('dp', 'tp') or ('dp_shard', 'tp'), got {mesh}")
    return mesh[dp_name], mesh["tp"], mesh.size(dp_name), mesh.size("tp")


def parallelize_llama_moe(model, mesh, *, ep: int, loss_parallel: bool = False, async_dispatch: bool = True,
                          attention_plan=None, before_fsdp=None, expert_mesh=None, flat_mesh=None, tp_plan=None,
                          etp: int = 1):
    """EP + FSDP + TP for a Llama with MoE layers (``TINY_CONFIGS["debug_moe"]``); returns the model.

    ``mesh`` is 1-D (data parallel) or 2-D with dims ``("dp", "tp")``. With ``tp > 1``: tensor +
    sequence parallel on attention, dense MLPs, embeddings and the LM head (:func:`llama_moe_tp_plan`);
    every MoE block then routes its rank's own sequence shard. The experts are expert-parallel over
    ``ep`` ranks borrowed from ``dp * tp`` (TorchTitan's rule: ``efsdp * ep = dp * tp``, checked with
    an error naming the dims) and sharded by ``fully_shard`` over the remaining ``efsdp``; routers and
    shared experts are data parallel over all ``dp * tp`` ranks (``fully_shard`` on the flattened
    mesh); each decoder layer and the root are ``fully_shard`` -ed over ``dp``. Gradients come out as
    the average over the ``dp`` replicas of the loss. Register the expert-bias update with
    ``hyper_parallel.moe.register_moe_load_balancing_hook(model, optimizer)``. ``expert_mesh`` (dims
    ``("efsdp", "ep")``) and ``flat_mesh`` (1-D over ``dp * tp``): given when ``mesh`` is a slice of a
    larger world (pipeline stages; see :func:`moe_stage_meshes`), default built from ``mesh``. ``model``
    may be a pipeline stage module (layers held elsewhere are skipped). ``tp_plan``: the whole TP plan to
    apply instead of :func:`llama_moe_tp_plan` (a model whose layers are not all Llama's, e.g. Qwen3.5's
    hybrid layers).

    ``etp = tp`` (expert tensor parallelism, ETP): the experts live on the 2-D ``[ep, etp]`` mesh, ``E / ep``
    experts per ep rank and each expert's hidden dim split over the tp ranks (``ExpertTensorParallel``); the
    tp ranks route their own sequence shards, so the experts gather the rows of the tp group and
    reduce-scatter the partial outputs back (``GroupedExperts.tp_gather_tokens``). ETP takes ep from ``dp``
    only and needs ``ep = dp`` (no expert-FSDP dim: FSDP does not compose with a 2-D expert mesh); the
    experts' gradients are scaled by ``1 / dp`` (``GroupedExperts.grad_scale``). ``expert_mesh`` then is the
    ``("ep", "etp")`` mesh (default built from ``mesh``).
    """
    from hyper_parallel.fsdp._torch.fully_shard import fully_shard
    from hyper_parallel.moe._torch.styles import init_expert_mesh
    cfg = model.config
    if cfg.moe is None:
        raise ValueError("parallelize_llama_moe: the model has no MoE layers (config.moe is None); use "
                         "parallelize_llama")
    dp_mesh, tp_mesh, dp, tp = _dense_dims(mesh)
    _check_etp(dp, tp, ep, etp)
    if expert_mesh is None:
        expert_mesh = (_reshaped(mesh, (dp, tp), ("ep", "etp")) if etp > 1
                       else init_expert_mesh(mesh.device_type, dp_shard=dp, tp=tp, ep=ep))
    if tp > 1:
        if tp_plan is None:
            _check_divisible(cfg, tp, attention=attention_plan is None)
            tp_plan = llama_moe_tp_plan(cfg, loss_parallel, attention_plan)
        parallelize_module(model, tp_mesh, stage_plan(model, tp_plan, sequence_parallel=True))
        retie_embeddings(model)
    _shard_experts(model, expert_mesh, etp, async_dispatch)
    if before_fsdp is not None:  # e.g. materialise a meta-device model's local shards
        before_fsdp(model)
    flat = dp_mesh if tp == 1 else flat_mesh or mesh._flatten("dp_tp")  # pylint: disable=protected-access
    # ETP: the experts are already split over every rank of the [ep, etp] mesh; FSDP leaves them alone
    ignored = [p for m in model.modules() if getattr(m, "tp_gather_tokens", False) for p in m.parameters()] or None
    _shard_layers(model, (dp_mesh, tp_mesh, flat, expert_mesh), dp, tp, etp, ignored)
    return fully_shard(model, mesh=dp_mesh, ignored_params=ignored)


def _shard_layers(model, meshes, dp: int, tp: int, etp: int, ignored) -> None:
    """FSDP of the decoder layers over ``dp``; in MoE layers the token groups, the experts (expert-FSDP over
    ``efsdp``, or the ``1 / dp`` gradient scale under ETP) and the routers / shared experts over ``dp x tp``."""
    from hyper_parallel.fsdp._torch.fully_shard import fully_shard
    from hyper_parallel.moe._torch.styles import fully_shard_experts
    dp_mesh, tp_mesh, flat, expert_mesh = meshes
    cfg = model.config
    layers = model.model.layers
    for i, layer in (((int(k), v) for k, v in layers.items()) if hasattr(layers, "items") else enumerate(layers)):
        if cfg.is_moe_layer(i):
            # global-batch statistics for the auxiliary loss / z-loss: every rank of dp x tp holds distinct
            # tokens (tp: sequence-parallel shards); router gradients are averaged over the dp replicas
            layer.mlp.set_token_groups(flat.get_group(0), tp_mesh.get_group(0) if tp > 1 else None,
                                       data_parallel_size=dp)
            if etp > 1:  # no FSDP over the 2-D expert mesh: average the dp loss replicas' sum here
                layer.mlp.experts.grad_scale = 1.0 / dp
            else:
                fully_shard_experts(layer.mlp.experts, expert_mesh, data_parallel_size=dp)
            for part in (layer.mlp.router, layer.mlp.shared_experts):
                if part is not None:
                    fully_shard(part, mesh=flat)
                    part.set_gradient_scaling_factor(float(tp))  # tp ranks hold slices of one loss
        fully_shard(layer, mesh=dp_mesh, ignored_params=ignored)


def _check_etp(dp: int, tp: int, ep: int, etp: int) -> None:
    """ETP's constraints, one line each naming the degrees."""
    if etp == 1:
        return
    if etp != tp:
        raise ValueError(f"parallelize_llama_moe(etp={etp}): expected 1 or tp={tp} (the experts' hidden dim splits "
                         "over the tp ranks)")
    if ep != dp:
        raise ValueError(f"parallelize_llama_moe(ep={ep}, etp={etp}): expert tensor parallelism needs ep = dp_shard = "
                         f"{dp} (an expert-FSDP dim dp_shard/ep > 1 would make the expert mesh 3-D, which FSDP does "
                         "not compose with)")


def _shard_experts(model, expert_mesh, etp: int, async_dispatch: bool) -> None:
    """EP on ``expert_mesh["ep"]``, or ETP on the ``("ep", "etp")`` mesh (TP of the experts when ep = 1)."""
    from hyper_parallel.moe._torch.styles import ExpertParallel, ExpertTensorParallel, TensorParallel
    if etp == 1:
        parallelize_module(model, expert_mesh["ep"], {"model.layers.*.mlp.experts": ExpertParallel(
            async_dispatch=async_dispatch)})
        return
    if expert_mesh.shape[0] == 1:  # ep = 1: no exchange, every expert on every tp rank
        parallelize_module(model, expert_mesh["etp"], {"model.layers.*.mlp.experts": TensorParallel()})
    else:
        parallelize_module(model, expert_mesh, {"model.layers.*.mlp.experts": ExpertTensorParallel(
            async_dispatch=async_dispatch)})
    for module in model.modules():
        if type(module).__name__ == "GroupedExperts":
            module.tp_gather_tokens = True  # the tp ranks route their own sequence shards


@dataclass
class MoEMeshes:
    """Where each part of a model with MoE layers is parallelised (:func:`moe_meshes` builds it from the world
    mesh; :func:`apply_moe_parallel` applies it).

    ``fsdp``: the dense layers' and the root's ``fully_shard`` mesh (1-D ``dp_shard * cp``, 2-D with
    ``dp_replicate`` for HSDP; None: one data-parallel rank). ``tp``: the 1-D TP mesh (None without TP).
    ``expert``: dims ``("efsdp", "ep")``; with ``dp_replicate`` the experts are sharded over the replicas too
    (``efsdp = dp_replicate * dp_shard * cp * tp / ep``: ``fully_shard`` has no HSDP of parameters that another
    mesh dim shards). ``flat``: every rank of the stage (``dp_tp``, with ``dp_replicate`` in front for HSDP),
    where routers and shared experts are ``fully_shard`` -ed. ``token_group``: every rank of the stage (distinct
    tokens of one global batch: the balancing statistics). ``sequence_group``: the ranks splitting one sequence
    (``cp x tp``), or None. ``data_parallel_size``: the loss replicas whose gradients the experts' FSDP averages
    (``dp_replicate * dp_shard * cp``); ``replicas``: the loss replicas of the auxiliary loss's factor (the same).
    ``cp``: the context-parallel degree (CP ranks are averaged, not summed, so the sequence-level auxiliary
    loss's shares are scaled by it). ``cp_mesh`` / ``cp_plan``: the CP plan applied to the attention layers."""

    fsdp: Any
    tp: Any
    expert: Any
    flat: Any
    token_group: Any
    sequence_group: Any
    data_parallel_size: int
    replicas: int
    cp: int = 1
    cp_mesh: Any = None
    cp_plan: Optional[dict] = None


def apply_moe_parallel(model, meshes: MoEMeshes, *, tp_plan=None, async_dispatch: bool = True, before_fsdp=None,
                       **fsdp_kwargs):
    """TP (``tp_plan`` on ``meshes.tp``), CP (``meshes.cp_plan``), EP of the experts, ``before_fsdp(model)``,
    then FSDP / HSDP of the experts (``meshes.expert``), routers and shared experts (``meshes.flat``), decoder
    layers and the root (``meshes.fsdp``) of a model (or pipeline stage module) with MoE layers; returns it.
    Gradients come out as the average over the loss replicas (see :class:`MoEMeshes`)."""
    from hyper_parallel.fsdp._torch.fully_shard import fully_shard
    from hyper_parallel.moe._torch.styles import ExpertParallel, fully_shard_experts
    cfg, m = model.config, meshes
    tp = m.tp.size() if m.tp is not None else 1
    if m.tp is not None:
        parallelize_module(model, m.tp, stage_plan(model, tp_plan, sequence_parallel=True))
        retie_embeddings(model)
    if m.cp_plan:
        parallelize_module(model, m.cp_mesh, stage_plan(model, m.cp_plan))
    if any(fnmatch.fnmatchcase(name, _EXPERTS) for name, _ in model.named_modules()):  # a stage may hold none
        parallelize_module(model, m.expert["ep"], {_EXPERTS: ExpertParallel(async_dispatch=async_dispatch)})
    if before_fsdp is not None:  # e.g. materialise a meta-device model's local shards
        before_fsdp(model)
    layers = model.model.layers
    for i, layer in (((int(k), v) for k, v in layers.items()) if hasattr(layers, "items") else enumerate(layers)):
        if cfg.is_moe_layer(i):
            # global-batch statistics for the auxiliary loss / z-loss: every rank of the stage holds distinct
            # tokens (tp: sequence-parallel shards, cp: sequence chunks); router gradients are averaged over the
            # loss replicas (dp x cp) and summed over tp
            layer.mlp.set_token_groups(m.token_group, m.sequence_group, data_parallel_size=m.replicas,
                                       averaged_sequence_ranks=m.cp)
            fully_shard_experts(layer.mlp.experts, m.expert, data_parallel_size=m.data_parallel_size)
            for part in (layer.mlp.router, layer.mlp.shared_experts):
                if part is not None:
                    fully_shard(part, mesh=m.flat)
                    part.set_gradient_scaling_factor(float(tp))  # tp ranks hold slices of one loss
        if m.fsdp is not None:
            fully_shard(layer, mesh=m.fsdp, **fsdp_kwargs)
    return fully_shard(model, mesh=m.fsdp, **fsdp_kwargs) if m.fsdp is not None else model


def pipeline_llama(model, *, schedule: str = "1F1B", n_microbatches: int, pp_group=None,
                   stages_per_rank: Optional[int] = None, first_stage_less: int = 1, last_stage_less: int = 1,
                   layers_per_stage=None, loss_fn=None, device=None, **schedule_kwargs):
    """Split the Llama into pipeline stages (TorchTitan way: layers per stage, the first and last stage
    lighter by ``first_stage_less`` / ``last_stage_less`` layers for the embedding and the head; or the
    explicit ``layers_per_stage`` list, one entry per stage summing to the layer count), build this
    rank's ``PipelineStage`` s and the ``schedule``. Returns ``(schedule, stage_modules)``; apply TP/FSDP to
    the stage modules before calling ``step``. ``loss_fn`` defaults to the model's next-token loss; ``device``
    (the stages' device) to where the model's parameters are. Keyword inputs of ``step`` (``position_ids``,
    ``attention_mask``) reach every stage of the ranks that pass them (``PipelineStage.pass_kwargs_to_all``):
    pass them on every pipeline rank, with ``kwargs_chunk_spec`` ``{"position_ids": None}`` for positions shared
    by every row (e.g. context-parallel shards)."""
    import torch.distributed as dist
    from hyper_parallel.pipeline.api import PipelineStage, get_schedule_class
    from hyper_parallel.pipeline.schedules import generate_schedule
    from hyper_parallel.pipeline.split import module_names_per_stage
    from hyper_parallel.pipeline._torch.split import pipeline_module_split
    pp = dist.get_world_size(pp_group)
    rank = dist.get_rank(pp_group)
    cls = get_schedule_class(schedule)
    v = stages_per_rank if stages_per_rank is not None else (2 if cls.multi else 1)
    plan = generate_schedule(cls.schedule_name, pp, n_microbatches, v)
    names = module_names_per_stage(model.config.num_hidden_layers, plan.num_stages, layer_prefix="model.layers",
                                   first=("model.embed_tokens",), last=("model.norm", "lm_head"),
                                   first_stage_less=first_stage_less, last_stage_less=last_stage_less,
                                   layers_per_stage=layers_per_stage)
    mine = [s for s in range(plan.num_stages) if plan.stage_to_rank[s] == rank]
    parts = pipeline_module_split(model, names, mine)
    if device is None:  # where the model's parameters live (PipelineStage's default for a meta-device model)
        device = next((p.device for p in model.parameters() if p.device.type != "meta"), None)
    stages = [PipelineStage(part, s, plan.num_stages, device, group=pp_group) for part, s in zip(parts, mine)]
    for stage in stages:  # position ids / padding mask: every stage's layers need them (pass them on every rank)
        stage.pass_kwargs_to_all = True
    if getattr(model.config, "tie_word_embeddings", False):
        _tie_across_stages(parts, mine, plan, stages, pp_group)
    loss = loss_fn if loss_fn is not None else type(model).loss
    sched = cls(stages if cls.multi else stages[0], n_microbatches, loss_fn=loss, **schedule_kwargs)
    return sched, parts


def _tie_across_stages(parts, mine, plan, stages, pp_group) -> None:
    """Tied embeddings under PP: the embedding (first stage) and the head (last stage) are copies of one
    weight. On one rank the head takes the embedding's Parameter; on two ranks both stages sum their
    gradients over the pipeline group every step (``PipelineStage.tie_parameters``; a pipeline group of
    more ranks would need a 2-rank group: refused)."""
    import torch.distributed as dist
    last = plan.num_stages - 1
    first_rank, last_rank = plan.stage_to_rank[0], plan.stage_to_rank[last]
    if first_rank == last_rank:
        if 0 in mine:
            parts[mine.index(last)].lm_head.weight = parts[mine.index(0)].model.embed_tokens.weight
        return
    if dist.get_world_size(pp_group) != 2:
        raise ValueError(f"pipeline_llama: tied embeddings with the first and last stage on different ranks need a "
                         f"2-rank pipeline group, got {dist.get_world_size(pp_group)} ranks (untie the embeddings: "
                         "tie_word_embeddings=False)")
    for part, s, stage in zip(parts, mine, stages):  # getters: TP / FSDP replace the parameters later
        if s == 0:
            stage.tie_parameters([lambda part=part: part.model.embed_tokens.weight], pp_group)
        elif s == last:
            stage.tie_parameters([lambda part=part: part.lm_head.weight], pp_group)
            # the head's weight is a copy of the embedding's: its (summed) gradient is counted once in the
            # global gradient norm, on the first stage's rank (``tied_copies``)
            part.tied_copies = (lambda part=part: part.lm_head.weight,)


def tied_copies(parts) -> list:
    """The parameters of the pipeline stage modules ``parts`` that are copies of a parameter another rank's
    stage holds and counts (tied embeddings over two ranks: the head's weight on the last stage): a global
    gradient norm must leave them out (and still scale their gradients)."""
    return [get() for part in parts for get in getattr(part, "tied_copies", ())]


def _moe_dense_mesh(world_mesh, dims):
    """The ``(dp_shard, tp)`` (or 1-D ``dp_shard``) mesh :func:`parallelize_llama_moe` takes; size-1 dims may
    be absent from ``world_mesh`` (the MoE path runs on ``dp_shard x tp`` worlds only)."""
    names = world_mesh.mesh_dim_names or ()
    if dims.tp == 1:
        return world_mesh["dp_shard"] if dims.dp_shard > 1 else None
    if "dp_shard" in names:
        return world_mesh[("dp_shard", "tp")]
    from hyper_parallel.core.device_mesh import DeviceMesh  # dp_shard == 1: the world is the tp group
    return DeviceMesh(world_mesh.device_type, [list(world_mesh["tp"].topology.ranks)],
                      mesh_dim_names=("dp_shard", "tp"))


def _reshaped(world_mesh, shape, names):
    """A mesh over ``world_mesh``'s ranks in their row-major order with dims ``names`` of ``shape`` (every
    rank builds the same one, so its groups are created in the same order everywhere)."""
    from hyper_parallel.core.device_mesh import DeviceMesh
    nested = list(world_mesh.topology.ranks)
    for size in reversed(shape[1:]):
        nested = [nested[i:i + size] for i in range(0, len(nested), size)]
    return DeviceMesh(world_mesh.device_type, nested, mesh_dim_names=tuple(names), platform=world_mesh.platform)


def moe_stage_meshes(world_mesh, dims):
    """``(dense, expert, flat)`` meshes of :func:`parallelize_llama_moe` for this rank's pipeline stage in a
    world ``(pp, dp_shard, tp)`` (size-1 dims may be absent): the ``(dp_shard, tp)`` slice (1-D
    ``dp_shard`` without TP), the ``(efsdp, ep)`` expert slice and the 1-D ``dp_tp`` slice. Each is a
    slice of a mesh every rank builds over the whole world, and the slices' own groups are created on
    every rank in the same order (gloo / nccl group creation is collective)."""
    from hyper_parallel.core.process_group import get_or_create_group
    pp, dp, tp, ep = dims.pp, dims.dp_shard, dims.tp, dims.ep
    block = dp * tp
    ranks = list(world_mesh.topology.ranks)
    for start in range(0, len(ranks), block):  # each stage's whole group, on every rank, in order
        get_or_create_group(ranks[start:start + block], world_mesh.platform)
    dense = _reshaped(world_mesh, (pp, dp, tp), ("pp", "dp_shard", "tp"))
    dense = dense[("dp_shard", "tp")] if tp > 1 else dense["dp_shard"]
    if dims.etp > 1:  # ETP: the experts' ("ep", "etp") mesh is the stage's (dp_shard, tp) slice
        expert = _reshaped(world_mesh, (pp, dp, tp), ("pp", "ep", "etp"))[("ep", "etp")]
    else:
        expert = _reshaped(world_mesh, (pp, block // ep, ep), ("pp", "efsdp", "ep"))[("efsdp", "ep")]
    flat = _reshaped(world_mesh, (pp, block), ("pp", "dp_tp"))["dp_tp"]
    return dense, expert, flat


def _slice(world_mesh, sizes, keep):
    """This rank's slice ``keep`` of the row-major reshape of ``world_mesh``'s ranks into ``sizes`` (an ordered
    ``{name: size}``; size-1 names outside ``keep`` are dropped)."""
    sizes = {n: v for n, v in sizes.items() if v > 1 or n in keep}
    return _reshaped(world_mesh, tuple(sizes.values()), tuple(sizes))[tuple(keep)]


def moe_meshes(world_mesh, dims, *, cp_plan=None) -> Optional[MoEMeshes]:
    """:class:`MoEMeshes` of this rank's pipeline stage (or the whole model) in a world mesh of
    :data:`~hyper_parallel.models.parallel_dims.MESH_DIM_ORDER` (size-1 dims may be absent): experts borrow
    ``ep`` ranks from ``dp_shard x cp x tp`` (TorchTitan's rule) and are sharded over the rest (``efsdp``, the
    ``dp_replicate`` replicas included); ``cp_plan``: the attention's CP plan (applied on ``world_mesh["cp"]``).
    None when the stage has one rank. Every rank builds the same meshes, in the same order (group creation is
    collective)."""
    from hyper_parallel.core.process_group import get_or_create_group, get_rank
    pp, rep, dp, cp, tp, ep = dims.pp, dims.dp_replicate, dims.dp_shard, dims.cp, dims.tp, dims.ep
    block = dp * cp * tp
    if rep * block == 1:
        return None
    ranks, me, token_group = list(world_mesh.topology.ranks), get_rank(), None
    for start in range(0, len(ranks), rep * block):  # each stage's whole group, on every rank, in order
        group = get_or_create_group(ranks[start:start + rep * block], world_mesh.platform)
        token_group = group if me in ranks[start:start + rep * block] else token_group
    lead = {"pp": pp, "dp_replicate": rep}
    rep_keep = ("dp_replicate",) if rep > 1 else ()
    # experts: FSDP over dp_replicate x efsdp (fully_shard has no HSDP of parameters another mesh dim shards)
    expert = _slice(world_mesh, {"pp": pp, "efsdp": rep * block // ep, "ep": ep}, ("efsdp", "ep"))
    flat = _slice(world_mesh, dict(lead, dp_tp=block), rep_keep + ("dp_tp",))
    sequence = _slice(world_mesh, dict(lead, dp_shard=dp, seq=cp * tp), ("seq",)) if cp * tp > 1 else None
    return MoEMeshes(fsdp=fsdp_mesh_of(world_mesh, dims), tp=world_mesh["tp"] if tp > 1 else None, expert=expert,
                     flat=flat, token_group=token_group,
                     sequence_group=sequence.get_group(0) if sequence is not None else None,
                     data_parallel_size=rep * dp * cp, replicas=rep * dp * cp, cp=cp,
                     cp_mesh=world_mesh["cp"] if cp > 1 else None, cp_plan=cp_plan if cp > 1 else None)


#: why a MoE model with expert tensor parallelism (etp > 1) refuses a degree (etp = 1 composes with every degree:
#: :func:`moe_meshes`) (one line each; see docs/moe.md, "Not done / limits")
MOE_REFUSALS = {
    "cp": "the experts' mesh (efsdp x ep) and their FSDP have no cp dim yet, and the balancing statistics are not "
          "summed over the CP ranks; use cp = 1 with a MoE model",
    "dp_replicate": "the experts' FSDP is 1-D over efsdp: HSDP (a replicate dim) of expert-parallel parameters is "
                    "not implemented; use dp_shard instead of dp_replicate with a MoE model",
}


def _check_moe_layout(dims, fn_name: str) -> None:
    """One line naming the degree a model with MoE layers does not compose with, and why."""
    for key, why in MOE_REFUSALS.items():
        value = getattr(dims, key)
        if value > 1:
            raise ValueError(f"{fn_name}: parallelism.{key}={value} with a MoE model: {why}")


def parallelize_llama3(model, world_mesh, parallel_dims, *, sequence_parallel: bool = True,
                       loss_parallel: bool = False, cp_method: str = "ring", async_cp: bool = False,
                       cp_load_balance="headtail", activation=None, async_dispatch: bool = True,
                       attention_plan=None, init_seed=None, fn_name: str = "parallelize_llama3", **fsdp_kwargs):
    """The registry's ``parallelize_fn`` (``get_model_spec("llama3").parallelize_fn``): apply every
    parallelism of ``parallel_dims`` (a ``hyper_parallel.models.ParallelDims``) to ``model`` on
    ``world_mesh`` (``parallel_dims.build_mesh()``), TorchTitan order: TP + SP (+ loss parallel) on
    ``world_mesh["tp"]``, CP attention on ``world_mesh["cp"]``, the ``activation`` policy (a
    ``hyper_parallel.activation`` config block), then FSDP (HSDP with ``dp_replicate > 1``) per decoder
    layer and on the root (``fsdp_kwargs`` go to ``fully_shard``). A model with MoE layers
    (``config.moe``) takes :func:`parallelize_llama_moe` with ``ep=parallel_dims.ep`` on the
    ``(dp_shard, tp)`` mesh. ``attention_plan(config, sequence_parallel)``: TP entries replacing Llama's
    q/k/v/o ones (a model with another attention). ``init_seed``: the model was built on the meta device
    (``hyper_parallel.models.init_empty_weights``): after the whole plan (TP/CP/EP and FSDP applied on
    the meta device), ``init_parameters(model, seed=init_seed)`` materialises only each rank's local
    shards (the same full weights on any layout). ``fn_name``: the registry function named in errors (a
    model's own ``parallelize_fn`` passes its name). A model with MoE layers refuses ``cp > 1`` and
    ``dp_replicate > 1`` with one line naming the degree and why (:data:`MOE_REFUSALS`). Returns the model
    (apply it to each pipeline stage module under PP)."""
    dims = parallel_dims

    def before_fsdp(module) -> None:
        if activation is not None:
            from hyper_parallel.activation import apply_activation_policy
            apply_activation_policy(module, activation)

    if model.config.moe is not None and dims.etp == 1:
        meshes = moe_meshes(world_mesh, dims, cp_plan=llama_cp_plan(cp_method, async_cp, cp_load_balance))
        _apply_moe_meshes(model, meshes, dims, (loss_parallel, attention_plan, async_dispatch, before_fsdp),
                          fsdp_kwargs)
        return _init_local_shards(model, init_seed)
    if model.config.moe is not None:  # ETP: the [ep, tp] expert mesh (pp x dp_shard x tp only)
        _check_moe_layout(dims, fn_name)
        meshes = moe_stage_meshes(world_mesh, dims) if dims.pp > 1 and dims.dp_shard * dims.tp > 1 else None
        mesh = meshes[0] if meshes else _moe_dense_mesh(world_mesh, dims)
        if mesh is None:  # one rank per stage: nothing to distribute
            before_fsdp(model)
        else:
            parallelize_llama_moe(model, mesh, ep=dims.ep, loss_parallel=loss_parallel, async_dispatch=async_dispatch,
                                  attention_plan=attention_plan, before_fsdp=before_fsdp, etp=dims.etp,
                                  expert_mesh=meshes[1] if meshes else None, flat_mesh=meshes[2] if meshes else None)
        return _init_local_shards(model, init_seed)
    if dims.tp > 1:
        _check_divisible(model.config, dims.tp, attention=attention_plan is None)
        parallelize_module(model, world_mesh["tp"], stage_plan(model, with_attention_plan(
            llama_tp_plan(sequence_parallel, loss_parallel), model.config, attention_plan, sequence_parallel),
            sequence_parallel))
        retie_embeddings(model)
    if dims.cp > 1:
        parallelize_module(model, world_mesh["cp"], stage_plan(model, llama_cp_plan(cp_method, async_cp,
                                                                                   cp_load_balance)))
    before_fsdp(model)
    shard_mesh = fsdp_mesh_of(world_mesh, dims)
    if shard_mesh is not None:
        from hyper_parallel.fsdp._torch.fully_shard import fully_shard
        layers = model.model.layers
        for layer in (layers.values() if hasattr(layers, "values") else layers):
            fully_shard(layer, mesh=shard_mesh, **fsdp_kwargs)
        fully_shard(model, mesh=shard_mesh, **fsdp_kwargs)
    return _init_local_shards(model, init_seed)


def _apply_moe_meshes(model, meshes, dims, options, fsdp_kwargs) -> None:
    """:func:`apply_moe_parallel` of ``meshes`` (None: one rank per stage, only ``before_fsdp``); ``options``:
    ``(loss_parallel, attention_plan, async_dispatch, before_fsdp)``."""
    loss_parallel, attention_plan, async_dispatch, before_fsdp = options
    if meshes is None:
        before_fsdp(model)
        return
    tp_plan = None
    if dims.tp > 1:
        _check_divisible(model.config, dims.tp, attention=attention_plan is None)
        tp_plan = llama_moe_tp_plan(model.config, loss_parallel, attention_plan)
    apply_moe_parallel(model, meshes, tp_plan=tp_plan, async_dispatch=async_dispatch, before_fsdp=before_fsdp,
                       **fsdp_kwargs)


def _init_local_shards(model, init_seed):
    if init_seed is not None:
        from hyper_parallel.models._torch.init import init_parameters
        init_parameters(model, seed=init_seed)
    return model


def pipeline_llama3(model, world_mesh, parallel_dims, *, schedule: str = "1F1B", n_microbatches: int,
                    loss_fn=None, **kwargs):
    """The registry's ``pipelining_fn``: :func:`pipeline_llama` over ``world_mesh["pp"]``'s group
    (``parallel_dims.pp`` stages' ranks). Returns ``(schedule, stage_modules)``."""
    if parallel_dims.pp < 2:
        raise ValueError(f"pipeline_llama3: parallel_dims.pp={parallel_dims.pp}; pipelining needs pp >= 2")
    from hyper_parallel.platform.torch.device import local_device  # pylint: disable=import-outside-toplevel
    kwargs.setdefault("device", local_device(world_mesh.device_type))
    return pipeline_llama(model, schedule=schedule, n_microbatches=n_microbatches,
                          pp_group=world_mesh["pp"].get_group(), loss_fn=loss_fn, **kwargs)
