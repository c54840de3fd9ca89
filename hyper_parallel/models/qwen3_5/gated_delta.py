# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The gated delta rule of Gated DeltaNet (arXiv 2412.06464), chunked and vectorised for the CPU.

Per value head the state ``S`` (``d_k x d_v``) evolves token by token as
``S_t = exp(g_t) (I - beta_t k_t k_t^T) S_(t-1) + beta_t k_t v_t^T`` and the output is ``o_t = S_t^T q_t``
(``q`` scaled by ``d_k^-1/2``; q and k L2-normalised). Chunked form (chunk ``C``), everything batched over
*all* chunks at once:

1. the UT transform: one triangular solve ``(I + strictly_lower(beta K K^T * decay)) [U | W] =
   [beta V | beta K * exp(cumsum g)]`` gives the chunk's pseudo-values ``U`` and the decayed keys ``W``;
2. every chunk update is affine in the incoming state: ``S_out = M S_in + B`` with
   ``M = exp(g_chunk) I - Kd^T W`` and ``B = Kd^T U`` (``Kd``: keys decayed to the chunk end), and the output
   is ``O = A U + (Qd - A W) S_in`` (``A``: the decayed causal ``Q K^T`` of the chunk, ``Qd``: decayed queries);
3. the only serial part is the scan ``S_(i+1) = M_i S_i + B_i`` over chunks (:class:`StateScan`, one
   ``baddbmm`` per chunk, forward and backward), after which all outputs are one batched matmul.

The affine form is also what context parallelism passes between ranks (the state, or ``(M, B)``
summaries). Inputs and outputs follow transformers' ``torch_chunk_gated_delta_rule`` (``[batch, seq, heads,
dim]``; the final state ``[batch, value_heads, d_k, d_v]`` in fp32); the numerical oracle is that function.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F

