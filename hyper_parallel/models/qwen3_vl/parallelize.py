# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Parallel plans of Qwen3-VL: tensor parallel on the language model (Llama/Qwen3's plan re-rooted under
``model.language_model``, QK-norms included, no sequence parallel: DeepStack adds vision features at token
positions of the whole sequence) and on the vision tower (:func:`vision_tp_plan`, over the same ``tp`` mesh), FSDP
/ HSDP with one unit per vision block, per decoder layer and the root.

Vision tower TP (:func:`vision_tp_plan`): every block's attention by heads (``q_proj`` / ``k_proj`` / ``v_proj``
column-wise, ``proj`` row-wise; the projections are separate modules so each ``Shard(0)`` is truthful, and DCP /
``full_tensor()`` see the unpermuted weight) and its MLP (``linear_fc1`` column-wise, ``linear_fc2`` row-wise);
the patch merger and the DeepStack mergers shard their MLP the same way (their ``linear_fc1`` is ``(hidden x
merge^2)^2``, larger than a block's attention, so replicating them would keep the largest vision matrices whole on
every rank). Patch embedding, position table and LayerNorms stay replicated. The vision activations between the
sharded pieces are whole ``[patches, hidden]`` tensors on every TP rank (row-wise outputs all-reduced), so
the vision tower's output meets the language model replicated, as before.
"""
from __future__ import annotations

import fnmatch
from typing import Optional

from hyper_parallel.models.llama3.parallelize import llama_tp_plan, qk_norm_plan

__all__ = ["qwen3_vl_tp_plan", "vision_tp_plan", "check_vision_tp", "parallelize_qwen3_vl"]

_PREFIX = "model.language_model."
_VISUAL = "model.visual."


def vision_tp_plan(vision, prefix: str = _VISUAL) -> dict:
    """The TP plan of a vision tower configured by ``vision`` (a :class:`Qwen3VLVisionConfig`; fnmatch globs
    under ``prefix``, the tower's module path): attention q/k/v column-wise and ``proj`` row-wise, the MLP's
    ``linear_fc1`` column-wise and ``linear_fc2`` row-wise, and the patch merger's / DeepStack mergers' MLPs the
    same (inputs and outputs whole on every rank)."""
    from hyper_parallel.tp import ColwiseParallel, RowwiseParallel  # pylint: disable=import-outside-toplevel
    plan = {}
    for proj in ("q_proj", "k_proj", "v_proj"):
        plan[f"{prefix}blocks.*.attn.{proj}"] = ColwiseParallel()
    plan[f"{prefix}blocks.*.attn.proj"] = RowwiseParallel()
    mlps = ("blocks.*.mlp", "merger") + (("deepstack_merger_list.*",) if vision.deepstack_visual_indexes else ())
    for mlp in mlps:
        plan[f"{prefix}{mlp}.linear_fc1"] = ColwiseParallel()
        plan[f"{prefix}{mlp}.linear_fc2"] = RowwiseParallel()
    return plan


def check_vision_tp(vision, tp: int, what: str = "parallelize_qwen3_vl") -> None:
    """One-line ``ValueError`` naming the first vision size (``num_heads``, ``intermediate_size``) the TP degree
    ``tp`` does not divide (the mergers' width, ``hidden_size x merge^2``, follows from ``num_heads``)."""
    for name, value in (("num_heads", vision.num_heads), ("intermediate_size", vision.intermediate_size)):
        if value % tp:
            raise ValueError(f"{what}: vision {name}={value} is not divisible by tp={tp} (the vision tower is "
                             f"tensor-parallel over the same mesh as the language model)")


def qwen3_vl_tp_plan(config, vision: bool = True) -> dict:
    """The TP plan (fnmatch globs over our module names): decoder q/k/v and gate/up column-wise, o and
    down row-wise, the per-head QK-norms, the vocabulary-split embedding and a column-wise LM head, and (``vision``)
    the vision tower's :func:`vision_tp_plan`."""
    plan = {**llama_tp_plan(sequence_parallel=False), **qk_norm_plan(config.text)}
    out = {}
    for key, style in plan.items():
        out[_PREFIX + key[len("model."):] if key.startswith("model.") else key] = style
    return {**out, **vision_tp_plan(config.vision)} if vision else out


def _held(model, plan: dict) -> dict:
    """``plan`` for ``model``: a whole model keeps every key (a mistyped one fails in ``parallelize_module``); a
    pipeline stage module (no ``lm_head`` or no embedding, decoder layers a ``ModuleDict``) keeps the keys that
    match a module it holds."""
    if not hasattr(model.model.language_model.layers, "items"):
        return plan
    names = [name for name, _ in model.named_modules()]
    return {key: style for key, style in plan.items() if any(fnmatch.fnmatchcase(n, key) for n in names)}


def parallelize_qwen3_vl(model, tp_mesh=None, dp_mesh=None, *, reshard_after_forward: bool = True,
                         mp_policy: Optional[object] = None):
    """Apply TP over ``tp_mesh`` (1-D; the language model and the vision tower, :func:`qwen3_vl_tp_plan`) and then
    FSDP over ``dp_mesh`` (1-D, or 2-D ``(replicate, shard)`` for
    HSDP) to a :class:`~hyper_parallel.models.qwen3_vl.model.Qwen3VLForConditionalGeneration` or to a pipeline
    stage module of one (:class:`~hyper_parallel.models.qwen3_vl.pipeline.Qwen3VLStageModule`: the plan's entries
    of the modules it holds, FSDP over the vision blocks and decoder layers it holds); either may be None. Returns
    the model (changed in place)."""
    import hyper_parallel as hp  # pylint: disable=import-outside-toplevel
    if tp_mesh is not None and tp_mesh.size() > 1:
        text = model.config.text
        for name, value in (("num_attention_heads", text.num_attention_heads),
                            ("num_key_value_heads", text.num_key_value_heads),
                            ("intermediate_size", text.intermediate_size), ("vocab_size", text.vocab_size)):
            if value % tp_mesh.size():
                raise ValueError(f"parallelize_qwen3_vl: text {name}={value} is not divisible by tp={tp_mesh.size()}")
        visual = getattr(model.model, "visual", None) is not None
        if visual:
            check_vision_tp(model.config.vision, tp_mesh.size())
        hp.parallelize_module(model, tp_mesh, _held(model, qwen3_vl_tp_plan(model.config, vision=visual)))
        if text.tie_word_embeddings and hasattr(model, "lm_head") and hasattr(model.model.language_model,
                                                                               "embed_tokens"):
            model.lm_head.weight = model.model.language_model.embed_tokens.weight
    if dp_mesh is not None:
        kwargs = {"mesh": dp_mesh, "reshard_after_forward": reshard_after_forward}
        if mp_policy is not None:
            kwargs["mp_policy"] = mp_policy
        visual = getattr(model.model, "visual", None)  # a pipeline stage module may hold no vision tower
        for block in (visual.blocks if visual is not None else ()):
            hp.fully_shard(block, **kwargs)
        layers = model.model.language_model.layers  # a list, or a stage module's ModuleDict by layer index
        for layer in (layers.values() if hasattr(layers, "values") else layers):
            hp.fully_shard(layer, **kwargs)
        hp.fully_shard(model, **kwargs)
    return model
