# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Local attention kernels that return the log-sum-exp, and their backward.

* ``cpu_flash``: ``aten._scaled_dot_product_flash_attention_for_cpu`` (+ ``_backward``), the kernel
  ``F.scaled_dot_product_attention`` itself uses on CPU. It handles grouped-query heads natively
  and takes an additive float mask. Its backward uses the ``out``/``lse`` it is given, so passing
  the *merged* output and log-sum-exp yields one block's share of the full gradient.
* ``math``: explicit matmul/softmax in fp32, for any device (the default off the CPU) and as a
  second implementation to check the first.

Tensors are ``[B, H, L, E]`` (``k``/``v`` may have fewer heads: GQA); ``lse`` is fp32 ``[B, H, L]``.
A query row that sees no key (all masked) has ``out = 0`` and ``lse = -inf``.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

__all__ = ["attention_forward", "attention_backward", "default_impl", "additive_mask", "acc_dtype", "IMPLS"]

IMPLS = ("cpu_flash", "math")
_NEG_INF = float("-inf")


def default_impl(device: torch.device) -> str:
    """``cpu_flash`` on the CPU, ``math`` elsewhere."""
    return "cpu_flash" if device.type == "cpu" else "math"


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulation dtype of ``out``/``lse``/gradients: float64 for float64 inputs, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean mask (True = attend) as an additive float mask (0 / -inf) of ``dtype``."""
    if mask.dtype == torch.bool:
        zero = torch.zeros((), dtype=dtype, device=mask.device)
        return torch.where(mask, zero, torch.full((), _NEG_INF, dtype=dtype, device=mask.device))
    return mask.to(dtype)


def _scale(q: torch.Tensor, scale: Optional[float]) -> float:
    return scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])


def _rows_alive(mask: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """True for query rows with at least one unmasked key, broadcast to ``lse``'s shape."""
    return (mask > _NEG_INF).any(-1).expand(lse.shape)


def _expand_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    group = heads // x.shape[-3]
    return x if group == 1 else x.repeat_interleave(group, dim=-3)


def _math_scores(q, k, causal, scale, mask):
    dt = acc_dtype(q.dtype)
    s = torch.matmul(q.to(dt), _expand_heads(k, q.shape[-3]).to(dt).transpose(-1, -2)) * scale
    if causal:
        lq, lk = s.shape[-2], s.shape[-1]
        s = s.masked_fill(torch.ones(lq, lk, dtype=torch.bool, device=s.device).triu(1), _NEG_INF)
    if mask is not None:
        s = s + mask.to(dt)
    return s


def _finite(lse: torch.Tensor, fill: float) -> torch.Tensor:
    return torch.where(torch.isneginf(lse), torch.full_like(lse, fill), lse)


def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                      scale: Optional[float] = None, mask: Optional[torch.Tensor] = None,
                      impl: Optional[str] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(out, lse)`` of softmax attention (``mask``: additive float, broadcastable to ``[B, H, Lq, Lk]``)."""
    impl = impl or default_impl(q.device)
    sc = _scale(q, scale)
    if impl == "cpu_flash":
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, attn_mask=mask,
                                                                               scale=sc)
        lse = lse.to(acc_dtype(q.dtype))
        if mask is not None:
            lse = torch.where(_rows_alive(mask, lse), lse, torch.full_like(lse, _NEG_INF))
        return out, lse
    if impl != "math":
        raise ValueError(f"attention kernel impl: expected one of {IMPLS}, got {impl!r}")
    s = _math_scores(q, k, causal, sc, mask)
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - _finite(lse, 0.0).unsqueeze(-1))
    out = torch.matmul(p, _expand_heads(v, q.shape[-3]).to(p.dtype))
    return out.to(q.dtype), lse


def _fold_heads(g: torch.Tensor, kv_heads: int) -> torch.Tensor:
    heads = g.shape[-3]
    if heads == kv_heads:
        return g
    shape = g.shape[:-3] + (kv_heads, heads // kv_heads) + g.shape[-2:]
    return g.reshape(shape).sum(-3)


def attention_backward(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                       lse: torch.Tensor, *, causal: bool, scale: Optional[float] = None,
                       mask: Optional[torch.Tensor] = None, impl: Optional[str] = None):
    """``(dq, dk, dv)`` of one key block given the *final* ``out`` and ``lse`` of the query rows."""
    impl = impl or default_impl(q.device)
    sc = _scale(q, scale)
    lse = _finite(lse, float("inf"))  # rows that saw no key: P = 0, no gradient
    if impl == "cpu_flash":
        lse = lse.to(torch.float64 if q.dtype == torch.float64 else torch.float32)
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out, q, k, v, out, lse, 0.0, causal, attn_mask=mask, scale=sc)
    if impl != "math":
        raise ValueError(f"attention kernel impl: expected one of {IMPLS}, got {impl!r}")
    s = _math_scores(q, k, causal, sc, mask)
    p = torch.exp(s - lse.unsqueeze(-1))
    dt = s.dtype
    do = grad_out.to(dt)
    ve = _expand_heads(v, q.shape[-3]).to(dt)
    dv = torch.matmul(p.transpose(-1, -2), do)
    dp = torch.matmul(do, ve.transpose(-1, -2))
    ds = p * (dp - (do * out.to(dt)).sum(-1, keepdim=True))
    dq = torch.matmul(ds, _expand_heads(k, q.shape[-3]).to(dt)) * sc
    dk = torch.matmul(ds.transpose(-1, -2), q.to(dt)) * sc
    kvh = k.shape[-3]
    return dq.to(q.dtype), _fold_heads(dk, kvh).to(k.dtype), _fold_heads(dv, kvh).to(v.dtype)
