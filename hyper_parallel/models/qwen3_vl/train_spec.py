# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3-VL in the model registry: the trainer's ``parallelize_fn`` over :func:`parallelize_qwen3_vl` and a
:class:`~hyper_parallel.models.spec.ModelSpec` whose ``config`` routes the trainer's overrides (``vocab_size``,
``max_position_embeddings``: the language model's; the special token ids: the processor's)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from hyper_parallel.models.parallel_dims import degrees_of, fsdp_mesh
from hyper_parallel.models.spec import ModelSpec
from hyper_parallel.models.vl_layout import check_vl_layout

__all__ = ["VLModelSpec", "parallelize_qwen3_vl_job", "pipeline_qwen3_vl_job", "activation_layers",
           "check_vl_dims", "activation_and_shard_vl", "shard_vl_model", "expert_parallel_under_tp"]

_TEXT_KEYS = ("vocab_size", "max_position_embeddings")


@dataclass(frozen=True)
class VLModelSpec(ModelSpec):
    """A :class:`ModelSpec` of a vision-language model (``extras["vision"] = True``: ``hp-train`` runs it with
    :class:`~hyper_parallel.trainer.vl.VLTrainer`)."""

    def config(self, flavor: str, **overrides: Any) -> Any:
        """The flavor's config; ``vocab_size`` / ``max_position_embeddings`` (and any other field of the text
        config) go to ``config.text``, the rest (token ids, ``mrope_section``) to the top level."""
        cfg = super().config(flavor)
        text = {k: v for k, v in overrides.items() if k in _TEXT_KEYS or
                (not hasattr(cfg, k) and hasattr(cfg.text, k))}
        top = {k: v for k, v in overrides.items() if k not in text}
        if text:
            cfg = dataclasses.replace(cfg, text=dataclasses.replace(cfg.text, **text))
        return dataclasses.replace(cfg, **top) if top else cfg


def _layer_names(model: Any) -> list:
    """``(name, layer)`` of the decoder layers of a whole model (a list) or of a pipeline stage module (a
    ``ModuleDict`` keyed by the original indices), named as ``named_modules`` names them."""
    layers = model.model.language_model.layers
    items = layers.items() if hasattr(layers, "items") else ((str(i), m) for i, m in enumerate(layers))
    return [(f"model.language_model.layers.{k}", m) for k, m in items]


def activation_layers(model: Any) -> list:
    """The module names an activation policy applies to by default: every vision block and decoder layer (of a
    pipeline stage module: those it holds)."""
    visual = getattr(model.model, "visual", None)
    blocks = [f"model.visual.blocks.{i}" for i in range(len(visual.blocks))] if visual is not None else []
    return blocks + [name for name, _ in _layer_names(model)]


def pipeline_qwen3_vl_job(model: Any, world_mesh: Any, parallel_dims: Any, *, schedule: str = "1F1B",
                          n_microbatches: int, loss_fn: Any = None, layers_per_stage: Any = None,
                          placement: str = "stage0", mpipe_config: Any = None, encoder_ranks: int = 1,
                          stage_cls: Any = None, **_options: Any) -> Any:
    """The registry's ``pipelining_fn``: :func:`~hyper_parallel.models.qwen3_vl.pipeline.pipeline_qwen3_vl` over
    ``world_mesh["pp"]``'s group, the vision encoder on stage 0 with the first decoder layers (``placement =
    "stage0"``, ``schedule`` 1F1B or GPipe) or alone ahead of the language-model stages (``"mpipe"``:
    :class:`~hyper_parallel.pipeline.ScheduleMpipe` with ``mpipe_config``; ``encoder_ranks``: the first that many
    ranks of the pipeline group hold the encoder stage, data parallel, ``hp-train``'s ``vl_encoder_ranks``).
    ``stage_cls``: the stage module class (default :class:`~hyper_parallel.models.qwen3_vl.pipeline.
    Qwen3VLStageModule`; the Qwen3.5 models pass theirs). Returns ``(schedule, [stage module])``; the trainer then
    applies the registry's ``parallelize_fn`` to the stage module. Other options (``overlap_b_f``) go to the
    schedule."""
    from hyper_parallel.models.qwen3_vl.pipeline import pipeline_qwen3_vl  # pylint: disable=C0415
    from hyper_parallel.platform.torch.device import local_device  # pylint: disable=import-outside-toplevel
    if parallel_dims.pp < 2:
        raise ValueError(f"pipeline_qwen3_vl_job: parallel_dims.pp={parallel_dims.pp}; pipelining needs pp >= 2")
    sched, part = pipeline_qwen3_vl(model, n_microbatches=n_microbatches, placement=placement, schedule=schedule,
                                    pp_group=world_mesh["pp"].get_group(), layers_per_stage=layers_per_stage,
                                    loss_fn=loss_fn, device=local_device(world_mesh.device_type),
                                    mpipe_config=mpipe_config, encoder_ranks=encoder_ranks, stage_cls=stage_cls,
                                    **_options)
    return sched, [part]


