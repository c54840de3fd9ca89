# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Log-sum-exp merging of partial attention results (backend-free array math).

Attention of a query row over a key set ``K`` is ``out = sum_j softmax(s)_j v_j`` with
``lse = log sum_j exp(s_j)``. For two disjoint key sets ``A`` and ``B``::

    lse   = logaddexp(lse_A, lse_B)
    out   = exp(lse_A - lse) * out_A + exp(lse_B - lse) * out_B

so ring / blockwise attention computes one block at a time and folds it in. A row that sees no key
yet has ``lse = -inf`` and ``out = 0``; the merge keeps that state until a block brings keys (the
weights are taken against a zero stand-in so ``-inf - -inf`` never appears).

Backward needs no merge: with the *final* ``out`` and ``lse`` a block's gradients are
``P = exp(s - lse)``, ``dV = P^T dO``, ``dS = P * (dO V^T - rowsum(dO * out))``, ``dQ = dS K * scale``,
``dK = dS^T Q * scale`` — exactly that block's share of the full gradient, so the per-block
gradients simply add up.

The functions take ``xp``, an array namespace with ``logaddexp``, ``exp``, ``where``, ``isneginf``,
``zeros_like`` and ``full_like`` (``torch`` and ``numpy`` both qualify); arrays broadcast as
``out[..., S, D]`` with ``lse[..., S]``.
"""
from __future__ import annotations

from typing import Any, Sequence, Tuple

__all__ = ["merge_partials", "merge_into", "merge_all", "empty_partial"]


def merge_partials(out_a: Any, lse_a: Any, out_b: Any, lse_b: Any, xp: Any) -> Tuple[Any, Any]:
    """Combine attention over two disjoint key sets; returns ``(out, lse)``."""
    lse = xp.logaddexp(lse_a, lse_b)
    safe = xp.where(xp.isneginf(lse), xp.zeros_like(lse), lse)
    w_a = xp.exp(lse_a - safe)
    w_b = xp.exp(lse_b - safe)
    return out_a * w_a[..., None] + out_b * w_b[..., None], lse


def merge_into(acc_out: Any, acc_lse: Any, out_b: Any, lse_b: Any, xp: Any) -> None:
    """:func:`merge_partials` in place: fold ``(out_b, lse_b)`` into the accumulators ``acc_out``/``acc_lse``
    (which may be views of larger buffers); allocates no full-size output."""
    lse = xp.logaddexp(acc_lse, lse_b)
    safe = xp.where(xp.isneginf(lse), xp.zeros_like(lse), lse)
    acc_out *= xp.exp(acc_lse - safe)[..., None]
    acc_out += out_b * xp.exp(lse_b - safe)[..., None]
    acc_lse[...] = lse


def empty_partial(out_like: Any, lse_like: Any, xp: Any) -> Tuple[Any, Any]:
    """The state of a row that has seen no key: ``out = 0``, ``lse = -inf``."""
    return xp.zeros_like(out_like), xp.full_like(lse_like, float("-inf"))


def merge_all(partials: Sequence[Tuple[Any, Any]], xp: Any) -> Tuple[Any, Any]:
    """Fold any number of ``(out, lse)`` partials (at least one) in order."""
    if not partials:
        raise ValueError("merge_all: expected at least one (out, lse) partial")
    out, lse = partials[0]
    for o, l in partials[1:]:
        out, lse = merge_partials(out, lse, o, l, xp)
    return out, lse
