# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""DeepSeek sparse attention (DSA): the one-process ops, a small attention block, and their CP versions.

DSA (DeepSeek-V3.2) puts a light *indexer* in front of attention: for query ``t`` and key ``s``
``I[t, s] = sum_j w[t, j] * relu(q_idx[t, j] . k_idx[s])`` over a few indexer heads ``j``; each query
keeps its ``topk`` best keys (causal: ``s <= t``) and attends to those only. The indexer is trained
with ``KL(p_t || softmax(I[t, selected]))``, where ``p_t`` is the main attention's distribution
over the selected keys (summed over heads, renormalised, detached).

The ops (``dsa_index_scores``, ``dsa_topk``, ``dsa_sparse_attention``, ``dsa_indexer_loss``) are
plain one-process functions; ``dsa_index_scores``, ``dsa_sparse_attention`` and ``dsa_indexer_loss``
are torch-function overridable, so under a CP mode (``context_parallel`` or a DSA style) they run
on local queries: the keys they need (indexer keys, K and V) are all-gathered along the sequence
(differentiable: the adjoint reduce-scatters the key gradients to their owners) and put back in
global order, so the selected indices are global positions. ``dsa_topk`` needs no CP version (its
rows are local, its columns already global). The async sparse-attention style posts the K and V
gathers together and computes the attention logits and softmax while V is still in flight.

We gather whole K/V rather than only the selected rows (fetching just the union of selected keys
would need a per-step index exchange; not implemented — see docs/cp.md).
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import handle_torch_function, has_torch_function

from hyper_parallel.cp._torch import comm
from hyper_parallel.cp._torch.context import CPState, register_cp_op, route

__all__ = ["dsa_index_scores", "dsa_topk", "dsa_sparse_attention", "dsa_indexer_loss", "DSAIndexer",
           "DSASparseAttention", "DSAIndexerLoss", "DSAAttention"]

_NEG_INF = float("-inf")


# ------------------------------------------------------------------------------------ one-process math
def _scores(q_idx, k_idx, weights, q_pos, causal):
    dots = torch.einsum("btjd,bsd->btjs", q_idx, k_idx).relu()
    scores = (weights.unsqueeze(-1) * dots).sum(2)
    if causal:
        k_pos = torch.arange(k_idx.shape[1], device=k_idx.device)
        scores = scores.masked_fill(k_pos.view(1, 1, -1) > q_pos.view(1, -1, 1), _NEG_INF)
    return scores


def dsa_index_scores(q_idx: torch.Tensor, k_idx: torch.Tensor, weights: torch.Tensor, causal: bool = True):
    """Indexer scores ``[B, S, Sk]`` from ``q_idx [B, S, Hi, Di]``, ``k_idx [B, Sk, Di]``, ``weights [B, S, Hi]``
    (``-inf`` for keys after the query when ``causal``)."""
    if has_torch_function((q_idx, k_idx, weights)):
        return handle_torch_function(dsa_index_scores, (q_idx, k_idx, weights), q_idx, k_idx, weights, causal)
    routed = route(dsa_index_scores)  # under CP but outside the function mode (recomputation in backward)
    if routed is not None:
        return routed(q_idx, k_idx, weights, causal)
    if q_idx.dim() != 4 or k_idx.dim() != 3 or weights.dim() != 3:
        raise ValueError(f"dsa_index_scores: expected q_idx [B, S, Hi, Di], k_idx [B, Sk, Di], weights [B, S, Hi], got "
                         f"{tuple(q_idx.shape)}, {tuple(k_idx.shape)}, {tuple(weights.shape)}")
    return _scores(q_idx, k_idx, weights, torch.arange(q_idx.shape[1], device=q_idx.device), causal)