def parallelize_qwen3_vl_job(model: Any, world_mesh: Any, parallel_dims: Any, *, activation: Any = None,
                             loss_parallel: bool = False, **_options: Any) -> Any:
    """The registry's ``parallelize_fn`` (Qwen3-VL and Qwen3-VL-MoE): TP on the language model over
    ``world_mesh["tp"]``, the ``activation`` policy (default layers: :func:`activation_layers`), then FSDP / HSDP
    (one unit per vision block, per decoder layer and the root); a MoE language model gets expert parallelism over
    ``parallel_dims.ep`` of the FSDP ranks (:func:`~hyper_parallel.models.qwen3_vl_moe.parallelize_qwen3_vl_moe`;
    with TP too: :func:`expert_parallel_under_tp`). The layouts it does not run (``cp > 1``, ``loss_parallel``,
    HSDP x TP for a MoE language model, ...) are refused first, with ``hp-train --check``'s words
    (:func:`check_vl_dims`); sequence parallel is not applied (DeepStack adds vision features at positions of the
    whole sequence). A MoE language model under TP with ``ep = 1`` keeps its experts whole on every TP rank (they
    see the whole sequence: the attention's output is replicated) and FSDP-shards them with their layer
    (:func:`shard_vl_model`)."""
    from hyper_parallel.models.qwen3_vl.parallelize import parallelize_qwen3_vl  # noqa  # pylint: disable=C0415
    dims = parallel_dims
    moe = getattr(model.config.text, "moe", None) is not None
    check_vl_dims("qwen3_vl_moe" if moe else "qwen3_vl", dims, moe=moe, loss_parallel=loss_parallel)
    if dims.tp > 1:
        parallelize_qwen3_vl(model, tp_mesh=world_mesh["tp"])
    return activation_and_shard_vl(model, world_mesh, dims, activation)


def activation_and_shard_vl(model: Any, world_mesh: Any, dims: Any, activation: Any = None) -> Any:
    """What every vision-language ``parallelize_fn`` does after its TP plan: the ``activation`` policy (default
    layers: :func:`activation_layers`), then FSDP / HSDP, with expert parallelism for a MoE language model
    (:func:`shard_vl_model` over the trainer's FSDP mesh of ``world_mesh``). Returns the model."""
    if activation:
        from hyper_parallel.activation import apply_activation_policy  # pylint: disable=import-outside-toplevel
        if isinstance(activation, dict) and not activation.get("layers"):
            activation = dict(activation, layers=activation_layers(model))
        apply_activation_policy(model, activation)
    shard_vl_model(model, fsdp_mesh(world_mesh, dims), dims, world_mesh=world_mesh)
    return model


def check_vl_dims(name: str, dims: Any, *, moe: bool, loss_parallel: bool = False) -> None:
    """The ranks' side of :func:`~hyper_parallel.models.vl_layout.check_vl_layout` (the rule ``hp-train --check``
    applies, same words): the vision-language model ``name`` (its registry name, ``moe``: its language model has
    MoE layers) on ``dims`` (a :class:`~hyper_parallel.models.parallel_dims.ParallelDims`)."""
    check_vl_layout(name, degrees_of(dims), moe=moe, loss_parallel=loss_parallel)


def shard_vl_model(model: Any, shard: Any, dims: Any, world_mesh: Any = None) -> None:
    """FSDP over ``shard`` (None: nothing) of a vision-language model whose vision tower is ``model.model.visual``
    and language model ``model.model.language_model``: one unit per vision block, per decoder layer and the
    root; a MoE language model without TP gets expert parallelism over ``dims.ep`` of the FSDP ranks
    (:func:`~hyper_parallel.models.qwen3_vl_moe.parallelize_qwen3_vl_moe`); with TP and ``ep > 1`` (needs
    ``world_mesh``) expert parallelism over ``ep`` ranks borrowed from ``dp_shard x tp``
    (:func:`expert_parallel_under_tp`); with TP and ``ep = 1`` its MoE layers' balancing statistics come from the
    whole data-parallel batch (``MoE.set_token_groups``) and the experts are sharded with their layer. With
    ``world_mesh`` (the trainer's) a MoE language model without TP takes the meshes of this rank's pipeline
    stage, HSDP included (:func:`~hyper_parallel.models.llama3.parallelize.moe_meshes`,
    :func:`~hyper_parallel.models.qwen3_vl_moe.parallelize.apply_vl_moe_meshes`)."""
    # pylint: disable=import-outside-toplevel
    from hyper_parallel.models.qwen3_vl.parallelize import parallelize_qwen3_vl
    text = model.config.text
    if getattr(text, "moe", None) is not None and dims.tp > 1 and dims.ep > 1:
        if world_mesh is None:
            raise ValueError("shard_vl_model: expert parallelism under TP (ep > 1, tp > 1) needs world_mesh")
        expert_parallel_under_tp(model, world_mesh, dims)
        return
    if shard is None:
        return
    if getattr(text, "moe", None) is not None and dims.tp == 1 and world_mesh is not None:
        from hyper_parallel.models.llama3.parallelize import moe_meshes
        from hyper_parallel.models.qwen3_vl_moe.parallelize import apply_vl_moe_meshes
        apply_vl_moe_meshes(model, moe_meshes(world_mesh, dims))
        return
    if getattr(text, "moe", None) is not None and dims.tp == 1:
        from hyper_parallel.models.qwen3_vl_moe.parallelize import parallelize_qwen3_vl_moe
        parallelize_qwen3_vl_moe(model, shard, ep=dims.ep)
        return
    if getattr(text, "moe", None) is not None:
        for i, layer in enumerate(model.model.language_model.layers):
            if text.is_moe_layer(i):
                layer.mlp.set_token_groups(shard.get_group(0), None, data_parallel_size=shard.size())
    parallelize_qwen3_vl(model, dp_mesh=shard)


