# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Parallel plans of Qwen3.5-MoE: Qwen3.5's (:mod:`hyper_parallel.models.qwen3_5.parallelize`: TP + SP per layer
kind, FSDP, PP) with the MoE blocks expert-parallel (+ FSDP of the experts over what is left)."""
from __future__ import annotations

from hyper_parallel.models.qwen3_5.parallelize import parallelize_qwen3_5, pipeline_qwen3_5

__all__ = ["parallelize_qwen3_5_moe", "pipeline_qwen3_5_moe"]


def parallelize_qwen3_5_moe(model, world_mesh, parallel_dims, **options):
    """The registry's ``parallelize_fn`` for Qwen3.5-MoE (:func:`parallelize_qwen3_5`; ``parallel_dims.ep``
    expert-parallel ranks borrowed from ``dp_shard * tp``)."""
    return parallelize_qwen3_5(model, world_mesh, parallel_dims, **options)


def pipeline_qwen3_5_moe(model, world_mesh, parallel_dims, **kwargs):
    """The registry's ``pipelining_fn`` for Qwen3.5-MoE (:func:`pipeline_qwen3_5`)."""
    return pipeline_qwen3_5(model, world_mesh, parallel_dims, **kwargs)