def dsa_topk(scores: torch.Tensor, topk: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(indices, valid)`` ``[B, S, K]`` of each query's best ``K = min(topk, Sk)`` keys. Ties go to the
    lower key index (a stable sort), so the choice does not depend on how rows are sharded;
    ``valid`` is False where fewer than ``K`` keys are visible."""
    if not isinstance(topk, int) or topk <= 0:
        raise ValueError(f"dsa_topk(topk): expected a positive int, got {topk!r}")
    k = min(topk, scores.shape[-1])
    vals, idx = torch.sort(scores.detach(), dim=-1, descending=True, stable=True)
    return idx[..., :k], vals[..., :k] > _NEG_INF


def _select(x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Rows ``indices [B, S, K]`` of ``x [B, Hk, Sk, D]`` -> ``[B, Hk, S, K, D]``."""
    b, s, k = indices.shape
    flat = indices.reshape(b, 1, s * k, 1).expand(b, x.shape[1], s * k, x.shape[-1])
    return x.gather(2, flat).view(b, x.shape[1], s, k, x.shape[-1])


def _logits(q, ksel, valid, scale):
    b, h, s, d = q.shape
    kv_heads = ksel.shape[1]
    qg = q.view(b, kv_heads, h // kv_heads, s, d)
    logits = torch.einsum("bhgsd,bhskd->bhgsk", qg, ksel) * scale
    return logits.masked_fill(~valid.view(b, 1, 1, s, -1), _NEG_INF)


def _attend(logits, vsel, shape):
    p = torch.softmax(logits, -1).nan_to_num(0.0)  # a query with no valid key attends to nothing
    return torch.einsum("bhgsk,bhskd->bhgsd", p, vsel).reshape(shape)


def _check_sparse(q, k, v, indices, valid) -> None:
    if q.dim() != 4 or k.shape != v.shape or k.dim() != 4 or q.shape[1] % k.shape[1]:
        raise ValueError(f"dsa_sparse_attention: expected q [B, H, S, D] and k, v [B, Hk, Sk, D] with H % Hk == 0, got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if indices.shape != valid.shape or indices.shape[:2] != (q.shape[0], q.shape[2]):
        raise ValueError(f"dsa_sparse_attention: indices/valid must be [B, S, K] for q {tuple(q.shape)}, got "
                         f"{tuple(indices.shape)}, {tuple(valid.shape)}")


def dsa_sparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, indices: torch.Tensor,
                         valid: torch.Tensor, scale: Optional[float] = None) -> torch.Tensor:
    """Each query ``q [B, H, S, D]`` attends to its selected keys ``indices [B, S, K]`` (where ``valid``) of
    ``k``/``v [B, Hk, Sk, D]`` (grouped-query heads allowed); returns ``[B, H, S, D]``."""
    if has_torch_function((q, k, v)):
        return handle_torch_function(dsa_sparse_attention, (q, k, v), q, k, v, indices, valid, scale)
    routed = route(dsa_sparse_attention)
    if routed is not None:
        return routed(q, k, v, indices, valid, scale)
    _check_sparse(q, k, v, indices, valid)
    sc = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    return _attend(_logits(q, _select(k, indices), valid, sc), _select(v, indices), q.shape)


def _loss(q, ksel, scores, indices, valid, scale):
    with torch.no_grad():
        p = torch.softmax(_logits(q, ksel, valid, scale), -1).nan_to_num(0.0)
        p = p.sum((1, 2))
        p = p / p.sum(-1, keepdim=True).clamp_min(1e-30)
    sel = scores.gather(-1, indices).masked_fill(~valid, _NEG_INF)
    logq = torch.log_softmax(sel, -1)
    terms = torch.where(valid & (p > 0), p * (p.clamp_min(1e-30).log() - logq), torch.zeros_like(p))
    return terms.sum(-1)


def dsa_indexer_loss(q: torch.Tensor, k: torch.Tensor, scores: torch.Tensor, indices: torch.Tensor,
                     valid: torch.Tensor, scale: Optional[float] = None) -> torch.Tensor:
    """Per-query indexer loss ``[B, S]``: ``KL(p || softmax(scores[selected]))`` with ``p`` the main attention
    distribution of ``q`` over the selected keys of ``k`` (heads summed, renormalised; no gradient)."""
    if has_torch_function((q, k, scores)):
        return handle_torch_function(dsa_indexer_loss, (q, k, scores), q, k, scores, indices, valid, scale)
    routed = route(dsa_indexer_loss)
    if routed is not None:
        return routed(q, k, scores, indices, valid, scale)
    sc = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    return _loss(q, _select(k, indices), scores, indices, valid, sc)


# ------------------------------------------------------------------------------------ a DSA attention block
class DSAIndexer(nn.Module):
    """Lightning indexer: scores and the top-k selection."""

    def __init__(self, dim: int, index_heads: int, index_dim: int, topk: int) -> None:
        super().__init__()
        self.index_heads, self.index_dim, self.topk = index_heads, index_dim, topk
        self.wq = nn.Linear(dim, index_heads * index_dim, bias=False)
        self.wk = nn.Linear(dim, index_dim, bias=False)
        self.ww = nn.Linear(dim, index_heads, bias=False)

    def forward(self, x: torch.Tensor):
        """``(scores [B, S, S], indices, valid)`` for hidden states ``x [B, S, dim]``."""
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.index_heads, self.index_dim)
        w = self.ww(x) * self.index_heads ** -0.5
        scores = dsa_index_scores(q, self.wk(x), w, True)
        indices, valid = dsa_topk(scores, self.topk)
        return scores, indices, valid


class DSASparseAttention(nn.Module):
    """Sparse attention over the selected keys (no parameters: a hook point for the CP styles)."""

    def forward(self, q, k, v, indices, valid):  # pylint: disable=missing-function-docstring
        return dsa_sparse_attention(q, k, v, indices, valid)


class DSAIndexerLoss(nn.Module):
    """Per-token indexer loss (no parameters: a hook point for the CP styles)."""

    def forward(self, q, k, scores, indices, valid):  # pylint: disable=missing-function-docstring
        return dsa_indexer_loss(q, k, scores, indices, valid)


class DSAAttention(nn.Module):
    """Self-attention with a DSA indexer; ``forward(x)`` returns ``(out [B, S, dim], indexer_loss [B, S])``."""

    def __init__(self, dim: int = 32, heads: int = 4, kv_heads: int = 2, index_heads: int = 2, index_dim: int = 8,
                 topk: int = 8) -> None:
        super().__init__()
        if dim % heads or heads % kv_heads:
            raise ValueError(f"DSAAttention: dim {dim} must divide by heads {heads}, heads by kv_heads {kv_heads}")
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)
        self.indexer = DSAIndexer(dim, index_heads, index_dim, topk)
        self.sparse = DSASparseAttention()
        self.indexer_loss = DSAIndexerLoss()

    def forward(self, x: torch.Tensor):
        """Sparse attention output and the per-token indexer loss."""
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        scores, indices, valid = self.indexer(x)
        out = self.sparse(q, k, v, indices, valid)
        loss = self.indexer_loss(q.detach(), k.detach(), scores, indices, valid)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1)), loss


