# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Parallel plans of Qwen3: Llama's (TP + SP + loss parallel, CP, FSDP/HSDP, activation policy, PP
split) plus the per-head QK-norms under TP (``qk_norm_plan``)."""
from __future__ import annotations

from hyper_parallel.models.llama3.parallelize import (parallelize_llama3, pipeline_llama3, qk_norm_plan)

__all__ = ["parallelize_qwen3", "pipeline_qwen3", "qk_norm_plan"]


def parallelize_qwen3(model, world_mesh, parallel_dims, **options):
    """The registry's ``parallelize_fn`` for Qwen3 and Qwen3-MoE (see
    :func:`hyper_parallel.models.llama3.parallelize.parallelize_llama3` for ``options``; the QK-norm TP
    entries come with the config's ``qk_norm``)."""
    options.setdefault("fn_name", "parallelize_qwen3")
    return parallelize_llama3(model, world_mesh, parallel_dims, **options)


def pipeline_qwen3(model, world_mesh, parallel_dims, **kwargs):
    """The registry's ``pipelining_fn`` for Qwen3 (:func:`pipeline_llama3`)."""
    return pipeline_llama3(model, world_mesh, parallel_dims, **kwargs)
