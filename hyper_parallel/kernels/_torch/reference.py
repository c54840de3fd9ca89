# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Pure-PyTorch references of the library's fused ops: the test oracle, and what every op runs when the
C++ ops are unavailable (no compiler) or the tensors are not on the CPU. Each computes in float32
(float64 for float64 inputs) and returns the input dtype, like the kernels."""
from __future__ import annotations

from typing import Optional, Tuple

import torch

__all__ = ["rms_norm_ref", "rotary_ref", "rotate_half", "swiglu_ref", "moe_permute_ref", "moe_unpermute_ref",
           "sinkhorn_ref"]


def _wide(t: torch.Tensor) -> torch.Tensor:
    return t.double() if t.dtype == torch.float64 else t.float()


def rms_norm_ref(x: torch.Tensor, weight: Optional[torch.Tensor] = None, eps: float = 1e-6) -> torch.Tensor:
    """``x / sqrt(mean(x**2, -1) + eps) * weight`` over the last dim."""
    xf = _wide(x)
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * _wide(weight)
    return y.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[-x2, x1]`` for the two halves of the last dim."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` (HF Llama convention; ``cos``/``sin`` broadcast to ``x``)."""
    return x * cos + rotate_half(x) * sin


def swiglu_ref(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up``."""
    return torch.nn.functional.silu(gate) * up


def moe_permute_ref(tokens: torch.Tensor, expert_idx: torch.Tensor,
                    num_experts: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows of ``tokens`` [T, H] repeated per routed slot and grouped by expert (stable in token order).

    Returns ``(permuted [T*K, H], row_map [T, K], tokens_per_expert [E])``: ``row_map[t, k]`` is the row
    of ``permuted`` that holds token ``t``'s copy for its ``k``-th expert ``expert_idx[t, k]``."""
    t, k = expert_idx.shape
    flat = expert_idx.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    row_map = torch.empty_like(order)
    row_map[order] = torch.arange(t * k, device=order.device)
    counts = torch.bincount(flat, minlength=num_experts)
    return tokens[order // k], row_map.view(t, k), counts


def moe_unpermute_ref(permuted: torch.Tensor, row_map: torch.Tensor,
                      probs: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``out[t] = sum_k probs[t, k] * permuted[row_map[t, k]]`` (probs 1 when None)."""
    rows = _wide(permuted)[row_map]  # [T, K, H]
    if probs is not None:
        rows = rows * _wide(probs).unsqueeze(-1)
    return rows.sum(1).to(permuted.dtype)


def sinkhorn_ref(logits: torch.Tensor, num_iters: int = 20, clamp_min: float = -30.0, clamp_max: float = 30.0,
                 eps: float = 1e-6) -> torch.Tensor:
    """Sinkhorn–Knopp with pre-clamp over the last two dims: ``M = exp(clamp(logits))``, then
    ``num_iters`` times rows then columns divided by their sum + eps (a doubly-stochastic matrix)."""
    m = torch.exp(_wide(logits).clamp(clamp_min, clamp_max))
    for _ in range(num_iters):
        m = m / (m.sum(-1, keepdim=True) + eps)
        m = m / (m.sum(-2, keepdim=True) + eps)
    return m.to(logits.dtype)
