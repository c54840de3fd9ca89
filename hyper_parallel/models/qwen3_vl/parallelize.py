# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Parallel plans of Qwen3-VL: tensor parallel on the language model (Llama/Qwen3's plan re-rooted under
``model.language_model``, QK-norms included, no sequence parallel: DeepStack adds vision features at token
positions of the whole sequence), FSDP / HSDP with one unit per vision block, per decoder layer and the root.

The vision tower stays replicated under TP: its fused ``qkv`` projection is laid out ``[3, heads, dim]``, so a
column split would cut across q, k and v rather than heads; it is small next to the decoder (and sharded by
FSDP).
"""
from __future__ import annotations

from typing import Optional

from hyper_parallel.models.llama3.parallelize import llama_tp_plan, qk_norm_plan

__all__ = ["qwen3_vl_tp_plan", "parallelize_qwen3_vl"]

_PREFIX = "model.language_model."


def qwen3_vl_tp_plan(config) -> dict:
    """The TP plan (fnmatch globs over our = HF module names): decoder q/k/v and gate/up column-wise, o and
    down row-wise, the per-head QK-norms, the vocabulary-split embedding and a column-wise LM head."""
    plan = {**llama_tp_plan(sequence_parallel=False), **qk_norm_plan(config.text)}
    out = {}
    for key, style in plan.items():
        out[_PREFIX + key[len("model."):] if key.startswith("model.") else key] = style
    return out


def parallelize_qwen3_vl(model, tp_mesh=None, dp_mesh=None, *, reshard_after_forward: bool = True,
                         mp_policy: Optional[object] = None):
    """Apply TP over ``tp_mesh`` (1-D) and then FSDP over ``dp_mesh`` (1-D, or 2-D ``(replicate, shard)`` for
    HSDP) to a :class:`~hyper_parallel.models.qwen3_vl.model.Qwen3VLForConditionalGeneration` or to a pipeline
    stage module of one (:class:`~hyper_parallel.models.qwen3_vl.pipeline.Qwen3VLStageModule`: FSDP only, over the
    vision blocks and decoder layers it holds); either may be None. Returns the model (changed in place)."""
    import hyper_parallel as hp  # pylint: disable=import-outside-toplevel
    if tp_mesh is not None and tp_mesh.size() > 1:
        text = model.config.text
        for name, value in (("num_attention_heads", text.num_attention_heads),
                            ("num_key_value_heads", text.num_key_value_heads),
                            ("intermediate_size", text.intermediate_size), ("vocab_size", text.vocab_size)):
            if value % tp_mesh.size():
                raise ValueError(f"parallelize_qwen3_vl: text {name}={value} is not divisible by tp={tp_mesh.size()}")
        hp.parallelize_module(model, tp_mesh, qwen3_vl_tp_plan(model.config))
        if text.tie_word_embeddings:
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