# ------------------------------------------------------------------------------------ CP versions
class _GatherSeq(torch.autograd.Function):
    """All-gather along ``dim`` into global order (posted async; :class:`_Wait` completes it).
    Adjoint: back to gathered order and reduce-scatter (each rank's queries add to every key's gradient)."""

    @staticmethod
    def forward(ctx, x, dim, state, layout, holder):  # pylint: disable=arguments-differ
        """Post the gather; the result is valid only after ``_Wait``."""
        ctx.args = (dim, state, layout, x.shape)
        flat = x.movedim(dim, 0).contiguous().reshape(-1)
        holder.append(comm.all_gather_flat(flat, state.group, "dsa", "fwd", async_op=True))
        moved = x.movedim(dim, 0).shape
        full = (state.size * moved[0],) + tuple(moved[1:])
        return x.new_zeros(1).expand(full).movedim(0, dim)  # shape carrier only: no memory

    @staticmethod
    def backward(ctx, grad):  # pylint: disable=arguments-differ
        """Reduce-scatter the key gradients to their owners."""
        dim, state, layout, shape = ctx.args
        g = grad.movedim(dim, 0).index_select(0, torch.tensor(layout.gather_order(), device=grad.device))
        mine = comm.reduce_scatter_flat(g.contiguous().reshape(-1), state.group, "dsa", "bwd")
        return mine.view((shape[dim],) + tuple(g.shape[1:])).movedim(0, dim), None, None, None, None


