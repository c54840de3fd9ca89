# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The Python half of ``torch.ops.hyper_parallel.*``: fake (meta) kernels so ``torch.compile`` traces
the ops, and the autograd formulas (each backward is itself a C++ op). Called once by
:func:`hyper_parallel.kernels._torch.build.load` after the C++ library is loaded."""
from __future__ import annotations

import torch

__all__ = ["register_python_parts"]

_DONE = []


def _wide_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _register_fakes() -> None:
    reg = torch.library.register_fake

    @reg("hyper_parallel::rms_norm")
    def _rms(x, weight, eps):  # pylint: disable=unused-argument
        return torch.empty_like(x, memory_format=torch.contiguous_format), \
            x.new_empty(x.shape[:-1], dtype=_wide_dtype(x.dtype))

    @reg("hyper_parallel::rms_norm_backward")
    def _rms_bwd(grad, x, weight, rstd):  # pylint: disable=unused-argument
        wt = weight.dtype if weight is not None else x.dtype
        return torch.empty_like(x, memory_format=torch.contiguous_format), x.new_empty(x.shape[-1:], dtype=wt)

    @reg("hyper_parallel::rotary")
    def _rot(x, cos, sin, inverse=False):  # pylint: disable=unused-argument
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    @reg("hyper_parallel::swiglu")
    def _swi(gate, up):  # pylint: disable=unused-argument
        return torch.empty_like(gate, memory_format=torch.contiguous_format)

    @reg("hyper_parallel::swiglu_backward")
    def _swi_bwd(grad, gate, up):  # pylint: disable=unused-argument
        return torch.empty_like(gate, memory_format=torch.contiguous_format), \
            torch.empty_like(up, memory_format=torch.contiguous_format)

    @reg("hyper_parallel::moe_permute")
    def _perm(tokens, expert_idx, num_experts):
        t, k = expert_idx.shape
        return (tokens.new_empty((t * k, tokens.shape[1])), expert_idx.new_empty((t, k), dtype=torch.int64),
                expert_idx.new_empty((num_experts,), dtype=torch.int64))

    @reg("hyper_parallel::moe_unpermute")
    def _unperm(permuted, row_map, probs):  # pylint: disable=unused-argument
        return permuted.new_empty((row_map.shape[0], permuted.shape[1]))

    @reg("hyper_parallel::moe_unpermute_backward")
    def _unperm_bwd(grad, permuted, row_map, probs):  # pylint: disable=unused-argument
        wt = probs.dtype if probs is not None else permuted.dtype
        return torch.empty_like(permuted, memory_format=torch.contiguous_format), \
            permuted.new_empty(tuple(row_map.shape), dtype=wt)

    @reg("hyper_parallel::sinkhorn")
    def _sk(logits, num_iters, clamp_min, clamp_max, eps):  # pylint: disable=unused-argument
        return torch.empty_like(logits, memory_format=torch.contiguous_format)

    @reg("hyper_parallel::sinkhorn_backward")
    def _sk_bwd(grad, logits, num_iters, clamp_min, clamp_max, eps):  # pylint: disable=unused-argument
        return torch.empty_like(logits, memory_format=torch.contiguous_format)


# ---------------------------------------------------------------------- autograd
def _rms_setup(ctx, inputs, output):
    x, weight, _ = inputs
    ctx.save_for_backward(x, weight, output[1])
    ctx.has_weight = weight is not None


def _rms_backward(ctx, grad, _grad_rstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dw = torch.ops.hyper_parallel.rms_norm_backward(grad, x, weight if ctx.has_weight else None, rstd)
    return dx, (dw if ctx.has_weight else None), None


def _rot_setup(ctx, inputs, output):  # pylint: disable=unused-argument
    x, cos, sin, inverse = inputs
    ctx.inverse = inverse
    ctx.save_for_backward(x if (cos.requires_grad or sin.requires_grad) else None, cos, sin)


def _rot_backward(ctx, grad):
    x, cos, sin = ctx.saved_tensors
    dx = torch.ops.hyper_parallel.rotary(grad, cos, sin, not ctx.inverse)
    dcos = dsin = None
    if x is not None:  # d/dcos = g * x; d/dsin see _rot_dsin — reduced to their (broadcast) shapes
        dcos = (grad * x).sum_to_size(cos.shape) if ctx.needs_input_grad[1] else None
        dsin = _rot_dsin(grad, x, ctx.inverse).sum_to_size(sin.shape) if ctx.needs_input_grad[2] else None
    return dx, dcos, dsin, None


def _rot_dsin(grad, x, inverse):
    """Gradient with respect to sin before reduction to its shape (formulas as in csrc/cpu/norm_rope_act.cpp)."""
    half = x.shape[-1] // 2
    g1, g2 = grad[..., :half], grad[..., half:]
    x1, x2 = x[..., :half], x[..., half:]
    if inverse:  # o1 = x1 c1 + x2 s2, o2 = x2 c2 - x1 s1  ->  ds1 = -g2 x1, ds2 = g1 x2
        return torch.cat((-g2 * x1, g1 * x2), -1)
    return torch.cat((-g1 * x2, g2 * x1), -1)  # o1 = x1 c1 - x2 s1, o2 = x2 c2 + x1 s2


def _swi_setup(ctx, inputs, output):  # pylint: disable=unused-argument
    ctx.save_for_backward(*inputs)


def _swi_backward(ctx, grad):
    gate, up = ctx.saved_tensors
    return torch.ops.hyper_parallel.swiglu_backward(grad, gate, up)


def _perm_setup(ctx, inputs, output):  # pylint: disable=unused-argument
    # an integer index (no autograd): kept as a detached alias, so that a DTensor dispatcher re-classing
    # the returned output object in place does not change what backward reads
    ctx.row_map = output[1].detach()


def _perm_backward(ctx, grad, _g_map, _g_counts):
    return torch.ops.hyper_parallel.moe_unpermute(grad, ctx.row_map, None), None, None


def _unperm_setup(ctx, inputs, output):  # pylint: disable=unused-argument
    permuted, row_map, probs = inputs
    ctx.has_probs = probs is not None
    ctx.save_for_backward(permuted, row_map, probs)


def _unperm_backward(ctx, grad):
    permuted, row_map, probs = ctx.saved_tensors
    dperm, dprobs = torch.ops.hyper_parallel.moe_unpermute_backward(grad, permuted, row_map,
                                                                    probs if ctx.has_probs else None)
    return dperm, None, (dprobs if ctx.has_probs else None)


def _sk_setup(ctx, inputs, output):  # pylint: disable=unused-argument
    logits, ctx.num_iters, ctx.clamp_min, ctx.clamp_max, ctx.eps = inputs
    ctx.save_for_backward(logits)


def _sk_backward(ctx, grad):
    (logits,) = ctx.saved_tensors
    dx = torch.ops.hyper_parallel.sinkhorn_backward(grad, logits, ctx.num_iters, ctx.clamp_min, ctx.clamp_max,
                                                    ctx.eps)
    return dx, None, None, None, None


def register_python_parts() -> None:
    """Register the fake kernels and autograd formulas (once per process)."""
    if _DONE:
        return
    _register_fakes()
    ra = torch.library.register_autograd
    ra("hyper_parallel::rms_norm", _rms_backward, setup_context=_rms_setup)
    ra("hyper_parallel::rotary", _rot_backward, setup_context=_rot_setup)
    ra("hyper_parallel::swiglu", _swi_backward, setup_context=_swi_setup)
    ra("hyper_parallel::moe_permute", _perm_backward, setup_context=_perm_setup)
    ra("hyper_parallel::moe_unpermute", _unperm_backward, setup_context=_unperm_setup)
    ra("hyper_parallel::sinkhorn", _sk_backward, setup_context=_sk_setup)
    _DONE.append(True)
