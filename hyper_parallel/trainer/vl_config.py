# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The config rules of a vision-language run (pure Python: no framework, no trainer import): which models are
vision-language ones, the ``[data]`` keys they need (checked when the config is read) and the layouts they run
(checked by ``validate.validate_job``). :class:`~hyper_parallel.trainer.vl.VLTrainer` applies both."""
from __future__ import annotations

from typing import Any, Mapping, Optional

from hyper_parallel.models.parallel_dims import degrees_of
from hyper_parallel.models.vl_layout import MOE_VISION_MODELS, PIPELINE_VISION_MODELS, check_vl_layout

__all__ = ["MOE_VISION_MODELS", "PIPELINE_VISION_MODELS", "is_vision_model", "validate_vl_data", "validate_vl_layout",
           "validate_vl_pipeline", "validate_vl_encoder_group", "mpipe_config_of", "validate_vl"]


def is_vision_model(name: str) -> bool:
    """Whether the registry's model ``name`` is a vision-language model (no model package imported)."""
    from hyper_parallel.models.registry import is_vision_model as registered  # pylint: disable=C0415
    return registered(name)


def validate_vl_data(cfg: Any) -> None:
    """The ``[data]`` / ``[model]`` / ``[checkpoint]`` keys a vision-language run needs (checked when the config
    is read; a ``ValueError`` naming the key)."""
    d = cfg.data
    if not d.processor.startswith("hf:"):
        raise ValueError(f"data.processor: model {cfg.model.name!r} reads image-text data through a Hugging Face "
                         f"processor folder: set data.processor = 'hf:<folder>', got {d.processor!r}")
    if d.source != "files" or not d.paths:
        raise ValueError("data.paths: a vision-language run reads local files: set data.source = 'files' and "
                         "data.paths = [a .jsonl of messages or a folder of images with captions, ...]")
    if d.format != "messages":
        raise ValueError(f"data.format: a vision-language run reads conversations: set data.format = 'messages', "
                         f"got {d.format!r}")
    if d.max_pixels < 0 or d.min_pixels < 0 or (d.max_pixels and d.min_pixels > d.max_pixels):
        raise ValueError(f"data.max_pixels / data.min_pixels: expected 0 (the processor's) or 0 < min_pixels <= "
                         f"max_pixels, got {d.min_pixels} / {d.max_pixels}")


def validate_vl_layout(cfg: Any, degrees: Optional[Mapping[str, int]] = None) -> None:
    """The parallel layouts a vision-language model runs (``hp-train --check`` and the trainer; a ``ValueError``
    naming the degree and the model): :func:`~hyper_parallel.models.vl_layout.check_vl_layout` (the rule the ranks
    apply too) on ``degrees`` (the resolved ``[parallelism]`` degrees; default: the config's as written, an
    unresolved ``-1`` counting as 1), then the pipeline keys (:func:`validate_vl_pipeline`)."""
    par = cfg.parallelism
    check_vl_layout(cfg.model.name, degrees_of(par) if degrees is None else degrees,
                    moe=cfg.model.name in MOE_VISION_MODELS, loss_parallel=par.loss_parallel)
    validate_vl_pipeline(par)


def validate_vl_pipeline(par: Any, num_layers: Optional[int] = None) -> None:
    """``[parallelism]`` pipeline keys of a vision-language run: ``vl_encoder`` (``stage0``: one stage per rank,
    1F1B or GPipe; ``mpipe``: ``pp >= 2``, the Mpipe schedule, ``pp_schedule`` left at 1F1B), ``vl_encoder_ahead``
    (Mpipe only, 0 or at least ``pp - 1``) and, with ``num_layers``, the decoder layers of every stage
    (``pp_layers_per_stage``: under Mpipe stage 0 holds none). A ``ValueError`` naming the key."""
    mpipe = par.vl_encoder == "mpipe"
    if mpipe and par.pp < 2:
        raise ValueError(f"parallelism.vl_encoder = 'mpipe' needs parallelism.pp >= 2 (the encoder stage and at "
                         f"least one language-model stage), got pp = {par.pp}")
    if par.vl_encoder_ahead and not mpipe:
        raise ValueError(f"parallelism.vl_encoder_ahead = {par.vl_encoder_ahead}: only for vl_encoder = 'mpipe' "
                         f"(got {par.vl_encoder!r}); remove it")
    ranks = getattr(par, "vl_encoder_ranks", 1)
    if ranks != 1 and not mpipe:
        raise ValueError(f"parallelism.vl_encoder_ranks = {ranks}: only for vl_encoder = 'mpipe' (the encoder alone "
                         f"on its stage), got {par.vl_encoder!r}; remove it or set vl_encoder = 'mpipe'")
    if mpipe and not 1 <= ranks < par.pp:
        raise ValueError(f"parallelism.vl_encoder_ranks = {ranks} with parallelism.pp = {par.pp}: expected 1 <= "
                         f"vl_encoder_ranks < pp (at least one rank left for the language-model stages)")
    if par.pp < 2:
        return
    _check_vl_schedule(par, mpipe)
    if num_layers is not None:
        from hyper_parallel.models.qwen3_vl.stages import stage_layers  # pylint: disable=import-outside-toplevel
        split = list(par.pp_layers_per_stage) or None
        try:
            stage_layers(num_layers, par.pp - ranks + 1, par.vl_encoder, split, what="parallelism.pp_layers_per_stage")
        except ValueError as exc:
            raise ValueError(f"parallelism.pp = {par.pp} with vl_encoder = {par.vl_encoder!r} vs the model's "
                             f"{num_layers} decoder layers: {exc}") from None


