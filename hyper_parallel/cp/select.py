# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``method="auto"``: pick ring, all-gather or all-to-all from the sizes (pure Python).

The rule, in order:

1. ``cp == 1``: ``allgather`` (no communication at all).
2. All-to-all (Ulysses) when it is possible (query heads divisible by ``cp``, K/V heads splittable
   by repetition) and sends no more bytes per rank than the ring (forward + backward, the
   formulas of :mod:`hyper_parallel.cp.cost`, gradients in the input dtype): Ulysses moves
   ``(c-1)/c`` of its q, k, v, out shards each way, the ring ``c-1`` K/V blocks forward and
   ``2c-1`` backward. For MHA all-to-all always wins when possible; with 4 query heads per K/V
   head the ring wins at ``c = 2`` and all-to-all from ``c = 3``.
3. Ring when each rank holds at least ``ring_min_chunk`` tokens (default 2048): the ring keeps
   memory at ``O(S/c)`` and its step compute, growing as ``(S/c)^2``, can hide the transfer.
4. Otherwise all-gather: short shards are latency-bound, one collective beats ``c-1`` ring steps,
   and the gathered K/V (``2*S*Hkv*D`` elements) is small.
"""
from __future__ import annotations

from hyper_parallel.cp.cost import alltoall_bytes, ring_bytes, ulysses_kv_repeat

__all__ = ["select_method", "METHODS", "DEFAULT_RING_MIN_CHUNK"]

METHODS = ("ring", "allgather", "alltoall")
DEFAULT_RING_MIN_CHUNK = 2048


def _alltoall_possible(heads: int, kv_heads: int, cp: int) -> bool:
    try:
        ulysses_kv_repeat(heads, kv_heads, cp)
    except ValueError:
        return False
    return True


def select_method(seq_len: int, cp: int, heads: int, kv_heads: int, head_dim: int, itemsize: int = 2, *,
                  batch: int = 1, ring_min_chunk: int = DEFAULT_RING_MIN_CHUNK) -> str:
    """The method ``"auto"`` resolves to for these sizes (see the module docstring)."""
    for name, value in (("seq_len", seq_len), ("cp", cp), ("heads", heads), ("kv_heads", kv_heads),
                        ("head_dim", head_dim), ("itemsize", itemsize)):
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"select_method({name}): expected a positive int, got {value!r}")
    if cp == 1:
        return "allgather"
    if _alltoall_possible(heads, kv_heads, cp):
        a2a = alltoall_bytes(seq_len, cp, heads, kv_heads, head_dim, itemsize, batch=batch)
        ring = ring_bytes(seq_len, cp, kv_heads, head_dim, itemsize, batch=batch, grad_itemsize=itemsize)
        if a2a["fwd"] + a2a["bwd"] <= ring["fwd"] + ring["bwd"]:
            return "alltoall"
    if seq_len // cp >= ring_min_chunk:
        return "ring"
    return "allgather"
