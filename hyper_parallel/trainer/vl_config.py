# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The config rules of a vision-language run (pure Python: no framework, no trainer import): which models are
vision-language ones, the ``[data]`` keys they need (checked when the config is read) and the layouts they run
(checked by ``validate.validate_job``). :class:`~hyper_parallel.trainer.vl.VLTrainer` applies both."""
from __future__ import annotations

from typing import Any

__all__ = ["MOE_VISION_MODELS", "is_vision_model", "validate_vl_data", "validate_vl_layout", "validate_vl"]

#: vision-language models whose language model has MoE layers (FSDP x EP, or TP x FSDP with whole experts; HSDP
#: and EP x TP refused)
MOE_VISION_MODELS = ("qwen3_vl_moe", "qwen3_5_moe_vl")


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


def validate_vl_layout(cfg: Any) -> None:
    """The parallel layouts a vision-language model runs (``hp-train --check`` and the trainer; a ``ValueError``
    naming the degree and the model)."""
    par = cfg.parallelism
    for key in ("cp", "pp"):
        if getattr(par, key) != 1:
            raise ValueError(f"parallelism.{key} = {getattr(par, key)}: not yet for model.name = "
                             f"{cfg.model.name!r} (FSDP / HSDP, TP and activation policies are); set it to 1")
    if par.loss_parallel:
        raise ValueError(f"parallelism.loss_parallel: not for model.name = {cfg.model.name!r} (a vision-language "
                         f"model); set it to false")
    if cfg.model.name in MOE_VISION_MODELS:
        if par.dp_replicate not in (1, -1):
            raise ValueError(f"parallelism.dp_replicate = {par.dp_replicate}: not yet for model.name = "
                             f"{cfg.model.name!r} (FSDP with expert parallelism, parallelism.ep, is); set it to 1")
        if par.tp not in (1, -1) and par.ep not in (1, -1):
            raise ValueError(f"parallelism.ep = {par.ep} with parallelism.tp = {par.tp}: model.name = "
                             f"{cfg.model.name!r} under TP keeps its experts whole on every TP rank; set ep = 1 or "
                             f"tp = 1")


def validate_vl(cfg: Any) -> None:
    """:func:`validate_vl_data` and :func:`validate_vl_layout`."""
    validate_vl_data(cfg)
    validate_vl_layout(cfg)
