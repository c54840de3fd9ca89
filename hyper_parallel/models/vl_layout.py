# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The parallel layouts the vision-language models run (pure Python: no framework, no model package imported).

One rule set with one wording, applied twice: before a launch on the config's degrees
(:func:`hyper_parallel.trainer.vl_config.validate_vl_layout`, ``hp-train --check``) and on the ranks on their
:class:`~hyper_parallel.models.parallel_dims.ParallelDims` (each vision-language model's ``parallelize_fn``,
through :func:`~hyper_parallel.models.parallel_dims.degrees_of`)."""
from __future__ import annotations

from typing import Mapping

__all__ = ["MOE_VISION_MODELS", "PIPELINE_VISION_MODELS", "check_vl_layout"]

#: vision-language models whose language model has MoE layers (FSDP / HSDP x EP, TP x FSDP with whole experts,
#: or EP x TP x FSDP; HSDP x TP refused)
MOE_VISION_MODELS = ("qwen3_vl_moe", "qwen3_5_moe_vl")
#: vision-language models with a pipeline split (``models/qwen3_vl/pipeline.py``: ``parallelism.pp``, ``vl_encoder``)
PIPELINE_VISION_MODELS = ("qwen3_vl", "qwen3_vl_moe", "qwen3_5_vl", "qwen3_5_moe_vl")


def check_vl_layout(name: str, degrees: Mapping[str, int], *, moe: bool, loss_parallel: bool = False) -> None:
    """Refuse what the vision-language model ``name`` (a registry name) does not run, a ``ValueError`` of one line
    naming the ``[parallelism]`` keys: ``cp > 1`` (no context-parallel plan: MRoPE positions and DeepStack features
    index the whole sequence), ``pp > 1`` for a model without a pipeline split, ``loss_parallel`` (the loss sums over
    whole logits), and for a MoE language model (``moe``) HSDP together with TP, and inside a pipeline stage TP
    together with FSDP or EP (a stage's expert meshes are not built under TP). ``degrees``: ``dp_replicate``,
    ``dp_shard``, ``cp``, ``tp``, ``pp``, ``ep`` (resolved; an unresolved ``-1`` counts as 1)."""
    cp, pp, tp = degrees["cp"], degrees["pp"], degrees["tp"]
    if cp > 1:
        pipe = "PP, " if name in PIPELINE_VISION_MODELS else ""
        raise ValueError(f"parallelism.cp = {cp}: not yet for model.name = {name!r} (FSDP / HSDP, TP, "
                         f"{pipe}activation policies are); set it to 1")
    if pp > 1 and name not in PIPELINE_VISION_MODELS:
        raise ValueError(f"parallelism.pp = {pp}: not yet for model.name = {name!r} (pipeline parallel "
                         f"runs {list(PIPELINE_VISION_MODELS)}); set it to 1")
    if loss_parallel:
        raise ValueError(f"parallelism.loss_parallel: not for model.name = {name!r} (a vision-language "
                         f"model); set it to false")
    if not moe or tp < 2:
        return
    if degrees["dp_replicate"] > 1:
        raise ValueError(f"parallelism.dp_replicate = {degrees['dp_replicate']} with parallelism.tp = {tp}: not yet "
                         f"for model.name = {name!r} (HSDP x EP is, without TP); set dp_replicate = 1 or tp = 1")
    for key in ("ep", "dp_shard") if pp > 1 else ():
        if degrees[key] > 1:
            raise ValueError(f"parallelism.{key} = {degrees[key]} with parallelism.tp = {tp} and parallelism.pp = "
                             f"{pp}: not yet for model.name = {name!r} (a stage's expert meshes are not built under "
                             f"TP); set {key} = 1, tp = 1 or pp = 1")
