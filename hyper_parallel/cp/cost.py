# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Byte and work formulas for context-parallel attention (pure Python).

Notation: ``S`` global sequence, ``c`` CP degree, ``B`` batch, ``H``/``Hkv`` query/key-value heads,
``D`` head dim, ``b`` bytes per element of q/k/v, ``g`` bytes per element of the gradient
accumulators (fp32 = 4 in our kernels). "Bytes per rank" is what one rank puts on the wire per
attention call (the ring all-gather / reduce-scatter / pairwise all-to-all algorithms).

* Ring (P2P): forward ``c-1`` K+V blocks of ``2*B*(S/c)*Hkv*D`` elements; backward the K+V blocks
  again (``c-1``) plus the dK+dV accumulators, which travel the whole ring back to their owner
  (``c`` sends, in ``g`` bytes).
* All-gather KV: forward one all-gather of K+V (``(c-1)`` local blocks per rank); backward
  re-gathers K+V (we do not keep the gathered copy: memory stays ``O(S/c)`` between forward and
  backward) and reduce-scatters dK+dV (``(c-1)`` blocks of ``g`` bytes).
* All-to-all (Ulysses): four all-to-alls forward (q, k, v in; out back) and four backward (grad_out in;
  dq, dk, dv back); each sends ``(c-1)/c`` of its local tensor. K/V heads are replicated up to a
  multiple of ``c`` when ``Hkv`` is not one (see :func:`ulysses_kv_repeat`).
"""
from __future__ import annotations

import math
from typing import Dict, List

from hyper_parallel.cp.blocks import pair_count, plan_block
from hyper_parallel.cp.load_balance import SeqLayout

__all__ = ["ring_bytes", "allgather_bytes", "alltoall_bytes", "method_bytes", "ulysses_kv_repeat",
           "attention_work", "ring_overlap_min_chunk"]


def _kv_block(seq_len: int, cp: int, kv_heads: int, head_dim: int, batch: int) -> int:
    return 2 * batch * (seq_len // cp) * kv_heads * head_dim


def ring_bytes(seq_len: int, cp: int, kv_heads: int, head_dim: int, itemsize: int, *, batch: int = 1,
               grad_itemsize: int = 4) -> Dict[str, int]:
    """Bytes one rank sends per ring attention call: ``{"fwd": ..., "bwd": ...}``."""
    blk = _kv_block(seq_len, cp, kv_heads, head_dim, batch)
    if cp == 1:
        return {"fwd": 0, "bwd": 0}
    return {"fwd": (cp - 1) * blk * itemsize, "bwd": (cp - 1) * blk * itemsize + cp * blk * grad_itemsize}


def allgather_bytes(seq_len: int, cp: int, kv_heads: int, head_dim: int, itemsize: int, *, batch: int = 1,
                    grad_itemsize: int = 4) -> Dict[str, int]:
    """Bytes one rank sends per all-gather-KV attention call."""
    blk = _kv_block(seq_len, cp, kv_heads, head_dim, batch)
    return {"fwd": (cp - 1) * blk * itemsize, "bwd": (cp - 1) * blk * (itemsize + grad_itemsize)}


def ulysses_kv_repeat(heads: int, kv_heads: int, cp: int) -> int:
    """How many times each K/V head is repeated so that every rank gets whole GQA groups.

    1 when ``kv_heads % cp == 0``; otherwise the smallest ``r`` with ``(kv_heads*r) % cp == 0``
    (``r = cp / gcd(kv_heads, cp)``); it always divides the group size ``heads/kv_heads`` once ``cp``
    divides ``heads``, so every rank's query heads map onto whole (repeated) K/V heads."""
    if heads % cp:
        raise ValueError(f"alltoall (Ulysses) context parallel: {heads} query heads are not divisible by cp={cp}; "
                         "use method='ring' or 'allgather'")
    if heads % kv_heads:
        raise ValueError(f"alltoall: {heads} query heads are not a multiple of {kv_heads} key/value heads")
    return cp // math.gcd(kv_heads, cp)


def alltoall_bytes(seq_len: int, cp: int, heads: int, kv_heads: int, head_dim: int, itemsize: int, *,
                   batch: int = 1, grad_itemsize: int = 0) -> Dict[str, int]:
    """Bytes one rank sends per Ulysses call (gradients travel in the input dtype: ``grad_itemsize``
    defaults to ``itemsize``)."""
    g = grad_itemsize or itemsize
    kv_eff = kv_heads * ulysses_kv_repeat(heads, kv_heads, cp)
    local = batch * (seq_len // cp) * head_dim
    elems = local * (2 * heads + 2 * kv_eff) * (cp - 1) // cp
    return {"fwd": elems * itemsize, "bwd": elems * g}


def method_bytes(method: str, seq_len: int, cp: int, heads: int, kv_heads: int, head_dim: int, itemsize: int,
                 *, batch: int = 1) -> Dict[str, int]:
    """The formula of ``method`` (``ring``, ``allgather`` or ``alltoall``)."""
    if method == "ring":
        return ring_bytes(seq_len, cp, kv_heads, head_dim, itemsize, batch=batch)
    if method == "allgather":
        return allgather_bytes(seq_len, cp, kv_heads, head_dim, itemsize, batch=batch)
    if method == "alltoall":
        return alltoall_bytes(seq_len, cp, heads, kv_heads, head_dim, itemsize, batch=batch)
    raise ValueError(f"method: expected ring, allgather or alltoall, got {method!r}")


def attention_work(layout: SeqLayout, causal: bool) -> List[int]:
    """(query, key) pairs each rank computes in a ring over ``layout`` (its attention work)."""
    work = []
    for r in range(layout.cp):
        total = 0
        for s in range(layout.cp):
            total += pair_count(plan_block(layout.runs[r], layout.runs[s], causal))
        work.append(total)
    return work


def ring_overlap_min_chunk(flops_per_s: float, link_bytes_per_s: float, heads: int, kv_heads: int,
                           itemsize: int, causal: bool = True) -> float:
    """Smallest tokens per rank ``S/c`` for which a ring step's compute (``4*(S/c)^2*H*D`` FLOPs,
    halved when causal) covers its transfer (``2*(S/c)*Hkv*D*b`` bytes)."""
    base = flops_per_s * kv_heads * itemsize / (2.0 * heads * link_bytes_per_s)
    return 2 * base if causal else base
