# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The fused ops' references on MindSpore tensors — the same math as ``kernels/_torch/reference.py``
(float32 compute, input dtype out), differentiable with MindSpore's autograd. C++ MindSpore custom ops
are out of scope on CPU, so these are what MindSpore runs."""
from __future__ import annotations

from typing import Optional, Tuple

import mindspore as ms
import numpy as np
from mindspore import mint, ops

__all__ = ["rms_norm", "apply_rotary_emb", "rotate_half", "swiglu", "moe_permute", "moe_unpermute", "sinkhorn"]


def _wide(t):
    return t if t.dtype == ms.float64 else t.astype(ms.float32)


def rms_norm(x, weight=None, eps: float = 1e-6):
    """``x / sqrt(mean(x**2, -1) + eps) * weight`` over the last dim."""
    xf = _wide(x)
    y = xf * mint.rsqrt(mint.mean(xf * xf, -1, keepdim=True) + eps)
    if weight is not None:
        y = y * _wide(weight)
    return y.astype(x.dtype)


def rotate_half(x):
    """``[-x2, x1]`` for the two halves of the last dim."""
    half = x.shape[-1] // 2
    return mint.cat((-x[..., half:], x[..., :half]), -1)


def apply_rotary_emb(x, cos, sin):
    """``x * cos + rotate_half(x) * sin``."""
    return x * cos + rotate_half(x) * sin


def swiglu(gate, up):
    """``silu(gate) * up``."""
    return mint.nn.functional.silu(gate) * up


def moe_permute(tokens, expert_idx, num_experts: int) -> Tuple:
    """Rows of ``tokens`` [T, H] grouped by expert, stable in token order:
    ``(permuted [T*K, H], row_map [T, K], tokens_per_expert [E])``."""
    t, k = expert_idx.shape
    flat = expert_idx.reshape(-1).astype(ms.int64)
    # stable order: sort by expert * (T*K) + slot (unique keys, so any sort is stable)
    slots = ms.Tensor(np.arange(t * k), ms.int64)  # (no int64 arange / argsort CPU kernels in MindSpore 2.10)
    if num_experts * t * k >= 2 ** 24:
        raise ValueError(f"moe_permute (MindSpore reference): {t} x {k} slots x {num_experts} experts exceed the "
                         "float32-exact sort keys (< 2**24)")
    order = ops.sort((flat * (t * k) + slots).astype(ms.float32))[1].astype(ms.int64)
    row_map = ops.scatter(mint.zeros(t * k, dtype=ms.int64), 0, order, slots)
    counts = (flat.unsqueeze(1) == ms.Tensor(np.arange(num_experts), ms.int64)).astype(ms.int64).sum(0)
    return tokens[order // k], row_map.reshape(t, k), counts


def moe_unpermute(permuted, row_map, probs: Optional[object] = None):
    """``out[t] = sum_k probs[t, k] * permuted[row_map[t, k]]`` (probs 1 when None)."""
    rows = _wide(permuted)[row_map]
    if probs is not None:
        rows = rows * _wide(probs).unsqueeze(-1)
    return rows.sum(1).astype(permuted.dtype)


def sinkhorn(logits, num_iters: int = 20, clamp_min: float = -30.0, clamp_max: float = 30.0, eps: float = 1e-6):
    """Sinkhorn–Knopp with pre-clamp over the last two dims (see the torch reference)."""
    m = mint.exp(mint.clamp(_wide(logits), clamp_min, clamp_max))
    for _ in range(num_iters):
        m = m / (m.sum(-1, keepdim=True) + eps)
        m = m / (m.sum(-2, keepdim=True) + eps)
    return m.astype(logits.dtype)