def expert_parallel_under_tp(model: Any, world_mesh: Any, dims: Any) -> Any:
    """Expert parallelism x TP for a vision-language model with a MoE language model (``dims.tp > 1``,
    ``dims.ep > 1``), after TP of its attention and vision tower: the text models' rule
    (:func:`~hyper_parallel.models.llama3.parallelize.moe_meshes`: ``ep`` ranks borrowed from ``dp_shard x tp``,
    the experts FSDP-sharded over the rest, routers and shared experts FSDP over every ``dp_shard x tp`` rank
    with their gradients summed over tp) with sequence parallel confined to the MoE blocks: the language model
    runs without sequence parallel (DeepStack adds vision features at positions of the whole sequence), so each
    MoE block takes its TP rank's slice of the replicated sequence (dim 1, no communication), routes and
    dispatches those tokens only, and all-gathers its output back to the whole sequence (backward: the slice of
    the replicated gradient in, the all-gather of the slices' input gradients out). Every TP rank thus routes
    distinct tokens, as under the text models' sequence parallel; the balancing statistics are summed over
    every ``dp_shard x tp`` rank (``MoE.set_token_groups``). Then FSDP over ``dp_shard`` for the vision blocks,
    the decoder layers and the root. Returns the model."""
    # pylint: disable=import-outside-toplevel
    from hyper_parallel.fsdp._torch.fully_shard import fully_shard
    from hyper_parallel.models.llama3.parallelize import moe_meshes
    from hyper_parallel.moe._torch.styles import ExpertParallel, fully_shard_experts
    from hyper_parallel.tp import parallelize_module
    text, m = model.config.text, moe_meshes(world_mesh, dims)
    layers = list(enumerate(model.model.language_model.layers))
    for i, layer in layers:
        if text.is_moe_layer(i):
            _slice_sequence(layer.mlp, m.tp)
    parallelize_module(model, m.expert["ep"], {"model.language_model.layers.*.mlp.experts": ExpertParallel()})
    for block in (model.model.visual.blocks if m.fsdp is not None else ()):
        fully_shard(block, mesh=m.fsdp)
    for i, layer in layers:
        if text.is_moe_layer(i):
            layer.mlp.set_token_groups(m.token_group, m.sequence_group, data_parallel_size=m.replicas)
            fully_shard_experts(layer.mlp.experts, m.expert, data_parallel_size=m.data_parallel_size)
            for part in (layer.mlp.router, layer.mlp.shared_experts):
                if part is not None:
                    fully_shard(part, mesh=m.flat)
                    part.set_gradient_scaling_factor(float(dims.tp))  # tp ranks hold slices of one loss
        if m.fsdp is not None:
            fully_shard(layer, mesh=m.fsdp)
    return fully_shard(model, mesh=m.fsdp) if m.fsdp is not None else model


def _slice_sequence(module: Any, tp_mesh: Any) -> None:
    """Forward hooks on a MoE block fed the whole (replicated) sequence ``[batch, seq, dim]``: it computes on this
    TP rank's contiguous slice of ``seq`` (the first ``seq % tp`` ranks one position more) and returns the
    all-gathered output. Differentiable: the slice's backward all-gathers the input gradient, the all-gather's
    backward takes this rank's slice of the (replicated) output gradient."""
    from hyper_parallel.platform import get_platform  # pylint: disable=import-outside-toplevel
    plat, group = get_platform(), tp_mesh.get_group(0)
    n, rank = tp_mesh.size(), tp_mesh.get_local_rank()

    def sizes(total: int) -> list:
        return [total // n + (1 if r < total % n else 0) for r in range(n)]

    def pre_hook(mod, args):
        x = args[0]
        mod.seq_slice_sizes = sizes(x.shape[1])
        return (plat.chunk(x, 1, mod.seq_slice_sizes, rank, group),) + tuple(args[1:])

    def post_hook(mod, _args, out):
        return plat.all_gather(out, group, 1, mod.seq_slice_sizes, rank)

    module.register_forward_pre_hook(pre_hook)
    module.register_forward_hook(post_hook)
