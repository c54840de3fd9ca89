# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Auto-parallel: memory and step-time estimates, an ND plan search and pipeline stage balancing.

Everything here is pure Python (no framework import); ``hyper_parallel.auto_parallel._torch`` holds
the calibration and the measured runs that validate the estimates (``docs/auto_parallel.md``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from hyper_parallel._lazy import lazy_exports

if TYPE_CHECKING:  # static analysers see the lazy names; nothing is imported at run time
    from hyper_parallel.auto_parallel.balance import LayerCost, balance_stages
    from hyper_parallel.auto_parallel.cluster import CLUSTER_PRESETS, ClusterSpec, collective_time, parse_bytes
    from hyper_parallel.auto_parallel.config_writer import trainer_config
    from hyper_parallel.auto_parallel.memory import MemoryEstimate, estimate_memory
    from hyper_parallel.auto_parallel.plan import ParallelPlan, TrainConfig
    from hyper_parallel.auto_parallel.planner import NoPlanFitsError, RankedPlan, SearchResult, search
    from hyper_parallel.auto_parallel.shape import PUBLISHED_SHAPES, ModelShape, model_shape
    from hyper_parallel.auto_parallel.time_model import TimeEstimate, estimate_step_time

_LAZY = {
    "ClusterSpec": "hyper_parallel.auto_parallel.cluster",
    "CLUSTER_PRESETS": "hyper_parallel.auto_parallel.cluster",
    "collective_time": "hyper_parallel.auto_parallel.cluster",
    "parse_bytes": "hyper_parallel.auto_parallel.cluster",
    "ModelShape": "hyper_parallel.auto_parallel.shape",
    "model_shape": "hyper_parallel.auto_parallel.shape",
    "PUBLISHED_SHAPES": "hyper_parallel.auto_parallel.shape",
    "ParallelPlan": "hyper_parallel.auto_parallel.plan",
    "TrainConfig": "hyper_parallel.auto_parallel.plan",
    "MemoryEstimate": "hyper_parallel.auto_parallel.memory",
    "estimate_memory": "hyper_parallel.auto_parallel.memory",
    "TimeEstimate": "hyper_parallel.auto_parallel.time_model",
    "estimate_step_time": "hyper_parallel.auto_parallel.time_model",
    "RankedPlan": "hyper_parallel.auto_parallel.planner",
    "SearchResult": "hyper_parallel.auto_parallel.planner",
    "NoPlanFitsError": "hyper_parallel.auto_parallel.planner",
    "search": "hyper_parallel.auto_parallel.planner",
    "LayerCost": "hyper_parallel.auto_parallel.balance",
    "balance_stages": "hyper_parallel.auto_parallel.balance",
    "trainer_config": "hyper_parallel.auto_parallel.config_writer",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
