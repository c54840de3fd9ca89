# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Hugging Face export/import from MindSpore: refused with the way to do it.

A MindSpore model is exported by saving a hyper-parallel checkpoint (``hyper_parallel.checkpoint.save``)
and converting it offline with ``hp-ckpt convert CKPT OUT --to hf`` (and imported with ``--to dcp``
followed by ``load``): the format is shared, so no MindSpore-specific Hugging Face writer is needed.
"""
from __future__ import annotations

from typing import Any

from hyper_parallel.checkpoint.format import CheckpointError

__all__ = ["save_hf", "load_hf"]


def save_hf(model: Any, folder: Any, adapter: Any = None, **kwargs: Any) -> None:
    """Refused: save a checkpoint, then ``hp-ckpt convert CKPT FOLDER --to hf``."""
    del model, adapter, kwargs
    raise CheckpointError(f"save_hf({folder}) on MindSpore: save a checkpoint with hyper_parallel.checkpoint.save, "
                          "then convert it with `hp-ckpt convert CKPT OUT --to hf [--adapter ...]`")


def load_hf(model: Any, folder: Any, adapter: Any = None, **kwargs: Any) -> None:
    """Refused: ``hp-ckpt convert FOLDER CKPT --to dcp``, then ``load``."""
    del model, adapter, kwargs
    raise CheckpointError(f"load_hf({folder}) on MindSpore: convert it with `hp-ckpt convert {folder} CKPT --to dcp` "
                          "and load CKPT with hyper_parallel.checkpoint.load")
