# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Attention and rotary position embedding.

``scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0, is_causal=False, ...)`` with
``q: [B, H, Lq, E]``, ``k: [B, Hk, Lk, E]``, ``v: [B, Hk, Lk, Ev]``. Shardable per mesh dim: the
batch dim, the head dim (q and k/v together; with grouped-query attention the head counts must
stay divisible by the mesh dim so groups stay aligned) and — only without a causal mask — the
query length. Everything else (key length, head size) is replicated; Partial inputs are reduced.

``hyper_parallel.kernels.apply_rotary_emb(x, cos, sin)`` is element-wise over broadcast positions
except the rotated last dim, which must be replicated (it pairs the two halves of the head dim).
"""
from __future__ import annotations

from typing import List

from hyper_parallel.core.placement import Partial, Placement, Replicate, Shard
from hyper_parallel.core.ops.rules.elementwise import ElementwiseRule
from hyper_parallel.core.ops.rule import Decision, OpCall, OpRule


class SdpaRule(OpRule):
    """``F.scaled_dot_product_attention``."""

    def infer(self, call: OpCall) -> Decision:
        q, v = call.tensors[0], call.tensors[2]
        if q.ndim < 2:
            raise call.fail(f"query must have at least 2 dims (length, features), got {q.ndim}")
        causal = bool(call.arg(5, "is_causal", False))
        dropout = float(call.arg(4, "dropout_p", 0.0) or 0.0)
        nd = q.ndim
        out_shape = tuple(q.shape[:-1]) + (v.shape[-1],)
        need: List[List[Placement]] = [[Replicate()] * call.mesh_ndim for _ in call.tensors]
        out: List[Placement] = []
        for d in range(call.mesh_ndim):
            # in-kernel dropout draws from each rank's torch generator: only a replicated call gives
            # the single-process mask (use hyper_parallel's placement-invariant dropout to shard it)
            out.append(Replicate() if dropout > 0 else self._mesh_dim(call, d, nd, causal, need))
        return Decision(inputs=[tuple(n) for n in need], outputs=(tuple(out), out_shape))

    def _shardable(self, call: OpCall, dim: int, d: int, nd: int, causal: bool) -> bool:
        q, k = call.tensors[0], call.tensors[1]
        n = call.mesh_shape[d]
        if dim == nd - 2:
            return not causal and len(call.tensors) == 3  # query length, no mask to slice
        if dim == nd - 1:
            return False
        if dim == nd - 3 and q.shape[dim] != k.shape[dim]:  # grouped-query heads
            return q.shape[dim] % n == 0 and k.shape[dim] % n == 0
        return True

    @staticmethod
    def _pick(call: OpCall, d: int, nd: int) -> Placement:
        """q's placement on mesh dim d, else a batch/head shard of k or v."""
        q = call.tensors[0]
        p = q.placements[d] if q.is_dtensor else Replicate()
        for t in call.tensors[:3]:
            cur = t.placements[d] if t.is_dtensor else Replicate()
            if isinstance(cur, Shard) and not isinstance(p, Shard) and cur.dim < nd - 2:
                p = cur
        return p

    @staticmethod
    def _input_need(t, i: int, p: Shard, nd: int, q_shape) -> Placement:
        if i >= 3 or (i > 0 and p.dim < nd - 3):  # masks, and the batch dims of k / v
            own = p.dim - (nd - t.ndim)
            full = 0 <= own < t.ndim and t.shape[own] == q_shape[p.dim]
            return Shard(own) if full else Replicate()  # a broadcast (size-1) dim stays whole
        if p.dim == nd - 2:
            return p if i == 0 else Replicate()
        return p

    def _mesh_dim(self, call: OpCall, d: int, nd: int, causal: bool, need) -> Placement:
        p = self._pick(call, d, nd)
        if not isinstance(p, Shard) or not self._shardable(call, p.dim, d, nd, causal):
            return Replicate()
        q_shape = call.tensors[0].shape
        for i, t in enumerate(call.tensors):
            need[i][d] = self._input_need(t, i, p, nd, q_shape)
        return p


class RotaryRule(ElementwiseRule):
    """Element-wise with the last (rotated) dim kept whole."""

    def infer(self, call: OpCall) -> Decision:
        dec = super().infer(call)
        out_pl, shape = dec.outputs
        last = len(shape) - 1
        if any(isinstance(p, Shard) and p.dim == last for p in out_pl) or \
                any(isinstance(p, Partial) for p in out_pl):
            fixed = tuple(Replicate() if (isinstance(p, Shard) and p.dim == last) or isinstance(p, Partial) else p
                          for p in out_pl)
            sub = [tuple(fixed_in(t, fixed, shape)) for t in call.tensors]
            return Decision(inputs=sub, outputs=(fixed, shape))
        return dec


def fixed_in(t, out_pl, out_shape):
    """Input placements following output placements (broadcast dims replicated)."""
    res = []
    for p in out_pl:
        if isinstance(p, Shard):
            k = p.dim - (len(out_shape) - t.ndim)
            res.append(Shard(k) if 0 <= k < t.ndim and t.shape[k] == out_shape[p.dim] else Replicate())
        else:
            res.append(Replicate())
    return res
