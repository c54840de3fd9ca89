# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``VLTrainer``: :class:`~hyper_parallel.trainer.api.LLMTrainer` for vision-language models (Qwen3-VL).

The same loop, callbacks, checkpoint/resume and parallel layouts; the data are image-text records from local
files read through a Hugging Face processor folder (``[data] processor = "hf:<folder>"``), see
:mod:`hyper_parallel.trainer.vl_sft`: loss on assistant tokens only, packing that keeps every image whole,
``[data] max_pixels`` / ``min_pixels`` bounding each image's resolution. ``hp-train`` picks it for a model
whose registry spec says ``extras["vision"]`` (``[model] name = "qwen3_vl"``): :func:`trainer_class`.
"""
from __future__ import annotations

from typing import Any

from hyper_parallel.trainer.api import LLMTrainer

__all__ = ["VLTrainer", "trainer_class", "is_vision_model", "prepare_vl", "validate_vl"]


def is_vision_model(name: str) -> bool:
    """Whether the registry's model ``name`` is a vision-language model (no model package imported)."""
    from hyper_parallel.models.registry import is_vision_model as registered  # pylint: disable=C0415
    return registered(name)


def trainer_class(config: Any) -> type:
    """:class:`VLTrainer` for a vision-language ``[model] name``, else :class:`LLMTrainer`."""
    return VLTrainer if is_vision_model(config.model.name) else LLMTrainer


def validate_vl(cfg: Any) -> None:
    """The ``[data]`` / ``[parallelism]`` / ``[checkpoint]`` keys a vision-language run needs (a
    ``ValueError`` naming the key)."""
    d, par = cfg.data, cfg.parallelism
    if not d.processor.startswith("hf:"):
        raise ValueError(f"data.processor: model {cfg.model.name!r} reads image-text data through a Hugging Face "
                         f"processor folder: set data.processor = 'hf:<folder>', got {d.processor!r}")
    if d.source != "files" or not d.paths:
        raise ValueError("data.paths: a vision-language run reads local files: set data.source = 'files' and "
                         "data.paths = [a .jsonl of messages or a folder of images with captions, ...]")
    if d.format != "messages":
        raise ValueError(f"data.format: a vision-language run reads conversations: set data.format = 'messages', "
                         f"got {d.format!r}")
    for key in ("cp", "pp"):
        if getattr(par, key) != 1:
            raise ValueError(f"parallelism.{key} = {getattr(par, key)}: not yet for model {cfg.model.name!r} "
                             f"(FSDP / HSDP, TP and activation policies are); set it to 1")
    if par.loss_parallel:
        raise ValueError("parallelism.loss_parallel: not for a vision-language model; set it to false")
    if cfg.model.init_from or cfg.checkpoint.export_hf:
        raise ValueError("model.init_from / checkpoint.export_hf: not yet for a vision-language model (its "
                         "trainer checkpoints are the hyper-parallel format)")
    if d.max_pixels < 0 or d.min_pixels < 0 or (d.max_pixels and d.min_pixels > d.max_pixels):
        raise ValueError(f"data.max_pixels / data.min_pixels: expected 0 (the processor's) or 0 < min_pixels <= "
                         f"max_pixels, got {d.min_pixels} / {d.max_pixels}")


def prepare_vl(cfg: Any) -> Any:
    """The :class:`~hyper_parallel.trainer.vl_sft.VLDataset` of ``[data]`` for ``[model]``'s flavor."""
    from hyper_parallel.trainer.models import build_model_config  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.vl_sft import VLProcessor, build_vl_dataset  # pylint: disable=C0415
    d = cfg.data
    proc = VLProcessor(d.processor[3:], max_pixels=d.max_pixels, min_pixels=d.min_pixels)
    model_cfg = build_model_config(cfg.model.name, cfg.model.flavor)
    ds = build_vl_dataset(list(d.paths), list(d.eval_paths), proc, model_cfg, seq_len=cfg.training.seq_len,
                          packing=d.packing, bad_records=d.bad_records, eval_fraction=d.eval_fraction)
    ds.tokenizer = None
    return ds


class VLTrainer(LLMTrainer):
    """Train a vision-language model as ``config`` says (arguments as :class:`LLMTrainer`); the dataset is a
    :class:`~hyper_parallel.trainer.vl_sft.VLDataset` (rows with images), the model config takes the
    processor's special token ids and vocabulary size."""

    def _load_data(self) -> None:
        validate_vl(self.config)
        self.dataset = prepare_vl(self.config)
