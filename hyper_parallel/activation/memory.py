# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Activation memory formulas (pure): what one decoder layer saves for backward.

Korthikanti et al. (arXiv 2205.05198) give ``s*b*h*(34 + 5*a*s/h)`` bytes per layer for a 16-bit GPT
layer (LayerNorm, GeLU MLP, unfused softmax attention, dropout). The tiny Llama differs (RMSNorm,
SwiGLU, grouped-query attention, a fused attention kernel that saves only its output and the
log-sum-exp, no dropout), so :func:`llama_layer_saved_bytes` counts its saved tensors directly;
it matches the bytes autograd saves in one layer exactly (checked by the activation ST tests).
"""
from __future__ import annotations

__all__ = ["llama_layer_saved_bytes", "gpt_layer_bytes_korthikanti"]


def llama_layer_saved_bytes(batch: int, seq: int, hidden: int, kv_hidden: int, intermediate: int, heads: int,
                            head_dim: int, itemsize: int = 4) -> int:
    """Bytes one Llama decoder layer saves for backward without checkpointing.

    Per token: each RMSNorm keeps its input, the normalised input and the scaled output (``3h``,
    twice), the attention keeps q (``h``), k and v (``2 h_kv``) and its output (``h``; the
    ``transpose().reshape()`` feeding ``o_proj`` is a view of it), the SwiGLU MLP keeps the gate
    and up projections, ``silu(gate)`` and their product (``4 i``); plus the two RMS factors (one
    value per token each), the attention's log-sum-exp (``heads`` fp32 values per token) and the
    rotary cos/sin tables (``2 * seq * head_dim``, shared by the layers but saved by each).
    """
    for name, value in (("batch", batch), ("seq", seq), ("hidden", hidden), ("kv_hidden", kv_hidden),
                        ("intermediate", intermediate), ("heads", heads), ("head_dim", head_dim),
                        ("itemsize", itemsize)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"llama_layer_saved_bytes({name}): expected a positive integer, got {value!r}")
    tokens = batch * seq
    per_token = 8 * hidden + 2 * kv_hidden + 4 * intermediate + 2
    return tokens * per_token * itemsize + tokens * heads * 4 + 2 * seq * head_dim * itemsize


def gpt_layer_bytes_korthikanti(batch: int, seq: int, hidden: int, heads: int) -> int:
    """The reference formula ``s*b*h*(34 + 5*a*s/h)`` (16-bit GPT layer, no checkpointing)."""
    return int(seq * batch * hidden * (34 + 5 * heads * seq / hidden))