__all__ = ["chunk_gated_delta_rule", "recurrent_gated_delta_rule", "StateScan", "l2norm"]


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x / sqrt(sum(x^2) + eps)`` over the last dim (flash-linear-attention's convention)."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


class StateScan(torch.autograd.Function):
    """``states, final = StateScan.apply(M, B, S0)``: ``S_(i+1) = M_i S_i + B_i`` for ``M [n, N, dk, dk]``,
    ``B [n, N, dk, dv]``, ``S0 [n, dk, dv]``; ``states[:, i]`` is the state *entering* chunk ``i``. The backward
    runs the adjoint scan ``dS_i = M_i^T dS_(i+1) + dstates_i`` and forms ``dM`` in one batched matmul."""

    @staticmethod
    def forward(ctx, m, b, s0):  # pylint: disable=arguments-differ
        """Every chunk's entering state and the final state."""
        n_chunks = m.shape[1]
        states = b.new_empty(b.shape)
        s = s0
        for i in range(n_chunks):
            states[:, i] = s
            s = torch.baddbmm(b[:, i], m[:, i], s)
        ctx.save_for_backward(m, states)
        return states, s

    @staticmethod
    def backward(ctx, d_states, d_final):  # pylint: disable=arguments-differ
        """Gradients of ``m``, ``b`` and ``s0`` by the adjoint scan."""
        m, states = ctx.saved_tensors
        n_chunks = m.shape[1]
        d_next = torch.empty_like(states)  # gradient w.r.t. the state leaving each chunk
        ds = d_final if d_final is not None else states.new_zeros(states[:, 0].shape)
        mt = m.transpose(-1, -2)
        for i in range(n_chunks - 1, -1, -1):
            d_next[:, i] = ds
            ds = torch.bmm(mt[:, i], ds)
            if d_states is not None:
                ds = ds + d_states[:, i]
        d_m = d_next @ states.transpose(-1, -2)
        return d_m, d_next, ds


def _prepare(q, k, v, g, beta, use_qk_l2norm: bool):
    """fp32, L2-normalised/scaled q and k repeated to the value heads, all as ``[B, H, S, D]``."""
    hk, hv = k.shape[2], v.shape[2]
    if hv % hk:
        raise ValueError(f"chunk_gated_delta_rule: value heads {hv} are not a multiple of key heads {hk}")
    q, k, v, g, beta = (x.float() for x in (q, k, v, g, beta))
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    q = q * q.shape[-1] ** -0.5
    if hv != hk:
        q, k = (x.repeat_interleave(hv // hk, dim=2) for x in (q, k))
    return [x.transpose(1, 2) for x in (q, k, v, g, beta)]


def _chunk_terms(q, k, v, g, beta, chunk: int):
    """Per-chunk ``(M, B, A U, Qeff)`` for ``[B, H, N, C, D]``-shaped inputs (see the module docstring)."""
    gc = g.cumsum(-1)                                       # [B,H,N,C]
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    decay = (gc.unsqueeze(-1) - gc.unsqueeze(-2)).masked_fill(~causal, float("-inf")).exp()
    kb = k * beta.unsqueeze(-1)
    system = (kb @ k.transpose(-1, -2)) * decay
    rhs = torch.cat([v * beta.unsqueeze(-1), kb * gc.exp().unsqueeze(-1)], dim=-1)
    uw = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
    u, w = uw.split([v.shape[-1], k.shape[-1]], dim=-1)
    attn = (q @ k.transpose(-1, -2)) * decay
    last = gc[..., -1:]
    kd = k * (last - gc).exp().unsqueeze(-1)
    kdt = kd.transpose(-1, -2)
    eye = torch.eye(k.shape[-1], dtype=k.dtype, device=k.device)
    m = last.exp().unsqueeze(-1) * eye - kdt @ w
    b = kdt @ u
    q_eff = q * gc.exp().unsqueeze(-1) - attn @ w
    return m, b, attn @ u, q_eff


@torch.compiler.disable  # eager under torch.compile (a graph break): AOT autograd's backward graph of the
# chunked rule fails with "view size is not compatible" (torch 2.13); the projections, conv and norms around it
# still compile
def chunk_gated_delta_rule(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, g: torch.Tensor,
                           beta: torch.Tensor, chunk_size: int = 64, initial_state: Optional[torch.Tensor] = None,
                           output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False
                           ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The gated delta rule over ``[B, S, Hk, Dk]`` queries/keys, ``[B, S, Hv, Dv]`` values, ``[B, S, Hv]``
    log-decays ``g`` (<= 0) and ``beta``; ``initial_state [B, Hv, Dk, Dv]`` (or a zero-argument callable returning it,
    called after the chunk-parallel work, right before the state scan). Returns (output ``[B, S, Hv, Dv]``
    in the query dtype, the final fp32 state or None) — transformers' ``torch_chunk_gated_delta_rule`` contract.
    The rule computes in fp32 also under ``torch.autocast`` (the state is fp32 by contract; autocast's bf16
    matmuls would mix dtypes between the scan's forward and its backward)."""
    with torch.autocast(device_type=query.device.type, enabled=False):
        return _chunk_rule(query, key, value, g, beta, chunk_size, initial_state, output_final_state,
                           use_qk_l2norm_in_kernel)


def _chunk_rule(query, key, value, g, beta, chunk_size, initial_state, output_final_state,  # noqa
                use_qk_l2norm_in_kernel):  # pylint: disable=too-many-arguments,too-many-positional-arguments
    """:func:`chunk_gated_delta_rule` outside autocast."""
    dtype = query.dtype
    bsz, seq = key.shape[0], key.shape[1]
    q, k, v, g, beta = _prepare(query, key, value, g, beta, use_qk_l2norm_in_kernel)
    heads, dk, dv = v.shape[1], k.shape[-1], v.shape[-1]
    pad = (-seq) % chunk_size
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    n = (seq + pad) // chunk_size
    q, k, v = (x.reshape(bsz, heads, n, chunk_size, x.shape[-1]) for x in (q, k, v))
    g, beta = (x.reshape(bsz, heads, n, chunk_size) for x in (g, beta))
    m, b, intra, q_eff = _chunk_terms(q, k, v, g, beta, chunk_size)
    if callable(initial_state):  # e.g. context parallelism receiving the previous rank's state: wait only now
        initial_state = initial_state()
    s0 = (initial_state.float().reshape(bsz * heads, dk, dv) if initial_state is not None
          else q.new_zeros(bsz * heads, dk, dv))
    states, final = StateScan.apply(m.reshape(bsz * heads, n, dk, dk), b.reshape(bsz * heads, n, dk, dv), s0)
    out = intra + q_eff @ states.view(bsz, heads, n, dk, dv)
    out = out.reshape(bsz, heads, n * chunk_size, dv)[:, :, :seq].transpose(1, 2).to(dtype).contiguous()
    return out, (final.view(bsz, heads, dk, dv) if output_final_state else None)


def recurrent_gated_delta_rule(query, key, value, g, beta, initial_state=None, output_final_state=False,
                               use_qk_l2norm_in_kernel=False):
    """The token-by-token recurrence (the definition; slow): same contract as :func:`chunk_gated_delta_rule`."""
    dtype = query.dtype
    q, k, v, g, beta = _prepare(query, key, value, g, beta, use_qk_l2norm_in_kernel)
    bsz, heads, seq = v.shape[0], v.shape[1], v.shape[2]
    s = (initial_state.float() if initial_state is not None
         else v.new_zeros(bsz, heads, k.shape[-1], v.shape[-1]))
    outs = []
    for t in range(seq):
        s = s * g[:, :, t].exp()[..., None, None]
        delta = (v[:, :, t] - (s * k[:, :, t].unsqueeze(-1)).sum(-2)) * beta[:, :, t].unsqueeze(-1)
        s = s + k[:, :, t].unsqueeze(-1) * delta.unsqueeze(-2)
        outs.append((s * q[:, :, t].unsqueeze(-1)).sum(-2))
    out = torch.stack(outs, dim=2).transpose(1, 2).to(dtype).contiguous()
    return out, (s if output_final_state else None)
