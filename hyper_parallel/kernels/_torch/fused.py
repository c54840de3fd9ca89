# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The library's fused ops (torch): each is torch-function aware (DTensor inputs go through the op
registry under ``hyper_parallel.kernels.<name>``), runs ``torch.ops.hyper_parallel.<op>`` (C++, forward and
backward kernels) on CPU tensors when the C++ ops are built, and its pure-PyTorch reference otherwise
(``hyper_parallel.kernels._torch.reference``)."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch.overrides import handle_torch_function, has_torch_function

from hyper_parallel.kernels._torch import build, reference

__all__ = ["rms_norm", "swiglu", "moe_permute", "moe_unpermute", "sinkhorn", "use_kernels"]


def use_kernels(*tensors) -> bool:
    """True when the C++ kernels serve these tensors (built, and every tensor on the CPU)."""
    return all(t is None or t.device.type == "cpu" for t in tensors) and build.load()


def _tensors(*args):
    return tuple(a for a in args if a is not None)


def rms_norm(x: torch.Tensor, weight: Optional[torch.Tensor] = None, eps: float = 1e-6) -> torch.Tensor:
    """Fused RMSNorm over the last dim: ``x / sqrt(mean(x**2, -1) + eps) * weight`` (computed in float32)."""
    if has_torch_function(_tensors(x, weight)):
        return handle_torch_function(rms_norm, _tensors(x, weight), x, weight, eps)
    if x.shape[-1:] and weight is not None and tuple(weight.shape) != tuple(x.shape[-1:]):
        raise ValueError(f"rms_norm: weight must have shape {tuple(x.shape[-1:])} (x's last dim), "
                         f"got {tuple(weight.shape)}")
    if use_kernels(x, weight):
        return torch.ops.hyper_parallel.rms_norm(x, weight, float(eps))[0]
    return reference.rms_norm_ref(x, weight, eps)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """Fused SwiGLU: ``silu(gate) * up`` (same shapes; other shapes broadcast through the reference)."""
    if has_torch_function((gate, up)):
        return handle_torch_function(swiglu, (gate, up), gate, up)
    if gate.shape == up.shape and gate.dtype == up.dtype and use_kernels(gate, up):
        return torch.ops.hyper_parallel.swiglu(gate, up)
    return reference.swiglu_ref(gate, up)


def moe_permute(tokens: torch.Tensor, expert_idx: torch.Tensor,
                num_experts: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Group token rows by expert: ``tokens`` [T, H], ``expert_idx`` [T, K] (integers in ``[0, num_experts)``).

    Returns ``(permuted [T*K, H], row_map [T, K], tokens_per_expert [num_experts])``; rows of one expert
    keep token order. Differentiable in ``tokens``; undo with :func:`moe_unpermute`."""
    if has_torch_function((tokens, expert_idx)):
        return handle_torch_function(moe_permute, (tokens, expert_idx), tokens, expert_idx, num_experts)
    if tokens.dim() != 2 or expert_idx.dim() != 2 or expert_idx.shape[0] != tokens.shape[0]:
        raise ValueError(f"moe_permute: expected tokens [T, H] and expert_idx [T, K], got {tuple(tokens.shape)} "
                         f"and {tuple(expert_idx.shape)}")
    if expert_idx.is_floating_point() or expert_idx.is_complex():
        raise ValueError(f"moe_permute: expert_idx must be an integer tensor, got {expert_idx.dtype}")
    if use_kernels(tokens, expert_idx):
        return torch.ops.hyper_parallel.moe_permute(tokens, expert_idx, int(num_experts))
    if expert_idx.numel() and (int(expert_idx.min()) < 0 or int(expert_idx.max()) >= num_experts):
        raise ValueError(f"moe_permute: expert_idx entries must lie in [0, {num_experts})")
    return reference.moe_permute_ref(tokens, expert_idx, num_experts)


def moe_unpermute(permuted: torch.Tensor, row_map: torch.Tensor,
                  probs: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Inverse of :func:`moe_permute` with the routing weights: ``out[t] = sum_k probs[t, k] *
    permuted[row_map[t, k]]`` (``probs`` 1 when None). Differentiable in ``permuted`` and ``probs``."""
    if has_torch_function(_tensors(permuted, row_map, probs)):
        return handle_torch_function(moe_unpermute, _tensors(permuted, row_map, probs), permuted, row_map, probs)
    if row_map.dtype != torch.int64 or row_map.dim() != 2:
        raise ValueError(f"moe_unpermute: row_map must be the int64 [T, K] map from moe_permute, got "
                         f"{row_map.dtype} {tuple(row_map.shape)}")
    if use_kernels(permuted, row_map, probs):
        return torch.ops.hyper_parallel.moe_unpermute(permuted, row_map, probs)
    return reference.moe_unpermute_ref(permuted, row_map, probs)


def sinkhorn(logits: torch.Tensor, num_iters: int = 20, clamp_min: float = -30.0, clamp_max: float = 30.0,
             eps: float = 1e-6) -> torch.Tensor:
    """Sinkhorn normalisation with pre-clamp of a batch of matrices ``[..., n, m]`` (HyperParallel's MHC op):
    ``M = exp(clamp(logits, clamp_min, clamp_max))``, then ``num_iters`` times each row and then each
    column divided by its sum + ``eps`` — a (nearly) doubly-stochastic matrix. Differentiable."""
    if has_torch_function((logits,)):
        return handle_torch_function(sinkhorn, (logits,), logits, num_iters, clamp_min, clamp_max, eps)
    if logits.dim() < 2:
        raise ValueError(f"sinkhorn: logits must be [..., n, m], got shape {tuple(logits.shape)}")
    if num_iters < 0 or clamp_min > clamp_max:
        raise ValueError(f"sinkhorn: need num_iters >= 0 and clamp_min <= clamp_max, got {num_iters}, "
                         f"{clamp_min}, {clamp_max}")
    if use_kernels(logits):
        return torch.ops.hyper_parallel.sinkhorn(logits, int(num_iters), float(clamp_min), float(clamp_max),
                                                 float(eps))
    return reference.sinkhorn_ref(logits, num_iters, clamp_min, clamp_max, eps)
