# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Distributed checkpoints: save/load with resharding between any layouts, async saves, a crash-safe
manager, Hugging Face export/import and an offline converter (``hp-ckpt``); see ``docs/checkpoint.md``.

The torch path runs on torch's DCP engine (our DTensor plugs in through DCP's ``_Checkpointable``
protocol); the MindSpore path writes and reads the same backend-free format (safetensors data +
``metadata.json``). ``import hyper_parallel.checkpoint`` imports no framework.
"""
from __future__ import annotations

from hyper_parallel._lazy import lazy_exports

from hyper_parallel.checkpoint.api import (CheckpointManager, ModelState, OptimizerState, PerRank, StateDictOptions,
                                           Stateful, async_save, get_model_state_dict, get_optimizer_state_dict,
                                           get_state_dict, load, load_hf, save, save_hf, set_model_state_dict,
                                           set_optimizer_state_dict, set_state_dict)
from hyper_parallel.checkpoint.format import CheckpointCorruptError, CheckpointError, CheckpointMetadata
from hyper_parallel.checkpoint.hf import IdentityAdapter, KeyMapAdapter, StateDictAdapter

_LAZY = {
    "FileSystemWriter": "hyper_parallel.checkpoint._torch.storage",
    "FileSystemReader": "hyper_parallel.checkpoint._torch.storage",
    "CPUStager": "hyper_parallel.checkpoint._torch.staging",
    "RNGState": "hyper_parallel.checkpoint._torch.stateful",
    "AsyncSaveFuture": "hyper_parallel.checkpoint._torch.api",
    "wait_for_async_save": "hyper_parallel.checkpoint._torch.api",
}

__all__ = ["CheckpointManager", "ModelState", "OptimizerState", "PerRank", "StateDictOptions", "Stateful",
           "async_save", "get_model_state_dict", "get_optimizer_state_dict", "get_state_dict", "load", "load_hf",
           "save", "save_hf", "set_model_state_dict", "set_optimizer_state_dict", "set_state_dict",
           "CheckpointCorruptError", "CheckpointError", "CheckpointMetadata", "IdentityAdapter", "KeyMapAdapter",
           "StateDictAdapter", *sorted(_LAZY)]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
