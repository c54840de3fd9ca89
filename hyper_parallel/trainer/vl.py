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
from hyper_parallel.trainer.vl_config import (MOE_VISION_MODELS, is_vision_model, validate_vl, validate_vl_data,
                                              validate_vl_layout)

__all__ = ["VLTrainer", "trainer_class", "is_vision_model", "prepare_vl", "validate_vl", "validate_vl_data",
           "validate_vl_layout", "MOE_VISION_MODELS"]


def trainer_class(config: Any) -> type:
    """:class:`VLTrainer` for a vision-language ``[model] name``, else :class:`LLMTrainer`."""
    return VLTrainer if is_vision_model(config.model.name) else LLMTrainer


def prepare_vl(cfg: Any) -> Any:
    """The :class:`~hyper_parallel.trainer.vl_sft.VLDataset` of ``[data]`` for ``[model]``'s flavor."""
    from hyper_parallel.trainer.models import build_model_config  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.vl_sft import VLProcessor, build_vl_dataset  # pylint: disable=C0415
    d = cfg.data
    proc = VLProcessor(d.processor[3:], max_pixels=d.max_pixels, min_pixels=d.min_pixels)
    if cfg.model.init_from:  # the size and token ids of the folder's config.json
        from hyper_parallel.trainer.hf_folder import parse_init_from, read_hf_config  # noqa  # pylint: disable=C0415
        from hyper_parallel.trainer.models import model_spec  # pylint: disable=import-outside-toplevel
        folder = parse_init_from(cfg.model.init_from)
        model_cfg = model_spec(cfg.model.name).state_dict_adapter.config_from_hf(read_hf_config(folder))
    else:
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
