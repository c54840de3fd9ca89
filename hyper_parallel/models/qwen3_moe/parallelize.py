# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Parallel plans of Qwen3-MoE: EP (+ FSDP of the experts over what is left) for the MoE blocks, TP + SP
and the QK-norm entries for attention, FSDP per layer (``parallelize_llama_moe``)."""
from __future__ import annotations

from hyper_parallel.models.llama3.parallelize import parallelize_llama3, parallelize_llama_moe, pipeline_llama3

__all__ = ["parallelize_qwen3_moe", "pipeline_qwen3_moe", "parallelize_llama_moe"]


def parallelize_qwen3_moe(model, world_mesh, parallel_dims, **options):
    """The registry's ``parallelize_fn`` for Qwen3-MoE: ``parallel_dims.ep`` expert-parallel ranks
    borrowed from ``dp_shard * tp`` (see :func:`parallelize_llama3` for ``options``)."""
    options.setdefault("fn_name", "parallelize_qwen3_moe")
    return parallelize_llama3(model, world_mesh, parallel_dims, **options)


def pipeline_qwen3_moe(model, world_mesh, parallel_dims, **kwargs):
    """The registry's ``pipelining_fn`` for Qwen3-MoE (:func:`pipeline_llama3`)."""
    return pipeline_llama3(model, world_mesh, parallel_dims, **kwargs)
