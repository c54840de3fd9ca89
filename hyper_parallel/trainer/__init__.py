# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The trainer: ``LLMTrainer(config)`` and ``hp-train --config FILE``; see ``docs/trainer.md``.

One TOML config (``configs/``) drives one run: ``ParallelDims`` builds the meshes, the data pipeline trains a
BPE tokenizer on the corpus once and packs, shuffles and shards it deterministically, the callbacks log
(rich progress, JSONL, PNG), checkpoint, evaluate, monitor MoE load and profile. ``import
hyper_parallel.trainer`` imports no framework.
"""
from __future__ import annotations

from hyper_parallel._lazy import lazy_exports

_LAZY = {
    "LLMTrainer": "hyper_parallel.trainer.api",
    "VLTrainer": "hyper_parallel.trainer.vl",
    "TrainerBackend": "hyper_parallel.trainer.api",
    "register_backend": "hyper_parallel.trainer.api",
    "ParallelDims": "hyper_parallel.models.parallel_dims",
    "JobConfig": "hyper_parallel.trainer.config",
    "ConfigError": "hyper_parallel.trainer.config",
    "load_config": "hyper_parallel.trainer.config",
    "parse_config": "hyper_parallel.trainer.config",
    "Callback": "hyper_parallel.trainer.callbacks",
    "LoggingCallback": "hyper_parallel.trainer.callbacks",
    "CheckpointCallback": "hyper_parallel.trainer.callbacks",
    "EvalCallback": "hyper_parallel.trainer.callbacks",
    "MoeMonitorCallback": "hyper_parallel.trainer.callbacks",
    "ProfilerCallback": "hyper_parallel.trainer.callbacks",
    "DistributedBatchLoader": "hyper_parallel.trainer.data",
    "prepare_dataset": "hyper_parallel.trainer.data",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
