# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Parallel plans of the Qwen3.5 vision-language models (``Qwen3_5ForConditionalGeneration`` and the MoE one).

* **TP** on the language model: Qwen3.5's plan per layer kind
  (:func:`~hyper_parallel.models.qwen3_5.parallelize.qwen3_5_tp_plan`: full-attention heads, Gated DeltaNet key /
  value heads with their conv channels, the dense MLPs, the vocabulary-split embedding and a column-wise LM
  head) re-rooted under ``model.language_model``, without sequence parallel (the image embeddings replace
  placeholders at positions of the whole sequence), and the vision tower over the same mesh (attention by heads,
  MLP and patch merger: :func:`~hyper_parallel.models.qwen3_vl.parallelize.vision_tp_plan`); MoE blocks keep their
  experts whole on every TP rank (they see the whole sequence, as the attention's output is replicated), or, with
  ``ep > 1``, split over ``ep`` ranks borrowed from ``dp_shard x tp`` with each MoE block routing its TP rank's slice
  of the sequence (:func:`~hyper_parallel.models.qwen3_vl.train_spec.expert_parallel_under_tp`).
* **FSDP / HSDP**: one unit per vision block, per decoder layer and the root; a MoE language model gets expert
  parallelism over ``parallel_dims.ep`` of the FSDP ranks
  (:func:`~hyper_parallel.models.qwen3_vl_moe.parallelize.parallelize_qwen3_vl_moe`).
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

__all__ = ["qwen3_5_vl_tp_plan", "parallelize_qwen3_5_vl_job", "pipeline_qwen3_5_vl_job"]

_PREFIX = "model.language_model."


def qwen3_5_vl_tp_plan(model: Any) -> dict:
    """The TP plan of a Qwen3.5 vision-language model (our module names): the language model's and the vision
    tower's (:func:`~hyper_parallel.models.qwen3_vl.parallelize.vision_tp_plan`)."""
    # pylint: disable=import-outside-toplevel
    from hyper_parallel.models.qwen3_5.parallelize import qwen3_5_tp_plan
    from hyper_parallel.models.qwen3_vl.parallelize import vision_tp_plan
    text = SimpleNamespace(model=model.model.language_model, config=model.config.text)
    plan = qwen3_5_tp_plan(text, sequence_parallel=False)
    plan = {(_PREFIX + key[len("model."):] if key.startswith("model.") else key): style
            for key, style in plan.items()}
    return {**plan, **vision_tp_plan(model.config.vision)}


def parallelize_qwen3_5_vl_job(model: Any, world_mesh: Any, parallel_dims: Any, *, activation: Any = None,
                               loss_parallel: bool = False, **_options: Any) -> Any:
    """The registry's ``parallelize_fn`` of ``qwen3_5_vl`` / ``qwen3_5_moe_vl``: TP on the language model and the
    vision tower over ``world_mesh["tp"]`` (:func:`qwen3_5_vl_tp_plan`), the ``activation`` policy (default layers:
    every vision block and decoder layer), then FSDP / HSDP, or FSDP with expert parallelism for a MoE language model
    (``parallel_dims.ep``; with TP too: :func:`~hyper_parallel.models.qwen3_vl.train_spec.expert_parallel_under_tp`).
    The layouts it does not run (``cp > 1``, ``loss_parallel``, HSDP x TP for a MoE language model, ...) are refused
    first, with ``hp-train --check``'s words (:func:`~hyper_parallel.models.qwen3_vl.train_spec.check_vl_dims`)."""
    # pylint: disable=import-outside-toplevel
    from hyper_parallel.models.qwen3_vl.train_spec import activation_and_shard_vl, check_vl_dims
    dims = parallel_dims
    moe = model.config.text.moe is not None
    check_vl_dims("qwen3_5_moe_vl" if moe else "qwen3_5_vl", dims, moe=moe, loss_parallel=loss_parallel)
    if dims.tp > 1:
        import hyper_parallel as hp
        from hyper_parallel.models.qwen3_5.parallelize import check_tp
        from hyper_parallel.models.qwen3_vl.parallelize import check_vision_tp
        check_tp(model.config.text, dims.tp)
        check_vision_tp(model.config.vision, dims.tp, what="parallelize_qwen3_5_vl_job")
        hp.parallelize_module(model, world_mesh["tp"], qwen3_5_vl_tp_plan(model))
        if model.config.text.tie_word_embeddings:
            model.lm_head.weight = model.model.language_model.embed_tokens.weight
    return activation_and_shard_vl(model, world_mesh, dims, activation)


def pipeline_qwen3_5_vl_job(model: Any, world_mesh: Any, parallel_dims: Any, **options: Any) -> Any:
    """The registry's ``pipelining_fn`` of ``qwen3_5_vl`` / ``qwen3_5_moe_vl``: Qwen3-VL's
    (:func:`~hyper_parallel.models.qwen3_vl.train_spec.pipeline_qwen3_vl_job`: the encoder on stage 0 or ahead of
    the language-model stages under Mpipe, on one or several ranks) with Qwen3.5's hybrid decoder stages
    (:class:`~hyper_parallel.models.qwen3_5_vl.pipeline.Qwen3_5VLStageModule`). Returns ``(schedule, [stage
    module])``."""
    # pylint: disable=import-outside-toplevel
    from hyper_parallel.models.qwen3_5_vl.pipeline import Qwen3_5VLStageModule
    from hyper_parallel.models.qwen3_vl.train_spec import pipeline_qwen3_vl_job
    return pipeline_qwen3_vl_job(model, world_mesh, parallel_dims, stage_cls=Qwen3_5VLStageModule, **options)