def _check_vl_schedule(par: Any, mpipe: bool) -> None:
    """``pp_schedule`` / ``vl_encoder_ahead`` of a vision-language pipeline (``pp >= 2``)."""
    from hyper_parallel.pipeline.schedules import SCHEDULES, canonical_schedule_name  # pylint: disable=C0415
    name = canonical_schedule_name(par.pp_schedule)
    if name == "Mpipe" and not mpipe:
        raise ValueError("parallelism.pp_schedule = 'Mpipe': set parallelism.vl_encoder = 'mpipe' instead (it places "
                         "the encoder stage alone on stage 0 and runs the Mpipe schedule); leave pp_schedule at '1F1B'")
    if mpipe and name != "1F1B":
        raise ValueError(f"parallelism.pp_schedule = {par.pp_schedule!r}: vl_encoder = 'mpipe' runs its own schedule "
                         f"(the encoder ahead of 1F1B over the language-model stages); leave pp_schedule at '1F1B'")
    if SCHEDULES[name].multi:
        raise ValueError(f"parallelism.pp_schedule = {par.pp_schedule!r}: a vision-language model runs one stage per "
                         f"rank (1F1B or GPipe with vl_encoder = 'stage0', or vl_encoder = 'mpipe')")
    if mpipe and 0 < par.vl_encoder_ahead < min(par.pp_microbatches, par.pp - 1):
        raise ValueError(f"parallelism.vl_encoder_ahead = {par.vl_encoder_ahead}: expected 0 (all) or >= pp - 1 = "
                         f"{par.pp - 1} (the first language-model stage's warm-up needs that many encoder forwards)")


def validate_vl_encoder_group(cfg: Any, degrees: Any, text_config: Any = None) -> None:
    """An encoder stage on ``parallelism.vl_encoder_ranks = k > 1`` ranks (Mpipe; :func:`validate_vl_pipeline`
    checks ``1 <= k < pp``): one pipeline group (every other degree 1: the encoder group's mesh is built over the
    pipeline group's first ``k`` ranks), untied embeddings (``text_config.tie_word_embeddings``: the embedding on
    the encoder ranks and the head on the last stage would be summed over more than 2 ranks) and microbatches
    of a multiple of ``k`` rows (each encoder rank encodes an equal share). A ``ValueError`` naming the keys."""
    par = cfg.parallelism
    k = getattr(par, "vl_encoder_ranks", 1)
    if k == 1 or par.vl_encoder != "mpipe":
        return
    for key in ("dp_replicate", "dp_shard", "cp", "tp"):
        if degrees[key] > 1:
            raise ValueError(f"parallelism.{key} = {degrees[key]} with parallelism.vl_encoder_ranks = {k}: not yet "
                             f"(the encoder group is built over one pipeline group's ranks); set {key} = 1 or "
                             f"vl_encoder_ranks = 1")
    if text_config is not None and getattr(text_config, "tie_word_embeddings", False):
        raise ValueError(f"parallelism.vl_encoder_ranks = {k}: model.flavor = {cfg.model.flavor!r} ties the embedding "
                         f"to the LM head (summed over 2 ranks only); set vl_encoder_ranks = 1 or use a flavor with "
                         f"untied embeddings (qwen3_vl: 'debug_untied')")
    micro = cfg.training.global_batch // max(1, cfg.training.grad_accum * par.pp_microbatches)
    if micro % k:
        raise ValueError(f"parallelism.vl_encoder_ranks = {k}: a microbatch of training.global_batch / "
                         f"(grad_accum x pp_microbatches) = {micro} rows does not split evenly over the {k} encoder "
                         f"ranks; make it a multiple of {k}")


def mpipe_config_of(par: Any, model_config: Any = None) -> Any:
    """The :class:`~hyper_parallel.pipeline.mpipe.MpipeConfig` of ``[parallelism]`` (``vl_encoder = 'mpipe'``), else
    None. Mpipe balances micro-batches by regrouping rows; a model whose router losses (auxiliary loss, z-loss) are
    taken per micro-batch (``model_config``'s language model MoE) keeps the data order's micro-batches instead, so
    its loss is the one gradient accumulation over the same micro-batches gives (docs/moe.md)."""
    if par.vl_encoder != "mpipe":
        return None
    from hyper_parallel.pipeline.mpipe import MpipeConfig  # pylint: disable=import-outside-toplevel
    moe = getattr(getattr(model_config, "text", model_config), "moe", None)
    per_micro_batch = moe is not None and (moe.uses_aux_loss or moe.z_loss_coeff > 0)
    return MpipeConfig(encoder_ahead=par.vl_encoder_ahead or None, balance=not per_micro_batch)


def validate_vl(cfg: Any) -> None:
    """:func:`validate_vl_data` and :func:`validate_vl_layout`."""
    validate_vl_data(cfg)
    validate_vl_layout(cfg)