class _Wait(torch.autograd.Function):
    """Wait for a posted gather and return it in global order. Adjoint: the identity."""

    @staticmethod
    def forward(ctx, placeholder, dim, layout, holder):  # pylint: disable=arguments-differ,unused-argument
        """Block on the gather, reorder."""
        flat = holder.pop().wait()
        moved = placeholder.movedim(dim, 0)
        full = flat.view(moved.shape)
        idx = torch.tensor(layout.restore_order(), device=flat.device)
        return full.index_select(0, idx).movedim(0, dim).contiguous()

    @staticmethod
    def backward(ctx, grad):  # pylint: disable=arguments-differ,unused-argument
        """Identity."""
        return grad, None, None, None


class _Gathered:
    """A posted sequence gather; :meth:`wait` gives the differentiable global tensor."""

    def __init__(self, x: torch.Tensor, dim: int, state: CPState, layout) -> None:
        self.dim, self.layout, self.holder = dim % x.dim(), layout, []
        self.placeholder = _GatherSeq.apply(x, self.dim, state, layout, self.holder)

    def wait(self) -> torch.Tensor:
        """The gathered tensor in global order."""
        return _Wait.apply(self.placeholder, self.dim, self.layout, self.holder)


def _gather(x, dim, state, layout):
    return _Gathered(x, dim, state, layout).wait()


def _positions(state: CPState, layout, device) -> torch.Tensor:
    return torch.tensor(layout.positions(state.rank), device=device)


@register_cp_op(dsa_index_scores, "dsa_index_scores")
def _cp_index_scores(state: CPState, q_idx, k_idx, weights, causal=True):
    layout = state.local_layout(q_idx.shape[1], f"dsa_index_scores q_idx {tuple(q_idx.shape)}", q_idx.device)
    k_all = _gather(k_idx, 1, state, layout)
    return _scores(q_idx, k_all, weights, _positions(state, layout, q_idx.device), causal)


@register_cp_op(dsa_sparse_attention, "dsa_sparse_attention")
def _cp_sparse_attention(state: CPState, q, k, v, indices, valid, scale=None):
    layout = state.local_layout(q.shape[2], f"dsa_sparse_attention q {tuple(q.shape)}", q.device)
    pending_k = _Gathered(k, 2, state, layout)
    pending_v = _Gathered(v, 2, state, layout)
    k_all = pending_k.wait()
    v_all = None if state.async_ else pending_v.wait()
    _check_sparse(q, k_all, k_all, indices, valid)
    sc = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    logits = _logits(q, _select(k_all, indices), valid, sc)  # async: computed while V is still in flight
    if v_all is None:
        v_all = pending_v.wait()
    return _attend(logits, _select(v_all, indices), q.shape)


@register_cp_op(dsa_indexer_loss, "dsa_indexer_loss")
def _cp_indexer_loss(state: CPState, q, k, scores, indices, valid, scale=None):
    layout = state.local_layout(q.shape[2], f"dsa_indexer_loss q {tuple(q.shape)}", q.device)
    k_all = _gather(k, 2, state, layout)
    sc = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    return _loss(q, _select(k_all, indices), scores, indices, valid, sc)


def dense_sparse_attention_reference(q, k, v, indices, valid, scale=None):
    """The oracle: dense SDPA with a boolean mask that keeps exactly the selected keys."""
    b, _, s, _ = q.shape
    keep = torch.zeros(b, s, k.shape[2], dtype=torch.bool, device=q.device)
    keep.scatter_(-1, indices, valid)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep.unsqueeze(1), scale=scale,
                                          enable_gqa=k.shape[1] != q.shape[1])
